#include "decode_service/batch_scheduler.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/model/cache_layout.h"
#include "common/net/grpc_status.h"
#include "common/util/status_macros.h"

namespace pdserve {

struct BatchScheduler::Entry {
  enum class State { kAwaitingKv, kLocalPrefill, kReceiving, kRunning, kDone };
  AdmitRequest request;
  uint64_t serial = 0;
  std::shared_ptr<TokenSink> sink;
  int64_t reserved_bytes = 0;
  int64_t allocated_bytes = 0;
  // Admission, then every hand-off chunk: the hand-off timeout runs from here.
  absl::Time last_progress;
  State state = State::kAwaitingKv;
  // kReceiving: the hand-off's buffers, freed when the entry goes.
  std::shared_ptr<KvReceiveBuffers> receive;
  // Running only. The step in flight holds a reference, so a cancelled
  // entry's cache lives until that step ends.
  std::unique_ptr<Sequence> seq;
  SamplingParams sampling;
  int64_t generated = 0;  // tokens emitted, the prefill's first included
  int64_t last_token = 0;
};

// One incoming hand-off, bound to its request by the header. The
// transport checks the chunks (chunk_receive_session.h); this side binds,
// keeps the hand-off's timeout alive and imports the result.
class BatchScheduler::ReceiveSession final : public KvReceiveSession {
 public:
  explicit ReceiveSession(BatchScheduler* owner) : owner_(owner) {}

  ~ReceiveSession() override {
    if (!ended_) AbortReceive(absl::CancelledError("the hand-off stream ended without a commit"));
  }

  absl::Status ReceiveHeader(const KvHandoffHeader& header, std::shared_ptr<KvReceiveBuffers> buffers) override {
    sampling_ = header.sampling;
    return owner_->AttachReceiver(header.request_id, header.prompt_len, header.total_bytes, std::move(buffers),
                                  &entry_);
  }

  void ReceiveProgress() override {
    if (entry_ != nullptr) owner_->NoteProgress(entry_);
  }

  absl::StatusOr<KvHandoffAck> FinishReceive(KvHandoffState state, uint32_t first_token) override {
    if (entry_ == nullptr) {  // the transport finishes only a bound hand-off
      const absl::Status unbound = absl::FailedPreconditionError("KV hand-off rejected: no header received");
      AbortReceive(unbound);
      return unbound;
    }
    ended_ = true;
    const KvHandoffAck ack{state.Bytes()};
    entry_->sampling = sampling_;
    owner_->m_.received_bytes->Increment(static_cast<double>(ack.received_bytes));
    owner_->CompleteHandoff(entry_, std::move(state), first_token);
    return ack;
  }

  // Counted once per hand-off: after FinishReceive the transport's abort is
  // a no-op.
  void AbortReceive(const absl::Status& why) override {
    if (ended_) return;
    ended_ = true;
    owner_->m_.handoff_rejections->Increment();
    if (entry_ != nullptr) owner_->FailRequest(entry_, why);
  }

