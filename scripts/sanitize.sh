#!/usr/bin/env bash
# Sanitized test runs:
#   scripts/sanitize.sh address   ASan + UBSan (UBSan reports are fatal) in build-asan/:
#                                 every `unit` test (not the k8s ones), the chaos suite at
#                                 N=100 (chaos_asan_test, tests/sanitize_tests.cmake) and
#                                 reliability_e2e_test.
#   scripts/sanitize.sh thread    TSan in build-tsan/: worker_pool_test, admission_queue_test,
#                                 router_service_test (the router's callback chain), kv_transfer_test,
#                                 batch_scheduler_test, spin_pool_test (the decode step's helper
#                                 threads), and the HTTP front end: http_server_test,
#                                 openai_http_test, client_disconnect_test (the disconnect
#                                 watcher), metrics_test (the metrics server).
# Every test is named by its CTest name and mapped to the binary of its command (a filtered run
# of another test's binary is built and run too); a name the tree does not define fails the run.
# A skipped case fails it too unless scripts/test_skips.sh allows it on this machine.
# Configures the tree (Ninja, -DPDSERVE_SANITIZE=MODE, RelWithDebInfo = -O1 -g1), builds only
# the targets those tests need, runs them with ctest -R, and fails on any test failure or any
# sanitizer report, including reports of child processes (router/prefill/decode workers of
# the chaos and e2e tests): every sanitizer writes to log_path under BUILD/sanitizer-logs/,
# and a non-empty log there fails the run. UBSan's reports in the ASan tree come out on the
# test's stderr instead (log_path is not applied to them): a "runtime error:" line in
# ctest's log fails the run too, and is printed at the end.
# Environment: PDSERVE_SANITIZE_JOBS (ninja -j, default 2), PDSERVE_SANITIZE_CHAOS_N
# (chaos requests, default 100; 0 leaves the chaos suite out), PDSERVE_SANITIZE_E2E=0 (leaves
# reliability_e2e_test out: the slowest part of the run), PDSERVE_SANITIZE_PRUNE=1 (after the
# run, deletes the tree but its logs: asan_test and tsan_test set it, so CI's disk holds one
# sanitized tree at a time; a developer's run keeps the tree for incremental rebuilds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
case "$mode" in
  address) dir=$root/build-asan ;;
  thread) dir=$root/build-tsan ;;
  *) echo "usage: $0 address|thread" >&2; exit 2 ;;
esac
jobs=${PDSERVE_SANITIZE_JOBS:-2}
chaos_n=${PDSERVE_SANITIZE_CHAOS_N:-100}
supp=$root/tests/sanitizers
t_start=$(date +%s)

cmake -S "$root" -B "$dir" -G Ninja -DPDSERVE_SANITIZE="$mode" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPDSERVE_SANITIZE_CHAOS_N="$chaos_n" >"$dir.configure.log" 2>&1 \
  || { cat "$dir.configure.log"; echo "sanitize.sh: configure failed" >&2; exit 1; }

