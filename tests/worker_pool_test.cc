// WorkerPool against real in-process gRPC servers on loopback: fake
// prefill/decode workers with settable loads, plus gRPC's default health
// service whose serving status the tests flip.
#include "router/worker_pool.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pdserve/internal/v1/worker.grpc.pb.h"
#include "tests/fake_worker.h"

namespace pdserve {
namespace {

using testing::FakeWorker;

using internal::v1::GetLoadResponse;

using FakeDecode = FakeWorker<internal::v1::DecodeWorker::CallbackService>;
using FakePrefill = FakeWorker<internal::v1::PrefillWorker::CallbackService>;

GetLoadResponse DecodeLoad(uint64_t kv_free, uint32_t active) {
  GetLoadResponse load;
  load.set_kv_bytes_free(kv_free);
  load.set_active_sequences(active);
  return load;
}

GetLoadResponse PrefillLoad(uint32_t queued, uint32_t active) {
  GetLoadResponse load;
  load.set_queued_requests(queued);
  load.set_active_sequences(active);
  return load;
}

WorkerPoolOptions FastOptions(std::vector<std::string> addresses) {
  WorkerPoolOptions options;
  options.addresses = std::move(addresses);
  options.poll_interval = absl::Milliseconds(50);
  options.rpc_timeout = absl::Milliseconds(500);
  return options;
}

// A copy: Snapshot() returns a temporary.
std::optional<WorkerInfo> Find(const std::vector<WorkerInfo>& infos, const std::string& address) {
  for (const WorkerInfo& info : infos) {
    if (info.address == address) return info;
  }
  return std::nullopt;
}

TEST(WorkerPoolTest, DecodeOrdersByFreeKvThenActiveAndHonorsExclude) {
  FakeDecode a, b, c;
  a.service().SetLoad(DecodeLoad(100, 0));
  b.service().SetLoad(DecodeLoad(300, 5));
  c.service().SetLoad(DecodeLoad(300, 1));
  WorkerPool pool(WorkerKind::kDecode, FastOptions({a.address(), b.address(), c.address()}));
  pool.PollNow();

  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{c.address(), b.address(), a.address()}));
  EXPECT_EQ(pool.Candidates({c.address()}), (std::vector<std::string>{b.address(), a.address()}));
  EXPECT_EQ(pool.Candidates({c.address(), a.address(), "10.0.0.1:1"}), (std::vector<std::string>{b.address()}));

  const std::vector<WorkerInfo> snapshot = pool.Snapshot();
  ASSERT_EQ(snapshot.size(), 3u);
  EXPECT_TRUE(std::is_sorted(snapshot.begin(), snapshot.end(),
                             [](const WorkerInfo& x, const WorkerInfo& y) { return x.address < y.address; }));
  std::optional<WorkerInfo> info_b = Find(snapshot, b.address());
  ASSERT_TRUE(info_b.has_value());
  EXPECT_TRUE(info_b->healthy);
  EXPECT_EQ(info_b->load.kv_bytes_free(), 300u);
  EXPECT_EQ(info_b->load.active_sequences(), 5u);
  EXPECT_EQ(info_b->last_error, "");
}

TEST(WorkerPoolTest, PrefillOrdersByQueuedPlusActiveTiesByAddress) {
  FakePrefill a, b, c;
  a.service().SetLoad(PrefillLoad(2, 1));  // 3
  b.service().SetLoad(PrefillLoad(0, 1));  // 1
  c.service().SetLoad(PrefillLoad(1, 0));  // 1
  WorkerPool pool(WorkerKind::kPrefill, FastOptions({a.address(), b.address(), c.address()}));
  pool.PollNow();
  const std::string first = std::min(b.address(), c.address());
  const std::string second = std::max(b.address(), c.address());
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{first, second, a.address()}));
}

TEST(WorkerPoolTest, NotServingAndShutdownWorkersDropOut) {
  FakeDecode a, b;
  a.service().SetLoad(DecodeLoad(100, 0));
  b.service().SetLoad(DecodeLoad(200, 0));
  WorkerPool pool(WorkerKind::kDecode, FastOptions({a.address(), b.address()}));
  pool.PollNow();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{b.address(), a.address()}));

  b.SetServing(false);
  pool.PollNow();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{a.address()}));
  std::optional<WorkerInfo> info_b = Find(pool.Snapshot(), b.address());
  ASSERT_TRUE(info_b.has_value());
  EXPECT_FALSE(info_b->healthy);
  EXPECT_NE(info_b->last_error.find("NOT_SERVING"), std::string::npos) << info_b->last_error;

  b.SetServing(true);
  pool.PollNow();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{b.address(), a.address()}));

  b.Shutdown();
  pool.PollNow();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{a.address()}));
  info_b = Find(pool.Snapshot(), b.address());
  ASSERT_TRUE(info_b.has_value());
  EXPECT_FALSE(info_b->healthy);
  EXPECT_NE(info_b->last_error.find("UNAVAILABLE"), std::string::npos) << info_b->last_error;
}

TEST(WorkerPoolTest, InflightSpreadsPicksAndFailureIsSticky) {
  FakePrefill a, b;
  WorkerPool pool(WorkerKind::kPrefill, FastOptions({a.address(), b.address()}));
  pool.PollNow();
  const std::string lo = std::min(a.address(), b.address());
  const std::string hi = std::max(a.address(), b.address());

  std::vector<std::string> picks;
  for (int i = 0; i < 4; ++i) {
    picks.push_back(pool.Candidates().front());
    pool.ReportDispatched(picks.back());
  }
  EXPECT_EQ(picks, (std::vector<std::string>{lo, hi, lo, hi}));
  pool.ReportFinished(hi);
  EXPECT_EQ(pool.Candidates().front(), hi);
  EXPECT_EQ(Find(pool.Snapshot(), hi)->inflight, 1);
  // Never below zero.
  for (int i = 0; i < 5; ++i) pool.ReportFinished(hi);
  EXPECT_EQ(Find(pool.Snapshot(), hi)->inflight, 0);

  // Unhealthy until the next successful poll.
  pool.ReportFailure(hi);
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{lo}));
  pool.PollNow();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{hi, lo}));
}

