#!/usr/bin/env bash
# The interference experiment (DistServe's claim): do short-prompt decode
# streams keep their TPOT while long prompts arrive? The same workload runs
# against three deployments of the same model on this machine's 2 cores:
#   colocated     pdserve-local: one process, prefill and decode threads
#                 share both cores (--threads 2 each);
#   disagg        pdserve-prefill pinned to core 0 and pdserve-decode pinned
#                 to core 1 (taskset, --threads 1 each), router unpinned;
#   disagg+local  disagg, with the router's --local-prefill-max-tokens: the
#                 short prompts are prefilled on the decode worker itself.
# Each deployment runs the short streams alone, then mixed with the long
# prompts, with two pdserve-bench processes at once:
#   short  closed loop of SHORT_STREAMS streams, SHORT_IN prompt tokens,
#          SHORT_OUT generated;
#   long   Poisson arrivals at LONG_RATE req/s, LONG_IN prompt tokens,
#          LONG_OUT generated (almost pure prefill load).
# Prints one table row per (deployment, load) and writes every report to
# OUT_DIR/<mode>_<load>_{short,long}.json.
#
# Usage: scripts/bench_interference.sh MODEL_DIR OUT_DIR
# Environment (defaults): WEIGHTS=bf16 SHORT_STREAMS=4 SHORT_IN=32 SHORT_OUT=64
#   SHORT_N=40 LONG_IN=1024 LONG_OUT=2 LONG_N=6 LONG_RATE=0.1 MODES="colocated disagg disagg+local"
set -euo pipefail
M=$1; OUT=$2
B=build
WEIGHTS=${WEIGHTS:-bf16}
SHORT_STREAMS=${SHORT_STREAMS:-4}; SHORT_IN=${SHORT_IN:-32}; SHORT_OUT=${SHORT_OUT:-64}; SHORT_N=${SHORT_N:-40}
LONG_IN=${LONG_IN:-1024}; LONG_OUT=${LONG_OUT:-2}; LONG_N=${LONG_N:-6}; LONG_RATE=${LONG_RATE:-0.1}
MODES=${MODES:-"colocated disagg disagg+local"}
PORT_R=50461; PORT_P=50462; PORT_D=50463
mkdir -p "$OUT"
export OMP_WAIT_POLICY=PASSIVE
source "$(dirname "$0")/bench_lib.sh"

start() {  # MODE
  local mode=$1 lp=0
  [ "$mode" = "disagg+local" ] && lp=$((SHORT_IN * 2))
  case $mode in
    colocated)
      bench_spawn $B/local/pdserve-local --model "$M" --port $PORT_R --weights-dtype "$WEIGHTS" --threads 2 --log-requests=false \
        >"$OUT/server.log" 2>&1
      bench_await "$OUT/server.log" "router on" ;;
    disagg|disagg+local)
      bench_spawn taskset -c 1 $B/decode_service/pdserve-decode --model "$M" --listen 127.0.0.1:$PORT_D \
        --weights-dtype "$WEIGHTS" --threads 1 --metrics-port -1 >"$OUT/decode.log" 2>&1
      bench_spawn taskset -c 0 $B/prefill_service/pdserve-prefill --model "$M" --listen 127.0.0.1:$PORT_P \
        --weights-dtype "$WEIGHTS" --threads 1 --metrics-port -1 >"$OUT/prefill.log" 2>&1
      bench_await "$OUT/decode.log" "serving on"
      bench_await "$OUT/prefill.log" "serving on"
      bench_spawn $B/router/pdserve-router --model "$M" --listen 127.0.0.1:$PORT_R --prefill 127.0.0.1:$PORT_P \
        --decode 127.0.0.1:$PORT_D --local-prefill-max-tokens $lp --log-requests=false --metrics-port -1 \
        >"$OUT/router.log" 2>&1
      bench_await "$OUT/router.log" "serving on" ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
}

bench() {  # NAME ARGS...
  local name=$1; shift
  $B/bench/pdserve-bench --router 127.0.0.1:$PORT_R --json-out "$OUT/$name.json" "$@" >"$OUT/$name.txt" 2>/dev/null
}

for mode in $MODES; do
  start "$mode"
  # One short request first: the first forward pass pays for page faults.
  bench "${mode}_warmup_short" --concurrency 1 --num-prompts 1 --input-len "$SHORT_IN" --output-len 4
  for load in alone mixed; do
    echo "== $mode, short streams $load" >&2
    tag=${mode}_${load}
    bench "${tag}_short" --concurrency "$SHORT_STREAMS" --num-prompts "$SHORT_N" --seed 1 \
      --input-len "$SHORT_IN" --output-len "$SHORT_OUT" &
    short=$!
    if [ $load = mixed ]; then
      bench "${tag}_long" --request-rate "$LONG_RATE" --num-prompts "$LONG_N" --seed 2 \
        --input-len "$LONG_IN" --output-len "$LONG_OUT"
    fi
    wait $short
  done
  bench_stop
done

/usr/bin/python3 - "$OUT" "$MODES" <<'PY'
import json, os, sys
out, modes = sys.argv[1], sys.argv[2].split()
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
print(f"| deployment | long prompts | short TTFT p50 / p99 ms | short TPOT p50 / p99 ms | short ITL p50 / p99 ms "
      f"| short output tok/s | long TTFT p50 / p99 ms |")
print("|---|---|---:|---:|---:|---:|---:|")
for m in modes:
    for load_ in ("alone", "mixed"):
        s, l = load(f"{m}_{load_}_short"), load(f"{m}_{load_}_long")
        if s is None:
            continue
        pct = lambda d, k: f"{d[k]['median']:.0f} / {d[k]['p99']:.0f}"
        long_ttft = pct(l, "ttft_ms") if l else "-"
        print(f"| {m} | {'yes' if load_ == 'mixed' else 'no'} | {pct(s, 'ttft_ms')} | {pct(s, 'tpot_ms')} "
              f"| {pct(s, 'itl_ms')} | {s['output_throughput']:.1f} | {long_ttft} |")
PY
