#!/usr/bin/env bash
# The main job: build, create a small random model, start the local serving
# stack (router + prefill worker + decode worker on loopback) and stream an
# answer to a prompt through pdserve-cli. The stack is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
MODEL=build/models/small
PORT=${PDSERVE_PORT:-50051}
[ -f "$MODEL/model.safetensors" ] || ./build/clients/pdserve-init-model --config configs/small.json --seed 1 --out "$MODEL"
./build/clients/pdserve-model-info --config "$MODEL"

LOG=build/pdserve-local.log
./build/local/pdserve-local --model "$MODEL" --port "$PORT" >"$LOG" 2>&1 &
STACK=$!
trap 'kill -TERM $STACK 2>/dev/null; wait $STACK 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  grep -q "router on" "$LOG" && break
  kill -0 $STACK 2>/dev/null || { cat "$LOG"; echo "demo: pdserve-local exited" >&2; exit 1; }
  sleep 0.1
done
cat "$LOG"

# A random model answers with noise (bytes, and ids >= 256 that have no
# text); the point is the path: router -> prefill -> KV hand-off -> decode.
echo "--- streaming from the router on 127.0.0.1:$PORT"
echo "    (random weights: the text is noise, and ids >= 256 of the byte tokenizer have no text at all)"
./build/clients/pdserve-cli --router "127.0.0.1:$PORT" --prompt "Hello, world! The passkey is 12345." \
  --max-new-tokens 48 --temperature 0.8 --top-p 0.95 --seed 7
echo "--- the same prompt as ids, greedy, as JSON"
./build/clients/pdserve-cli --router "127.0.0.1:$PORT" --prompt-ids 72,101,108,108,111 --max-new-tokens 16 --json
