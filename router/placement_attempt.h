// RouterService::PlacementAttempt: one try at placing a request on a
// decode worker (and a prefill worker), then relaying its tokens. A
// ClientReadReactor on the decode worker's Decode stream; the prefill is a
// callback unary call. No thread is held while waiting.
//
//   Start        Decode(request): the decode worker reserves the KV and
//                answers `admitted`; short prompts carry their tokens and
//                are prefilled there (local prefill);
//   OnReadDone   admitted -> StartPrefill (the K/V goes to this decode
//                worker) while the Decode stream is watched: if it breaks
//                first, the prefill is cancelled at once; tokens -> relayed
//                through GenerateCall::RelayMessage (held back until the
//                prefill's answer is in, whose numbers the usage carries);
//   OnDone /     after the last of the two calls ends: Conclude names the
//   OnPrefillDone outcome, which worker to avoid (from the trailing
//                metadata `pdserve-failed-side`, or which stream broke
//                first), and hands it to GenerateCall::OnAttemptOver.
// Deletes itself after concluding. Cancel (client gone) cancels both calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "router/generate_call.h"

namespace pdserve {

class RouterService::PlacementAttempt final : public grpc::ClientReadReactor<internal::v1::DecodeResponse> {
 public:
  PlacementAttempt(std::shared_ptr<GenerateCall> call, std::string decode_address, bool local);
  ~PlacementAttempt() override;

  void Start();
  // Cancels the worker calls (thread-safe, takes no lock of ours).
  void Cancel();

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  enum class Phase { kAdmit, kFirstToken, kRelay, kOver };

  void OnAdmitted();
  void StartPrefill();
  void OnPrefillDone(grpc::Status status);
  // Relays `msg`; false once the request is over (finished or stopped).
  bool Relay(const internal::v1::DecodeResponse& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Relays what arrived while the prefill's answer was pending.
  void FlushHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One of the two calls ended; the last one concludes and deletes this.
  void OneCallOver();
  AttemptOutcome Conclude();
  AttemptOutcome AdmitFailure();
  AttemptOutcome RelayEnd();
  AttemptOutcome AttributeFailure();
  AttemptOutcome ExcludePrefill(grpc::Status why);
  AttemptOutcome ExcludeDecode(grpc::Status why);
  void RecordPrefill();

  const std::shared_ptr<GenerateCall> call_;
  RouterService* const service_;
  const std::string d_;  // the decode worker
  const bool local_;
  grpc::ClientContext dctx_;
  std::unique_ptr<internal::v1::DecodeWorker::Stub> dstub_;
  internal::v1::DecodeRequest dreq_;
  internal::v1::DecodeResponse msg_;
  grpc::Status dst_;  // the Decode stream's status, once OnDone ran

  std::string p_;  // the prefill worker ("" when none was called)
  grpc::ClientContext pctx_;
  std::unique_ptr<internal::v1::PrefillWorker::Stub> pstub_;
  internal::v1::PrefillRequest preq_;
  internal::v1::PrefillResponse presp_;
  grpc::Status pst_;

  absl::Mutex mu_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kAdmit;
  int calls_open_ ABSL_GUARDED_BY(mu_) = 1;  // Decode, plus Prefill once started
  bool prefill_done_ ABSL_GUARDED_BY(mu_) = false;
  bool decode_ended_ ABSL_GUARDED_BY(mu_) = false;  // the stream ended before a token
  bool finished_ ABSL_GUARDED_BY(mu_) = false;       // a finish reason was relayed
  bool no_prefiller_ ABSL_GUARDED_BY(mu_) = false;
  bool gone_early_ ABSL_GUARDED_BY(mu_) = false;     // client left before the prefill started
  std::vector<internal::v1::DecodeResponse> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve
