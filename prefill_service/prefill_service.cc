#include "prefill_service/prefill_service.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net/grpc_status.h"
#include "common/net/request_tags.h"
#include "common/net/sampling_validation.h"
#include "common/util/clock.h"
#include "common/util/log.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {


// A failure of the hand-off's decode side, marked for the router.
absl::Status DecodeSide(absl::Status st) { return MarkFailedSide(std::move(st), "decode"); }

// The first problem of a Prefill request that any caller could send, or OK.
// Checked before it is queued: nothing is computed for a bad request.
grpc::Status CheckPrefillRequest(const internal::v1::PrefillRequest& r, const ModelConfig& c,
                                 const std::vector<std::string>& allowed) {
  if (r.token_ids().empty() || r.decode_address().empty() || r.request_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Prefill needs request_id, token_ids and decode_address");
  }
  if (r.token_ids_size() >= c.max_context) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("the prompt has ", r.token_ids_size(), " tokens; max_context ", c.max_context,
                                     " leaves room for at most ", c.max_context - 1));
  }
  for (int i = 0; i < r.token_ids_size(); ++i) {
    if (r.token_ids(i) >= c.vocab_size) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("token_ids[", i, "] = ", r.token_ids(i),
                                                                           " is not below vocab_size ", c.vocab_size));
    }
  }
  absl::Status sampling = ValidateSampling(r.sampling(), "sampling");
  if (!sampling.ok()) return ToGrpcStatus(sampling);
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), r.decode_address()) == allowed.end()) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("decode_address '", r.decode_address().substr(0, 128),
                                     "' is not among this prefill worker's decode workers (--decode-allowlist)"));
  }
  return grpc::Status::OK;
}

}  // namespace

PrefillService::PrefillService(const Engine* engine, KvSender* sender, PrefillServiceOptions options)
    : engine_(engine), sender_(sender), options_(std::move(options)) {
  batch_tokens_ = std::min<int64_t>(
      options_.batch_tokens < 0 ? engine_->ExactPrefillBatchTokens() : options_.batch_tokens,
      engine_->options().prefill_chunk);
  InitMetrics();
}

void PrefillService::InitMetrics() {
  metrics_ = options_.metrics != nullptr ? options_.metrics : &own_metrics_;
  const auto latency = LatencyBuckets();
  prefill_seconds_ = metrics_->GetHistogram("pdserve_prefill_seconds", "Prefill compute time per prompt.", latency);
  handoff_seconds_ = metrics_->GetHistogram(
      "pdserve_kv_handoff_seconds", "KV hand-off from the first data chunk to the acknowledgement.", latency);
  handoff_exposed_seconds_ = metrics_->GetHistogram(
      "pdserve_kv_handoff_exposed_seconds", "KV hand-off time after the first token (not hidden by prefill).",
      latency);
  batch_prompts_ = metrics_->GetHistogram("pdserve_prefill_batch_prompts", "Prompts per prefill forward.",
                                          {1, 2, 4, 8, 16, 32});
  prompt_tokens_ = metrics_->GetCounter("pdserve_prefill_prompt_tokens_total", "Prompt tokens prefilled.");
  handoff_bytes_ = metrics_->GetCounter("pdserve_kv_handoff_bytes_total", "K/V bytes handed off and acknowledged.");
  handoff_failures_ = metrics_->GetCounter("pdserve_kv_handoff_failures_total",
                                           "Prefills whose hand-off was rejected or broke.");
  queue_rejections_ = metrics_->GetCounter("pdserve_prefill_queue_rejections_total",
                                           "Prefill calls refused because the queue was full.");
  RequestsCounter(grpc::StatusCode::OK);
  if (options_.metrics == nullptr) return;
  metrics_->AddCallbackGauge("pdserve_prefill_queue_depth", "Prompts waiting for an executor.", [this] {
    absl::MutexLock lock(&mu_);
    return static_cast<double>(queue_.size());
  });
  metrics_->AddCallbackGauge("pdserve_prefill_active", "Prompts being prefilled.", [this] {
    absl::MutexLock lock(&mu_);
    return static_cast<double>(running_);
  });
  metrics_->AddCallbackGauge("pdserve_prefill_kv_bytes", "KV bytes held by running prefills.", [this] {
    absl::MutexLock lock(&mu_);
    return static_cast<double>(kv_bytes_);
  });
}

Counter* PrefillService::RequestsCounter(grpc::StatusCode code) {
  return metrics_->GetCounter("pdserve_prefill_requests_total", "Prefill calls by final status code.",
                              {{"code", GrpcCodeName(code)}});
}

