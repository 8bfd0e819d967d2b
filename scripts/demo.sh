#!/usr/bin/env bash
# The main job: build, create a small random model, and run a cached
# generation from it (the local serving stack replaces this in a later issue).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
MODEL=build/models/small
[ -f "$MODEL/model.safetensors" ] || ./build/clients/pdserve-init-model --config configs/small.json --seed 1 --out "$MODEL"
./build/clients/pdserve-model-info --config "$MODEL"
./build/clients/pdserve-generate --model "$MODEL" --prompt-ids 72,101,108,108,111,44,32,119,111,114,108,100 \
  --max-new-tokens 32 --temperature 0.8 --top-p 0.95 --seed 7
