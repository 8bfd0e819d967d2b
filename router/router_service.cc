#include "router/router_service.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net/grpc_status.h"
#include "common/util/clock.h"
#include "common/net/queued_writer.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/stop_matcher.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {
namespace {

using internal::v1::DecodeResponse;
using pdserve::v1::FinishReason;
using pdserve::v1::GenerateResponse;


// Codes after which another worker may succeed.
bool Retryable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// A per-process prefix keeps internal request ids unique across router
// restarts (decode workers key their tables by them).
std::string ProcessPrefix() {
  std::random_device rd;
  return absl::StrFormat("%08x", rd());
}

}  // namespace

// One Generate call: the reactor the gRPC side sees, and the state the
// executor thread drives.
class RouterService::GenerateCall final : public QueuedWriter<GenerateResponse> {
 public:
  GenerateCall(RouterService* service, grpc::CallbackServerContext* context, pdserve::v1::GenerateRequest request,
               std::vector<uint32_t> prompt, std::string internal_id)
      : service_(service),
        deadline_(context->deadline()),
        request_(std::move(request)),
        prompt_(std::move(prompt)),
        internal_id_(std::move(internal_id)),
        detok_(service->tokenizer_.get()),
        stops_({request_.sampling().stop().begin(), request_.sampling().stop().end()}),
        start_ns_(NowNs()) {}

  // Runs on the executor thread until the call is over.
  void Run() {
    grpc::Status st = Drive();
    if (!st.ok()) Close(st);
    if (service_->options_.log_requests) Log(st);
    Record(st);
  }

 private:
  void OnStreamGone() override {
    absl::MutexLock lock(&mu_);
    gone_ = true;
    if (decode_ctx_ != nullptr) decode_ctx_->TryCancel();
    if (prefill_ctx_ != nullptr) prefill_ctx_->TryCancel();
  }

  bool Gone() {
    absl::MutexLock lock(&mu_);
    return gone_;
  }

  // Registers (or clears) the outgoing contexts the cancellation reaches.
  // Returns false when the client is already gone.
  bool Track(grpc::ClientContext* decode_ctx, grpc::ClientContext* prefill_ctx) {
    absl::MutexLock lock(&mu_);
    decode_ctx_ = decode_ctx;
    prefill_ctx_ = prefill_ctx;
    return !gone_;
  }

  void SetDeadline(grpc::ClientContext* ctx) const {
    if (deadline_ != std::chrono::system_clock::time_point::max()) ctx->set_deadline(deadline_);
  }

