#!/usr/bin/env bash
# bench_vs_llamacpp.sh: pdserve side by side with llama.cpp on one machine, one model shape.
#
# Not in CI. Run time (2 cores): setup once ~30 min (npm fetch 3 s; llama.cpp build with -j2
# 24 min on a busy machine; 502M checkpoint 40 s, its F32 + BF16 GGUFs 1.5 min, Q8_0 35 s).
# Measuring: CONFIG=configs/small.json QUICK=1 ROUNDS=2 THREADS=1 took 7 min on a busy machine;
# the default 502M model is ~20x the bytes: expect ~10 min a round with QUICK=1 on a quiet machine
# (mostly the 4096-token prefills of both sides) and ~25 min without (depth 32768 prefills 32768
# tokens on each side), so the default 2 rounds take ~20 min (QUICK=1) to ~50 min.
#
# Contents (functions, in the order main calls them):
#   fetch_llama      npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION into .cache/llama/, clone the
#                    llama.cpp git bundle it ships into .cache/llama/src, record the commit
#   build_llama      llama-bench, llama-batched-bench, llama-quantize, llama-completion, CPU only,
#                    -DGGML_NATIVE=ON, no GPU backends, -j2, into .cache/llama/build (reused)
#   build_pdserve    the pdserve benches (build/, ccache where installed)
#   make_models      a random pdserve checkpoint of $CONFIG, its GGUFs (F32, BF16 by
#                    scripts/pdserve_to_gguf.py; Q8_0 by llama-quantize), a load check
#   run_round N      every row, llama.cpp then pdserve, appended to the CSV
#   report           scripts/bench_vs_llamacpp_report.py: markdown table + PNG
# Rows: decode batch 1 at depth 32 (F32, BF16), decode at depth 4096 and 32768 (BF16; group
# "deep", which QUICK=1 leaves out), decode 16 sequences (BF16), prefill 512 and 4096 (F32, BF16), and Q8_0 rows
# (pdserve int8 only where its binaries accept --weights-dtype int8, else n/a). Where the CPU has
# AVX512-BF16, the pdserve BF16 decode and prefill rows also run with --bf16-matmul dot (activations
# rounded to bf16, as llama.cpp's BF16 path does; tool names end in " dot"). pdserve's rows run
# --bf16-matmul auto (kmajor, exact products from k-major packs made at load, on AVX-512 CPUs; split
# on AMX CPUs; widen on AVX2-only ones); the BF16 decode rows also run with the exact path auto did
# not pick (" widen" where auto is kmajor, else " kmajor"). The F32 prefill rows,
# and the BF16 ones on the exact path (--bf16-matmul widen), also run with --f32-packed-weights
# (weights packed at load as fp32 for oneDNN; tool names end in " packed").
# llama.cpp gets its best flash-attention setting per row: both are run where cheap (all rows but
# depth 32768 too) and the faster kept; the CSV keeps both.
#
# Environment: ROUNDS (2), QUICK (0), ROWS (the groups to run: "decode deep prefill int8"; with
# QUICK=1 "decode prefill int8"; deep = decode at depth 32768, ~7 min a round on the Zen 5 VM,
# almost all of it llama.cpp's two 32768-token prefills; the prefill group ~2 min a round there),
# THREADS (nproc; on a busy machine 1 avoids the spin-wait collapse of 2 OpenMP threads on 2 shared
# cores, which cut both sides 10-100x in this repo's first run), OUT_DIR (the run named by what it
# measured, on which machine, and when: docs/bench/vs_llamacpp[_avx2][_ROWS]_MACHINE_YYYY-MM-DD, e.g.
# docs/bench/vs_llamacpp_zen4-epyc_2026-12-06; _ROWS only when ROWS is not the default), MACHINE
# (a short CPU name for OUT_DIR: zen4-epyc, zen5-epyc, xeon-spr, avx2-epyc, ...; from /proc/cpuinfo),
# CONFIG (configs/gpt-oss-lite-502m.json), MODEL_DIR (a pdserve checkpoint; default: a random one
# made here), LLAMA_JOBS (2), NODE_LLAMA_CPP_VERSION (pinned below), ISA (native; avx2: both sides
# limited to AVX2 + FMA + F16C, as on the AVX2-only machines this project also runs on: llama.cpp
# built with GGML_NATIVE=OFF GGML_AVX2=ON into .cache/llama/build-avx2, a second build of ~15 min,
# and pdserve run with PDSERVE_ISA=avx2).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=$ROOT/.cache/llama
NODE_LLAMA_CPP_VERSION=${NODE_LLAMA_CPP_VERSION:-3.22.1}  # ships llama.cpp de3ff815
ROUNDS=${ROUNDS:-2}
QUICK=${QUICK:-0}
ROWS=${ROWS:-decode $([[ $QUICK == 1 ]] || echo "deep ")prefill int8}
THREADS=${THREADS:-$(nproc)}
# A short name for the CPU, for OUT_DIR (the names docs/benchmarks.md uses for its machines).
machine_name() {
  local vendor family flags
  vendor=$(awk -F': *' '/^vendor_id/ {print $2; exit}' /proc/cpuinfo)
  family=$(awk -F': *' '/^cpu family/ {print $2; exit}' /proc/cpuinfo)
  flags=" $(awk -F': *' '/^flags/ {print $2; exit}' /proc/cpuinfo) "
  case $vendor in
    AuthenticAMD)
      if [[ $family == 26 ]]; then echo zen5-epyc
      elif [[ $flags == *" avx512f "* ]]; then echo zen4-epyc
      else echo avx2-epyc; fi ;;
    GenuineIntel)
      if [[ $flags == *" amx_bf16 "* ]]; then echo xeon-spr; else echo xeon; fi ;;
    *) uname -m ;;
  esac
}
MACHINE=${MACHINE:-$(machine_name)}
ISA=${ISA:-native}
DEFAULT_ROWS="decode $([[ $QUICK == 1 ]] || echo "deep ")prefill int8"
RUN_NAME=vs_llamacpp$([[ $ISA == avx2 ]] && echo _avx2)$([[ $ROWS == "$DEFAULT_ROWS" ]] || echo "_${ROWS// /_}")
OUT_DIR=${OUT_DIR:-$ROOT/docs/bench/${RUN_NAME}_${MACHINE}_$(date -u +%F)}
CONFIG=${CONFIG:-$ROOT/configs/gpt-oss-lite-502m.json}
MODEL_DIR=${MODEL_DIR:-$CACHE/models/$(basename "$CONFIG" .json)}
LLAMA_JOBS=${LLAMA_JOBS:-2}
PY=/usr/bin/python3  # Debian's: numpy + matplotlib (scripts/setup.sh installs them)
REPORT=$ROOT/scripts/bench_vs_llamacpp_report.py
LLAMA_BUILD=$CACHE/build
[[ $ISA == avx2 ]] && LLAMA_BUILD=$CACHE/build-avx2
LB=$LLAMA_BUILD/bin
PD=$ROOT/build/bench
GGUF=$CACHE/models/$(basename "$MODEL_DIR")
CSV=$OUT_DIR/measurements.csv
LOGS=$CACHE/logs  # raw tool outputs, kept out of git
BW_GBS=0

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  echo "Usage: [ROUNDS=2] [QUICK=1] [ISA=avx2] scripts/bench_vs_llamacpp.sh [--help]"
}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

