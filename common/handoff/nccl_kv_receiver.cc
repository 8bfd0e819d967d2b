// NcclKvReceiver over real communicators (a PDSERVE_HAVE_NCCL build).
#include "common/handoff/nccl_kv_receiver.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/handoff/nccl_comm.h"
#include "common/util/log.h"

namespace pdserve {
namespace {

using internal::v1::KvChunk;
using internal::v1::NcclConnectRequest;
using internal::v1::NcclConnectResponse;

NcclConnectResponse Refuse(const std::string& reason) {
  NcclConnectResponse r;
  r.set_accepted(false);
  r.set_reason(reason);
  return r;
}

// One communicator (rank 1) and the thread that joins it and then receives
// payloads in the order they were handed over.
class NcclPeer {
 public:
  using Done = std::function<void(absl::Status)>;
  // Called on the peer's thread when it fails on its own.
  using OnFailed = std::function<void(NcclPeer*)>;

  NcclPeer(const NcclConnectRequest& request, const NcclReceiverOptions& options, OnFailed on_failed)
      : comm_id_(request.comm_id()),
        sender_id_(request.sender_id()),
        unique_id_(request.nccl_unique_id()),
        options_(options),
        on_failed_(std::move(on_failed)) {}
  ~NcclPeer() {
    Stop(absl::CancelledError("decode worker shutting down"));
    if (thread_.joinable()) thread_.join();
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

  // Queues one receive. False when the peer has already failed or stopped
  // (`done` is not called then).
  bool Enqueue(KvChunk* chunk, Done done) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return false;
    jobs_.push_back(Job{chunk, std::move(done)});
    cv_.notify_all();
    return true;
  }

  // Ends the communicator: the thread aborts it and fails pending receives
  // with `why`.
  void Stop(const absl::Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.ok()) failed_ = why;
    stop_ = true;
    cv_.notify_all();
  }

  bool finished() const { return finished_; }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::string& comm_id() const { return comm_id_; }
  const std::string& sender_id() const { return sender_id_; }

 private:
  struct Job {
    KvChunk* chunk;
    Done done;
  };

  void Run() {
    auto comm = NcclComm::Connect(unique_id_, /*rank=*/1, options_.device, absl::Now() + options_.init_timeout, &stop_);
    if (comm.ok()) {
      log::Info(absl::StrCat("kv hand-off: NCCL communicator ", comm_id_, " from ", sender_id_,
                             " joined on CUDA device ", options_.device),
                {}, log::TextPrefix::None());
      ReceiveLoop(**comm);
      comm->reset();  // aborts it: after a failure a receive may be unmatched
    } else {
      Fail(absl::UnavailableError(
          absl::StrCat("NCCL communicator ", comm_id_, " did not form: ", comm.status().message())));
    }
    std::deque<Job> left;
    absl::Status why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(jobs_);
      why = failed_;
    }
    for (Job& j : left) j.done(why);
    finished_ = true;
  }

  void ReceiveLoop(NcclComm& comm) {
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !jobs_.empty() || !failed_.ok(); });
        if (!failed_.ok()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      std::string* payload = job.chunk->mutable_data()->mutable_payload();
      const size_t n = job.chunk->data().nccl_bytes();
      payload->resize(n);
      absl::Status st = comm.Recv(payload->data(), n, absl::Now() + options_.stall_timeout, &stop_);
      if (!st.ok()) {
        payload->clear();
        st = absl::UnavailableError(absl::StrCat("NCCL receive on communicator ", comm_id_, ": ", st.message()));
        Fail(st);
        job.done(st);
        return;
      }
      job.done(absl::OkStatus());
    }
  }

  void Fail(const absl::Status& why) {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = failed_.ok();
      if (first) failed_ = why;
    }
    if (!first) return;  // stopped from outside: the owner knows
    log::Warn(absl::StrCat("kv hand-off: ", why.message()), {}, log::TextPrefix::None());
    on_failed_(this);
  }

  const std::string comm_id_, sender_id_, unique_id_;
  const NcclReceiverOptions options_;
  const OnFailed on_failed_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  absl::Status failed_;  // not OK once failed or stopped
};

class NcclKvReceiverImpl final : public NcclKvReceiver {
 public:
  explicit NcclKvReceiverImpl(const NcclReceiverOptions& options) : options_(options) {}

