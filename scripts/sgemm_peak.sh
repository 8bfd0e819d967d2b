#!/usr/bin/env bash
# This machine's practical fp32 GEMM peak: OpenBLAS sgemm (the system
# libblas.so.3 that scripts/setup.sh installs) at 2048^3 with 1 and 2
# threads. The compute ceiling for prefill and large-batch decode
# (docs/benchmarks.md). Runs OpenBLAS's own kernel pick and, where that is
# narrower than the CPU's vectors, the OPENBLAS_CORETYPE the pdserve binaries
# set (common/util/blas_env.h): the peak pdserve actually gets. Where the
# environment sets OPENBLAS_CORETYPE (some machine images do), the binaries
# keep it, so that kernel's peak is run too.
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
