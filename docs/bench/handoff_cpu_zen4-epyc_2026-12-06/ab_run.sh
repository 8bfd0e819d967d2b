#!/usr/bin/env bash
# The A/B of docs/benchmarks.md §10 "What the hand-off costs the CPUs": the servers of 8d68104
# (before: git worktree add /tmp/before 8d68104; ninja -C /tmp/before/build pdserve-decode
# pdserve-prefill pdserve-router) against this tree's (after), alternated, with this tree's
# pdserve-ttft-bench. Rounds 3 and 4 of lite ran afterwards, after first, at 2048 tokens only:
#   SERVERS=... bash scripts/bench_ttft.sh .cache/llama/models/gpt-oss-lite-502m bf16 2048 lite_SIDE_rN.csv
cd "$(git rev-parse --show-toplevel)"
for r in 1 2 3; do for side in before after; do
  S=build; [ $side = before ] && S=/tmp/before/build
  SERVERS=$S bash scripts/bench_ttft.sh build/models/small f32 256,1024,4096 /tmp/ab/small_${side}_r$r.csv > /tmp/ab/small_${side}_r$r.txt 2>&1
  echo "$side r$r: $(grep 'server CPU' /tmp/ab/small_${side}_r$r.txt)"
done; done
for r in 1 2; do for side in before after; do
  S=build; [ $side = before ] && S=/tmp/before/build
  SERVERS=$S bash scripts/bench_ttft.sh .cache/llama/models/gpt-oss-lite-502m bf16 512,2048 /tmp/ab/lite_${side}_r$r.csv > /tmp/ab/lite_${side}_r$r.txt 2>&1
  echo "lite $side r$r: $(grep 'server CPU' /tmp/ab/lite_${side}_r$r.txt)"
done; done
echo done
