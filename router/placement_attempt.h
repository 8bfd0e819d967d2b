// RouterService::PlacementAttempt: one try at placing a request on a
// decode worker (and a prefill worker), then relaying its tokens. A
// ClientReadReactor on the decode worker's Decode stream; the prefill is a
// callback unary call. No thread is held while waiting.
//
//   Start         Decode(request): the decode worker reserves the KV and
//                 answers `admitted`; short prompts carry their tokens and
//                 are prefilled there (local prefill);
//   OnReadDone    admitted -> StartPrefill (the K/V goes to this decode
//                 worker) while the Decode stream is watched: if it breaks
//                 first, the prefill is cancelled at once; the first token
//                 waits for the prefill's answer (whose numbers the usage
//                 carries), then every message is relayed through
//                 GenerateCall::RelayMessage. A prefill that fails before
//                 the first token cancels the Decode call; one that fails
//                 after it (the hand-off arrived, its answer was lost)
//                 does not;
//   OnDone /      after the last of the two calls ends: Conclude names the
//   OnPrefillDone outcome and which worker to avoid (from the trailing
//                 metadata `pdserve-failed-side`, or which stream broke
//                 first) and hands it to GenerateCall::OnAttemptOver.
// The decode worker's share of load is a WorkerLease held until then, so
// it is released on every path. Cancel (client gone) cancels both calls.
// Locking: mu_ guards the state both calls' callbacks touch; no gRPC
// operation is started under it (gRPC may run callbacks inline).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "router/generate_call.h"
#include "router/worker_pool.h"

namespace pdserve {

class RouterService::PlacementAttempt final : public grpc::ClientReadReactor<internal::v1::DecodeResponse>,
                                              public std::enable_shared_from_this<PlacementAttempt> {
 public:
  PlacementAttempt(std::shared_ptr<GenerateCall> call, std::string decode_address, bool local);

  // Starts the Decode call; the attempt holds itself until it concludes.
  void Start();
  // The request id the workers know this attempt by.
  const std::string& id() const { return rid_; }
  // Cancels the worker calls (thread-safe, takes no lock of ours).
  void Cancel();

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  enum class Phase {
    kAdmit,       // waiting for `admitted`
    kFirstToken,  // admitted, prefill running or done, no token yet
    kRelay,       // tokens flow to the client
  };
  // What a callback decided under mu_, done after releasing it.
  struct Next {
    bool read = false;            // start the next read
    bool start_prefill = false;   // admitted on the prefill path
    bool cancel_decode = false;
    bool cancel_prefill = false;
    bool call_over = false;       // one of the two calls ended
    // Ends the hold taken with a held first token (after the read above is
    // started): OnDone may run from then on.
    bool remove_hold = false;
  };

  void Do(const Next& next);
  Next OnMessage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPrefill();
  void OnPrefillDone(grpc::Status status);
  // Relays `msg`; true once the request has its finish reason (a stop
  // string also cancels the Decode call).
  bool Relay(const internal::v1::DecodeResponse& msg, Next* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One of the two calls ended; the last one concludes.
  void OneCallOver();
  AttemptOutcome Conclude();  // after both calls ended
  AttemptOutcome AdmitFailure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AttemptOutcome RelayEnd() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AttemptOutcome AttributeFailure() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Avoids the prefill worker for this request; `why` UNAVAILABLE also
  // marks it unhealthy until its next poll, unless `busy_only` (a hand-off
  // that never began: the worker may only have been busy).
  AttemptOutcome ExcludePrefill(grpc::Status why, grpc::Status report, bool busy_only = false);
  AttemptOutcome ExcludeDecode(grpc::Status why, grpc::Status report);
  void RecordPrefill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  internal::v1::DecodeRequest MakeDecodeRequest() const;

  const std::shared_ptr<GenerateCall> call_;
  RouterService* const service_;
  const std::string d_;  // the decode worker
  const bool local_;
  const std::string rid_;
  std::optional<WorkerLease> decode_lease_;
  std::shared_ptr<PlacementAttempt> self_;  // until concluded

  grpc::ClientContext dctx_;
  std::unique_ptr<internal::v1::DecodeWorker::Stub> dstub_;
  internal::v1::DecodeRequest dreq_;
  internal::v1::DecodeResponse msg_;  // the read in flight
  grpc::Status dst_;                  // the Decode stream's status, once OnDone ran

  std::string p_;  // the prefill worker ("" when none was called)
  std::optional<WorkerLease> prefill_lease_;
  grpc::ClientContext pctx_;
  std::unique_ptr<internal::v1::PrefillWorker::Stub> pstub_;
  internal::v1::PrefillRequest preq_;
  internal::v1::PrefillResponse presp_;
  grpc::Status pst_;

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kAdmit;
  int calls_open_ ABSL_GUARDED_BY(mu_) = 1;  // Decode, plus Prefill once started
  bool admitted_ ABSL_GUARDED_BY(mu_) = false;
  bool prefill_done_ ABSL_GUARDED_BY(mu_) = false;
  bool decode_ended_ ABSL_GUARDED_BY(mu_) = false;  // the stream ended before a token
  bool finished_ ABSL_GUARDED_BY(mu_) = false;      // a finish reason was relayed
  // Set when the attempt ended before the prefill started (no prefill
  // worker left, or the client left).
  std::optional<AttemptOutcome> early_ ABSL_GUARDED_BY(mu_);
  // The first token, held until the prefill's answer is in. While it is
  // held no read is in flight, so the stream also holds a reactor hold
  // (AddHold): OnDone, which frees the stream, cannot run before
  // OnPrefillDone has started its next read (or decided on none).
  std::optional<internal::v1::DecodeResponse> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve
