#!/usr/bin/env bash
# bench_gptoss_vs_llamacpp.sh: gpt-oss-20b's shapes, pdserve side by side with llama.cpp (docs/benchmarks.md §16).
#
# The random checkpoint with gpt-oss-20b's exact shapes (scripts/make_gptoss_checkpoint.py --preset
# 20b: 13.8 GB, Hugging Face layout, MXFP4 experts, bf16 elsewhere; written into MODEL_DIR when
# missing, ~5 min) and its GGUF (scripts/pdserve_to_gguf.py --outtype bf16: llama.cpp's own
# converter's file, bf16 dense weights, the MXFP4 experts repacked as is; 13 GB in
# .cache/llama/models, ~8 min on a busy machine). Both sides read bf16 dense weights and MXFP4 experts.
# Rows (ROWS groups; each llama.cpp's row, then pdserve's: a run stopped early keeps whole rows;
# the two files do not fit the page cache together, so each switch re-reads ~13 GB):
#   decode   batch 1 at depth 32: llama-bench -p 0 -n 32 -d 32 (-fa on,off) against
#            pdserve-decode-bench --prompt-len 32 --new-tokens 32 (its first run measures the
#            read bandwidth, recorded as row "bandwidth")
#   prefill  512 tokens: llama-bench -p 512 -n 0 --no-warmup (-fa on,off) against pdserve-ttft-bench
#            --prompt-lens 512 --trials 1 (after its warm-up prompt)
#   batch    16 sequences of 32 prompt + 32 generated tokens: llama-batched-bench's S_TG (-fa on
#            and off) against pdserve-step-bench --batch-sizes 16 --prompt-len 32
# pdserve: --weights-dtype bf16 --kv-dtype bf16, each row with --mxfp4-kernel fma and dot;
# OPENBLAS_CORETYPE unset (OpenBLAS picks its kernel; the VM image sets Haswell). llama.cpp: the
# build and functions of scripts/bench_vs_llamacpp.sh (sourced: llama_bench, llama_batched, record),
# f16 KV cache (its default). One round; THREADS (2) on both sides.
# Out: OUT_DIR/measurements.csv (round,row,side,tool,setting,value: tok/s, bandwidth GB/s,
# active bytes per token), OUT_DIR/table.md (best setting of each side, ratios, the targets, the
# decode floor: active bytes per token, from the checkpoint's tensors, over the measured read
# bandwidth), OUT_DIR/command.txt (the command, machine, commits, git diff --stat, load). Raw tool
# outputs in .cache/llama/logs/gptoss.
# Time (2 Zen 5 cores, measured under load average ~7: a quiet machine is faster): llama.cpp's
# decode row 4-5 min (a 13 GB load and repack each invocation), pdserve's 1-1.5 min per kernel;
# llama.cpp's prefill row 6 min, pdserve's ~3.3 min per kernel (warm-up and trial); the batch
# group was not timed. Budget ~30 min for all three groups, plus the GGUF the first time.
# Environment: MODEL_DIR (/work/big/gpt-oss-20b-random), ROWS ("decode prefill batch"), THREADS
# (2), OUT_DIR (docs/bench/gptoss_vs_llamacpp_MACHINE_YYYY-MM-DD), LABEL (a note for table.md,
# e.g. "contended: a passkey run shared the cores").
# Usage: [MODEL_DIR=...] [ROWS="decode prefill"] scripts/bench_gptoss_vs_llamacpp.sh [--help]
set -euo pipefail

GPTOSS_MODEL=${MODEL_DIR:-/work/big/gpt-oss-20b-random}
GPTOSS_ROWS=${ROWS:-decode prefill batch}
GPTOSS_OUT=${OUT_DIR:-}
GPTOSS_THREADS=${THREADS:-2}
LABEL=${LABEL:-}
unset MODEL_DIR ROWS OUT_DIR
# shellcheck source=scripts/bench_vs_llamacpp.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench_vs_llamacpp.sh"
MODEL_DIR=$GPTOSS_MODEL
ROWS=$GPTOSS_ROWS
THREADS=$GPTOSS_THREADS
GGUF=$CACHE/models/$(basename "$MODEL_DIR")
OUT_DIR=${GPTOSS_OUT:-$ROOT/docs/bench/gptoss_vs_llamacpp_${MACHINE}_$(date -u +%F)}
CSV=$OUT_DIR/measurements.csv
LOGS=$CACHE/logs/gptoss
unset OPENBLAS_CORETYPE

gp_usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

