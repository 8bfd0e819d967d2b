#include "router/placement_attempt.h"

#include "absl/strings/str_cat.h"
#include "common/net/grpc_status.h"
#include "router/retry_policy.h"

namespace pdserve {

using internal::v1::DecodeResponse;

RouterService::PlacementAttempt::PlacementAttempt(std::shared_ptr<GenerateCall> call, std::string decode_address,
                                                  bool local)
    : call_(std::move(call)),
      service_(call_->service()),
      d_(std::move(decode_address)),
      local_(local),
      rid_(UnguessableRequestId()) {
  decode_lease_.emplace(service_->decode_, d_);
}

internal::v1::DecodeRequest RouterService::PlacementAttempt::MakeDecodeRequest() const {
  const pdserve::v1::GenerateRequest& request = call_->request();
  const std::vector<uint32_t>& prompt = call_->prompt();
  internal::v1::DecodeRequest dreq;
  dreq.set_request_id(rid_);
  dreq.set_max_new_tokens(request.sampling().max_new_tokens());
  dreq.set_ignore_eos(request.sampling().ignore_eos());
  dreq.set_prompt_len(prompt.size());
  if (local_) {
    dreq.set_prefill_locally(true);
    dreq.mutable_prompt_token_ids()->Assign(prompt.begin(), prompt.end());
    *dreq.mutable_sampling() = request.sampling();
  }
  return dreq;
}

// ---- The two calls ----

void RouterService::PlacementAttempt::Start() {
  self_ = shared_from_this();
  if (!call_->Track(self_)) {  // the client already left: no call at all
    absl::MutexLock lock(&mu_);
    early_ = AttemptOutcome{call_->GoneStatus()};
    calls_open_ = 1;
  } else {
    call_->SetDeadline(&dctx_);
    call_->tags().AddTo(&dctx_);
    dreq_ = MakeDecodeRequest();
    dstub_ = internal::v1::DecodeWorker::NewStub(service_->decode_->Channel(d_));
    dstub_->async()->Decode(&dctx_, &dreq_, this);
    StartRead(&msg_);
    StartCall();
    return;
  }
  OneCallOver();
}

void RouterService::PlacementAttempt::Cancel() {
  dctx_.TryCancel();
  pctx_.TryCancel();  // before the prefill starts: it starts cancelled
}

void RouterService::PlacementAttempt::StartPrefill() {
  const std::vector<std::string> prefillers = service_->prefill_->Candidates(*call_->tried_prefill());
  std::optional<AttemptOutcome> early;
  if (prefillers.empty()) {
    early = AttemptOutcome{grpc::Status(grpc::StatusCode::UNAVAILABLE, call_->tried_prefill()->empty()
                                                                           ? "no healthy prefill worker"
                                                                           : "no other healthy prefill worker to "
                                                                             "retry on"),
                           /*retry=*/true, /*synthetic=*/true};
  } else if (call_->Gone()) {
    early = AttemptOutcome{call_->GoneStatus()};
  }
  if (early.has_value()) {
    {
      absl::MutexLock lock(&mu_);
      // No prefill call, so no OnPrefillDone: count the prefill as failed,
      // so that a token that still comes is dropped (OnMessage), never held.
      prefill_done_ = true;
      pst_ = early->status;
      early_ = std::move(early);
    }
    dctx_.TryCancel();  // ends the reservation; OnDone concludes
    return;
  }
  p_ = prefillers.front();
  call_->SetDeadline(&pctx_);
  call_->tags().AddTo(&pctx_);
  preq_.set_request_id(rid_);
  preq_.mutable_token_ids()->Assign(call_->prompt().begin(), call_->prompt().end());
  *preq_.mutable_sampling() = call_->request().sampling();
  preq_.set_decode_address(d_);
  pstub_ = internal::v1::PrefillWorker::NewStub(service_->prefill_->Channel(p_));
  prefill_lease_.emplace(service_->prefill_, p_);
  {
    absl::MutexLock lock(&mu_);
    ++calls_open_;
  }
  pstub_->async()->Prefill(&pctx_, &preq_, &presp_, [this](grpc::Status s) { OnPrefillDone(std::move(s)); });
}

void RouterService::PlacementAttempt::OnReadDone(bool ok) {
  Next next;
  {
    absl::MutexLock lock(&mu_);
    if (ok) {
      next = OnMessage();
    } else if (phase_ == Phase::kFirstToken) {
      // The stream broke before the first token (the decode worker died,
      // restarted or refused the hand-off): stop the prefill at once.
      decode_ended_ = true;
      next.cancel_prefill = true;
    }
    // Otherwise the stream is over; OnDone follows.
  }
  Do(next);
}

RouterService::PlacementAttempt::Next RouterService::PlacementAttempt::OnMessage() {
  Next next;
  next.read = true;
  switch (phase_) {
    case Phase::kAdmit:
      if (!msg_.admitted()) break;  // not admitted: OnDone gives the reason
      admitted_ = true;
      if (local_) {
        // The decode worker prefills: it is both workers of this request.
        service_->local_prefills_->Increment();
        call_->usage()->set_prefill_worker(d_);
        call_->usage()->set_decode_worker(d_);
        phase_ = Phase::kRelay;
      } else {
        phase_ = Phase::kFirstToken;
        next.start_prefill = true;  // the stream is watched meanwhile
      }
      break;
    case Phase::kFirstToken:
      // The prefill failed before any token came, and OnPrefillDone is
      // cancelling this stream: its late tokens are dropped, unseen by the
      // client, and the attempt fails over (AttributeFailure).
      if (prefill_done_ && !pst_.ok()) break;
      phase_ = Phase::kRelay;
      if (!prefill_done_) {
        // Until the prefill's answer, with no read meanwhile. The hold keeps
        // the stream alive for the read OnPrefillDone starts from outside
        // this reactor's callbacks (a cancel there would otherwise let
        // OnDone free it first). gRPC asks for holds before StartCall so
        // that OnDone cannot have run already; inside OnReadDone it cannot
        // either: this read's own count is released only after we return.
        held_ = std::move(msg_);
        AddHold();
        next.read = false;
        break;
      }
      RecordPrefill();
      Relay(msg_, &next);
      break;
    case Phase::kRelay:
      Relay(msg_, &next);
      break;
  }
  return next;
}

void RouterService::PlacementAttempt::OnPrefillDone(grpc::Status status) {
  prefill_lease_.reset();
  Next next;
  {
    absl::MutexLock lock(&mu_);
    pst_ = std::move(status);
    prefill_done_ = true;
    // A failed prefill whose K/V never reached the decode worker: end the
    // reservation (unless the Decode stream already ended, whose own status
    // must not be overwritten). A first token already held proves the
    // opposite: the decode worker took the whole checksummed hand-off, and
    // only the prefill's answer was lost (its worker died or stalled past
    // the push), so the stream goes on.
    if (!pst_.ok() && !decode_ended_ && !held_.has_value()) next.cancel_decode = true;
    if (held_.has_value()) {
      RecordPrefill();
      const DecodeResponse first = std::move(*held_);
      held_.reset();
      Relay(first, &next);
      next.read = true;  // the hold kept OnDone away: the stream is still open
      next.remove_hold = true;
    }
    next.call_over = true;
  }
  Do(next);
}

void RouterService::PlacementAttempt::OnDone(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    dst_ = status;
  }
  OneCallOver();
}

