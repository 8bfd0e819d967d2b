// pdserve-prefill-attn-bench: the fused prefill attention kernel alone
// (prefill_attention.h), one thread, per ISA build, on a causal global layer
// of a T-token prompt, against this core's fp32 FMA peak measured in the
// same run (12 independent FMA chains in registers, no memory traffic).
// Times are the thread's CPU time, so a busy machine slows the wall clock,
// not the rates.
//
//   pdserve-prefill-attn-bench [--shape H,K,d] [--lengths 8192,32768,131072] [--rows N]
//
// Per length it times the last N query rows (default 1024: the deepest,
// costliest rows, whose every key tile is full), counts their exact FLOPs
// (2 * d per query head and allowed key for the scores, as many for the
// weighted values), and prints GFLOP/s, its share of the FMA peak, and the
// whole layer's time at that rate on 1 and 2 threads (the causal triangle:
// T (T + 1) / 2 pairs). The memory line gives what the fused path holds
// (K/V in the kernel's layout, queries, output, one thread's scratch) beside
// the T x T x H fp32 scores an unfused path would need.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_clock.h"
#include "common/kernels/prefill_attention.h"

namespace pdserve {
namespace {

// This thread's CPU time (bench_clock.h).
double Now() { return bench::ThreadCpuSeconds(); }

// One core's fp32 FMA rate (GFLOP/s): 12 independent chains of 512-bit (or
// 256-bit) FMAs, best of 3.
__attribute__((target("avx512f"))) double FmaPeak512() {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
    const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    const int64_t iters = 20'000'000;
    const double t0 = Now();
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
    const double s = Now() - t0;
    float sink = 0;
    for (int i = 0; i < 12; ++i) sink += _mm512_reduce_add_ps(a[i]);
    if (sink == 12345.0f) std::printf(" ");
    best = std::max(best, iters * 12.0 * 16 * 2 / s / 1e9);
  }
  return best;
}

__attribute__((target("avx2,fma"))) double FmaPeak256() {
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    __m256 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
    const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    const int64_t iters = 20'000'000;
    const double t0 = Now();
    for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
    const double s = Now() - t0;
    float lanes[8], sink = 0;
    for (int i = 0; i < 12; ++i) {
      _mm256_storeu_ps(lanes, a[i]);
      sink += lanes[0];
    }
    if (sink == 12345.0f) std::printf(" ");
    best = std::max(best, iters * 12.0 * 8 * 2 / s / 1e9);
  }
  return best;
}

// A global layer's K/V of T keys in the kernel's layout (random, like the
// queries), built without ATen.
struct Layer {
  std::vector<float> q, kt, v, sinks;
  PrefillAttnKeys keys;
};

Layer MakeLayer(const DecodeAttnShape& s, int64_t T) {
  const int64_t H = s.n_heads, K = s.n_kv_heads, d = s.head_dim;
  const PrefillAttnKeyLayout layout(0, T);
  const int64_t tiles = layout.slots / kPrefillKeyTile;
  Layer L;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  L.q.resize(T * H * d);
  for (float& x : L.q) x = nd(rng);
  L.kt.assign(K * layout.slots * d, 0.0f);
  L.v.assign(K * layout.slots * d, 0.0f);
  for (int64_t g = 0; g < K; ++g) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tile = t / kPrefillKeyTile, j = t % kPrefillKeyTile;
      for (int64_t i = 0; i < d; ++i) {
        L.kt[((g * tiles + tile) * d + i) * kPrefillKeyTile + j] = nd(rng);
        L.v[(g * layout.slots + t) * d + i] = nd(rng);
      }
    }
  }
  L.sinks.assign(H, 0.5f);
  L.keys = {L.kt.data(), L.v.data(), layout.slots, 0, 0, T};
  return L;
}

