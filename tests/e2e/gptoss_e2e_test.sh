#!/usr/bin/env bash
# gpt-oss checkpoints end to end (docs/model.md, "gpt-oss checkpoints"):
# random tiny checkpoints in the Hugging Face layout
# (scripts/make_gptoss_checkpoint.py: MXFP4 experts, sinks, sliding window
# 32, YaRN with original_max_position_embeddings 256), a 300-token prompt
# (past the window and past L0), and pdserve-generate must produce exactly
# the tokens of the independent numpy reference (tests/reference/gpt_oss_ref.py):
# greedy with the whole prompt in one prefill, in chunks of 7, without the
# KV cache, sampled; a short prompt; the checkpoint with the newer
# rope_parameters spelling (the same tokens); another YaRN factor (other
# tokens, the reference's); fp32 norms, sinks and biases; --mxfp4-kernel
# dot (runs; chunking does not change its tokens; a bad value is one line).
# Then the split stack (pdserve-decode,
# pdserve-prefill, pdserve-router, every port 0) serving the same
# checkpoint gives pdserve-generate's tokens through the router.
# Usage: gptoss_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(gen.err)
GEN=$BUILD/clients/pdserve-generate
PY=/usr/bin/python3
REF="$PY $SRC/tests/reference/gpt_oss_ref.py"
MAKE="$PY $SRC/scripts/make_gptoss_checkpoint.py"
N_NEW=24
SAMPLED="--temperature 0.8 --top-p 0.9 --seed 7"
norm() { tr -d ' \n'; }

# gen MODEL PROMPT [ARGS...]: pdserve-generate's {"token_ids":[...]}, or fail with its stderr.
gen() {
  local model=$1 prompt=$2 out
  shift 2
  out=$("$GEN" --model "$model" --prompt-ids "$prompt" --max-new-tokens $N_NEW "$@" 2>"$WORK/gen.err") ||
    fail "pdserve-generate --model $model $* failed: $(tail -n 5 "$WORK/gen.err")"
  echo "$out" | norm
}

# reference_tokens GOT MODEL PROMPT [ARGS...]: the reference's tokens, near ties judged by its float64 run.
# shellcheck source=tests/e2e/reference_tokens.sh
source "$SRC/tests/e2e/reference_tokens.sh"

# check WHAT MODEL PROMPT [ARGS...]: pdserve-generate against the reference
# (which takes ARGS less the engine's --prefill-chunk N).
check() {
  local what=$1 model=$2 prompt=$3 got want
  shift 3
  local ref_args=() a skip=0
  for a in "$@"; do
    if [ $skip = 1 ]; then skip=0; continue; fi
    if [ "$a" = --prefill-chunk ]; then skip=1; continue; fi
    ref_args+=("$a")
  done
  got=$(gen "$model" "$prompt" "$@")
  want=$(reference_tokens "$got" "$model" "$prompt" --max-new-tokens $N_NEW "${ref_args[@]}")
  [ "$got" == "$want" ] || fail "$what [$*]: pdserve $got, reference $want (prompt ${prompt:0:60}...)"
  ok "$what [$*]: identical to the reference: $got"
  RESULT=$got
}

