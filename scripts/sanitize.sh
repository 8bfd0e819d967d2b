#!/usr/bin/env bash
# Sanitized test runs:
#   scripts/sanitize.sh address   ASan + UBSan (UBSan reports are fatal) in build-asan/:
#                                 every `unit` test (not the k8s ones), the chaos suite at
#                                 N=100 (chaos_asan_test, tests/sanitize_tests.cmake) and
#                                 reliability_e2e_test.
#   scripts/sanitize.sh thread    TSan in build-tsan/: worker_pool_test, admission_queue_test,
#                                 router_service_test (the router's callback chain), kv_transfer_test
#                                 (+ batch_scheduler_test / decode_service_test once they exist) and
#                                 spin_pool_test (the decode step's helper threads).
# Configures the tree (Ninja, -DPDSERVE_SANITIZE=MODE, RelWithDebInfo = -O1 -g), builds only
# the targets those tests need, runs them with ctest -R, and fails on any test failure or any
# sanitizer report, including reports of child processes (router/prefill/decode workers of
# the chaos and e2e tests): every sanitizer writes to log_path under BUILD/sanitizer-logs/,
# and a non-empty log there fails the run. UBSan's reports in the ASan tree come out on the
# test's stderr instead (log_path is not applied to them): a "runtime error:" line in
# ctest's log fails the run too, and is printed at the end.
# Environment: PDSERVE_SANITIZE_JOBS (ninja -j, default 2), PDSERVE_SANITIZE_CHAOS_N
# (chaos requests, default 100; 0 leaves the chaos suite out), PDSERVE_SANITIZE_E2E=0 (leaves
# reliability_e2e_test out: its timing-bound checks are the slowest and least ASan-tolerant part).
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

# Tests (CTest names) and the targets they need.
tests=()
targets=()
have_target() { ninja -C "$dir" -t query "$1" >/dev/null 2>&1; }
if [[ $mode == address ]]; then
  # Every unit test that is a binary of this tree (k8s_* are scripts about manifests: nothing
  # to sanitize). The image test and the other e2e/chaos/fuzz labels are not unit.
  while read -r name; do
    [[ $name == k8s_* ]] && continue
    have_target "$name" || continue
    tests+=("$name"); targets+=("$name")
  done < <(ctest --test-dir "$dir" -N -L '^unit$' 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p')
  if [[ $chaos_n -gt 0 ]]; then
    tests+=(chaos_asan_test)
    targets+=(pdserve-router pdserve-prefill pdserve-decode pdserve-generate pdserve-init-model)
  fi
  if [[ ${PDSERVE_SANITIZE_E2E:-1} != 0 ]] && have_target reliability_e2e_test; then
    tests+=(reliability_e2e_test); targets+=(reliability_e2e_test)
  fi
else
  for name in worker_pool_test admission_queue_test router_service_test kv_transfer_test batch_scheduler_test \
      decode_service_test spin_pool_test; do
    have_target "$name" && { tests+=("$name"); targets+=("$name"); }
  done
fi
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
ctest --test-dir "$dir" --output-on-failure -R "$regex" || rc=$?
t_end=$(date +%s)

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
  "$(wc -w <<<"$reports") sanitizer report file(s), ctest/exit rc=$rc"
exit $rc
