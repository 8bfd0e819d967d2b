// AdmissionQueue: arrival order, the bounds, deadlines and cancellation
// while waiting, and a requeued ticket keeping its place.
#include "router/admission_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace pdserve {
namespace {

const auto kNever = [] { return false; };

TEST(AdmissionQueueTest, SlotsGoInArrivalOrder) {
  AdmissionQueueOptions o;
  o.max_active = 1;
  AdmissionQueue q(o);
  std::vector<AdmissionQueue::Ticket> t;
  for (int i = 0; i < 5; ++i) t.push_back(*q.Enter("c"));
  ASSERT_TRUE(q.Acquire(t[0], absl::InfiniteFuture(), kNever).ok());
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  // Started in reverse: each may only go once every older ticket went.
  for (int i = 4; i >= 1; --i) {
    waiters.emplace_back([&, i] {
      ASSERT_TRUE(q.Acquire(t[i], absl::InfiniteFuture(), kNever).ok());
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      q.Release();
      q.Leave(t[i]);
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(q.waiting(), 4);
  q.Release();
  q.Leave(t[0]);
  for (auto& w : waiters) w.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(q.active(), 0);
  EXPECT_EQ(q.waiting(), 0);
}

TEST(AdmissionQueueTest, FullQueueAndClientShareAreResourceExhausted) {
  AdmissionQueueOptions o;
  o.max_waiting = 3;
  o.max_per_client = 2;
  AdmissionQueue q(o);
  auto a1 = q.Enter("a"), a2 = q.Enter("a");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = q.Enter("a");
  EXPECT_TRUE(absl::IsResourceExhausted(a3.status()));
  EXPECT_NE(a3.status().message().find("--max-inflight-per-client 2"), std::string::npos) << a3.status();
  auto b1 = q.Enter("b");
  ASSERT_TRUE(b1.ok());
  auto c1 = q.Enter("c");
  EXPECT_TRUE(absl::IsResourceExhausted(c1.status()));
  EXPECT_NE(c1.status().message().find("--max-queued-requests 3"), std::string::npos) << c1.status();
  // Leaving gives the place and the client's share back.
  q.Leave(*a1);
  EXPECT_TRUE(q.Enter("a").ok());
}

TEST(AdmissionQueueTest, DeadlineAndCancelEndTheWait) {
  AdmissionQueueOptions o;
  o.max_active = 1;
  AdmissionQueue q(o);
  auto first = *q.Enter("c");
  ASSERT_TRUE(q.Acquire(first, absl::InfiniteFuture(), kNever).ok());
  auto late = *q.Enter("c");
  absl::Status st = q.Acquire(late, absl::Now() + absl::Milliseconds(50), kNever);
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  q.Leave(late);

  auto cancelled = *q.Enter("c");
  std::atomic<bool> gone{false};
  std::thread waiter([&] {
    absl::Status s = q.Acquire(cancelled, absl::InfiniteFuture(), [&] { return gone.load(); });
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
  });
  absl::SleepFor(absl::Milliseconds(50));
  gone = true;
  q.Wake();
  waiter.join();
  q.Leave(cancelled);
  EXPECT_EQ(q.waiting(), 0);
}

TEST(AdmissionQueueTest, RequeuedTicketKeepsItsPlaceAndBacksOff) {
  AdmissionQueueOptions o;
  o.max_active = 2;
  o.capacity_backoff = absl::Milliseconds(100);
  AdmissionQueue q(o);
  auto older = *q.Enter("c");
  auto newer = *q.Enter("c");
  ASSERT_TRUE(q.Acquire(older, absl::InfiniteFuture(), kNever).ok());
  q.Requeue(older);  // every worker was full
  // The newer ticket may not pass the older one, which waits for the backoff.
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(q.Acquire(older, absl::InfiniteFuture(), kNever).ok());
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(90));
  ASSERT_TRUE(q.Acquire(newer, absl::InfiniteFuture(), kNever).ok());
  EXPECT_EQ(q.active(), 2);
  q.Release();
  q.Release();
  q.Leave(older);
  q.Leave(newer);
}

TEST(AdmissionQueueTest, ClientOfPeerDropsThePort) {
  EXPECT_EQ(ClientOfPeer("ipv4:10.0.0.7:51234"), "ipv4:10.0.0.7");
  EXPECT_EQ(ClientOfPeer("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(ClientOfPeer("unix:/tmp/sock"), "unix:/tmp/sock");
}

}  // namespace
}  // namespace pdserve
