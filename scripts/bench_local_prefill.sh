#!/usr/bin/env bash
# Conditional local prefill: TTFT of a prompt prefilled by the prefill
# worker (K/V handed off over gRPC) against the same prompt prefilled on the
# decode worker itself (router --local-prefill-max-tokens), on an idle
# stack, at several prompt lengths. One pdserve-decode and one
# pdserve-prefill process (2 threads each; only one works at a time) and two
# routers in front of them, one per policy; requests run one at a time.
# Usage: scripts/bench_local_prefill.sh MODEL_DIR "16 64 256 1024" OUT_DIR
# Environment: WEIGHTS=bf16 N=5 (requests per point, after one warmup).
set -euo pipefail
M=$1; LENS=$2; OUT=$3
B=build
WEIGHTS=${WEIGHTS:-bf16}; N=${N:-5}
mkdir -p "$OUT"
export OMP_WAIT_POLICY=PASSIVE
source "$(dirname "$0")/bench_lib.sh"
bench_spawn $B/decode_service/pdserve-decode --model "$M" --listen 127.0.0.1:50561 --weights-dtype "$WEIGHTS" --threads 2 \
  --metrics-port -1 >"$OUT/decode.log" 2>&1
bench_spawn $B/prefill_service/pdserve-prefill --model "$M" --listen 127.0.0.1:50562 --weights-dtype "$WEIGHTS" --threads 2 \
  --metrics-port -1 >"$OUT/prefill.log" 2>&1
bench_await "$OUT/decode.log" "serving on"
bench_await "$OUT/prefill.log" "serving on"
for policy in handoff:0 local:1000000; do
  port=$([ "${policy%%:*}" = handoff ] && echo 50563 || echo 50564)
  bench_spawn $B/router/pdserve-router --model "$M" --listen 127.0.0.1:$port --prefill 127.0.0.1:50562 \
    --decode 127.0.0.1:50561 --local-prefill-max-tokens "${policy##*:}" --log-requests=false --metrics-port -1 \
    >"$OUT/router_${policy%%:*}.log" 2>&1
  bench_await "$OUT/router_${policy%%:*}.log" "serving on"
done
for len in $LENS; do
  for policy in handoff local; do
    port=$([ $policy = handoff ] && echo 50563 || echo 50564)
    echo "== $len tokens, $policy" >&2
    $B/bench/pdserve-bench --router 127.0.0.1:$port --concurrency 1 --num-prompts "$N" --warmup 1 \
      --input-len "$len" --output-len 2 --seed "$len" --json-out "$OUT/${policy}_$len.json" >/dev/null 2>&1
  done
done
/usr/bin/python3 - "$OUT" "$LENS" <<'PY'
import json, sys
out, lens = sys.argv[1], sys.argv[2].split()
print("| prompt tokens | TTFT p50 ms, prefill worker + hand-off | TTFT p50 ms, local prefill | saved ms | saved % |")
print("|---:|---:|---:|---:|---:|")
for n in lens:
    h = json.load(open(f"{out}/handoff_{n}.json"))["ttft_ms"]["median"]
    l = json.load(open(f"{out}/local_{n}.json"))["ttft_ms"]["median"]
    print(f"| {n} | {h:.1f} | {l:.1f} | {h - l:.1f} | {100 * (h - l) / h:.0f}% |")
PY