 private:
  BatchScheduler* owner_;
  std::shared_ptr<Entry> entry_;
  SamplingParams sampling_;  // the header's, for the steps
  bool ended_ = false;
};

double KvUsageRatio(const SchedulerLoad& load, int64_t kv_budget_bytes) {
  if (kv_budget_bytes <= 0) return 0;
  return std::clamp(static_cast<double>(load.kv_bytes_used) / static_cast<double>(kv_budget_bytes), 0.0, 1.0);
}

BatchScheduler::BatchScheduler(const Engine* engine, BatchSchedulerOptions options)
    : engine_(engine), options_(std::move(options)) {
  InitMetrics();
}

void BatchScheduler::InitMetrics() {
  MetricsRegistry* r = options_.metrics != nullptr ? options_.metrics : &own_metrics_;
  // By FinishReason; "stop" is the router's (stop strings), never ended here.
  const char* reasons[] = {"unspecified", "length", "eos", "stop"};
  r->GetCounter("pdserve_decode_requests_total", "Decode requests that ended, by outcome.",
                {{"outcome", reasons[3]}});
  for (int i = 0; i < 3; ++i) {
    m_.finished[i] = r->GetCounter("pdserve_decode_requests_total", "Decode requests that ended, by outcome.",
                                   {{"outcome", reasons[i]}});
  }
  m_.failed = r->GetCounter("pdserve_decode_requests_total", "Decode requests that ended, by outcome.",
                            {{"outcome", "error"}});
  m_.cancelled = r->GetCounter("pdserve_decode_requests_total", "Decode requests that ended, by outcome.",
                               {{"outcome", "cancelled"}});
  m_.admission_rejections = r->GetCounter("pdserve_decode_admission_rejections_total",
                                          "Decode calls refused because the KV budget was full.");
  m_.handoff_rejections = r->GetCounter("pdserve_kv_handoff_rejections_total",
                                        "Hand-offs rejected or broken (bad chunk, wrong model, no admission).");
  m_.received_bytes = r->GetCounter("pdserve_kv_received_bytes_total", "K/V payload bytes received and accepted.");
  m_.generated_tokens = r->GetCounter("pdserve_decode_generated_tokens_total",
                                      "Tokens generated (the prefill's first token included).");
  m_.local_prefills = r->GetCounter("pdserve_decode_local_prefills_total",
                                    "Prompts prefilled on this decode worker (conditional local prefill).");
  m_.local_prefill_tokens = r->GetCounter("pdserve_decode_local_prefill_tokens_total",
                                          "Prompt tokens prefilled on this decode worker.");
  m_.steps = r->GetCounter("pdserve_decode_steps_total", "Batched decode steps run.");
  m_.batch_size = r->GetHistogram("pdserve_decode_batch_size", "Sequences per decode step.",
                                  ExponentialBuckets(1, 2, 8));
  m_.step_seconds = r->GetHistogram("pdserve_decode_step_seconds", "Wall time of one batched decode step.",
                                    LatencyBuckets());
  if (options_.metrics == nullptr) return;
  auto load = [this](int64_t SchedulerLoad::*field) {
    return [this, field] { return static_cast<double>(Load().*field); };
  };
  using L = SchedulerLoad;
  r->AddCallbackGauge("pdserve_decode_active_sequences", "Sequences admitted and not yet finished.",
                      load(&L::active_sequences));
  r->AddCallbackGauge("pdserve_decode_waiting_sequences", "Admitted sequences still waiting for their K/V.",
                      load(&L::queued_requests));
  r->AddCallbackGauge("pdserve_decode_kv_bytes_used", "KV bytes reserved by live sequences.",
                      load(&L::kv_bytes_used));
  r->AddCallbackGauge("pdserve_decode_kv_bytes_free", "KV bytes still admissible under the budget.",
                      load(&L::kv_bytes_free));
  r->AddCallbackGauge("pdserve_decode_kv_bytes_allocated", "KV bytes allocated to live sequences' caches.",
                      load(&L::kv_bytes_allocated));
  // The autoscaling signals (k8s/components/keda).
  r->AddCallbackGauge("pdserve_decode_kv_usage_ratio",
                      "KV bytes reserved by live sequences over the KV budget, 0 to 1 (the decode autoscaling signal).",
                      [this] { return KvUsageRatio(Load(), options_.kv_budget_bytes); });
  r->AddCallbackGauge("pdserve_decode_requests_running", "Sequences in the running decode batch.",
                      [this] {
                        const SchedulerLoad l = Load();
                        return static_cast<double>(l.active_sequences - l.queued_requests);
                      });
}

BatchScheduler::~BatchScheduler() { Shutdown(); }

void BatchScheduler::Start() { thread_ = std::thread([this] { Loop(); }); }

void BatchScheduler::Shutdown() {
  std::vector<std::shared_ptr<Entry>> live;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, e] : entries_) live.push_back(e);
  }
  for (auto& e : live) FailRequest(e, absl::UnavailableError("the decode worker is shutting down"));
}

int64_t BatchScheduler::ReservationBytes(int64_t prompt_len, int64_t max_new_tokens) const {
  return MixedKVCache::BytesFor(CacheLayout(engine_->config()), engine_->options().kv.dtype, prompt_len + max_new_tokens);
}

