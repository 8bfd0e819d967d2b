#include "router/router_service.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
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

// Codes of a failed KV hand-off (the prefill worker marks them as the
// decode side's) after which another decode worker may succeed: the worker
// restarted and forgot the request (NOT_FOUND), refused or broke the stream.
bool RetryableOnAnotherDecode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::OK:
      return false;
    default:
      return true;
  }
}

// How much an attempt's status tells the client, for the final answer when
// every attempt failed: a worker that was full (capacity) says the most, a
// worker's own error next, the router's "no other worker to try" least.
int Informativeness(const grpc::Status& st, bool synthetic) {
  if (synthetic) return 0;
  if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) return 3;
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) return 1;
  return 2;
}

// An internal request id nobody can guess: workers key their tables by it,
// so knowing another request's id must not be possible.
std::string UnguessableId() {
  thread_local std::random_device rd;
  return absl::StrFormat("r-%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

// A decode worker's slot in the router's load accounting, released on
// every path (ReportFinished once).
class DecodeSlot {
 public:
  DecodeSlot(WorkerPool* pool, std::string address) : pool_(pool), address_(std::move(address)) {
    pool_->ReportDispatched(address_);
  }
  ~DecodeSlot() { pool_->ReportFinished(address_); }
  DecodeSlot(const DecodeSlot&) = delete;
  DecodeSlot& operator=(const DecodeSlot&) = delete;
  const std::string& address() const { return address_; }

 private:
  WorkerPool* pool_;
  const std::string address_;
};

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

  // Runs on the executor thread until the call is over. `ticket` is this
  // request's place in the admission queue.
  void Run(const AdmissionQueue::Ticket& ticket) {
    grpc::Status st = Queue(ticket);
    service_->queue_.Leave(ticket);
    if (!st.ok()) Close(st);
    if (service_->options_.log_requests) Log(st);
    Record(st);
  }

  // The status a client that went away gets: DEADLINE_EXCEEDED when its
  // deadline passed (the stream ends for that reason too), else CANCELLED.
  // gRPC's deadline timer may fire a little before this clock reaches the
  // deadline, so the last 100 ms before it count as the deadline.
  grpc::Status GoneStatus() const {
    if (deadline_ != std::chrono::system_clock::time_point::max() &&
        std::chrono::system_clock::now() + std::chrono::milliseconds(100) >= deadline_) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed");
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
  }

 private:
  void OnStreamGone() override {
    {
      absl::MutexLock lock(&mu_);
      gone_ = true;
      if (decode_ctx_ != nullptr) decode_ctx_->TryCancel();
      if (prefill_ctx_ != nullptr) prefill_ctx_->TryCancel();
    }
    service_->queue_.Wake();
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

  // Waits in the admission queue, places, and waits again when every
  // worker was full, until placed, failed or out of time.
  grpc::Status Queue(const AdmissionQueue::Ticket& ticket) {
    const absl::Time deadline = deadline_ == std::chrono::system_clock::time_point::max()
                                    ? absl::InfiniteFuture()
                                    : absl::FromChrono(deadline_);
    grpc::Status last_full;  // why the last placement found no room
    while (true) {
      absl::Status turn = service_->queue_.Acquire(ticket, deadline, [this] { return Gone(); });
      if (!turn.ok()) {
        grpc::Status why = absl::IsCancelled(turn) ? GoneStatus() : ToGrpcStatus(turn);
        if (why.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED || last_full.ok()) return why;
        return grpc::Status(why.error_code(), absl::StrCat(why.error_message(), "; every worker was full, last: ",
                                                           last_full.error_message()));
      }
      bool full = false;
      grpc::Status st = Drive(&full);
      if (!full || Gone()) {
        service_->queue_.Release();
        return st;
      }
      last_full = st;
      service_->queue_.Requeue(ticket);  // every worker was full: wait for room
      service_->requeued_->Increment();
    }
  }

  // Up to max_attempts placements. Sets *full when the best reason to stop
  // was capacity (RESOURCE_EXHAUSTED), so the request may wait for room.
  grpc::Status Drive(bool* full) {
    std::vector<std::string> tried_decode, tried_prefill;
    grpc::Status best(grpc::StatusCode::UNAVAILABLE, "no attempt made");
    int best_rank = -1;
    for (int attempt = 0; attempt < service_->options_.max_attempts; ++attempt) {
      if (Gone()) return GoneStatus();
      bool retry = false, synthetic = false;
      grpc::Status st = Attempt(&tried_decode, &tried_prefill, &retry, &synthetic);
      if (!retry) return st;
      const int rank = Informativeness(st, synthetic);
      if (rank > best_rank) {
        best = st;
        best_rank = rank;
      }
      if (synthetic) break;  // no worker left to try
      service_->retries_->Increment();
    }
    if (Gone()) return GoneStatus();
    *full = best.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    return best;
  }

  // The request as the decode worker's Decode call takes it.
  internal::v1::DecodeRequest MakeDecodeRequest(const std::string& rid, bool local) const {
    internal::v1::DecodeRequest dreq;
    dreq.set_request_id(rid);
    dreq.set_max_new_tokens(request_.sampling().max_new_tokens());
    dreq.set_ignore_eos(request_.sampling().ignore_eos());
    dreq.set_prompt_len(prompt_.size());
    if (local) {
      dreq.set_prefill_locally(true);
      dreq.mutable_prompt_token_ids()->Assign(prompt_.begin(), prompt_.end());
      *dreq.mutable_sampling() = request_.sampling();
    }
    return dreq;
  }

  // One placement. Sets *retry when another worker pair may succeed, and
  // *synthetic when no worker was left to try (the status is the router's).
  grpc::Status Attempt(std::vector<std::string>* tried_decode, std::vector<std::string>* tried_prefill, bool* retry,
                       bool* synthetic) {
    const std::vector<std::string> decoders = service_->decode_->Candidates(*tried_decode);
    if (decoders.empty()) {
      *retry = *synthetic = true;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, tried_decode->empty()
                                                             ? "no healthy decode worker"
                                                             : "no other healthy decode worker to retry on");
    }
    DecodeSlot slot(service_->decode_, decoders.front());
    const std::string& d = slot.address();
    const std::string rid = UnguessableId();

    // 1. Reserve on the decode worker.
    grpc::ClientContext dctx;
    SetDeadline(&dctx);
    if (!Track(&dctx, nullptr)) return GoneStatus();
    const bool local = static_cast<int64_t>(prompt_.size()) <= service_->options_.local_prefill_max_tokens;
    auto dstub = internal::v1::DecodeWorker::NewStub(service_->decode_->Channel(d));
    auto reader = dstub->Decode(&dctx, MakeDecodeRequest(rid, local));
    DecodeResponse msg;
    if (!reader->Read(&msg) || !msg.admitted()) {
      grpc::Status st = reader->Finish();
      Track(nullptr, nullptr);
      if (Gone()) return GoneStatus();
      if (st.ok()) st = grpc::Status(grpc::StatusCode::INTERNAL, "decode worker did not admit the request");
      if (Retryable(st.error_code()) || st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
          st.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
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
      return RelayAndFinish(reader.get(), &dctx, nullptr, d, tried_decode, retry);
    }
    return PrefillAndRelay(reader.get(), &dctx, d, rid, tried_decode, tried_prefill, retry, synthetic);
  }

  // 2. Prefill, with the K/V going to `d`, while watching the Decode
  // stream: if it breaks first (the decode worker died or restarted), the
  // prefill is cancelled at once and the decode worker is the one to avoid.
  grpc::Status PrefillAndRelay(grpc::ClientReader<DecodeResponse>* reader, grpc::ClientContext* dctx,
                               const std::string& d, const std::string& rid, std::vector<std::string>* tried_decode,
                               std::vector<std::string>* tried_prefill, bool* retry, bool* synthetic) {
    const std::vector<std::string> prefillers = service_->prefill_->Candidates(*tried_prefill);
    if (prefillers.empty()) {
      dctx->TryCancel();
      reader->Finish();
      Track(nullptr, nullptr);
      *retry = *synthetic = true;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, tried_prefill->empty()
                                                             ? "no healthy prefill worker"
                                                             : "no other healthy prefill worker to retry on");
    }
    const std::string& p = prefillers.front();
    grpc::ClientContext pctx;
    SetDeadline(&pctx);
    if (!Track(dctx, &pctx)) {
      dctx->TryCancel();
      reader->Finish();
      Track(nullptr, nullptr);
      return GoneStatus();
    }
    internal::v1::PrefillRequest preq;
    preq.set_request_id(rid);
    preq.mutable_token_ids()->Assign(prompt_.begin(), prompt_.end());
    *preq.mutable_sampling() = request_.sampling();
    preq.set_decode_address(d);
    internal::v1::PrefillResponse presp;
    auto pstub = internal::v1::PrefillWorker::NewStub(service_->prefill_->Channel(p));
    service_->prefill_->ReportDispatched(p);
    absl::Notification prefilled;
    grpc::Status pst;
    std::atomic<bool> decode_ended{false};
    pstub->async()->Prefill(&pctx, &preq, &presp, [&](grpc::Status s) {
      pst = std::move(s);
      // The K/V will not come: end the reservation (unless the Decode
      // stream already ended, whose own status must not be overwritten).
      if (!pst.ok() && !decode_ended.load()) dctx->TryCancel();
      prefilled.Notify();
    });
    // The first token arrives once the hand-off is committed; the stream
    // ends first when either side failed.
    DecodeResponse first;
    const bool got_first = reader->Read(&first);
    decode_ended = !got_first;
    if (!got_first) pctx.TryCancel();
    prefilled.WaitForNotification();
    service_->prefill_->ReportFinished(p);
    Track(dctx, nullptr);
    if (got_first) {
      if (pst.ok()) RecordPrefill(presp, p, d);
      return RelayAndFinish(reader, dctx, &first, d, tried_decode, retry);
    }
    const grpc::Status dst = reader->Finish();
    Track(nullptr, nullptr);
    if (Gone()) return GoneStatus();
    return AttributeFailure(pst, pctx, dst, *dctx, p, d, tried_decode, tried_prefill, retry);
  }

  // Neither the first token nor a placement: which side failed (as data:
  // the trailing metadata, or which stream broke first), which worker to
  // avoid, and the status to report.
  grpc::Status AttributeFailure(const grpc::Status& pst, const grpc::ClientContext& pctx, const grpc::Status& dst,
                                const grpc::ClientContext& dctx, const std::string& p, const std::string& d,
                                std::vector<std::string>* tried_decode, std::vector<std::string>* tried_prefill,
                                bool* retry) {
    if (pst.ok()) {
      // The hand-off was acknowledged, then the decode stream ended.
      if (!dst.ok() && Retryable(dst.error_code())) ExcludeDecode(d, dst, tried_decode, retry);
      return dst.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "decode stream ended without a token")
                      : Annotate(dst, "decode worker", d);
    }
    if (FailedSide(dctx) == "prefill") {
      // The decode worker saw the prefill worker's hand-off stream break.
      if (Retryable(dst.error_code())) ExcludePrefill(p, dst, tried_prefill, retry);
      return Annotate(dst, "decode worker", d);
    }
    const bool prefill_cancelled_by_us = pst.error_code() == grpc::StatusCode::CANCELLED && !dst.ok() &&
                                         dst.error_code() != grpc::StatusCode::CANCELLED;
    if (prefill_cancelled_by_us || FailedSide(pctx) == "decode") {
      // The decode side failed: its own stream's status when it broke
      // first, else the hand-off's error as the prefill worker saw it.
      grpc::Status why = prefill_cancelled_by_us ? dst : pst;
      if (why.error_code() == grpc::StatusCode::NOT_FOUND) {
        // An internal code: the decode worker restarted and forgot the
        // request. For the client that is an unavailable worker.
        why = grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("lost the request (it restarted?): ",
                                                                       why.error_message()));
      }
      if (RetryableOnAnotherDecode(why.error_code())) ExcludeDecode(d, why, tried_decode, retry);
      return prefill_cancelled_by_us ? Annotate(why, "decode worker", d)
                                     : Annotate(why, "prefill worker", p);
    }
    if (Retryable(pst.error_code())) ExcludePrefill(p, pst, tried_prefill, retry);
    return Annotate(pst, "prefill worker", p);
  }

  void ExcludePrefill(const std::string& p, const grpc::Status& why, std::vector<std::string>* tried_prefill,
                      bool* retry) {
    if (why.error_code() == grpc::StatusCode::UNAVAILABLE) service_->prefill_->ReportFailure(p);
    tried_prefill->push_back(p);
    *retry = true;
  }

  void ExcludeDecode(const std::string& d, const grpc::Status& why, std::vector<std::string>* tried_decode,
                     bool* retry) {
    if (why.error_code() == grpc::StatusCode::UNAVAILABLE || why.error_code() == grpc::StatusCode::NOT_FOUND) {
      service_->decode_->ReportFailure(d);
    }
    tried_decode->push_back(d);
    *retry = true;
  }

  void RecordPrefill(const internal::v1::PrefillResponse& presp, const std::string& p, const std::string& d) {
    usage_.set_prefill_ns(presp.prefill_ns());
    usage_.set_kv_handoff_bytes(presp.kv_handoff_bytes());
    usage_.set_kv_handoff_ns(presp.kv_handoff_ns());
    usage_.set_kv_handoff_exposed_ns(presp.kv_handoff_exposed_ns());
    usage_.set_prefill_worker(p);
    usage_.set_decode_worker(d);
  }

  // 3. Relays tokens until a finish reason, a stop string or an error.
  // Sets *retry when nothing was streamed yet and another decode worker may
  // succeed.
  grpc::Status RelayAndFinish(grpc::ClientReader<DecodeResponse>* reader, grpc::ClientContext* dctx,
                              const DecodeResponse* first, const std::string& d,
                              std::vector<std::string>* tried_decode, bool* retry) {
    if (usage_.decode_worker().empty()) usage_.set_decode_worker(d);
    grpc::Status st = Relay(reader, dctx, first);
    Track(nullptr, nullptr);
    if (!st.ok() && streamed_ == 0 && Retryable(st.error_code()) && !Gone()) {
      ExcludeDecode(d, st, tried_decode, retry);
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

  // One access-log line per request on stderr. Client-chosen text (the
  // request id, error messages quoting it) is escaped and bounded, so it
  // cannot forge a line.
  void Log(const grpc::Status& st) const {
    const double ms = 1e-6;
    const std::string client_id =
        request_.request_id().empty() ? "" : absl::StrCat(" (", absl::CHexEscape(request_.request_id().substr(0, 128)), ")");
    std::fprintf(stderr, "%s\n",
                 absl::StrFormat("request %s%s: %s, prompt %d, generated %d, ttft %.1f ms, e2e %.1f ms, "
                                 "kv %d B in %.1f ms (exposed %.1f ms), %s -> %s%s%s",
                                 internal_id_, client_id, GrpcCodeName(st.error_code()), prompt_.size(), generated_,
                                 ttft_ns_ * ms, (NowNs() - start_ns_) * ms, usage_.kv_handoff_bytes(),
                                 usage_.kv_handoff_ns() * ms, usage_.kv_handoff_exposed_ns() * ms,
                                 usage_.prefill_worker().empty() ? "-" : usage_.prefill_worker(),
                                 usage_.decode_worker().empty() ? "-" : usage_.decode_worker(),
                                 st.ok() ? "" : ": ", absl::CHexEscape(st.error_message().substr(0, 512)))
                     .c_str());
  }

  static grpc::Status Annotate(const grpc::Status& st, const char* what, const std::string& address) {
    return grpc::Status(st.error_code(), absl::StrCat(what, " ", address, ": ", st.error_message()));
  }

  grpc::Status Relay(grpc::ClientReader<DecodeResponse>* reader, grpc::ClientContext* dctx,
                     const DecodeResponse* first) {
    DecodeResponse msg;
    if (first != nullptr) msg = *first;
    while (first != nullptr || reader->Read(&msg)) {
      first = nullptr;
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
    if (Gone()) return GoneStatus();
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
      options_(std::move(options)),
      queue_(options_.queue) {
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
  absl::StatusOr<std::vector<uint32_t>> prompt =
      ValidateGenerateRequest(*request, config_, *tokenizer_, options_.limits);
  auto call = QueuedWriter<GenerateResponse>::Create<GenerateCall>(
      this, context, *request, prompt.ok() ? std::move(*prompt) : std::vector<uint32_t>{}, UnguessableId());
  call->BindContext(context);
  if (!prompt.ok()) {
    RequestsCounter(static_cast<grpc::StatusCode>(prompt.status().code()))->Increment();
    call->Close(ToGrpcStatus(prompt.status()));
    return call.get();
  }
  absl::StatusOr<AdmissionQueue::Ticket> ticket = queue_.Enter(ClientOfPeer(context->peer()));
  if (!ticket.ok()) {
    RequestsCounter(grpc::StatusCode::RESOURCE_EXHAUSTED)->Increment();
    call->Close(ToGrpcStatus(ticket.status()));
    return call.get();
  }
  {
    absl::MutexLock lock(&mu_);
    ++inflight_;
  }
  // The executor: each request's queueing, placement and relay block on
  // worker RPCs, so they run on their own thread, never on a reactor
  // callback.
  std::thread([this, call, t = std::move(*ticket)] {
    call->Run(t);
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
