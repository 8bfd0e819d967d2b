#!/usr/bin/env bash
# TLS, mTLS and the API key on real processes (docs/security.md), with
# certificates made at run time (make_test_certs.sh): router, prefill and
# decode on loopback, all with mTLS between them, the router's public port
# TLS with an API key.
#   - a worker with --tls-cert/--tls-key but no --tls-ca refuses to start
#     (exit 2), as do a missing --tls-key and a file that is not PEM;
#   - pdserve-cli with --tls-ca and the key gets pdserve-generate's tokens;
#     without the key, or with a wrong one: UNAUTHENTICATED; plaintext, or a
#     CA that did not sign the router: it fails; health stays open;
#   - the workers' ports refuse a TLS client without a client certificate,
#     or with one from another CA;
#   - a decode worker whose certificate comes from another CA is never
#     healthy: next to a good one it gets no request, alone its router
#     answers UNAVAILABLE and logs the handshake failure;
#   - pdserve-bench measures through the TLS router with the key, its CA
#     read from a pipe (its PEM files are read once); a wrong key fails
#     every request UNAUTHENTICATED;
#   - pdserve-local serves its router port with TLS and the key the same way.
# Usage: tls_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(router.log router_rogue.log decode.log prefill.log rogue.log local.log bench.err)
command -v openssl >/dev/null || { echo "SKIP: openssl not found"; exit 77; }
PIDS=()
_tls_cleanup() {
  for p in "${PIDS[@]}"; do { kill -KILL "$p" && wait "$p"; } 2>/dev/null || true; done
  _e2e_cleanup
}
trap _tls_cleanup EXIT

C=$WORK/certs
bash "$SRC/tests/e2e/make_test_certs.sh" "$C"
"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/small.json" --seed 3 --out "$WORK/m" >/dev/null 2>&1
MTLS=(--tls-cert "$C/node.crt" --tls-key "$C/node.key" --tls-ca "$C/ca.crt")
ROGUE=(--tls-cert "$C/rogue.crt" --tls-key "$C/rogue.key" --tls-ca "$C/other-ca.crt")
KEY=k3y-$$-$RANDOM
PROBE=(/usr/bin/python3 "$SRC/tests/e2e/tls_health_probe.py")
export OMP_WAIT_POLICY=PASSIVE

# expect_refusal NAME PATTERN BINARY ARGS...: exits 2 naming PATTERN.
expect_refusal() {
  local name=$1 pattern=$2 rc=0 out
  shift 2
  out=$("$@" --model "$WORK/m" --listen 127.0.0.1:0 --metrics-port -1 2>&1) || rc=$?
  [ "$rc" = 2 ] || fail "$name: exit $rc, not 2: $out"
  grep -q -- "$pattern" <<<"$out" || fail "$name: no '$pattern' in: $out"
  ok "$name refused (exit 2): $(head -c 160 <<<"$out")"
}
expect_refusal "decode with cert, no CA" "--tls-ca" "$BUILD/decode_service/pdserve-decode" \
  --tls-cert "$C/node.crt" --tls-key "$C/node.key"
expect_refusal "prefill with cert, no CA" "--tls-ca" "$BUILD/prefill_service/pdserve-prefill" \
  --tls-cert "$C/node.crt" --tls-key "$C/node.key"
expect_refusal "decode with cert, no key" "--tls-key" "$BUILD/decode_service/pdserve-decode" \
  --tls-cert "$C/node.crt" --tls-ca "$C/ca.crt"
expect_refusal "decode with a non-PEM CA" "not a PEM file" "$BUILD/decode_service/pdserve-decode" \
  --tls-cert "$C/node.crt" --tls-key "$C/node.key" --tls-ca "$C/notpem.txt"

