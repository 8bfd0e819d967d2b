#include "router/worker_pool.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <tuple>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/slice.h>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "common/net/server.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"

namespace pdserve {
namespace {

// grpc.health.v1 has no generated C++ in Debian's packages, and the
// messages are tiny, so the check goes through the generic stub:
// HealthCheckRequest{service = ""} serializes to zero bytes, and
// HealthCheckResponse is one enum field (1: status).
constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";
constexpr uint32_t kServingStatusServing = 1;

const char* ServingStatusName(uint32_t status) {
  switch (status) {
    case 0: return "UNKNOWN";
    case 1: return "SERVING";
    case 2: return "NOT_SERVING";
    case 3: return "SERVICE_UNKNOWN";
    default: return "unrecognized";
  }
}

// The status field of a serialized HealthCheckResponse (absent means 0,
// UNKNOWN, as in proto3).
absl::StatusOr<uint32_t> ParseServingStatus(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return absl::InternalError("unreadable health response");
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());

  namespace wfl = google::protobuf::internal;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  uint32_t status = 0;
  while (uint32_t tag = in.ReadTag()) {
    if (wfl::WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        wfl::WireFormatLite::GetTagWireType(tag) == wfl::WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint32(&status)) return absl::DataLossError("malformed health response");
    } else if (!wfl::WireFormatLite::SkipField(&in, tag)) {
      return absl::DataLossError("malformed health response");
    }
  }
  if (!in.ConsumedEntireMessage()) return absl::DataLossError("malformed health response");
  return status;
}

std::string GrpcError(const char* what, const grpc::Status& s) {
  return absl::StrCat(what, ": ", absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
                      ": ", s.error_message());
}

// "name:port" -> its addresses as "ip:port" (IPv4 when the name has any,
// else "[ipv6]:port"), sorted and deduplicated. NotFound when the name has
// no records (the Service has no ready pods); Unavailable for lookups that
// may succeed later.
absl::StatusOr<std::vector<std::string>> ResolveTarget(const std::string& target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DNS target \"", target, "\" is not name:port"));
  }
  std::string host = target.substr(0, colon);
  const std::string port = target.substr(colon + 1);
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number <= 0 || port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("DNS target \"", target, "\" has no valid port"));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);

  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // No AI_ADDRCONFIG: it hides 127.0.0.1 on hosts whose only IPv4 address is
  // the loopback one (sandboxes, some pods).
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    const std::string message = absl::StrCat("DNS lookup of \"", target, "\" failed: ", gai_strerror(rc));
    bool no_records = rc == EAI_NONAME;
#ifdef EAI_NODATA
    no_records = no_records || rc == EAI_NODATA;
#endif
    return no_records ? absl::NotFoundError(message) : absl::UnavailableError(message);
  }
  std::set<std::string> v4, v6;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text)) != nullptr) v4.insert(absl::StrCat(text, ":", port));
    } else if (ai->ai_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      if (inet_ntop(AF_INET6, &sin6->sin6_addr, text, sizeof(text)) != nullptr) {
        v6.insert(absl::StrCat("[", text, "]:", port));
      }
    }
  }
  freeaddrinfo(result);
  // A dual-stack name (localhost, or a pod with both families) would
  // otherwise count every worker twice.
  const std::set<std::string>& chosen = v4.empty() ? v6 : v4;
  return std::vector<std::string>(chosen.begin(), chosen.end());
}

// One worker's two poll RPCs. Lives until both callbacks ran.
struct PollCall {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;

  std::unique_ptr<grpc::GenericStub> health_stub;
  grpc::ClientContext health_context;
  grpc::ByteBuffer health_request;
  grpc::ByteBuffer health_response;
  grpc::Status health_status;

  std::unique_ptr<internal::v1::PrefillWorker::Stub> prefill_stub;
  std::unique_ptr<internal::v1::DecodeWorker::Stub> decode_stub;
  grpc::ClientContext load_context;
  internal::v1::GetLoadRequest load_request;
  internal::v1::GetLoadResponse load_response;
  grpc::Status load_status;
};

