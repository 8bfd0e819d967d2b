#!/usr/bin/env bash
# One long-context request through separate pdserve-decode, pdserve-prefill
# and pdserve-router processes on loopback (docs/benchmarks.md, "Long context
# (128K)"), and what it costs:
#   TTFT (client, and the prefill worker's prefill time), the K/V bytes
#   handed off, the decode worker's KV for the sequence (its live
#   reservation and allocation, polled from /metrics) against an all-global
#   cache of the same length, decode tokens/s at that depth, and each
#   process's peak RSS (VmHWM, read before stopping) against the memory
#   estimate it printed at startup (the peak while loading is reported
#   apart: the peak restarts just before the request).
# Usage: scripts/bench_long_context.sh [MODEL|default] [LENGTH] [OUT]
#   MODEL    a checkpoint directory (default models/passkey-4l: the request is
#            a passkey prompt of LENGTH tokens from pdserve-passkey, one trial,
#            middle position), or `default`: the 502M default config
#            (configs/gpt-oss-lite-502m.json) with random weights, made once
#            by pdserve-init-model in build/models/lite, and a prompt of LENGTH
#            random token ids sent by pdserve-cli. A prompt plus NEW_TOKENS
#            above the model's max_context is shortened to fit (said so).
#   LENGTH   prompt tokens (default 32768)
#   OUT      folder for result.json, result.md and the server logs
#            (default build/bench-long-context/<model>_<LENGTH>)
# Environment: NEW_TOKENS (32), WEIGHTS (f32), KV (f32): the servers'
# --weights-dtype and --kv-dtype; THREADS (2) per worker; DECODE_ARGS (extra
# pdserve-decode flags, e.g. "--kv-budget-mb 8192"); PDSERVE_BUILD (build).
# Run time on 2 shared cores (docs/benchmarks.md §14): passkey-4l at 32768
# ~10 s; 502M at 8192 ~50 s, at 32768 ~3.5 min (plus ~15 s to make the
# checkpoint once).
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s.%N)
MODEL=${1:-models/passkey-4l}
LENGTH=${2:-32768}
B=${PDSERVE_BUILD:-build}
NEW_TOKENS=${NEW_TOKENS:-32}
WEIGHTS=${WEIGHTS:-f32}
KV=${KV:-f32}
THREADS=${THREADS:-2}
source scripts/bench_lib.sh
# Several LibTorch processes share the cores: no OpenMP spin-waiting (§8).
export OMP_WAIT_POLICY=PASSIVE

KIND=passkey
if [ "$MODEL" = default ]; then
  KIND=ids
  MODEL=build/models/lite
  if [ ! -s "$MODEL/model.safetensors" ]; then
    echo "bench_long_context: making $MODEL (configs/gpt-oss-lite-502m.json, seed 1)" >&2
    "$B/clients/pdserve-init-model" --config configs/gpt-oss-lite-502m.json --seed 1 --out "$MODEL" >&2
  fi
fi
[ -s "$MODEL/config.json" ] || { echo "bench_long_context: no checkpoint at $MODEL" >&2; exit 2; }
OUT=${3:-build/bench-long-context/$(basename "$MODEL")_$LENGTH}
mkdir -p "$OUT"
T_READY=$(date +%s.%N)

# Every server listens on ports the kernel picks (port 0) and prints them.
COMMON=(--model "$MODEL" --weights-dtype "$WEIGHTS" --kv-dtype "$KV" --threads "$THREADS"
        --listen 127.0.0.1:0 --metrics-host 127.0.0.1 --metrics-port 0)
# shellcheck disable=SC2086
bench_spawn "$B/decode_service/pdserve-decode" "${COMMON[@]}" ${DECODE_ARGS:-} >"$OUT/decode.log" 2>&1
DECODE_PID=${PIDS[-1]}
bench_spawn "$B/prefill_service/pdserve-prefill" "${COMMON[@]}" >"$OUT/prefill.log" 2>&1
PREFILL_PID=${PIDS[-1]}
DECODE_PORT=$(bench_port "$OUT/decode.log")
PREFILL_PORT=$(bench_port "$OUT/prefill.log")
bench_spawn "$B/router/pdserve-router" --model "$MODEL" --listen 127.0.0.1:0 --prefill "127.0.0.1:$PREFILL_PORT" \
  --decode "127.0.0.1:$DECODE_PORT" --metrics-host 127.0.0.1 --metrics-port 0 --http-listen= >"$OUT/router.log" 2>&1
ROUTER_PID=${PIDS[-1]}
ROUTER=127.0.0.1:$(bench_port "$OUT/router.log")
metrics_port() {
  bench_await "$1" "metrics on port [0-9]"
  sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$1" | head -1
}
echo "bench_long_context: $MODEL ($KIND), $LENGTH tokens, on router $ROUTER" >&2

/usr/bin/python3 scripts/bench_long_context.py --kind "$KIND" --model "$MODEL" --length "$LENGTH" \
  --new-tokens "$NEW_TOKENS" --kv-dtype "$KV" --weights-dtype "$WEIGHTS" --build "$B" --out "$OUT" --router "$ROUTER" \
  --metrics "decode=127.0.0.1:$(metrics_port "$OUT/decode.log")" \
  --metrics "prefill=127.0.0.1:$(metrics_port "$OUT/prefill.log")" \
  --metrics "router=127.0.0.1:$(metrics_port "$OUT/router.log")" \
  --pid "decode=$DECODE_PID" --pid "prefill=$PREFILL_PID" --pid "router=$ROUTER_PID" \
  --t0 "$T0" --t-ready "$T_READY"
bench_stop