PrefillService::~PrefillService() { Shutdown(); }

void PrefillService::Start() {
  const bool exact = batch_tokens_ <= engine_->ExactPrefillBatchTokens();
  log::Info(batch_tokens_ == 0 ? std::string("prefill runs one prompt per forward")
                               : absl::StrFormat("prefill batches queued prompts up to %d tokens (%s)", batch_tokens_,
                                                 exact ? "each prompt's bits as alone" : "bits depend on the batch"),
            {{"prefill_batch_tokens", batch_tokens_}}, log::TextPrefix::Named("pdserve"));
  for (int i = 0; i < options_.executors; ++i) threads_.emplace_back([this] { ExecutorLoop(); });
  threads_.emplace_back([this] { KeeperLoop(); });
}

void PrefillService::Shutdown() {
  std::deque<Job> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (const Job& j : dropped) {
    j.reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the prefill worker is shutting down"));
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                  const internal::v1::PrefillRequest* request,
                                                  internal::v1::PrefillResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status bad = CheckPrefillRequest(*request, engine_->config(), options_.allowed_decode_addresses);
  if (!bad.ok()) {
    RequestsCounter(bad.error_code())->Increment();
    reactor->Finish(bad);
    return reactor;
  }
  std::vector<Job> cancelled;
  grpc::Status refused = grpc::Status::OK;
  {
    absl::MutexLock lock(&mu_);
    cancelled = TakeCancelledLocked();
    if (stopping_) {
      refused = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the prefill worker is shutting down");
    } else if (static_cast<int>(queue_.size()) >= options_.max_queue) {
      queue_rejections_->Increment();
      RequestsCounter(grpc::StatusCode::RESOURCE_EXHAUSTED)->Increment();
      refused = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             absl::StrCat("prefill queue full (", queue_.size(), " prompts waiting)"));
    } else {
      queue_.push_back(
          Job{context, request, response, reactor, NowNs(), NewHandoff(*request, absl::FromChrono(context->deadline()))});
    }
  }
  FinishCancelled(cancelled);
  if (!refused.ok()) reactor->Finish(refused);
  return reactor;
}

std::vector<PrefillService::Job> PrefillService::TakeCancelledLocked() {
  std::vector<Job> cancelled;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (!it->context->IsCancelled()) {
      ++it;
      continue;
    }
    cancelled.push_back(*it);
    it = queue_.erase(it);
  }
  return cancelled;
}

void PrefillService::FinishCancelled(const std::vector<Job>& jobs) {
  for (const Job& j : jobs) {
    RequestsCounter(grpc::StatusCode::CANCELLED)->Increment();
    j.reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while queued"));
  }
}

grpc::ServerUnaryReactor* PrefillService::GetLoad(grpc::CallbackServerContext* context,
                                                  const internal::v1::GetLoadRequest* request,
                                                  internal::v1::GetLoadResponse* response) {
  std::vector<Job> cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = TakeCancelledLocked();
    response->set_active_sequences(running_);
    response->set_queued_requests(static_cast<uint32_t>(queue_.size()));
    response->set_kv_bytes_used(kv_bytes_);
    response->set_kv_bytes_allocated(kv_bytes_);
    response->set_model_fingerprint(options_.model_fingerprint);
  }
  FinishCancelled(cancelled);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

std::vector<PrefillService::Job> PrefillService::TakeBatchLocked() {
  std::vector<Job> batch{queue_.front()};
  queue_.pop_front();
  int64_t tokens = batch[0].request->token_ids_size();
  while (!queue_.empty() && tokens + queue_.front().request->token_ids_size() <= batch_tokens_) {
    tokens += queue_.front().request->token_ids_size();
    batch.push_back(queue_.front());
    queue_.pop_front();
  }
  return batch;
}

void PrefillService::ExecutorLoop() {
  while (true) {
    std::vector<Job> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping
      batch = TakeBatchLocked();
      running_ += static_cast<int>(batch.size());
    }
    const std::vector<absl::Status> statuses = RunBatch(batch);
    {
      absl::MutexLock lock(&mu_);
      running_ -= static_cast<int>(batch.size());
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const Job& job = batch[i];
      const absl::Status& st = statuses[i];
      RequestsCounter(static_cast<grpc::StatusCode>(st.code()))->Increment();
      AddMarkTrailers(st, job.context);
      if (log::RequestLines()) LogRequest(job, st);
      job.reactor->Finish(ToGrpcStatus(st));
    }
  }
}

