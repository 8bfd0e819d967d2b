#!/usr/bin/env bash
# pdserve-bench against the local stack on a small random model: a closed
# loop at fixed concurrency with goodput SLOs, a Poisson open loop with
# uniform lengths, lengths from a file, failures counted by status code, the
# same closed loop through the OpenAI HTTP API (--backend openai), and the
# flag and connection errors.
# Usage: bench_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(out.txt err.txt local.log)
BENCH="$BUILD/bench/pdserve-bench"

"$BENCH" --help >/dev/null || fail "--help did not exit 0"
ok "--help exits 0"
for bad in "--goodput itl:5" "--input-len 4 --input-len-range 1:2" "--output-len-range 9:3" "--request-rate -1" \
           "--save-requests" "--lengths-file $WORK/missing" "--backend bogus" \
           "--backend openai --base-url ftp://127.0.0.1:1"; do
  rc=0
  # shellcheck disable=SC2086
  "$BENCH" --router 127.0.0.1:1 $bad >/dev/null 2>"$WORK/err.txt" || rc=$?
  [ "$rc" = 2 ] && grep -q "pdserve-bench: error:" "$WORK/err.txt" || fail "'$bad': expected exit 2, got $rc"
done
ok "bad flags exit 2"

"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/small.json" --seed 1 --out "$WORK/m" >/dev/null 2>&1
start_local_stack "$WORK/m"  # ROUTER and --http-listen 127.0.0.1:0 on ports the kernel picks (lib.sh)
HTTP_PORT=$(log_port local.log "http on port " "$STACK")
[ -n "$HTTP_PORT" ] || fail "no 'http on port N' line"

# 1. Closed loop: 8 prompts of 32 tokens, 16 out each, 4 in flight, goodput
#    SLOs in vllm's spelling (two arguments), a warmup request.
rc=0
"$BENCH" --router "$ROUTER" --num-prompts 8 --concurrency 4 --input-len 32 --output-len 16 \
  --goodput ttft:60000 tpot:60000 --warmup 1 --seed 7 --json-out "$WORK/closed.json" --save-requests \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "closed loop: exit $rc"
cat "$WORK/out.txt"
grep -q "^============ Serving Benchmark Result ============$" "$WORK/out.txt" || fail "no result header"
grep -Eq "^Successful requests: +8$" "$WORK/out.txt" || fail "not 8 successful requests"
grep -Eq "^Failed requests: +0$" "$WORK/out.txt" || fail "failed requests"
grep -Eq "^Total input tokens: +256$" "$WORK/out.txt" || fail "input tokens"
grep -Eq "^Total generated tokens: +128$" "$WORK/out.txt" || fail "generated tokens"
grep -Eq "^Request goodput \(req/s\): +[0-9.]+$" "$WORK/out.txt" || fail "no goodput row"
for metric in TTFT TPOT ITL E2EL; do
  for stat in Mean Median P90 P99 Max; do
    grep -Eq "^$stat $metric \(ms\): +[0-9]+\.[0-9]{2}$" "$WORK/out.txt" || fail "no '$stat $metric' row"
  done
done
grep -Eq "^Mean KV hand-off \(bytes\): +[1-9][0-9]*$" "$WORK/out.txt" || fail "no hand-off bytes"
ok "table"
grep -q "warmup 1/1 requests (0 failed)" "$WORK/err.txt" || fail "no warmup progress line"
grep -q "run 8/8 requests (0 failed)" "$WORK/err.txt" || fail "no final progress line"
ok "progress lines"

/usr/bin/python3 - "$WORK/closed.json" <<'EOF' || fail "closed-loop JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["successful_requests"] == 8 and j["failed_requests"] == 0 and j["failed_by_code"] == {}, j
assert j["total_input_tokens"] == 256 and j["total_output_tokens"] == 128, j
assert j["concurrency"] == 4 and j["request_rate"] is None and j["warmup"] == 1, j
assert j["goodput_slo_ms"] == {"ttft": 60000, "tpot": 60000, "e2el": None}, j["goodput_slo_ms"]
assert j["good_requests"] == 8 and j["request_goodput"] > 0, j
d = j["duration_s"]
assert d > 0 and abs(j["request_throughput"] - 8 / d) < 1e-9 * (8 / d), j
assert abs(j["output_throughput"] - 128 / d) < 1e-6 and abs(j["total_token_throughput"] - 384 / d) < 1e-6, j
for k in ("ttft_ms", "tpot_ms", "e2el_ms"):
    s = j[k]
    assert s["count"] == 8 and 0 < s["mean"] <= s["max"] and s["median"] <= s["p90"] <= s["p99"] <= s["max"], (k, s)
