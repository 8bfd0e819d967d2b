#!/usr/bin/env bash
# The passkey acceptance run of docs/passkey.md: separate pdserve-decode,
# pdserve-prefill and pdserve-router processes on loopback serve MODEL;
# pdserve-passkey --protocol seed runs 3 x TRIALS greedy trials per length,
# trial i at the start, middle or end by i % 3 (TRIALS at each position);
# then pdserve-generate (one process) answers the very same prompts, and
# scripts/passkey_report.py compares them trial for trial and writes the
# table, the CSV and the plot into OUT.
# Usage: scripts/passkey_eval.sh [MODEL] [OUT] [LENGTHS] [TRIALS]
#   defaults: models/passkey-4l build/passkey-eval 512,2048,4096,8192 100
# Each finished trial is appended to OUT/passkey_trials.jsonl; RESUME=1
# continues a run that was stopped (same MODEL, LENGTHS and seed; TRIALS may
# grow) instead of starting it over. CONCURRENCY=N keeps N trials in flight
# (default 1). FIRST_TRIAL=N runs only trials N.. of each length (a run split
# across sessions; pdserve-passkey --first-trial). COMPARE_PER_CELL=N compares only the
# first N trials of each position and length with pdserve-generate (default:
# all). Run time on 2 cores: ~45 minutes for the served trials at the
# defaults, and about as long again to compare every one of them in one
# process (docs/passkey.md).
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
JSONL="$OUT/passkey_trials.jsonl"
RESUME_FLAG=()
if [ "${RESUME:-0}" = 1 ]; then
  RESUME_FLAG=(--resume)
else
  rm -f "$JSONL"
fi
# One trial at a time by default (CONCURRENCY=N for more): the prefill worker
# runs one prompt at a time anyway, so a second trial in flight only waits in
# its queue (its hand-off kept alive meanwhile) and overlaps the first one's
# decode; each trial's TTFT is then its own prefill plus that wait.
"$B/clients/pdserve-passkey" --router "$ROUTER" --protocol seed --context-lengths "$LENGTHS" \
  --n-trials $((3 * TRIALS)) --seed 0 --concurrency "${CONCURRENCY:-1}" --target 0.85 --trials-jsonl "$JSONL" "${RESUME_FLAG[@]}" \
  --first-trial "${FIRST_TRIAL:-0}" \
  --json-out "$OUT/passkey_seed.json" | tee "$OUT/passkey_seed.txt"
bench_stop

/usr/bin/python3 scripts/passkey_report.py --model "$MODEL" --generate "$B/clients/pdserve-generate" --out "$OUT" \
  --compare-per-cell "${COMPARE_PER_CELL:-0}" "$OUT/passkey_seed.json"
