#!/usr/bin/env bash
# bf16 and int8 weights served through separate pdserve-decode,
# pdserve-prefill and pdserve-router processes (every one on a port the
# kernel picked): for each dtype, a greedy and a sampled request through the
# router give the same tokens as pdserve-generate with the same weights in
# one process, and bf16 KV (--kv-dtype bf16) is handed off the same way.
# Usage: weights_dtype_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(decode.log prefill.log router.log)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; rm -rf "$WORK"' EXIT

"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/small.json" --seed 5 --out "$WORK/m" >/dev/null 2>&1

# serve ARGS...: the three processes with the engine ARGS on both workers;
# sets ROUTER.
serve() {
  OMP_WAIT_POLICY=PASSIVE "$BUILD/decode_service/pdserve-decode" --model "$WORK/m" --listen 127.0.0.1:0 \
    --metrics-port -1 --threads 1 "$@" >"$WORK/decode.log" 2>&1 &
  PIDS+=($!)
  local dpid=$!
  OMP_WAIT_POLICY=PASSIVE "$BUILD/prefill_service/pdserve-prefill" --model "$WORK/m" --listen 127.0.0.1:0 \
    --metrics-port -1 --threads 1 "$@" >"$WORK/prefill.log" 2>&1 &
  PIDS+=($!)
  local ppid=$!
  local dport pport rport
  dport=$(log_port decode.log "serving on port " "$dpid")
  pport=$(log_port prefill.log "serving on port " "$ppid")
  [ -n "$dport" ] && [ -n "$pport" ] || fail "a worker did not start ($*)"
  "$BUILD/router/pdserve-router" --model "$WORK/m" --listen 127.0.0.1:0 --prefill "127.0.0.1:$pport" \
    --decode "127.0.0.1:$dport" --metrics-port -1 --http-listen= >"$WORK/router.log" 2>&1 &
  PIDS+=($!)
  rport=$(log_port router.log "serving on port " "$!")
  [ -n "$rport" ] || fail "the router did not start"
  ROUTER=127.0.0.1:$rport
}

stop_all() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}

PROMPT=72,101,108,108,111,44,32,119,111,114,108,100,33,32,84,104,101
for engine in "--weights-dtype bf16" "--weights-dtype int8" "--weights-dtype bf16 --kv-dtype bf16"; do
  # shellcheck disable=SC2086
  serve $engine
  for args in "--max-new-tokens 24" "--max-new-tokens 24 --temperature 0.8 --top-p 0.9 --seed 7"; do
    # shellcheck disable=SC2086
    want=$("$BUILD/clients/pdserve-generate" --model "$WORK/m" --threads 1 $engine --prompt-ids $PROMPT $args \
           2>"$WORK/generate.log") || fail "pdserve-generate $engine $args: $(tail -n 5 "$WORK/generate.log")"
    # shellcheck disable=SC2086
    got=$("$BUILD/clients/pdserve-cli" --router "$ROUTER" --prompt-ids $PROMPT $args --json 2>"$WORK/cli.log" |
          /usr/bin/python3 -c 'import json,sys; print(json.dumps({"token_ids": json.load(sys.stdin)["token_ids"]}, separators=(",", ":")))') ||
      fail "pdserve-cli $engine $args: $(tail -n 5 "$WORK/cli.log")"
    [ "$want" = "$got" ] || fail "$engine $args: served $got, one process $want"
    ok "$engine, $args: the served tokens equal one process's"
  done
  stop_all
done
