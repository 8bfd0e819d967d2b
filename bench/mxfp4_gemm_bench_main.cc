// pdserve-mxfp4-gemm-bench: one gpt-oss-20b expert projection with many
// rows of x (prefill), one thread: the GEMV path as MoeMxfp4 ran it before
// GemmMxfp4Fma (per tile of GemvTileRows weight rows, GemvMxfp4Fma on
// kGemvMaxRows rows at a time) against GemmMxfp4Fma (common/kernels/mxfp4.h),
// per ISA build, interleaved rounds; checks that both give the same bits.
//
//   pdserve-mxfp4-gemm-bench [ROUNDS=5] [ROWS=64]
//
// Prints per (shape, path, isa) the best and worst round in thread CPU ms per
// call and GFLOP/s (2 * ROWS * N * K per call). x is packed once, outside the timing.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/bench_clock.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/mxfp4.h"

namespace pdserve {
namespace {

// This thread's CPU time (bench_clock.h).
double Now() { return bench::ThreadCpuSeconds(); }

struct Expert {
  int64_t N, K;
  std::vector<uint8_t> blocks, scales;
  Expert(int64_t n, int64_t k) : N(n), K(k), blocks(n * Mxfp4RowBytes(k)), scales(n * Mxfp4RowScales(k)) {
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(117 + i % 21);
  }
  Mxfp4Matrix Matrix() const { return {blocks.data(), scales.data(), nullptr, K}; }
};

// The GEMV path: per weight tile, every group of kGemvMaxRows rows.
void OldPath(const float* xp, int64_t M, const Mxfp4Matrix& W, int64_t N, GemvIsa isa, float* y) {
  const int64_t tile = GemvTileRows(Mxfp4RowBytes(W.K) + Mxfp4RowScales(W.K));
  for (int64_t n0 = 0; n0 < N; n0 += tile) {
    for (int64_t m = 0; m < M; m += kGemvMaxRows) {
      GemvMxfp4Fma(xp + m * W.K, std::min(kGemvMaxRows, M - m), W, n0, std::min(N, n0 + tile), y + m * N, N, isa);
    }
  }
}

double TimeMs(bool gemm, const float* xp, int64_t M, const Expert& e, GemvIsa isa, float* y) {
  const double t0 = Now();
  if (gemm) {
    GemmMxfp4Fma(xp, M, e.Matrix(), 0, e.N, y, e.N, isa);
  } else {
    OldPath(xp, M, e.Matrix(), e.N, isa, y);
  }
  return (Now() - t0) * 1e3;
}

constexpr char kUsage[] =
    "pdserve-mxfp4-gemm-bench: one gpt-oss-20b expert projection (gate_up [5760, 2880], down [2880, 2880])\n"
    "with ROWS rows of x on one thread, the MXFP4 GEMV path (4 rows a pass) against GemmMxfp4Fma, per ISA\n"
    "build; thread CPU time, min-max over ROUNDS interleaved rounds, and whether the two give the same bits.\n"
    "Usage: pdserve-mxfp4-gemm-bench [ROUNDS>=1, default 5] [ROWS>=1, default 64]   (needs AVX2 + FMA)\n";

// The positive integer in `arg`, or 0 when it is not one.
int64_t PositiveArg(const char* arg) {
  char* end = nullptr;
  const long long v = std::strtoll(arg, &end, 10);
  return *end == '\0' && v > 0 ? v : 0;
}

int Main(int argc, char** argv) {
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const int rounds = argc > 1 ? static_cast<int>(PositiveArg(argv[1])) : 5;
  const int64_t M = argc > 2 ? PositiveArg(argv[2]) : 64;
  if (rounds < 1 || M < 1 || argc > 3 || !Mxfp4Available()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::vector<GemvIsa> isas = {GemvIsa::kAvx2};
  if (Mxfp4FmaAvx512Available()) isas.push_back(GemvIsa::kAvx512);
  std::printf("rows %ld, one thread\n%-20s %-5s %-7s %19s %17s\n", static_cast<long>(M), "shape", "path", "isa",
              "cpu ms (min-max)", "GFLOP/s (max-min)");
  for (const auto& [name, N] : {std::pair<const char*, int64_t>{"gate_up [5760,2880]", 5760},
                                std::pair<const char*, int64_t>{"down [2880,2880]", 2880}}) {
    const Expert e(N, 2880);
    std::vector<float> x(M * e.K), xp(M * e.K), y0(M * N), y1(M * N);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 7919 % 2001) - 1000) / 997.0f;
    PackRowsMxfp4(x.data(), M, e.K, xp.data());
    const double gflop = 2.0 * M * N * e.K * 1e-9;
    for (GemvIsa isa : isas) {
      std::vector<double> ms[2];
      for (int r = 0; r < rounds; ++r) {
        ms[0].push_back(TimeMs(false, xp.data(), M, e, isa, y0.data()));
        ms[1].push_back(TimeMs(true, xp.data(), M, e, isa, y1.data()));
      }
      const bool same = std::memcmp(y0.data(), y1.data(), y0.size() * 4) == 0;
      for (int g = 0; g < 2; ++g) {
        const auto [lo, hi] = std::minmax_element(ms[g].begin(), ms[g].end());
        std::printf("%-20s %-5s %-7s %8.2f-%-10.2f %7.1f-%-7.1f%s\n", name, g ? "gemm" : "gemv", GemvIsaName(isa), *lo,
                    *hi, gflop / *lo * 1e3, gflop / *hi * 1e3, g && !same ? "  BITS DIFFER" : "");
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