// Starts both RPCs of `call`, each with `deadline`; each callback counts
// `pending` down once.
void StartPollCall(PollCall* call, WorkerKind kind, std::chrono::system_clock::time_point deadline,
                   absl::BlockingCounter* pending) {
  call->health_context.set_deadline(deadline);
  call->load_context.set_deadline(deadline);

  // service = "" (the whole server) serializes to an empty message.
  grpc::Slice empty;
  call->health_request = grpc::ByteBuffer(&empty, 1);
  call->health_stub = std::make_unique<grpc::GenericStub>(call->channel);
  call->health_stub->UnaryCall(&call->health_context, kHealthCheckMethod, grpc::StubOptions(), &call->health_request,
                               &call->health_response, [call, pending](grpc::Status s) {
                                 call->health_status = std::move(s);
                                 pending->DecrementCount();
                               });

  auto on_load = [call, pending](grpc::Status s) {
    call->load_status = std::move(s);
    pending->DecrementCount();
  };
  if (kind == WorkerKind::kPrefill) {
    call->prefill_stub = internal::v1::PrefillWorker::NewStub(call->channel);
    call->prefill_stub->async()->GetLoad(&call->load_context, &call->load_request, &call->load_response, on_load);
  } else {
    call->decode_stub = internal::v1::DecodeWorker::NewStub(call->channel);
    call->decode_stub->async()->GetLoad(&call->load_context, &call->load_request, &call->load_response, on_load);
  }
}

// Why a finished poll finds its worker unhealthy, or "" when it is healthy:
// the health check first, then GetLoad.
std::string PollError(const PollCall& call) {
  if (!call.health_status.ok()) return GrpcError("health check", call.health_status);
  absl::StatusOr<uint32_t> serving = ParseServingStatus(call.health_response);
  if (!serving.ok()) return absl::StrCat("health check: ", serving.status().message());
  if (*serving != kServingStatusServing) return absl::StrCat("health check says ", ServingStatusName(*serving));
  if (!call.load_status.ok()) return GrpcError("GetLoad", call.load_status);
  return "";
}

}  // namespace

const char* WorkerKindName(WorkerKind kind) {
  return kind == WorkerKind::kPrefill ? "prefill" : "decode";
}

WorkerPool::WorkerPool(WorkerKind kind, WorkerPoolOptions options)
    : kind_(kind), options_(std::move(options)) {}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void WorkerPool::Start() {
  Round(/*force_resolve=*/true);
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void WorkerPool::PollNow() { Round(/*force_resolve=*/true); }

void WorkerPool::Round(bool force_resolve) {
  absl::MutexLock round_lock(&round_mu_);
  MaybeResolve(force_resolve);
  PollAll();
}

void WorkerPool::Loop() {
  absl::Time next = absl::Now() + options_.poll_interval;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&stop_), next)) return;
    }
    // A steady cadence: the next round is due one interval after this one
    // started (right away when a round outlasts the interval, e.g. while a
    // worker hangs until rpc_timeout).
    next = absl::Now() + options_.poll_interval;
    Round(/*force_resolve=*/false);
  }
}

