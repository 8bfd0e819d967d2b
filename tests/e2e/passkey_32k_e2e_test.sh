#!/usr/bin/env bash
# The shipped model (models/passkey-4l, trained on prompts of at most 512
# tokens) retrieves a passkey from 32,768-token prompts (64x its training
# length) through separate router, prefill and decode processes: one greedy
# trial at each of the start, middle and end positions, every one correct
# (pdserve-passkey --require-target --target 1.0). The trials are seeded and
# greedy, so the result is a fixed property of the model. A 32K prefill takes
# a few seconds in Release; the ASan tree does not run this (label e2e,
# scripts/sanitize.sh runs unit tests).
# Usage: passkey_32k_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(passkey.txt)
MODEL="$SRC/models/passkey-4l"
[ -s "$MODEL/model.safetensors" ] || fail "no shipped model at $MODEL"
start_split_stack "$MODEL"

seed=0
for pos in start middle end; do
  seed=$((seed + 1))  # another passkey at each position
  rc=0
  "$BUILD/clients/pdserve-passkey" --router "$ROUTER" --context-lengths 32768 --n-trials 1 --position "$pos" \
    --seed "$seed" --require-target --target 1.0 --json-out "$WORK/passkey_$pos.json" >"$WORK/passkey.txt" 2>&1 || rc=$?
  cat "$WORK/passkey.txt"
  [ "$rc" = 0 ] || fail "pdserve-passkey at 32768 tokens, position $pos: exit $rc"
  grep -q "^PASS: passkey retrieval at 32768 tokens (position $pos): 1/1 correct" "$WORK/passkey.txt" ||
    fail "no PASS line for position $pos"
  /usr/bin/python3 - "$WORK/passkey_$pos.json" <<'PY' || fail "position $pos: the JSON report disagrees"
import json, sys
d = json.load(open(sys.argv[1]))
[cell] = d["lengths"]
assert cell["context_length"] == 32768 and cell["failed"] == 0 and cell["correct"] == 1, cell
[t] = d["trials"]
assert t["correct"] and t["extracted"] == t["passkey"] and t["usage_prompt_tokens"] > 32700, {k: t[k] for k in t if k != "prompt"}
print(f'  passkey {t["passkey"]} in {t["usage_prompt_tokens"]} tokens -> "{t["answer_text"]}"')
PY
  ok "32768 tokens, position $pos: passkey retrieved"
done

stop_split_stack
echo "PASS"