void RunLength(const DecodeAttnShape& s, int64_t T, int64_t rows, DecodeAttnIsa isa, double peak) {
  const int64_t H = s.n_heads, K = s.n_kv_heads, d = s.head_dim;
  const Layer L = MakeLayer(s, T);
  std::vector<float> out(T * H * d), scratch(PrefillAttnScratchFloats(s));
  const PrefillAttnQueries qa{L.q.data(), T, 0, 0};
  const int64_t b1 = PrefillAttnBlocks(T), b0 = std::max<int64_t>(0, b1 - PrefillAttnBlocks(rows));
  double pairs = 0;  // (query row, allowed key) pairs of the timed rows
  for (int64_t t = b0 * kPrefillQueryRows; t < T; ++t) pairs += t + 1;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    const double t0 = Now();
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t g = 0; g < K; ++g) {
        PrefillAttentionBlock(qa, L.keys, s, L.sinks.data(), b, g, scratch.data(), out.data(), isa);
      }
    }
    best = std::min(best, Now() - t0);
  }
  const double flops = pairs * H * 4.0 * d, gflops = flops / best / 1e9;
  const double layer_flops = T * (T + 1.0) / 2 * H * 4.0 * d;
  std::printf("%-7s T %7lld  rows %5lld  %7.1f GFLOP/s  %5.1f%% of FMA peak  layer %.2f TFLOP: %7.2f s on 1 thread, "
              "%7.2f s on 2\n",
              DecodeAttnIsaName(isa), static_cast<long long>(T), static_cast<long long>(T - b0 * kPrefillQueryRows),
              gflops, 100.0 * gflops / peak, layer_flops / 1e12, layer_flops / 1e9 / gflops,
              layer_flops / 2e9 / gflops);
  const double kv = 2.0 * K * L.keys.slots * d * 4, qo = 2.0 * T * H * d * 4, sc = scratch.size() * 4.0;
  std::printf("        memory: K/V %.1f MiB + q/out %.1f MiB + scratch %.1f KiB per thread; unfused scores "
              "T x T x H fp32: %.1f GiB\n",
              kv / (1 << 20), qo / (1 << 20), sc / 1024, static_cast<double>(T) * T * H * 4 / (1 << 30));
  std::fflush(stdout);
}

constexpr char kUsage[] =
    "pdserve-prefill-attn-bench: the fused prefill attention kernel alone, one thread, per ISA build, on a\n"
    "causal global layer (every key allowed up to the query), timing the last --rows query rows of each\n"
    "length, against this core's fp32 FMA peak.\n"
    "Usage: pdserve-prefill-attn-bench [--shape H,K,d (4,2,32: passkey-4l; 8,4,96: the 502M default)]\n"
    "       [--lengths 8192,32768,131072] [--rows 1024]\n";

bool ParseList(const char* p, std::vector<int64_t>* out) {
  char* end = nullptr;
  while (*p != '\0') {
    const int64_t n = std::strtoll(p, &end, 10);
    if (end == p || n < 1 || n > (int64_t{1} << 20) || (*end != ',' && *end != '\0')) return false;
    out->push_back(n);
    p = *end == ',' ? end + 1 : end;
  }
  return !out->empty();
}

int Main(int argc, char** argv) {
  std::vector<int64_t> shape = {4, 2, 32}, lengths = {8192, 32768, 131072};
  int64_t rows = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    const bool ok = i + 1 < argc && ((a == "--shape" && (shape.clear(), ParseList(argv[i + 1], &shape)) &&
                                      shape.size() == 3) ||
                                     (a == "--lengths" && (lengths.clear(), ParseList(argv[i + 1], &lengths))) ||
                                     (a == "--rows" && (rows = std::atoll(argv[i + 1])) > 0));
    if (!ok) {
      std::fprintf(stderr, "pdserve-prefill-attn-bench: bad argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
    ++i;
  }
  const DecodeAttnShape s{shape[0], shape[1], shape[2], false};
  if (!PrefillAttnSupported(s)) {
    std::fprintf(stderr, "pdserve-prefill-attn-bench: the kernel does not take H %lld K %lld d %lld on this CPU\n",
                 static_cast<long long>(s.n_heads), static_cast<long long>(s.n_kv_heads),
                 static_cast<long long>(s.head_dim));
    return 1;
  }
  const bool has512 = DecodeAttnIsaAvailable(DecodeAttnIsa::kAvx512);
  const double peak256 = FmaPeak256(), peak512 = has512 ? FmaPeak512() : 0;
  std::printf("shape H %lld K %lld d %lld; one core's fp32 FMA peak: %.1f GFLOP/s (256-bit)", 
              static_cast<long long>(s.n_heads), static_cast<long long>(s.n_kv_heads),
              static_cast<long long>(s.head_dim), peak256);
  if (has512) std::printf(", %.1f GFLOP/s (512-bit)", peak512);
  std::printf("\n");
  for (int64_t T : lengths) {
    if (has512) RunLength(s, T, std::min(rows, T), DecodeAttnIsa::kAvx512, peak512);
    RunLength(s, T, std::min(rows, T), DecodeAttnIsa::kAvx2, peak256);
  }
  return 0;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
