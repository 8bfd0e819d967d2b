#!/usr/bin/env bash
# TTFT of disaggregated (separate pdserve-prefill, pdserve-decode and
# pdserve-router processes, gRPC hand-off) against single-process serving,
# and the hand-off's bytes and time, at several prompt lengths. Also prints
# the CPU time each server process spent during the bench (the served
# trials; the servers idle through the in-process ones), from /proc.
# Usage: scripts/bench_ttft.sh MODEL_DIR f32|bf16 128,512,1024,2048 OUT.csv
# Environment: SERVERS=DIR takes the three servers from another build tree
# (an A/B of the serving path; pdserve-ttft-bench stays this tree's).
# (run from the repository root after scripts/build.sh; numbers in docs/benchmarks.md)
set -euo pipefail
M=$1; KV=$2; LENS=$3; CSV=$4
B=build
S=${SERVERS:-$B}
pkill -f "pdserve-(decode|prefill|router) --model" 2>/dev/null || true
export OMP_WAIT_POLICY=PASSIVE
$S/decode_service/pdserve-decode --model $M --listen 127.0.0.1:50261 --kv-dtype $KV --threads 2 > /tmp/d.log 2>&1 &
DECODE=$!
$S/prefill_service/pdserve-prefill --model $M --listen 127.0.0.1:50262 --kv-dtype $KV --threads 2 > /tmp/p.log 2>&1 &
PREFILL=$!
for _ in $(seq 1 600); do grep -q "serving on" /tmp/d.log && grep -q "serving on" /tmp/p.log && break; sleep 0.2; done
$S/router/pdserve-router --model $M --listen 127.0.0.1:50263 --prefill 127.0.0.1:50262 --decode 127.0.0.1:50261 --log-requests=false > /tmp/r.log 2>&1 &
ROUTER=$!
sleep 1
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15) * 1000 / hz}' /proc/$1/stat; }
d0=$(cpu_ms $DECODE); p0=$(cpu_ms $PREFILL); r0=$(cpu_ms $ROUTER)
$B/bench/pdserve-ttft-bench --model $M --router 127.0.0.1:50263 --kv-dtype $KV --threads 2 --prompt-lens $LENS --trials 3 --csv-out $CSV
echo "server CPU ms during the bench: decode $(($(cpu_ms $DECODE) - d0)), prefill $(($(cpu_ms $PREFILL) - p0)), router $(($(cpu_ms $ROUTER) - r0))"
pkill -f "pdserve-(decode|prefill|router) --model" || true
