#!/usr/bin/env bash
# Runs libFuzzer targets (tests/fuzz/) built with ASan + UBSan.
#
#   scripts/fuzz.sh TARGET SECONDS     # one of: config safetensors tokenizer request_validation openai_request kv_wire
#   scripts/fuzz.sh all SECONDS        # each in turn, SECONDS apiece
#
# Configures and builds the fuzz tree (clang, its own CMake project:
# tests/fuzz/CMakeLists.txt) in build-fuzz/ when needed, runs the target on a
# copy of its seed corpus (tests/fuzz/corpus/TARGET/; the checked-in seeds are
# never modified), and prints one line per target with executions and
# coverage from libFuzzer's final stats. Exits non-zero when a target
# crashes, leaks, times out, hits a sanitizer report or fails a property;
# the reproducer is left in the work directory and named in the output.
# Targets with a tests/fuzz/TARGET.dict get it (with json.dict) as a
# libFuzzer dictionary.
#
# Environment:
#   PDSERVE_FUZZ_BUILD   build tree (default: build-fuzz in the repository)
#   PDSERVE_FUZZ_WORK    where corpus copies, logs and crash files go
#                        (default: a fresh temporary directory, removed
#                        when every target passed)
#   PDSERVE_FUZZ_ARGS    extra libFuzzer flags (e.g. "-jobs=2 -workers=2")
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGETS=(config safetensors tokenizer request_validation openai_request kv_wire)

usage() {
  echo "usage: $0 {all|${TARGETS[*]// /|}} SECONDS" >&2
  exit 2
}
[ $# -eq 2 ] || usage
TARGET="$1"
SECONDS_EACH="$2"
[[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] && [ "$SECONDS_EACH" -ge 1 ] || usage
if [ "$TARGET" = all ]; then
  RUN=("${TARGETS[@]}")
else
  ok=0
  for t in "${TARGETS[@]}"; do [ "$t" = "$TARGET" ] && ok=1; done
  [ $ok -eq 1 ] || usage
  RUN=("$TARGET")
fi

BUILD="${PDSERVE_FUZZ_BUILD:-$ROOT/build-fuzz}"
WORK="${PDSERVE_FUZZ_WORK:-}"
CLEANUP=0
if [ -z "$WORK" ]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/pdserve-fuzz.XXXXXX")"
  CLEANUP=1
fi
mkdir -p "$WORK"

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (bash scripts/setup.sh installs clang)" >&2; exit 1; }
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "fuzz: configuring $BUILD" >&2
  cmake -S "$ROOT/tests/fuzz" -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DPDSERVE_FUZZ=ON >"$WORK/configure.log" 2>&1 ||
    { cat "$WORK/configure.log" >&2; exit 1; }
fi
bins=()
for t in "${RUN[@]}"; do bins+=("${t}_fuzzer"); done
echo "fuzz: building ${bins[*]} in $BUILD" >&2
ninja -C "$BUILD" "${bins[@]}" >"$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log" >&2; exit 1; }

failed=()
for t in "${RUN[@]}"; do
  corpus="$WORK/corpus/$t"
  mkdir -p "$corpus" "$WORK/artifacts/$t"
  cp -r "$ROOT/tests/fuzz/corpus/$t/." "$corpus/"
  log="$WORK/$t.log"
  # Dictionaries: JSON tokens for the JSON parsers, plus each target's keys.
  dict=()
  if [ -f "$ROOT/tests/fuzz/$t.dict" ]; then
    cat "$ROOT/tests/fuzz/json.dict" "$ROOT/tests/fuzz/$t.dict" >"$WORK/$t.dict"
    dict=(-dict="$WORK/$t.dict")
  fi
  echo "fuzz: $t for ${SECONDS_EACH}s (log $log)" >&2
  rc=0
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$BUILD/${t}_fuzzer" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=30 -rss_limit_mb=3072 \
      -artifact_prefix="$WORK/artifacts/$t/" "${dict[@]}" ${PDSERVE_FUZZ_ARGS:-} "$corpus" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  last="$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")"
  crashes="$(find "$WORK/artifacts/$t" -type f | wc -l)"
  summary="fuzz $t: ${SECONDS_EACH}s, ${execs:-?} execs (${rate:-?}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, crashes $crashes"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    echo "$summary: FAILED (exit $rc)"
    grep -E 'ERROR:|runtime error:|_fuzzer: |SUMMARY:|Test unit written to' "$log" | head -20
    find "$WORK/artifacts/$t" -type f | sed 's/^/  reproducer: /'
    failed+=("$t")
  else
    echo "$summary: ok"
  fi
done

if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (work directory $WORK)" >&2
  exit 1
fi
if [ "$CLEANUP" -eq 1 ]; then
  rm -rf "$WORK"
  echo "fuzz: all passed" >&2
else
  echo "fuzz: all passed (work directory $WORK)" >&2
fi
