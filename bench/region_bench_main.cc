// pdserve-region-bench: what one parallel region costs on OpenMP
// (at::parallel_for, as LibTorch runs it) and on pdserve's spin pool
// (common/util/spin_pool.h, what a decode step's matmuls use), back to back
// and after a serial gap (the ops between two matmuls of a decode step,
// during which OpenMP's idle threads may go to sleep).
//
//   pdserve-region-bench [REPS=4000] [GAPS_US=0,5,20,50,200,1000]
//
// Each region is one chunk of 5 us of busy work per thread, taken from a
// shared counter as ForEachChunk takes them (gemv_tiles.h): with every
// thread on time it lasts 5 us, and the rest is the region's cost. Prints,
// per gap, the mean microseconds past those 5 us and the share of regions
// in which another thread than the caller ran a chunk (on the pool a helper
// that wakes late leaves its chunk to the caller instead of holding the
// region). Threads: as the engine's --threads 0 (ConfigureThreads:
// OMP_NUM_THREADS, else all cores); the OpenMP wait policy is the
// binaries' default (common/util/omp_env.h) unless the environment sets
// one. A decode step of the 502M model runs ~49 regions
// (4 per layer and the head).
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/engine.h"
#include "common/util/omp_env.h"
#include "common/util/spin_pool.h"

namespace pdserve {
namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// Busy work on the calling thread for `us` microseconds (a serial op).
void Serial(double us) {
  const auto end = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < end) {
  }
}

constexpr double kChunkUs = 5;

struct Point {
  double overhead_us = 0;  // mean region time past kChunkUs
  double shared = 0;       // share of regions where a second thread ran a chunk
};

// `reps` regions of `threads` chunks, `gap_us` of serial work before each.
// region(take) must call take() on each thread of the region.
template <typename Region>
Point Measure(int reps, int threads, double gap_us, const Region& region) {
  double total = 0;
  int shared = 0;
  for (int i = 0; i < reps; ++i) {
    if (gap_us > 0) Serial(gap_us);
    std::atomic<int> next{0}, by_others{0};
    const auto caller = std::this_thread::get_id();
    const auto take = [&] {
      while (next.fetch_add(1, std::memory_order_relaxed) < threads) {
        Serial(kChunkUs);
        if (std::this_thread::get_id() != caller) by_others.fetch_add(1, std::memory_order_relaxed);
      }
    };
    const auto t0 = Clock::now();
    region(take);
    total += Us(Clock::now() - t0);
    if (by_others.load() > 0) ++shared;
  }
  return {total / reps - kChunkUs, static_cast<double>(shared) / reps};
}

std::vector<double> ParseGaps(const char* s) {
  std::vector<double> out;
  for (const char* p = s; *p != '\0';) {
    char* end = nullptr;
    const double v = std::strtod(p, &end);
    if (end == p || v < 0 || v > 1e6) return {};
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return {};
  }
  return out;
}

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(
        "pdserve-region-bench: the cost of one parallel region (5 us of work per thread) on OpenMP\n"
        "(at::parallel_for) and on pdserve's spin pool, back to back and after a serial gap.\n"
        "Usage: pdserve-region-bench [REPS (4000, 1..1000000)] [GAPS_US (0,5,20,50,200,1000)]\n");
    return 0;
  }
  const int reps = argc > 1 ? std::atoi(argv[1]) : 4000;
  const std::vector<double> gaps = ParseGaps(argc > 2 ? argv[2] : "0,5,20,50,200,1000");
  if (reps < 1 || reps > 1000000 || gaps.empty()) {
    std::fprintf(stderr, "pdserve-region-bench: bad arguments (REPS 1..1000000, GAPS_US like 0,20,200); see --help\n");
    return 2;
  }
  const int threads = ConfigureThreads(0);
  if (threads < 2) {
    std::fprintf(stderr, "pdserve-region-bench: needs at least 2 threads (at::get_num_threads() = %d)\n", threads);
    return 2;
  }
  std::printf("%d threads, %s, %s; %d regions per point\n", threads, OmpWaitPolicySummary().c_str(),
              SpinPoolSummary().c_str(), reps);
  const auto omp = [&](const auto& take) { at::parallel_for(0, threads, 1, [&](int64_t, int64_t) { take(); }); };
  const auto pool = [&](const auto& take) {
    if (!SpinPool::Get().TryHelp(threads - 1, take)) take();
  };
  std::printf("%8s %22s %22s\n", "gap us", "OpenMP us (shared)", "spin pool us (shared)");
  for (const double gap : gaps) {
    // Short gaps get all reps; long ones fewer (the serial time dominates).
    const int n = gap >= 200 ? std::max(1, reps / 10) : reps;
    const Point o = Measure(n, threads, gap, omp);
    const Point p = Measure(n, threads, gap, pool);
    std::printf("%8.0f %14.2f (%4.0f%%) %14.2f (%4.0f%%)\n", gap, o.overhead_us, 100 * o.shared, p.overhead_us,
                100 * p.shared);
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) {
  pdserve::ApplyLibraryEnv(argv);  // before any thread: the binaries' OpenMP default
  return pdserve::Main(argc, argv);
}
