// Timing shared by the benchmarks: a steady clock and the milliseconds
// since a point on it; this thread's CPU time.
#pragma once

#include <time.h>

#include <chrono>

namespace pdserve::bench {

using Clock = std::chrono::steady_clock;

inline double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Seconds of CPU time this thread has used: a kernel timed beside other
// processes (a build on the same cores) loses time slices, not the rate it
// computes at while it runs.
inline double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace pdserve::bench