absl::Status BatchScheduler::NeverFits(const AdmitRequest& request, int64_t needed_bytes) const {
  const int64_t mib = int64_t{1} << 20;
  return absl::OutOfRangeError(absl::StrCat(
      "request ", request.request_id, " needs ", needed_bytes, " bytes of KV (", request.prompt_len, " prompt + ",
      request.max_new_tokens, " new tokens), more than this worker's whole KV budget of ", options_.kv_budget_bytes,
      " bytes (--kv-budget-mb ", options_.kv_budget_bytes / mib, "): it needs --kv-budget-mb ",
      (needed_bytes + mib - 1) / mib, " or more, or a shorter prompt"));
}

absl::StatusOr<RequestHandle> BatchScheduler::Admit(const AdmitRequest& request, std::shared_ptr<TokenSink> sink) {
  const ModelConfig& c = engine_->config();
  if (request.request_id.empty()) return absl::InvalidArgumentError("request_id is empty");
  if (request.prompt_len < 1 || request.max_new_tokens < 1 ||
      request.prompt_len + request.max_new_tokens > c.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt_len ", request.prompt_len, " + max_new_tokens ",
                                                   request.max_new_tokens, " must be within [2, max_context ",
                                                   c.max_context, "]"));
  }
  if (!request.local_prompt.empty()) {
    if (request.prompt_len > options_.local_prefill_max_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("local prefill of ", request.prompt_len,
                                                     " tokens is above this decode worker's limit of ",
                                                     options_.local_prefill_max_tokens,
                                                     " (--local-prefill-limit): send it through a prefill "
                                                     "worker"));
    }
    if (static_cast<int64_t>(request.local_prompt.size()) != request.prompt_len) {
      return absl::InvalidArgumentError(absl::StrCat("local prefill of ", request.local_prompt.size(),
                                                     " prompt ids, but prompt_len is ", request.prompt_len));
    }
    for (int64_t id : request.local_prompt) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")"));
      }
    }
  }
  auto e = std::make_shared<Entry>();
  e->request = request;
  if (!request.local_prompt.empty()) {
    e->state = Entry::State::kLocalPrefill;
    e->sampling = request.sampling;
  }
  e->sink = std::move(sink);
  e->reserved_bytes = ReservationBytes(request.prompt_len, request.max_new_tokens);
  e->last_progress = absl::Now();
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the decode worker is shutting down");
  if (entries_.contains(request.request_id)) {
    return absl::AlreadyExistsError(absl::StrCat("request ", request.request_id, " is already live here"));
  }
  if (e->reserved_bytes > options_.kv_budget_bytes) return NeverFits(request, e->reserved_bytes);
  if (reserved_bytes_ + e->reserved_bytes > options_.kv_budget_bytes) {
    m_.admission_rejections->Increment();
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV budget full: request ", request.request_id, " needs ", e->reserved_bytes, " bytes, ",
        options_.kv_budget_bytes - reserved_bytes_, " of ", options_.kv_budget_bytes, " are free"));
  }
  reserved_bytes_ += e->reserved_bytes;
  e->serial = next_serial_++;
  RequestHandle handle{request.request_id, e->serial};
  if (e->state == Entry::State::kLocalPrefill) local_queue_.push_back(e);
  entries_[request.request_id] = std::move(e);
  return handle;
}

void BatchScheduler::Cancel(const RequestHandle& handle) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(handle.request_id);
  if (it == entries_.end() || it->second->serial != handle.serial) return;
  RemoveLocked(std::shared_ptr<Entry>(it->second));
  m_.cancelled->Increment();
}

void BatchScheduler::NoteProgress(const std::shared_ptr<Entry>& e) {
  absl::MutexLock lock(&mu_);
  e->last_progress = absl::Now();
}

