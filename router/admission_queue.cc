#include "router/admission_queue.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

AdmissionQueue::AdmissionQueue(AdmissionQueueOptions options)
    : options_(options), timer_([this] { TimerLoop(); }) {}

AdmissionQueue::~AdmissionQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    timer_cv_.Signal();
  }
  timer_.join();
}

absl::StatusOr<AdmissionQueue::Ticket> AdmissionQueue::Enter(const std::string& client) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat("the router's queue is full: ", waiting_.size(),
                                                     " requests wait (--max-queued-requests ",
                                                     options_.max_waiting, ") behind ", active_, " in flight"));
  }
  int& mine = per_client_[client];
  if (options_.max_per_client > 0 && mine >= options_.max_per_client) {
    if (mine == 0) per_client_.erase(client);
    return absl::ResourceExhaustedError(absl::StrCat("client ", client.substr(0, 64), " has ", mine,
                                                     " requests queued or in flight, its limit "
                                                     "(--max-inflight-per-client ",
                                                     options_.max_per_client, ")"));
  }
  ++mine;
  Ticket t{next_order_++, client};
  waiting_.insert(t.order);
  return t;
}

void AdmissionQueue::Wait(const Ticket& ticket, absl::Time deadline, OnTurn on_turn) {
  {
    absl::MutexLock lock(&mu_);
    waiting_.insert(ticket.order);  // already there unless Leave ran
    waiters_[ticket.order] = Waiter{deadline, std::move(on_turn)};
    if (deadline != absl::InfiniteFuture()) deadlines_.insert({deadline, ticket.order});
    ++timer_epoch_;
    timer_cv_.Signal();
  }
  Pump();
}

void AdmissionQueue::Cancel(const Ticket& ticket) {
  Ready ready;
  {
    absl::MutexLock lock(&mu_);
    if (!waiters_.contains(ticket.order)) return;
    EndWaitLocked(ticket.order, absl::CancelledError("cancelled by the client while queued"), &ready);
  }
  for (auto& [f, st] : ready) f(std::move(st));
  Pump();  // the head may have changed
}

void AdmissionQueue::Requeue(const Ticket& ticket) {
  absl::MutexLock lock(&mu_);
  --active_;
  waiting_.insert(ticket.order);
  backoff_until_ = absl::Now() + options_.capacity_backoff;
  ++timer_epoch_;
  timer_cv_.Signal();
}

void AdmissionQueue::Release() {
  {
    absl::MutexLock lock(&mu_);
    --active_;
    backoff_until_ = absl::InfinitePast();  // a request finished: room, maybe
  }
  Pump();
}

void AdmissionQueue::Leave(const Ticket& ticket) {
  {
    absl::MutexLock lock(&mu_);
    waiting_.erase(ticket.order);
    auto w = waiters_.find(ticket.order);
    if (w != waiters_.end()) {
      deadlines_.erase({w->second.deadline, ticket.order});
      waiters_.erase(w);
    }
    auto it = per_client_.find(ticket.client);
    if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  }
  Pump();
}

void AdmissionQueue::Pump() {
  {
    absl::MutexLock lock(&mu_);
    if (pumping_) {
      repump_ = true;
      return;
    }
    pumping_ = true;
  }
  Ready ready;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      repump_ = false;
      CollectLocked(&ready);
      if (ready.empty()) {
        pumping_ = false;
        return;
      }
    }
    for (auto& [f, st] : ready) f(std::move(st));
    ready.clear();
  }
}

void AdmissionQueue::EndWaitLocked(uint64_t order, absl::Status why, Ready* ready) {
  auto w = waiters_.find(order);
  deadlines_.erase({w->second.deadline, order});
  ready->emplace_back(std::move(w->second.on_turn), std::move(why));
  waiters_.erase(w);
  waiting_.erase(order);
}

void AdmissionQueue::CollectLocked(Ready* ready) {
  const absl::Time now = absl::Now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    EndWaitLocked(deadlines_.begin()->second,
                  absl::DeadlineExceededError(absl::StrCat("the deadline passed while the request waited in the "
                                                           "router's queue (", waiting_.size(), " waiting, ",
                                                           active_, " in flight)")),
                  ready);
  }
  while (!waiting_.empty() && active_ < options_.max_active && now >= backoff_until_) {
    const uint64_t head = *waiting_.begin();
    if (!waiters_.contains(head)) break;  // its owner has not called Wait yet
    ++active_;
    EndWaitLocked(head, absl::OkStatus(), ready);
  }
}

absl::Time AdmissionQueue::NextWakeLocked() const {
  absl::Time next = deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
  if (!waiting_.empty() && active_ < options_.max_active && backoff_until_ > absl::Now()) {
    next = std::min(next, backoff_until_);
  }
  return next;
}

// Sleeps until the next deadline or backoff end, or until a call may have
// made it earlier (timer_epoch_), then pumps. A CondVar, not an Await
// condition: TSan cannot follow conditions that other threads evaluate.
void AdmissionQueue::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const uint64_t epoch = timer_epoch_;
    const absl::Time next = NextWakeLocked();
    while (!stopping_ && timer_epoch_ == epoch && absl::Now() < next) timer_cv_.WaitWithDeadline(&mu_, next);
    if (stopping_ || timer_epoch_ != epoch) continue;  // stop, or re-plan
    mu_.Unlock();
    Pump();
    mu_.Lock();
  }
}

int AdmissionQueue::waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiting_.size());
}

int AdmissionQueue::active() const {
  absl::MutexLock lock(&mu_);
  return active_;
}

std::string ClientOfPeer(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  if (colon == std::string::npos || colon == scheme) return peer;
  return peer.substr(0, colon);
}

}  // namespace pdserve