void RouterService::PlacementAttempt::Do(const Next& next) {
  if (next.start_prefill) StartPrefill();
  if (next.cancel_decode) dctx_.TryCancel();
  if (next.cancel_prefill) pctx_.TryCancel();
  if (next.read) StartRead(&msg_);
  if (next.remove_hold) RemoveHold();  // after the read: OnDone waits for it
  if (next.call_over) OneCallOver();  // may end this attempt: last
}

bool RouterService::PlacementAttempt::Relay(const DecodeResponse& msg, Next* next) {
  if (call_->usage()->decode_worker().empty()) call_->usage()->set_decode_worker(d_);
  if (finished_) return true;  // nothing follows a finish reason
  bool stopped = false;
  if (call_->RelayMessage(msg, &stopped) == pdserve::v1::FINISH_REASON_UNSPECIFIED) return false;
  finished_ = true;
  if (stopped) next->cancel_decode = true;  // the decode worker frees on cancel
  return true;
}

// The prefill's numbers are zero when its answer was lost (OnPrefillDone).
void RouterService::PlacementAttempt::RecordPrefill() {
  pdserve::v1::Usage* usage = call_->usage();
  usage->set_prefill_ns(presp_.prefill_ns());
  usage->set_kv_handoff_bytes(presp_.kv_handoff_bytes());
  usage->set_kv_handoff_ns(presp_.kv_handoff_ns());
  usage->set_kv_handoff_exposed_ns(presp_.kv_handoff_exposed_ns());
  usage->set_prefill_worker(p_);
  usage->set_decode_worker(d_);
}

// ---- The outcome ----

void RouterService::PlacementAttempt::OneCallOver() {
  {
    absl::MutexLock lock(&mu_);
    if (--calls_open_ > 0) return;
  }
  const std::shared_ptr<PlacementAttempt> self = std::move(self_);  // this lives until the return
  call_->Untrack();
  AttemptOutcome outcome = Conclude();
  decode_lease_.reset();  // before the next attempt picks a worker
  call_->OnAttemptOver(std::move(outcome));
}

AttemptOutcome RouterService::PlacementAttempt::Conclude() {
  absl::MutexLock lock(&mu_);
  if (early_.has_value()) return *early_;
  if (!admitted_) return AdmitFailure();
  if (phase_ == Phase::kRelay) return RelayEnd();
  if (call_->Gone()) return {call_->GoneStatus()};
  return AttributeFailure();
}