# Tests (CTest names) and the targets they need. Each CTest name maps to the executable of its
# command (CTestTestfile.cmake's add_test lines, readable before anything is built), so a test
# that runs another test's binary with a filter (engine_q8kmajor_test runs engine_test, ...) is
# run too, with its binary built; a name this tree does not define fails the run.
tests=()
targets=()
have_target() { ninja -C "$dir" -t query "$1" >/dev/null 2>&1; }
# "<name> <executable> <labels;...>" per CTest of the tree.
ctest_map=$(python3 - "$dir" <<'PY'
import os, re, shlex, sys
root = sys.argv[1]
cmd, labels = {}, {}
for d, _, files in os.walk(root):
    if "CTestTestfile.cmake" not in files:
        continue
    for line in open(os.path.join(d, "CTestTestfile.cmake")):
        m = re.match(r'add_test\(\[=\[(.*?)\]=\] (.*)\)\s*$', line)
        if m:
            cmd[m.group(1)] = shlex.split(m.group(2))[0]
        m = re.match(r'set_tests_properties\(\[=\[(.*?)\]=\] PROPERTIES .*?\bLABELS "([^"]*)"', line)
        if m:
            labels[m.group(1)] = m.group(2)
for name, exe in sorted(cmd.items()):
    print(name, exe, labels.get(name, "-") or "-")
PY
)
[[ -n $ctest_map ]] || { echo "sanitize.sh: no CTest found in $dir" >&2; exit 1; }
# The target that builds CTest $1's executable ("" when it is not a binary of this tree: a script).
binary_of() {
  local exe
  exe=$(awk -v n="$1" '$1 == n { print $2 }' <<<"$ctest_map")
  [[ -n $exe ]] || { echo "sanitize.sh: no CTest named '$1' in $dir" >&2; return 1; }
  [[ $exe == "$dir"/* ]] || return 0
  have_target "${exe##*/}" || { echo "sanitize.sh: CTest '$1' runs ${exe##*/}, not a target of $dir" >&2; return 1; }
  echo "${exe##*/}"
}
add() {  # CTest $1; fails on an unknown name or one that is not a binary of this tree
  local bin
  bin=$(binary_of "$1") || exit 1
  [[ -n $bin ]] || { echo "sanitize.sh: CTest '$1' is not a binary of $dir" >&2; exit 1; }
  tests+=("$1")
  targets+=("$bin")
}
if [[ $mode == address ]]; then
  # Every unit test whose command is a binary of this tree (k8s_* are scripts about manifests:
  # nothing to sanitize; the other scripts are named as left out). The image test and the other
  # e2e/chaos/fuzz labels are not unit.
  while read -r name exe labels; do
    [[ ";$labels;" == *";unit;"* ]] || continue
    [[ $name == k8s_* ]] && continue
    if [[ $exe != "$dir"/* ]]; then
      echo "sanitize.sh address: left out $name (runs ${exe##*/}, not a binary of this tree)"
      continue
    fi
    add "$name"
  done <<<"$ctest_map"
  if [[ $chaos_n -gt 0 ]]; then
    binary_of chaos_asan_test >/dev/null || exit 1  # a script: must exist, has no binary
    tests+=(chaos_asan_test)
    targets+=(pdserve-router pdserve-prefill pdserve-decode pdserve-generate pdserve-init-model)
  fi
  if [[ ${PDSERVE_SANITIZE_E2E:-1} != 0 ]]; then
    add reliability_e2e_test
  fi
else
  # The HTTP front end (http_server_test: the event-driven server; openai_http_test,
  # client_disconnect_test: the OpenAI handlers and the disconnect watcher; metrics_test: the
  # metrics server) runs its own threads against the callers': all of it under TSan.
  for name in worker_pool_test admission_queue_test router_service_test kv_transfer_test batch_scheduler_test \
      spin_pool_test http_server_test openai_http_test metrics_test client_disconnect_test; do
    add "$name"
  done
fi
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | awk '!seen[$0]++')
[[ ${#tests[@]} -gt 0 ]] || { echo "sanitize.sh: no tests found in $dir" >&2; exit 1; }
echo "sanitize.sh $mode: building ${targets[*]}"
ninja -C "$dir" -j"$jobs" "${targets[@]}"
t_built=$(date +%s)

logs=$dir/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
# LibTorch's OpenMP pool: libgomp is not instrumented (TSan false positives) and idle
# spinning workers only slow the sanitized runs down.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
if [[ $mode == address ]]; then
  # detect_leaks=1: LSan runs at every exit; lsan.supp lists the third-party frames
  # (each with its reason) whose one-time allocations it would report.
  export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:log_path=$logs/asan"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  # A test that bounds RSS growth measures the allocator, which ASan replaces (quarantine,
  # shadow memory): it runs in the normal tree only.
  export GTEST_FILTER="-ReliabilityE2eTest.AbandonedHandoffsFreeTheirMemory"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp:log_path=$logs/ubsan"
else
  export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1:history_size=4:log_path=$logs/tsan"
  # The gRPC transport's receive path hands each chunk from a gRPC thread to the reactor's
  # through gRPC's uninstrumented completion queue: TSan reports it intermittently as a race
  # in KvChunkDecoder::Accept. Its gRPC variants run in the normal and ASan trees; under TSan,
  # the in-process transport and the worker pool.
  export GTEST_FILTER="-*/Grpc:GrpcKvTransferTest.*"
fi

regex="^($(IFS='|'; echo "${tests[*]}"))\$"
echo "sanitize.sh $mode: ctest -R '$regex'"
rc=0
ctest_log=$dir/sanitize-ctest.log
ctest --test-dir "$dir" --output-on-failure -R "$regex" 2>&1 | tee "$ctest_log" || rc=$?
t_end=$(date +%s)
# Every test named above ran: none dropped by the regex or missing from the tree.
ran=$(sed -n 's/.* tests\{0,1\} failed out of \([0-9]\+\)$/\1/p' "$ctest_log" | tail -n 1)
if [[ ${ran:-0} -ne ${#tests[@]} ]]; then
  echo "sanitize.sh $mode: ctest ran ${ran:-no} test(s), not the ${#tests[@]} named: ${tests[*]}" >&2
  rc=1
fi

# Skips fail the run as in scripts/test.sh (same allow-lists, scripts/test_skips.sh): every
# skipped gtest case must be allowed on this machine, and a CTest that skipped without naming
# its cases (not a gtest binary) fails. Printed "case <ctest>:<Suite.Case>", not in
# gtest_main's PDSERVE_SKIPPED form, so scripts/test.sh does not count them twice.
# shellcheck source=scripts/test_skips.sh
source "$root/scripts/test_skips.sh"
mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9]\+ - \([^ ]*\) (Skipped)$/\1/p' "$ctest_log")
mapfile -t skipped_cases < <(skipped_cases "$dir/Testing/Temporary/LastTest.log")
if [[ ${#skipped[@]} -gt 0 || ${#skipped_cases[@]} -gt 0 ]]; then
  echo "sanitize.sh $mode: skipped: ${#skipped[@]} test(s), ${#skipped_cases[@]} case(s)"
  for t in "${skipped[@]}"; do
    named=no
    for tc in "${skipped_cases[@]}"; do [[ ${tc%% *} == "$t" ]] && named=yes; done
    if [[ $named == no ]]; then
      echo "  $t skipped without naming a gtest case: not allowed" >&2
      rc=1
    fi
  done
  bad=0
  check_skipped_cases "${skipped_cases[@]}" || bad=$?
  if [[ $bad -gt 0 ]]; then
    echo "sanitize.sh $mode: $bad skipped case(s) not allowed here (scripts/test_skips.sh)" >&2
    rc=1
  fi
fi

# Reports printed on a test's output rather than to a log file (see the header).
stderr_reports=$(grep -h -A12 -E 'runtime error:|ERROR: (Address|Leak|Thread)Sanitizer' \
  "$dir/Testing/Temporary/LastTest.log" 2>/dev/null | head -n 60 || true)
if [[ -n $stderr_reports ]]; then
  echo "sanitize.sh $mode: sanitizer report(s) in the tests' output:" >&2
  echo "$stderr_reports" >&2
  rc=1
fi
reports=$(find "$logs" -type f -size +0 | sort)
if [[ -n $reports ]]; then
  echo "sanitize.sh $mode: sanitizer reports:" >&2
  for f in $reports; do
    echo "=== $f" >&2
    head -n 80 "$f" >&2
  done
  rc=1
fi
echo "sanitize.sh $mode: build $((t_built - t_start)) s, tests $((t_end - t_built)) s," \
  "$(wc -w <<<"$reports") sanitizer report file(s), tree $(du -sm "$dir" | cut -f1) MiB, ctest/exit rc=$rc"
if [[ ${PDSERVE_SANITIZE_PRUNE:-0} == 1 ]]; then
  find "$dir" -mindepth 1 -maxdepth 1 ! -name sanitizer-logs ! -name sanitize-ctest.log ! -name Testing \
    -exec rm -rf {} +
  echo "sanitize.sh $mode: deleted $dir but its logs (PDSERVE_SANITIZE_PRUNE=1)"
fi
exit $rc