fetch_llama() {
  mkdir -p "$CACHE"
  if [[ ! -d $CACHE/src/.git ]]; then
    local tgz=$CACHE/node-llama-cpp-$NODE_LLAMA_CPP_VERSION.tgz
    [[ -f $tgz ]] || (cd "$CACHE" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null)
    tar -xzf "$tgz" -C "$CACHE" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
    git clone -q "$CACHE/package/llama/gitRelease.bundle" "$CACHE/src"
  fi
  git -C "$CACHE/src" rev-parse HEAD >"$CACHE/commit"
  log "llama.cpp $(cut -c1-12 "$CACHE/commit") (node-llama-cpp $NODE_LLAMA_CPP_VERSION)"
}

# ccache where it is installed (scripts/setup.sh does not install it).
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

build_llama() {
  local isa_flags=(-DGGML_NATIVE=ON)
  [[ $ISA == avx2 ]] && isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX512=OFF)
  if [[ ! -f $LLAMA_BUILD/build.ninja ]]; then
    cmake -S "$CACHE/src" -B "$LLAMA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
      -DGGML_HIP=OFF -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF "${LAUNCHER[@]}" >"$CACHE/cmake.log"
  fi
  ninja -C "$LLAMA_BUILD" -j"$LLAMA_JOBS" llama-bench llama-batched-bench llama-quantize \
    llama-completion >"$CACHE/build.log"
}

