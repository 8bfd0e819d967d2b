#include "router/generate_call.h"

#include <algorithm>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/net/grpc_status.h"
#include "common/util/clock.h"
#include "common/util/log.h"
#include "router/placement_attempt.h"
#include "router/retry_policy.h"

namespace pdserve {

using internal::v1::DecodeResponse;
using pdserve::v1::FinishReason;
using pdserve::v1::GenerateResponse;

std::string UnguessableRequestId() {
  thread_local std::random_device rd;
  return absl::StrFormat("r-%08x%08x%08x%08x", rd(), rd(), rd(), rd());
}

std::string ClientOfCall(const grpc::ServerContextBase& context) {
  const std::string peer = context.peer();
  // A network peer is "ipv4:A:P", "ipv6:[A]:P" or "unix:PATH"; the
  // in-process channel's has no scheme ("unknown" in gRPC 1.51, "inproc"
  // elsewhere).
  if (peer.find(':') == std::string::npos) {
    const auto& md = context.client_metadata();
    const auto it = md.find("x-pdserve-client");
    if (it != md.end() && !it->second.empty()) return std::string(it->second.data(), std::min<size_t>(it->second.size(), 128));
  }
  return ClientOfPeer(peer);
}

RouterService::GenerateCall::GenerateCall(RouterService* service, grpc::CallbackServerContext* context,
                                          pdserve::v1::GenerateRequest request, std::vector<uint32_t> prompt,
                                          std::string internal_id)
    : service_(service),
      deadline_(context->deadline()),
      request_(std::move(request)),
      prompt_(std::move(prompt)),
      internal_id_(std::move(internal_id)),
      client_(ClientOfCall(*context)),
      tags_{MetadataSafeId(VisibleId()), RequestTags::FromMetadata(*context).traceparent},
      detok_(service->tokenizer_.get()),
      stops_({request_.sampling().stop().begin(), request_.sampling().stop().end()}),
      start_ns_(NowNs()) {
  context->AddInitialMetadata(kRequestIdKey, tags_.request_id);
  context->AddTrailingMetadata(kRequestIdKey, tags_.request_id);
}

std::string RouterService::GenerateCall::VisibleId() const {
  return request_.request_id().empty() ? internal_id_ : request_.request_id().substr(0, 128);
}

std::shared_ptr<RouterService::GenerateCall> RouterService::GenerateCall::Self() {
  return std::static_pointer_cast<GenerateCall>(shared_from_this());
}

// ---- Queue ----

void RouterService::GenerateCall::Start(AdmissionQueue::Ticket ticket) {
  ticket_ = std::move(ticket);
  {
    absl::MutexLock lock(&mu_);
    started_ = true;
  }
  WaitTurn();
}

void RouterService::GenerateCall::WaitTurn() {
  const absl::Time deadline = deadline_ == std::chrono::system_clock::time_point::max()
                                  ? absl::InfiniteFuture()
                                  : absl::FromChrono(deadline_);
  service_->queue_.Wait(ticket_, deadline, [self = Self()](absl::Status turn) { self->OnTurn(std::move(turn)); });
  // A client that left before the wait began (OnStreamGone's Cancel found
  // no wait) ends it now; a no-op when the turn already came.
  if (Gone()) service_->queue_.Cancel(ticket_);
}

void RouterService::GenerateCall::OnTurn(absl::Status turn) {
  if (!turn.ok()) {
    End(absl::IsCancelled(turn) ? GoneStatus() : ToGrpcStatus(turn));
    return;
  }
  // A fresh round of placements: any worker may be tried again, but one
  // whose whole KV budget is too small for this request.
  tried_decode_ = too_small_decode_;
  tried_prefill_.clear();
  attempts_ = 0;
  damaged_retry_taken_ = false;
  best_ = never_fits_.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "no attempt made") : never_fits_;
  best_rank_ = never_fits_.ok() ? -1 : Informativeness(never_fits_, /*synthetic=*/false);
  NextAttempt();
}

void RouterService::GenerateCall::NeverFitsOn(const std::string& decode, grpc::Status report) {
  tried_decode_.push_back(decode);
  too_small_decode_.push_back(decode);
  never_fits_ = std::move(report);
}

