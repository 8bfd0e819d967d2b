#!/usr/bin/env bash
# CI's test run (README command 2 runs it after scripts/setup.sh):
#   1. scripts/build.sh: configure and build ./build (Release, Ninja).
#   2. ctest -j2 -LE gpu in ./build: every test except those labelled gpu
#      (tests/CMakeLists.txt and tests/*_tests.cmake define them), one at a
#      time (each takes the lock "cores") but for the image build, which
#      runs beside them at nice 15 from the start (tests/k8s_tests.cmake); gtest
#      binaries in random case order (GTEST_SHUFFLE, seed printed):
#        unit, e2e        the tests of the tree and the real binaries on
#                         loopback (router_streams_e2e_test: 2,000
#                         concurrent streams, ~45 s);
#        image            k8s_image_build_test: the CPU image built with
#                         buildah and served from (~15 min cold; it
#                         deletes its storage after, unless
#                         PDSERVE_IMAGE_CACHE=keep: then ~5 min warm);
#        asan             asan_test: ASan + UBSan tree build-asan/, its unit
#                         tests, chaos at N=100, reliability_e2e_test
#                         (~14 min including the build);
#        tsan             tsan_test: TSan tree build-tsan/, worker_pool_test,
#                         admission_queue_test, router_service_test,
#                         kv_transfer_test, batch_scheduler_test,
#                         spin_pool_test, and the HTTP front end:
#                         http_server_test, openai_http_test,
#                         client_disconnect_test, metrics_test (~3 min
#                         including the build);
#        fuzz             fuzz_smoke_test: every libFuzzer target 30 s on its
#                         corpus in build-fuzz/ (~3 min);
#        chaos            chaos_tiny_test, chaos_small_test: kill/stop/fault
#                         injection under load (~1.5 min).
#      A quick run leaves the slow labels out:
#        cd build && ctest -LE 'gpu|image|asan|tsan|fuzz|chaos'
#   3. The skip count: a gtest case that called GTEST_SKIP fails the run
#      unless CPU_GATED_SKIPS / GPU_GATED_SKIPS below allow that case on
#      this machine, and a script that exited 77 fails it unless it is on
#      ALLOWED_SKIPS, so a missing tool or file cannot hide a suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# The skip allow-lists (ALLOWED_SKIPS, CPU_GATED_SKIPS, GPU_GATED_SKIPS) and
# the per-case check, shared with scripts/sanitize.sh.
# shellcheck source=scripts/test_skips.sh
source scripts/test_skips.sh

bash scripts/build.sh
cd build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
ctest --output-on-failure -j2 -LE gpu 2>&1 | tee "$log" || rc=$?

# CTest lists each skipped test as "<n> - <name> (Skipped)".
mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9]\+ - \([^ ]*\) (Skipped)$/\1/p' "$log")
mapfile -t skipped_cases < <(skipped_cases Testing/Temporary/LastTest.log)
echo "Skipped tests: ${#skipped[@]}, skipped cases: ${#skipped_cases[@]}"
unexpected=0
for t in "${skipped[@]}"; do
  allowed=no
  for a in "${ALLOWED_SKIPS[@]}"; do [ "$t" = "$a" ] && allowed=yes; done
  # A gtest binary's skip is judged by its cases (below); one without any
  # PDSERVE_SKIPPED line (a script's exit 77) only by ALLOWED_SKIPS.
  for tc in "${skipped_cases[@]}"; do [ "${tc%% *}" = "$t" ] && allowed="yes (judged by its cases below)"; done
  echo "  $t ($([ "$allowed" != no ] && echo "allowed${allowed#yes}" || echo 'NOT on the allow-list'))"
  [ "$allowed" != no ] || unexpected=$((unexpected + 1))
done
n=0
check_skipped_cases "${skipped_cases[@]}" || n=$?
unexpected=$((unexpected + n))
if [ "${#skipped[@]}" -gt 0 ]; then
  # Why: gtest's "file:line: Skipped" and the message after it, scripts' "SKIP: ...".
  echo "Reasons given:"
  grep -h -A1 -E ': Skipped$|^SKIP: ' Testing/Temporary/LastTest.log 2>/dev/null | grep -v -E '^--$|: Skipped$' |
    sort -u | head -n 40 | sed 's/^/  /' || true
fi
if [ "$rc" -ne 0 ]; then
  # The failing assertions again, last: a CI page that shows only the tail of
  # this log still says what failed (gtest's "file:line: Failure" and the lines
  # after it, sanitizer and abort lines; this includes the tests that
  # scripts/sanitize.sh ran inside asan_test/tsan_test).
  echo "Failure details (from Testing/Temporary/LastTest.log):"
  grep -h -A8 -E ': Failure$|^\[  FAILED  \] [A-Za-z]|ERROR: (Address|Leak|Thread|UndefinedBehavior)Sanitizer|runtime error:|terminate called|Assertion .* failed|^FAIL' \
    Testing/Temporary/LastTest.log 2>/dev/null | cut -c1-300 | head -n 80 | sed 's/^/  /' || true
fi
if [ "$unexpected" -gt 0 ]; then
  echo "FAIL: $unexpected skip(s) not allowed here (ALLOWED_SKIPS, CPU_GATED_SKIPS, GPU_GATED_SKIPS in scripts/test_skips.sh)" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
