#!/usr/bin/env bash
# pdserve-passkey against the local stack on a small random model (byte
# tokenizer): it sizes prompts with the router's Tokenize RPC, runs the
# trials, prints the table and the headline, writes the JSON, and blames the
# random model (not itself) for an accuracy near 0; --protocol seed spreads a
# length's trials over start/middle/end and ends in a VERDICT line;
# --trials-jsonl/--resume runs only the missing trials; a length above the
# model's max_context is refused before any Generate (the router's counter).
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

# ---- --protocol seed, --trials-jsonl/--resume and the max_context check.
HTTP_PORT=$(log_port local.log "http on port " "$STACK")
[ -n "$HTTP_PORT" ] || fail "no 'http on port N' line"
# generates: the Generate calls the router has counted (every status code).
generates() {
  curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk '/^pdserve_router_requests_total[{ ]/ { n += $NF } END { printf "%d\n", n }'
}
SEED_ARGS=(--router "$ROUTER" --protocol seed --context-lengths 384,768 --seed 5 --concurrency 2 --deadline-s 120)

rc=0; "$PK" --protocol seed --position end >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "position end cannot go with --protocol seed" "$WORK/err.txt" ||
  fail "--position with --protocol seed: exit $rc"
rc=0; "$PK" --resume >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "needs --trials-jsonl" "$WORK/err.txt" || fail "--resume alone: exit $rc"
ok "--position with --protocol seed, and --resume without --trials-jsonl, exit 2"

# A length the model (max_context 16384) cannot serve: exit 2 naming the
# numbers, and not one Generate reaches the router.
before=$(generates)
rc=0
"$PK" "${SEED_ARGS[@]}" --context-lengths 384,16384 --n-trials 3 >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] || fail "length 16384 + 16 new tokens over max_context 16384: expected exit 2, got $rc"
grep -q "context length 16384 plus --max-new-tokens 16 is 16400, above the model's max_context 16384" \
  "$WORK/err.txt" || fail "the refusal does not name the length, max-new-tokens and max_context"
[ "$(generates)" = "$before" ] || fail "Generate calls went from $before to $(generates) on a refused length"
ok "a length above max_context exits 2 before any Generate ($before Generate calls before and after)"

# The seed protocol at small lengths: 6 trials per length, i % 3 -> start,
# middle, end; the table by position and a VERDICT line (131072 not run).
before=$(generates)
rc=0
"$PK" "${SEED_ARGS[@]}" --n-trials 6 --json-out "$WORK/seed.json" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "--protocol seed exited $rc"
cat "$WORK/out.txt"
[ "$(generates)" = $((before + 12)) ] || fail "--protocol seed: $((before + 12)) Generate calls expected"
grep -Eq "^ +768 +[0-9]+ +6 +0 " "$WORK/out.txt" || fail "no row for 768 with 6 trials"
grep -Eq "^ +length +start +middle +end +all positions$" "$WORK/out.txt" || fail "no table by position"
cell='[0-9]+/[0-9]+ = [0-9.]+% \([0-9.]+-[0-9.]+%\)'
grep -Eq "^ +384( +$cell){4}$" "$WORK/out.txt" && grep -Eq "^ +768( +$cell){4}$" "$WORK/out.txt" ||
  fail "no row by position for each length"
[ "$(tail -n 1 "$WORK/out.txt")" = "VERDICT: 131072 tokens: NOT RUN (not among the context lengths 384,768)" ] ||
  fail "the last line is not the VERDICT"
/usr/bin/python3 - "$WORK/seed.json" <<'EOF' || fail "seed JSON check"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["protocol"] == "seed" and j["n_trials"] == 6 and j["verdict"]["result"] == "NOT RUN", j["verdict"]
for t in j["trials"]:
    assert t["position"] == ("start", "middle", "end")[t["trial"] % 3], t
for l in j["lengths"]:
    assert [(c["position"], c["trials"]) for c in l["by_position"]] == [("start", 2), ("middle", 2), ("end", 2)], l
    # One filler per length: the same words in every prompt, whatever the passkey or its place.
    ts = [t for t in j["trials"] if t["context_length"] == l["context_length"]]
    sentence = lambda k: f"The passkey is {k}. Remember it. {k} is the passkey."
    fillers = {" ".join(t["prompt"].replace(sentence(t["passkey"]), "").split()) for t in ts}
    assert len(fillers) == 1 and len({t["filler_words"] for t in ts}) == 1, ts
EOF
ok "--protocol seed: trials spread by i % 3, the table by position, VERDICT NOT RUN without 131072"

