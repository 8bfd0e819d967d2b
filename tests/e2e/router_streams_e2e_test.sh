#!/usr/bin/env bash
# The router holds no thread per request: 2,000 concurrent streams of 8
# tokens through pdserve-local (tiny model) all end, and the process's
# thread count (/proc/PID/status, sampled every 50 ms) stays at most 64.
# Then 2,000 streams whose 1 s deadline most cannot meet: every one ends,
# each either OK or DEADLINE_EXCEEDED (in the queue or mid-stream), the
# threads stay bounded, and the stack serves a request afterwards.
# Usage: router_streams_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(out.txt err.txt local.log)
BENCH="$BUILD/bench/pdserve-bench"
MAX_THREADS=64

"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/tiny.json" --seed 1 --out "$WORK/m" >/dev/null 2>&1
start_local_stack "$WORK/m" --metrics-port -1 --log-requests=false --max-batch 256 --http-listen=  # no HTTP threads

threads() { awk '/^Threads:/{print $2}' "/proc/$STACK/status"; }
# Samples the thread count into $WORK/max_threads until $WORK/stop exists.
sample_threads() {
  local max=0 t
  while [ ! -e "$WORK/stop" ]; do
    t=$(threads) && [ "$t" -gt "$max" ] && max=$t && echo "$max" >"$WORK/max_threads"
    sleep 0.05
  done
}

# run_streams NAME BENCH_ARGS...: 2,000 streams at once; checks every one ended.
run_streams() {
  local name=$1
  shift
  rm -f "$WORK/stop"
  echo "$(threads)" >"$WORK/max_threads"
  sample_threads &
  local sampler=$! rc=0
  "$BENCH" --router "$ROUTER" --num-prompts 2000 --concurrency 2000 --request-rate inf --input-len 16 \
    --output-len 8 --json-out "$WORK/$name.json" "$@" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
  touch "$WORK/stop"
  wait "$sampler"
  [ "$rc" = 0 ] || fail "$name: pdserve-bench exit $rc"
  grep -q "run 2000/2000 requests" "$WORK/err.txt" || fail "$name: not every request ended"
  local max
  max=$(cat "$WORK/max_threads")
  echo "$name: at most $max threads in pdserve-local"
  [ "$max" -le "$MAX_THREADS" ] || fail "$name: $max threads (> $MAX_THREADS) at 2,000 streams"
}

run_streams all_succeed
grep -Eq "^Successful requests: +2000$" "$WORK/out.txt" || fail "not 2000 successful requests"
grep -Eq "^Total generated tokens: +16000$" "$WORK/out.txt" || fail "not 16000 tokens"
ok "2,000 concurrent streams all ended with 8 tokens, <= $MAX_THREADS threads"

run_streams deadlines --deadline-s 1
/usr/bin/python3 - "$WORK/deadlines.json" <<'PY' || fail "deadline run: unexpected outcome"
import json, sys
j = json.load(open(sys.argv[1]))
ok, failed, by_code = j["successful_requests"], j["failed_requests"], j["failed_by_code"]
assert ok + failed == 2000, (ok, failed)
assert set(by_code) <= {"DEADLINE_EXCEEDED"}, by_code
assert failed > 0, "no request missed its deadline: the test no longer tests deadlines at scale"
print(f"deadline run: {ok} OK, {failed} DEADLINE_EXCEEDED")
PY
ok "2,000 streams with a 1 s deadline all ended (OK or DEADLINE_EXCEEDED), <= $MAX_THREADS threads"

"$BENCH" --router "$ROUTER" --num-prompts 4 --concurrency 4 --input-len 16 --output-len 8 \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || fail "after the runs: pdserve-bench failed"
grep -Eq "^Successful requests: +4$" "$WORK/out.txt" || fail "the stack did not serve after the runs"
ok "the stack serves after both runs"
stop_local_stack
