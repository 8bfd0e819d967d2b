# Shared by the shell e2e tests: a work directory, pdserve-local started and
# stopped the way a user would, and failure output with the logs.
# Source it after `set -euo pipefail`, then call e2e_init "$@".
#   e2e_init BUILD_DIR SOURCE_DIR   sets BUILD, SRC, WORK; cleans up on exit
#   E2E_LOGS=(a.txt b.log)          files under $WORK that fail() prints
#   start_local_stack MODEL [ARGS...]  pdserve-local, its router and HTTP API on
#                                   ports the kernel picks (port 0, read back
#                                   from its log: no two tests can collide);
#                                   sets STACK, ROUTER (127.0.0.1:N)
#   stop_local_stack                SIGTERM; fails unless it exits 0 in 10 s
#   log_port LOG PATTERN [PID]      waits up to 60 s (or until PID exits) for
#                                   PATTERN followed by a number N in $WORK/LOG
#                                   ("http on port ") and prints N (empty if it
#                                   never comes)
#   start_split_stack MODEL [DECODE_ARGS...]
#                                   separate pdserve-decode (DECODE_ARGS added),
#                                   pdserve-prefill and pdserve-router processes,
#                                   every port 0 (logs decode.log, prefill.log,
#                                   router.log); sets ROUTER, HTTP (the router's
#                                   OpenAI API), DECODE_METRICS, PREFILL_METRICS
#                                   (127.0.0.1:N each)
#   stop_split_stack                SIGTERM to the three; fails unless each exits 0
#                                   within 10 s
#   metric ADDR SERIES              the value of SERIES (its name and labels, as
#                                   /metrics prints them) at ADDR, empty if absent
#   wait_metric ADDR SERIES VALUE   waits up to 60 s for SERIES to read VALUE;
#                                   fails naming what it read last
#   NO_LISTENER                     an address nothing listens on: 127.0.0.1:1
#                                   (tcpmux, privileged and unused; a port of a
#                                   server the test stopped could be reused by
#                                   anyone in the meantime)

e2e_init() {
  BUILD=$1
  SRC=$2
  WORK=$(mktemp -d)
  STACK=
  SPLIT=()
  E2E_LOGS=(local.log)
  trap _e2e_cleanup EXIT
}

_e2e_cleanup() {
  [ -n "$STACK" ] && kill -KILL "$STACK" 2>/dev/null || true
  for p in "${SPLIT[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}

fail() {
  echo "FAIL: $*" >&2
  for f in "${E2E_LOGS[@]}"; do
    [ -f "$WORK/$f" ] && { echo "--- $f" >&2; tail -n 60 "$WORK/$f" >&2; }
  done
  exit 1
}

ok() { echo "ok: $*"; }

NO_LISTENER=127.0.0.1:1

log_port() {
  local log=$WORK/$1 pattern=$2 pid=${3:-}
  for _ in $(seq 1 600); do
    grep -q "$pattern[0-9]" "$log" 2>/dev/null && break
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  sed -n "s/.*$pattern\([0-9][0-9]*\).*/\1/p" "$log" | head -1
}

start_local_stack() {
  local model=$1
  shift
  # --http-listen first: a caller's own --http-listen (later) wins.
  OMP_WAIT_POLICY=PASSIVE "$BUILD/local/pdserve-local" --model "$model" --port 0 --http-listen 127.0.0.1:0 "$@" \
    >"$WORK/local.log" 2>&1 &
  STACK=$!
  local port
  port=$(log_port local.log "router on 127.0.0.1:" "$STACK")
  [ -n "$port" ] || fail "pdserve-local did not start (no 'router on 127.0.0.1:N' line)"
  ROUTER="127.0.0.1:$port"
}

stop_local_stack() {
  local rc=0
  kill -TERM "$STACK"
  for _ in $(seq 1 100); do kill -0 "$STACK" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$STACK" 2>/dev/null && fail "pdserve-local still running 10 s after SIGTERM"
  wait "$STACK" || rc=$?
  STACK=
  [ "$rc" = 0 ] || fail "pdserve-local exited $rc after SIGTERM"
  ok "pdserve-local stopped on SIGTERM with exit 0"
}

# _split_port LOG PATTERN WHAT: log_port for the last server started, or fail.
_split_port() {
  local port
  port=$(log_port "$1" "$2" "${SPLIT[-1]}")
  [ -n "$port" ] || fail "$3 did not start (no '$2N' line in $1)"
  echo "$port"
}

start_split_stack() {
  local model=$1 d p
  shift
  E2E_LOGS+=(decode.log prefill.log router.log)
  OMP_WAIT_POLICY=PASSIVE "$BUILD/decode_service/pdserve-decode" --model "$model" --listen 127.0.0.1:0 \
    --metrics-host 127.0.0.1 --metrics-port 0 --threads 1 "$@" >"$WORK/decode.log" 2>&1 &
  SPLIT+=($!)
  d=$(_split_port decode.log "serving on port " pdserve-decode)
  DECODE_METRICS=127.0.0.1:$(_split_port decode.log "metrics on port " pdserve-decode)
  OMP_WAIT_POLICY=PASSIVE "$BUILD/prefill_service/pdserve-prefill" --model "$model" --listen 127.0.0.1:0 \
    --metrics-host 127.0.0.1 --metrics-port 0 --threads 2 >"$WORK/prefill.log" 2>&1 &
  SPLIT+=($!)
  p=$(_split_port prefill.log "serving on port " pdserve-prefill)
  PREFILL_METRICS=127.0.0.1:$(_split_port prefill.log "metrics on port " pdserve-prefill)
  "$BUILD/router/pdserve-router" --model "$model" --listen 127.0.0.1:0 --prefill "127.0.0.1:$p" \
    --decode "127.0.0.1:$d" --metrics-port -1 --http-listen 127.0.0.1:0 >"$WORK/router.log" 2>&1 &
  SPLIT+=($!)
  ROUTER=127.0.0.1:$(_split_port router.log "serving on port " pdserve-router)
  HTTP=127.0.0.1:$(_split_port router.log "http on port " pdserve-router)
}

stop_split_stack() {
  local pid rc
  for pid in "${SPLIT[@]}"; do kill -TERM "$pid"; done
  for pid in "${SPLIT[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && fail "server $pid still running 10 s after SIGTERM"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" = 0 ] || fail "server $pid exited $rc after SIGTERM"
  done
  SPLIT=()
  ok "decode, prefill and router stopped on SIGTERM with exit 0"
}

metric() {
  # awk reads to the end: curl must not die of SIGPIPE (pipefail).
  { curl -sf "http://$1/metrics" || true; } | awk -v s="$2" 'index($0, s " ") == 1 && v == "" { v = $2 } END { print v }'
}

wait_metric() {
  local got=
  for _ in $(seq 1 600); do
    got=$(metric "$1" "$2")
    [ "$got" = "$3" ] && return 0
    sleep 0.1
  done
  fail "$2 at $1 reads '$got', not $3"
}
