#!/usr/bin/env python3
"""Prefill throughput and peak memory against --prefill-chunk, interleaved.

Runs pdserve-ttft-bench in process (one trial, after its own short warmup)
for every (round, dtype, chunk), in that nesting, so each round sees every
setting once and the VM's drift spreads over all of them. While the prefill
runs, samples the process's VmRSS every 50 ms: "peak" is the largest sample
after the warmup (the load's transient peak is left out). Prints one line
per run and a summary (range over rounds) per dtype and chunk.

Usage: scripts/bench_prefill_chunk.py [--model DIR] [--rounds 3]
         [--chunks 512,1024,2048,4096] [--dtypes f32,bf16] [--prompt-len 4096]
         [--build build]
About 25 s a run for the 502M model at 4096 tokens on 2 cores, so the
defaults take ~10 min. Not in CI (timings). docs/benchmarks.md §6.
"""
import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_one(bench, model, dtype, chunk, prompt_len):
    proc = subprocess.Popen(
        ["stdbuf", "-oL", str(bench), "--model", str(model), "--weights-dtype", dtype,
         "--prompt-lens", str(prompt_len), "--trials", "1", "--prefill-chunk", str(chunk)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    state = {"after_warmup": False, "peak_mib": 0, "done": False}

    def sample():
        while not state["done"]:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS") and state["after_warmup"]:
                            state["peak_mib"] = max(state["peak_mib"], int(line.split()[1]) // 1024)
            except OSError:
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    ms, tail = None, []
    for line in proc.stdout:
        tail = (tail + [line])[-20:]
        if line.startswith("single: warmup"):
            state["after_warmup"] = True
        m = re.match(r"single len=\d+ trial 1/1: ([\d.]+) ms", line)
        if m:
            ms = float(m.group(1))
    rc = proc.wait()
    state["done"] = True
    sampler.join()
    if rc != 0 or ms is None:
        sys.exit(f"pdserve-ttft-bench failed (exit {rc}, {dtype}, chunk {chunk}):\n" + "".join(tail))
    return ms, state["peak_mib"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / ".cache/llama/models/gpt-oss-lite-502m"),
                    help="pdserve checkpoint directory (default: the side-by-side benchmark's 502M model)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunks", default="512,1024,2048,4096")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--prompt-len", type=int, default=4096)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    bench = Path(a.build) / "bench" / "pdserve-ttft-bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build it first (bash scripts/build.sh)")
    if not (Path(a.model) / "config.json").exists():
        sys.exit(f"{a.model}: no config.json (make a checkpoint with pdserve-init-model, or run "
                 "scripts/bench_vs_llamacpp.sh once)")
    chunks = [int(c) for c in a.chunks.split(",")]
    dtypes = a.dtypes.split(",")
    results = {}
    for r in range(a.rounds):
        for dtype in dtypes:
            for chunk in chunks:
                ms, peak = run_one(bench, a.model, dtype, chunk, a.prompt_len)
                tps = a.prompt_len / ms * 1e3
                results.setdefault((dtype, chunk), []).append((tps, peak))
                print(f"round {r + 1} {dtype} chunk {chunk}: {ms:.0f} ms = {tps:.1f} t/s; "
                      f"peak RSS after warmup {peak} MiB", flush=True)
    print(f"\n{a.prompt_len}-token prefill, {a.rounds} rounds (t/s range; peak RSS range, MiB)")
    for dtype in dtypes:
        for chunk in chunks:
            rows = results[(dtype, chunk)]
            t = [x[0] for x in rows]
            p = [x[1] for x in rows]
            print(f"  {dtype:5} chunk {chunk:5}: {min(t):6.1f}-{max(t):6.1f} t/s; {min(p)}-{max(p)} MiB")


if __name__ == "__main__":
    main()
