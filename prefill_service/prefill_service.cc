#include "prefill_service/prefill_service.h"

#include <ATen/ATen.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/handoff/kv_wire.h"
#include "common/net/grpc_status.h"
#include "common/util/clock.h"
#include "common/util/status_macros.h"

namespace pdserve {
namespace {


internal::v1::KvDtype WireDtype(KvDtype d) {
  return d == KvDtype::kBF16 ? internal::v1::KV_DTYPE_BF16 : internal::v1::KV_DTYPE_F32;
}

}  // namespace

PrefillService::PrefillService(const Engine* engine, KvSender* sender, PrefillServiceOptions options)
    : engine_(engine), sender_(sender), options_(std::move(options)) {}

PrefillService::~PrefillService() { Shutdown(); }

void PrefillService::Start() {
  for (int i = 0; i < options_.executors; ++i) threads_.emplace_back([this] { ExecutorLoop(); });
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
  const ModelConfig& c = engine_->config();
  if (request->token_ids().empty() || request->decode_address().empty() || request->request_id().empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "Prefill needs request_id, token_ids and decode_address"));
    return reactor;
  }
  for (int i = 0; i < request->token_ids_size(); ++i) {
    if (request->token_ids(i) >= c.vocab_size) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   absl::StrCat("token_ids[", i, "] = ", request->token_ids(i),
                                                " is not below vocab_size ", c.vocab_size)));
      return reactor;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the prefill worker is shutting down"));
      return reactor;
    }
    if (static_cast<int>(queue_.size()) >= options_.max_queue) {
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   absl::StrCat("prefill queue full (", queue_.size(), " prompts waiting)")));
      return reactor;
    }
    queue_.push_back(Job{context, request, response, reactor});
  }
  return reactor;
}

grpc::ServerUnaryReactor* PrefillService::GetLoad(grpc::CallbackServerContext* context,
                                                  const internal::v1::GetLoadRequest* request,
                                                  internal::v1::GetLoadResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    response->set_active_sequences(running_);
    response->set_queued_requests(static_cast<uint32_t>(queue_.size()));
    response->set_kv_bytes_used(kv_bytes_);
    response->set_kv_bytes_allocated(kv_bytes_);
    response->set_model_fingerprint(options_.model_fingerprint);
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void PrefillService::ExecutorLoop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping
      job = queue_.front();
      queue_.pop_front();
      ++running_;
    }
    absl::Status st = Run(job);
    {
      absl::MutexLock lock(&mu_);
      --running_;
    }
    job.reactor->Finish(ToGrpcStatus(st));
  }
}

absl::Status PrefillService::Run(const Job& job) {
  grpc::CallbackServerContext* ctx = job.context;
  const internal::v1::PrefillRequest& req = *job.request;
  if (ctx->IsCancelled()) return absl::CancelledError("cancelled while queued");

  std::vector<int64_t> ids(req.token_ids().begin(), req.token_ids().end());
  internal::v1::KvHeader header;
  header.set_request_id(req.request_id());
  header.set_model_fingerprint(options_.model_fingerprint);
  header.set_dtype(WireDtype(engine_->options().kv.dtype));
  header.set_prompt_len(ids.size());
  *header.mutable_sampling() = req.sampling();
  const absl::Time deadline = absl::FromChrono(ctx->deadline());
  ASSIGN_OR_RETURN(std::unique_ptr<KvSendSession> session,
                   sender_->StartSend(req.decode_address(), std::move(header), deadline));

  const int64_t t0 = NowNs();
  auto seq = engine_->NewSequence();
  PrefillHooks hooks;
  hooks.check_cancelled = [ctx]() -> absl::Status {
    if (ctx->IsCancelled()) return absl::CancelledError("the router cancelled the prefill");
    return absl::OkStatus();
  };
  hooks.on_layer_final = [&](int64_t layer) -> absl::Status {
    auto [k, v] = seq->cache.Get(layer);
    return session->SendLayer(layer, k, v);
  };
  absl::StatusOr<at::Tensor> logits = engine_->Prefill(seq.get(), ids, 0, &hooks);
  {
    absl::MutexLock lock(&mu_);
    kv_bytes_ += seq->cache.AllocatedBytes();
  }
  absl::StatusOr<KvTransferStats> stats = absl::UnknownError("unset");
  int64_t prefill_ns = 0;
  uint32_t first = 0;
  if (logits.ok()) {
    first = static_cast<uint32_t>(engine_->Sample(*logits, SamplingFromProto(req.sampling()), 0));
    prefill_ns = NowNs() - t0;
    stats = session->CommitSend(first);
  } else {
    session->CancelSend();
  }
  {
    absl::MutexLock lock(&mu_);
    kv_bytes_ -= seq->cache.AllocatedBytes();
  }
  seq.reset();  // the decode worker owns the K/V now (or the request failed)
  RETURN_IF_ERROR(logits.status());
  RETURN_IF_ERROR(stats.status());
  job.response->set_first_token(first);
  job.response->set_prefill_ns(prefill_ns);
  job.response->set_kv_handoff_bytes(stats->bytes);
  job.response->set_kv_handoff_ns(stats->elapsed_ns);
  job.response->set_kv_handoff_exposed_ns(stats->tail_ns);
  return absl::OkStatus();
}

}  // namespace pdserve