void BatchScheduler::RemoveLocked(const std::shared_ptr<Entry>& e) {
  if (e->state == Entry::State::kDone) return;
  auto it = entries_.find(e->request.request_id);
  if (it != entries_.end() && it->second == e) entries_.erase(it);
  running_.erase(std::remove(running_.begin(), running_.end(), e), running_.end());
  reserved_bytes_ -= e->reserved_bytes;
  allocated_bytes_ -= e->allocated_bytes;
  e->state = Entry::State::kDone;
  if (e->receive != nullptr) {
    e->receive->Drop(absl::CancelledError(
        absl::StrCat("KV hand-off abandoned: request ", e->request.request_id, " ended before its commit")));
    e->receive.reset();
  }
}

absl::StatusOr<std::unique_ptr<KvReceiveSession>> BatchScheduler::BeginReceive() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::UnavailableError("the decode worker is shutting down");
  }
  return std::make_unique<ReceiveSession>(this);
}

const ModelConfig& BatchScheduler::receive_config() const { return engine_->config(); }

KvReceiveLimits BatchScheduler::receive_limits() const {
  KvReceiveLimits limits;
  limits.model_fingerprint = options_.model_fingerprint;
  limits.max_prompt_len = engine_->config().max_context;
  // A hand-off never carries more than its request reserved.
  limits.max_total_bytes = options_.kv_budget_bytes;
  return limits;
}

absl::Status BatchScheduler::AttachReceiver(const std::string& request_id, int64_t prompt_len, int64_t total_bytes,
                                            std::shared_ptr<KvReceiveBuffers> buffers, std::shared_ptr<Entry>* out) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(request_id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("KV hand-off for request '", request_id,
                                            "', which no Decode call admitted on this worker"));
  }
  const std::shared_ptr<Entry>& e = it->second;
  if (e->state == Entry::State::kLocalPrefill) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV hand-off rejected: request ", request_id, " is prefilled on this decode worker"));
  }
  if (e->state != Entry::State::kAwaitingKv) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV hand-off rejected: request ", request_id, " already has a hand-off"));
  }
  if (prompt_len != e->request.prompt_len) {
    return absl::FailedPreconditionError(absl::StrCat("KV hand-off rejected: prompt_len ", prompt_len,
                                                      " differs from the admitted ", e->request.prompt_len));
  }
  if (total_bytes < 0 || total_bytes > e->reserved_bytes) {
    return absl::FailedPreconditionError(absl::StrCat("KV hand-off rejected: it declares ", total_bytes,
                                                      " bytes, more than request ", request_id, " reserved (",
                                                      e->reserved_bytes, ")"));
  }
  e->state = Entry::State::kReceiving;
  e->last_progress = absl::Now();
  e->receive = std::move(buffers);
  // The hand-off's buffers count as allocated until they are freed.
  e->allocated_bytes = total_bytes;
  allocated_bytes_ += total_bytes;
  *out = e;
  return absl::OkStatus();
}

void BatchScheduler::CompleteHandoff(const std::shared_ptr<Entry>& e, KvHandoffState state, uint32_t first_token) {
  {
    absl::MutexLock lock(&mu_);
    e->receive.reset();  // committed: the state below holds the tensors
  }
  auto seq = engine_->NewSequence();
  const int64_t reserve = e->request.prompt_len + e->request.max_new_tokens;
  const int64_t prompt_len = state.prompt_len;
  auto cache = MixedKVCache::Import(CacheLayout(engine_->config()), std::move(state), engine_->options().kv, reserve);
  if (!cache.ok()) {
    FailRequest(e, cache.status());
    return;
  }
  seq->cache = std::move(*cache);
  seq->pos = prompt_len;
  StartRunning(e, std::move(seq), first_token);
}

