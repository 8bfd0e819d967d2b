#include "common/util/spin_pool.h"

#include <immintrin.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace pdserve {
namespace {

thread_local bool on_pool_thread = false;

using Clock = std::chrono::steady_clock;

// An idle helper only pauses for this long, then yields between checks.
constexpr auto kPauseOnly = std::chrono::microseconds(20);

}  // namespace

bool OnSpinPoolThread() { return on_pool_thread; }

int SpinPoolSpinUs() {
  static const int us = [] {
    const char* v = std::getenv("PDSERVE_POOL_SPIN_US");
    if (v == nullptr || *v == '\0') return 200;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return (*end == '\0' && n >= 0 && n <= 100000) ? static_cast<int>(n) : 200;
  }();
  return us;
}

bool SpinPoolEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("PDSERVE_SPIN_POOL");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

std::string SpinPoolSummary() {
  if (!SpinPoolEnabled()) return "decode regions on OpenMP (PDSERVE_SPIN_POOL=0)";
  return "decode regions on pdserve's spin pool (idle helpers spin " + std::to_string(SpinPoolSpinUs()) + " us)";
}

SpinPool& SpinPool::Get() {
  static SpinPool* const pool = new SpinPool();  // never destroyed (see the header)
  return *pool;
}

void SpinPool::Grow(int helpers) {
  // A new helper starts from the region count before the caller's region,
  // so it joins that region even if it starts running after it began.
  const uint64_t seen = region_.load(std::memory_order_relaxed);
  for (; threads_made_ < helpers; ++threads_made_) {
    std::thread([this, index = threads_made_, seen] { Loop(index, seen); }).detach();
  }
}

bool SpinPool::TryHelp(int helpers, void (*work)(void*), void* ctx) {
  if (on_pool_thread || !SpinPoolEnabled() || busy_.exchange(true, std::memory_order_acquire)) return false;
  Grow(helpers);
  work_ = work;
  ctx_ = ctx;
  helpers_wanted_ = helpers;
  finished_.store(0, std::memory_order_relaxed);
  joined_.store(0, std::memory_order_release);  // publishes work_, ctx_, helpers_wanted_
  region_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_.notify_all();
  }
  work(ctx);
  // Close the region: a helper that wakes from now on sits it out.
  const int64_t joined = joined_.exchange(kClosed, std::memory_order_acq_rel);
  const auto start = Clock::now();
  for (int i = 0; finished_.load(std::memory_order_acquire) < joined; ++i) {
    // A joined helper is inside work; if it was descheduled, give it the core.
    if (i < 4096 || Clock::now() - start < std::chrono::microseconds(50)) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  busy_.store(false, std::memory_order_release);
  return true;
}

void SpinPool::Loop(int index, uint64_t seen) {
  on_pool_thread = true;
  const auto spin = std::chrono::microseconds(SpinPoolSpinUs());
  for (;;) {
    // Wait for a new region: spin for a while, then sleep.
    const auto last_work = Clock::now();
    for (int i = 1; region_.load(std::memory_order_acquire) == seen; ++i) {
      _mm_pause();
      if ((i & 63) != 0) continue;
      const auto idle = Clock::now() - last_work;
      if (idle < kPauseOnly) continue;
      // Past the first few microseconds, offer the core between checks: a
      // co-tenant's runnable thread gets it (sched_yield returns at once
      // when nothing else is runnable here).
      if (idle < spin) {
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return region_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = region_.load(std::memory_order_acquire);
    if (joined_.fetch_add(1, std::memory_order_acq_rel) >= kClosed) continue;  // too late
    if (index < helpers_wanted_) work_(ctx_);
    finished_.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace pdserve