reqs = j["requests"]
assert len(reqs) == 8 and [r["index"] for r in reqs] == list(range(8)), reqs
itl = []
for r in reqs:
    assert r["ok"] and r["error_code"] is None and r["good"] is True, r
    assert r["input_len"] == 32 and r["output_len"] == 16 and r["output_tokens"] == 16, r
    assert r["finish_reason"] == "length", r
    u = r["usage"]
    assert u["prompt_tokens"] == 32 and u["generated_tokens"] == 16 and u["kv_handoff_bytes"] > 0, u
    assert 0 < r["ttft_ms"] <= r["e2el_ms"], r
    assert abs(r["tpot_ms"] - (r["e2el_ms"] - r["ttft_ms"]) / 15) < 1e-6, r
    # One ITL per token-holding message after the first.
    assert len(r["itl_ms"]) == r["messages"] - 1 and 1 <= r["messages"] <= 16, r
    assert sum(r["itl_ms"]) <= r["e2el_ms"] - r["ttft_ms"] + 1e-6, r
    itl += r["itl_ms"]
    # The router's clock starts later and ends earlier than the client's.
    assert u["ttft_ns"] / 1e6 <= r["ttft_ms"] + 1 and u["e2e_ns"] / 1e6 <= r["e2el_ms"] + 1, (u, r)
assert j["itl_ms"]["count"] == len(itl) and abs(j["itl_ms"]["max"] - max(itl)) < 1e-9, j["itl_ms"]
assert j["server"]["kv_handoff_bytes_mean"] > 0 and j["server"]["ttft_ms"]["count"] == 8, j["server"]
print("ok: closed-loop JSON (%.2f s, TTFT p50 %.1f ms, TPOT p50 %.1f ms, %d ITL samples)"
      % (d, j["ttft_ms"]["median"], j["tpot_ms"]["median"], len(itl)))
EOF

# 2. Poisson arrivals at 20 req/s, uniform lengths.
rc=0
"$BENCH" --router "$ROUTER" --request-rate 20 --num-prompts 6 --input-len-range 8:24 --output-len-range 4:8 \
  --seed 3 --json-out "$WORK/poisson.json" --save-requests >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "poisson: exit $rc"
grep -Eq "^Arrivals: +poisson 20 req/s" "$WORK/out.txt" || fail "arrivals row"
grep -Eq "^Successful requests: +6$" "$WORK/out.txt" || fail "not 6 successful requests"
grep -q "Request goodput" "$WORK/out.txt" && fail "goodput without --goodput"
/usr/bin/python3 - "$WORK/poisson.json" <<'EOF' || fail "poisson JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["successful_requests"] == 6 and j["request_rate"] == 20 and j["concurrency"] is None, j
assert j["request_goodput"] is None and j["good_requests"] is None, j
reqs = j["requests"]
sched = [r["scheduled_s"] for r in reqs]
assert sched[0] == 0 and sched == sorted(sched) and sched[-1] > 0, sched
for r in reqs:
    assert 8 <= r["input_len"] <= 24 and 4 <= r["output_len"] <= 8, r
    assert r["output_tokens"] == r["output_len"] and r["usage"]["prompt_tokens"] == r["input_len"], r
    assert r["start_s"] >= r["scheduled_s"] - 1e-3, r  # never sent before its arrival
assert j["total_input_tokens"] == sum(r["input_len"] for r in reqs), j
assert j["total_output_tokens"] == sum(r["output_len"] for r in reqs), j
print("ok: poisson JSON (arrivals at %s s)" % ", ".join("%.3f" % s for s in sched))
EOF

# 3. Lengths from a file: one request per line when --num-prompts is not given.
printf '# input output\n12 3\n20 5\n\n7 2\n' >"$WORK/lengths.txt"
rc=0
"$BENCH" --router "$ROUTER" --lengths-file "$WORK/lengths.txt" --concurrency 2 --json-out "$WORK/file.json" \
  --save-requests >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "lengths file: exit $rc"
/usr/bin/python3 - "$WORK/file.json" <<'EOF' || fail "lengths-file JSON"
import json, sys
j = json.load(open(sys.argv[1]))
got = [(r["input_len"], r["output_tokens"]) for r in j["requests"]]
assert got == [(12, 3), (20, 5), (7, 2)], got
assert j["total_input_tokens"] == 39 and j["total_output_tokens"] == 10, j
EOF
ok "lengths file"

