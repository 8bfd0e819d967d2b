#!/usr/bin/env bash
# Co-tenancy: two pdserve processes pinned to the same cores (taskset), each
# one's throughput as a percentage of its solo throughput (fair share 50%,
# target >= 40%), under OpenMP wait policies: the binaries' default
# (bounded spin: GOMP_SPINCOUNT=1000, common/util/omp_env.h), passive (idle
# threads sleep at once) and active (idle threads spin). Also the solo cost
# of each.
#   decode   pdserve-step-bench, batch 1 (the Engine's decode step)
#   prefill  pdserve-ttft-bench in-process, PREFILL_LEN-token prompts
# Pairs: decode+decode, and prefill+decode (each side measured while the
# other runs). A measured ("foreground") run starts once the background one
# has loaded its model; the background one runs until the foreground ends.
# Rounds run the policies in turn (A B A B); ranges are over rounds.
#
# Usage: scripts/bench_cotenancy.sh [BUILD_DIR]   (3-5 minutes on a quiet machine; the
#   spinning (active) runs crawl on a loaded one: 29 minutes at load average 10-16)
# Environment (defaults): MODEL (a 502M checkpoint, written to .cache/ once
#   from configs/gpt-oss-lite-502m.json), WEIGHTS=bf16, CORES=0,1, ROUNDS=2,
#   STEPS=48 (timed decode steps), PREFILL_LEN=256, TRIALS=3, CSV (a file),
#   POLICIES="default passive active" (each round runs them in this order;
#   spin:N runs with GOMP_SPINCOUNT=N: idle threads spin N iterations, then
#   sleep; omp is the default policy with PDSERVE_SPIN_POOL=0: a decode
#   step's regions on OpenMP's threads instead of pdserve's spin pool,
#   common/util/spin_pool.h).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
POLICIES=${POLICIES:-default passive active}
WEIGHTS=${WEIGHTS:-bf16}; CORES=${CORES:-0,1}; ROUNDS=${ROUNDS:-2}; STEPS=${STEPS:-48}
PREFILL_LEN=${PREFILL_LEN:-256}; TRIALS=${TRIALS:-3}
MODEL=${MODEL:-.cache/cotenancy-502m}
TMP=$(mktemp -d); trap 'kill $BG 2>/dev/null || true; rm -rf "$TMP"' EXIT
BG=""
if [ ! -f "$MODEL/model.safetensors" ]; then
  "$B/clients/pdserve-init-model" --config configs/gpt-oss-lite-502m.json --seed 1 --out "$MODEL" --dtype BF16 >&2
fi
COMMON=(--model "$MODEL" --weights-dtype "$WEIGHTS")

# run_decode STEPS: tokens/s of a batch-1 step loop (the last field of its row).
run_decode() { taskset -c "$CORES" "$B/bench/pdserve-step-bench" "${COMMON[@]}" --batch-sizes 1 --steps "$1" \
  2>"$TMP/fg.err" | awk '$1 == 1 {print $3}'; }
# run_prefill TRIALS: prompt tokens/s of in-process prefills (mean over trials).
run_prefill() {
  taskset -c "$CORES" "$B/bench/pdserve-ttft-bench" "${COMMON[@]}" --prompt-lens "$PREFILL_LEN" --trials "$1" \
    >/dev/null 2>"$TMP/fg.err"
  awk -v n="$PREFILL_LEN" '/^single len=.* trial/ {ms += $(NF-3); k++} END {printf "%.1f\n", n * k * 1000 / ms}' \
    "$TMP/fg.err"
}
# bg KIND: starts a long-running co-tenant and waits until it has loaded.
bg() {
  : >"$TMP/bg.err"
  case $1 in
    decode) taskset -c "$CORES" "$B/bench/pdserve-step-bench" "${COMMON[@]}" --batch-sizes 1 --steps 1000000 \
              >/dev/null 2>"$TMP/bg.err" & ;;
    prefill) taskset -c "$CORES" "$B/bench/pdserve-ttft-bench" "${COMMON[@]}" --prompt-lens "$PREFILL_LEN" \
               --trials 1000000 >/dev/null 2>"$TMP/bg.err" & ;;
  esac
  BG=$!
  for _ in $(seq 1 600); do grep -q "^pdserve: .* threads" "$TMP/bg.err" && break; sleep 0.1; done
  sleep 1  # past the warmup
}
stop_bg() { kill "$BG" 2>/dev/null || true; wait "$BG" 2>/dev/null || true; BG=""; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f%%", 100 * a / b}'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, pinned to $CORES"
echo "model: $MODEL ($WEIGHTS weights); decode: step-bench B=1, $STEPS steps; prefill: ttft-bench $PREFILL_LEN tokens x $TRIALS"
[ -n "${CSV:-}" ] && echo "round,policy,solo_decode,solo_prefill,dd_decode,pd_decode,pd_prefill" >"$CSV"
printf "\n%5s %11s %12s %12s %18s %18s %18s\n" round policy "decode t/s" "prefill t/s" "decode+decode" \
  "decode (+prefill)" "prefill (+decode)"
for r in $(seq 1 "$ROUNDS"); do
  for policy in $POLICIES; do
    unset OMP_WAIT_POLICY GOMP_SPINCOUNT PDSERVE_SPIN_POOL
    case $policy in
      default) want="GOMP_SPINCOUNT=1000 (pdserve default)" ;;
      omp) export PDSERVE_SPIN_POOL=0; want="decode regions on OpenMP" ;;
      passive) export OMP_WAIT_POLICY=passive; want="OMP_WAIT_POLICY=passive" ;;
      active) export OMP_WAIT_POLICY=active; want="OMP_WAIT_POLICY=active" ;;
      spin:[0-9]*) export GOMP_SPINCOUNT=${policy#spin:}; want="GOMP_SPINCOUNT=${policy#spin:}" ;;
      *) echo "unknown policy $policy (default, omp, passive, active or spin:N)" >&2; exit 2 ;;
    esac
    sd=$(run_decode "$STEPS"); grep -q "$want" "$TMP/fg.err" || { cat "$TMP/fg.err"; exit 1; }
    sp=$(run_prefill "$TRIALS")
    bg decode;  dd=$(run_decode "$STEPS"); stop_bg
    bg prefill; pdd=$(run_decode "$STEPS"); stop_bg
    bg decode;  pdp=$(run_prefill "$TRIALS"); stop_bg
    printf "%5s %11s %12s %12s %18s %18s %18s\n" "$r" $policy "$sd" "$sp" "$dd ($(pct "$dd" "$sd"))" \
      "$pdd ($(pct "$pdd" "$sd"))" "$pdp ($(pct "$pdp" "$sp"))"
    [ -n "${CSV:-}" ] && echo "$r,$policy,$sd,$sp,$dd,$pdd,$pdp" >>"$CSV"
  done
done
unset OMP_WAIT_POLICY GOMP_SPINCOUNT PDSERVE_SPIN_POOL
echo
echo "percentages: of the solo throughput under the same policy (fair share 50%, target >= 40%)"