# gp_decode KERNEL: pdserve-decode-bench, batch 1, depth 32, 32 new tokens.
gp_decode() {
  local k=$1 out=$LOGS/decode_pd_$1.log bw=(--bw-gbs "$BW_GBS")
  [[ $BW_GBS == 0 ]] && bw=()
  "$PD/pdserve-decode-bench" --model "$MODEL_DIR" --weights-dtype bf16 --kv-dtype bf16 --mxfp4-kernel "$k" \
    --threads "$THREADS" --prompt-len 32 --new-tokens 32 --no-cache-max 0 --parity-tokens 0 "${bw[@]}" \
    >"$out" 2>&1 || log "pdserve-decode-bench failed (exit $?); see $out"
  if [[ $BW_GBS == 0 ]]; then
    BW_GBS=$($PY "$REPORT" parse bandwidth "$out")
    echo "$BW_GBS" | record 1 bandwidth machine pdserve-decode-bench GB/s
  fi
  $PY "$REPORT" parse decode "$out" | record 1 decode_d32 pdserve "pdserve-decode-bench $k" "kv=bf16"
}

# gp_step KERNEL BATCH: pdserve-step-bench, output tok/s of BATCH sequences.
gp_step() {
  local k=$1 b=$2 out=$LOGS/step_pd_$1_b$2.log
  "$PD/pdserve-step-bench" --model "$MODEL_DIR" --weights-dtype bf16 --kv-dtype bf16 --mxfp4-kernel "$k" \
    --threads "$THREADS" --batch-sizes "$b" --steps 16 --prompt-len 32 >"$out" 2>&1 ||
    log "pdserve-step-bench failed (exit $?); see $out"
  $PY "$REPORT" parse step "$out" | record 1 "decode_b$b" pdserve "pdserve-step-bench B=$b $k" "kv=bf16"
}

# gp_prefill KERNEL: pdserve-ttft-bench in process, one 512-token prompt (after its warm-up).
gp_prefill() {
  local k=$1 out=$LOGS/prefill_pd_$1.csv len ts
  "$PD/pdserve-ttft-bench" --model "$MODEL_DIR" --weights-dtype bf16 --kv-dtype bf16 --mxfp4-kernel "$k" \
    --threads "$THREADS" --prompt-lens 512 --trials 1 --csv-out "$out" >"${out%.csv}.log" 2>&1 ||
    log "pdserve-ttft-bench failed (exit $?); see ${out%.csv}.log"
  $PY "$REPORT" parse ttft "$out" | while read -r len ts; do
    echo "$ts" | record 1 "prefill_$len" pdserve "pdserve-ttft-bench $k" "kv=bf16"
  done
}

# Active bytes a batch-1 token reads (top-k of the experts' MXFP4 blocks and scales, every other
# layer tensor, the head; one embedding row), from the checkpoint's safetensors headers.
active_bytes() {
  $PY - "$MODEL_DIR" <<'EOF'
import json, struct, sys, os
d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
frac = cfg["num_experts_per_tok"] / cfg["num_local_experts"]
files = sorted(set(json.load(open(f"{d}/model.safetensors.index.json"))["weight_map"].values()))
total = 0.0
for f in files:
    with open(os.path.join(d, f), "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        hdr = json.loads(fh.read(n))
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b = t["data_offsets"][1] - t["data_offsets"][0]
        if ".mlp.experts." in name:
            b *= frac
        elif name.startswith("model.embed_tokens"):
            b /= t["shape"][0]
        total += b
print(int(total))
EOF
}

gp_table() {
  $PY - "$CSV" "$OUT_DIR/table.md" "$LABEL" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
label = sys.argv[3]
def vals(row, side):
    return [(r["tool"] + (" " + r["setting"] if side == "llama.cpp" else ""), float(r["value"]))
            for r in rows if r["row"] == row and r["side"] == side]
bw = [float(r["value"]) for r in rows if r["row"] == "bandwidth"]
ab = [float(r["value"]) for r in rows if r["row"] == "active_bytes"]
out = []
if label:
    out.append(f"**{label}**\n")
out.append("tokens/s, one round, 2 threads each side; pdserve bf16 weights and KV, llama.cpp bf16 GGUF, f16 KV; "
           "MXFP4 experts on both.\n")
out.append("| row | llama.cpp | pdserve | pdserve / llama.cpp (best of each) | target |")
out.append("|---|---|---|---|---|")
names = {"decode_d32": ("decode, batch 1, depth 32", "≥ 1.15x, and ≤ 1.3x the floor"),
         "prefill_512": ("prefill 512 tokens", "≥ 1.5x"),
         "decode_b16": ("decode, 16 sequences", "≥ 1.5x")}
for row, (title, target) in names.items():
    l, p = vals(row, "llama.cpp"), vals(row, "pdserve")
    if not l and not p:
        continue
    fmt = lambda v: "<br>".join(f"{n}: {x:.2f}" for n, x in v) or "n/a"
    ratio = f"{max(x for _, x in p) / max(x for _, x in l):.2f}x" if l and p else "n/a"
    out.append(f"| {title} | {fmt(l)} | {fmt(p)} | {ratio} | {target} |")
if bw and ab:
    floor_ms = ab[0] / (bw[0] * 1e9) * 1e3
    out.append("")
    out.append(f"Decode floor: {ab[0] / 1e9:.2f} GB of active weights per token / {bw[0]:.1f} GB/s measured "
               f"read bandwidth = {floor_ms:.1f} ms ({1e3 / floor_ms:.1f} tok/s).")
    for name, x in vals("decode_d32", "pdserve") + vals("decode_d32", "llama.cpp"):
        out.append(f"- {name}: {1e3 / x:.1f} ms/token = {1e3 / x / floor_ms:.2f}x the floor")
text = "\n".join(out) + "\n"
open(sys.argv[2], "w").write(text)
print(text)
EOF
}

# run_group GROUP: llama.cpp's row (its GGUF's pages), then pdserve's (the checkpoint's): a group
# complete before the next starts, so a run stopped early keeps whole rows.
run_group() {
  local k
  log "llama.cpp: $1"
  case $1 in
    decode) llama_bench 1 decode_d32 bf16 on,off -p 0 -n 32 -d 32 ;;
    # No warm-up prefill (it would double the row's time): llama-bench loads (and repacks) first.
    prefill) llama_bench 1 prefill_512 bf16 on,off -p 512 -n 0 --no-warmup ;;
    batch) llama_batched 1 decode_b16 bf16 tg 32 32 16 ;;
  esac
  for k in fma dot; do
    log "pdserve --mxfp4-kernel $k: $1"
    case $1 in
      decode) gp_decode "$k" ;;
      prefill) gp_prefill "$k" ;;
      batch) gp_step "$k" 16 ;;
    esac
  done
}