AttemptOutcome RouterService::PlacementAttempt::AdmitFailure() {
  if (call_->Gone()) return {call_->GoneStatus()};
  grpc::Status st = dst_;
  if (st.ok()) st = grpc::Status(grpc::StatusCode::INTERNAL, "decode worker did not admit the request");
  const grpc::StatusCode code = st.error_code();
  const grpc::Status report = Annotate(st, "decode worker", d_);
  if (!Retryable(code) && code != grpc::StatusCode::FAILED_PRECONDITION && code != grpc::StatusCode::OUT_OF_RANGE) {
    return {report};
  }
  if (code == grpc::StatusCode::UNAVAILABLE) service_->decode_->ReportFailure(d_);
  if (NeverFitsOnThisDecode(code)) {
    call_->NeverFitsOn(d_, report);  // out for every later round too
  } else {
    call_->tried_decode()->push_back(d_);
  }
  return {report, /*retry=*/true};
}

// The relay ended: OK after a finish reason; otherwise the stream's error,
// retried on another decode worker while nothing was streamed yet.
AttemptOutcome RouterService::PlacementAttempt::RelayEnd() {
  if (finished_) return {grpc::Status::OK};
  if (call_->Gone()) return {call_->GoneStatus()};
  const grpc::Status st =
      dst_.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "decode stream ended without a finish reason")
                : Annotate(dst_, "decode worker", call_->usage()->decode_worker());
  if (!st.ok() && call_->streamed() == 0 && Retryable(st.error_code())) return ExcludeDecode(st, st);
  return {st};
}

// Neither the first token nor a placement: which side failed (as data:
// the trailing metadata, or which stream broke first), which worker to
// avoid, and the status to report.
AttemptOutcome RouterService::PlacementAttempt::AttributeFailure() {
  if (pst_.ok()) {
    // The hand-off was acknowledged, then the decode stream ended.
    if (dst_.ok()) return {grpc::Status(grpc::StatusCode::INTERNAL, "decode stream ended without a token")};
    const grpc::Status report = Annotate(dst_, "decode worker", d_);
    return Retryable(dst_.error_code()) ? ExcludeDecode(dst_, report) : AttemptOutcome{report};
  }
  if (FailedSide(dctx_) == "prefill") {
    // The decode worker saw the prefill worker's hand-off stream break, or
    // never begin.
    const grpc::Status report = Annotate(dst_, "decode worker", d_);
    return Retryable(dst_.error_code()) ? ExcludePrefill(dst_, report, HandoffNotBegun(dctx_))
                                        : AttemptOutcome{report};
  }
  const bool prefill_cancelled_by_us = pst_.error_code() == grpc::StatusCode::CANCELLED && !dst_.ok() &&
                                       dst_.error_code() != grpc::StatusCode::CANCELLED;
  if (prefill_cancelled_by_us || FailedSide(pctx_) == "decode") {
    // The decode side failed: its own stream's status when it broke first,
    // else the hand-off's error as the prefill worker saw it.
    grpc::Status why = prefill_cancelled_by_us ? dst_ : pst_;
    if (why.error_code() == grpc::StatusCode::NOT_FOUND) {
      // An internal code: the decode worker restarted and forgot the
      // request. For the client that is an unavailable worker.
      why = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         absl::StrCat("lost the request (it restarted?): ", why.error_message()));
    }
    const grpc::Status report =
        prefill_cancelled_by_us ? Annotate(why, "decode worker", d_) : Annotate(why, "prefill worker", p_);
    if (DamagedHandoff(why.error_code()) && call_->TakeDamagedHandoffRetry()) {
      return {report, /*retry=*/true};  // damage in transit: any pair, this one included, may succeed
    }
    return RetryableOnAnotherDecode(why.error_code()) ? ExcludeDecode(why, report) : AttemptOutcome{report};
  }
  const grpc::Status report = Annotate(pst_, "prefill worker", p_);
  return Retryable(pst_.error_code()) ? ExcludePrefill(pst_, report) : AttemptOutcome{report};
}

AttemptOutcome RouterService::PlacementAttempt::ExcludePrefill(grpc::Status why, grpc::Status report,
                                                               bool busy_only) {
  if (why.error_code() == grpc::StatusCode::UNAVAILABLE && !busy_only) service_->prefill_->ReportFailure(p_);
  call_->tried_prefill()->push_back(p_);
  return {std::move(report), /*retry=*/true};
}

AttemptOutcome RouterService::PlacementAttempt::ExcludeDecode(grpc::Status why, grpc::Status report) {
  if (why.error_code() == grpc::StatusCode::UNAVAILABLE || why.error_code() == grpc::StatusCode::NOT_FOUND) {
    service_->decode_->ReportFailure(d_);
  }
  call_->tried_decode()->push_back(d_);
  return {std::move(report), /*retry=*/true};
}

}  // namespace pdserve
