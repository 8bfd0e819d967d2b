#!/usr/bin/env bash
# Before/after benchmark of a change: decode (batch 1 and the batched
# step) and prefill (512-token TTFT in process), each run short, the two
# builds interleaved A/B/A/B so that drift of a shared machine hits both.
#
#   git worktree add /tmp/before <rev> && (cd /tmp/before && bash scripts/build.sh)
#   BEFORE=/tmp/before AFTER=. bash scripts/bench_ab.sh          # ~7 min on 2 cores (lite model)
#   SMOKE=1 BEFORE=/tmp/before AFTER=. bash scripts/bench_ab.sh  # tiny model, one round, < 1 min
#
# Environment (defaults):
#   BEFORE                     tree of the "before" revision, built in $BEFORE/build (required)
#   AFTER=.                    tree to compare, built in $AFTER/build
#   ROUNDS=2                   before,after pairs (2 = A/B/A/B)
#   CONFIG=$AFTER/configs/gpt-oss-lite-502m.json   model of every run (random weights)
#   WORK=/tmp/pdserve-ab       model directory and logs
#   TIMEOUT=120                seconds per run (a run that exceeds it is reported as "timeout")
# Binaries needed in both trees (Release):
#   ninja -C build pdserve-decode-bench pdserve-step-bench pdserve-ttft-bench   (+ pdserve-init-model in AFTER)
#
# Per run (lite model, 2 cores, measured): decode-bench ~17 s (random weights built in
# memory, 4 parity tokens, 64 timed tokens, --bw-gbs skips the bandwidth
# probe), step-bench ~10 s (batches 1, 4, 16, 8 timed steps), ttft-bench
# ~24 s (3 trials of a 512-token prefill). Each in f32 and bf16 weights: 406 s in all.
set -euo pipefail

BEFORE=${BEFORE:?set BEFORE to the built tree of the revision to compare against}
AFTER=$(cd "${AFTER:-.}" && pwd)
SMOKE=${SMOKE:-0}
WORK=${WORK:-/tmp/pdserve-ab}
TIMEOUT=${TIMEOUT:-120}
if [[ $SMOKE == 1 ]]; then
  ROUNDS=${ROUNDS:-1}
  CONFIG=${CONFIG:-$AFTER/configs/tiny.json}
  DECODE_ARGS=(--new-tokens 4 --no-cache-max 1 --parity-tokens 1 --profile-steps 0 --bw-gbs 20)
  STEP_ARGS=(--batch-sizes 1,2 --steps 1)
  PREFILL_LEN=16; TRIALS=1
else
  ROUNDS=${ROUNDS:-2}
  CONFIG=${CONFIG:-$AFTER/configs/gpt-oss-lite-502m.json}
  DECODE_ARGS=(--new-tokens 64 --no-cache-max 4 --parity-tokens 4 --profile-steps 0 --bw-gbs 22)
  STEP_ARGS=(--batch-sizes 1,4,16 --steps 8)
  PREFILL_LEN=512; TRIALS=3
fi
NAME=$(basename "$CONFIG" .json)
MODEL=$WORK/models/$NAME
RUN=$WORK/run-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$RUN"
RESULTS=$RUN/results.tsv
: >"$RESULTS"

for tree in "$BEFORE" "$AFTER"; do
  for b in decode step ttft; do
    [[ -x $tree/build/bench/pdserve-$b-bench ]] || {
      echo "missing $tree/build/bench/pdserve-$b-bench: build it (see the header)" >&2; exit 1; }
  done
done

# The checkpoint that step-bench and ttft-bench load (decode-bench builds
# the same config's random weights in memory).
if [[ ! -f $MODEL/model.safetensors ]]; then
  echo "writing $MODEL from $CONFIG (seed 1) ..."
  "$AFTER/build/clients/pdserve-init-model" --config "$CONFIG" --seed 1 --out "$MODEL" >/dev/null
fi

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
  "ISA: $(grep -o -w -E 'avx2|fma|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "before: $BEFORE @ $(git -C "$BEFORE" rev-parse --short HEAD)   after: $AFTER @ $(git -C "$AFTER" rev-parse --short HEAD)$(git -C "$AFTER" diff --quiet HEAD || echo ' (dirty)')"
echo "model: $NAME ($MODEL); rounds: $ROUNDS; logs: $RUN"

