#!/usr/bin/env bash
# The engine binaries as a user runs them: OpenMP threads yield by default
# (GOMP_SPINCOUNT=1000, set by the binary re-executing itself, same pid
# and process name), the user's setting and the opt-out win; OpenBLAS runs
# kernels as wide as the CPU (OPENBLAS_CORETYPE set the same way); a memory limit
# the estimate exceeds, a PDSERVE_ISA the CPU lacks, and --bf16-matmul dot
# without AVX512-BF16, are one clear error at start with exit status != 0;
# int8's kernel follows --q8-kernel (auto: dot where AVX2 + FMA + F16C, in its
# AVX-512 VNNI build where the CPU has that, else fma).
set -euo pipefail
BUILD=$1
SRC=$2
TMP=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
GEN=$BUILD/clients/pdserve-generate
unset OMP_WAIT_POLICY GOMP_SPINCOUNT OPENBLAS_CORETYPE PDSERVE_OMP_YIELD PDSERVE_ISA PDSERVE_MEMORY_LIMIT_BYTES OMP_NUM_THREADS \
  GLIBC_TUNABLES PDSERVE_HUGE_PAGES
"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/tiny.json" --seed 3 --out "$TMP/m" >/dev/null 2>&1
gen() { "$GEN" --model "$TMP/m" --prompt-ids 1,2,3 --max-new-tokens 4 "$@"; }
# err_has PATTERN: the last gen's stderr (in $TMP/err) matches.
err_has() { grep -q -- "$1" "$TMP/err" || fail "no '$1' in: $(cat "$TMP/err")"; }

echo "--- default: bounded spin, set by pdserve; threads as before"
gen >"$TMP/out" 2>"$TMP/err" || fail "generate: $(cat "$TMP/err")"
grep -q '"token_ids"' "$TMP/out" || fail "no tokens: $(cat "$TMP/out")"
grep -q "GOMP_SPINCOUNT=1000 (pdserve default)" "$TMP/err" || fail "policy: $(cat "$TMP/err")"
grep -q "pdserve: $(nproc) threads" "$TMP/err" || fail "threads != $(nproc): $(cat "$TMP/err")"
gen --threads 1 >/dev/null 2>"$TMP/err"; err_has "pdserve: 1 threads"
same=$(gen 2>/dev/null)
[ "$same" == "$(cat "$TMP/out")" ] || fail "tokens differ between runs: $same"

echo "--- the user's setting and the opt-out win"
OMP_WAIT_POLICY=active gen >/dev/null 2>"$TMP/err"; err_has "OMP_WAIT_POLICY=active (environment)"
GOMP_SPINCOUNT=1000 gen >/dev/null 2>"$TMP/err"; err_has "GOMP_SPINCOUNT=1000 (environment)"
PDSERVE_OMP_YIELD=0 gen >/dev/null 2>"$TMP/err"; err_has "libgomp default (spin; PDSERVE_OMP_YIELD=0)"
[ "$(PDSERVE_OMP_YIELD=0 gen 2>/dev/null)" == "$same" ] || fail "tokens differ with spinning threads"

echo "--- malloc on 2 MiB pages by default; the user's GLIBC_TUNABLES and PDSERVE_HUGE_PAGES=0 win"
gen >/dev/null 2>"$TMP/err"; err_has "malloc on 2 MiB pages (pdserve default)"
OMP_WAIT_POLICY=active gen >/dev/null 2>"$TMP/err"; err_has "malloc on 2 MiB pages (pdserve default)"
err_has "OMP_WAIT_POLICY=active (environment)"
GLIBC_TUNABLES=glibc.malloc.arena_max=4 gen >/dev/null 2>"$TMP/err"
err_has "GLIBC_TUNABLES=glibc.malloc.arena_max=4 (environment)"
PDSERVE_HUGE_PAGES=0 gen >/dev/null 2>"$TMP/err"; err_has "malloc on 4 KiB pages"
[ "$(PDSERVE_HUGE_PAGES=0 gen 2>/dev/null)" == "$same" ] || fail "tokens differ with malloc on 4 KiB pages"

echo "--- OpenBLAS runs kernels as wide as the CPU's vectors (0.3.21 falls back to SSE3 on models it does not know)"
gen >/dev/null 2>"$TMP/err"
core=$(grep -o 'OpenBLAS [A-Za-z0-9]*' "$TMP/err" | head -1 | cut -d' ' -f2)
[ -n "$core" ] || fail "no OpenBLAS core in the log: $(cat "$TMP/err")"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
has_all() { local f; for f; do has "$f" || return 1; done; }
if has avx512f && has avx512bw && has avx512vl; then
  [[ $core =~ ^(SkylakeX|Cooperlake|SapphireRapids)$ ]] || fail "AVX-512 CPU, OpenBLAS runs $core"
