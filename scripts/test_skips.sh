# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/sanitize.sh: which skips a run may
# contain, and the per-case check against them.
#
# Skips are allowed per gtest CASE, never per binary: tests/gtest_main.cc
# prints "PDSERVE_SKIPPED: Suite.Case" for every case that called
# GTEST_SKIP, and each such line must match an entry below whose condition
# holds on this machine; any other skipped case fails the run.
#
# CTest names allowed to skip as a whole (a script's exit 77, no gtest
# cases). On the project's CPU machines nothing skips: none.
# shellcheck disable=SC2034  # read by scripts/test.sh
ALLOWED_SKIPS=()
# "<ctest name>:<glob on Suite.Case>" -> CPU flags (/proc/cpuinfo names): the
# ISA-specific cases skip where the CPU lacks one of the flags (the AVX2
# cases still run and must pass); on a CPU that has them all, a skip fails.
# Each case tests one ISA (tests/gemv_*_test.cc, decode_attention_test.cc,
# bf16_matmul_test.cc, gemm_amx_test.cc), so a glob names whole cases.
declare -A CPU_GATED_SKIPS=(
  ['gemv_kernels_test:*Avx512*']='avx512f'
  ['decode_attention_test:*Avx512*']='avx512f'
  ['gemv_q8_test:*Avx512*']='avx512f avx512bw avx512vl avx512_vnni'
  ['mxfp4_test:*Avx512*']='avx512f'
  ['mxfp4_test:*Avx512Vnni*']='avx512f avx512bw avx512vl avx512_vnni'
  ['mxfp4_gemm_test:*Avx512*']='avx512f'
  ['bf16_matmul_test:Bf16MatmulAmxTest.*']='amx_bf16'
  ['bf16_matmul_test:Bf16MatmulSplitTest.*']='avx512f avx512bw avx512vl avx512_bf16 amx_tile amx_bf16'
  ['bf16_matmul_test:Bf16MatmulDotTest.*']='avx512f avx512bw avx512vl avx512_bf16'
  ['crc32c_test:*Hardware*']='sse4_2'
  ['gemm_amx_test:*']='avx512f avx512bw avx512vl avx512_bf16 amx_tile amx_bf16'
)
# Cases allowed to skip only where a GPU is visible (/dev/nvidia[0-9]*):
# nccl_kv_transfer_test tests the NCCL fallbacks of a machine without a
# usable GPU; on a GPU machine the gpu-labelled nccl_handoff_gpu_test runs.
GPU_GATED_SKIPS=('nccl_kv_transfer_test:NcclKvTransferTest.CommunicatorThatFailsToFormFallsBackToGrpc')
have_gpu() { compgen -G '/dev/nvidia[0-9]*' >/dev/null; }
# Why a skipped case of ctest $1 is allowed here ("" = not allowed).
case_allowed() {
  local key="$1:$2" pat flag
  for pat in "${!CPU_GATED_SKIPS[@]}"; do
    # shellcheck disable=SC2053  # $pat is a glob
    [[ $key == $pat ]] || continue
    for flag in ${CPU_GATED_SKIPS[$pat]}; do
      grep -qw -- "$flag" /proc/cpuinfo || { echo "this CPU lacks $flag"; return; }
    done
  done
  for pat in "${GPU_GATED_SKIPS[@]}"; do
    # shellcheck disable=SC2053
    [[ $key == $pat ]] && have_gpu && { echo "a GPU is visible"; return; }
  done
  echo ""
}

# "<ctest name> <Suite.Case>" for every "PDSERVE_SKIPPED: Suite.Case" line of
# a CTest log ($1, Testing/Temporary/LastTest.log: the output of every test,
# passed, skipped or failed; each test's block starts "<n>/<N> Test: <name>").
skipped_cases() {
  awk '/^[0-9]+\/[0-9]+ Test: /{name=$3} /^PDSERVE_SKIPPED: /{print name, $2}' "$1" 2>/dev/null | sort -u
}

# Prints each "<ctest name> <Suite.Case>" argument with the verdict; returns
# how many are not allowed on this machine (0: all allowed).
check_skipped_cases() {
  local tc why bad=0
  for tc in "$@"; do
    why=$(case_allowed "${tc%% *}" "${tc#* }")
    if [[ -n $why ]]; then
      echo "  case ${tc%% *}:${tc#* } (allowed: $why)"
    else
      echo "  case ${tc%% *}:${tc#* } (NOT allowed here: CPU_GATED_SKIPS / GPU_GATED_SKIPS in scripts/test_skips.sh)"
      bad=$((bad + 1))
    fi
  done
  return "$bad"
}