# run SIDE ROUND LABEL CMD...: runs CMD with a timeout, keeps its log.
run() {
  local side=$1 round=$2 label=$3; shift 3
  local log=$RUN/${label}_${side}_r${round}.log
  local t0=$SECONDS
  if timeout "$TIMEOUT" "$@" >"$log" 2>&1; then
    echo "  $side r$round $label: $((SECONDS - t0)) s"
  else
    echo "  $side r$round $label: FAILED or timed out (rc $?), see $log"
    echo -e "$round\t$side\t$label\tfailed" >>"$RESULTS"
    return 1
  fi
}

# record ROUND SIDE METRIC VALUE
record() { echo -e "$1\t$2\t$3\t$4" >>"$RESULTS"; }

# The tok/s of the largest N in decode-bench's "cached decode" table.
decode_toks() {
  awk '/^cached decode/ {t = 1; next} t && $1 ~ /^[0-9]+$/ && NF >= 6 {v = $2} t && /^  floor ms/ {t = 0} END {print v}' "$1"
}
# step-bench's tok/s at batch B.
step_toks() { awk -v b="$2" '$1 == b && NF == 6 {print $3}' "$1"; }

one_side() {
  local side=$1 tree=$2 round=$3 B=$2/build/bench w log
  for w in f32 bf16; do
    if run "$side" "$round" "decode_b1_$w" "$B/pdserve-decode-bench" --config "$CONFIG" --weights-dtype "$w" \
         "${DECODE_ARGS[@]}"; then
      record "$round" "$side" "decode b1 $w tok/s" "$(decode_toks "$RUN/decode_b1_${w}_${side}_r${round}.log")"
    fi
    if run "$side" "$round" "step_$w" "$B/pdserve-step-bench" --model "$MODEL" --weights-dtype "$w" "${STEP_ARGS[@]}"; then
      log=$RUN/step_${w}_${side}_r${round}.log
      for b in $(grep -o -E '[0-9]+' <<<"${STEP_ARGS[1]}"); do
        record "$round" "$side" "step b$b $w tok/s" "$(step_toks "$log" "$b")"
      done
    fi
    if run "$side" "$round" "prefill_$w" "$B/pdserve-ttft-bench" --model "$MODEL" --weights-dtype "$w" \
         --prompt-lens "$PREFILL_LEN" --trials "$TRIALS" --csv-out "$RUN/prefill_${w}_${side}_r${round}.csv"; then
      local ms
      ms=$(awk -F, 'NR == 2 {print $2}' "$RUN/prefill_${w}_${side}_r${round}.csv")
      record "$round" "$side" "prefill $PREFILL_LEN $w tok/s" "$(awk -v n="$PREFILL_LEN" -v ms="$ms" 'BEGIN {printf "%.1f", n * 1000 / ms}')"
    fi
  done
}

start=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r: before"
  one_side before "$BEFORE" "$r" || true
  echo "round $r: after"
  one_side after "$AFTER" "$r" || true
done
echo "total $((SECONDS - start)) s"

# One table: every run's value, the mean of each side, after/before.
python3 - "$RESULTS" "$ROUNDS" <<'EOF'
import collections, sys
path, rounds = sys.argv[1], int(sys.argv[2])
vals = collections.OrderedDict()
for line in open(path):
    r, side, metric, v = line.rstrip("\n").split("\t")
    if v == "failed" or v == "":
        continue
    vals.setdefault(metric, {})[(side, int(r))] = float(v)
cols = [(s, r) for r in range(1, rounds + 1) for s in ("before", "after")]
head = ["metric"] + [f"{s[0].upper()}{r}" for s, r in cols] + ["mean B", "mean A", "A/B"]
rows = []
for m, d in vals.items():
    b = [d[c] for c in cols if c[0] == "before" and c in d]
    a = [d[c] for c in cols if c[0] == "after" and c in d]
    mb = sum(b) / len(b) if b else float("nan")
    ma = sum(a) / len(a) if a else float("nan")
    rows.append([m] + [f"{d[c]:.1f}" if c in d else "-" for c in cols] +
                [f"{mb:.1f}", f"{ma:.1f}", f"{ma / mb:.3f}" if b and a and mb else "-"])
w = [max(len(str(x[i])) for x in [head] + rows) for i in range(len(head))]
print()
print("tokens/s per run (B = before, A = after; higher is better)")
for x in [head] + rows:
    print("  ".join(str(v).rjust(w[i]) if i else str(v).ljust(w[i]) for i, v in enumerate(x)))
EOF
echo "raw: $RESULTS"
