#include "router/admission_queue.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

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

absl::Status AdmissionQueue::Acquire(const Ticket& ticket, absl::Time deadline, const std::function<bool()>& gone) {
  absl::MutexLock lock(&mu_);
  while (true) {
    if (gone()) return absl::CancelledError("cancelled by the client while queued");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("the deadline passed while the request waited in the router's "
                                                      "queue (", waiting_.size(), " waiting, ", active_,
                                                      " in flight)"));
    }
    const bool first = !waiting_.empty() && *waiting_.begin() == ticket.order;
    if (first && active_ < options_.max_active && now >= backoff_until_) {
      waiting_.erase(ticket.order);
      ++active_;
      return absl::OkStatus();
    }
    // Sleep until something changes, the backoff ends, or the deadline.
    absl::Time until = deadline;
    if (first && active_ < options_.max_active) until = std::min(until, backoff_until_);
    const uint64_t epoch = epoch_;
    const int active = active_;
    const uint64_t head = waiting_.empty() ? 0 : *waiting_.begin();
    auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return epoch_ != epoch || active_ != active || (waiting_.empty() ? 0 : *waiting_.begin()) != head;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), until);
  }
}

void AdmissionQueue::Requeue(const Ticket& ticket) {
  absl::MutexLock lock(&mu_);
  --active_;
  waiting_.insert(ticket.order);
  backoff_until_ = absl::Now() + options_.capacity_backoff;
}

void AdmissionQueue::Release() {
  absl::MutexLock lock(&mu_);
  --active_;
  backoff_until_ = absl::InfinitePast();  // a request finished: room, maybe
}

void AdmissionQueue::Leave(const Ticket& ticket) {
  absl::MutexLock lock(&mu_);
  waiting_.erase(ticket.order);
  auto it = per_client_.find(ticket.client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  ++epoch_;
}

void AdmissionQueue::Wake() {
  absl::MutexLock lock(&mu_);
  ++epoch_;
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