# start NAME BINARY ARGS...: runs it in the background into NAME.log and
# waits for its "serving on port N" line; sets PORT_OF_NAME.
start() {
  local name=$1 bin=$2
  shift 2
  : >"$WORK/$name.log"
  "$bin" --listen 127.0.0.1:0 --metrics-port -1 "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do grep -q "serving on port" "$WORK/$name.log" && break; sleep 0.1; done
  local port
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$WORK/$name.log" | head -1)
  [ -n "$port" ] || fail "$name did not start"
  printf -v "PORT_$name" '%s' "$port"
}
start decode "$BUILD/decode_service/pdserve-decode" --model "$WORK/m" "${MTLS[@]}"
start prefill "$BUILD/prefill_service/pdserve-prefill" --model "$WORK/m" "${MTLS[@]}" --prefill-chunk 5
start rogue "$BUILD/decode_service/pdserve-decode" --model "$WORK/m" "${ROGUE[@]}"
D=127.0.0.1:$PORT_decode P=127.0.0.1:$PORT_prefill R=127.0.0.1:$PORT_rogue
grep -q "mTLS" "$WORK/decode.log" || fail "the decode worker does not say mTLS"
# One router with both decode workers, one with only the rogue one (HTTP
# on ports they pick: two cannot share the default 8000).
start router "$BUILD/router/pdserve-router" --model "$WORK/m" "${MTLS[@]}" --api-key "$KEY" \
  --prefill "$P" --decode "$D,$R" --wait-for-workers-s 20 --poll-interval-ms 200 --http-listen 127.0.0.1:0
start router_rogue "$BUILD/router/pdserve-router" --model "$WORK/m" "${MTLS[@]}" --api-key "$KEY" \
  --prefill "$P" --decode "$R" --wait-for-workers-s 2 --poll-interval-ms 200 --http-listen 127.0.0.1:0
ROUTER=127.0.0.1:$PORT_router ROUTER_ROGUE=127.0.0.1:$PORT_router_rogue

# The workers' ports: mTLS only.
[ "$("${PROBE[@]}" "$D" "$C/ca.crt" "$C/node.crt" "$C/node.key" 2>/dev/null)" = SERVING ] ||
  fail "decode health with a client certificate of the CA is not SERVING"
for w in "$D" "$P"; do
  out=$("${PROBE[@]}" "$w" "$C/ca.crt" 2>/dev/null) && fail "$w answered a TLS client without a certificate: $out"
  out=$("${PROBE[@]}" "$w" "$C/ca.crt" "$C/rogue.crt" "$C/rogue.key" 2>/dev/null) &&
    fail "$w answered a client certificate of another CA: $out"
done
ok "worker ports refuse clients without a certificate of the CA (mTLS)"
# The router's public port: TLS, no client certificate; health open.
[ "$("${PROBE[@]}" "$ROUTER" "$C/ca.crt" 2>/dev/null)" = SERVING ] || fail "router health over TLS without key"
ok "router health is open over TLS (no key, no client certificate)"

CLI=("$BUILD/clients/pdserve-cli" --router "$ROUTER" --prompt-ids 72,101,108,108,111 --max-new-tokens 8
     --deadline-ms 20000)
want=$("$BUILD/clients/pdserve-generate" --model "$WORK/m" --prompt-ids 72,101,108,108,111 --max-new-tokens 8 \
       --prefill-chunk 5 2>/dev/null)
# ids: pdserve-cli --json on stdin -> its token ids as pdserve-generate
# prints them, then the decode worker it ran on.
ids() {
  /usr/bin/python3 -c 'import json,sys; r = json.load(sys.stdin)
print(json.dumps({"token_ids": r["token_ids"]}, separators=(",", ":"))); print(r["usage"]["decode_worker"])'
}
for i in 1 2 3 4; do  # several: each would reach the rogue worker if the router took it
  got=$("${CLI[@]}" --tls-ca "$C/ca.crt" --api-key "$KEY" --json 2>"$WORK/cli.err" | ids) ||
    fail "generate with key and CA: $(cat "$WORK/cli.err")"
  [ "$got" = "$want"$'\n'"$D" ] || fail "generate with key and CA: $got, want $want on $D"
done
ok "generate over TLS with the key: pdserve-generate's tokens (4 requests, none on the rogue worker)"
got=$(PDSERVE_API_KEY=$KEY "${CLI[@]}" --tls-ca "$C/ca.crt" --json 2>"$WORK/cli.err" | ids | sed -n 1p) ||
  fail "generate with PDSERVE_API_KEY: $(cat "$WORK/cli.err")"
[ "$got" = "$want" ] || fail "generate with PDSERVE_API_KEY: $got"
ok "PDSERVE_API_KEY works like --api-key"

