// Monotonic nanoseconds, for the latency fields (ttft_ns, kv_handoff_ns, ...).
#pragma once

#include <chrono>
#include <cstdint>

namespace pdserve {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace pdserve
