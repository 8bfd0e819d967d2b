#!/usr/bin/env bash
# The main job: build, then serve the shipped passkey model
# (models/passkey-4l, trained by pdserve-train on prompts of at most 512
# tokens) with separate router, prefill and decode processes on loopback,
# and ask it for a passkey hidden in a prompt of ~2048 tokens: 4x longer
# than any it was trained on. The prompt comes from pdserve-passkey's own
# builder; the answer travels router -> prefill -> KV hand-off (gRPC) ->
# decode -> router. Prints the passkey that went in and the one that came
# back, then streams the same answer through pdserve-cli.
# Environment: DEMO_LENGTH (tokens, default 2048), DEMO_SEED (default 7),
# DEMO_POSITION (start|middle|end|a depth, default middle), PDSERVE_PORT (the
# router's port; default 0: one the kernel picks, printed below). The workers
# always listen on ports the kernel picks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
MODEL=models/passkey-4l
LENGTH=${DEMO_LENGTH:-2048}
SEED=${DEMO_SEED:-7}
POSITION=${DEMO_POSITION:-middle}
PORT=${PDSERVE_PORT:-0}
B=build
LOGS=$B/demo
mkdir -p "$LOGS"
source scripts/bench_lib.sh
export OMP_WAIT_POLICY=PASSIVE  # three LibTorch processes on a few cores

./$B/clients/pdserve-model-info --config "$MODEL"
bench_spawn ./$B/decode_service/pdserve-decode --model "$MODEL" --listen 127.0.0.1:0 --threads 1 \
  --metrics-port -1 >"$LOGS/decode.log" 2>&1
bench_spawn ./$B/prefill_service/pdserve-prefill --model "$MODEL" --listen 127.0.0.1:0 \
  --metrics-port -1 >"$LOGS/prefill.log" 2>&1
DECODE_PORT=$(bench_port "$LOGS/decode.log")
PREFILL_PORT=$(bench_port "$LOGS/prefill.log")
bench_spawn ./$B/router/pdserve-router --model "$MODEL" --listen "127.0.0.1:$PORT" \
  --prefill "127.0.0.1:$PREFILL_PORT" --decode "127.0.0.1:$DECODE_PORT" --metrics-port -1 --http-listen= \
  >"$LOGS/router.log" 2>&1
PORT=$(bench_port "$LOGS/router.log")
echo "--- router 127.0.0.1:$PORT -> prefill 127.0.0.1:$PREFILL_PORT -> decode 127.0.0.1:$DECODE_PORT (logs in $LOGS/)"

# One passkey trial: pdserve-passkey builds the prompt (sized with the
# router's Tokenize RPC), asks through the router, and checks the answer.
./$B/clients/pdserve-passkey --router "127.0.0.1:$PORT" --context-lengths "$LENGTH" --n-trials 1 --seed "$SEED" \
  --position "$POSITION" --json-out "$LOGS/passkey.json" >"$LOGS/passkey.txt" 2>"$LOGS/passkey.err" ||
  { cat "$LOGS/passkey.txt" "$LOGS/passkey.err"; exit 1; }
/usr/bin/python3 - "$LOGS/passkey.json" "$LOGS/prompt.txt" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["trials"][0]
open(sys.argv[2], "w").write(t["prompt"])
p = t["prompt"]
i = p.find("The passkey is ")
print(f"--- a {t['prompt_tokens']}-token prompt (4x the 512-token training length); the passkey sentence sits at "
      f"byte {i} of {len(p)}:")
print(f"    {p[:90]!r} ...")
print(f"    ... {p[max(0, i - 40):i + 56]!r} ...")
print(f"    ... {p[-80:]!r}")
print(f"passkey inserted:  {t['passkey']}")
print(f"model answered:    {t['answer_text']!r}  ->  {t['extracted']}  "
      f"({'correct' if t['correct'] else 'WRONG'}; TTFT {t['ttft_ms']:.0f} ms, {t['latency_ms']:.0f} ms in all)")
PY
echo "--- the same prompt streamed by pdserve-cli (greedy, 16 tokens):"
./$B/clients/pdserve-cli --router "127.0.0.1:$PORT" --prompt "$(cat "$LOGS/prompt.txt")" --max-new-tokens 16
echo
echo "--- the router's access log (prompt and generated tokens, TTFT, KV bytes handed off prefill -> decode):"
grep -h "^request" "$LOGS/router.log" | tail -2
