// PrefillService: the PrefillWorker gRPC service. Prompts wait in a bounded
// queue (full: RESOURCE_EXHAUSTED; a prompt whose caller cancelled or whose
// deadline passed leaves it at the next Prefill or GetLoad, so that an
// abandoned call neither holds a slot nor counts as load) for an executor
// thread. While a prompt waits, a keeper thread opens its hand-off and
// heartbeats it every progress_interval, so that its decode worker's
// hand-off timeout counts a stuck prefill worker, not a long queue. The executor takes the queued prompts whose tokens fit
// batch_tokens (at least one) and prefills them as the segments of one
// forward (a lone prompt in chunks), streams each prompt's K/V layer by
// layer to its decode worker as soon as the layer is final, samples each
// first token (n = 0), commits each hand-off and frees its copy once that
// decode worker acknowledges. A cancelled or expired call, or a broken
// hand-off, stops its own prompt at the next layer; the others of the
// batch go on.
//
// A failure on the decode side of the hand-off (refused, unknown request,
// unreachable, broken) is marked in the trailing metadata
// `pdserve-failed-side: decode`, so that the router avoids that decode
// worker rather than this one.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine/engine.h"
#include "common/handoff/kv_transfer.h"
#include "common/net/metrics.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {

struct PrefillServiceOptions {
  int max_queue = 16;   // prompts waiting beyond the ones running
  int executors = 1;    // prefill forwards at once
  // Queued prompts prefilled in one forward while their tokens total at
  // most this; 0 = one per forward; -1 = Engine::ExactPrefillBatchTokens(),
  // the most with which a prompt's bits equal its prefill alone.
  int batch_tokens = -1;
  std::string model_fingerprint;
  // Decode workers a Prefill may name as decode_address; empty = any. A
  // caller that names another gets PermissionDenied before any work.
  std::vector<std::string> allowed_decode_addresses;
  // How often a prefill in progress, or a queued prompt, tells its decode
  // worker it is alive (KvProgress), so that a prefill or a wait longer
  // than the hand-off timeout lives.
  absl::Duration progress_interval = absl::Seconds(5);
  // Where to report metrics; nullptr = nowhere. Must outlive the service.
  MetricsRegistry* metrics = nullptr;
};

class PrefillService final : public internal::v1::PrefillWorker::CallbackService {
 public:
  PrefillService(const Engine* engine, KvSender* sender, PrefillServiceOptions options);
  ~PrefillService() override;  // Shutdown()

  // Starts the executors and the queue's keeper, and logs the batch bound
  // in effect.
  void Start();
  // Fails queued prompts with Unavailable and joins the executors (a prompt
  // being prefilled finishes first) and the keeper.
  void Shutdown();

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context, const internal::v1::PrefillRequest* request,
                                    internal::v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const internal::v1::GetLoadRequest* request,
                                    internal::v1::GetLoadResponse* response) override;

 private:
  // A prompt's hand-off from its queueing on: opened and heartbeated by the
  // keeper while the prompt waits, then taken by the executor.
  struct Handoff;

  struct Job {
    grpc::CallbackServerContext* context;
    const internal::v1::PrefillRequest* request;
    internal::v1::PrefillResponse* response;
    grpc::ServerUnaryReactor* reactor;
    int64_t enqueued_ns = 0;
    std::shared_ptr<Handoff> handoff;  // shared with the keeper
  };

  // A prompt between its hand-off's start and its commit.
  struct Running;

  void ExecutorLoop();
  // Every progress_interval: opens the hand-off of each queued prompt, or
  // sends it a heartbeat when open.
  void KeeperLoop();
  void KeepQueuedAlive(Handoff& h);
  // The job's hand-off, for what it says.
  std::shared_ptr<Handoff> NewHandoff(const internal::v1::PrefillRequest& req, absl::Time deadline) const;
  // Opens h's hand-off (h.mu held). Errors are marked as the decode side's.
  absl::StatusOr<std::unique_ptr<KvSendSession>> OpenHandoff(const Handoff& h) const;
  // The executor's take of a job's hand-off: the keeper's session, or one
  // opened now; the keeper's failure to open or heartbeat it otherwise.
  absl::StatusOr<std::unique_ptr<KvSendSession>> TakeHandoff(Handoff& h) const;
  // The front prompt and those behind it that fit options_.batch_tokens.
  std::vector<Job> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the queued prompts whose caller cancelled or whose deadline
  // passed out of the queue; the caller finishes them outside mu_.
  std::vector<Job> TakeCancelledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishCancelled(const std::vector<Job>& jobs);
  void InitMetrics();
  Counter* RequestsCounter(grpc::StatusCode code);
  // Prefill + hand-off of each job; fills the responses. One status per job.
  std::vector<absl::Status> RunBatch(const std::vector<Job>& jobs);
  // Takes the job's hand-off (TakeHandoff) and opens its sequence, with the
  // hooks that stream its layers. Errors: cancelled while queued, the
  // decode side's refusal.
  absl::StatusOr<std::unique_ptr<Running>> StartJob(const Job& job);
  // Samples the first token and commits the hand-off (or cancels it when
  // the prefill failed); fills the response.
  absl::Status FinishJob(Running* r, const absl::StatusOr<at::Tensor>& logits);
  // The job's request line (common/net/request_tags.h).
  void LogRequest(const Job& job, const absl::Status& status) const;

  const Engine* engine_;
  KvSender* sender_;
  const PrefillServiceOptions options_;
  int64_t batch_tokens_ = 0;  // the bound in effect: options_.batch_tokens resolved
  MetricsRegistry own_metrics_;
  MetricsRegistry* metrics_ = nullptr;
  Histogram* prefill_seconds_ = nullptr;
  Histogram* batch_prompts_ = nullptr;
  Histogram* handoff_seconds_ = nullptr;
  Histogram* handoff_exposed_seconds_ = nullptr;
  Counter* prompt_tokens_ = nullptr;
  Counter* handoff_bytes_ = nullptr;
  Counter* handoff_failures_ = nullptr;
  Counter* queue_rejections_ = nullptr;

  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kv_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // KV held by running prefills
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // the executors, then the keeper
};

}  // namespace pdserve