main() {
  if [[ ${1:-} == -h || ${1:-} == --help ]]; then gp_usage; exit 0; fi
  [[ $# -eq 0 ]] || { gp_usage >&2; exit 2; }
  local g
  for g in $ROWS; do [[ $g =~ ^(decode|prefill|batch)$ ]] || { echo "ROWS: unknown group '$g'" >&2; exit 2; }; done
  [[ -x $LB/llama-bench && -x $PD/pdserve-decode-bench && -x $PD/pdserve-step-bench && -x $PD/pdserve-ttft-bench ]] ||
    { echo "build llama.cpp (scripts/bench_vs_llamacpp.sh) and the pdserve benches first" >&2; exit 1; }
  if [[ ! -f $MODEL_DIR/model.safetensors.index.json ]]; then
    log "writing the random 20b-shaped checkpoint into $MODEL_DIR"
    $PY "$ROOT/scripts/make_gptoss_checkpoint.py" --preset 20b --seed 20 --out "$MODEL_DIR" \
      --tokenizer "$ROOT/.cache/tokenizers/gptoss/tokenizer.json"
  fi
  mkdir -p "$OUT_DIR" "$LOGS" "$CACHE/models"
  if [[ ! -f $GGUF-bf16.gguf ]]; then
    log "GGUF: $GGUF-bf16.gguf"
    PYTHONPATH=$CACHE/src/gguf-py $PY "$ROOT/scripts/pdserve_to_gguf.py" "$MODEL_DIR" "$GGUF-bf16.gguf.tmp" \
      --outtype bf16 && mv "$GGUF-bf16.gguf.tmp" "$GGUF-bf16.gguf"
  fi
  {
    echo "ROWS=\"$ROWS\" THREADS=$THREADS MODEL_DIR=$MODEL_DIR OUT_DIR=$OUT_DIR scripts/bench_gptoss_vs_llamacpp.sh"
    echo "started $(date -u '+%F %T') UTC on $(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo), $(nproc) vCPUs"
    echo "label: ${LABEL:-none}"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg); other processes on the cores: $(pgrep -fa 'pk_run_copy|pdserve-passkey|ninja' | cut -c1-80 | tr '\n' ';' || true)"
    echo "pdserve: git $(git -C "$ROOT" rev-parse --short HEAD), uncommitted changes (git diff --stat):"
    git -C "$ROOT" diff --stat | sed 's/^/  /'
    echo "llama.cpp: $(cat "$CACHE/commit" 2>/dev/null || git -C "$CACHE/src" rev-parse HEAD) (node-llama-cpp $NODE_LLAMA_CPP_VERSION), GGUF $GGUF-bf16.gguf"
  } >"$OUT_DIR/command.txt"
  echo "round,row,side,tool,setting,value" >"$CSV"
  active_bytes | record 1 active_bytes machine checkpoint bytes
  SECONDS=0
  BW_GBS=0
  for g in $ROWS; do run_group "$g"; done
  echo "finished $(date -u '+%F %T') UTC after ${SECONDS}s" >>"$OUT_DIR/command.txt"
  gp_table
  log "wrote $OUT_DIR/{measurements.csv,table.md,command.txt} in ${SECONDS}s"
}

# One line: bash reads a script as it runs, so an edit mid-run cannot shift what runs next.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; exit $?; fi