  ~NcclKvReceiverImpl() override {
    std::vector<std::shared_ptr<NcclPeer>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, peer] : peers_) all.push_back(peer);
      for (auto& peer : retired_) all.push_back(peer);
      peers_.clear();
      retired_.clear();
    }
    // Outside the lock: pending receives' callbacks may call Drop.
    for (auto& peer : all) peer->Stop(absl::CancelledError("decode worker shutting down"));
    for (auto& peer : all) peer->Join();
  }

  NcclConnectResponse Connect(const NcclConnectRequest& request) override {
    std::string why;
    if (CudaDeviceCount(&why) == 0) return Refuse(absl::StrCat("the decode worker has no CUDA device (", why, ")"));
    if (request.nccl_unique_id().size() != kNcclUniqueIdBytes || request.comm_id().empty()) {
      return Refuse(absl::StrCat("malformed NcclConnect: a ", request.nccl_unique_id().size(),
                                 "-byte unique id (expected ", kNcclUniqueIdBytes, ") and comm id '", request.comm_id(),
                                 "'"));
    }
    JoinFinished();
    std::shared_ptr<NcclPeer> peer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The sender connects anew only after dropping its communicator.
      std::vector<std::string> replaced;
      for (auto& [id, p] : peers_) {
        if (!request.sender_id().empty() && p->sender_id() == request.sender_id()) replaced.push_back(id);
      }
      for (const std::string& id : replaced) RetireLocked(id, absl::AbortedError("replaced by a new NcclConnect"));
      if (static_cast<int>(peers_.size()) >= options_.max_peers) {
        return Refuse(absl::StrCat("the decode worker already holds ", peers_.size(), " NCCL communicators"));
      }
      if (peers_.contains(request.comm_id())) {
        return Refuse(absl::StrCat("NCCL communicator ", request.comm_id(), " already exists"));
      }
      peer = std::make_shared<NcclPeer>(request, options_, [this](NcclPeer* p) { OnPeerFailed(p); });
      peers_[request.comm_id()] = peer;
    }
    peer->Start();
    NcclConnectResponse r;
    r.set_accepted(true);
    return r;
  }

  bool Has(const std::string& comm_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return peers_.contains(comm_id);
  }

  absl::Status ReceivePayload(const std::string& comm_id, KvChunk* chunk,
                              std::function<void(absl::Status)> done) override {
    const uint64_t n = chunk->data().nccl_bytes();
    if (n == 0 || n > static_cast<uint64_t>(options_.max_chunk_bytes)) {
      return absl::FailedPreconditionError(absl::StrCat("KV hand-off rejected: chunk ", chunk->seq(), " declares ", n,
                                                        " NCCL bytes (limit ", options_.max_chunk_bytes, ")"));
    }
    std::shared_ptr<NcclPeer> peer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = peers_.find(comm_id);
      if (it != peers_.end()) peer = it->second;
    }
    if (peer == nullptr || !peer->Enqueue(chunk, std::move(done))) return UnknownNcclCommError(comm_id);
    return absl::OkStatus();
  }

  void Drop(const std::string& comm_id, const absl::Status& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    RetireLocked(comm_id, why);
  }

 private:
  void RetireLocked(const std::string& comm_id, const absl::Status& why) {
    auto it = peers_.find(comm_id);
    if (it == peers_.end()) return;
    it->second->Stop(why);
    retired_.push_back(std::move(it->second));
    peers_.erase(it);
  }

  void OnPeerFailed(NcclPeer* peer) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(peer->comm_id());
    if (it != peers_.end() && it->second.get() == peer) {
      retired_.push_back(std::move(it->second));
      peers_.erase(it);
    }
  }

  // Joins the threads of retired peers that have ended (outside the lock:
  // a peer's last act may take it).
  void JoinFinished() {
    std::vector<std::shared_ptr<NcclPeer>> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = retired_.begin(); it != retired_.end();) {
        if ((*it)->finished()) {
          done.push_back(std::move(*it));
          it = retired_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& peer : done) peer->Join();
  }

  const NcclReceiverOptions options_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<NcclPeer>> peers_;
  std::vector<std::shared_ptr<NcclPeer>> retired_;
};

}  // namespace

std::unique_ptr<NcclKvReceiver> MakeNcclKvReceiver(const NcclReceiverOptions& options) {
  return std::make_unique<NcclKvReceiverImpl>(options);
}

bool NcclTransportBuilt() { return true; }

}  // namespace pdserve
