cd /work/main
M=.cache/llama/models/gpt-oss-lite-502m
for r in 1 2; do
  OMP_WAIT_POLICY=PASSIVE build/bench/pdserve-step-bench --model $M --weights-dtype bf16 --kv-dtype bf16 --threads 2 --batch-sizes 16 --steps 16 --prompt-len 80 --bf16-matmul dot 2>&1 | tail -2 | sed "s/^/r$r engine: /"
  for pb in 0 32 256; do
    WAVES=6 WORKER_ARGS="--bf16-matmul dot --kv-dtype bf16" PREFILL_ARGS="--prefill-batch-tokens $pb" bash scripts/bench_batch.sh $M bf16 128 "16" /tmp/sb/ab_r${r}_pb$pb.json >/dev/null 2>&1
    cp /tmp/bb_p.log /tmp/sb/ab_r${r}_pb$pb.plog
    /usr/bin/python3 -c "
import json,sys; d=json.load(open('/tmp/sb/ab_r${r}_pb$pb.json'))[0]; print('r$r served pb$pb', round(d['output_throughput'],1), 'ttft', {k:round(v,1) for k,v in d['ttft_ms'].items() if k in ('mean','p99')}, 'tpot', round(d['tpot_ms']['mean'],1), 'dur', round(d['duration_s'],2))"
  done
done
date