# 4. Ids beyond the model's vocabulary: every request fails with
#    INVALID_ARGUMENT, counted by code, and the run exits 1.
rc=0
"$BENCH" --router "$ROUTER" --num-prompts 2 --concurrency 2 --input-len 64 --output-len 2 --vocab-size 100000 \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 1 ] || fail "out-of-vocabulary ids: expected exit 1, got $rc"
grep -Eq "^Failed requests: +2$" "$WORK/out.txt" || fail "not 2 failed requests"
grep -Eq "^  INVALID_ARGUMENT: +2$" "$WORK/out.txt" || fail "failures not counted by code"
grep -q "every request failed" "$WORK/err.txt" || fail "no 'every request failed' line"
ok "failures counted by status code, exit 1"

# 5. The closed loop of 1. through the OpenAI HTTP API: the same requests
#    as POST /v1/completions with SSE, the same report and token counts.
rc=0
"$BENCH" --backend openai --base-url "http://127.0.0.1:$HTTP_PORT/v1" --num-prompts 8 --concurrency 4 --input-len 32 \
  --output-len 16 --warmup 1 --seed 7 --json-out "$WORK/openai.json" --save-requests \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "openai backend: exit $rc"
grep -Eq "^Backend: +openai http://127.0.0.1:$HTTP_PORT/v1$" "$WORK/out.txt" || fail "openai: no backend row"
grep -Eq "^Successful requests: +8$" "$WORK/out.txt" || fail "openai: not 8 successful requests"
grep -Eq "^Failed requests: +0$" "$WORK/out.txt" || fail "openai: failed requests"
grep -Eq "^Total generated tokens: +128$" "$WORK/out.txt" || fail "openai: generated tokens"
grep -Eq "^Mean TTFT \(ms\): +[0-9]+\.[0-9]{2}$" "$WORK/out.txt" || fail "openai: no TTFT row"
/usr/bin/python3 - "$WORK/openai.json" <<'EOF' || fail "openai JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["backend"] == "openai" and j["successful_requests"] == 8 and j["failed_requests"] == 0, j
assert j["total_input_tokens"] == 256 and j["total_output_tokens"] == 128, j
assert j["ttft_ms"]["count"] == 8 and j["server"]["ttft_ms"]["count"] == 0, j  # no router Usage over HTTP
for r in j["requests"]:
    u = r["usage"]
    assert r["ok"] and r["output_tokens"] == 16 and r["finish_reason"] == "length", r
    assert u == {"prompt_tokens": 32, "completion_tokens": 16, "total_tokens": 48}, u
    assert 0 < r["ttft_ms"] <= r["e2el_ms"] and 1 <= r["messages"] <= 16, r
    # One ITL per chunk holding a choice after the first (text may be empty:
    # most of this random model's ids have no byte of their own).
    assert len(r["itl_ms"]) == r["messages"] - 1, r
print("ok: openai JSON (TTFT p50 %.1f ms, TPOT p50 %.1f ms)" % (j["ttft_ms"]["median"], j["tpot_ms"]["median"]))
EOF
rc=0
"$BENCH" --backend openai --base-url "http://127.0.0.1:$HTTP_PORT" --num-prompts 2 --input-len 4 --output-len 2 \
  --vocab-size 100000 >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 1 ] && grep -Eq "^  HTTP_400: +2$" "$WORK/out.txt" || fail "openai, ids beyond the vocabulary: exit $rc"
ok "openai backend: report, usage, failures counted by HTTP status"

stop_local_stack

# No router: a clear error and exit 1, not a hang. NO_LISTENER (lib.sh), not
# the stopped stack's ports: someone else may have bound those since.
rc=0
timeout 60 "$BENCH" --router "$NO_LISTENER" --num-prompts 2 >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 1 ] && grep -q "cannot connect to the router" "$WORK/err.txt" || fail "no router: exit $rc"
ok "no router exits 1"
rc=0
timeout 60 "$BENCH" --backend openai --base-url "http://$NO_LISTENER" --num-prompts 2 >/dev/null \
  2>"$WORK/err.txt" || rc=$?
[ "$rc" = 1 ] && grep -q "cannot connect to the HTTP API" "$WORK/err.txt" || fail "no HTTP API: exit $rc"
ok "no HTTP API exits 1"
echo "PASS"
