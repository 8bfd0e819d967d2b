#!/usr/bin/env bash
# --log-format json end to end: a router, a prefill and a decode worker
# (the decode worker through PDSERVE_LOG_FORMAT) and then pdserve-local log
# JSON only. Checked with jq: every stderr line is an object with ts (RFC
# 3339, ms, UTC), level, component and msg; the router's request line
# carries the request id the client saw (the response's, and the
# x-request-id header and trailer), the traceparent the client sent, the token counts,
# timings, workers, attempts, status and finish reason; each worker's
# request line carries the same request id and traceparent, and the
# worker-level id the router logged. A router-assigned id and a refused
# request are logged too; an invalid traceparent is not passed on;
# --log-requests=false silences every request line; an invalid --log-format
# exits 2 and a fatal error after the flags is a JSON line.
# Usage: json_logs_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(router.log prefill.log decode.log local.log client.err)
command -v jq >/dev/null || { echo "SKIP: jq is not installed (scripts/setup.sh)"; exit 77; }
PY=/usr/bin/python3
CLIENT="$SRC/tests/e2e/python_client.py"
TP=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
PIDS=()
cleanup_servers() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }
trap 'cleanup_servers; _e2e_cleanup' EXIT

# An invalid format is refused before anything starts.
rc=0
"$BUILD/router/pdserve-router" --log-format xml --model /nonexistent --prefill x:1 --decode x:2 \
  2>"$WORK/bad.err" || rc=$?
[ "$rc" = 2 ] || fail "--log-format xml: exit $rc, not 2"
grep -q "log-format must be text or json" "$WORK/bad.err" || fail "--log-format xml: $(cat "$WORK/bad.err")"
ok "--log-format xml exits 2: $(cat "$WORK/bad.err")"
# After the flags, even a fatal error is a JSON line.
rc=0
"$BUILD/router/pdserve-router" --log-format json --model /nonexistent-model --prefill x:1 --decode x:2 \
  2>"$WORK/die.err" || rc=$?
[ "$rc" = 1 ] && jq -e '.level == "error" and .component == "router" and (.msg | contains("/nonexistent-model"))' \
  "$WORK/die.err" >/dev/null || fail "a fatal error under json (exit $rc): $(cat "$WORK/die.err")"
ok "a fatal error is a JSON line: $(cat "$WORK/die.err")"

"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/tiny.json" --seed 1 --out "$WORK/m" >/dev/null 2>&1
# Every server listens on a port the kernel picks (port 0).
# serving_port LOG: the port of its "serving on port N" line (a JSON msg).
serving_port() {
  local port
  port=$(log_port "$1" "serving on port ")
  [ -n "$port" ] || fail "$1: not serving"
  echo "$port"
}
OMP_WAIT_POLICY=PASSIVE "$BUILD/prefill_service/pdserve-prefill" --model "$WORK/m" --listen 127.0.0.1:0 \
  --metrics-port -1 --log-format json 2>"$WORK/prefill.log" &
PIDS+=($!)
OMP_WAIT_POLICY=PASSIVE PDSERVE_LOG_FORMAT=json "$BUILD/decode_service/pdserve-decode" --model "$WORK/m" \
  --listen 127.0.0.1:0 --metrics-port -1 2>"$WORK/decode.log" &
PIDS+=($!)
P=$(serving_port prefill.log)
D=$(serving_port decode.log)
"$BUILD/router/pdserve-router" --model "$WORK/m" --listen 127.0.0.1:0 --prefill "127.0.0.1:$P" \
  --decode "127.0.0.1:$D" --metrics-port -1 --http-listen= --log-format json 2>"$WORK/router.log" &
PIDS+=($!)
R=$(serving_port router.log)