  grpc::Status Drive() {
    std::vector<std::string> tried_decode, tried_prefill;
    grpc::Status last(grpc::StatusCode::UNAVAILABLE, "no attempt made");
    for (int attempt = 0; attempt < service_->options_.max_attempts; ++attempt) {
      if (Gone()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      bool retry = false;
      last = Attempt(attempt, &tried_decode, &tried_prefill, &retry);
      if (!retry) return last;
      service_->retries_->Increment();
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("no worker could take the request after ", service_->options_.max_attempts,
                                     " attempts; last error: ", last.error_message()));
  }

  // One placement. Sets *retry when another worker pair may succeed.
  grpc::Status Attempt(int attempt, std::vector<std::string>* tried_decode, std::vector<std::string>* tried_prefill,
                       bool* retry) {
    const std::vector<std::string> decoders = service_->decode_->Candidates(*tried_decode);
    if (decoders.empty()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          tried_decode->empty() ? "no healthy decode worker"
                                                : "no other healthy decode worker to retry on");
    }
    const std::string& d = decoders.front();
    const std::string rid = absl::StrCat(internal_id_, ".", attempt);

    // 1. Reserve on the decode worker.
    grpc::ClientContext dctx;
    SetDeadline(&dctx);
    if (!Track(&dctx, nullptr)) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    internal::v1::DecodeRequest dreq;
    dreq.set_request_id(rid);
    dreq.set_max_new_tokens(request_.sampling().max_new_tokens());
    dreq.set_ignore_eos(request_.sampling().ignore_eos());
    dreq.set_prompt_len(prompt_.size());
    const bool local = static_cast<int64_t>(prompt_.size()) <= service_->options_.local_prefill_max_tokens;
    if (local) {
      dreq.set_prefill_locally(true);
      dreq.mutable_prompt_token_ids()->Assign(prompt_.begin(), prompt_.end());
      *dreq.mutable_sampling() = request_.sampling();
    }
    auto dstub = internal::v1::DecodeWorker::NewStub(service_->decode_->Channel(d));
    service_->decode_->ReportDispatched(d);
    auto reader = dstub->Decode(&dctx, dreq);
    DecodeResponse msg;
    grpc::Status st;
    if (!reader->Read(&msg) || !msg.admitted()) {
      st = reader->Finish();
      service_->decode_->ReportFinished(d);
      Track(nullptr, nullptr);
      if (st.ok()) st = grpc::Status(grpc::StatusCode::INTERNAL, "decode worker did not admit the request");
      if (Retryable(st.error_code())) {
        if (st.error_code() == grpc::StatusCode::UNAVAILABLE) service_->decode_->ReportFailure(d);
        tried_decode->push_back(d);
        *retry = true;
      }
      return Annotate(st, "decode worker", d);
    }

    if (local) {
      // The decode worker prefills: it is both workers of this request.
      service_->local_prefills_->Increment();
      usage_.set_prefill_worker(d);
      usage_.set_decode_worker(d);
      return RelayAndFinish(reader.get(), &dctx, d, tried_decode, retry);
    }

    // 2. Prefill, with the K/V going to `d`.
    const std::vector<std::string> prefillers = service_->prefill_->Candidates(*tried_prefill);
    if (prefillers.empty()) {
      dctx.TryCancel();
      reader->Finish();
      service_->decode_->ReportFinished(d);
      Track(nullptr, nullptr);
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, tried_prefill->empty()
                                                             ? "no healthy prefill worker"
                                                             : "no other healthy prefill worker to retry on");
    }
    const std::string& p = prefillers.front();
    grpc::ClientContext pctx;
    SetDeadline(&pctx);
    if (!Track(&dctx, &pctx)) {
      dctx.TryCancel();
      reader->Finish();
      service_->decode_->ReportFinished(d);
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    }
    internal::v1::PrefillRequest preq;
    preq.set_request_id(rid);
    preq.mutable_token_ids()->Assign(prompt_.begin(), prompt_.end());
    *preq.mutable_sampling() = request_.sampling();
    preq.set_decode_address(d);
    internal::v1::PrefillResponse presp;
    auto pstub = internal::v1::PrefillWorker::NewStub(service_->prefill_->Channel(p));
    service_->prefill_->ReportDispatched(p);
    st = pstub->Prefill(&pctx, preq, &presp);
    service_->prefill_->ReportFinished(p);
    Track(&dctx, nullptr);
    if (!st.ok()) {
      dctx.TryCancel();
      reader->Finish();
      service_->decode_->ReportFinished(d);
      Track(nullptr, nullptr);
      if (Retryable(st.error_code())) {
        // The prefill worker names the decode worker when it is the hand-off
        // that failed; then the decode worker is the one to avoid.
        if (absl::StrContains(st.error_message(), "decode worker")) {
          service_->decode_->ReportFailure(d);
          tried_decode->push_back(d);
        } else {
          if (st.error_code() == grpc::StatusCode::UNAVAILABLE) service_->prefill_->ReportFailure(p);
          tried_prefill->push_back(p);
        }
        *retry = true;
      }
      return Annotate(st, "prefill worker", p);
    }
    usage_.set_prefill_ns(presp.prefill_ns());
    usage_.set_kv_handoff_bytes(presp.kv_handoff_bytes());
    usage_.set_kv_handoff_ns(presp.kv_handoff_ns());
    usage_.set_kv_handoff_exposed_ns(presp.kv_handoff_exposed_ns());
    usage_.set_prefill_worker(p);
    usage_.set_decode_worker(d);
    return RelayAndFinish(reader.get(), &dctx, d, tried_decode, retry);
  }

  // 3. Relays tokens until a finish reason, a stop string or an error.
  // Sets *retry when nothing was streamed yet and another decode worker may
  // succeed.
  grpc::Status RelayAndFinish(grpc::ClientReader<DecodeResponse>* reader, grpc::ClientContext* dctx,
                              const std::string& d, std::vector<std::string>* tried_decode, bool* retry) {
    grpc::Status st = Relay(reader, dctx);
    service_->decode_->ReportFinished(d);
    Track(nullptr, nullptr);
    if (!st.ok() && streamed_ == 0 && Retryable(st.error_code()) && !Gone()) {
      if (st.error_code() == grpc::StatusCode::UNAVAILABLE) service_->decode_->ReportFailure(d);
      tried_decode->push_back(d);
      *retry = true;
    }
    return st;
  }

  void Record(const grpc::Status& st) const {
    service_->RequestsCounter(st.error_code())->Increment();
    service_->prompt_tokens_->Increment(static_cast<double>(prompt_.size()));
    service_->generated_tokens_->Increment(static_cast<double>(generated_));
    if (!st.ok() || generated_ == 0) return;
    const double e2e = (NowNs() - start_ns_) * 1e-9;
    service_->ttft_seconds_->Observe(ttft_ns_ * 1e-9);
    service_->e2e_seconds_->Observe(e2e);
    if (generated_ > 1) service_->tpot_seconds_->Observe((e2e - ttft_ns_ * 1e-9) / (generated_ - 1));
  }

  // One access-log line per request on stderr.
  void Log(const grpc::Status& st) const {
    const double ms = 1e-6;
    std::fprintf(stderr, "%s\n",
                 absl::StrFormat("request %s: %s, prompt %d, generated %d, ttft %.1f ms, e2e %.1f ms, "
                                 "kv %d B in %.1f ms (exposed %.1f ms), %s -> %s%s%s",
                                 internal_id_, GrpcCodeName(st.error_code()), prompt_.size(), generated_,
                                 ttft_ns_ * ms, (NowNs() - start_ns_) * ms, usage_.kv_handoff_bytes(),
                                 usage_.kv_handoff_ns() * ms, usage_.kv_handoff_exposed_ns() * ms,
                                 usage_.prefill_worker().empty() ? "-" : usage_.prefill_worker(),
                                 usage_.decode_worker().empty() ? "-" : usage_.decode_worker(),
                                 st.ok() ? "" : ": ", st.error_message())
                     .c_str());
  }

  static grpc::Status Annotate(const grpc::Status& st, const char* what, const std::string& address) {
    return grpc::Status(st.error_code(), absl::StrCat(what, " ", address, ": ", st.error_message()));
  }

  grpc::Status Relay(grpc::ClientReader<DecodeResponse>* reader, grpc::ClientContext* dctx) {
    DecodeResponse msg;
    while (reader->Read(&msg)) {
      GenerateResponse out;
      bool stopped = false;
      for (uint32_t id : msg.token_ids()) {
        if (stopped) break;
        out.add_token_ids(id);
        ++generated_;
        StopMatcher::Result r = stops_.Push(detok_.Push(id));
        out.mutable_text()->append(r.emit);
        stopped = r.stopped;
      }
      FinishReason finish = stopped ? pdserve::v1::FINISH_REASON_STOP : msg.finish_reason();
      if (finish != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
        if (!stopped) {
          StopMatcher::Result r = stops_.Push(detok_.Flush());
          out.mutable_text()->append(r.emit);
          if (r.stopped) {
            finish = pdserve::v1::FINISH_REASON_STOP;
          } else {
            out.mutable_text()->append(stops_.Flush());
          }
        }
        Emit(std::move(out), finish);
        if (stopped) dctx->TryCancel();  // the decode worker frees on cancel
        reader->Finish();
        Close(grpc::Status::OK);
        return grpc::Status::OK;
      }
      Emit(std::move(out), finish);
    }
    grpc::Status st = reader->Finish();
    if (Gone()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    if (st.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "decode stream ended without a finish reason");
    return Annotate(st, "decode worker", usage_.decode_worker());
  }

  void Emit(GenerateResponse out, FinishReason finish) {
    const int64_t now = NowNs();
    if (streamed_ == 0 && out.token_ids_size() > 0) ttft_ns_ = now - start_ns_;
    streamed_ += out.token_ids_size();
    if (finish != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
      out.set_finish_reason(finish);
      out.set_request_id(request_.request_id().empty() ? internal_id_ : request_.request_id());
      pdserve::v1::Usage* u = out.mutable_usage();
      *u = usage_;
      u->set_prompt_tokens(static_cast<uint32_t>(prompt_.size()));
      u->set_generated_tokens(static_cast<uint32_t>(generated_));
      u->set_ttft_ns(ttft_ns_);
      u->set_e2e_ns(now - start_ns_);
      if (generated_ > 1) u->set_tpot_ns((now - start_ns_ - ttft_ns_) / (generated_ - 1));
    }
    Send(std::move(out));
  }

  RouterService* service_;
  const std::chrono::system_clock::time_point deadline_;
  const pdserve::v1::GenerateRequest request_;
  const std::vector<uint32_t> prompt_;
  const std::string internal_id_;
  IncrementalDetokenizer detok_;
  StopMatcher stops_;
  const int64_t start_ns_;
  int64_t ttft_ns_ = 0;
  int64_t generated_ = 0;
  int64_t streamed_ = 0;
  pdserve::v1::Usage usage_;

  absl::Mutex mu_;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* decode_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* prefill_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
};

