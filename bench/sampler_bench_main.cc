// pdserve-sampler-bench: SampleToken (common/engine/sampler.h) alone, one
// thread, on synthetic logits rows: normal logits of several spreads (a
// small sigma is a flat distribution, whose draw walks far into the sorted
// order; a large one is peaked), each at greedy, temperature 1, temperature
// 0.7 with top_p 0.9, and temperature 0.7 with top_k 40.
//
//   pdserve-sampler-bench [VOCAB=128000] [DRAWS=40]
//
// Prints ms per draw (mean over DRAWS draws, n = 0..DRAWS-1) and a checksum
// of the drawn ids, which must not change when the sampler gets faster.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "bench/bench_clock.h"
#include "common/engine/sampler.h"

namespace pdserve {
namespace {

constexpr char kUsage[] =
    "pdserve-sampler-bench: SampleToken alone, one thread, on synthetic logits (sampler.h).\n"
    "Usage: pdserve-sampler-bench [VOCAB (128000, 2..4194304)] [DRAWS (40, >= 1)]\n";

bool ParseArgs(int argc, char** argv, int64_t* vocab, int64_t* draws) {
  char* end = nullptr;
  if (argc > 1 && ((*vocab = std::strtoll(argv[1], &end, 10)) < 2 || *vocab > (1 << 22) || *end != '\0')) {
    return false;
  }
  if (argc > 2 && ((*draws = std::strtoll(argv[2], &end, 10)) < 1 || *end != '\0')) return false;
  return argc <= 3;
}

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("%s", kUsage);
    return 0;
  }
  int64_t vocab = 128000, draws = 40;
  if (!ParseArgs(argc, argv, &vocab, &draws)) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  struct Setting {
    const char* name;
    SamplingParams params;
  };
  const Setting settings[] = {{"greedy", {0.0f, 1.0f, 0, 7}},
                              {"T=1", {1.0f, 1.0f, 0, 7}},
                              {"T=0.7 top_p=0.9", {0.7f, 0.9f, 0, 7}},
                              {"T=0.7 top_k=40", {0.7f, 1.0f, 40, 7}}};
  std::printf("vocab %lld, %lld draws per point, one thread\n", static_cast<long long>(vocab),
              static_cast<long long>(draws));
  std::printf("%8s  %-16s %10s %12s\n", "sigma", "sampling", "ms/draw", "checksum");
  std::mt19937 rng(1);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (const float sigma : {0.02f, 0.3f, 1.0f, 3.0f}) {
    std::normal_distribution<float> dist(0.0f, sigma);
    for (float& l : logits) l = dist(rng);
    for (const Setting& s : settings) {
      int64_t checksum = 0;
      const bench::Clock::time_point t0 = bench::Clock::now();
      for (int64_t n = 0; n < draws; ++n) checksum += SampleToken(logits.data(), vocab, s.params, n);
      const double ms = bench::MsSince(t0);
      std::printf("%8.2f  %-16s %10.3f %12lld\n", sigma, s.name, ms / draws, static_cast<long long>(checksum));
    }
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