# generate ARGS...: the client's stderr summary line ("finish_reason=...
# request_id=... x_request_id=... x_request_id_trailer=... usage=...") in
# $WORK/client.err; field NAME reads one value of it.
generate() { "$PY" "$CLIENT" --router "127.0.0.1:$R" --prompt-ids 1,2,3,4,5,6 --max-new-tokens 5 "$@" \
  >/dev/null 2>"$WORK/client.err"; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$WORK/client.err"; }

generate --request-id cmpl-e2e42 --traceparent "$TP" || fail "generate with a request id failed"
[ "$(field request_id)" = cmpl-e2e42 ] || fail "response request_id: $(cat "$WORK/client.err")"
[ "$(field x_request_id)" = cmpl-e2e42 ] && [ "$(field x_request_id_trailer)" = cmpl-e2e42 ] ||
  fail "x-request-id metadata: $(cat "$WORK/client.err")"
generate || fail "generate without a request id failed"
ASSIGNED=$(field request_id)
[ -n "$ASSIGNED" ] && [ "$(field x_request_id)" = "$ASSIGNED" ] && [ "$(field x_request_id_trailer)" = "$ASSIGNED" ] ||
  fail "assigned id: $(cat "$WORK/client.err")"
generate --request-id cmpl-badtp --traceparent 00-zz-nothex-01 || fail "generate with a bad traceparent failed"
"$PY" "$CLIENT" --router "127.0.0.1:$R" --prompt-ids 1,99999 --request-id cmpl-refused 2>/dev/null >/dev/null &&
  fail "an out-of-vocabulary prompt was served"
ok "the client saw request ids cmpl-e2e42 and $ASSIGNED (response, x-request-id header and trailer)"

for p in "${PIDS[@]}"; do kill -TERM "$p"; done
for p in "${PIDS[@]}"; do wait "$p" || fail "a server exited $? on SIGTERM"; done
PIDS=()

# all_json LOG COMPONENT: every line is one object with the four keys.
all_json() {
  [ -s "$WORK/$1" ] || fail "$1 is empty"
  jq -R -e --arg c "$2" 'fromjson | type == "object" and .component == $c and (.msg | type == "string")
      and (.level | IN("debug", "info", "warning", "error"))
      and (.ts | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$"))' \
    "$WORK/$1" >"$WORK/checks" 2>&1 || fail "$1: a line is not a JSON log object: $(cat "$WORK/checks")"
  grep -qv true "$WORK/checks" && fail "$1: a line lacks ts/level/component/msg: $(grep -v true "$WORK/checks")"
  ok "$1: all $(wc -l <"$WORK/$1") lines are JSON objects of component $2"
}
# request_line LOG ID: the request line of ID, compact.
request_line() { jq -c --arg id "$2" 'select(.msg == "request" and .request_id == $id)' "$WORK/$1"; }
# expect LOG ID JQ_CONDITION
expect() {
  local line
  line=$(request_line "$1" "$2")
  [ "$(wc -l <<<"$line")" = 1 ] && [ -n "$line" ] || fail "$1: not one request line for $2: '$line'"
  jq -e "$3" <<<"$line" >/dev/null || fail "$1: request line of $2 fails $3: $line"
}
all_json router.log router
all_json prefill.log prefill
all_json decode.log decode

expect router.log cmpl-e2e42 '.status == "OK" and .traceparent == "'"$TP"'" and .prompt_tokens == 6
  and .generated_tokens == 5 and .ttft_ms > 0 and .tpot_ms >= 0 and .e2e_ms >= .ttft_ms and .attempts == 1
  and .finish_reason == "length" and .prefill_worker == "127.0.0.1:'"$P"'" and .decode_worker == "127.0.0.1:'"$D"'"
  and (.internal_id | startswith("r-")) and (.worker_request_id | startswith("r-")) and .kv_handoff_bytes > 0'
WID=$(request_line router.log cmpl-e2e42 | jq -r .worker_request_id)
for w in prefill decode; do
  expect $w.log cmpl-e2e42 '.status == "OK" and .traceparent == "'"$TP"'" and .worker_request_id == "'"$WID"'"
    and .prompt_tokens == 6'
done
expect decode.log cmpl-e2e42 '.generated_tokens == 5 and .finish_reason == "length"'
ok "router, prefill and decode request lines carry cmpl-e2e42, traceparent $TP and worker id $WID"

expect router.log "$ASSIGNED" '.status == "OK" and .internal_id == "'"$ASSIGNED"'" and (has("traceparent") | not)'
expect prefill.log "$ASSIGNED" '.status == "OK"'
ok "a router-assigned id ($ASSIGNED) is logged by the router and the workers"
for log in router.log prefill.log decode.log; do
  expect $log cmpl-badtp '.status == "OK" and (has("traceparent") | not)'
done
ok "an invalid traceparent is neither logged nor passed on"
expect router.log cmpl-refused '.status == "INVALID_ARGUMENT" and .generated_tokens == 0 and (.error | length > 0)'
ok "a refused request has its request line"

# pdserve-local: one process, one component.
start_local_stack "$WORK/m" --metrics-port -1 --log-format json
generate_local() { "$PY" "$CLIENT" --router "$ROUTER" --prompt-ids 1,2,3 --max-new-tokens 3 "$@" \
  >/dev/null 2>"$WORK/client.err"; }
generate_local --request-id cmpl-local7 --traceparent "$TP" || fail "pdserve-local: generate failed"
stop_local_stack
all_json local.log local
[ "$(request_line local.log cmpl-local7 | jq -s 'map(select(.traceparent == "'"$TP"'")) | length')" = 3 ] ||
  fail "local.log: not 3 request lines (router, prefill, decode) with the traceparent: $(request_line local.log cmpl-local7)"
ok "pdserve-local: router, prefill and decode request lines of cmpl-local7"

# --log-requests=false: no request line from any of the three.
start_local_stack "$WORK/m" --metrics-port -1 --log-format json --log-requests=false
generate_local --request-id cmpl-quiet || fail "pdserve-local --log-requests=false: generate failed"
stop_local_stack
all_json local.log local
[ -z "$(jq -c 'select(.msg == "request")' "$WORK/local.log")" ] ||
  fail "--log-requests=false still logs: $(jq -c 'select(.msg == "request")' "$WORK/local.log")"
ok "--log-requests=false: no request lines"
echo "PASS"
