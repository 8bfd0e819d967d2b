// Progress of a batch client on stderr (pdserve-bench, pdserve-passkey): a
// line redrawn in place on a terminal, one line every 5 s in a log.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>

#include "absl/functional/function_ref.h"

namespace pdserve {

// "12s", "3m05s", "1h02m"; "?" for a negative, NaN or absurd (> 1e7 s) value.
std::string FormatSeconds(double s);

// "<rate> <unit>/s, elapsed <t>, ETA <t>" for `done` of `total` items after
// `elapsed_s` seconds (the ETA is "?" before the first item is done).
std::string ProgressStats(size_t done, size_t total, double elapsed_s, const char* unit);

// Blocks until `done` (guarded by `mu`, `cv` notified on every change)
// reaches `total`, printing line(done, elapsed seconds since `start`) on
// stderr while it waits: every 250 ms redrawn in place on a terminal, every
// 5 s otherwise. Prints the final line, line(total, elapsed), and returns
// that elapsed time in seconds. `line` runs with `mu` held.
double WaitWithProgress(std::mutex& mu, std::condition_variable& cv, const size_t& done, size_t total,
                        std::chrono::steady_clock::time_point start,
                        absl::FunctionRef<std::string(size_t done, double elapsed_s)> line);

}  // namespace pdserve