elif has avx2 && has fma; then
  [[ $core =~ ^(Haswell|Zen|SkylakeX|Cooperlake|SapphireRapids)$ ]] || fail "AVX2 CPU, OpenBLAS runs $core"
fi
echo "OpenBLAS core: $core ($(grep -o 'OpenBLAS [^,]*' "$TMP/err" | head -1))"
# The user's OPENBLAS_CORETYPE is kept; one narrower than the CPU says so.
OPENBLAS_CORETYPE=Haswell gen >/dev/null 2>"$TMP/err"; err_has "OpenBLAS Haswell (OPENBLAS_CORETYPE from the environment"
if has avx512f && has avx512bw && has avx512vl; then
  err_has "OpenBLAS Haswell (OPENBLAS_CORETYPE from the environment; narrower than this CPU's vectors"
elif has avx2 && has fma; then
  err_has "OpenBLAS Haswell (OPENBLAS_CORETYPE from the environment),"
fi

echo "--- a server: same pid and name after the re-exec, the spin count in its environment"
"$BUILD/decode_service/pdserve-decode" --model "$TMP/m" --listen 127.0.0.1:0 --metrics-port -1 \
  --kv-budget-mb 16 2>"$TMP/decode.err" &
SERVER=$!
for _ in $(seq 1 300); do grep -q "threads" "$TMP/decode.err" && break; sleep 0.1; done
grep -q "GOMP_SPINCOUNT=1000 (pdserve default)" "$TMP/decode.err" || fail "decode: $(cat "$TMP/decode.err")"
[ "$(cat /proc/$SERVER/comm)" == "pdserve-decode" ] || fail "process name $(cat /proc/$SERVER/comm)"
tr '\0' '\n' </proc/$SERVER/environ >"$TMP/environ"
grep -qx "GOMP_SPINCOUNT=1000" "$TMP/environ" || fail "environ lacks the policy"
grep -q "KV budget 16.0 MiB" "$TMP/decode.err" || fail "estimate without the KV budget: $(cat "$TMP/decode.err")"
kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=

echo "--- a memory limit the estimate exceeds is refused with the numbers"
if PDSERVE_MEMORY_LIMIT_BYTES=1000000 gen >/dev/null 2>"$TMP/err"; then fail "loaded past the limit"; fi
grep -q "pdserve-generate: error: the model would not fit the memory limit: .* > 1000000 bytes" "$TMP/err" ||
  fail "unclear refusal: $(cat "$TMP/err")"
# The decode worker counts its KV budget: 8 MiB fits the tiny model, 4096 MiB does not.
if PDSERVE_MEMORY_LIMIT_BYTES=$((64 << 20)) "$BUILD/decode_service/pdserve-decode" --model "$TMP/m" \
     --listen 127.0.0.1:0 --metrics-port -1 --kv-budget-mb 4096 2>"$TMP/err"; then fail "decode loaded past the limit"; fi
grep -q "error: .*KV budget 4.00 GiB.*limit 64.0 MiB (PDSERVE_MEMORY_LIMIT_BYTES)" "$TMP/err" ||
  fail "decode refusal: $(cat "$TMP/err")"
PDSERVE_MEMORY_LIMIT_BYTES=$((64 << 20)) gen >/dev/null 2>&1 || fail "a limit that fits was refused"
PDSERVE_MEMORY_LIMIT_BYTES=max gen >/dev/null 2>&1 || fail "'max' was refused"

echo "--- a kernel path the CPU lacks is a clear error, not SIGILL"
if PDSERVE_ISA=sse gen >/dev/null 2>"$TMP/err"; then fail "accepted PDSERVE_ISA=sse"; fi
grep -q "PDSERVE_ISA=sse: ISA must be avx2, avx512 or amx" "$TMP/err" || fail "unclear: $(cat "$TMP/err")"
for isa in avx2 avx512 amx; do
  case $isa in avx2) need="avx2 fma" ;; avx512) need="avx2 fma avx512f avx512bw avx512vl" ;;
    amx) need="avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_tile amx_bf16" ;; esac
  # shellcheck disable=SC2086  # $need: one word per flag
  if has_all $need; then
    PDSERVE_ISA=$isa gen >/dev/null 2>"$TMP/err" || fail "PDSERVE_ISA=$isa on a CPU that has it: $(cat "$TMP/err")"
    err_has "ISA $isa ("
    echo "this CPU has $isa: forced path runs"
  else
    if PDSERVE_ISA=$isa gen >/dev/null 2>"$TMP/err"; then fail "PDSERVE_ISA=$isa ran on a CPU without it"; fi
    grep -q "cannot run the $isa path" "$TMP/err" || fail "unclear: $(cat "$TMP/err")"
    echo "this CPU lacks $isa: refused at start"
  fi