# expect_error NAME PATTERN ARGS...: pdserve-cli fails with PATTERN.
expect_error() {
  local name=$1 pattern=$2 out rc=0
  shift 2
  out=$(env -u PDSERVE_API_KEY "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" != 0 ] || fail "$name: succeeded"
  grep -q "$pattern" <<<"$out" || fail "$name: no $pattern in: $out"
  grep -q "$KEY" <<<"$out" && fail "$name: the error shows the key"
  ok "$name: $(grep -m1 "pdserve-cli: error" <<<"$out" | head -c 160)"
}
expect_error "no key" UNAUTHENTICATED "${CLI[@]}" --tls-ca "$C/ca.crt"
expect_error "wrong key" UNAUTHENTICATED "${CLI[@]}" --tls-ca "$C/ca.crt" --api-key "not-$KEY"
expect_error "plaintext client" UNAVAILABLE "${CLI[@]}" --api-key "$KEY"
expect_error "client trusting another CA" UNAVAILABLE "${CLI[@]}" --tls-ca "$C/other-ca.crt" --api-key "$KEY"

# pdserve-bench over TLS with the key. The CA comes through a pipe, which
# can be read once: pdserve-bench reads its PEM files once for both
# backends (a second read finds the pipe empty: "not a PEM file").
BENCH=("$BUILD/bench/pdserve-bench" --router "$ROUTER" --num-prompts 2 --concurrency 1 --input-len 8
       --output-len 4 --seed 1)
env -u PDSERVE_API_KEY "${BENCH[@]}" --tls-ca <(cat "$C/ca.crt") --api-key "$KEY" >"$WORK/bench.out" \
  2>"$WORK/bench.err" || fail "pdserve-bench with key and CA (from a pipe): $(cat "$WORK/bench.err")"
grep -Eq "^Successful requests: +2$" "$WORK/bench.out" || fail "pdserve-bench over TLS: $(cat "$WORK/bench.out")"
ok "pdserve-bench over TLS with the key, the CA read once from a pipe: 2 requests"
rc=0
env -u PDSERVE_API_KEY "${BENCH[@]}" --tls-ca "$C/ca.crt" --api-key "not-$KEY" >"$WORK/bench.out" \
  2>"$WORK/bench.err" || rc=$?
[ "$rc" = 1 ] && grep -Eq "^  UNAUTHENTICATED: +2$" "$WORK/bench.out" ||
  fail "pdserve-bench with a wrong key: exit $rc, want 1 and 2 UNAUTHENTICATED: $(cat "$WORK/bench.out")"
ok "pdserve-bench with a wrong key: every request UNAUTHENTICATED"

# The rogue decode worker: never healthy, the reason logged.
grep -q "$R unhealthy (health check: UNAVAILABLE.*certificate verify failed" "$WORK/router_rogue.log" ||
  fail "the router with only the rogue decode worker did not log the failed handshake"
expect_error "router whose only decode worker has another CA" UNAVAILABLE \
  "$BUILD/clients/pdserve-cli" --router "$ROUTER_ROGUE" --prompt-ids 1,2,3 --max-new-tokens 2 --tls-ca "$C/ca.crt" \
  --api-key "$KEY"

# pdserve-local: TLS and the key on its router port.
start_local_stack "$WORK/m" --tls-cert "$C/node.crt" --tls-key "$C/node.key" --api-key "$KEY" \
  --prefill-chunk 5  # sets ROUTER (a port the kernel picked)
LROUTER=$ROUTER
grep -q "router on $LROUTER (TLS)" "$WORK/local.log" || fail "pdserve-local does not say TLS"
LCLI=("$BUILD/clients/pdserve-cli" --router "$LROUTER" --prompt-ids 72,101,108,108,111 --max-new-tokens 8
      --deadline-ms 20000)
got=$("${LCLI[@]}" --tls-ca "$C/ca.crt" --api-key "$KEY" --json 2>"$WORK/cli.err" | ids | sed -n 1p) ||
  fail "pdserve-local with key and CA: $(cat "$WORK/cli.err")"
[ "$got" = "$want" ] || fail "pdserve-local with key and CA: $got, want $want"
ok "pdserve-local over TLS with the key: pdserve-generate's tokens"
expect_error "pdserve-local without the key" UNAUTHENTICATED "${LCLI[@]}" --tls-ca "$C/ca.crt"
expect_error "pdserve-local, plaintext client" UNAVAILABLE "${LCLI[@]}" --api-key "$KEY"
stop_local_stack
echo "PASS"
