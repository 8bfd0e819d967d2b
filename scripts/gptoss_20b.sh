#!/usr/bin/env bash
# gpt-oss-20b's shapes served on this machine, prefill and decode split
# (docs/benchmarks.md §15): a random checkpoint with gpt-oss-20b's exact
# shapes and Hugging Face layout (scripts/make_gptoss_checkpoint.py --preset
# 20b: 13.8 GB, 3 shards, MXFP4 experts; written into MODEL_DIR when it is
# missing, ~5 minutes) served by separate pdserve-decode, pdserve-prefill
# and pdserve-router processes on loopback (every port 0), bf16 dense
# weights and KV. It prints and writes into OUT/report.txt:
#   - each worker's memory estimate and load time (its own log lines);
#   - the workers' PSS (proportional set size: a page mapped by both counts
#     half in each, so the MXFP4 experts, read from the shared read-only
#     mapping, count once in the sum) and RSS, against the checkpoint's size;
#   - pdserve-bench through the router: TTFT and TPOT at 128 prompt tokens
#     (random ids, one request at a time), and with LONG=1 one request of
#     2,048 (its prefill alone took ~6 minutes here on 2 busy cores).
# Usage: scripts/gptoss_20b.sh [MODEL_DIR] [OUT]
#   defaults: build/gpt-oss-20b-random build/gptoss-20b
# Needs ~14 GB of free disk for the checkpoint and ~20 GiB of memory.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-build/gpt-oss-20b-random}
OUT=${2:-build/gptoss-20b}
B=${PDSERVE_BUILD:-build}
source scripts/bench_lib.sh
mkdir -p "$OUT"
if [ ! -f "$MODEL/model.safetensors.index.json" ]; then
  echo "gptoss_20b: writing the random 20b-shaped checkpoint into $MODEL"
  /usr/bin/python3 scripts/make_gptoss_checkpoint.py --preset 20b --seed 20 --out "$MODEL" \
    --tokenizer .cache/tokenizers/gptoss/tokenizer.json
fi
ckpt_bytes=$(du -sb "$MODEL" | cut -f1)
export OMP_WAIT_POLICY=PASSIVE  # two LibTorch processes share the cores
COMMON=(--model "$MODEL" --weights-dtype bf16 --kv-dtype bf16 --listen 127.0.0.1:0 --metrics-port -1)

t0=$(date +%s.%N)
bench_spawn "$B/decode_service/pdserve-decode" "${COMMON[@]}" --threads 1 >"$OUT/decode.log" 2>&1
DECODE_PID=${PIDS[-1]}
bench_spawn "$B/prefill_service/pdserve-prefill" "${COMMON[@]}" --threads 2 >"$OUT/prefill.log" 2>&1
PREFILL_PID=${PIDS[-1]}
DECODE_PORT=$(bench_port "$OUT/decode.log")
PREFILL_PORT=$(bench_port "$OUT/prefill.log")
t1=$(date +%s.%N)
bench_spawn "$B/router/pdserve-router" --model "$MODEL" --listen 127.0.0.1:0 --prefill "127.0.0.1:$PREFILL_PORT" \
  --decode "127.0.0.1:$DECODE_PORT" --log-requests=false --metrics-port -1 --http-listen= >"$OUT/router.log" 2>&1
ROUTER=127.0.0.1:$(bench_port "$OUT/router.log")

bench() {  # INPUT_LEN OUTPUT_LEN N WARMUP
  "$B/bench/pdserve-bench" --router "$ROUTER" --num-prompts "$3" --concurrency 1 --input-len "$1" \
    --output-len "$2" --vocab-size 201088 --warmup "$4" --seed 1 --json-out "$OUT/bench_$1.json" >"$OUT/bench_$1.txt" 2>&1
}
bench 128 32 4 1
LENGTHS=128
if [ "${LONG:-0}" = 1 ]; then
  bench 2048 8 1 0
  LENGTHS="128 2048"
fi

# kB of a process's smaps_rollup field.
kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/smaps_rollup"; }
{
  echo "gpt-oss-20b shapes, random weights ($MODEL, $((ckpt_bytes / 1048576)) MiB on disk), bf16 dense weights and KV"
  echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; $(date -u +%F)"
  for w in decode prefill; do
    echo "$w: $(grep -o 'memory estimate [^;]*' "$OUT/$w.log" | head -1)"
    echo "$w: $(grep -o 'loaded .* warmed up in [0-9.]* s' "$OUT/$w.log" | sed 's/(.*fingerprint [0-9a-f]*)//')"
  done
  printf 'both workers serving %.1f s after their start (loaded side by side)\n' "$(echo "$t1 - $t0" | bc)"
  d_pss=$(kb "$DECODE_PID" Pss) p_pss=$(kb "$PREFILL_PID" Pss)
  d_rss=$(kb "$DECODE_PID" Rss) p_rss=$(kb "$PREFILL_PID" Rss)
  printf 'PSS: decode %d MiB + prefill %d MiB = %d MiB = %.2fx the checkpoint (RSS %d + %d MiB)\n' \
    $((d_pss / 1024)) $((p_pss / 1024)) $(((d_pss + p_pss) / 1024)) \
    "$(echo "($d_pss + $p_pss) * 1024 / $ckpt_bytes" | bc -l)" $((d_rss / 1024)) $((p_rss / 1024))
  for n in $LENGTHS; do
    echo "--- pdserve-bench, $n prompt tokens, one at a time:"
    grep -E 'TTFT|TPOT|throughput' "$OUT/bench_$n.txt" | head -6
  done
} | tee "$OUT/report.txt"
