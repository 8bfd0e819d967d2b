#!/usr/bin/env bash
# Passkey accuracy of the trained passkey model with bf16 against int8
# weights, one pdserve-local per variant (router + prefill + decode in one
# process), the same trials (same seed) for each.
# Usage: [VARIANTS="bf16 int8"] scripts/passkey_int8.sh [MODEL] [OUT] [LENGTHS] [TRIALS] [POSITIONS]
#   defaults: models/passkey-4l build/passkey-int8 512,2048,4096 20 start,middle,end
#   A variant is a weights dtype with an optional kernel choice: for bf16 a
#   --bf16-matmul value (VARIANTS="bf16 bf16:dot" compares exact bf16 with
#   bf16 activations), for int8 a --q8-kernel value ("int8:dot" is the
#   kernel that quantizes x too, "int8:fma" the one that keeps x fp32; plain
#   "int8" takes auto: dot where the CPU has AVX2 + FMA + F16C, else fma).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/passkey-4l}
OUT=${2:-build/passkey-int8}
LENGTHS=${3:-512,2048,4096}
TRIALS=${4:-20}
POSITIONS=${5:-start,middle,end}
B=${PDSERVE_BUILD:-build}
source scripts/bench_lib.sh
mkdir -p "$OUT"
export OMP_WAIT_POLICY=PASSIVE
for variant in ${VARIANTS:-bf16 int8}; do
  dtype=${variant%%:*}
  matmul=auto q8=auto
  [[ $variant == *:* ]] && matmul=${variant#*:}
  [[ $dtype == int8 && $matmul != auto ]] && q8=$matmul matmul=auto
  tag=${variant/:/-}
  # The router on a port the kernel picks (port 0), read back from its log.
  bench_spawn "$B/local/pdserve-local" --model "$MODEL" --port 0 --weights-dtype "$dtype" --metrics-port -1 \
    --bf16-matmul "$matmul" --q8-kernel "$q8" --http-listen= >"$OUT/local_$tag.log" 2>&1
  bench_await "$OUT/local_$tag.log" "router on 127.0.0.1:[0-9]"
  PORT=$(sed -n 's/.*router on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/local_$tag.log" | head -1)
  for pos in ${POSITIONS//,/ }; do
    echo "== $variant $pos"
    "$B/clients/pdserve-passkey" --router "127.0.0.1:$PORT" --context-lengths "$LENGTHS" --n-trials "$TRIALS" \
      --position "$pos" --seed 0 --concurrency 2 --json-out "$OUT/passkey_${tag}_$pos.json" | tee "$OUT/passkey_${tag}_$pos.txt"
  done
  bench_stop
done