// ---- Placement ----

void RouterService::GenerateCall::NextAttempt() {
  if (Gone()) return EndPlacement(GoneStatus(), false);
  if (attempts_ >= service_->options_.max_attempts) {
    return EndPlacement(best_, best_.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  ++attempts_;
  ++total_attempts_;
  const std::vector<std::string> decoders = service_->decode_->Candidates(tried_decode_);
  if (decoders.empty()) {
    return OnAttemptOver({grpc::Status(grpc::StatusCode::UNAVAILABLE, tried_decode_.empty()
                                                                          ? "no healthy decode worker"
                                                                          : "no other healthy decode worker to retry on"),
                          /*retry=*/true, /*synthetic=*/true});
  }
  const bool local = static_cast<int64_t>(prompt_.size()) <= service_->options_.local_prefill_max_tokens;
  // Holds itself until it has concluded (OnAttemptOver).
  auto attempt = std::make_shared<PlacementAttempt>(Self(), decoders.front(), local);
  last_attempt_id_ = attempt->id();
  attempt->Start();
}

void RouterService::GenerateCall::OnAttemptOver(AttemptOutcome outcome) {
  if (!outcome.retry) return EndPlacement(std::move(outcome.status), false);
  const int rank = Informativeness(outcome.status, outcome.synthetic);
  if (rank > best_rank_) {
    best_ = std::move(outcome.status);
    best_rank_ = rank;
  }
  if (outcome.synthetic) {  // no worker left to try
    if (Gone()) return EndPlacement(GoneStatus(), false);
    return EndPlacement(best_, best_.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  service_->retries_->Increment();
  NextAttempt();
}

void RouterService::GenerateCall::EndPlacement(grpc::Status status, bool full) {
  if (!full || Gone()) {
    service_->queue_.Release();
    End(status);
    return;
  }
  // Every worker was full: wait for room, keeping the place in the queue.
  last_full_ = std::move(status);
  service_->queue_.Requeue(ticket_);
  service_->requeued_->Increment();
  WaitTurn();
}

void RouterService::GenerateCall::End(const grpc::Status& ended) {
  // A deadline that passed before any token, after a round that found every
  // worker full, names the capacity it waited for, whether it passed in the
  // queue or during a later placement attempt. A request no decode
  // worker's whole budget holds is RESOURCE_EXHAUSTED with its reason.
  const bool never_fits = NeverFitsOnThisDecode(ended.error_code()) && !never_fits_.ok();
  const grpc::Status status =
      never_fits ? NeverFitsStatus(ended)
      : ended.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && streamed_ == 0 && !last_full_.ok()
          ? grpc::Status(ended.error_code(), absl::StrCat(ended.error_message(), "; every worker was full, last: ",
                                                          last_full_.error_message()))
          : ended;
  service_->queue_.Leave(ticket_);
  // A relayed finish already closed with OK; only the first Close counts.
  if (never_fits) {
    Close(status, kReasonTrailerKey, kReasonKvBudgetExceeded);
  } else {
    Close(status);
  }
  if (service_->options_.log_requests) LogRequest(status);
  Record(status);
  service_->EndInflight();  // last: the service may go away after it
}

// ---- Client side ----

void RouterService::GenerateCall::OnStreamGone() {
  bool started;
  std::shared_ptr<PlacementAttempt> attempt;
  {
    absl::MutexLock lock(&mu_);
    gone_ = true;
    attempt = attempt_;
    started = started_;
  }
  // Outside mu_: the callbacks this sets off may run on this thread.
  if (attempt != nullptr) attempt->Cancel();
  // Ends a wait in the queue (its callback runs here); a no-op otherwise.
  if (started) service_->queue_.Cancel(ticket_);
}

bool RouterService::GenerateCall::Track(std::shared_ptr<PlacementAttempt> attempt) {
  absl::MutexLock lock(&mu_);
  attempt_ = std::move(attempt);
  return !gone_;
}

void RouterService::GenerateCall::Untrack() {
  std::shared_ptr<PlacementAttempt> last;  // released outside mu_
  absl::MutexLock lock(&mu_);
  last = std::move(attempt_);
}

bool RouterService::GenerateCall::Gone() {
  absl::MutexLock lock(&mu_);
  return gone_;
}

grpc::Status RouterService::GenerateCall::GoneStatus() const {
  if (deadline_ != std::chrono::system_clock::time_point::max() &&
      std::chrono::system_clock::now() + std::chrono::milliseconds(100) >= deadline_) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the request's deadline passed");
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
}

void RouterService::GenerateCall::SetDeadline(grpc::ClientContext* ctx) const {
  if (deadline_ != std::chrono::system_clock::time_point::max()) ctx->set_deadline(deadline_);
}

// ---- Relay ----

bool RouterService::GenerateCall::IsStopId(uint32_t id) const {
  const std::vector<uint32_t>& ids = service_->stop_ids_;
  return !request_.sampling().ignore_eos() && std::find(ids.begin(), ids.end(), id) != ids.end();
}

FinishReason RouterService::GenerateCall::RelayMessage(const DecodeResponse& msg, bool* stopped) {
  GenerateResponse out;
  *stopped = false;
  bool stop_id = false;  // a stop token (RouterService::stop_ids_) ended it: an EOS
  for (uint32_t id : msg.token_ids()) {
    if (*stopped || stop_id) break;
    out.add_token_ids(id);
    ++generated_;
    StopMatcher::Result r = stops_.Push(detok_.Push(id));
    out.mutable_text()->append(r.emit);
    *stopped = r.stopped;
    stop_id = !r.stopped && IsStopId(id);
  }
  FinishReason finish = *stopped    ? pdserve::v1::FINISH_REASON_STOP
                        : stop_id ? pdserve::v1::FINISH_REASON_EOS
                                  : msg.finish_reason();
  // A stop token before the worker's own finish: the decode worker must be
  // cancelled, as for a stop string (the text is flushed below).
  const bool cancel = *stopped || (stop_id && msg.finish_reason() == pdserve::v1::FINISH_REASON_UNSPECIFIED);
  if (finish != pdserve::v1::FINISH_REASON_UNSPECIFIED && !*stopped) {
    StopMatcher::Result r = stops_.Push(detok_.Flush());
    out.mutable_text()->append(r.emit);
    if (r.stopped) {
      finish = pdserve::v1::FINISH_REASON_STOP;
    } else {
      out.mutable_text()->append(stops_.Flush());
    }
  }
  *stopped = cancel;
  Emit(std::move(out), finish);
  return finish;
}

void RouterService::GenerateCall::Emit(GenerateResponse out, FinishReason finish) {
  const int64_t now = NowNs();
  const int tokens = out.token_ids_size();
  if (streamed_ == 0 && tokens > 0) ttft_ns_ = now - start_ns_;
  if (tokens > 0) ObserveInterTokenLatency(now, tokens);
  streamed_ += tokens;
  if (finish != pdserve::v1::FINISH_REASON_UNSPECIFIED) {
    finish_ = finish;
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

// ---- Accounting ----

void RouterService::GenerateCall::ObserveInterTokenLatency(int64_t now_ns, int tokens) {
  if (streamed_ == 0) {
    // The stream's first token has no predecessor; the rest of its message
    // arrived with it.
    for (int i = 1; i < tokens; ++i) service_->itl_seconds_->Observe(0);
  } else {
    // k tokens after a gap g: k tokens, g/k apart.
    const double each = (now_ns - last_token_ns_) * 1e-9 / tokens;
    for (int i = 0; i < tokens; ++i) service_->itl_seconds_->Observe(each);
  }
  last_token_ns_ = now_ns;
}

const char* RouterService::GenerateCall::FinishReasonLabel() const {
  switch (finish_) {
    case pdserve::v1::FINISH_REASON_LENGTH: return "length";
    case pdserve::v1::FINISH_REASON_EOS: return "eos";
    case pdserve::v1::FINISH_REASON_STOP: return "stop";
    default: return "abort";
  }
}

void RouterService::GenerateCall::Record(const grpc::Status& st) const {
  service_->RequestsCounter(st.error_code())->Increment();
  service_->CompletionsCounter(FinishReasonLabel())->Increment();
  service_->prompt_tokens_->Increment(static_cast<double>(prompt_.size()));
  service_->generated_tokens_->Increment(static_cast<double>(generated_));
  if (!st.ok() || generated_ == 0) return;
  const double e2e = (NowNs() - start_ns_) * 1e-9;
  service_->ttft_seconds_->Observe(ttft_ns_ * 1e-9);
  service_->e2e_seconds_->Observe(e2e);
  if (generated_ > 1) service_->tpot_seconds_->Observe((e2e - ttft_ns_ * 1e-9) / (generated_ - 1));
}

namespace {

// "stop", "length", "eos"; "" before a finish.
std::string FinishName(FinishReason finish) {
  if (finish == pdserve::v1::FINISH_REASON_UNSPECIFIED) return "";
  return absl::AsciiStrToLower(absl::StripPrefix(pdserve::v1::FinishReason_Name(finish), "FINISH_REASON_"));
}

}  // namespace

// One access-log line per request on stderr: in text the line below, in
// JSON its numbers as fields (docs/deploy.md, "Logs"). Client-chosen text
// (the request id, error messages quoting it) is escaped and bounded, so it
// cannot forge a line.
void RouterService::GenerateCall::LogRequest(const grpc::Status& st) const {
  const double ms = 1e-6;
  const int64_t e2e_ns = NowNs() - start_ns_;
  const std::string prefill = usage_.prefill_worker().empty() ? "-" : usage_.prefill_worker();
  const std::string decode = usage_.decode_worker().empty() ? "-" : usage_.decode_worker();
  const std::string error = st.error_message().substr(0, 512);
  if (log::CurrentFormat() == log::Format::kText) {
    const std::string client_id = request_.request_id().empty()
                                      ? ""
                                      : absl::StrCat(" (", absl::CHexEscape(request_.request_id().substr(0, 128)), ")");
    log::Info(absl::StrFormat("request %s%s from %s: %s, prompt %d, generated %d, ttft %.1f ms, e2e %.1f ms, "
                              "kv %d B in %.1f ms (exposed %.1f ms), %s -> %s%s%s",
                              internal_id_, client_id, absl::CHexEscape(client_), GrpcCodeName(st.error_code()), prompt_.size(), generated_,
                              ttft_ns_ * ms, e2e_ns * ms, usage_.kv_handoff_bytes(), usage_.kv_handoff_ns() * ms,
                              usage_.kv_handoff_exposed_ns() * ms, prefill, decode, st.ok() ? "" : ": ",
                              absl::CHexEscape(error)),
              {}, log::TextPrefix::None());
    return;
  }
  log::Fields f = {{"request_id", VisibleId()},
                   {"internal_id", internal_id_},
                   {"client", client_},
                   {"status", GrpcCodeName(st.error_code())},
                   {"prompt_tokens", prompt_.size()},
                   {"generated_tokens", generated_},
                   {"ttft_ms", log::Millis(ttft_ns_)},
                   {"e2e_ms", log::Millis(e2e_ns)},
                   {"attempts", total_attempts_},
                   {"prefill_worker", prefill},
                   {"decode_worker", decode},
                   {"kv_handoff_bytes", usage_.kv_handoff_bytes()},
                   {"kv_handoff_ms", log::Millis(usage_.kv_handoff_ns())}};
  if (generated_ > 1) f.emplace_back("tpot_ms", log::Millis((e2e_ns - ttft_ns_) / (generated_ - 1)));
  if (finish_ != pdserve::v1::FINISH_REASON_UNSPECIFIED) f.emplace_back("finish_reason", FinishName(finish_));
  if (!last_attempt_id_.empty()) f.emplace_back("worker_request_id", last_attempt_id_);
  if (!tags_.traceparent.empty()) f.emplace_back("traceparent", tags_.traceparent);
  if (!st.ok()) f.emplace_back("error", error);
  log::Info("request", f);
}

}  // namespace pdserve
