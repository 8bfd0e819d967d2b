// RouterService::GenerateCall: one Generate call, as a chain of callbacks
// with no thread of its own (the style of gRPC's callback examples).
//
//   Start        waits in the admission queue (AdmissionQueue::Wait);
//   OnTurn       holds a slot: runs placement attempts, one at a time
//                (PlacementAttempt: reserve on a decode worker, prefill, relay);
//   OnAttemptOver decides after each: done, retry on another worker pair
//                (the attempt says which worker to avoid), or every worker
//                was full: back to the queue with its place (Requeue);
//   End          closes the stream, logs, counts, leaves the queue.
// The client-visible request id (the request's, or the internal id when it
// has none) goes back in the x-request-id initial and trailing metadata,
// and, with the client's traceparent, to the workers (RequestTags).
// The relay (incremental detokenization, stop strings, usage on the last
// message) is RelayMessage, called by the attempt for each decode message.
// A client that goes away (cancel, deadline, broken stream) cancels the
// queue wait or the running attempt's worker calls (OnStreamGone).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/net/queued_writer.h"
#include "common/net/request_tags.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/stop_matcher.h"
#include "pdserve/internal/v1/worker.pb.h"
#include "pdserve/v1/generate.pb.h"
#include "router/router_service.h"

namespace pdserve {

// An internal request id nobody can guess: workers key their tables by it,
// so knowing another request's id must not be possible.
std::string UnguessableRequestId();

// The client a call counts against for --max-inflight-per-client and names
// in the request log: the "x-pdserve-client" metadata of a call over the
// process's in-process channel, whose peer has no address (the HTTP front
// says which HTTP caller it is), else the peer's address without its port (ClientOfPeer). Bounded.
std::string ClientOfCall(const grpc::ServerContextBase& context);

// How one placement attempt ended.
struct AttemptOutcome {
  grpc::Status status;
  // Another worker pair may succeed (the attempt already recorded which
  // worker to avoid).
  bool retry = false;
  // No worker was left to try: the status is the router's, not a worker's.
  bool synthetic = false;
};

class RouterService::GenerateCall final : public QueuedWriter<pdserve::v1::GenerateResponse> {
 public:
  GenerateCall(RouterService* service, grpc::CallbackServerContext* context, pdserve::v1::GenerateRequest request,
               std::vector<uint32_t> prompt, std::string internal_id);

  // Takes the admission ticket and starts waiting for a turn.
  void Start(AdmissionQueue::Ticket ticket);
  // The client it counts against (ClientOfCall).
  const std::string& client() const { return client_; }
  // The request line (a request refused before the queue has one too).
  void LogRequest(const grpc::Status& st) const;

  // --- for PlacementAttempt ---
  RouterService* service() const { return service_; }
  const std::vector<uint32_t>& prompt() const { return prompt_; }
  const pdserve::v1::GenerateRequest& request() const { return request_; }
  // What the worker calls carry in their metadata.
  const RequestTags& tags() const { return tags_; }
  pdserve::v1::Usage* usage() { return &usage_; }
  std::vector<std::string>* tried_decode() { return &tried_decode_; }
  std::vector<std::string>* tried_prefill() { return &tried_prefill_; }
  // `decode`'s whole KV budget is too small for this request (`report`,
  // retry_policy.h's NeverFitsOnThisDecode): it is not tried again in this
  // or any later round; the request's final status, if no worker takes it,
  // is NeverFitsStatus(report).
  void NeverFitsOn(const std::string& decode, grpc::Status report);
  // True the first time in a round of placements (then false): whether a
  // damaged hand-off may be retried without excluding a worker.
  bool TakeDamagedHandoffRetry() { return !std::exchange(damaged_retry_taken_, true); }
  int64_t streamed() const { return streamed_; }
  void SetDeadline(grpc::ClientContext* ctx) const;
  // Registers the attempt the client's going away must cancel; false when
  // the client is already gone. Untrack before the attempt ends.
  bool Track(std::shared_ptr<PlacementAttempt> attempt);
  void Untrack();
  bool Gone();
  // DEADLINE_EXCEEDED when the request's deadline passed (the last 100 ms
  // count: gRPC's timer may fire early), else CANCELLED.
  grpc::Status GoneStatus() const;
  // Relays one decode message to the client. Returns its finish reason
  // (UNSPECIFIED while the request goes on); *stopped when a stop string,
  // or a stop token before the worker's own finish (EOS; RouterService's
  // stop_ids_), ended it: the decode worker must then be cancelled.
  pdserve::v1::FinishReason RelayMessage(const internal::v1::DecodeResponse& msg, bool* stopped);
  // Called once per attempt, after its last worker callback.
  void OnAttemptOver(AttemptOutcome outcome);

 private:
  std::shared_ptr<GenerateCall> Self();
  void OnStreamGone() override;
  void WaitTurn();
  void OnTurn(absl::Status turn);
  void NextAttempt();
  // The placement loop is over: finish, or wait again when every worker
  // was full (`full`).
  void EndPlacement(grpc::Status status, bool full);
  // Leaves the queue, closes the stream, logs and counts the request. A
  // DEADLINE_EXCEEDED before any token, after a round that found every
  // worker full, says so (the last worker's "full" message); an
  // OUT_OF_RANGE from decode workers too small for the request becomes
  // NeverFitsStatus, with its reason trailer.
  void End(const grpc::Status& ended);
  void Emit(pdserve::v1::GenerateResponse out, pdserve::v1::FinishReason finish);
  // `id` ends the generation (a stop token, unless ignore_eos).
  bool IsStopId(uint32_t id) const;
  // Observes the gaps before `tokens` tokens streamed at `now_ns` in the
  // inter-token-latency histogram.
  void ObserveInterTokenLatency(int64_t now_ns, int tokens);
  // finish_ as the completions counter's label (abort when unset).
  const char* FinishReasonLabel() const;
  void Record(const grpc::Status& st) const;
  // The client-visible request id (bounded).
  std::string VisibleId() const;

  RouterService* const service_;
  const std::chrono::system_clock::time_point deadline_;
  const pdserve::v1::GenerateRequest request_;
  const std::vector<uint32_t> prompt_;
  const std::string internal_id_;
  const std::string client_;
  const RequestTags tags_;
  IncrementalDetokenizer detok_;
  StopMatcher stops_;
  const int64_t start_ns_;
  // The chain's state: touched by one callback at a time (each step starts
  // the next), so unguarded.
  AdmissionQueue::Ticket ticket_;
  int64_t ttft_ns_ = 0;
  int64_t last_token_ns_ = 0;  // when the last token was streamed
  pdserve::v1::FinishReason finish_ = pdserve::v1::FINISH_REASON_UNSPECIFIED;
  int64_t generated_ = 0;
  int64_t streamed_ = 0;
  pdserve::v1::Usage usage_;
  grpc::Status last_full_;  // why the last placement found no room
  std::vector<std::string> tried_decode_, tried_prefill_;
  // Decode workers whose whole budget is too small, and the last refusal.
  std::vector<std::string> too_small_decode_;
  grpc::Status never_fits_;
  int attempts_ = 0;        // in this round of placements
  bool damaged_retry_taken_ = false;  // in this round of placements
  int total_attempts_ = 0;  // in all rounds
  std::string last_attempt_id_;  // the workers' request id of the last attempt
  grpc::Status best_;
  int best_rank_ = -1;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  // Shared so that OnStreamGone can cancel it outside mu_ (gRPC may run
  // the cancelled calls' callbacks inline, and they take mu_).
  std::shared_ptr<PlacementAttempt> attempt_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve
