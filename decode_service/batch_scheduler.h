// BatchScheduler: the decode worker's engine loop (continuous batching).
//
// A request's life here:
//   Admit()        the router's Decode call reserves the KV bytes of
//                  prompt_len + max_new_tokens positions, or gets
//                  ResourceExhausted so that the router tries another worker;
//   hand-off       a KvReceiveSession (this class is the KvReceiver) checks
//                  every chunk, then imports the cache into the reservation;
//   or local       a short prompt the router sends with its ids (conditional
//     prefill      local prefill): the loop prefills it between two decode
//                  steps and samples the first token itself, no hand-off;
//   running        every step is ONE batched forward over all running
//                  sequences; new ones join between steps, finished ones
//                  leave;
//   gone           finished, cancelled, deadline, broken stream, or a failed
//                  hand-off: the KV and the reservation are freed at once
//                  (or after the step in flight), and so are the buffers of
//                  a hand-off still arriving (its stream then fails).
//
// Cancellation is by RequestHandle, the admission itself, never by id: a
// stream can only end its own request, not whichever request holds the
// same id later (a refused duplicate, a late cleanup).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/engine.h"
#include "common/handoff/kv_transfer.h"
#include "common/net/metrics.h"

namespace pdserve {

struct BatchSchedulerOptions {
  // KV bytes all live sequences may reserve together.
  int64_t kv_budget_bytes = int64_t{4} << 30;
  // Sequences per decode step; more wait for a free slot.
  int max_batch = 64;
  // How long an admitted request may wait for the first chunk of its
  // hand-off (the header, sent when its prefill starts), and how long a
  // hand-off may then go without a chunk. Progress restarts the clock, so
  // a long prefill is not cut off; a stalled or dead sender is.
  absl::Duration handoff_timeout = absl::Seconds(60);
  // Longest prompt a direct local prefill may carry: it runs between two
  // decode steps, so every running stream waits for it.
  int64_t local_prefill_max_tokens = 2048;
  // The model's fingerprint, checked against every hand-off header.
  std::string model_fingerprint;
  // Where to report metrics; nullptr = nowhere. Must outlive the scheduler.
  MetricsRegistry* metrics = nullptr;
};

// Why a sequence ended; kNone on every batch of tokens but the last. The
// Decode stream maps it to the wire's FinishReason.
enum class FinishReason { kNone = 0, kLength = 1, kEos = 2 };

// The scheduler's load, for the router's GetLoad and the metrics.
struct SchedulerLoad {
  int64_t active_sequences = 0;  // admitted, not yet finished
  int64_t queued_requests = 0;   // admitted, not yet running
  int64_t kv_bytes_used = 0;     // reserved
  int64_t kv_bytes_free = 0;     // still admissible under the budget
  int64_t kv_bytes_allocated = 0;
  int64_t last_batch_size = 0;
  int64_t max_batch_size = 0;
  int64_t decode_steps = 0;
};

// KV reserved over the budget, clamped to [0, 1]; 0 without a budget.
double KvUsageRatio(const SchedulerLoad& load, int64_t kv_budget_bytes);

// Where a sequence's tokens go. Called on the scheduler thread: must not
// block (the Decode reactor queues).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // New tokens; `finish` is set on the last call.
  virtual void OnTokens(const std::vector<uint32_t>& ids, FinishReason finish) = 0;
  // The request failed (hand-off rejected, engine error, timeout).
  virtual void OnError(const absl::Status& status) = 0;
};

struct AdmitRequest {
  std::string request_id;
  int64_t prompt_len = 0;
  int64_t max_new_tokens = 0;
  bool ignore_eos = false;
  // Conditional local prefill: the prompt (prompt_len ids) and the sampling
  // of the whole generation. Empty = the K/V comes through a hand-off.
  std::vector<int64_t> local_prompt;
  SamplingParams sampling;
};

// One admission: what Admit returns and Cancel takes. The serial is unique
// for the scheduler's life, so a handle never names a later request that
// reuses the id.
struct RequestHandle {
  std::string request_id;
  uint64_t serial = 0;
};

class BatchScheduler final : public KvReceiver {
 public:
  BatchScheduler(const Engine* engine, BatchSchedulerOptions options);
  ~BatchScheduler() override;  // Shutdown()

