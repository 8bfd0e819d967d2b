// pdserve-gemv-bench: the decode matrix-vector kernels alone (gemv_kernels.h),
// one thread, per ISA build, at the 502M model's shapes, interleaved rounds.
// Each call reads a different copy of the weights (a pool of >= 256 MB), so
// every weight comes from DRAM, as in a decode step.
//
//   pdserve-gemv-bench [ROUNDS=3] [ROWS=1,4]
//
// ROWS past kGemvMaxRows (up to kGemvMaxBatchRows, e.g. 16: a 16-sequence
// step) run as the engine runs them (gemv_tiles.h's ForEachGemvTile, one
// thread): a tile of ~64 KiB of weight rows passes through every group of
// 4 rows of x while it sits in L2, so DRAM sees each weight once per call.
//
// bf16dot: x rounded to bf16 per call, then vdpbf16ps (gemv_bf16dot.h, the
// --bf16-matmul dot path), where the CPU has AVX512-BF16. bf16km: the
// k-major pack of --bf16-matmul kmajor (gemv_kmajor.h), every row of x in
// one call (its own register blocking; no tiles); bf16kmdot: the same pack
// through vdpbf16ps (GemvBf16KMajorDot, dot's kernel where packs exist).
//
// int8 (Q8_0, gemv_q8.h): i8fma (GemvQ8Fma, one build) and i8dot (x
// quantized per call with QuantizeRowsQ8, then GemvQ8Dot: AVX2, and the
// AVX-512 VNNI build where the CPU has it); i8kmdot: x quantized the same
// way, then GemvQ8KMajorDot on the k-major int8 pack (gemv_q8_kmajor.h),
// every row of x in one call (AVX2, and AVX-512 VNNI). Prints per (shape, dtype, rows,
// isa) the best and worst round: ms per call, GB/s of weights read (wall
// time) and CPU ms per call.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_kmajor.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/gemv_q8_kmajor.h"

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

// kernel(m, rows, n0, n1) over M rows of x and N weight rows: one call up
// to kGemvMaxRows rows; past that, ForEachGemvTile's schedule on one thread
// (tiles of GemvTileRows(row_bytes) weight rows, each through every group).
// GemvAllRows (gemv_matrix.h) runs the same order but needs LibTorch.
template <typename Kernel>
void Schedule(int64_t M, int64_t N, int64_t row_bytes, const Kernel& kernel) {
  if (M <= kGemvMaxRows) return kernel(0, M, 0, N);
  const int64_t tile = GemvTileRows(row_bytes);
  for (int64_t t0 = 0; t0 < N; t0 += tile) {
    for (int64_t m = 0; m < M; m += kGemvMaxRows) kernel(m, std::min(kGemvMaxRows, M - m), t0, std::min(N, t0 + tile));
  }
}

struct Sample {
  double ms = 0, cpu_ms = 0, gbs = 0;
};

// Times `calls` calls over distinct copies of one [N, K] Q8_0 weight: the
// FMA kernel, or (dot) x's quantization and the dot kernel's `isa` build,
// or (kmajor) x's quantization and the k-major pack's kernel.
Sample TimeQ8(const Shape& s, int64_t M, bool dot, bool kmajor, GemvIsa isa, const std::vector<char>& pool,
              const std::vector<float>& x, std::vector<float>& y) {
  const int64_t bytes = kmajor ? Q8KMajorBytes(s.N, s.K) : s.N * Q8RowBytes(s.K);
  const int64_t copies = static_cast<int64_t>(pool.size()) / bytes;
  const int64_t calls = std::max<int64_t>(4, std::min<int64_t>(copies, (int64_t{1} << 29) / bytes));
  std::vector<int8_t> xq(M * s.K);
  std::vector<float> xs(M * s.K / kQ8Block);
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_THREAD_CPUTIME_ID);
  for (int64_t c = 0; c < calls; ++c) {
    const uint8_t* w = reinterpret_cast<const uint8_t*>(pool.data() + (c % copies) * bytes);
    if (dot) QuantizeRowsQ8(x.data(), M, s.K, xq.data(), xs.data());
    if (kmajor) {
      GemvQ8KMajorDot(xq.data(), xs.data(), M, s.K, w, s.N, 0, s.N, y.data(), s.N, isa);
      continue;
    }
    Schedule(M, s.N, Q8RowBytes(s.K), [&](int64_t m, int64_t rows, int64_t n0, int64_t n1) {
      if (dot) {
        GemvQ8Dot(xq.data() + m * s.K, xs.data() + m * s.K / kQ8Block, rows, s.K, w, n0, n1, y.data() + m * s.N,
                  s.N, isa);
      } else {
        GemvQ8Fma(x.data() + m * s.K, rows, s.K, w, n0, n1, y.data() + m * s.N, s.N);
      }
    });
  }
  const double wall = Now(CLOCK_MONOTONIC) - w0, cpu = Now(CLOCK_THREAD_CPUTIME_ID) - c0;
  return {wall * 1e3 / calls, cpu * 1e3 / calls, bytes * calls / wall / 1e9};
}

