#!/usr/bin/env bash
# End-to-end test of the command-line tools: real binaries, real checkpoints.
# Checkpoints come from the independent numpy implementation of docs/model.md
# (tests/reference/gpt_oss_lite_ref.py), in F32, BF16 and F16; pdserve must
# generate exactly the tokens that implementation generates.
set -euo pipefail
BUILD=$1
SRC=$2
BIN=$BUILD/clients
PY=/usr/bin/python3
REF="$PY $SRC/tests/reference/gpt_oss_lite_ref.py"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
norm() { tr -d ' \n'; }

echo "--- model-info gives the spec's parameter counts"
info=$("$BIN/pdserve-model-info" --config "$SRC/configs/gpt-oss-lite-502m.json")
echo "$info" | grep -q '"total_params": 501836640' || fail "total_params: $info"
echo "$info" | grep -q '"active_params": 247032672' || fail "active_params: $info"

echo "--- every binary answers --help, and a bad flag fails with one line"
for b in pdserve-model-info pdserve-init-model pdserve-generate; do
  "$BIN/$b" --help >/dev/null || fail "$b --help"
  if "$BIN/$b" --no-such-flag >"$TMP/out" 2>"$TMP/err"; then fail "$b accepted a bad flag"; fi
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$b: expected one error line, got: $(cat "$TMP/err")"
done

echo "--- the servers' --help lists their own flags, not only the shared ones"
for pair in router/pdserve-router:local_prefill_max_tokens prefill_service/pdserve-prefill:max_queue \
            decode_service/pdserve-decode:kv_budget_mb local/pdserve-local:port; do
  b=$BUILD/${pair%%:*}
  "$b" --help >"$TMP/help" || fail "$b --help"
  grep -q -- "--${pair##*:} " "$TMP/help" || fail "$b --help does not list --${pair##*:}: $(cat "$TMP/help")"
  grep -q -- "--kv_dtype\|--decode_dns" "$TMP/help" || fail "$b --help lacks the shared flags"
done

echo "--- --version, --help without build-machine paths"
for b in clients/pdserve-generate router/pdserve-router prefill_service/pdserve-prefill \
         decode_service/pdserve-decode local/pdserve-local bench/pdserve-bench; do
  v=$("$BUILD/$b" --version) || fail "$b --version"
  grep -qE "^pdserve-[a-z-]+ [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]+|unknown\)" <<<"$v" || fail "$b --version: $v"
  "$BUILD/$b" --help >"$TMP/help" || fail "$b --help"
  grep -q "Flags from [a-z_]*/" "$TMP/help" || fail "$b --help names no flag file: $(head -5 "$TMP/help")"
  if grep -q "Flags from /" "$TMP/help"; then fail "$b --help shows a build path: $(grep 'Flags from' "$TMP/help")"; fi
done

echo "--- every flag is also PDSERVE_<FLAG>; the command line wins"
"$BIN/pdserve-init-model" --config "$SRC/configs/tiny.json" --seed 3 --out "$TMP/envm" 2>/dev/null
n_env=$(PDSERVE_MAX_NEW_TOKENS=3 "$BIN/pdserve-generate" --model "$TMP/envm" --prompt-ids 1,2 2>/dev/null | norm)
[ "$(grep -o , <<<"$n_env" | wc -l)" -eq 2 ] || fail "PDSERVE_MAX_NEW_TOKENS=3 gave $n_env"
n_cli=$(PDSERVE_MAX_NEW_TOKENS=3 "$BIN/pdserve-generate" --model "$TMP/envm" --prompt-ids 1,2 --max-new-tokens 5 2>/dev/null | norm)
[ "$(grep -o , <<<"$n_cli" | wc -l)" -eq 4 ] || fail "the command line did not win over the environment: $n_cli"
if PDSERVE_MAX_NEW_TOKENS=abc "$BIN/pdserve-generate" --model "$TMP/envm" --prompt-ids 1 2>"$TMP/err"; then
  fail "accepted PDSERVE_MAX_NEW_TOKENS=abc"
fi
grep -q "PDSERVE_MAX_NEW_TOKENS='abc'" "$TMP/err" || fail "unclear error: $(cat "$TMP/err")"

echo "--- a missing model directory is one clear line"
if "$BIN/pdserve-generate" --model "$TMP/nope" --prompt-ids 1,2 2>"$TMP/err"; then fail "loaded a missing model"; fi
grep -q "does not exist" "$TMP/err" || fail "unexpected error: $(cat "$TMP/err")"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "expected one line: $(cat "$TMP/err")"

echo "--- pdserve-init-model, then cached == --no-cache"
"$BIN/pdserve-init-model" --config "$SRC/configs/tiny.json" --seed 9 --out "$TMP/own" 2>/dev/null
P=3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3,2,3,8,4,6,2
for args in "" "--temperature 0.8 --top-p 0.9 --top-k 50 --seed 7"; do
  a=$("$BIN/pdserve-generate" --model "$TMP/own" --prompt-ids $P --max-new-tokens 64 $args 2>/dev/null | norm)
  b=$("$BIN/pdserve-generate" --model "$TMP/own" --prompt-ids $P --max-new-tokens 64 --no-cache $args 2>/dev/null | norm)
  [ "$a" == "$b" ] || fail "cached != no-cache [$args]: $a vs $b"
  c=$("$BIN/pdserve-generate" --model "$TMP/own" --prompt-ids $P --max-new-tokens 64 --prefill-chunk 3 $args 2>/dev/null | norm)
  [ "$a" == "$c" ] || fail "chunk 3 differs [$args]: $a vs $c"
