#!/usr/bin/env bash
# The teacher-forced quality comparison (pdserve-int8-quality) with the
# compared engine's matmul weights rounded to B mantissa bits, on the 502M
# random checkpoint (seed 1) and on random weights of seed 2, 1,000 steps.
# Zen 4 EPYC, 2 threads, 2026-12-06. About 100 s a line.
set -euo pipefail
# Run from the repository root; outputs land in this folder.
cd "$(dirname "$0")/../../.." && O=docs/bench/quality_mantissa_zen4-epyc_2026-12-06
M=.cache/llama/models/gpt-oss-lite-502m
Q=build/bench/pdserve-int8-quality
for b in 7 16 12 9 20 10 11 13 14; do
  $Q --model $M --dtype f32 --mantissa-bits $b --steps 1000 --threads 2 | tail -1
done > $O/seed1_checkpoint.txt
for b in 7 12 14; do
  $Q --config configs/gpt-oss-lite-502m.json --seed 2 --dtype f32 --mantissa-bits $b --steps 1000 --threads 2 | tail -1
done > $O/seed2_random.txt
$Q --config configs/gpt-oss-lite-502m.json --seed 2 --dtype int8 --steps 1000 --threads 2 | tail -1 >> $O/seed2_random.txt
$Q --config configs/gpt-oss-lite-502m.json --seed 2 --dtype f32 --mantissa-bits 16 --steps 1000 --threads 2 | tail -1 >> $O/seed2_random.txt
# The weights' error alone (one step): int8 (fma) and bf16 on the checkpoint.
for d in int8 bf16; do $Q --model $M --dtype $d --q8-kernel fma --steps 1 --threads 2 | tail -1; done > $O/weight_error_int8_bf16.txt
# Routing taken out: the 502M config with top_k = n_experts (every expert on every token), seed 1.
python3 -c "import json; c = json.load(open('configs/gpt-oss-lite-502m.json')); c['top_k'] = c['n_experts']; c['name'] += '-dense'; json.dump(c, open('/tmp/dense.json', 'w'))"
for a in "--dtype int8 --q8-kernel fma" "--dtype bf16 --bf16-matmul widen" "--dtype f32 --mantissa-bits 10"; do
  $Q --config /tmp/dense.json --seed 1 $a --steps 1000 --threads 2 | tail -1
done > $O/dense_seed1.txt
