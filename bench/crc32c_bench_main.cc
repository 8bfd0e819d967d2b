// pdserve-crc32c-bench: the hand-off checksum (common/handoff/crc32c.h)
// alone, one thread, on every path this CPU has, at the sizes a hand-off
// chunk takes (a few KiB for a short prompt's layer, up to the 4 MiB chunk
// limit). The sender sums every byte of a hand-off and the receiver checks
// it, so each side pays bytes / (GB/s).
//
//   pdserve-crc32c-bench [ROUNDS=3]
//
// Prints GB/s per path and size (best of ROUNDS) and each sum, which all
// paths must agree on.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_clock.h"
#include "common/handoff/crc32c.h"

namespace pdserve {
namespace {

constexpr char kUsage[] =
    "pdserve-crc32c-bench: the KV hand-off's CRC-32C alone, one thread, per path (crc32c.h).\n"
    "Usage: pdserve-crc32c-bench [ROUNDS (3, 1..100)]\n";

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("%s", kUsage);
    return 0;
  }
  int rounds = 3;
  char* end = nullptr;
  if (argc > 2 || (argc == 2 && ((rounds = static_cast<int>(std::strtol(argv[1], &end, 10))) < 1 ||
                                 rounds > 100 || *end != '\0'))) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  struct Path {
    const char* name;
    uint32_t (*fn)(const void*, size_t, uint32_t);
  };
  std::vector<Path> paths = {{"portable", &Crc32cPortable}};
  if (Crc32cHardwareAvailable()) paths.push_back({"sse4.2", &Crc32cHardware});
  std::printf("%-10s %10s %10s %10s\n", "path", "bytes", "GB/s", "crc32c");
  int failures = 0;
  for (const size_t bytes : {size_t{4} << 10, size_t{64} << 10, size_t{4} << 20}) {
    std::vector<unsigned char> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
    const size_t reps = std::max<size_t>(1, (size_t{256} << 20) / bytes);  // ~256 MiB a round
    uint32_t first = 0;
    for (size_t p = 0; p < paths.size(); ++p) {
      double best_ms = 1e30;
      uint32_t crc = 0;
      for (int r = 0; r < rounds; ++r) {
        const bench::Clock::time_point t0 = bench::Clock::now();
        for (size_t i = 0; i < reps; ++i) crc = paths[p].fn(data.data(), bytes, 0);
        best_ms = std::min(best_ms, bench::MsSince(t0));
      }
      if (p == 0) first = crc;
      const bool agree = crc == first;
      failures += agree ? 0 : 1;
      std::printf("%-10s %10zu %10.2f   %08x%s\n", paths[p].name, bytes, reps * bytes / (best_ms * 1e6), crc,
                  agree ? "" : "  DIFFERS from portable");
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