build_pdserve() {
  if [[ ! -f $ROOT/build/build.ninja ]]; then
    cmake -S "$ROOT" -B "$ROOT/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${LAUNCHER[@]}" >/dev/null
  fi
  ninja -C "$ROOT/build" -j2 pdserve-init-model pdserve-decode-bench pdserve-step-bench \
    pdserve-ttft-bench >/dev/null
}

make_models() {
  if [[ ! -f $MODEL_DIR/model.safetensors ]]; then
    "$ROOT/build/clients/pdserve-init-model" --config "$CONFIG" --seed 1 --out "$MODEL_DIR" 2>/dev/null
  fi
  local t
  for t in f32 bf16; do
    [[ -f $GGUF-$t.gguf ]] || PYTHONPATH=$CACHE/src/gguf-py $PY "$ROOT/scripts/pdserve_to_gguf.py" \
      "$MODEL_DIR" "$GGUF-$t.gguf" --outtype "$t"
  done
  [[ -f $GGUF-q8_0.gguf ]] || "$LB/llama-quantize" "$GGUF-f32.gguf" "$GGUF-q8_0.gguf" Q8_0 \
    >"$CACHE/quantize.log" 2>&1
  # Load check: llama.cpp generates 4 tokens from the converted model.
  "$LB/llama-completion" -m "$GGUF-bf16.gguf" -c 256 -p "hello" -n 4 -t "$THREADS" -no-cnv --temp 0 \
    >"$CACHE/load_check.log" 2>&1 || { tail -20 "$CACHE/load_check.log"; exit 1; }
}

# The help text is read whole: with `| grep -q` and pipefail, grep's early exit could SIGPIPE the
# bench and turn a yes into a no (it dropped every pdserve int8 row of one run).
pd_int8_supported() { [[ $("$PD/pdserve-decode-bench" --help 2>&1) == *int8* ]]; }
# --bf16-matmul kmajor runs where pdserve knows the choice (its kernels need AVX2+FMA).
bf16_kmajor_supported() {
  grep -qw avx2 /proc/cpuinfo && [[ $("$PD/pdserve-decode-bench" --help 2>&1) == *"kmajor ("* ]]
}

# --bf16-matmul dot runs where the CPU has AVX512-BF16 (and pdserve knows the choice), not under ISA=avx2.
bf16_dot_supported() {
  [[ $ISA != avx2 ]] && grep -qw avx512_bf16 /proc/cpuinfo &&
    [[ $("$PD/pdserve-decode-bench" --help 2>&1) == *"dot (prefill"* ]]
}

# record ROUND ROW SIDE TOOL SETTING < "tok/s" lines (one per value)
record() {
  local v
  while read -r v; do
    [[ -n $v ]] && echo "$1,$2,$3,$4,$5,$v" >>"$CSV"
  done
}

# llama_bench ROUND ROW GGUF_TYPE FA_LIST ARGS...: one CSV line per flash-attention setting.
llama_bench() {
  local round=$1 row=$2 type=$3 fa=$4
  shift 4
  local out=$LOGS/r${round}_${row}_llama.jsonl
  "$LB/llama-bench" -m "$GGUF-$type.gguf" -t "$THREADS" -fa "$fa" -r 1 -o jsonl "$@" >"$out" 2>/dev/null ||
    log "llama-bench failed (exit $?) on $row; see $out"
  $PY "$REPORT" parse llama-bench "$out" "$row" | while read -r name setting ts; do
    echo "$ts" | record "$round" "$name" llama.cpp llama-bench "fa=$setting"
  done
}