void WorkerPool::MaybeResolve(bool force) {
  const absl::Time now = absl::Now();
  const bool first = last_resolve_ == absl::InfinitePast();
  if (!force && now - last_resolve_ < options_.resolve_interval) return;
  last_resolve_ = now;

  absl::flat_hash_map<std::string, std::string> errors;
  for (const std::string& target : options_.dns_targets) {
    absl::StatusOr<std::vector<std::string>> addresses = ResolveTarget(target);
    if (addresses.ok()) {
      resolved_[target] = *std::move(addresses);
      continue;
    }
    errors[target] = std::string(addresses.status().message());
    // No records is an answer (no ready pods): drop the target's workers.
    // Other failures may be a DNS hiccup: keep the last good answer.
    if (!absl::IsUnavailable(addresses.status())) resolved_[target].clear();
  }
  if (!first && options_.dns_targets.empty()) return;  // the static set never changes

  std::set<std::string> want(options_.addresses.begin(), options_.addresses.end());
  for (const auto& [target, addresses] : resolved_) want.insert(addresses.begin(), addresses.end());

  absl::MutexLock lock(&mu_);
  dns_errors_ = std::move(errors);
  for (auto it = workers_.begin(); it != workers_.end();) {
    auto copy = it++;
    if (want.count(copy->first) == 0) {
      // Callers still holding the channel keep it alive; the pool forgets
      // it so a DNS churn of pod IPs does not accumulate channels.
      channels_.erase(copy->first);
      workers_.erase(copy);
    }
  }
  for (const std::string& address : want) {
    if (workers_.contains(address)) continue;
    Worker& w = workers_[address];
    w.info.address = address;
    w.info.last_error = "not polled yet";
  }
}

void WorkerPool::PollAll() {
  std::vector<std::unique_ptr<PollCall>> calls;
  uint64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    generation = ++generation_;
    for (const auto& [address, worker] : workers_) {
      auto call = std::make_unique<PollCall>();
      call->address = address;
      call->channel = ChannelLocked(address);
      calls.push_back(std::move(call));
    }
  }
  if (calls.empty()) return;

  // Both RPCs of every worker run at once, each with its own deadline, so
  // one dead or slow worker costs the round rpc_timeout, not N times it.
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.rpc_timeout);
  absl::BlockingCounter pending(static_cast<int>(2 * calls.size()));
  for (const std::unique_ptr<PollCall>& call : calls) StartPollCall(call.get(), kind_, deadline, &pending);
  pending.Wait();

  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<PollCall>& call : calls) {
    auto it = workers_.find(call->address);
    if (it == workers_.end()) continue;  // dropped meanwhile (Resolve runs in rounds only, but be safe)
    Worker& w = it->second;
    if (call->load_status.ok()) w.info.load = call->load_response;
    std::string error = PollError(*call);
    // A failure the router reported while this round was in flight is
    // newer than the round's answer: it stands until the next round.
    if (error.empty() && w.failed_generation >= generation) error = "the router reported a failure";
    w.info.healthy = error.empty();
    w.info.last_error = std::move(error);
  }
}

std::shared_ptr<grpc::Channel> WorkerPool::ChannelLocked(const std::string& address) {
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args = DefaultChannelArguments();  // message size limits
    // gRPC's default reconnect backoff grows to 120 s: a restarted worker
    // would stay unreachable for minutes although it is serving again.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    channel = MakeChannel(address, std::move(args), options_.channel_security);
  }
  return channel;
}

std::shared_ptr<grpc::Channel> WorkerPool::Channel(const std::string& address) {
  absl::MutexLock lock(&mu_);
  return ChannelLocked(address);
}

std::vector<std::string> WorkerPool::Candidates(const std::vector<std::string>& exclude) const {
  struct Ranked {
    uint64_t kv_free;  // decode only; 0 for prefill so it never decides
    int64_t busy;
    const std::string* address;
  };
  std::vector<std::string> out;
  absl::ReaderMutexLock lock(&mu_);
  std::vector<Ranked> ranked;
  ranked.reserve(workers_.size());
  for (const auto& [address, w] : workers_) {
    if (!w.info.healthy) continue;
    if (std::find(exclude.begin(), exclude.end(), address) != exclude.end()) continue;
    const auto& load = w.info.load;
    if (kind_ == WorkerKind::kDecode) {
      ranked.push_back({load.kv_bytes_free(), int64_t{load.active_sequences()} + w.info.inflight, &address});
    } else {
      ranked.push_back({0, int64_t{load.queued_requests()} + load.active_sequences() + w.info.inflight, &address});
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    // More free KV first, then less busy, then address order.
    return std::tie(b.kv_free, a.busy, *a.address) < std::tie(a.kv_free, b.busy, *b.address);
  });
  out.reserve(ranked.size());
  for (const Ranked& r : ranked) out.push_back(*r.address);
  return out;
}

