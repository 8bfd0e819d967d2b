#!/usr/bin/env bash
# The OpenAI-compatible HTTP API of pdserve-local (router/openai_http.h), with
# curl as the client: completions (text and token ids), chat through the
# shipped model's chat template, SSE streaming (curl -N) ending in [DONE],
# include_usage, /v1/models, /health, /metrics, the 400/404/401 errors, a
# client that disconnects mid-stream or before anything was written (the
# decode worker's KV is back to 0 within 1 s), and HTTPS with an API key (a self-signed certificate made by
# openssl here).
# Usage: openai_http_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
MODEL="$SRC/models/passkey-4l"  # byte tokenizer, has a chat_template

# start_http_stack [ARGS...]: pdserve-local; sets HTTP and METRICS (ports).
start_http_stack() {
  start_local_stack "$MODEL" --metrics-port 0 "$@"  # every port the kernel's pick (lib.sh)
  HTTP=$(log_port local.log "http on port " "$STACK")
  METRICS=$(log_port local.log "metrics on port " "$STACK")
  [ -n "$HTTP" ] || fail "no 'http on port' line"
  [ -n "$METRICS" ] || fail "no 'metrics on port' line"
}

# call METHOD PATH [BODY] [CURL ARGS...]: the status code; body in $WORK/body,
# headers in $WORK/hdr.
call() {
  local method=$1 path=$2 body=${3:-}
  shift 3 || shift $#
  local url=${BASE:-http://127.0.0.1:$HTTP}$path
  if [ "$method" = POST ]; then
    curl -s -o "$WORK/body" -D "$WORK/hdr" -w '%{http_code}' -H 'Content-Type: application/json' -d "$body" "$@" "$url"
  else
    curl -s -o "$WORK/body" -D "$WORK/hdr" -w '%{http_code}' "$@" "$url"
  fi
}

# expect NAME WANT_STATUS GOT_STATUS PYTHON_CONDITION: the condition is on
# `d`, the JSON body, and `first`, the first completion's text.
expect() {
  [ "$2" = "$3" ] || fail "$1: HTTP $3 (want $2): $(head -c 400 "$WORK/body")"
  /usr/bin/python3 - "$WORK/body" "$4" <<'PY' || fail "$1: $(head -c 600 "$WORK/body")"
import json, sys
d = json.load(open(sys.argv[1]))
try:
    first = json.load(open(sys.argv[1] + ".first"))["choices"][0]["text"]
except OSError:
    first = None
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)
PY
  ok "$1"
}

json_field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))$1)" "$WORK/body"; }

# The text of an SSE stream's chunks, after checking its framing.
sse_text() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
raw = open(sys.argv[1]).read()
events = raw.split("\n\n")
assert events[-1] == "" and events[-2] == "data: [DONE]", raw[-200:]
chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
assert all(e.startswith("data: ") for e in events[:-1])
texts = []
for c in chunks:
    assert c["object"] == sys.argv[2], c
    for ch in c["choices"]:
        texts.append(ch["text"] if "text" in ch else ch["delta"].get("content", ""))
print(json.dumps({"text": "".join(texts), "chunks": chunks}))
PY
}

# A series' value (every series carries a model label: {model="..."}).
metric() { curl -s "http://127.0.0.1:$METRICS/metrics" | sed -n "s/^$1{model=\"[^\"]*\"} //p"; }

