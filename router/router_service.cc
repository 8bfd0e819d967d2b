#include "router/router_service.h"

#include <cstdint>

#include "common/net/grpc_security.h"
#include "common/net/grpc_status.h"
#include "common/net/sampling_validation.h"
#include "router/generate_call.h"
#include "router/harmony_chat.h"

namespace pdserve {

using pdserve::v1::GenerateResponse;

RouterService::RouterService(const ModelConfig& config, std::unique_ptr<Tokenizer> tokenizer, WorkerPool* prefill,
                             WorkerPool* decode, RouterOptions options)
    : config_(config),
      tokenizer_(std::move(tokenizer)),
      stop_ids_(config_.chat_format == ChatFormat::kHarmony ? HarmonyStopIds(*tokenizer_) : std::vector<uint32_t>{}),
      prefill_(prefill),
      decode_(decode),
      options_(std::move(options)),
      queue_(options_.queue) {
  metrics_ = options_.metrics != nullptr ? options_.metrics : &own_metrics_;
  const auto latency = LatencyBuckets();
  ttft_seconds_ = metrics_->GetHistogram("pdserve_router_ttft_seconds",
                                         "Time from the request to the first token leaving the router.", latency);
  tpot_seconds_ = metrics_->GetHistogram("pdserve_router_tpot_seconds",
                                         "Mean time between tokens after the first, per request.", latency);
  e2e_seconds_ = metrics_->GetHistogram("pdserve_router_e2e_seconds", "Time from the request to its last token.",
                                        latency);
  itl_seconds_ = metrics_->GetHistogram("pdserve_router_itl_seconds",
                                        "Time between streamed tokens, one observation per token after the first.",
                                        latency);
  prompt_tokens_ = metrics_->GetCounter("pdserve_router_prompt_tokens_total", "Prompt tokens of finished requests.");
  generated_tokens_ = metrics_->GetCounter("pdserve_router_generated_tokens_total", "Tokens streamed to clients.");
  retries_ = metrics_->GetCounter("pdserve_router_placement_retries_total",
                                  "Placements retried on another worker (UNAVAILABLE or RESOURCE_EXHAUSTED).");
  requeued_ = metrics_->GetCounter("pdserve_router_requeued_total",
                                   "Placements that found every worker full and went back to the queue.");
  local_prefills_ = metrics_->GetCounter("pdserve_router_local_prefills_total",
                                        "Requests prefilled on their decode worker (--local-prefill-max-tokens).");
  RequestsCounter(grpc::StatusCode::OK);
  if (options_.metrics != nullptr) {
    metrics_->AddCallbackGauge("pdserve_router_inflight_requests", "Generate calls in flight.", [this] {
      absl::MutexLock lock(&mu_);
      return static_cast<double>(inflight_);
    });
    metrics_->AddCallbackGauge("pdserve_router_queued_requests", "Generate calls waiting for a worker with room.",
                               [this] { return static_cast<double>(queue_.waiting()); });
    // The same reading under the name the autoscalers use (k8s/components/keda).
    metrics_->AddCallbackGauge("pdserve_router_requests_waiting",
                               "Requests waiting in the admission queue (the prefill autoscaling signal).",
                               [this] { return static_cast<double>(queue_.waiting()); });
  }
  for (const char* reason : kCompletionReasons) CompletionsCounter(reason);
}

Counter* RouterService::CompletionsCounter(const char* finish_reason) {
  return metrics_->GetCounter("pdserve_router_completions_total",
                              "Generate calls that ended, by finish reason (length, eos, stop; abort when the call "
                              "ended without one: error, cancel or deadline).",
                              {{"finish_reason", finish_reason}});
}

Counter* RouterService::RequestsCounter(grpc::StatusCode code) {
  return metrics_->GetCounter("pdserve_router_requests_total", "Generate calls by final status code.",
                              {{"code", GrpcCodeName(code)}});
}

void RouterService::EndInflight() {
  absl::MutexLock lock(&mu_);
  --inflight_;
}

RouterService::~RouterService() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return inflight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

grpc::ServerWriteReactor<GenerateResponse>* RouterService::Generate(grpc::CallbackServerContext* context,
                                                                    const pdserve::v1::GenerateRequest* request) {
  {
    // Counted from the start, so that the destructor also waits for a
    // handler that is still refusing its request.
    absl::MutexLock lock(&mu_);
    ++inflight_;
  }
  const absl::Status authorized = CheckApiKey(*context, options_.api_key);
  absl::StatusOr<std::vector<uint32_t>> prompt =
      authorized.ok() ? ValidateGenerateRequest(*request, config_, *tokenizer_, options_.limits) : authorized;
  auto call = QueuedWriter<GenerateResponse>::Create<GenerateCall>(
      this, context, *request, prompt.ok() ? std::move(*prompt) : std::vector<uint32_t>{}, UnguessableRequestId());
  call->BindContext(context);
  absl::StatusOr<AdmissionQueue::Ticket> ticket =
      prompt.ok() ? queue_.Enter(call->client()) : prompt.status();
  if (!ticket.ok()) {
    RequestsCounter(static_cast<grpc::StatusCode>(ticket.status().code()))->Increment();
    // A refusal's field travels as data: the trailer pdserve-param (the
    // OpenAI front's `param`, router/openai_status.h).
    const std::string field = ErrorField(ticket.status());
    if (field.empty()) {
      call->Close(ToGrpcStatus(ticket.status()));
    } else {
      call->Close(ToGrpcStatus(ticket.status()), kFieldTrailerKey, field);
    }
    if (options_.log_requests) call->LogRequest(ToGrpcStatus(ticket.status()));
    EndInflight();
    return call.get();
  }
  call->Start(std::move(*ticket));  // returns at once: the chain runs on callbacks
  return call.get();
}

grpc::ServerUnaryReactor* RouterService::Tokenize(grpc::CallbackServerContext* context,
                                                  const pdserve::v1::TokenizeRequest* request,
                                                  pdserve::v1::TokenizeResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    ++inflight_;
  }
  auto* reactor = context->DefaultReactor();
  const absl::Status authorized = CheckApiKey(*context, options_.api_key);
  absl::StatusOr<std::vector<uint32_t>> ids = authorized.ok() ? tokenizer_->Encode(request->text()) : authorized;
  if (ids.ok()) {
    response->mutable_token_ids()->Assign(ids->begin(), ids->end());
    // At most kMaxContext (2^24, config.h): fits the uint32 field.
    response->set_max_context(static_cast<uint32_t>(config_.max_context));
  }
  reactor->Finish(ToGrpcStatus(ids.status()));
  EndInflight();
  return reactor;
}

}  // namespace pdserve
