// AdmissionQueue: the router's bounded, arrival-ordered queue in front of
// placement. A burst is queued and served, not refused. Nothing blocks:
//   Enter    takes a place (a ticket, in arrival order), or
//            ResourceExhausted naming the bound that is full: waiting
//            requests (max_waiting), or this client's share
//            (max_per_client, by peer address);
//   Wait     calls `on_turn` once: OK when the ticket is the oldest waiting
//            one and one of max_active slots is free (after a capacity miss,
//            once some request finishes or a short backoff passes);
//            DeadlineExceeded past the deadline; Cancelled after Cancel;
//   Cancel   ends a ticket's wait (the client went away); a no-op when the
//            ticket is not waiting;
//   Requeue  gives the slot back after every worker said "full"
//            (RESOURCE_EXHAUSTED): the ticket keeps its place; Wait again;
//   Release  gives the slot back when the request is over;
//   Leave    drops the ticket's place and its client's share (always last).
// Thread-safe. `on_turn` runs on the thread whose call made the turn come
// (Wait, Release, Leave, Cancel) or on the queue's one timer thread
// (deadlines, backoff), never under the queue's lock, and never nested in
// another `on_turn`: it must not block, and may call the queue again.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace pdserve {

struct AdmissionQueueOptions {
  // Requests placed or streaming at once.
  int max_active = 512;
  // Requests waiting for a slot; beyond it Enter fails.
  int max_waiting = 4096;
  // Requests (waiting or active) of one client address; 0 = no limit.
  int max_per_client = 0;
  // After a capacity miss, how long the next placement waits unless a
  // request finishes first.
  absl::Duration capacity_backoff = absl::Milliseconds(50);
};

class AdmissionQueue {
 public:
  struct Ticket {
    uint64_t order = 0;
    std::string client;
  };
  using OnTurn = std::function<void(absl::Status)>;

  explicit AdmissionQueue(AdmissionQueueOptions options);
  // Waits still pending are dropped without a call: end every request first.
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  absl::StatusOr<Ticket> Enter(const std::string& client);
  void Wait(const Ticket& ticket, absl::Time deadline, OnTurn on_turn);
  void Cancel(const Ticket& ticket);
  void Requeue(const Ticket& ticket);
  void Release();
  void Leave(const Ticket& ticket);

  int waiting() const;
  int active() const;

 private:
  struct Waiter {
    absl::Time deadline;
    OnTurn on_turn;
  };
  using Ready = std::vector<std::pair<OnTurn, absl::Status>>;

  // Hands out turns that are due and runs their callbacks, outside mu_. One
  // thread pumps at a time; a call meanwhile makes it look again.
  void Pump();
  void CollectLocked(Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndWaitLocked(uint64_t order, absl::Status why, Ready* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next time a deadline or the backoff ends (InfiniteFuture: none).
  absl::Time NextWakeLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void TimerLoop();

  const AdmissionQueueOptions options_;
  mutable absl::Mutex mu_;
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);               // places, in arrival order
  absl::flat_hash_map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);  // places with a Wait
  std::set<std::pair<absl::Time, uint64_t>> deadlines_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  absl::Time backoff_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool pumping_ ABSL_GUARDED_BY(mu_) = false;
  bool repump_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t timer_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped when the next wake may be earlier
  absl::CondVar timer_cv_;                          // signalled with each bump
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": the client part of a gRPC peer.
std::string ClientOfPeer(const std::string& peer);

}  // namespace pdserve