  // Starts the decode loop thread.
  void Start();
  // Stops taking work, fails live requests with Unavailable and joins.
  void Shutdown();

  // Reserves the request's KV (and queues a local prefill). InvalidArgument
  // for impossible sizes or a local prompt of the wrong length or with ids
  // outside the vocabulary, AlreadyExists for a live request id,
  // ResourceExhausted when the budget cannot hold it now, OutOfRange when
  // it could not even empty (NeverFits: the bytes, the budget, the flag;
  // the router then tries a worker with a larger budget, or refuses the
  // request before any prefill), Unavailable when shutting down. A local prompt longer than local_prefill_max_tokens is
  // InvalidArgument.
  absl::StatusOr<RequestHandle> Admit(const AdmitRequest& request, std::shared_ptr<TokenSink> sink);

  // Drops the admitted request `handle` wherever it is and frees its KV (a
  // running one after the step in flight). No-op when it already ended, or
  // when its id now belongs to another admission.
  void Cancel(const RequestHandle& handle);

  // KvReceiver: sessions accept hand-offs only for admitted requests, of
  // this model, within the KV budget.
  absl::StatusOr<std::unique_ptr<KvReceiveSession>> BeginReceive() override;
  const ModelConfig& receive_config() const override;
  KvReceiveLimits receive_limits() const override;

  // Load for the router (and the tests' leak checks).
  SchedulerLoad Load() const;
  const std::string& model_fingerprint() const { return options_.model_fingerprint; }

  // Bytes a request of this size reserves.
  int64_t ReservationBytes(int64_t prompt_len, int64_t max_new_tokens) const;

 private:
  class ReceiveSession;
  struct Entry;

  // OutOfRange for a request of `needed_bytes` that even an empty budget
  // cannot hold: the numbers, --kv-budget-mb and what would fit it.
  absl::Status NeverFits(const AdmitRequest& request, int64_t needed_bytes) const;

  // The session's hooks into the table (under mu_).
  absl::Status AttachReceiver(const std::string& request_id, int64_t prompt_len, int64_t total_bytes,
                              std::shared_ptr<KvReceiveBuffers> buffers, std::shared_ptr<Entry>* out);
  void NoteProgress(const std::shared_ptr<Entry>& entry);
  void CompleteHandoff(const std::shared_ptr<Entry>& entry, KvHandoffState state, uint32_t first_token);
  // Emits the first token and lets the sequence join the steps (or ends it).
  void StartRunning(const std::shared_ptr<Entry>& entry, std::unique_ptr<Sequence> seq, uint32_t first_token);
  // Runs one queued local prefill on the loop thread; false when none.
  bool PrefillOneLocally();
  void FailRequest(const std::shared_ptr<Entry>& entry, const absl::Status& status);

  void Loop();
  // One batched step over `batch`; returns false on an engine error (each
  // sequence is then failed).
  void Step(const std::vector<std::shared_ptr<Entry>>& batch);
  void ExpireStale();
  // Why `e`'s hand-off timed out: UNAVAILABLE marked as the prefill side's
  // failure, and as never begun when no header came.
  absl::Status StaleHandoffLocked(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes an entry and its reservation, and frees the buffers of a
  // hand-off still arriving for it (mu_ held).
  void RemoveLocked(const std::shared_ptr<Entry>& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Series in options_.metrics (or in a private registry when none).
  struct Metrics {
    Counter* finished[3];  // by FinishReason
    Counter* failed;
    Counter* cancelled;
    Counter* admission_rejections;
    Counter* handoff_rejections;
    Counter* received_bytes;
    Counter* generated_tokens;
    Counter* local_prefills;
    Counter* local_prefill_tokens;
    Counter* steps;
    Histogram* batch_size;
    Histogram* step_seconds;
  };
  void InitMetrics();

  const Engine* engine_;
  const BatchSchedulerOptions options_;
  MetricsRegistry own_metrics_;
  Metrics m_{};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Entry>> running_ ABSL_GUARDED_BY(mu_);  // admission order
  std::deque<std::shared_ptr<Entry>> local_queue_ ABSL_GUARDED_BY(mu_);  // local prefills, FIFO
  int64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocated_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rotate_ ABSL_GUARDED_BY(mu_) = 0;  // fairness when running > max_batch
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t last_batch_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t max_batch_seen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace pdserve