done

echo "--- --bf16-matmul dot (bf16 activations): runs where the CPU has AVX512-BF16, refused elsewhere"
if PDSERVE_ISA=avx2 gen --weights-dtype bf16 --bf16-matmul dot >/dev/null 2>"$TMP/err"; then
  fail "dot ran under PDSERVE_ISA=avx2"
fi
err_has "--bf16-matmul=dot: .*dot needs avx512f avx512bw avx512vl avx512_bf16"
if has_all avx2 fma avx512f avx512bw avx512vl avx512_bf16; then
  gen --weights-dtype bf16 --bf16-matmul dot >"$TMP/dot" 2>"$TMP/err" || fail "dot: $(cat "$TMP/err")"
  err_has "(bf16 matmul dot)"
  grep -q '"token_ids"' "$TMP/dot" || fail "no tokens: $(cat "$TMP/dot")"
  [ "$(gen --weights-dtype bf16 --bf16-matmul dot 2>/dev/null)" == "$(cat "$TMP/dot")" ] || fail "dot tokens differ between runs"
  echo "this CPU has avx512_bf16: dot runs"
else
  if gen --weights-dtype bf16 --bf16-matmul dot >/dev/null 2>"$TMP/err"; then fail "dot ran on a CPU without AVX512-BF16"; fi
  err_has "cannot run the bf16 dot kernel"
  echo "this CPU lacks avx512_bf16: dot refused at start"
fi
echo "--- int8: --q8-kernel auto takes dot (k-major packs) where the CPU has AVX2+FMA+F16C, in its AVX-512 VNNI"
echo "    build where the CPU has that; a named kernel wins"
vnni=0 avx2=0
has_all avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni && vnni=1
has_all avx2 fma f16c && avx2=1
gen --weights-dtype int8 >"$TMP/q8" 2>"$TMP/err" || fail "int8: $(cat "$TMP/err")"
grep -q '"token_ids"' "$TMP/q8" || fail "no tokens: $(cat "$TMP/q8")"
if [ $vnni = 1 ]; then
  err_has "(int8 kernel dot, k-major packs, avx512 build)"
  echo "this CPU has AVX-512 VNNI: auto is dot, avx512 build"
elif [ $avx2 = 1 ]; then
  err_has "(int8 kernel dot, k-major packs, avx2 build)"
  echo "this CPU lacks AVX-512 VNNI: auto is dot, avx2 build"
else
  err_has "(int8 kernel fma)"
  echo "this CPU lacks AVX2: auto is fma"
fi
if [ $avx2 = 1 ]; then
  PDSERVE_ISA=avx2 gen --weights-dtype int8 >"$TMP/q8_avx2" 2>"$TMP/err"
  err_has "(int8 kernel dot, k-major packs, avx2 build)"
  # The two builds sum the same exact block dots in the same fp32 order: the same tokens.
  cmp -s "$TMP/q8" "$TMP/q8_avx2" ||
    fail "PDSERVE_ISA=avx2 changed the int8 tokens: $(cat "$TMP/q8") vs $(cat "$TMP/q8_avx2")"
fi
gen --weights-dtype int8 --q8-kernel fma >/dev/null 2>"$TMP/err"; err_has "(int8 kernel fma)"
PDSERVE_Q8_KERNEL=fma gen --weights-dtype int8 >/dev/null 2>"$TMP/err"; err_has "(int8 kernel fma)"
gen --weights-dtype int8 --q8-kernel dot >/dev/null 2>"$TMP/err"; err_has "(int8 kernel dot"
if gen --weights-dtype int8 --q8-kernel vnni >/dev/null 2>"$TMP/err"; then fail "--q8-kernel vnni was accepted"; fi
err_has '--q8-kernel=vnni: unknown int8 kernel "vnni" (want auto, dot or fma)'
echo PASS