# Resumable: 3 trials per length into --trials-jsonl, then 6 with --resume
# runs only the 6 missing ones; the table counts all 12. A partial last line
# (what a run killed mid-write leaves) is cut off.
J="$WORK/trials.jsonl"
"$PK" "${SEED_ARGS[@]}" --n-trials 3 --trials-jsonl "$J" --json-out "$WORK/first.json" >/dev/null 2>"$WORK/err.txt" ||
  fail "the first part of the resumable run failed"
[ "$(wc -l <"$J")" = 7 ] || fail "--trials-jsonl: a header and 6 trials expected, got $(wc -l <"$J") lines"
rc=0; "$PK" "${SEED_ARGS[@]}" --n-trials 6 --trials-jsonl "$J" >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "pass --resume" "$WORK/err.txt" || fail "a non-empty --trials-jsonl without --resume: exit $rc"
rc=0; "$PK" "${SEED_ARGS[@]}" --seed 6 --n-trials 6 --trials-jsonl "$J" --resume >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 2 ] && grep -q "seed 5, this run has 6 (--seed)" "$WORK/err.txt" ||
  fail "--resume with another seed: exit $rc"
printf '{"context_length": 768, "tri' >>"$J"
before=$(generates)
rc=0
"$PK" "${SEED_ARGS[@]}" --n-trials 6 --trials-jsonl "$J" --resume --json-out "$WORK/resumed.json" \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 0 ] || fail "--resume exited $rc"
[ "$(generates)" = $((before + 6)) ] || fail "--resume sent $(($(generates) - before)) Generate calls, 6 expected"
grep -q "resumed 6 of 12 trials" "$WORK/err.txt" || fail "no 'resumed 6 of 12 trials' line"
grep -q "6/6 trials (+6 resumed), .* ETA " "$WORK/err.txt" || fail "no final progress line with the resumed trials"
grep -Eq "^ +384 +[0-9]+ +6 +0 " "$WORK/out.txt" && grep -Eq "^ +768 +[0-9]+ +6 +0 " "$WORK/out.txt" ||
  fail "the table does not count the resumed trials"
tail -n 1 "$WORK/out.txt" | grep -q "^VERDICT: " || fail "no VERDICT after --resume"
[ "$(wc -l <"$J")" = 13 ] || fail "--trials-jsonl after --resume: 13 lines expected, got $(wc -l <"$J")"
/usr/bin/python3 - "$WORK/first.json" "$WORK/resumed.json" "$WORK/seed.json" "$J" <<'EOF' || fail "resume JSON check"
import json, sys
first, resumed, fresh = (json.load(open(p)) for p in sys.argv[1:4])
lines = open(sys.argv[4]).read().splitlines()
assert json.loads(lines[0])["protocol"] == "seed", lines[0][:200]
key = lambda t: (t["context_length"], t["trial"])
assert sorted(key(json.loads(l)) for l in lines[1:]) == sorted(map(key, resumed["trials"])), "one line per trial"
assert resumed["resumed_trials"] == 6, resumed["resumed_trials"]
old = {key(t): t for t in first["trials"]}
assert sum(key(t) in old for t in resumed["trials"]) == 6
for t in resumed["trials"]:
    if key(t) in old:  # taken from the file, not asked again
        assert t == old[key(t)], key(t)
# The same trials as the run of 6 in one go: passkeys, positions, prompts.
same = lambda t: (key(t), t["passkey"], t["position"], t["prompt"])
assert sorted(map(same, resumed["trials"])) == sorted(map(same, fresh["trials"]))
EOF
ok "--resume ran only the 6 missing trials, counted all 12, cut a partial line; another seed or an overwrite refused"

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
# The seed protocol's spread on the trained model: every position scored.
rc=0
"$PK" --router "$ROUTER" --protocol seed --context-lengths 512 --n-trials 6 --concurrency 2 --require-target \
  >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
cat "$WORK/out.txt"
[ "$rc" = 0 ] || fail "--protocol seed on the trained model exited $rc"
two='2/2 = 100.0% \(34.2-100.0%\)'
grep -Eq "^ +512 +$two +$two +$two +6/6 = 100.0% \(61.0-100.0%\)$" "$WORK/out.txt" ||
  fail "not 2/2 at each position and 6/6 in all at 512"
ok "trained model, --protocol seed: 2/2 at start, middle and end"
stop_local_stack

# No router at all: a clear error and exit 1, not a hang. NO_LISTENER (lib.sh),
# not the stopped stack's port: someone else may have bound that one since.
rc=0
timeout 60 "$PK" --router "$NO_LISTENER" --context-lengths 512 --deadline-s 5 >/dev/null 2>"$WORK/err.txt" || rc=$?
[ "$rc" = 1 ] && grep -q "UNAVAILABLE\|DEADLINE_EXCEEDED" "$WORK/err.txt" || fail "no router: exit $rc"
ok "no router exits 1"
echo "PASS"
