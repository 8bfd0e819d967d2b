#!/usr/bin/env bash
# pdserve-passkey against the local stack on a small random model (byte
# tokenizer): it sizes prompts with the router's Tokenize RPC, runs the
# trials, prints the table and the headline, writes the JSON, and blames the
# random model (not itself) for an accuracy near 0.
# Usage: passkey_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(out.txt err.txt local.log)
PK="$BUILD/clients/pdserve-passkey"

"$PK" --help >/dev/null || fail "--help did not exit 0"
ok "--help exits 0"
rc=0; "$PK" --position sideways >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "position" "$WORK/err.txt" || fail "bad --position: exit $rc"
ok "bad --position exits 2"

"$BUILD/clients/pdserve-init-model" --config "$SRC/configs/small.json" --seed 1 --out "$WORK/m" >/dev/null 2>&1
start_local_stack "$WORK/m"  # sets ROUTER (a port the kernel picked)

# The run: two short lengths, two trials each.
rc=0
"$PK" --router "$ROUTER" --context-lengths 384,768 --n-trials 2 --concurrency 2 --seed 5 --deadline-s 120 \
  --json-out "$WORK/run.json" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "pdserve-passkey exited $rc"
cat "$WORK/out.txt"
grep -Eq "^ +length +prompt +trials +failed +correct +accuracy" "$WORK/out.txt" || fail "no table header"
grep -Eq "^ +384 +[0-9]+ +2 +0 " "$WORK/out.txt" || fail "no row for 384 with 2 trials and 0 failures"
grep -Eq "^ +768 +[0-9]+ +2 +0 " "$WORK/out.txt" || fail "no row for 768 with 2 trials and 0 failures"
ok "table"
# The random model scores ~0: a WARNING for the largest length that names the model.
grep -q "^WARNING: passkey retrieval at 768 tokens (position middle): 0/2 correct" "$WORK/out.txt" ||
  fail "no WARNING headline for 768"
grep -q "the model is the likely cause, not this client" "$WORK/out.txt" || fail "the headline does not blame the model"
ok "headline"
grep -q "4/4 trials" "$WORK/err.txt" || fail "no final progress line on stderr"
ok "progress line"

/usr/bin/python3 - "$WORK/run.json" <<'EOF' || fail "JSON check"
import json, re, sys
j = json.load(open(sys.argv[1]))
assert j["position"] == "middle" and j["n_trials"] == 2 and j["seed"] == 5, j
assert [l["context_length"] for l in j["lengths"]] == [384, 768], j["lengths"]
for l in j["lengths"]:
    assert l["trials"] == 2 and l["failed"] == 0 and l["first_error"] is None, l
    assert 0 <= l["ci95_low"] <= l["accuracy"] <= l["ci95_high"] <= 1, l
    assert l["latency_ms_p50"] > 0 and l["latency_ms_p90"] >= l["latency_ms_p50"], l
assert j["headline"]["context_length"] == 768 and j["headline"]["pass"] is False, j["headline"]
trials = j["trials"]
assert len(trials) == 4, len(trials)
keys = ["context_length", "trial", "prompt_tokens", "usage_prompt_tokens", "position", "depth", "filler_words",
        "filler_words_before", "passkey", "answer_text", "answer_token_ids", "extracted", "correct", "ttft_ms",
        "latency_ms", "tokens", "finish_reason", "error", "prompt"]
for t in trials:
    assert list(t) == keys, list(t)
    L = t["context_length"]
    # Within one filler word (<= 8 bytes) under the target, never over.
    assert L - 8 <= t["prompt_tokens"] <= L, t
    assert t["usage_prompt_tokens"] == t["prompt_tokens"], t
    assert re.fullmatch(r"\d{5}", t["passkey"]), t
    assert t["error"] is None and isinstance(t["correct"], bool), t
    # The same rule, independently: the first \b\d{5}\b (ASCII \b) of the new text.
    m = re.search(r"\b(\d{5})\b", t["answer_text"], re.ASCII)
    assert t["extracted"] == (m.group(1) if m else None), t
    assert t["correct"] == (t["extracted"] == t["passkey"]), t
    assert 1 <= t["tokens"] <= 16 and t["finish_reason"] in ("length", "eos"), t
    assert len(t["answer_token_ids"]) == t["tokens"], t
    assert len(t["prompt"].encode()) == t["prompt_tokens"] and t["passkey"] in t["prompt"], t
    assert t["ttft_ms"] > 0 and t["latency_ms"] >= t["ttft_ms"] * 0.5, t
    assert abs(t["filler_words_before"] - t["filler_words"] / 2) <= 2, t
