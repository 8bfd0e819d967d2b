#!/usr/bin/env bash
# pdserve-train for real, on a tiny config (a few seconds, never the shipped
# model): the loss goes down, the BF16 export serves through
# pdserve-generate, a run killed with SIGKILL and resumed continues exactly
# as an uninterrupted run, and bad input gets a clear error.
# Usage: train_smoke_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/../e2e/lib.sh"
e2e_init "$@"
E2E_LOGS=(a.log b.log err.txt)
TRAIN="$BUILD/train/pdserve-train"

"$TRAIN" --help >/dev/null || fail "--help did not exit 0"
ok "--help exits 0"

# A tiny byte model: window 8, so 300-byte prompts wrap the rings.
sed 's/"max_context": 4096/"max_context": 1024/' "$SRC/configs/tiny.json" >"$WORK/tiny.json"
ARGS=(--config "$WORK/tiny.json" --seed 3 --threads 2 --matmul-dtype f32 --steps 20 --batch-size 4
      --train-tokens 300 --lr 3e-3 --warmup-steps 3 --checkpoint-every 5 --log-every 5 --eval-every 0
      --eval-examples 4 --eval-lengths 300)

"$TRAIN" "${ARGS[@]}" --out "$WORK/a" >"$WORK/a.log" 2>&1 || fail "training run exited $?"
grep -q "^step 20/20 .*tok/s.*ETA" "$WORK/a.log" || fail "no progress line for step 30"
grep -q "eval step 20: passkey at 300 tokens" "$WORK/a.log" || fail "no evaluation line"
/usr/bin/python3 - "$WORK/a/loss.csv" <<'PY' || fail "the loss did not go down"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["step"]) for r in rows] == list(range(1, 21)), [r["step"] for r in rows]
first = sum(float(r["loss"]) for r in rows[:4]) / 4
last = sum(float(r["loss"]) for r in rows[-4:]) / 4
print(f"loss {first:.3f} -> {last:.3f}")
assert last < 0.8 * first, (first, last)
PY
ok "loss goes down; loss.csv has every step"

for f in checkpoint/config.json checkpoint/model.safetensors checkpoint/optimizer.pt checkpoint/train_state.json \
         final/config.json final/model.safetensors eval.csv; do
  [ -s "$WORK/a/$f" ] || fail "missing $f"
done
"$BUILD/clients/pdserve-generate" --model "$WORK/a/final" --prompt-ids 84,104,101 --max-new-tokens 4 \
  >"$WORK/gen.json" 2>"$WORK/err.txt" || fail "pdserve-generate on the BF16 export"
grep -Eq '^\{"token_ids":\[[0-9]+(,[0-9]+){3}\]\}$' "$WORK/gen.json" || fail "generate output: $(cat "$WORK/gen.json")"
ok "checkpoint/ and final/ written; final/ (BF16) serves"

# Killed after a checkpoint, then resumed: the same losses as run a.
"$TRAIN" "${ARGS[@]}" --out "$WORK/b" >"$WORK/b.log" 2>&1 &
PID=$!
for _ in $(seq 1 600); do
  [ -f "$WORK/b/checkpoint/train_state.json" ] && break
  kill -0 $PID 2>/dev/null || break
  sleep 0.05
done
kill -KILL $PID 2>/dev/null || true
wait $PID 2>/dev/null || true
[ -f "$WORK/b/checkpoint/train_state.json" ] || fail "no checkpoint before the kill"
echo "killed at checkpoint $(cat "$WORK/b/checkpoint/train_state.json")"
"$TRAIN" "${ARGS[@]}" --out "$WORK/b" --resume "$WORK/b/checkpoint" >>"$WORK/b.log" 2>&1 || fail "resume exited $?"
/usr/bin/python3 - "$WORK/a/loss.csv" "$WORK/b/loss.csv" <<'PY' || fail "the resumed run differs"
import csv, sys
def losses(path):
    out = {}
    for r in csv.DictReader(open(path)):  # a resumed step's last row wins
        out[int(r["step"])] = (r["lr"], r["loss"], r["answer_loss"], r["lm_loss"], r["grad_norm"])
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(b) == list(range(1, 21)), sorted(b)
bad = [s for s in a if a[s] != b[s]]
assert not bad, [(s, a[s], b[s]) for s in bad[:3]]
PY
ok "killed and resumed: every step's loss equals the uninterrupted run's"

expect_error() {  # expect_error CODE PATTERN ARGS...
  local code=$1 pattern=$2 rc=0
  shift 2
  "$TRAIN" "$@" >"$WORK/err.txt" 2>&1 || rc=$?
  [ "$rc" = "$code" ] || fail "$* exited $rc, expected $code"
  grep -q -- "$pattern" "$WORK/err.txt" || fail "$*: no '$pattern' in: $(cat "$WORK/err.txt")"
  ok "refused ($rc): $(tail -1 "$WORK/err.txt" | cut -c1-150)"
}
sed 's/"n_heads": 4/"n_heads": 3/' "$WORK/tiny.json" >"$WORK/bad.json"
expect_error 2 "n_heads" --config "$WORK/bad.json" --out "$WORK/c"
sed 's/"d_model": 64/"d_model": 32/' "$WORK/tiny.json" >"$WORK/other.json"
expect_error 1 "d_model" --config "$WORK/other.json" --seed 3 --out "$WORK/c" --resume "$WORK/a/checkpoint"
expect_error 1 "seed 3, not 4" --config "$WORK/tiny.json" --seed 4 --out "$WORK/c" --resume "$WORK/a/checkpoint"
expect_error 2 "max_context" --config "$WORK/tiny.json" --out "$WORK/c" --train-tokens 2000
expect_error 2 "passkey prompt without filler" --config "$WORK/tiny.json" --out "$WORK/c" --train-tokens 100
sed 's/"type": "byte"/"type": "char"/' "$WORK/tiny.json" >"$WORK/char.json"
expect_error 2 "byte" --config "$WORK/char.json" --out "$WORK/c"
expect_error 1 "train_state.json" --config "$WORK/tiny.json" --out "$WORK/c" --resume "$WORK/nowhere"
echo "PASS"