// Times `calls` calls over distinct copies of one [N, K] fp32 or bf16
// weight; bf16 `dot`: x rounded to bf16 once per call, then the dot kernel.
Sample Time(const Shape& s, bool bf16, bool dot, bool kmajor, int64_t M, GemvIsa isa, const std::vector<char>& pool,
            const std::vector<float>& x, std::vector<float>& y) {
  const int64_t row_bytes = s.K * (bf16 ? 2 : 4);
  const int64_t bytes = kmajor ? KMajorElements(s.N, s.K) * 2 : s.N * row_bytes;
  std::vector<uint16_t> xb(dot ? M * Bf16DotStride(s.K) : 0);
  const int64_t copies = static_cast<int64_t>(pool.size()) / bytes;
  const int64_t calls = std::max<int64_t>(4, std::min<int64_t>(copies, (int64_t{1} << 29) / bytes));
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_THREAD_CPUTIME_ID);
  for (int64_t c = 0; c < calls; ++c) {
    const char* w = pool.data() + (c % copies) * bytes;
    const auto* wb = reinterpret_cast<const uint16_t*>(w);
    if (kmajor && dot) {  // rounds x itself
      GemvBf16KMajorDot(x.data(), M, s.K, wb, s.N, 0, s.N, y.data(), s.N);
      continue;
    }
    if (dot) RoundRowsToBf16(x.data(), M, s.K, xb.data());
    if (kmajor) {
      GemvBf16KMajor(x.data(), M, s.K, wb, s.N, 0, s.N, y.data(), s.N, isa);
      continue;
    }
    Schedule(M, s.N, row_bytes, [&](int64_t m, int64_t rows, int64_t n0, int64_t n1) {
      float* ym = y.data() + m * s.N;
      if (dot) {
        GemvBf16DotRounded(xb.data() + m * Bf16DotStride(s.K), rows, s.K, wb, n0, n1, ym, s.N);
      } else if (bf16) {
        GemvBf16(x.data() + m * s.K, rows, s.K, wb, n0, n1, ym, s.N, isa);
      } else {
        GemvF32(x.data() + m * s.K, rows, s.K, reinterpret_cast<const float*>(w), n0, n1, ym, s.N, isa);
      }
    });
  }
  const double wall = Now(CLOCK_MONOTONIC) - w0, cpu = Now(CLOCK_THREAD_CPUTIME_ID) - c0;
  return {wall * 1e3 / calls, cpu * 1e3 / calls, bytes * calls / wall / 1e9};
}

void Print(const Shape& s, const char* dtype, int64_t M, const char* isa, const std::vector<Sample>& g) {
  auto by = [](auto f) { return [f](const Sample& a, const Sample& b) { return f(a) < f(b); }; };
  const auto ms = std::minmax_element(g.begin(), g.end(), by([](const Sample& a) { return a.ms; }));
  const auto cpu = std::minmax_element(g.begin(), g.end(), by([](const Sample& a) { return a.cpu_ms; }));
  std::printf("%-20s %-9s %4ld %-7s %8.3f-%-8.3f %6.1f-%-6.1f %8.3f-%-8.3f\n", s.name, dtype, static_cast<long>(M), isa,
              ms.first->ms, ms.second->ms, ms.first->gbs, ms.second->gbs, cpu.first->cpu_ms, cpu.second->cpu_ms);
}

constexpr char kUsage[] =
    "pdserve-gemv-bench: the decode matrix-vector kernels alone, one thread, per ISA build, at the 502M\n"
    "model's shapes; each call reads a different copy of the weights (512 MiB pool), so they come from DRAM.\n"
    "Usage: pdserve-gemv-bench [ROUNDS (3, >= 1)] [ROWS (1,4: comma-separated rows of x, each 1..%d; past %d\n"
    "       they run as a decode step's tiles do)]\n";

