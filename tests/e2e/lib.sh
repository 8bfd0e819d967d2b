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
#   NO_LISTENER                     an address nothing listens on: 127.0.0.1:1
#                                   (tcpmux, privileged and unused; a port of a
#                                   server the test stopped could be reused by
#                                   anyone in the meantime)

e2e_init() {
  BUILD=$1
  SRC=$2
  WORK=$(mktemp -d)
  STACK=
  E2E_LOGS=(local.log)
  trap _e2e_cleanup EXIT
}

_e2e_cleanup() {
  [ -n "$STACK" ] && kill -KILL "$STACK" 2>/dev/null || true
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
