#!/usr/bin/env bash
# Decode throughput against batch size: a decode worker with both cores, a
# prefill worker and a router as separate processes; pdserve-bench keeps B
# streams in flight (closed loop) with short prompts, so nearly all time is
# decode. Prints B, output tok/s, the ratio to B = 1, and mean TPOT.
# Usage: scripts/bench_batch.sh MODEL_DIR WEIGHTS_DTYPE OUTPUT_LEN "1 2 4 8 16 32" OUT.json
# WORKER_ARGS (environment): more flags for both workers, e.g.
# WORKER_ARGS="--bf16-matmul dot". PREFILL_ARGS: more flags for the prefill
# worker only, e.g. PREFILL_ARGS="--prefill-batch-tokens 0". BENCH_ARGS: more
# flags for pdserve-bench, e.g. BENCH_ARGS="--temperature 1". WAVES: prompts per
# run in multiples of B (default 2).
set -euo pipefail
M=$1; WD=$2; OUT_LEN=$3; BATCHES=$4; JSON=$5
B=build
export OMP_WAIT_POLICY=PASSIVE
stop() { pkill -f "pdserve-(decode|prefill|router) --model $M" 2>/dev/null || true; }
trap stop EXIT
stop
$B/decode_service/pdserve-decode --model "$M" --listen 127.0.0.1:50361 --weights-dtype "$WD" --threads 2 --metrics-port -1 ${WORKER_ARGS:-} >/tmp/bb_d.log 2>&1 &
$B/prefill_service/pdserve-prefill --model "$M" --listen 127.0.0.1:50362 --weights-dtype "$WD" --threads 2 --metrics-port -1 ${WORKER_ARGS:-} ${PREFILL_ARGS:-} >/tmp/bb_p.log 2>&1 &
for _ in $(seq 1 600); do grep -q "serving on" /tmp/bb_d.log && grep -q "serving on" /tmp/bb_p.log && break; sleep 0.2; done
$B/router/pdserve-router --model "$M" --listen 127.0.0.1:50363 --prefill 127.0.0.1:50362 --decode 127.0.0.1:50361 \
  --log-requests=false --metrics-port -1 >/tmp/bb_r.log 2>&1 &
sleep 1
echo "[" >"$JSON"
first=1
for b in $BATCHES; do
  $B/bench/pdserve-bench --router 127.0.0.1:50363 --concurrency "$b" --num-prompts $((${WAVES:-2} * b)) --warmup 1 \
    --input-len 16 --output-len "$OUT_LEN" --json-out /tmp/bb_$b.json ${BENCH_ARGS:-} >/dev/null 2>&1
  [ $first = 1 ] || echo "," >>"$JSON"
  first=0
  /usr/bin/python3 -c "import json,sys; d=json.load(open('/tmp/bb_$b.json')); d['batch']=$b; print(json.dumps(d))" >>"$JSON"
done
echo "]" >>"$JSON"
/usr/bin/python3 - "$JSON" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
def get(d, *keys):
    for k in keys:
        if k in d: return d[k]
    return None
base = None
print(f"{'batch':>5} {'output tok/s':>13} {'x batch 1':>10} {'mean TPOT ms':>13}")
for r in runs:
    tput = get(r, 'output_throughput', 'output_token_throughput')
    if tput is None: tput = r.get('totals', {}).get('output_throughput')
    tpot = r.get('tpot_ms', {}).get('mean')
    base = base or tput
    print(f"{r['batch']:>5} {tput:>13.1f} {tput / base:>10.2f} {tpot:>13.1f}")
PY