bool BatchScheduler::PrefillOneLocally() {
  std::shared_ptr<Entry> e;
  {
    absl::MutexLock lock(&mu_);
    while (!local_queue_.empty() && e == nullptr) {
      e = std::move(local_queue_.front());
      local_queue_.pop_front();
      if (e->state != Entry::State::kLocalPrefill) e = nullptr;  // cancelled while queued
    }
    if (e == nullptr) return false;
    e->state = Entry::State::kReceiving;  // from here on like a completed hand-off
  }
  auto seq = engine_->NewSequence();
  absl::Status st = seq->cache.Reserve(e->request.prompt_len + e->request.max_new_tokens);
  PrefillHooks hooks;
  hooks.check_cancelled = [this, &e]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    if (e->state == Entry::State::kDone) return absl::CancelledError("cancelled during local prefill");
    return absl::OkStatus();
  };
  absl::StatusOr<at::Tensor> logits =
      st.ok() ? engine_->Prefill(seq.get(), e->request.local_prompt, 0, &hooks) : absl::StatusOr<at::Tensor>(st);
  if (!logits.ok()) {
    FailRequest(e, logits.status());
    return true;
  }
  const auto first = static_cast<uint32_t>(engine_->Sample(*logits, e->sampling, 0));
  m_.local_prefills->Increment();
  m_.local_prefill_tokens->Increment(static_cast<double>(e->request.prompt_len));
  StartRunning(e, std::move(seq), first);
  return true;
}

void BatchScheduler::StartRunning(const std::shared_ptr<Entry>& e, std::unique_ptr<Sequence> seq,
                                  uint32_t first_token) {
  const ModelConfig& c = engine_->config();
  FinishReason finish = FinishReason::kNone;
  {
    absl::MutexLock lock(&mu_);
    if (e->state != Entry::State::kReceiving) return;  // cancelled meanwhile
    allocated_bytes_ -= e->allocated_bytes;  // the hand-off's buffers, now freed
    e->allocated_bytes = seq->cache.AllocatedBytes();
    allocated_bytes_ += e->allocated_bytes;
    e->seq = std::move(seq);
    e->last_token = first_token;
    e->generated = 1;
    if (e->request.max_new_tokens == 1) {
      finish = FinishReason::kLength;
    } else if (!e->request.ignore_eos && c.IsStopToken(first_token)) {
      finish = FinishReason::kEos;
    }
    if (finish != FinishReason::kNone) RemoveLocked(e);
  }
  // The first token goes out before the sequence can join a step, so that
  // the loop's second token never overtakes it.
  m_.generated_tokens->Increment();
  if (finish != FinishReason::kNone) m_.finished[static_cast<int>(finish)]->Increment();
  e->sink->OnTokens({first_token}, finish);
  if (finish != FinishReason::kNone) return;
  absl::MutexLock lock(&mu_);
  if (e->state != Entry::State::kReceiving) return;  // cancelled meanwhile
  e->state = Entry::State::kRunning;
  running_.push_back(e);
}

void BatchScheduler::FailRequest(const std::shared_ptr<Entry>& e, const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (e->state == Entry::State::kDone) return;
    RemoveLocked(e);
  }
  m_.failed->Increment();
  e->sink->OnError(status);
}

SchedulerLoad BatchScheduler::Load() const {
  SchedulerLoad r;
  absl::MutexLock lock(&mu_);
  r.active_sequences = static_cast<int64_t>(entries_.size());
  r.queued_requests = static_cast<int64_t>(entries_.size() - running_.size());
  r.kv_bytes_used = reserved_bytes_;
  r.kv_bytes_free = std::max<int64_t>(0, options_.kv_budget_bytes - reserved_bytes_);
  r.kv_bytes_allocated = allocated_bytes_;
  r.last_batch_size = last_batch_;
  r.max_batch_size = max_batch_seen_;
  r.decode_steps = static_cast<int64_t>(steps_);
  return r;
}

absl::Status BatchScheduler::StaleHandoffLocked(const Entry& e) const {
  // The prefill side stalled or died: UNAVAILABLE, marked as its failure,
  // so that the router places the request on another prefill worker.
  const std::string timeout = absl::StrCat(absl::FormatDuration(options_.handoff_timeout), " (--handoff-timeout-s)");
  if (e.state == Entry::State::kAwaitingKv) {
    // No header came. A prefill worker opens the hand-off of a prompt it
    // queues and heartbeats it, so this one never got the prompt or is
    // stuck: not proof that it is unhealthy, so the router only avoids it
    // for this request.
    return MarkFailedSide(MarkHandoffNotBegun(absl::UnavailableError(absl::StrCat(
                              "KV hand-off for request ", e.request.request_id, " never began within ", timeout))),
                          "prefill");
  }
  return MarkFailedSide(absl::UnavailableError(absl::StrCat("KV hand-off for request ", e.request.request_id,
                                                            " made no progress for ", timeout)),
                        "prefill");
}

