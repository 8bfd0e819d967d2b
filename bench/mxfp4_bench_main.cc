// pdserve-mxfp4-bench: the MXFP4 decode kernels alone (common/kernels/mxfp4.h),
// one thread, per kernel and ISA build, at gpt-oss-20b's expert shapes,
// interleaved rounds. Each call reads a different expert's blocks and
// scales from a pool (512 MiB by default), so the weights come from DRAM as
// in a decode step, and prepares its x as a caller would per expert
// (PackRowsMxfp4 for fma, QuantizeRowsMxfp4 for dot).
//
//   pdserve-mxfp4-bench [ROUNDS=3] [ROWS=1,4] [POOL_MIB=512]
//
// Prints per (shape, kernel, rows, isa) the best and worst round: ms per
// call, GB/s of blocks + scales read (wall time) and CPU ms per call.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/kernels/gemv_kernels.h"
#include "common/kernels/mxfp4.h"

namespace pdserve {
namespace {

double Now(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Shape {
  const char* name;
  int64_t N, K;
};

struct Sample {
  double ms = 0, cpu_ms = 0, gbs = 0;
};

// One expert of shape s in the pool: blocks, then scales (in the 117..137
// range of a real checkpoint).
struct Pool {
  std::vector<uint8_t> bytes;
  int64_t Copies(const Shape& s) const { return static_cast<int64_t>(bytes.size()) / Bytes(s); }
  static int64_t Bytes(const Shape& s) { return s.N * (Mxfp4RowBytes(s.K) + Mxfp4RowScales(s.K)); }
  Mxfp4Matrix Expert(const Shape& s, int64_t e) const {
    const uint8_t* base = bytes.data() + e * Bytes(s);
    return {base, base + s.N * Mxfp4RowBytes(s.K), nullptr, s.K};
  }
};

Sample Time(const Shape& s, bool dot, GemvIsa isa, int64_t M, const Pool& pool, const std::vector<float>& x,
            std::vector<float>& y) {
  const int64_t copies = pool.Copies(s), bytes = Pool::Bytes(s);
  const int64_t calls = std::max<int64_t>(4, std::min<int64_t>(copies, (int64_t{1} << 29) / bytes));
  std::vector<float> xp(M * s.K), xs(M * Mxfp4RowScales(s.K));
  std::vector<int8_t> xq(M * s.K);
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_THREAD_CPUTIME_ID);
  for (int64_t c = 0; c < calls; ++c) {
    const Mxfp4Matrix W = pool.Expert(s, c % copies);
    if (dot) {
      QuantizeRowsMxfp4(x.data(), M, s.K, xq.data(), xs.data());
      GemvMxfp4Dot(xq.data(), xs.data(), M, W, 0, s.N, y.data(), s.N, isa);
    } else {
      PackRowsMxfp4(x.data(), M, s.K, xp.data());
      GemvMxfp4Fma(xp.data(), M, W, 0, s.N, y.data(), s.N, isa);
    }
  }
  const double wall = Now(CLOCK_MONOTONIC) - w0, cpu = Now(CLOCK_THREAD_CPUTIME_ID) - c0;
  return {wall * 1e3 / calls, cpu * 1e3 / calls, bytes * calls / wall / 1e9};
}

void Print(const Shape& s, const char* kernel, int64_t M, const char* isa, const std::vector<Sample>& g) {
  auto by = [](auto f) { return [f](const Sample& a, const Sample& b) { return f(a) < f(b); }; };
  const auto ms = std::minmax_element(g.begin(), g.end(), by([](const Sample& a) { return a.ms; }));
  const auto cpu = std::minmax_element(g.begin(), g.end(), by([](const Sample& a) { return a.cpu_ms; }));
  std::printf("%-20s %-6s %4ld %-7s %8.3f-%-8.3f %6.1f-%-6.1f %8.3f-%-8.3f\n", s.name, kernel, static_cast<long>(M),
              isa, ms.first->ms, ms.second->ms, ms.first->gbs, ms.second->gbs, cpu.first->cpu_ms, cpu.second->cpu_ms);
}

constexpr char kUsage[] =
    "pdserve-mxfp4-bench: the MXFP4 decode kernels alone, one thread, per kernel and ISA build, at\n"
    "gpt-oss-20b's expert shapes; each call reads a different expert from the pool, so weights come from DRAM.\n"
    "Usage: pdserve-mxfp4-bench [ROUNDS (3, >= 1)] [ROWS (1,4: comma-separated rows of x, each 1..%d)]\n"
    "       [POOL_MIB (512, >= 16)]\n";

bool ParseArgs(int argc, char** argv, int* rounds, std::vector<int64_t>* row_counts, int64_t* pool_mib) {
  char* end = nullptr;
  *rounds = argc > 1 ? static_cast<int>(std::strtol(argv[1], &end, 10)) : 3;
  if (argc > 1 && (*end != '\0' || *rounds < 1)) return false;
  for (const char* p = argc > 2 ? argv[2] : "1,4"; *p != '\0';) {
    const int64_t m = std::strtoll(p, &end, 10);
    if (end == p || m < 1 || m > kGemvMaxRows) return false;
    row_counts->push_back(m);
    p = end;
    if (*p == ',') ++p;
  }
  *pool_mib = argc > 3 ? std::strtoll(argv[3], &end, 10) : 512;
  if (argc > 3 && (*end != '\0' || *pool_mib < 16)) return false;
  return !row_counts->empty() && argc <= 4;
}

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(kUsage, static_cast<int>(kGemvMaxRows));
    return 0;
  }
  int rounds = 0;
  int64_t pool_mib = 0;
  std::vector<int64_t> row_counts;
  if (!ParseArgs(argc, argv, &rounds, &row_counts, &pool_mib)) {
    std::fprintf(stderr, kUsage, static_cast<int>(kGemvMaxRows));
    return 2;
  }
  if (!Mxfp4Available()) {
    std::fprintf(stderr, "pdserve-mxfp4-bench: this CPU lacks AVX2/FMA (only the scalar path runs)\n");
    return 1;
  }
  const Shape shapes[] = {{"gate_up [5760,2880]", 5760, 2880}, {"down [2880,2880]", 2880, 2880}};
  Pool pool;
  pool.bytes.resize(static_cast<size_t>(pool_mib) << 20);
  for (size_t i = 0; i < pool.bytes.size(); ++i) pool.bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (const Shape& s : shapes) {  // the scales of every copy in a real checkpoint's range
    for (int64_t e = 0; e < pool.Copies(s); ++e) {
      uint8_t* scales = pool.bytes.data() + e * Pool::Bytes(s) + s.N * Mxfp4RowBytes(s.K);
      for (int64_t i = 0; i < s.N * Mxfp4RowScales(s.K); ++i) scales[i] = static_cast<uint8_t>(117 + i % 21);
    }
  }
  std::vector<float> x(kGemvMaxRows * 2880, 0.5f), y(kGemvMaxRows * 5760);
  std::printf("fma: %s; dot: %s\n", Mxfp4KernelName(Mxfp4Kernel::kFma), Mxfp4KernelName(Mxfp4Kernel::kDot));
  std::printf("%-20s %-6s %4s %-7s %19s %15s %17s\n", "shape", "kernel", "rows", "isa", "ms/call (min-max)",
              "GB/s (max-min)", "cpu ms (min-max)");
  for (const Shape& s : shapes) {
    for (bool dot : {false, true}) {
      std::vector<GemvIsa> isas = {GemvIsa::kAvx2};
      if (dot ? Mxfp4DotAvx512Available() : Mxfp4FmaAvx512Available()) isas.push_back(GemvIsa::kAvx512);
      for (int64_t M : row_counts) {
        std::vector<std::vector<Sample>> got(isas.size());
        for (int r = 0; r < rounds; ++r) {
          for (size_t i = 0; i < isas.size(); ++i) got[i].push_back(Time(s, dot, isas[i], M, pool, x, y));
        }
        for (size_t i = 0; i < isas.size(); ++i) Print(s, dot ? "dot" : "fma", M, GemvIsaName(isas[i]), got[i]);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