RouterService::RouterService(const ModelConfig& config, std::unique_ptr<Tokenizer> tokenizer, WorkerPool* prefill,
                             WorkerPool* decode, RouterOptions options)
    : config_(config),
      tokenizer_(std::move(tokenizer)),
      prefill_(prefill),
      decode_(decode),
      options_(std::move(options)) {
  metrics_ = options_.metrics != nullptr ? options_.metrics : &own_metrics_;
  const auto latency = ExponentialBuckets(0.001, 2, 18);  // 1 ms .. 131 s
  ttft_seconds_ = metrics_->GetHistogram("pdserve_router_ttft_seconds",
                                         "Time from the request to the first token leaving the router.", latency);
  tpot_seconds_ = metrics_->GetHistogram("pdserve_router_tpot_seconds",
                                         "Mean time between tokens after the first, per request.", latency);
  e2e_seconds_ = metrics_->GetHistogram("pdserve_router_e2e_seconds", "Time from the request to its last token.",
                                        latency);
  prompt_tokens_ = metrics_->GetCounter("pdserve_router_prompt_tokens_total", "Prompt tokens of finished requests.");
  generated_tokens_ = metrics_->GetCounter("pdserve_router_generated_tokens_total", "Tokens streamed to clients.");
  retries_ = metrics_->GetCounter("pdserve_router_placement_retries_total",
                                  "Placements retried on another worker (UNAVAILABLE or RESOURCE_EXHAUSTED).");
  local_prefills_ = metrics_->GetCounter("pdserve_router_local_prefills_total",
                                        "Requests prefilled on their decode worker (--local-prefill-max-tokens).");
  RequestsCounter(grpc::StatusCode::OK);
  if (options_.metrics != nullptr) {
    metrics_->AddCallbackGauge("pdserve_router_inflight_requests", "Generate calls in flight.", [this] {
      absl::MutexLock lock(&mu_);
      return static_cast<double>(inflight_);
    });
  }
}

