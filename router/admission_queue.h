// AdmissionQueue: the router's bounded, arrival-ordered queue in front of
// placement. A burst is queued and served, not refused:
//   Enter    takes a place (a ticket, in arrival order), or
//            ResourceExhausted naming the bound that is full: waiting
//            requests (max_waiting), or this client's share
//            (max_per_client, by peer address);
//   Acquire  waits until the ticket is the oldest waiting one and one of
//            max_active slots is free (and, after a capacity miss, until
//            some request finishes or a short backoff passes); honours the
//            deadline and the client going away;
//   Requeue  gives the slot back after every worker said "full"
//            (RESOURCE_EXHAUSTED): the ticket waits again with its place;
//   Release  gives the slot back when the request is over;
//   Leave    drops the ticket's place and its client's share (always last).
// Thread-safe. Blocking: call from the request's executor, never from a
// gRPC callback.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>

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

  explicit AdmissionQueue(AdmissionQueueOptions options) : options_(options) {}

  absl::StatusOr<Ticket> Enter(const std::string& client);
  // OK once the ticket holds an active slot; DeadlineExceeded past
  // `deadline`, Cancelled once `gone()` is true (call Wake after it turns).
  absl::Status Acquire(const Ticket& ticket, absl::Time deadline, const std::function<bool()>& gone);
  void Requeue(const Ticket& ticket);
  void Release();
  void Leave(const Ticket& ticket);
  // Re-evaluates waiters (after a `gone` flag changed).
  void Wake();

  int waiting() const;
  int active() const;

 private:
  const AdmissionQueueOptions options_;
  mutable absl::Mutex mu_;
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint64_t> waiting_ ABSL_GUARDED_BY(mu_);
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  absl::Time backoff_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Wake to re-check `gone`
};

// "ipv4:10.0.0.7:51234" -> "ipv4:10.0.0.7": the client part of a gRPC peer.
std::string ClientOfPeer(const std::string& peer);

}  // namespace pdserve
