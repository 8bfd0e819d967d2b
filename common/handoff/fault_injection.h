// Fault injection into KV hand-offs, for the chaos suite (tests/chaos/).
//
// Off unless the environment variable PDSERVE_FAULT_HANDOFF is set in the
// sending (prefill) process, e.g.
//   PDSERVE_FAULT_HANDOFF="rate=0.1,seed=7"
//   PDSERVE_FAULT_HANDOFF="rate=1,seed=1,kinds=corrupt+truncate,delay_ms=200"
// Keys: rate (fraction of hand-offs that get one fault, in [0, 1]), seed
// (the PRNG seed; the same seed gives the same sequence of faults per
// process), kinds (a '+'-separated subset of drop, corrupt, duplicate,
// reorder, truncate, delay; default all), delay_ms (for delay; default 200).
// A malformed value is fatal at startup (exit 2). When fault injection is
// on, the process says so once on stderr at startup, and each injected fault
// is logged on stderr as "kv hand-off fault injection: ...".
//
// Unset, HandoffFaultPlan::ForNextHandoff() returns nullptr after reading a
// pointer set at startup, and the writer does exactly what it did before.
//
// Where it applies: the hook is in GrpcSendSession::WriteLoop
// (grpc_kv_sender.cc), the writer thread shared by the gRPC transport and
// the NCCL transport's gRPC control stream (PushKv). Under NCCL, the faults
// act on the control stream's chunks: a dropped or truncated data chunk is
// never announced, so its NCCL send does not happen; a corrupted payload is
// corrupted before it is moved to NCCL; a duplicated data chunk is
// announced and sent twice (the receiver rejects the second announcement,
// and the unmatched NCCL send then fails on the sender's stall timeout,
// which drops the communicator). The in-process sender (pdserve-local with
// one process) has no hook.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

enum class HandoffFault { kDrop, kCorrupt, kDuplicate, kReorder, kTruncate, kDelay };

const char* HandoffFaultName(HandoffFault fault);

struct HandoffFaultConfig {
  double rate = 0;
  uint64_t seed = 0;
  std::vector<HandoffFault> kinds;  // never empty once parsed
  int64_t delay_ms = 200;
};

// Parses the value of PDSERVE_FAULT_HANDOFF.
absl::StatusOr<HandoffFaultConfig> ParseHandoffFaultSpec(std::string_view spec);

// The fault of one hand-off: one kind, applied once, at one data chunk (the
// first, second or third of the hand-off; at the commit when the hand-off
// has fewer). Used by one writer thread.
class HandoffFaultPlan {
 public:
  using WriteFn = absl::FunctionRef<bool(internal::v1::KvChunk&)>;

  // nullptr when fault injection is off or this hand-off is spared.
  static std::unique_ptr<HandoffFaultPlan> ForNextHandoff();

  HandoffFaultPlan(HandoffFault kind, int target_data_chunk, int64_t delay_ms, uint64_t handoff_number);

  // Writes `chunk` through `write`, with the fault applied when its turn
  // comes. Returns what `write` returned (true for a chunk held back or
  // dropped). `cancel` ends a delay early.
  bool Write(internal::v1::KvChunk& chunk, WriteFn write, const std::atomic<bool>* cancel);
  // Before the end of the stream: writes a chunk still held back.
  bool Flush(WriteFn write);

 private:
  void Log(const internal::v1::KvChunk& chunk) const;

  const HandoffFault kind_;
  const int target_;
  const int64_t delay_ms_;
  const uint64_t number_;
  std::string request_id_;  // from the header, for the log
  int data_seen_ = 0;
  bool applied_ = false;
  bool truncated_ = false;
  std::optional<internal::v1::KvChunk> held_;
};

}  // namespace pdserve
