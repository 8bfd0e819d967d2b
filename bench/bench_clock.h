// Wall-clock timing shared by the benchmarks: a steady clock and the
// milliseconds since a point on it.
#pragma once

#include <chrono>

namespace pdserve::bench {

using Clock = std::chrono::steady_clock;

inline double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace pdserve::bench
