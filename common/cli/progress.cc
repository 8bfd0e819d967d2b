#include "common/cli/progress.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace pdserve {

std::string FormatSeconds(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const int64_t total = static_cast<int64_t>(s + 0.5);
  if (total >= 3600) return absl::StrFormat("%dh%02dm", total / 3600, (total / 60) % 60);
  if (total >= 60) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%ds", total);
}

std::string ProgressStats(size_t done, size_t total, double elapsed_s, const char* unit) {
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
  const std::string eta = done == 0 ? "?" : FormatSeconds(static_cast<double>(total - done) / rate);
  return absl::StrFormat("%.2f %s/s, elapsed %s, ETA %s", rate, unit, FormatSeconds(elapsed_s), eta);
}

double WaitWithProgress(std::mutex& mu, std::condition_variable& cv, const size_t& done, size_t total,
                        std::chrono::steady_clock::time_point start,
                        absl::FunctionRef<std::string(size_t done, double elapsed_s)> line) {
  using Clock = std::chrono::steady_clock;
  const bool tty = isatty(fileno(stderr));
  const auto period = tty ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000);
  std::unique_lock<std::mutex> lock(mu);
  Clock::time_point last_print = Clock::now();
  while (done < total) {
    // Until the next print is due: a finished item wakes the wait early (to
    // redraw on a terminal) without pushing the next log line back.
    cv.wait_until(lock, last_print + period);
    const Clock::time_point now = Clock::now();
    if (done < total && (tty || now - last_print >= period)) {
      const double elapsed = std::chrono::duration<double>(now - start).count();
      std::fprintf(stderr, tty ? "\r%s\033[K" : "%s\n", line(done, elapsed).c_str());
      last_print = now;
    }
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, tty ? "\r%s\033[K\n" : "%s\n", line(total, elapsed_s).c_str());
  return elapsed_s;
}

}  // namespace pdserve