TEST(WorkerPoolTest, DnsTargetResolvesLocalhostToOneIpv4Worker) {
  FakeDecode a;
  a.service().SetLoad(DecodeLoad(42, 0));
  WorkerPoolOptions options = FastOptions({});
  options.dns_targets = {absl::StrCat("localhost:", a.port())};
  WorkerPool pool(WorkerKind::kDecode, options);
  pool.PollNow();
  const std::vector<WorkerInfo> snapshot = pool.Snapshot();
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_EQ(snapshot[0].address, absl::StrCat("127.0.0.1:", a.port()));
  EXPECT_TRUE(snapshot[0].healthy) << snapshot[0].last_error;
  EXPECT_EQ(snapshot[0].load.kv_bytes_free(), 42u);
}

TEST(WorkerPoolTest, BadDnsTargetIsReported) {
  WorkerPoolOptions options = FastOptions({});
  options.dns_targets = {"localhost"};
  WorkerPool pool(WorkerKind::kDecode, options);
  pool.PollNow();
  EXPECT_TRUE(pool.Snapshot().empty());
  const absl::Status s = pool.WaitForHealthy(1, absl::Milliseconds(10));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("not name:port"), std::string::npos) << s;
}

TEST(WorkerPoolTest, HungWorkersCostOneTimeoutPerRound) {
  FakeDecode fast;
  std::vector<std::unique_ptr<FakeDecode>> hung;
  std::vector<std::string> addresses = {fast.address()};
  for (int i = 0; i < 3; ++i) {
    hung.push_back(std::make_unique<FakeDecode>());
    hung.back()->service().SetHang(true);
    addresses.push_back(hung.back()->address());
  }
  {
    // One round polls every worker at once: with an RPC timeout far longer
    // than the wait below, every hung worker holds a poll of the same round
    // at the same time (polls serialized behind a hung worker would reach the
    // second one only after the first's 120 s timeout).
    WorkerPoolOptions options = FastOptions(addresses);
    options.rpc_timeout = absl::Seconds(120);
    WorkerPool pool(WorkerKind::kDecode, options);
    std::thread round([&pool] { pool.PollNow(); });
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    auto all_held = [&hung] {
      for (const auto& h : hung) {
        if (h->service().held() == 0) return false;
      }
      return true;
    };
    while (!all_held() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    const bool concurrent = all_held();
    for (const auto& h : hung) h->service().Release();  // ends the round either way
    round.join();
    EXPECT_TRUE(concurrent) << "polls serialized behind hung workers: not every hung worker got its poll";
    EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{fast.address()}));
  }
  // And a hung worker costs the round its RPC timeout, then is unhealthy.
  WorkerPoolOptions options = FastOptions(addresses);
  options.rpc_timeout = absl::Milliseconds(300);
  WorkerPool pool(WorkerKind::kDecode, options);
  pool.PollNow();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{fast.address()}));
  std::optional<WorkerInfo> info = Find(pool.Snapshot(), hung[0]->address());
  ASSERT_TRUE(info.has_value());
  EXPECT_NE(info->last_error.find("DEADLINE_EXCEEDED"), std::string::npos) << info->last_error;
}

TEST(WorkerPoolTest, BackgroundThreadFollowsLoadAndWaitForHealthyNamesWorkers) {
  FakeDecode a, b;
  a.service().SetLoad(DecodeLoad(100, 0));
  b.service().SetLoad(DecodeLoad(200, 0));
  std::string dead_address;
  {
    FakeDecode dead;  // a port that was just served and now refuses connections
    dead_address = dead.address();
  }
  WorkerPool pool(WorkerKind::kDecode, FastOptions({a.address(), b.address(), dead_address}));
  pool.Start();
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{b.address(), a.address()}));
  EXPECT_TRUE(pool.WaitForHealthy(2, absl::Seconds(60)).ok());

  const absl::Status s = pool.WaitForHealthy(3, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("only 2 of the 3 decode workers"), std::string::npos) << s;
  EXPECT_NE(s.message().find(a.address() + " healthy"), std::string::npos) << s;
  EXPECT_NE(s.message().find(b.address() + " healthy"), std::string::npos) << s;
  EXPECT_NE(s.message().find(dead_address + " unhealthy"), std::string::npos) << s;

  // The background polls pick up a load change by themselves.
  a.service().SetLoad(DecodeLoad(1000, 0));
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  auto first = [&pool] {  // Candidates() is empty while a poll finds no worker healthy
    const std::vector<std::string> c = pool.Candidates();
    return c.empty() ? std::string() : c.front();
  };
  while (first() != a.address() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(pool.Candidates(), (std::vector<std::string>{a.address(), b.address()}));
}

TEST(WorkerPoolTest, ChannelIsCachedPerAddress) {
  WorkerPool pool(WorkerKind::kPrefill, FastOptions({"127.0.0.1:1"}));
  EXPECT_EQ(pool.Channel("127.0.0.1:1"), pool.Channel("127.0.0.1:1"));
  EXPECT_NE(pool.Channel("127.0.0.1:1"), pool.Channel("127.0.0.1:2"));
}

}  // namespace
}  // namespace pdserve