start_http_stack
# Completions: text and token ids give the same greedy text.
GREEDY='"max_tokens": 8, "temperature": 0'
st=$(call POST /v1/completions "{\"prompt\": \"Hello\", $GREEDY}")
expect "completion (text prompt)" 200 "$st" \
  'd["object"] == "text_completion" and d["id"].startswith("cmpl-") and d["model"] == "passkey-4l"
   and d["choices"][0]["finish_reason"] == "length" and d["usage"] == {"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13}'
cp "$WORK/body" "$WORK/body.first"
id=$(json_field '["id"]')
grep -qi "^X-Request-Id: $id" "$WORK/hdr" || fail "X-Request-Id is not the response id $id"
grep -q "($id)" "$WORK/local.log" || fail "the router's request line does not carry $id"
ok "X-Request-Id = id = the router's request id"
st=$(call POST /v1/completions "{\"prompt\": [72, 101, 108, 108, 111], $GREEDY}")
expect "completion (token ids) = text prompt's" 200 "$st" 'd["choices"][0]["text"] == first and len(first) > 0'

# Streaming: the chunks add up to the same text; [DONE] last.
curl -sN -D "$WORK/shdr" -H 'Content-Type: application/json' -o "$WORK/sse" \
  -d "{\"prompt\": \"Hello\", $GREEDY, \"stream\": true}" "http://127.0.0.1:$HTTP/v1/completions"
grep -qi '^Content-Type: text/event-stream' "$WORK/shdr" || fail "stream Content-Type: $(cat "$WORK/shdr")"
sse_text "$WORK/sse" text_completion >"$WORK/body" || fail "bad SSE stream: $(tail -c 400 "$WORK/sse")"
expect "stream: chunks, then data: [DONE]; same text" 200 200 \
  'd["text"] == first and d["chunks"][-1]["choices"][0]["finish_reason"] == "length"'
curl -sN -H 'Content-Type: application/json' -o "$WORK/sse" "http://127.0.0.1:$HTTP/v1/completions" \
  -d "{\"prompt\": \"Hello\", $GREEDY, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
sse_text "$WORK/sse" text_completion >"$WORK/body" || fail "bad SSE stream: $(tail -c 400 "$WORK/sse")"
expect "stream with include_usage: last chunk has usage, no choices" 200 200 \
  'd["chunks"][-1]["choices"] == [] and d["chunks"][-1]["usage"]["total_tokens"] == 13 and d["chunks"][0]["usage"] is None'

# Chat: the template renders "User: hi\nAssistant: " (20 bytes).
st=$(call POST /v1/chat/completions '{"model": "passkey-4l", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}')
expect "chat completion" 200 "$st" \
  'd["object"] == "chat.completion" and d["id"].startswith("chatcmpl-") and d["choices"][0]["message"]["role"] == "assistant"
   and d["usage"]["prompt_tokens"] == 20 and d["usage"]["completion_tokens"] == 4'
curl -sN -H 'Content-Type: application/json' -o "$WORK/sse" "http://127.0.0.1:$HTTP/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true}'
sse_text "$WORK/sse" chat.completion.chunk >"$WORK/body" || fail "bad chat SSE stream: $(tail -c 400 "$WORK/sse")"
expect "chat stream" 200 200 'd["chunks"][0]["choices"][0]["delta"]["role"] == "assistant"'

# Errors: OpenAI-shaped, the field named.
st=$(call POST /v1/completions '{"prompt": "Hello", "max_tokens": 0}')
expect "400 names max_tokens" 400 "$st" 'd["error"]["param"] == "max_tokens" and d["error"]["type"] == "invalid_request_error"'
st=$(call POST /v1/completions '{"prompt": "Hello", "n": 2}')
expect "400 names n" 400 "$st" 'd["error"]["param"] == "n"'
st=$(call POST /v1/completions '{"prompt": [72, 300], "max_tokens": 2}')
expect "400 from the router (id >= vocab) names prompt" 400 "$st" 'd["error"]["param"] == "prompt" and "vocab" in d["error"]["message"]'
st=$(call POST /v1/chat/completions '{"messages": [{"role": "robot", "content": "x"}]}')
expect "400 names messages[0].role" 400 "$st" 'd["error"]["param"] == "messages[0].role"'
st=$(call POST /v1/completions '{"prompt": "Hello", "model": "gpt-4"}')
expect "404 unknown model" 404 "$st" 'd["error"]["code"] == "model_not_found" and d["error"]["param"] == "model"'

st=$(call GET /v1/models)
expect "/v1/models" 200 "$st" \
  'd["object"] == "list" and d["data"][0]["id"] == "passkey-4l" and d["data"][0]["owned_by"] == "pdserve" and d["data"][0]["max_model_len"] == 131200'
st=$(call GET /health)
expect "/health" 200 "$st" 'd["status"] == "ok"'
st=$(call GET /metrics)
[ "$st" = 200 ] && grep -q '^pdserve_decode_kv_bytes_used{' "$WORK/body" || fail "/metrics: $st"
# One path: the HTTP requests went through the router's Generate.
oks=$(sed -n 's/^pdserve_router_requests_total{code="OK",model="[^"]*"} //p' "$WORK/body")
[ "${oks:-0}" -ge 6 ] || fail "router counted ${oks:-0} OK requests, want >= 6"
ok "/metrics; the router counted the HTTP requests ($oks OK)"

# leave_and_wait_kv_free PID: kills the client PID, then waits up to 1 s for
# the decode worker's KV to be free; sets elapsed_ms.
leave_and_wait_kv_free() {
  kill -KILL "$1"
  wait "$1" 2>/dev/null || true
  local start used
  start=$(date +%s%N)
  while :; do
    used=$(metric pdserve_decode_kv_bytes_used)
    elapsed_ms=$((($(date +%s%N) - start) / 1000000))
    [ "$used" = 0 ] && break
    [ "$elapsed_ms" -lt 1000 ] || fail "decode KV still $used bytes ${elapsed_ms} ms after the client left"
    sleep 0.02
  done
}

# A client that goes away mid-stream: the call is cancelled down to the
# decode worker, whose KV is free again within 1 s.
curl -sN -H 'Content-Type: application/json' -o "$WORK/long" "http://127.0.0.1:$HTTP/v1/completions" \
  -d '{"prompt": "Hello", "max_tokens": 4000, "ignore_eos": true, "stream": true}' &
CURL=$!
chunks() { cat "$WORK/long" 2>/dev/null | grep -c '^data: ' || true; }
for _ in $(seq 1 200); do [ "$(chunks)" -ge 3 ] && break; sleep 0.05; done
[ "$(chunks)" -ge 3 ] || fail "the long stream sent $(chunks) chunks"
used=$(metric pdserve_decode_kv_bytes_used)
[ "${used:-0}" -gt 0 ] || fail "decode KV in use is ${used:-?} during the stream"
leave_and_wait_kv_free "$CURL"
grep -q "CANCELLED" "$WORK/local.log" || fail "the router did not log the request as CANCELLED"
ok "client gone mid-stream: decode KV back to 0 in ${elapsed_ms} ms"

# A client that goes away before anything is written (no streaming: the
# handler waits for the whole completion): the watcher sees the closed
# socket and cancels the call. Without it the request would run its 4,000
# tokens and be logged OK.
cancelled_before=$(grep -c "CANCELLED" "$WORK/local.log" || true)
curl -s -H 'Content-Type: application/json' -o /dev/null "http://127.0.0.1:$HTTP/v1/completions" \
  -d '{"prompt": "Hello", "max_tokens": 4000, "ignore_eos": true}' &
CURL=$!
for _ in $(seq 1 200); do
  used=$(metric pdserve_decode_kv_bytes_used)
  [ "${used:-0}" -gt 0 ] && break
  sleep 0.02
done
used=$(metric pdserve_decode_kv_bytes_used)
[ "${used:-0}" -gt 0 ] || fail "decode KV in use is ${used:-?} during the non-streaming request"
leave_and_wait_kv_free "$CURL"
for _ in $(seq 1 50); do [ "$(grep -c "CANCELLED" "$WORK/local.log" || true)" -gt "$cancelled_before" ] && break; sleep 0.1; done
[ "$(grep -c "CANCELLED" "$WORK/local.log" || true)" -gt "$cancelled_before" ] ||
  fail "the router did not log the non-streaming request as CANCELLED"
ok "client gone before the first write (no streaming): call cancelled, decode KV back to 0 in ${elapsed_ms} ms"
stop_local_stack

# pdserve-router in front of separate worker processes: the same greedy
# text over HTTP; /health follows the workers.
PIDS=()
trap '[ ${#PIDS[@]} -gt 0 ] && kill -KILL "${PIDS[@]}" 2>/dev/null; _e2e_cleanup' EXIT
spawn() {  # spawn NAME ARGS...: starts a process logging to $WORK/NAME.log
  local name=$1
  shift
  OMP_WAIT_POLICY=PASSIVE "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
port_of() { log_port "$1.log" "$2 "; }  # port_of NAME PATTERN: the port its log prints after PATTERN
E2E_LOGS=(local.log prefill.log decode.log router.log)
spawn prefill "$BUILD/prefill_service/pdserve-prefill" --model "$MODEL" --listen 127.0.0.1:0 --metrics-port -1
spawn decode "$BUILD/decode_service/pdserve-decode" --model "$MODEL" --listen 127.0.0.1:0 --metrics-port -1
P_PORT=$(port_of prefill "serving on port")
D_PORT=$(port_of decode "serving on port")
[ -n "$P_PORT" ] && [ -n "$D_PORT" ] || fail "workers did not start"
spawn router "$BUILD/router/pdserve-router" --model "$MODEL" --listen 127.0.0.1:0 --metrics-port -1 \
  --prefill "127.0.0.1:$P_PORT" --decode "127.0.0.1:$D_PORT" --poll-interval-ms 100 --http-listen 127.0.0.1:0
HTTP=$(port_of router "http on port")
[ -n "$HTTP" ] || fail "pdserve-router printed no 'http on port'"
st=$(call GET /health)
expect "router /health with both workers" 200 "$st" 'd["status"] == "ok"'
st=$(call POST /v1/completions "{\"prompt\": \"Hello\", $GREEDY}")
expect "router + workers: the same greedy text as pdserve-local" 200 "$st" 'd["choices"][0]["text"] == first'
kill -KILL "${PIDS[1]}"  # the decode worker
for _ in $(seq 1 50); do [ "$(call GET /health)" = 503 ] && break; sleep 0.1; done
st=$(call GET /health)
expect "router /health without a decode worker: 503" 503 "$st" '"decode" in d["error"]["message"]'
st=$(call POST /v1/completions "{\"prompt\": \"Hello\", $GREEDY}")
expect "no decode worker: 503" 503 "$st" 'd["error"]["type"] == "service_unavailable"'
kill -KILL "${PIDS[@]}" 2>/dev/null || true
PIDS=()
E2E_LOGS=(local.log)

# HTTPS and an API key.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null
start_http_stack --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --api-key sekrit
BASE="https://localhost:$HTTP"
st=$(call GET /v1/models "" --cacert "$WORK/cert.pem")
expect "https without the key: 401" 401 "$st" 'd["error"]["code"] == "invalid_api_key"'
st=$(call POST /v1/completions '{"prompt": "Hello", "max_tokens": 2}' --cacert "$WORK/cert.pem" -H 'Authorization: Bearer wrong')
expect "https with a wrong key: 401" 401 "$st" 'd["error"]["type"] == "authentication_error"'
st=$(call POST /v1/completions '{"prompt": "Hello", "max_tokens": 2}' --cacert "$WORK/cert.pem" -H 'Authorization: Bearer sekrit')
expect "https with the key: 200" 200 "$st" 'd["usage"]["completion_tokens"] == 2'
st=$(call GET /health "" --cacert "$WORK/cert.pem")
expect "/health needs no key" 200 "$st" 'd["status"] == "ok"'
st=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HTTP/health" || true)
[ "$st" != 200 ] || fail "plain HTTP answered on the HTTPS port"
ok "plain HTTP is not served on the HTTPS port"
stop_local_stack
echo "PASS"