void BatchScheduler::ExpireStale() {
  std::vector<std::pair<std::shared_ptr<Entry>, absl::Status>> stale;
  const absl::Time cutoff = absl::Now() - options_.handoff_timeout;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, e] : entries_) {
      // Local prefills wait for the loop, not for a hand-off.
      if ((e->state == Entry::State::kAwaitingKv || e->state == Entry::State::kReceiving) &&
          e->last_progress < cutoff) {
        stale.emplace_back(e, StaleHandoffLocked(*e));
      }
    }
  }
  for (auto& [e, why] : stale) FailRequest(e, why);
}

void BatchScheduler::Loop() {
  absl::Time last_expiry = absl::Now();
  while (true) {
    std::vector<std::shared_ptr<Entry>> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || !running_.empty() || !local_queue_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(100));
      if (stopping_) return;
      const int64_t n = static_cast<int64_t>(running_.size());
      const int64_t take = std::min<int64_t>(n, options_.max_batch);
      // Rotate the start so that a queue longer than max_batch shares steps.
      for (int64_t i = 0; i < take; ++i) batch.push_back(running_[(rotate_ + i) % n]);
      if (n > take) rotate_ = (rotate_ + take) % n;
    }
    if (absl::Now() - last_expiry > absl::Seconds(1)) {
      ExpireStale();
      last_expiry = absl::Now();
    }
    if (!batch.empty()) Step(batch);
    // One local prefill per step: the running streams pay at most one short
    // prompt's prefill per token (the prompts are short by the router's rule).
    PrefillOneLocally();
  }
}

void BatchScheduler::Step(const std::vector<std::shared_ptr<Entry>>& batch) {
  std::vector<Sequence*> seqs;
  std::vector<int64_t> tokens;
  for (const auto& e : batch) {
    seqs.push_back(e->seq.get());
    tokens.push_back(e->last_token);
  }
  const absl::Time t0 = absl::Now();
  absl::StatusOr<at::Tensor> logits = engine_->DecodeStep(seqs, tokens);
  if (!logits.ok()) {
    for (const auto& e : batch) FailRequest(e, logits.status());
    return;
  }
  const ModelConfig& c = engine_->config();
  std::vector<std::pair<std::shared_ptr<Entry>, FinishReason>> emit;
  {
    absl::MutexLock lock(&mu_);
    ++steps_;
    last_batch_ = static_cast<uint32_t>(batch.size());
    max_batch_seen_ = std::max(max_batch_seen_, last_batch_);
  }
  std::vector<SamplingParams> sampling;
  std::vector<uint64_t> draw;  // each sequence's n: its tokens so far
  for (const auto& e : batch) {
    sampling.push_back(e->sampling);
    draw.push_back(static_cast<uint64_t>(e->generated));
  }
  const std::vector<int64_t> sampled = engine_->SampleRows(*logits, sampling, draw);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto& e = batch[i];
    const int64_t tok = sampled[i];
    absl::MutexLock lock(&mu_);
    if (e->state != Entry::State::kRunning) continue;  // cancelled during the step
    e->last_token = tok;
    ++e->generated;
    FinishReason finish = FinishReason::kNone;
    if (!e->request.ignore_eos && c.IsStopToken(tok)) {
      finish = FinishReason::kEos;
    } else if (e->generated >= e->request.max_new_tokens) {
      finish = FinishReason::kLength;
    }
    if (finish != FinishReason::kNone) RemoveLocked(e);
    emit.emplace_back(e, finish);
  }
  m_.steps->Increment();
  m_.batch_size->Observe(static_cast<double>(batch.size()));
  m_.step_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - t0));
  m_.generated_tokens->Increment(static_cast<double>(emit.size()));
  for (auto& [e, finish] : emit) {
    if (finish != FinishReason::kNone) m_.finished[static_cast<int>(finish)]->Increment();
    e->sink->OnTokens({static_cast<uint32_t>(e->last_token)}, finish);
  }
}

}  // namespace pdserve