echo "--- a tiny random gpt-oss checkpoint"
$MAKE --preset tiny --out "$WORK/m" --seed 1 >/dev/null
read -r VOCAB WINDOW L0 < <($PY -c '
import json, sys
c = json.load(open(sys.argv[1]))
print(c["vocab_size"], c["sliding_window"], c["rope_scaling"]["original_max_position_embeddings"])' "$WORK/m/config.json")
# 300 ids spread over the whole vocabulary (the high ids: o200k_harmony's specials and padding).
P=$(seq 0 299 | awk -v v="$VOCAB" '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 7919 + 13) % v}')
n=$(tr ',' '\n' <<<"$P" | wc -l)
if [ "$n" -le "$WINDOW" ] || [ "$n" -le "$L0" ]; then fail "prompt of $n tokens does not pass window $WINDOW and L0 $L0"; fi
echo "vocab $VOCAB, sliding window $WINDOW, original_max_position_embeddings $L0, prompt $n tokens"

echo "--- pdserve-generate gives the reference's tokens"
check "greedy, whole prompt" "$WORK/m" "$P"
GREEDY=$RESULT
check "greedy, prefill in chunks of 7" "$WORK/m" "$P" --prefill-chunk 7
[ "$RESULT" == "$GREEDY" ] || fail "chunks of 7 gave $RESULT, the whole prompt $GREEDY"
nc=$(gen "$WORK/m" "$P" --no-cache)
[ "$nc" == "$GREEDY" ] || fail "--no-cache gave $nc, with the cache $GREEDY"
ok "--no-cache gives the cached run's tokens"
# shellcheck disable=SC2086
check "sampled" "$WORK/m" "$P" $SAMPLED
SAMPLED_TOKENS=$RESULT
# shellcheck disable=SC2086
c7=$(gen "$WORK/m" "$P" --prefill-chunk 7 $SAMPLED)
[ "$c7" == "$SAMPLED_TOKENS" ] || fail "sampled, chunks of 7 gave $c7, the whole prompt $SAMPLED_TOKENS"
ok "sampled, chunks of 7: the same tokens"
check "greedy, a 5-token prompt (inside the window)" "$WORK/m" 3,200001,17,99999,4242

bf=$(gen "$WORK/m" "$P" --weights-dtype bf16)
[ "$bf" == "$GREEDY" ] || fail "--weights-dtype bf16 (matrices read from the mapping) gave $bf, f32 $GREEDY"
ok "--weights-dtype bf16 (embedding, head, q and o read from the mapping): f32's tokens"

echo "--- the rope_parameters spelling (rope_theta inside) of the same model"
$MAKE --preset tiny --out "$WORK/rp" --seed 1 --rope-parameters >/dev/null
grep -q '"rope_parameters"' "$WORK/rp/config.json" || fail "no rope_parameters in $(cat "$WORK/rp/config.json")"
if grep -q '"rope_scaling"' "$WORK/rp/config.json"; then fail "rope_scaling still in the rope_parameters config"; fi
rp=$(gen "$WORK/rp" "$P")
[ "$rp" == "$GREEDY" ] || fail "rope_parameters checkpoint gave $rp, the rope_scaling one $GREEDY"
ok "rope_parameters: the rope_scaling checkpoint's tokens"

echo "--- another YaRN factor changes the tokens (the prompt reaches the scaled frequencies), still as the reference"
$MAKE --preset tiny --out "$WORK/f16" --seed 1 --set rope_scaling.factor=16 >/dev/null
check "greedy, YaRN factor 16" "$WORK/f16" "$P"
[ "$RESULT" != "$GREEDY" ] || fail "YaRN factor 16 gave factor 32's tokens: the factor is not read"

echo "--- --mxfp4-kernel dot (activations in int8: other numerics) runs, and its tokens do not depend on the chunking"
d=$(gen "$WORK/m" "$P" --mxfp4-kernel dot)
d7=$(gen "$WORK/m" "$P" --mxfp4-kernel dot --prefill-chunk 7)
[ "$d" == "$d7" ] || fail "--mxfp4-kernel dot: chunks of 7 gave $d7, the whole prompt $d"
nd=$($PY -c 'import json,sys; t=json.loads(sys.argv[1])["token_ids"]; print(len(t) if all(0 <= i < int(sys.argv[2]) for i in t) else -1)' "$d" "$VOCAB")
[ "$nd" -ge 1 ] || fail "--mxfp4-kernel dot gave $d"
ok "--mxfp4-kernel dot: $nd tokens, the same in chunks of 7 (fma gave $GREEDY, dot $d)"
if "$GEN" --model "$WORK/m" --prompt-ids 1,2 --mxfp4-kernel xyz >/dev/null 2>"$WORK/gen.err"; then
  fail "--mxfp4-kernel xyz accepted"
fi
if [ "$(wc -l <"$WORK/gen.err")" -ne 1 ] || ! grep -q "mxfp4" "$WORK/gen.err"; then
  fail "--mxfp4-kernel xyz: expected one line naming the flag: $(cat "$WORK/gen.err")"
fi
ok "--mxfp4-kernel xyz: $(cat "$WORK/gen.err")"

echo "--- a checkpoint with another seed and fp32 norms, sinks and biases"
$MAKE --preset tiny --out "$WORK/f32" --seed 2 --f32 norms,sinks,biases >/dev/null
check "greedy, fp32 small tensors" "$WORK/f32" "$P" --prefill-chunk 64

echo "--- the split stack: pdserve-prefill, pdserve-decode and pdserve-router on port 0"
start_split_stack "$WORK/m"
via_router() {
  "$BUILD/clients/pdserve-cli" --router "$ROUTER" --prompt-ids "$P" --max-new-tokens $N_NEW "$@" --json \
    2>"$WORK/cli.err" | $PY -c 'import json,sys; print(json.dumps({"token_ids": json.load(sys.stdin)["token_ids"]}, separators=(",", ":")))' ||
    fail "pdserve-cli [$*]: $(tail -n 5 "$WORK/cli.err")"
}
E2E_LOGS+=(cli.err)
r=$(via_router)
[ "$r" == "$GREEDY" ] || fail "greedy through the router: $r, pdserve-generate $GREEDY"
ok "greedy through the router: pdserve-generate's tokens"
# shellcheck disable=SC2086
r=$(via_router $SAMPLED)
[ "$r" == "$SAMPLED_TOKENS" ] || fail "sampled through the router: $r, pdserve-generate $SAMPLED_TOKENS"
ok "sampled through the router: pdserve-generate's tokens"
stop_split_stack
echo "PASS"