# llama_batched ROUND ROW GGUF_TYPE METRIC NPP NTG NPL [ARGS...]: llama-batched-bench's S_TG
# (METRIC tg) or S_PP (pp) for NPL sequences of NPP prompt + NTG generated tokens each.
llama_batched() {
  local round=$1 row=$2 type=$3 metric=$4 npp=$5 ntg=$6 npl=$7 fa
  shift 7
  for fa in on off; do
    local out=$LOGS/r${round}_${row}_llama_fa$fa.log _
    # Its result line goes through llama.cpp's asynchronous logger, which now and then loses it at
    # exit on a busy machine: up to 3 tries.
    for _ in 1 2 3; do
      "$LB/llama-batched-bench" -m "$GGUF-$type.gguf" -t "$THREADS" -c 4096 -b 2048 -ub 512 \
        -npp "$npp" -ntg "$ntg" -npl "$npl" -fa "$fa" --output-format jsonl "$@" >"$out" 2>&1 || true
      grep -q speed_tg "$out" && break
    done
    $PY "$REPORT" parse "batched-$metric" "$out" |
      record "$round" "$row" llama.cpp "llama-batched-bench B=$npl" "fa=$fa${*:+ $*}"
  done
}

# pd_decode ROUND ROW DTYPE DEPTH NEW: pdserve-decode-bench, batch 1, tok/s over NEW tokens.
pd_decode() {
  local round=$1 row=$2 dt=$3 depth=$4 new=$5
  local out=$LOGS/r${round}_${row}_pd_decode${PDSERVE_Q8_KERNEL:-}${PD_BF16_MATMUL:-}.log bw=(--bw-gbs "$BW_GBS")
  [[ $BW_GBS == 0 ]] && bw=()
  "$PD/pdserve-decode-bench" --model "$MODEL_DIR" --weights-dtype "$dt" --kv-dtype bf16 \
    --threads "$THREADS" --prompt-len "$depth" --new-tokens "$new" --no-cache-max 0 \
    --bf16-matmul "${PD_BF16_MATMUL:-auto}" \
    --parity-tokens "$([[ $depth -le 512 ]] && echo 1 || echo 0)" "${bw[@]}" >"$out" 2>&1
  if [[ $BW_GBS == 0 ]]; then
    BW_GBS=$($PY "$REPORT" parse bandwidth "$out")
    echo "$BW_GBS" | record "$round" bandwidth machine pdserve-decode-bench GB/s
  fi
  $PY "$REPORT" parse decode "$out" | record "$round" "$row" pdserve "pdserve-decode-bench${PD_TOOL_SUFFIX:-}" "kv=bf16"
}

# pd_step ROUND ROW DTYPE BATCH: pdserve-step-bench (engine DecodeStep), output tok/s.
pd_step() {
  local round=$1 row=$2 dt=$3 b=$4 out=$LOGS/r${1}_${2}_pd_step${PDSERVE_Q8_KERNEL:-}${PD_BF16_MATMUL:-}.log
  "$PD/pdserve-step-bench" --model "$MODEL_DIR" --weights-dtype "$dt" --kv-dtype bf16 \
    --threads "$THREADS" --batch-sizes "$b" --steps 32 --prompt-len 32 \
    --bf16-matmul "${PD_BF16_MATMUL:-auto}" >"$out" 2>&1
  $PY "$REPORT" parse step "$out" | record "$round" "$row" pdserve "pdserve-step-bench B=$b${PD_TOOL_SUFFIX:-}" "kv=bf16"
}

# pd_prefill ROUND DTYPE [ROW_DTYPE]: pdserve-ttft-bench in process, prompts of 512 and 4096
# tokens, recorded as rows prefill_LEN_ROW_DTYPE (default DTYPE) (PD_PACKED=1: --f32-packed-weights).
pd_prefill() {
  local round=$1 dt=$2 row_dt=${3:-$2} len ts
  local out=$LOGS/r${1}_prefill_${2}_pd${PD_BF16_MATMUL:-}${PDSERVE_Q8_KERNEL:-}${PD_PACKED:+_packed}.csv
  "$PD/pdserve-ttft-bench" --model "$MODEL_DIR" --weights-dtype "$dt" --kv-dtype bf16 \
    --threads "$THREADS" --prompt-lens 512,4096 --trials 1 --bf16-matmul "${PD_BF16_MATMUL:-auto}" \
    ${PD_PACKED:+--f32-packed-weights} --csv-out "$out" >/dev/null 2>&1
  $PY "$REPORT" parse ttft "$out" | while read -r len ts; do
    echo "$ts" | record "$round" "prefill_${len}_$row_dt" pdserve "pdserve-ttft-bench${PD_TOOL_SUFFIX:-}" "kv=bf16"
  done
}

