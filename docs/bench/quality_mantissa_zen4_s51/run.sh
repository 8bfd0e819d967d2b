#!/usr/bin/env bash
# The teacher-forced quality comparison (pdserve-int8-quality) with the
# compared engine's matmul weights rounded to B mantissa bits, on the 502M
# random checkpoint (seed 1) and on random weights of seed 2, 1,000 steps.
# Zen 4 EPYC, 2 threads, 2026-12-06. About 100 s a line.
set -euo pipefail
# Run from the repository root; outputs land in this folder.
cd "$(dirname "$0")/../../.." && O=docs/bench/quality_mantissa_zen4_s51
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