void PrefillService::LogRequest(const Job& job, const absl::Status& status) const {
  const internal::v1::PrefillRequest& req = *job.request;
  const internal::v1::PrefillResponse& resp = *job.response;
  const double ms = 1e-6;
  const int64_t e2e_ns = NowNs() - job.enqueued_ns;
  LogWorkerRequest(RequestTags::FromMetadata(*job.context), req.request_id(), ToGrpcStatus(status),
                   absl::StrFormat("prompt %d (batch of %d), prefill %.1f ms, e2e %.1f ms, kv %d B -> %s",
                                   req.token_ids_size(), resp.batch_prompts(), resp.prefill_ns() * ms, e2e_ns * ms,
                                   resp.kv_handoff_bytes(), req.decode_address()),
                   {{"prompt_tokens", req.token_ids_size()},
                    {"batch_prompts", resp.batch_prompts()},
                    {"prefill_ms", log::Millis(resp.prefill_ns())},
                    {"e2e_ms", log::Millis(e2e_ns)},
                    {"kv_handoff_bytes", resp.kv_handoff_bytes()},
                    {"kv_handoff_ms", log::Millis(resp.kv_handoff_ns())},
                    {"decode_worker", req.decode_address()}});
}

struct PrefillService::Handoff {
  // What StartSend needs, copied from the request: the keeper may run after
  // the call is finished and its request freed.
  std::string decode_address;
  KvHandoffHeader header;
  absl::Time deadline;

  absl::Mutex mu;
  bool taken ABSL_GUARDED_BY(mu) = false;  // by the executor: the keeper stops
  std::unique_ptr<KvSendSession> session ABSL_GUARDED_BY(mu);
  absl::Status failed ABSL_GUARDED_BY(mu);  // the keeper's open or heartbeat
};

std::shared_ptr<PrefillService::Handoff> PrefillService::NewHandoff(const internal::v1::PrefillRequest& req,
                                                                    absl::Time deadline) const {
  auto h = std::make_shared<Handoff>();
  h->decode_address = req.decode_address();
  h->header.request_id = req.request_id();
  h->header.layout = KvHandoffLayout::Of(engine_->config(), engine_->options().kv.dtype, options_.model_fingerprint);
  h->header.prompt_len = req.token_ids_size();
  h->header.sampling = SamplingFromProto(req.sampling());
  h->deadline = deadline;
  return h;
}

absl::StatusOr<std::unique_ptr<KvSendSession>> PrefillService::OpenHandoff(const Handoff& h) const {
  absl::StatusOr<std::unique_ptr<KvSendSession>> opened = sender_->StartSend(h.decode_address, h.header, h.deadline);
  if (!opened.ok()) return DecodeSide(opened.status());
  return opened;
}

absl::StatusOr<std::unique_ptr<KvSendSession>> PrefillService::TakeHandoff(Handoff& h) const {
  absl::MutexLock lock(&h.mu);
  h.taken = true;
  if (!h.failed.ok()) return h.failed;
  if (h.session != nullptr) return std::move(h.session);
  return OpenHandoff(h);
}

void PrefillService::KeeperLoop() {
  while (true) {
    std::vector<std::shared_ptr<Handoff>> queued;
    {
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), options_.progress_interval);
      if (stopping_) return;
      for (const Job& j : queue_) queued.push_back(j.handoff);
    }
    for (const std::shared_ptr<Handoff>& h : queued) KeepQueuedAlive(*h);
  }
}

void PrefillService::KeepQueuedAlive(Handoff& h) {
  absl::MutexLock lock(&h.mu);
  if (h.taken || !h.failed.ok()) return;
  if (h.session == nullptr) {
    absl::StatusOr<std::unique_ptr<KvSendSession>> opened = OpenHandoff(h);
    if (opened.ok()) {
      h.session = std::move(*opened);
    } else {
      h.failed = opened.status();
    }
    return;
  }
  absl::Status st = h.session->SendProgress(0);
  if (!st.ok()) h.failed = DecodeSide(std::move(st));
}

struct PrefillService::Running {
  const Job* job = nullptr;
  std::vector<int64_t> ids;
  SamplingParams sampling;
  std::unique_ptr<KvSendSession> session;
  std::unique_ptr<Sequence> seq;
  PrefillHooks hooks;
  bool handoff_broke = false;
  absl::Time last_progress;
};