void WorkerPool::ReportDispatched(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it != workers_.end()) ++it->second.info.inflight;
}

void WorkerPool::ReportFinished(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(address);
  // The worker may have been dropped and re-added (count reset) meanwhile.
  if (it != workers_.end() && it->second.info.inflight > 0) --it->second.info.inflight;
}

void WorkerPool::ReportFailure(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) return;
  it->second.info.healthy = false;
  it->second.info.last_error = "the router reported a failure";
  ++it->second.info.failures_reported;
  it->second.failed_generation = generation_;
}

std::vector<WorkerInfo> WorkerPool::Snapshot() const {
  std::vector<WorkerInfo> out;
  {
    absl::ReaderMutexLock lock(&mu_);
    out.reserve(workers_.size());
    for (const auto& [address, w] : workers_) out.push_back(w.info);
  }
  std::sort(out.begin(), out.end(), [](const WorkerInfo& a, const WorkerInfo& b) { return a.address < b.address; });
  return out;
}

int WorkerPool::HealthyCountLocked() const {
  int n = 0;
  for (const auto& [address, w] : workers_) n += w.info.healthy ? 1 : 0;
  return n;
}

std::string WorkerPool::DescribeLocked() const {
  std::vector<const WorkerInfo*> infos;
  for (const auto& [address, w] : workers_) infos.push_back(&w.info);
  std::sort(infos.begin(), infos.end(), [](const WorkerInfo* a, const WorkerInfo* b) { return a->address < b->address; });
  std::vector<std::string> parts;
  for (const WorkerInfo* info : infos) {
    if (info->healthy) {
      parts.push_back(absl::StrCat(info->address, " healthy (", info->load.active_sequences(), " active, ",
                                   info->load.queued_requests(), " queued, ", info->load.kv_bytes_free(),
                                   " KV bytes free)"));
    } else {
      parts.push_back(absl::StrCat(info->address, " unhealthy (", info->last_error, ")"));
    }
  }
  std::vector<std::string> targets(options_.dns_targets.begin(), options_.dns_targets.end());
  std::sort(targets.begin(), targets.end());
  for (const std::string& target : targets) {
    auto it = dns_errors_.find(target);
    if (it != dns_errors_.end()) parts.push_back(it->second);
  }
  if (infos.empty()) {
    parts.insert(parts.begin(),
                 options_.addresses.empty() && options_.dns_targets.empty()
                     ? std::string("none configured (no addresses and no DNS targets)")
                     : std::string("none known"));
  }
  return absl::StrJoin(parts, "; ");
}

absl::Status WorkerPool::WaitForHealthy(int n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  bool started;
  {
    absl::MutexLock lock(&mu_);
    started = started_;
  }
  if (!started) {
    // No background thread to wait for: poll here.
    while (true) {
      PollNow();
      {
        absl::MutexLock lock(&mu_);
        if (HealthyCountLocked() >= n) return absl::OkStatus();
      }
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      absl::SleepFor(std::min(options_.poll_interval, deadline - now));
    }
  }
  absl::MutexLock lock(&mu_);
  auto enough = [this, n] {
    mu_.AssertReaderHeld();
    return HealthyCountLocked() >= n;
  };
  if (mu_.AwaitWithDeadline(absl::Condition(&enough), deadline)) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("only ", HealthyCountLocked(), " of the ", n, " ",
                                                  WorkerKindName(kind_), " workers needed are healthy after ",
                                                  absl::FormatDuration(timeout), ": ", DescribeLocked()));
}

}  // namespace pdserve