Counter* RouterService::RequestsCounter(grpc::StatusCode code) {
  return metrics_->GetCounter("pdserve_router_requests_total", "Generate calls by final status code.",
                              {{"code", GrpcCodeName(code)}});
}

RouterService::~RouterService() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return inflight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

grpc::ServerWriteReactor<GenerateResponse>* RouterService::Generate(grpc::CallbackServerContext* context,
                                                                    const pdserve::v1::GenerateRequest* request) {
  static const std::string prefix = ProcessPrefix();
  absl::StatusOr<std::vector<uint32_t>> prompt =
      ValidateGenerateRequest(*request, config_, *tokenizer_, options_.limits);
  const std::string id = absl::StrCat(request->request_id().empty() ? "req" : request->request_id(), "-", prefix,
                                      "-", next_id_.fetch_add(1));
  auto call = QueuedWriter<GenerateResponse>::Create<GenerateCall>(
      this, context, *request, prompt.ok() ? std::move(*prompt) : std::vector<uint32_t>{}, id);
  if (!prompt.ok()) {
    RequestsCounter(static_cast<grpc::StatusCode>(prompt.status().code()))->Increment();
    call->Close(ToGrpcStatus(prompt.status()));
    return call.get();
  }
  {
    absl::MutexLock lock(&mu_);
    if (inflight_ >= options_.max_inflight) {
      RequestsCounter(grpc::StatusCode::RESOURCE_EXHAUSTED)->Increment();
      call->Close(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               absl::StrCat("the router has ", inflight_, " requests in flight, its limit")));
      return call.get();
    }
    ++inflight_;
  }
  // The executor: each request's placement and relay block on worker RPCs,
  // so they run on their own thread, never on a reactor callback.
  std::thread([this, call] {
    call->Run();
    absl::MutexLock lock(&mu_);
    --inflight_;
  }).detach();
  return call.get();
}

grpc::ServerUnaryReactor* RouterService::Tokenize(grpc::CallbackServerContext* context,
                                                  const pdserve::v1::TokenizeRequest* request,
                                                  pdserve::v1::TokenizeResponse* response) {
  auto* reactor = context->DefaultReactor();
  absl::StatusOr<std::vector<uint32_t>> ids = tokenizer_->Encode(request->text());
  if (!ids.ok()) {
    reactor->Finish(ToGrpcStatus(ids.status()));
    return reactor;
  }
  response->mutable_token_ids()->Assign(ids->begin(), ids->end());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace pdserve