absl::StatusOr<std::unique_ptr<PrefillService::Running>> PrefillService::StartJob(const Job& job) {
  grpc::CallbackServerContext* ctx = job.context;
  const internal::v1::PrefillRequest& req = *job.request;
  if (ctx->IsCancelled()) return absl::CancelledError("cancelled while queued");
  auto r = std::make_unique<Running>();
  r->job = &job;
  r->ids.assign(req.token_ids().begin(), req.token_ids().end());
  r->sampling = SamplingFromProto(req.sampling());
  absl::StatusOr<std::unique_ptr<KvSendSession>> opened = TakeHandoff(*job.handoff);
  if (!opened.ok()) return opened.status();
  r->session = std::move(*opened);
  r->seq = engine_->NewSequence();
  r->last_progress = absl::Now();
  Running* rp = r.get();
  r->hooks.check_cancelled = [this, rp, ctx]() -> absl::Status {
    if (ctx->IsCancelled()) return absl::CancelledError("the router cancelled the prefill");
    if (absl::Now() - rp->last_progress < options_.progress_interval) return absl::OkStatus();
    rp->last_progress = absl::Now();
    absl::Status st = rp->session->SendProgress(rp->seq->pos);
    rp->handoff_broke = !st.ok();
    return st;
  };
  r->hooks.on_layer_final = [rp](int64_t layer) -> absl::Status {
    auto [k, v] = rp->seq->cache.Get(layer);
    absl::Status st = rp->session->SendLayer(layer, k, v);
    rp->handoff_broke = !st.ok();
    return st;
  };
  return r;
}

std::vector<absl::Status> PrefillService::RunBatch(const std::vector<Job>& jobs) {
  std::vector<absl::Status> statuses(jobs.size());
  std::vector<std::unique_ptr<Running>> running(jobs.size());
  std::vector<size_t> started;
  for (size_t i = 0; i < jobs.size(); ++i) {
    absl::StatusOr<std::unique_ptr<Running>> r = StartJob(jobs[i]);
    if (!r.ok()) {
      statuses[i] = r.status();
      continue;
    }
    running[i] = std::move(*r);
    started.push_back(i);
  }
  if (started.empty()) return statuses;
  const int64_t t0 = NowNs();
  std::vector<absl::StatusOr<at::Tensor>> logits;
  if (started.size() == 1) {
    Running* r = running[started[0]].get();
    logits.push_back(engine_->Prefill(r->seq.get(), r->ids, 0, &r->hooks));
  } else {
    std::vector<PrefillJob> batch;
    for (size_t i : started) batch.push_back({running[i]->seq.get(), &running[i]->ids, &running[i]->hooks});
    logits = engine_->PrefillBatch(batch);
  }
  const int64_t prefill_ns = NowNs() - t0;
  batch_prompts_->Observe(static_cast<double>(started.size()));
  int64_t held = 0;
  for (size_t i : started) held += running[i]->seq->cache.AllocatedBytes();
  {
    absl::MutexLock lock(&mu_);
    kv_bytes_ += held;
  }
  for (size_t j = 0; j < started.size(); ++j) {
    const size_t i = started[j];
    jobs[i].response->set_prefill_ns(prefill_ns);
    jobs[i].response->set_batch_prompts(static_cast<uint32_t>(started.size()));
    statuses[i] = FinishJob(running[i].get(), logits[j]);
    const int64_t freed = running[i]->seq->cache.AllocatedBytes();
    running[i].reset();  // the decode worker owns the K/V now (or the request failed)
    absl::MutexLock lock(&mu_);
    kv_bytes_ -= freed;
  }
  return statuses;
}

absl::Status PrefillService::FinishJob(Running* r, const absl::StatusOr<at::Tensor>& logits) {
  if (!logits.ok()) {
    r->session->CancelSend();
    if (!r->handoff_broke) return logits.status();
    handoff_failures_->Increment();
    return DecodeSide(logits.status());
  }
  const uint32_t first = static_cast<uint32_t>(engine_->Sample(*logits, r->sampling, 0));
  absl::StatusOr<KvTransferStats> stats = r->session->CommitSend(first);
  if (!stats.ok()) {
    handoff_failures_->Increment();
    return DecodeSide(stats.status());
  }
  internal::v1::PrefillResponse* response = r->job->response;
  prompt_tokens_->Increment(static_cast<double>(r->ids.size()));
  prefill_seconds_->Observe(response->prefill_ns() * 1e-9);
  handoff_bytes_->Increment(static_cast<double>(stats->bytes));
  handoff_seconds_->Observe(stats->elapsed_ns * 1e-9);
  handoff_exposed_seconds_->Observe(stats->tail_ns * 1e-9);
  response->set_first_token(first);
  response->set_kv_handoff_bytes(stats->bytes);
  response->set_kv_handoff_ns(stats->elapsed_ns);
  response->set_kv_handoff_exposed_ns(stats->tail_ns);
  return absl::OkStatus();
}

}  // namespace pdserve
