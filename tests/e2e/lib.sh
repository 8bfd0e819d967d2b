# Shared by the shell e2e tests: a work directory, pdserve-local started and
# stopped the way a user would, and failure output with the logs.
# Source it after `set -euo pipefail`, then call e2e_init "$@".
#   e2e_init BUILD_DIR SOURCE_DIR   sets BUILD, SRC, WORK; cleans up on exit
#   E2E_LOGS=(a.txt b.log)          files under $WORK that fail() prints
#   start_local_stack MODEL PORT [ARGS...]   pdserve-local (its HTTP API on a port
#                                   it picks, not 8000); sets STACK, ROUTER
#   stop_local_stack                SIGTERM; fails unless it exits 0 in 10 s

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

start_local_stack() {
  local model=$1 port=$2
  shift 2
  OMP_WAIT_POLICY=PASSIVE "$BUILD/local/pdserve-local" --model "$model" --port "$port" --http-listen 127.0.0.1:0 "$@" \
    >"$WORK/local.log" 2>&1 &
  STACK=$!
  for _ in $(seq 1 300); do grep -q "router on" "$WORK/local.log" && break; sleep 0.1; done
  grep -q "router on" "$WORK/local.log" || fail "pdserve-local did not start"
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
