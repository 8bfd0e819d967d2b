#!/usr/bin/env bash
# TTFT and TPOT through the OpenAI HTTP API against gRPC Generate, on one
# pdserve-local, the same requests, runs interleaved (gRPC, HTTP, gRPC, ...):
#   ROUNDS (3) pairs at each concurrency in CONCURRENCY ("1 4"), NUM_PROMPTS
#   (48) each; MODEL (models/passkey-4l). Writes the pdserve-bench summary
#   lines to OUT (docs/bench/http_vs_grpc_ttft.txt), headed by the machine.
# Takes ~2 minutes on 2 cores with the defaults. Not in CI (timings).
#   bash scripts/bench_http_vs_grpc.sh [--help]
set -euo pipefail
[ "${1:-}" = "--help" ] && { sed -n 2,8p "$0"; exit 0; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
MODEL=${MODEL:-$ROOT/models/passkey-4l}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=${CONCURRENCY:-1 4}
NUM_PROMPTS=${NUM_PROMPTS:-48}
OUT=${OUT:-$ROOT/docs/bench/http_vs_grpc_ttft.txt}
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT

"$BUILD/local/pdserve-local" --model "$MODEL" --port 0 --http-listen 127.0.0.1:0 --log-requests=false \
  >"$WORK/local.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
  grep -q "http on port" "$WORK/local.log" && grep -q "router on" "$WORK/local.log" && break
  sleep 0.1
done
GRPC=$(sed -n 's/.*router on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/local.log")
HTTP=$(sed -n 's/.*http on port \([0-9]*\).*/\1/p' "$WORK/local.log")
[ -n "$GRPC" ] && [ -n "$HTTP" ] || { cat "$WORK/local.log"; echo "pdserve-local did not start" >&2; exit 1; }

summary() {  # the report's headline numbers on one line
  grep -E "Successful requests|Failed requests|Mean TTFT|Median TTFT|P99 TTFT|Median TPOT|Median E2EL" "$1" |
    sed 's/:  */= /' | tr -s ' ' | tr '\n' ';'
}
{
  echo "# pdserve-bench TTFT, gRPC against the OpenAI HTTP API, on one pdserve-local ($(basename "$MODEL")), runs interleaved."
  echo "# Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "# ARGS=--num-prompts $NUM_PROMPTS --concurrency C --input-len 256 --output-len 16 --vocab-size 256 --warmup 3 --seed 1"
  for c in $CONCURRENCY; do
    echo
    echo "## concurrency $c, $NUM_PROMPTS prompts"
    ARGS="--num-prompts $NUM_PROMPTS --concurrency $c --input-len 256 --output-len 16 --vocab-size 256 --warmup 3 --seed 1"
    for r in $(seq 1 "$ROUNDS"); do
      # shellcheck disable=SC2086
      "$BUILD/bench/pdserve-bench" --router "127.0.0.1:$GRPC" $ARGS >"$WORK/g.txt" 2>&1
      # shellcheck disable=SC2086
      "$BUILD/bench/pdserve-bench" --backend openai --base-url "http://127.0.0.1:$HTTP" $ARGS >"$WORK/h.txt" 2>&1
      printf 'grpc-%s:   %s\nopenai-%s: %s\n' "$r" "$(summary "$WORK/g.txt")" "$r" "$(summary "$WORK/h.txt")"
    done
  done
} | tee "$OUT"
