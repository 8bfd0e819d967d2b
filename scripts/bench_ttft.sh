#!/usr/bin/env bash
# TTFT of disaggregated (separate pdserve-prefill, pdserve-decode and
# pdserve-router processes, gRPC hand-off) against single-process serving,
# and the hand-off's bytes and time, at several prompt lengths.
# Usage: scripts/bench_ttft.sh MODEL_DIR f32|bf16 128,512,1024,2048 OUT.csv
# (run from the repository root after scripts/build.sh; numbers in docs/benchmarks.md)
set -euo pipefail
M=$1; KV=$2; LENS=$3; CSV=$4
B=build
pkill -f "pdserve-(decode|prefill|router) --model" 2>/dev/null || true
export OMP_WAIT_POLICY=PASSIVE
$B/decode_service/pdserve-decode --model $M --listen 127.0.0.1:50261 --kv-dtype $KV --threads 2 > /tmp/d.log 2>&1 &
$B/prefill_service/pdserve-prefill --model $M --listen 127.0.0.1:50262 --kv-dtype $KV --threads 2 > /tmp/p.log 2>&1 &
for _ in $(seq 1 600); do grep -q "serving on" /tmp/d.log && grep -q "serving on" /tmp/p.log && break; sleep 0.2; done
$B/router/pdserve-router --model $M --listen 127.0.0.1:50263 --prefill 127.0.0.1:50262 --decode 127.0.0.1:50261 --log-requests=false > /tmp/r.log 2>&1 &
sleep 1
$B/bench/pdserve-ttft-bench --model $M --router 127.0.0.1:50263 --kv-dtype $KV --threads 2 --prompt-lens $LENS --trials 3 --csv-out $CSV
pkill -f "pdserve-(decode|prefill|router) --model" || true