// ROUNDS and ROWS from the command line; false (after the usage on
// stderr) when either is malformed.
bool ParseArgs(int argc, char** argv, int* rounds, std::vector<int64_t>* row_counts) {
  char* end = nullptr;
  *rounds = argc > 1 ? static_cast<int>(std::strtol(argv[1], &end, 10)) : 3;
  if (argc > 1 && (*end != '\0' || *rounds < 1)) return false;
  for (const char* p = argc > 2 ? argv[2] : "1,4"; *p != '\0';) {
    const int64_t m = std::strtoll(p, &end, 10);
    if (end == p || m < 1 || m > kGemvMaxBatchRows) return false;
    row_counts->push_back(m);
    p = end;
    if (*p == ',') ++p;
  }
  return !row_counts->empty() && argc <= 3;
}

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf(kUsage, static_cast<int>(kGemvMaxBatchRows), static_cast<int>(kGemvMaxRows));
    return 0;
  }
  int rounds = 0;
  std::vector<int64_t> row_counts;
  if (!ParseArgs(argc, argv, &rounds, &row_counts)) {
    std::fprintf(stderr, kUsage, static_cast<int>(kGemvMaxBatchRows), static_cast<int>(kGemvMaxRows));
    return 2;
  }
  const Shape shapes[] = {{"qkv [1536,768]", 1536, 768},
                          {"gate_up [3072,768]", 3072, 768},
                          {"down [768,1536]", 768, 1536},
                          {"head [128000,768]", 128000, 768}};
  std::vector<char> pool(size_t{512} << 20);
  for (size_t i = 0; i < pool.size(); i += 2) pool[i] = static_cast<char>(i * 7), pool[i + 1] = 0x3c;
  std::vector<float> x(kGemvMaxBatchRows * 1536, 0.5f), y(kGemvMaxBatchRows * 128000);
  std::vector<GemvIsa> isas = {GemvIsa::kAvx2}, dot_isas = {GemvIsa::kAvx2};
  if (GemvIsaAvailable(GemvIsa::kAvx512)) isas.push_back(GemvIsa::kAvx512);
  if (GemvQ8VnniAvailable()) dot_isas.push_back(GemvIsa::kAvx512);
  std::printf("%-20s %-9s %4s %-7s %19s %15s %17s\n", "shape", "dtype", "rows", "isa", "ms/call (min-max)",
              "GB/s (max-min)", "cpu ms (min-max)");
  for (const Shape& s : shapes) {
    for (const char* dtype : {"f32", "bf16", "bf16km", "bf16kmdot", "bf16dot", "i8fma", "i8dot", "i8kmdot"}) {
      const bool bf16 = dtype[0] == 'b', q8 = dtype[0] == 'i';
      const bool kmajor = std::strncmp(dtype, "bf16km", 6) == 0 || std::strcmp(dtype, "i8kmdot") == 0;
      const bool dot = std::strstr(dtype, "dot") != nullptr;
      if (dot && !q8 && !GemvBf16DotAvailable()) continue;
      // i8fma: one build (gemv_q8.h, AVX2), listed once; bf16dot: AVX-512 only.
      // i8dot, i8kmdot: AVX2, and AVX-512 VNNI where the CPU has it.
      const std::vector<GemvIsa>& dtype_isas = q8 ? (dot ? dot_isas : std::vector<GemvIsa>{GemvIsa::kAvx2})
                                               : (dot ? std::vector<GemvIsa>{GemvIsa::kAvx512} : isas);
      for (int64_t M : row_counts) {
        std::vector<std::vector<Sample>> got(dtype_isas.size());
        for (int r = 0; r < rounds; ++r) {
          for (size_t i = 0; i < dtype_isas.size(); ++i) {
            got[i].push_back(q8 ? TimeQ8(s, M, dot, kmajor, dtype_isas[i], pool, x, y)
                                : Time(s, bf16, dot, kmajor, M, dtype_isas[i], pool, x, y));
          }
        }
        for (size_t i = 0; i < dtype_isas.size(); ++i) Print(s, dtype, M, GemvIsaName(dtype_isas[i]), got[i]);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