run_decode_rows() {
  local r=$1 dt
  for dt in f32 bf16; do
    llama_bench "$r" "decode_d32_$dt" "$dt" on,off -p 0 -n 64 -d 32
    pd_decode "$r" "decode_d32_$dt" "$dt" 32 64
    pd_step "$r" "decode_d32_$dt" "$dt" 1
  done
  llama_bench "$r" decode_d4096_bf16 bf16 on,off -p 0 -n 32 -d 4096
  pd_decode "$r" decode_d4096_bf16 bf16 4096 32
  llama_batched "$r" decode_b16_bf16 bf16 tg 32 32 16
  pd_step "$r" decode_b16_bf16 bf16 16
  # The exact bf16 path auto did not pick: widen (row-major bf16 widened per call) where auto is
  # kmajor, else kmajor (k-major packs made at load) where pdserve has it. The engine names its
  # choice at load ("bf16 matmul kmajor"), in the auto run's log.
  local other=
  if grep -q "bf16 matmul kmajor" "$LOGS/r${r}_decode_d32_bf16_pd_decode.log"; then other=widen
  elif bf16_kmajor_supported; then other=kmajor; fi
  if [[ -n $other ]]; then
    PD_BF16_MATMUL=$other PD_TOOL_SUFFIX=" $other" pd_decode "$r" decode_d32_bf16 bf16 32 64
    PD_BF16_MATMUL=$other PD_TOOL_SUFFIX=" $other" pd_step "$r" decode_d32_bf16 bf16 1
    PD_BF16_MATMUL=$other PD_TOOL_SUFFIX=" $other" pd_decode "$r" decode_d4096_bf16 bf16 4096 32
    PD_BF16_MATMUL=$other PD_TOOL_SUFFIX=" $other" pd_step "$r" decode_b16_bf16 bf16 16
  fi
  if bf16_dot_supported; then
    PD_BF16_MATMUL=dot PD_TOOL_SUFFIX=" dot" pd_decode "$r" decode_d32_bf16 bf16 32 64
    PD_BF16_MATMUL=dot PD_TOOL_SUFFIX=" dot" pd_step "$r" decode_d32_bf16 bf16 1
    PD_BF16_MATMUL=dot PD_TOOL_SUFFIX=" dot" pd_decode "$r" decode_d4096_bf16 bf16 4096 32
    PD_BF16_MATMUL=dot PD_TOOL_SUFFIX=" dot" pd_step "$r" decode_b16_bf16 bf16 16
  fi
}

# Depth 32768 (its own group: each side prefills 32768 tokens first).
run_deep_rows() {
  llama_bench "$1" decode_d32768_bf16 bf16 on,off -p 0 -n 32 -d 32768
  pd_decode "$1" decode_d32768_bf16 bf16 32768 32
}

run_prefill_rows() {
  local r=$1 dt
  for dt in f32 bf16; do
    llama_bench "$r" "prefill_512_$dt" "$dt" on,off -p 512 -n 0
    # llama-bench's warmup of a prompt test is a whole prefill: skipped at 4096 (saves 2 prefills
    # per dtype; pdserve-ttft-bench too warms up with the 512 prompt only).
    llama_bench "$r" "prefill_4096_$dt" "$dt" on,off -p 4096 -n 0 --no-warmup
    pd_prefill "$r" "$dt"
  done
  PD_PACKED=1 PD_TOOL_SUFFIX=" packed" pd_prefill "$r" f32
  PD_PACKED=1 PD_BF16_MATMUL=widen PD_TOOL_SUFFIX=" packed" pd_prefill "$r" bf16
  if bf16_dot_supported; then PD_BF16_MATMUL=dot PD_TOOL_SUFFIX=" dot" pd_prefill "$r" bf16; fi
}

# llama.cpp's Q8_0 kernels use AMX tiles where the CPU lists AMX, and SIGILL where the kernel
# or hypervisor does not enable them (seen on a Xeon VM). Then the Q8_0 rows run through
# llama-batched-bench with --no-repack (no AMX/repacked buffers; llama-bench has no such flag).
q8_needs_no_repack() {
  if [[ -z ${Q8_NR+x} ]]; then
    Q8_NR=0
    "$LB/llama-bench" -m "$GGUF-q8_0.gguf" -t 1 -r 1 -p 32 -n 0 >/dev/null 2>&1 || Q8_NR=1
    [[ $Q8_NR == 1 ]] && log "llama.cpp Q8_0 with AMX/repack fails here: Q8_0 rows use --no-repack"
  fi
  [[ $Q8_NR == 1 ]]
}

