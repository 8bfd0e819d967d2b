// PrefillService: the PrefillWorker gRPC service. Prompts wait in a bounded
// queue (full: RESOURCE_EXHAUSTED; a prompt whose caller cancelled or whose
// deadline passed leaves it at the next Prefill or GetLoad, so that an
// abandoned call neither holds a slot nor counts as load) for an executor
// thread, which runs
// chunked prefill, streams each layer's K/V to the named decode worker as
// soon as the layer is final, samples the first token (n = 0), commits the
// hand-off and frees its copy once the decode worker acknowledges. A
// cancelled or expired call stops prefill at the next layer.
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
  int executors = 1;    // prompts prefilled at once
  std::string model_fingerprint;
  // Decode workers a Prefill may name as decode_address; empty = any. A
  // caller that names another gets PermissionDenied before any work.
  std::vector<std::string> allowed_decode_addresses;
  // How often a prefill in progress tells its decode worker it is alive
  // (KvProgress), so that a prefill longer than the hand-off timeout lives.
  absl::Duration progress_interval = absl::Seconds(5);
  // Where to report metrics; nullptr = nowhere. Must outlive the service.
  MetricsRegistry* metrics = nullptr;
};

class PrefillService final : public internal::v1::PrefillWorker::CallbackService {
 public:
  PrefillService(const Engine* engine, KvSender* sender, PrefillServiceOptions options);
  ~PrefillService() override;  // Shutdown()

  void Start();
  // Fails queued prompts with Unavailable and joins the executors (a prompt
  // being prefilled finishes first).
  void Shutdown();

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context, const internal::v1::PrefillRequest* request,
                                    internal::v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context, const internal::v1::GetLoadRequest* request,
                                    internal::v1::GetLoadResponse* response) override;

 private:
  struct Job {
    grpc::CallbackServerContext* context;
    const internal::v1::PrefillRequest* request;
    internal::v1::PrefillResponse* response;
    grpc::ServerUnaryReactor* reactor;
    int64_t enqueued_ns = 0;
  };

  void ExecutorLoop();
  // Takes the queued prompts whose caller cancelled or whose deadline
  // passed out of the queue; the caller finishes them outside mu_.
  std::vector<Job> TakeCancelledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishCancelled(const std::vector<Job>& jobs);
  void InitMetrics();
  Counter* RequestsCounter(grpc::StatusCode code);
  // Prefill + hand-off of one prompt; fills the response.
  absl::Status Run(const Job& job);
  // The job's request line (common/net/request_tags.h).
  void LogRequest(const Job& job, const absl::Status& status) const;

  const Engine* engine_;
  KvSender* sender_;
  const PrefillServiceOptions options_;
  MetricsRegistry own_metrics_;
  MetricsRegistry* metrics_ = nullptr;
  Histogram* prefill_seconds_ = nullptr;
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
  std::vector<std::thread> threads_;
};

}  // namespace pdserve