done

echo "--- pdserve-init-model finds its default tokenizer from its own location, not the working directory"
sed 's/"type": "byte"/"type": "bpe"/' "$SRC/configs/tiny.json" >"$TMP/tiny_bpe.json"
mkdir -p "$TMP/cwd"
# A source tree (build/clients under it) and an install prefix (bin under it).
for layout in "src/build/clients:src/.cache/tokenizers/llama3" "inst/bin:inst/share/pdserve/tokenizers/llama3"; do
  bindir=$TMP/${layout%%:*} tokdir=$TMP/${layout##*:}
  mkdir -p "$bindir" "$tokdir"
  cp "$BIN/pdserve-init-model" "$bindir/"
  echo "{\"marker\": \"$layout\"}" >"$tokdir/tokenizer.json"
  (cd "$TMP/cwd" && env -u PDSERVE_LLAMA3_TOKENIZER_JSON "$bindir/pdserve-init-model" --config "$TMP/tiny_bpe.json" \
     --out "$TMP/bpe_out" 2>"$TMP/err") || fail "init-model ($layout): $(cat "$TMP/err")"
  cmp -s "$tokdir/tokenizer.json" "$TMP/bpe_out/tokenizer.json" || fail "$layout: default tokenizer not copied: $(cat "$TMP/err")"
  rm -rf "$TMP/bpe_out" "$tokdir/tokenizer.json"
  # None anywhere: still a checkpoint, and a warning that says where it looked.
  (cd "$TMP/cwd" && env -u PDSERVE_LLAMA3_TOKENIZER_JSON "$bindir/pdserve-init-model" --config "$TMP/tiny_bpe.json" \
     --out "$TMP/bpe_out" 2>"$TMP/err") || fail "init-model without a tokenizer ($layout): $(cat "$TMP/err")"
  [ -f "$TMP/bpe_out/model.safetensors" ] && [ ! -e "$TMP/bpe_out/tokenizer.json" ] || fail "$layout: unexpected output"
  grep -q "no tokenizer.json copied: .*share/pdserve/tokenizers/llama3/tokenizer.json" "$TMP/err" ||
    fail "$layout: unclear warning: $(cat "$TMP/err")"
  rm -rf "$TMP/bpe_out"
done

# reference_tokens GOT MODEL PROMPT [ARGS...]: the reference's tokens, near ties judged by its float64 run.
# shellcheck source=tests/e2e/reference_tokens.sh
source "$SRC/tests/e2e/reference_tokens.sh"

echo "--- checkpoints written by the independent reference generate the same tokens"
for dt in F32 BF16 F16; do
  $REF init --config "$SRC/configs/tiny.json" --seed 3 --dtype $dt --out "$TMP/ref_$dt" 2>/dev/null
  for args in "" "--temperature 0.8 --top-p 0.9 --top-k 50 --seed 7" "--temperature 1.1 --seed 11"; do
    a=$("$BIN/pdserve-generate" --model "$TMP/ref_$dt" --prompt-ids $P --max-new-tokens 70 $args 2>/dev/null | norm)
    b=$(reference_tokens "$a" "$TMP/ref_$dt" $P --max-new-tokens 70 $args)
    [ "$a" == "$b" ] || fail "$dt [$args]: pdserve $a, reference $b"
    echo "$dt [$args]: identical"
  done
done

echo "--- bf16 weights in memory and a 200-token prompt: prefill GEMMs of more than 32 rows take the default"
echo "    --bf16-matmul (split on AMX CPUs, fp32-accurate; kmajor on AVX-512, else widen) and still give the reference's tokens"
P200=$(seq 0 199 | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 * 37 + 11) % 300}')
for args in "" "--temperature 0.8 --top-p 0.9 --top-k 50 --seed 7"; do
  a=$("$BIN/pdserve-generate" --model "$TMP/ref_BF16" --weights-dtype bf16 --prompt-ids $P200 --max-new-tokens 30 \
      $args 2>/dev/null | norm)
  b=$(reference_tokens "$a" "$TMP/ref_BF16" $P200 --max-new-tokens 30 $args)
  [ "$a" == "$b" ] || fail "BF16 --weights-dtype bf16, 200-token prompt [$args]: pdserve $a, reference $b"
  echo "BF16 --weights-dtype bf16, 200-token prompt [$args]: identical"
done

echo "--- each exact bf16 path named (widen: bf16 widened per call; kmajor: decode from k-major packs,"
echo "    exact products in another summation order) keeps the reference's tokens, with prompts prefilled"
echo "    by the decode kernels (22 tokens) and by GEMMs (200)"
for mode in widen kmajor; do
  for prompt in "$P" "$P200"; do
    for args in "" "--temperature 0.8 --top-p 0.9 --top-k 50 --seed 7"; do
      n=$(echo "$prompt" | tr ',' ' ' | wc -w)
      a=$("$BIN/pdserve-generate" --model "$TMP/ref_BF16" --weights-dtype bf16 --bf16-matmul $mode \
          --prompt-ids $prompt --max-new-tokens 30 $args 2>/dev/null | norm)
      b=$(reference_tokens "$a" "$TMP/ref_BF16" $prompt --max-new-tokens 30 $args)
      [ "$a" == "$b" ] || fail "BF16 $mode, $n-token prompt [$args]: pdserve $a, reference $b"
      echo "BF16 $mode, $n-token prompt [$args]: identical"
    done
  done
done
echo "PASS"