run_int8_rows() {
  local r=$1
  if q8_needs_no_repack; then
    llama_batched "$r" decode_d32_q8 q8_0 tg 32 64 1 -nr
    llama_batched "$r" prefill_512_q8 q8_0 pp 512 1 1 -nr
    llama_batched "$r" decode_b16_q8 q8_0 tg 32 32 16 -nr
  else
    llama_bench "$r" decode_d32_q8 q8_0 on,off -p 0 -n 64 -d 32
    llama_bench "$r" prefill_512_q8 q8_0 on,off -p 512 -n 0
    llama_batched "$r" decode_b16_q8 q8_0 tg 32 32 16
  fi
  if pd_int8_supported; then
    # The FMA kernel (x stays fp32; opt-in: --q8-kernel fma).
    PDSERVE_Q8_KERNEL=fma PD_TOOL_SUFFIX=" fma" pd_decode "$r" decode_d32_q8 int8 32 64
    PDSERVE_Q8_KERNEL=fma PD_TOOL_SUFFIX=" fma" pd_step "$r" decode_b16_q8 int8 16
    # The int8-dot kernel (x rounded to int8 per block, as llama.cpp's Q8_0 does; the default
    # where the CPU has AVX2, from k-major packs: vpdpbusd with AVX-512 VNNI, else vpmaddubsw).
    PDSERVE_Q8_KERNEL=dot PD_TOOL_SUFFIX=" dot" pd_decode "$r" decode_d32_q8 int8 32 64
    PDSERVE_Q8_KERNEL=dot PD_TOOL_SUFFIX=" dot" pd_step "$r" decode_b16_q8 int8 16
    # Prefill under the dot kernel: from the k-major packs through the same kernel (the row
    # layout, PDSERVE_Q8_KMAJOR=0, widens each weight to fp32 for BLAS instead).
    PDSERVE_Q8_KERNEL=dot PD_TOOL_SUFFIX=" dot" pd_prefill "$r" int8 q8
  fi
}

run_round() {
  local group
  BW_GBS=0  # the round's first pdserve-decode-bench measures it again: each round has its own floor
  for group in $ROWS; do
    log "round $1: $group rows"
    "run_${group}_rows" "$1"
  done
}

report() {
  $PY "$REPORT" report --csv "$CSV" --config "$MODEL_DIR/config.json" --out-dir "$OUT_DIR" \
    --llama-commit "$(cat "$CACHE/commit")" --node-llama-cpp "$NODE_LLAMA_CPP_VERSION" \
    --threads "$THREADS" --rounds "$ROUNDS" --quick "$QUICK" --int8 "$(pd_int8_supported && echo 1 || echo 0)" \
    --isa "$ISA" \
    --seconds "$SECONDS"
}

main() {
  if [[ ${1:-} == -h || ${1:-} == --help ]]; then usage; exit 0; fi
  [[ $# -eq 0 ]] || { usage >&2; exit 2; }
  local g
  for g in $ROWS; do [[ $g =~ ^(decode|deep|prefill|int8)$ ]] || { echo "ROWS: unknown group '$g'" >&2; exit 2; }; done
  case $ISA in
    native) ;;
    avx2) export PDSERVE_ISA=avx2 ;;
    *) echo "ISA: want native or avx2, got '$ISA'" >&2; exit 2 ;;
  esac
  fetch_llama
  log "building llama.cpp (CPU only, -j$LLAMA_JOBS)"
  build_llama
  build_pdserve
  log "models: $MODEL_DIR -> $GGUF-{f32,bf16,q8_0}.gguf"
  make_models
  mkdir -p "$OUT_DIR" "$LOGS"
  echo "round,row,side,tool,setting,value" >"$CSV"
  SECONDS=0
  local r
  for ((r = 1; r <= ROUNDS; r++)); do run_round "$r"; done
  report
  log "wrote $OUT_DIR/{table.md,measurements.csv,decode_vs_depth.png} in ${SECONDS}s"
}

# Sourced (scripts/bench_gptoss_vs_llamacpp.sh), it only defines its settings and functions. One line:
# bash reads a script as it runs, so an edit mid-run cannot shift what runs next.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then main "$@"; exit $?; fi