for L in (384, 768):
    ks = [t["passkey"] for t in trials if t["context_length"] == L]
    assert len(set(ks)) == 2, ks
print("ok: JSON (" + ", ".join(f'{t["context_length"]}:{t["prompt_tokens"]}' for t in trials) + " prompt tokens)")
EOF

# Same seed, another position and concurrency: the same passkeys; and
# --require-target turns the miss into exit 3.
rc=0
"$PK" --router "$ROUTER" --context-lengths 384,768 --n-trials 2 --concurrency 1 --seed 5 --position end \
  --require-target --json-out "$WORK/end.json" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 3 ] || fail "--require-target on a random model: expected exit 3, got $rc"
grep -q "^WARNING: passkey retrieval at 768 tokens (position end)" "$WORK/out.txt" || fail "no WARNING for position end"
/usr/bin/python3 - "$WORK/run.json" "$WORK/end.json" <<'EOF' || fail "passkeys differ between runs"
import json, sys
a, b = (json.load(open(p))["trials"] for p in sys.argv[1:])
assert [t["passkey"] for t in a] == [t["passkey"] for t in b]
assert all(t["filler_words_before"] == t["filler_words"] for t in b), "end: after all the filler"
EOF
ok "--require-target exits 3; passkeys depend only on the seed and the length"

# A length below the fixed text's size is a flag error that says so.
rc=0
"$PK" --router "$ROUTER" --context-lengths 100 >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "minimum" "$WORK/err.txt" || fail "length 100: exit $rc"
ok "too-short length exits 2"

stop_local_stack

# The trained model (models/passkey-4l, 300/300 at its training length in
# docs/passkey.md): the same client must score its answers correct, so a
# client that never scores, or scores every answer wrong, fails here.
start_local_stack "$SRC/models/passkey-4l"
rc=0
"$PK" --router "$ROUTER" --context-lengths 512 --n-trials 4 --concurrency 2 --seed 5 --require-target \
  --json-out "$WORK/trained.json" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
cat "$WORK/out.txt"
[ "$rc" = 0 ] || fail "pdserve-passkey on the trained model exited $rc (--require-target: 3 = below target)"
grep -Eq "^ +512 +[0-9]+ +4 +0 +4 " "$WORK/out.txt" || fail "no row for 512 with 4 trials, 0 failures, 4 correct"
grep -q "^PASS: " "$WORK/out.txt" || fail "no PASS headline on the trained model"
/usr/bin/python3 - "$WORK/trained.json" <<'EOF' || fail "trained-model JSON check"
import json, re, sys
j = json.load(open(sys.argv[1]))
(l,) = j["lengths"]
assert l["context_length"] == 512 and l["trials"] == 4 and l["failed"] == 0 and l["correct"] == 4, l
assert l["accuracy"] == 1.0 and j["headline"]["pass"] is True, (l, j["headline"])
for t in j["trials"]:
    # Scored from the generated text: the passkey is in the answer.
    assert t["correct"] is True and t["extracted"] == t["passkey"], t
    assert re.search(r"\b" + t["passkey"] + r"\b", t["answer_text"], re.ASCII), t
EOF
ok "trained model: 4/4 passkeys retrieved at 512 tokens, scored from the answers"
stop_local_stack

# No router at all: a clear error and exit 1, not a hang. NO_LISTENER (lib.sh),
# not the stopped stack's port: someone else may have bound that one since.
rc=0
timeout 60 "$PK" --router "$NO_LISTENER" --context-lengths 512 --deadline-s 5 >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 1 ] && grep -q "UNAVAILABLE\|DEADLINE_EXCEEDED" "$WORK/err.txt" || fail "no router: exit $rc"
ok "no router exits 1"
echo "PASS"
