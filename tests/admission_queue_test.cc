// AdmissionQueue: arrival order, the bounds, deadlines and cancellation
// while waiting, a requeued ticket keeping its place, and turns handed out
// by callbacks without a thread per waiter.
#include "router/admission_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"

namespace pdserve {
namespace {

// A pending turn: Wait's callback fills it in.
struct Turn {
  absl::Notification came;
  absl::Status status;
};

std::shared_ptr<Turn> StartWait(AdmissionQueue& q, const AdmissionQueue::Ticket& t,
                                absl::Time deadline = absl::InfiniteFuture()) {
  auto turn = std::make_shared<Turn>();
  q.Wait(t, deadline, [turn](absl::Status st) {
    turn->status = std::move(st);
    turn->came.Notify();
  });
  return turn;
}

// Waits for the turn on the test's thread (the queue itself never blocks).
absl::Status Acquire(AdmissionQueue& q, const AdmissionQueue::Ticket& t,
                     absl::Time deadline = absl::InfiniteFuture()) {
  auto turn = StartWait(q, t, deadline);
  turn->came.WaitForNotification();
  return turn->status;
}

TEST(AdmissionQueueTest, SlotsGoInArrivalOrder) {
  AdmissionQueueOptions o;
  o.max_active = 1;
  AdmissionQueue q(o);
  std::vector<AdmissionQueue::Ticket> t;
  for (int i = 0; i < 5; ++i) t.push_back(*q.Enter("c"));
  ASSERT_TRUE(Acquire(q, t[0]).ok());
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  std::atomic<int> registered{0};
  // Started in reverse: each may only go once every older ticket went.
  for (int i = 4; i >= 1; --i) {
    waiters.emplace_back([&, i] {
      auto turn = StartWait(q, t[i]);
      registered.fetch_add(1);
      turn->came.WaitForNotification();
      ASSERT_TRUE(turn->status.ok()) << turn->status;
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      q.Release();
      q.Leave(t[i]);
    });
  }
  // Every waiter has called Wait (its callback is registered) before the
  // slot is released: the order below is the queue's, not the threads'.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (registered.load() < 4 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_EQ(registered.load(), 4) << "the waiter threads did not all call Wait within 60 s";
  EXPECT_EQ(q.waiting(), 4);
  EXPECT_EQ(q.active(), 1);
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
  ASSERT_TRUE(Acquire(q, first).ok());
  auto late = *q.Enter("c");
  absl::Status st = Acquire(q, late, absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  q.Leave(late);

  auto cancelled = *q.Enter("c");
  auto turn = StartWait(q, cancelled);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(turn->came.HasBeenNotified());
  q.Cancel(cancelled);
  ASSERT_TRUE(turn->came.HasBeenNotified());  // Cancel runs the callback itself
  EXPECT_TRUE(absl::IsCancelled(turn->status)) << turn->status;
  q.Cancel(cancelled);  // no longer waiting: a no-op
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
  ASSERT_TRUE(Acquire(q, older).ok());
  q.Requeue(older);  // every worker was full
  // The newer ticket may not pass the older one, which waits for the backoff.
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(Acquire(q, older).ok());
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(90));
  ASSERT_TRUE(Acquire(q, newer).ok());
  EXPECT_EQ(q.active(), 2);
  q.Release();
  q.Release();
  q.Leave(older);
  q.Leave(newer);
}

// Thousands of waiters cost no thread: each turn is a callback, run by
// whichever call freed the slot, in arrival order.
TEST(AdmissionQueueTest, ManyWaitersAreCallbacksServedInOrder) {
  AdmissionQueueOptions o;
  o.max_active = 1;
  AdmissionQueue q(o);
  constexpr int kWaiters = 2000;
  std::vector<AdmissionQueue::Ticket> t;
  for (int i = 0; i < kWaiters; ++i) t.push_back(*q.Enter("c"));
  std::vector<int> order;  // written by the callbacks, one at a time
  for (int i = kWaiters - 1; i >= 0; --i) {
    // Each turn ends its request at once, which hands the slot on.
    q.Wait(t[i], absl::InfiniteFuture(), [&q, &order, &t, i](absl::Status st) {
      ASSERT_TRUE(st.ok()) << st;
      order.push_back(i);
      q.Release();
      q.Leave(t[i]);
    });
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(kWaiters));
  for (int i = 0; i < kWaiters; ++i) ASSERT_EQ(order[i], i);
  EXPECT_EQ(q.active(), 0);
  EXPECT_EQ(q.waiting(), 0);
}

TEST(AdmissionQueueTest, ClientOfPeerDropsThePort) {
  EXPECT_EQ(ClientOfPeer("ipv4:10.0.0.7:51234"), "ipv4:10.0.0.7");
  EXPECT_EQ(ClientOfPeer("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(ClientOfPeer("unix:/tmp/sock"), "unix:/tmp/sock");
}

}  // namespace
}  // namespace pdserve
