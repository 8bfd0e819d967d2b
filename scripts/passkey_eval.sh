#!/usr/bin/env bash
# The passkey acceptance run of docs/passkey.md: separate pdserve-decode,
# pdserve-prefill and pdserve-router processes on loopback serve MODEL;
# pdserve-passkey runs TRIALS greedy trials per length at the start, middle
# and end positions; then pdserve-generate (one process) answers the very
# same prompts, and scripts/passkey_report.py compares them trial for trial
# and writes the table, the CSV and the plot into OUT.
# Usage: scripts/passkey_eval.sh [MODEL] [OUT] [LENGTHS] [TRIALS]
#   defaults: models/passkey-4l build/passkey-eval 512,2048,4096,8192 100
# COMPARE_PER_CELL=N compares only the first N trials of each position and
# length with pdserve-generate (default: all). Run time on 2 cores: ~45
# minutes for the served trials at the defaults, and about as long again to
# compare every one of them in one process (docs/passkey.md).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/passkey-4l}
OUT=${2:-build/passkey-eval}
LENGTHS=${3:-512,2048,4096,8192}
TRIALS=${4:-100}
B=${PDSERVE_BUILD:-build}
source scripts/bench_lib.sh
mkdir -p "$OUT"
# Two LibTorch processes share the cores: no OpenMP spin-waiting.
export OMP_WAIT_POLICY=PASSIVE

# Every server listens on a port the kernel picks (port 0) and prints it.
bench_spawn "$B/decode_service/pdserve-decode" --model "$MODEL" --listen 127.0.0.1:0 --threads 1 \
  --metrics-port -1 >"$OUT/decode.log" 2>&1
bench_spawn "$B/prefill_service/pdserve-prefill" --model "$MODEL" --listen 127.0.0.1:0 --threads 2 \
  --metrics-port -1 >"$OUT/prefill.log" 2>&1
DECODE_PORT=$(bench_port "$OUT/decode.log")
PREFILL_PORT=$(bench_port "$OUT/prefill.log")
bench_spawn "$B/router/pdserve-router" --model "$MODEL" --listen 127.0.0.1:0 \
  --prefill "127.0.0.1:$PREFILL_PORT" --decode "127.0.0.1:$DECODE_PORT" --log-requests=false --metrics-port -1 \
  --http-listen= >"$OUT/router.log" 2>&1
ROUTER=127.0.0.1:$(bench_port "$OUT/router.log")

echo "passkey_eval: $MODEL on router $ROUTER (separate decode, prefill and router processes)"
for pos in start middle end; do
  "$B/clients/pdserve-passkey" --router "$ROUTER" --context-lengths "$LENGTHS" --n-trials "$TRIALS" \
    --position "$pos" --seed 0 --concurrency 2 --target 0.85 --json-out "$OUT/passkey_$pos.json" |
    tee "$OUT/passkey_$pos.txt"
done
bench_stop

/usr/bin/python3 scripts/passkey_report.py --model "$MODEL" --generate "$B/clients/pdserve-generate" --out "$OUT" \
  --compare-per-cell "${COMPARE_PER_CELL:-0}" \
  "$OUT/passkey_start.json" "$OUT/passkey_middle.json" "$OUT/passkey_end.json"
