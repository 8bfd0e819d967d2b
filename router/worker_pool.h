// The router's view of one kind of worker (prefill or decode): which
// addresses exist (static flags plus DNS names re-resolved over time, for
// Kubernetes headless Services), which of them are healthy, and how loaded
// each one is, so the router can pick the best worker for a request.
//
// A background thread polls every worker each poll_interval with the
// standard grpc.health.v1.Health/Check and the worker's GetLoad. Between
// polls, the router's own ReportDispatched/ReportFinished keep an in-flight
// count so that a burst of requests spreads over workers instead of all
// landing on the one that looked idlest at the last poll.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/channel.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/net/server.h"
#include "pdserve/internal/v1/worker.pb.h"

namespace pdserve {

enum class WorkerKind { kPrefill, kDecode };

// "prefill" or "decode", for messages.
const char* WorkerKindName(WorkerKind kind);

struct WorkerPoolOptions {
  // Static "host:port" list (from flags).
  std::vector<std::string> addresses;
  // "name:port", resolved with getaddrinfo and re-resolved every
  // resolve_interval (a Kubernetes headless Service has one A record per
  // pod): workers that vanish from DNS are dropped, new ones added. When a
  // name has IPv4 addresses only those are used (so "localhost" gives
  // 127.0.0.1, not also ::1, which would be the same process twice);
  // otherwise its IPv6 addresses, as "[addr]:port".
  std::vector<std::string> dns_targets;
  absl::Duration resolve_interval = absl::Seconds(5);
  // Health check + GetLoad of every worker, concurrently.
  absl::Duration poll_interval = absl::Milliseconds(500);
  // Deadline of each poll RPC; also the longest a poll round can take.
  absl::Duration rpc_timeout = absl::Seconds(2);
  // How the router dials its workers (mTLS when TLS is on: grpc_security.h).
  ChannelSecurity channel_security;
};

struct WorkerInfo {
  std::string address;
  bool healthy = false;
  // From the last successful poll.
  internal::v1::GetLoadResponse load;
  // Requests the router dispatched and has not seen finish.
  int inflight = 0;
  // Why the worker is unhealthy ("" when healthy, "not polled yet" before
  // its first poll).
  std::string last_error;
  // ReportFailure calls since the worker joined the pool.
  int64_t failures_reported = 0;
};

class WorkerPool {
 public:
  WorkerPool(WorkerKind kind, WorkerPoolOptions options);
  // Stops and joins the background thread (waits for a running poll round,
  // at most about rpc_timeout).
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Resolves and polls once synchronously, then starts the background
  // thread. Call at most once.
  void Start();

  // Healthy workers, best first, without those in `exclude`.
  // Decode: most kv_bytes_free, then fewest (active_sequences + inflight).
  // Prefill: fewest (queued_requests + active_sequences + inflight).
  // Ties: address order.
  std::vector<std::string> Candidates(const std::vector<std::string>& exclude = {}) const;

  // One cached channel per address (created on first use, also for
  // addresses the pool does not know).
  std::shared_ptr<grpc::Channel> Channel(const std::string& address);

  // inflight++, so concurrent picks spread before the next poll.
  void ReportDispatched(const std::string& address);
  // inflight-- (never below zero).
  void ReportFinished(const std::string& address);
  // Marks the worker unhealthy until its next successful poll, so the
  // router stops picking a worker it just saw fail.
  void ReportFailure(const std::string& address);

  // Every known worker, in address order.
  std::vector<WorkerInfo> Snapshot() const;

  // Blocks until at least n workers are healthy. DeadlineExceeded with a
  // sentence listing each worker's state otherwise. Polls by itself when
  // Start() has not been called.
  absl::Status WaitForHealthy(int n, absl::Duration timeout);

  // One resolve + poll round, synchronously (tests, and Start()).
  void PollNow();

  WorkerKind kind() const { return kind_; }

 private:
  struct Worker {
    WorkerInfo info;
    // The poll round in progress (or last begun) when the router reported
    // a failure: only a round begun after it may mark the worker healthy.
    uint64_t failed_generation = 0;
  };

  // Resolves dns_targets if `force` or resolve_interval has passed, and
  // updates the worker set. Never holds mu_ while resolving.
  void MaybeResolve(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);
  // Polls every worker concurrently; returns within about rpc_timeout.
  void PollAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);
  void Round(bool force_resolve);
  void Loop();
  int HealthyCountLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::shared_ptr<grpc::Channel> ChannelLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const WorkerKind kind_;
  const WorkerPoolOptions options_;

  // Serializes rounds (the background thread vs PollNow) so an older
  // round's results never overwrite a newer one's. Held across RPCs, so
  // nothing on the request path may take it.
  absl::Mutex round_mu_;
  // Last good resolution of each DNS target (kept when a lookup fails
  // transiently, so a DNS hiccup does not drop every worker).
  absl::flat_hash_map<std::string, std::vector<std::string>> resolved_ ABSL_GUARDED_BY(round_mu_);
  absl::Time last_resolve_ ABSL_GUARDED_BY(round_mu_) = absl::InfinitePast();

  // Guards the state the request path reads. Never held across an RPC or a
  // DNS lookup.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  // Why each failing DNS target failed at the last resolve, for messages.
  absl::flat_hash_map<std::string, std::string> dns_errors_ ABSL_GUARDED_BY(mu_);
  // Counts poll rounds (see Worker::failed_generation).
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

// One request's share of a worker's load in the pool's accounting:
// ReportDispatched on construction, ReportFinished once on destruction, so
// every path releases it.
class WorkerLease {
 public:
  WorkerLease(WorkerPool* pool, std::string address) : pool_(pool), address_(std::move(address)) {
    pool_->ReportDispatched(address_);
  }
  ~WorkerLease() { pool_->ReportFinished(address_); }
  WorkerLease(const WorkerLease&) = delete;
  WorkerLease& operator=(const WorkerLease&) = delete;
  const std::string& address() const { return address_; }

 private:
  WorkerPool* const pool_;
  const std::string address_;
};

}  // namespace pdserve
