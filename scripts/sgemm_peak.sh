#!/usr/bin/env bash
# This machine's practical fp32 GEMM peak: OpenBLAS sgemm (the system
# libblas.so.3 that scripts/setup.sh installs) at 2048^3 with 1 and 2
# threads. The compute ceiling for prefill and large-batch decode
# (docs/benchmarks.md). Runs OpenBLAS's own kernel pick and, where that is
# narrower than the CPU's vectors, the OPENBLAS_CORETYPE the pdserve binaries
# set (common/util/blas_env.h): the peak pdserve actually gets. Where the
# environment sets OPENBLAS_CORETYPE (some machine images do), the binaries
# keep it, so that kernel's peak is run too.
# Then the CPU's fp32 FMA issue rate with no memory traffic (12 independent
# FMA chains in registers per thread, 256-bit and, where the CPU has
# AVX-512F, 512-bit; best of 3): the ceiling no GEMM reaches, to say what
# share of it the sgemm peak is.
set -euo pipefail
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat >"$TMP/peak.cc" <<'CC'
#include <chrono>
#include <cstdio>
#include <vector>
extern "C" void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);
extern "C" void openblas_set_num_threads(int);
int main() {
  const int n = 2048;
  std::vector<float> A(n * n, 0.5f), B(n * n, 0.25f), C(n * n);
  const float one = 1, zero = 0;
  for (int t : {1, 2}) {
    openblas_set_num_threads(t);
    sgemm_("N", "N", &n, &n, &n, &one, A.data(), &n, B.data(), &n, &zero, C.data(), &n);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 3; ++r) sgemm_("N", "N", &n, &n, &n, &one, A.data(), &n, B.data(), &n, &zero, C.data(), &n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("OpenBLAS sgemm %dx%dx%d, %d thread(s): %.1f GFLOP/s\n", n, n, n, t, 3 * 2.0 * n * n * n / s / 1e9);
  }
}
CC
g++ -O2 "$TMP/peak.cc" -o "$TMP/peak" -l:libblas.so.3 -l:libopenblas.so.0
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
want=""
if has avx512f && has avx512bw && has avx512vl; then want=SkylakeX; elif has avx2 && has fma; then want=Haswell; fi
own=$(unset OPENBLAS_CORETYPE; OPENBLAS_VERBOSE=2 "$TMP/peak" 2>&1)
picked=$(sed -n 's/^Core: //p' <<<"$own" | head -1)
echo "OpenBLAS's own kernel pick: $picked"
grep -v '^Core: ' <<<"$own"
case $picked in SkylakeX|Cooperlake|SapphireRapids) want="" ;; Haswell|Zen) [[ $want == Haswell ]] && want="" ;; esac
if [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
  echo "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment (the pdserve binaries keep it):"
  "$TMP/peak"
elif [[ -n $want ]]; then
  echo "OPENBLAS_CORETYPE=$want (what the pdserve binaries set on this CPU):"
  OPENBLAS_CORETYPE=$want "$TMP/peak"
fi
cat >"$TMP/fma.cc" <<'CC'
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
// 12 independent chains a = a * m + c per thread: the FMA units' issue rate.
// The first lane of every chain is summed, so none can be dropped.
#define PDSERVE_FMA_CHAINS(V, SET, FMA)                                     \
  V a[12];                                                                \
  for (int i = 0; i < 12; ++i) a[i] = SET(1.0f + static_cast<float>(i) * 1e-7f); \
  const V m = SET(0.9999999f), c = SET(1e-7f);                            \
  for (long it = 0; it < iters; ++it) {                                   \
    _Pragma("GCC unroll 12") for (int i = 0; i < 12; ++i) a[i] = FMA(a[i], m, c); \
  }                                                                       \
  float sum = 0;                                                          \
  for (int i = 0; i < 12; ++i) {                                          \
    float lane;                                                           \
    std::memcpy(&lane, &a[i], sizeof(lane));                              \
    sum += lane;                                                          \
  }                                                                       \
  return sum;
__attribute__((target("avx2,fma"))) float Run256(long iters) { PDSERVE_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps) }
__attribute__((target("avx512f"))) float Run512(long iters) { PDSERVE_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps) }
volatile float g_sink;  // every run's sum is stored here, so no run's chains can be optimized away
double Rate(float (*run)(long), int lanes, int threads) {
  const long iters = 100000000;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::thread> ts;
    std::vector<float> sink(threads);
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { sink[t] = run(iters); });
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float x : sink) g_sink = x;
    best = std::max(best, 2.0 * iters * 12 * lanes * threads / s / 1e9);
  }
  return best;
}
int main() {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  for (int t : {1, 2}) {
    std::printf("fp32 FMA issue rate, registers only, %d thread(s): %.1f GFLOP/s (256-bit)", t, Rate(Run256, 8, t));
    if (avx512) std::printf(", %.1f GFLOP/s (512-bit)", Rate(Run512, 16, t));
    std::printf("\n");
  }
}
CC
g++ -O2 -std=c++17 -pthread "$TMP/fma.cc" -o "$TMP/fma"
"$TMP/fma"
