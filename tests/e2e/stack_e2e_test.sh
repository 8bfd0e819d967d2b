#!/usr/bin/env bash
# pdserve-local end to end, from outside: an outside gRPC client (Python
# grpcio with the proto file) and pdserve-cli get the same tokens as
# pdserve-generate, and the stack stops cleanly on SIGTERM.
# Usage: stack_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"

"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/small.json" --seed 3 --out "$WORK/m" >/dev/null 2>&1
start_local_stack "$WORK/m" --prefill-chunk 5  # sets ROUTER (a port the kernel picked)

check() {  # check NAME EXPECTED GOT
  [ "$2" = "$3" ] || fail "$1: expected $2, got $3"
  echo "ok: $1"
}
PROMPT=72,101,108,108,111,44,32,119,111,114,108,100,33
for args in "--max-new-tokens 20" "--max-new-tokens 20 --temperature 0.9 --top-p 0.9 --top-k 50 --seed 11"; do
  # shellcheck disable=SC2086
  want=$("$BUILD/clients/pdserve-generate" --model "$WORK/m" --prompt-ids $PROMPT --prefill-chunk 5 $args 2>/dev/null)
  # shellcheck disable=SC2086
  py=$(/usr/bin/python3 "$SRC/tests/e2e/python_client.py" --router "$ROUTER" --prompt-ids $PROMPT $args 2>/dev/null)
  check "python grpcio client ($args)" "$want" "$py"
  # shellcheck disable=SC2086
  cli=$("$BUILD/clients/pdserve-cli" --router "$ROUTER" --prompt-ids $PROMPT $args --json 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; print(json.dumps({"token_ids": json.load(sys.stdin)["token_ids"]}, separators=(",", ":")))')
  check "pdserve-cli ($args)" "$want" "$cli"
done

# Text in, text out: the byte tokenizer's ids for "Hello" are its bytes.
want=$("$BUILD/clients/pdserve-generate" --model "$WORK/m" --prompt-ids 72,101,108,108,111 --max-new-tokens 8 2>/dev/null)
py=$(/usr/bin/python3 "$SRC/tests/e2e/python_client.py" --router "$ROUTER" --text Hello --max-new-tokens 8 2>/dev/null)
check "text prompt" "$want" "$py"

# Errors reach an outside client as status codes.
err=$(/usr/bin/python3 "$SRC/tests/e2e/python_client.py" --router "$ROUTER" --prompt-ids 1,99999 \
      --max-new-tokens 4 2>&1 >/dev/null || true)
case "$err" in *INVALID_ARGUMENT*) echo "ok: bad id is INVALID_ARGUMENT" ;; *) fail "bad id gave: $err" ;; esac

stop_local_stack
echo "PASS"
