#!/usr/bin/env bash
# A 128K prompt whose KV does not fit the decode worker's whole budget is
# refused up front and never half-prefilled. The shipped passkey-4l model
# (max_context 131,200) through separate decode (--kv-budget-mb 32), prefill
# and router processes:
#   - a 131,072-token prompt plus 129 new tokens is above max_context:
#     INVALID_ARGUMENT with the numbers;
#   - the same prompt with 16 new tokens needs ~128 MiB of KV: gRPC
#     RESOURCE_EXHAUSTED naming the bytes, the budget and --kv-budget-mb, and
#     over HTTP a 400 context_length_exceeded (no 429: retrying cannot help);
#   - the prefill worker never started a prefill (its metrics: no call, no
#     prompt token, no KV) and the decode worker reserved nothing;
#   - then a short prompt is served by the same servers (prefilled on the
#     prefill worker), and the decode worker's reservation is back to 0.
# Usage: kv_budget_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(cli.err)
MODEL="$SRC/models/passkey-4l"
CLI="$BUILD/clients/pdserve-cli"
start_split_stack "$MODEL" --kv-budget-mb 32
PM=(pdserve_prefill_prompt_tokens_total'{model="passkey-4l"}' pdserve_prefill_requests_total'{code="OK",model="passkey-4l"}')
DM=pdserve_decode_kv_bytes_used'{model="passkey-4l"}'

# The prompt: 131,072 bytes of text (the byte tokenizer: one token each),
# too long for a command line (128 KiB per argument): a flag file.
/usr/bin/python3 - "$WORK/prompt.flags" "$WORK/body.json" <<'PY'
import json, sys
text = ("The grass is green. The sky is blue. The sun is yellow. Here we go. " * 2000)[:131072]
assert len(text) == 131072 and text == text.strip()
open(sys.argv[1], "w").write(f"--prompt={text}\n")
json.dump({"prompt": text, "max_tokens": 16, "temperature": 0}, open(sys.argv[2], "w"))
PY

# cli_fails NEW_TOKENS: pdserve-cli on the long prompt must fail; its error in cli.err.
cli_fails() {
  if "$CLI" --router "$ROUTER" --flagfile "$WORK/prompt.flags" --max-new-tokens "$1" >/dev/null 2>"$WORK/cli.err"; then
    fail "131072 tokens + $1 new were served"
  fi
}
has() { grep -qF -- "$1" "$WORK/cli.err" || fail "no '$1' in: $(cat "$WORK/cli.err")"; }

cli_fails 129
has "INVALID_ARGUMENT: the prompt (131072 tokens) plus max_new_tokens (129) is 131201, above max_context 131200"
ok "131072 + 129 tokens is above max_context 131200: INVALID_ARGUMENT with the numbers"

cli_fails 16
has "error: RESOURCE_EXHAUSTED: "
has "(131072 prompt + 16 new tokens), more than this worker's whole KV budget of 33554432 bytes (--kv-budget-mb 32)"
needed=$(sed -n 's/.* needs \([0-9]*\) bytes of KV .*/\1/p' "$WORK/cli.err")
[ -n "$needed" ] && [ "$needed" -gt 33554432 ] || fail "no byte count above the budget: $(cat "$WORK/cli.err")"
ok "131072 + 16 tokens (KV $needed bytes) on a 32 MiB budget: RESOURCE_EXHAUSTED naming --kv-budget-mb"

code=$(curl -s -o "$WORK/http.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary @"$WORK/body.json" "http://$HTTP/v1/completions")
[ "$code" = 400 ] || fail "HTTP: $code $(head -c 600 "$WORK/http.json")"
/usr/bin/python3 - "$WORK/http.json" <<'PY' || fail "HTTP body: $(head -c 600 "$WORK/http.json")"
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["type"] == "invalid_request_error" and e["code"] == "context_length_exceeded", e
assert "--kv-budget-mb" in e["message"] and "33554432 bytes" in e["message"], e
PY
ok "over HTTP: 400 context_length_exceeded naming --kv-budget-mb"

# Never half-prefilled: no Prefill call reached the prefill worker, and the
# decode worker holds no reservation.
for s in "${PM[@]}" pdserve_prefill_kv_bytes'{model="passkey-4l"}'; do
  [ "$(metric "$PREFILL_METRICS" "$s")" = 0 ] || fail "prefill worker: $s = $(metric "$PREFILL_METRICS" "$s")"
done
calls=$(curl -sf "http://$PREFILL_METRICS/metrics" | awk '/^pdserve_prefill_requests_total/ { n += $2 } END { print n + 0 }')
[ "$calls" = 0 ] || fail "the prefill worker saw $calls Prefill call(s)"
[ "$(metric "$DECODE_METRICS" "$DM")" = 0 ] || fail "decode worker reserved $(metric "$DECODE_METRICS" "$DM") bytes"
ok "the prefill worker never started a prefill; the decode worker reserved nothing"

# The same servers still serve a short prompt, through the prefill worker.
"$CLI" --router "$ROUTER" --prompt "The passkey is 12345. Remember it. What is the passkey? The passkey is" \
  --max-new-tokens 8 --json >"$WORK/short.json" 2>"$WORK/cli.err" || fail "a short prompt failed"
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["finish_reason"] == "length" and len(d["token_ids"]) == 8, d' \
  "$WORK/short.json" || fail "short prompt: $(cat "$WORK/short.json")"
prompt_tokens=$(metric "$PREFILL_METRICS" "${PM[0]}")
[ "$prompt_tokens" -gt 0 ] && [ "$prompt_tokens" -lt 100 ] || fail "prefill worker's prompt tokens: $prompt_tokens"
wait_metric "$DECODE_METRICS" "$DM" 0
ok "a short prompt is served after ($prompt_tokens tokens prefilled); decode KV reserved back to 0"

stop_split_stack
echo "PASS"
