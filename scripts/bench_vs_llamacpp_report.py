#!/usr/bin/python3
"""The parsing and reporting half of scripts/bench_vs_llamacpp.sh.

  parse KIND FILE [ROW]   prints the tokens/s a tool's output holds, one per line:
                          llama-bench (jsonl; "ROW fa t/s", %p in ROW = prompt length),
                          batched-tg, batched-pp (llama-batched-bench jsonl: S_TG, S_PP), decode
                          (pdserve-decode-bench: tok/s of the cached run), step
                          (pdserve-step-bench: tok/s), ttft (pdserve-ttft-bench CSV:
                          "len prefill-t/s"), bandwidth (pdserve-decode-bench: GB/s)
  report --csv ...        table.md (work | llama.cpp | pdserve | ratio | floor | target | met?)
                          and decode_vs_depth.png from the measurements CSV

Run with the Debian interpreter (numpy, matplotlib).
"""
import argparse
import csv
import json
import os
import re
import sys
from collections import defaultdict

# ---- parse ---------------------------------------------------------------


def json_lines(path):
    with open(path, errors="replace") as f:
        for line in f:
            i = line.find("{")
            if i < 0:
                continue
            try:
                yield json.loads(line[i:])
            except ValueError:
                continue


def parse_llama_bench(path, row):
    for j in json_lines(path):
        if "avg_ts" not in j:
            continue
        fa = {1: "on", 0: "off"}.get(int(j.get("flash_attn", -1)), "auto")
        print(row.replace("%p", str(j.get("n_prompt", 0))), fa, f"{float(j['avg_ts']):.3f}")


def parse_batched(path, key):
    for j in json_lines(path):
        if key in j:
            print(f"{float(j[key]):.3f}")


def parse_decode(path):
    text = open(path, errors="replace").read()
    m = re.search(r"cached decode.*?\n.*?\n\s+\d+\s+([\d.]+)\s", text)
    if m:
        print(m.group(1))


def parse_step(path):
    for line in open(path, errors="replace"):
        m = re.match(r"\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+", line)
        if m:
            print(m.group(3))


def parse_ttft(path):
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("single_ttft_ms"):
                n = int(r["prompt_len"])
                print(n, f"{n / float(r['single_ttft_ms']) * 1e3:.3f}")


def parse_bandwidth(path):
    m = re.search(r"read bandwidth[^:]*: ([\d.]+) GB/s", open(path, errors="replace").read())
    print(m.group(1) if m else "0")


# ---- the floor -----------------------------------------------------------

BYTES = {"f32": 4.0, "bf16": 2.0, "q8": 34.0 / 32}  # Q8_0: 32 int8 + an f16 scale per block


class Shape:
    def __init__(self, c):
        self.V, self.D, self.L = c["vocab_size"], c["d_model"], c["n_layers"]
        self.H, self.K, self.d = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.E, self.top_k, self.S = c["n_experts"], c["top_k"], c.get("n_shared_experts", 1)
        self.F, self.W = c["expert_hidden"], c["window"]
        tied = c.get("tie_embeddings", True)
        attn = 2 * self.H * self.d * self.D + 2 * self.K * self.d * self.D + self.H
        self.expert = 3 * self.F * self.D
        layer = 2 * self.D + attn + self.E * self.D + (self.E + self.S) * self.expert
        self.total = self.V * self.D * (1 if tied else 2) + self.D + self.L * layer
        self.active = self.total - self.L * (self.E - self.top_k) * self.expert

    def kv_bytes(self, pos, elem=2):
        rows = sum(min(pos + 1, self.W) if l % 2 == 0 else pos + 1 for l in range(self.L))
        return rows * 2 * self.K * self.d * elem

    def ceiling(self, bw_gbs, dtype, depth, new, batch=1):
        """Tokens/s if a step only read its weights and KV at bw_gbs (decode rows)."""
        used = min(self.E, batch * self.top_k)
        weights = (self.active + (used - self.top_k) * self.L * self.expert) * BYTES[dtype]
        ms = [(weights + batch * self.kv_bytes(depth + i)) / (bw_gbs * 1e9) * 1e3 for i in range(new)]
        return batch * 1e3 / (sum(ms) / len(ms))


# ---- rows ----------------------------------------------------------------


def bf16_decode_rows(mode):
    """The BF16 decode rows for pdserve run with --bf16-matmul MODE (tool names end in " MODE")."""
    return [
        ("decode_d32_bf16", f"pdserve-decode-bench {mode}", f"decode, batch 1, depth 32, BF16, pdserve {mode}", 1.15,
         ("bf16", 32, 64, 1)),
        ("decode_d32_bf16", f"pdserve-step-bench B=1 {mode}",
         f"decode, batch 1, depth 32, BF16 (step B=1), pdserve {mode}", 1.15, ("bf16", 32, 32, 1)),
        ("decode_d4096_bf16", f"pdserve-decode-bench {mode}", f"decode at depth 4096, BF16, pdserve {mode}", 1.5,
         ("bf16", 4096, 32, 1)),
        ("decode_b16_bf16", f"pdserve-step-bench B=16 {mode}", f"decode, 16 sequences, BF16, pdserve {mode}", 2.0,
         ("bf16", 32, 32, 16)),
    ]


# (csv row, pdserve tool, label, target ratio, floor (dtype, depth, new, batch) or None, target text)
ROWS = [
    ("decode_d32_f32", "pdserve-decode-bench", "decode, batch 1, depth 32, F32", 1.15, ("f32", 32, 64, 1)),
    ("decode_d32_f32", "pdserve-step-bench B=1", "decode, batch 1, depth 32, F32 (step B=1)", 1.15,
     ("f32", 32, 32, 1)),
    ("decode_d32_bf16", "pdserve-decode-bench", "decode, batch 1, depth 32, BF16", 1.15, ("bf16", 32, 64, 1)),
    ("decode_d32_bf16", "pdserve-step-bench B=1", "decode, batch 1, depth 32, BF16 (step B=1)", 1.15,
     ("bf16", 32, 32, 1)),
    ("decode_d4096_bf16", "pdserve-decode-bench", "decode at depth 4096, BF16", 1.5, ("bf16", 4096, 32, 1)),
    ("decode_d32768_bf16", "pdserve-decode-bench", "decode at depth 32768, BF16", 1.5, ("bf16", 32768, 32, 1)),
    ("decode_b16_bf16", "pdserve-step-bench B=16", "decode, 16 sequences, BF16 (S_TG vs engine step)", 2.0,
     ("bf16", 32, 32, 16)),
    ("prefill_512_f32", "pdserve-ttft-bench", "prefill 512 tokens, F32", 2.5, None),
    ("prefill_512_bf16", "pdserve-ttft-bench", "prefill 512 tokens, BF16", 2.5, None),
    ("prefill_4096_f32", "pdserve-ttft-bench", "prefill 4096 tokens, F32", 2.5, None),
    ("prefill_4096_bf16", "pdserve-ttft-bench", "prefill 4096 tokens, BF16", 2.5, None),
    ("decode_d32_q8", "pdserve-decode-bench fma", "decode, batch 1, depth 32, Q8_0 vs pdserve int8 fma kernel",
     1.15, ("q8", 32, 64, 1)),
    ("decode_b16_q8", "pdserve-step-bench B=16 fma", "decode, 16 sequences, Q8_0 vs pdserve int8 fma kernel", 2.0,
     ("q8", 32, 32, 16)),
    ("decode_d32_q8", "pdserve-decode-bench dot", "decode, batch 1, depth 32, Q8_0 vs pdserve int8 dot kernel",
     1.15, ("q8", 32, 64, 1)),
    ("decode_b16_q8", "pdserve-step-bench B=16 dot", "decode, 16 sequences, Q8_0 vs pdserve int8 dot kernel", 2.0,
     ("q8", 32, 32, 16)),
    ("prefill_512_q8", "pdserve-ttft-bench dot", "prefill 512 tokens, Q8_0 vs pdserve int8 dot kernel", None, None),
    # pdserve --bf16-matmul kmajor, where auto is not kmajor (AMX CPUs: split; AVX2-only CPUs: widen).
    *bf16_decode_rows("kmajor"),
    # pdserve --bf16-matmul widen (bf16 weights widened per call: the default before kmajor), where auto is kmajor.
    *bf16_decode_rows("widen"),
    # pdserve --bf16-matmul dot (activations rounded to bf16, as llama.cpp's BF16 path; opt-in, AVX512-BF16
    # CPUs only: rows without a pdserve value where the CPU lacks it).
    *bf16_decode_rows("dot"),
    ("prefill_512_bf16", "pdserve-ttft-bench dot", "prefill 512 tokens, BF16, pdserve dot", 2.5, None),
    ("prefill_4096_bf16", "pdserve-ttft-bench dot", "prefill 4096 tokens, BF16, pdserve dot", 2.5, None),
    # pdserve --f32-packed-weights (layer weights packed at load as fp32 for oneDNN's GEMM; opt-in: fp32
    # weights held twice, bf16 ones held three times their size; bf16 on the exact widen path).
    ("prefill_512_f32", "pdserve-ttft-bench packed", "prefill 512 tokens, F32, pdserve packed weights", 2.5, None),
    ("prefill_4096_f32", "pdserve-ttft-bench packed", "prefill 4096 tokens, F32, pdserve packed weights", 2.5,
     None),
    ("prefill_512_bf16", "pdserve-ttft-bench packed", "prefill 512 tokens, BF16 exact, pdserve packed weights",
     2.5, None),
    ("prefill_4096_bf16", "pdserve-ttft-bench packed", "prefill 4096 tokens, BF16 exact, pdserve packed weights",
     2.5, None),
]
DEPTH_ROWS = {"decode_d4096_bf16", "decode_d32768_bf16"}
FLOOR_FACTOR = 1.3  # depth rows: pdserve within 1.3x of the floor


def load(path):
    """{(row, side): {round: (value, setting)}} with llama.cpp's best setting per round, and
    {round: read bandwidth GB/s}."""
    data, bw = defaultdict(dict), {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rnd, v = int(r["round"]), float(r["value"])
            if r["row"] == "bandwidth":
                bw.setdefault(rnd, v)
                continue
            key = (r["row"], "llama.cpp" if r["side"] == "llama.cpp" else r["tool"])
            old = data[key].get(rnd)
            if old is None or v > old[0]:
                data[key][rnd] = (v, r["setting"])
    return data, bw


def rng(values, fmt="{:.1f}"):
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def table_row(row, tool, label, target, floor, data, shape, bw):
    llama, pd = data.get((row, "llama.cpp"), {}), data.get((row, tool), {})
    ll_vals = [v for v, _ in llama.values()]
    fa = sorted({s for _, s in llama.values()})
    pd_vals = [v for v, _ in pd.values()]
    ratios = [pd[r][0] / llama[r][0] for r in pd if r in llama and llama[r][0] > 0]
    floor_txt, floor_ok = "", True
    if floor and bw:
        # Each round against its own bandwidth (it moves by a third between runs on shared hosts).
        mean = sum(bw.values()) / len(bw)
        ceils = {r: shape.ceiling(bw.get(r, mean), *floor) for r in set(bw) | set(pd)}
        floor_txt = rng(list(ceils.values()))
        if pd_vals:
            dist = [ceils[r] / pd[r][0] for r in pd]
            floor_txt += f" (pdserve at {rng(dist, '{:.2f}')}× floor)"
            if row in DEPTH_ROWS:
                floor_ok = max(dist) <= FLOOR_FACTOR
    if target is None:
        tgt, met = "–", "–"
    else:
        tgt = f"≥ {target:g}×" + (f", ≤ {FLOOR_FACTOR:g}× floor" if row in DEPTH_ROWS else "")
        met = "n/a" if not ratios else ("yes" if min(ratios) >= target and floor_ok else "no")
    pd_txt = rng(pd_vals) if pd_vals else "n/a"
    ratio_txt = rng(ratios, "{:.2f}×") if ratios else "–"
    return (f"| {label} | {rng(ll_vals)} ({', '.join(fa) or '–'}) | {pd_txt} (`{tool}`) | {ratio_txt} "
            f"| {floor_txt or '–'} | {tgt} | {met} |")


def cpu_info():
    model, flags = "unknown", set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    have = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
            if f in flags]
    return model, have


def header(a, bw, shape):
    model, flags = cpu_info()
    cores = os.cpu_count()
    build = "GGML_NATIVE=ON" if a.isa == "native" else \
        "GGML_NATIVE=OFF GGML_AVX2=ON (AVX2 + FMA + F16C only); pdserve under PDSERVE_ISA=avx2"
    return [
        f"- machine: {model}, {cores} logical CPUs; flags: {', '.join(flags) or 'none of avx2/avx512/amx'}; "
        f"read bandwidth (pdserve-decode-bench, per round): {rng(list(bw.values()))} GB/s",
        f"- llama.cpp {a.llama_commit[:12]} (from npm node-llama-cpp {a.node_llama_cpp}), CPU only, "
        f"{build}; both sides {a.threads} thread{'s' if a.threads != '1' else ''}; {a.rounds} interleaved "
        "rounds "
        f"(llama.cpp, pdserve per row){'; QUICK=1 (no depth 32768)' if a.quick == '1' else ''}; "
        f"measuring took {int(a.seconds) // 60} min",
        f"- model: {a.model_name} ({shape.total / 1e6:.1f}M parameters, {shape.active / 1e6:.1f}M active per "
        "token), the pdserve checkpoint (random weights) converted by scripts/pdserve_to_gguf.py; "
        "what differs: routing math (llama.cpp: 9 experts top-3 with the shared expert as an always-picked "
        "routed one, softmax over 3 gates, gpt-oss's clamped SwiGLU and zero biases; pdserve: 8 top-2 + "
        "1 shared, same active bytes), no rotary identity pairs in llama.cpp, KV cache f16 (llama.cpp) vs "
        "bf16 (pdserve), flash attention: llama.cpp's faster of on/off per round (named in the llama.cpp "
        "column; both settings at every depth), pdserve has none to choose",
        "- decode batch 1 = llama-bench tg64 at depth 32 / tg32 at depth 4096 and 32768 vs "
        "pdserve-decode-bench (and pdserve-step-bench B=1); 16 sequences = llama-batched-bench S_TG "
        "(32 prompt + 32 generated each) vs pdserve-step-bench B=16; prefill = llama-bench pp vs "
        "pdserve-ttft-bench in process (prompt / TTFT)",
        "- floor = tokens/s if a step read only its active weights and the KV rows once at the measured "
        "bandwidth ((active weight bytes + KV bytes read) / bandwidth; for 16 sequences every expert "
        "once and 16 sequences' KV); pdserve's distance to it in parentheses",
    ]


def plot(data, shape, bw, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(32, "decode_d32_bf16"), (4096, "decode_d4096_bf16"), (32768, "decode_d32768_bf16")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for side, style in (("llama.cpp", "o-"), ("pdserve-decode-bench", "s-")):
        xs, mean, lo, hi = [], [], [], []
        for depth, row in rows:
            vals = [v for v, _ in data.get((row, side), {}).values()]
            if vals:
                xs.append(depth)
                mean.append(sum(vals) / len(vals))
                lo.append(mean[-1] - min(vals))
                hi.append(max(vals) - mean[-1])
        if xs:
            label = "llama.cpp (best fa)" if side == "llama.cpp" else "pdserve (decode-bench)"
            ax.errorbar(xs, mean, yerr=[lo, hi], fmt=style, capsize=4, label=label)
    depths = [d for d, row in rows if any(k[0] == row for k in data)]
    if bw and depths:
        ax.plot(depths, [shape.ceiling(sum(bw.values()) / len(bw), "bf16", d, 32) for d in depths], "k--",
                label="floor (bandwidth bound)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context depth (tokens)")
    ax.set_ylabel("decode tokens/s (batch 1, BF16 weights)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def report(a):
    data, bw = load(a.csv)
    with open(a.config) as f:
        config = json.load(f)
    shape, a.model_name = Shape(config), config.get("name", "?")
    lines = ["# pdserve vs llama.cpp, side by side", "",
             "Generated by `scripts/bench_vs_llamacpp.sh` (do not edit by hand).", ""]
    lines += header(a, bw, shape) + [""]
    lines += ["| work (tokens/s) | llama.cpp range (fa) | pdserve range | pdserve / llama.cpp | "
              "floor t/s | target | met? |", "|---|---|---|---|---|---|---|"]
    for row, tool, label, target, floor in ROWS:
        if a.quick == "1" and row == "decode_d32768_bf16":
            continue
        lines.append(table_row(row, tool, label, target, floor, data, shape, bw))
    if a.int8 != "1":
        lines += ["", "pdserve int8 rows are n/a: this build's benches do not accept `--weights-dtype int8`."]
    lines += ["", "Prefill also has a target of 75% of the machine's sgemm peak (`scripts/sgemm_peak.sh`), "
              "not measured by this script."]
    with open(os.path.join(a.out_dir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(data, shape, bw, os.path.join(a.out_dir, "decode_vs_depth.png"),
         f"pdserve vs llama.cpp, {a.model_name}, {a.threads} thread(s): decode against depth")
    print("\n".join(lines))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "parse":
        kind, path = sys.argv[2], sys.argv[3]
        {"llama-bench": lambda: parse_llama_bench(path, sys.argv[4] if len(sys.argv) > 4 else "row"),
         "batched-tg": lambda: parse_batched(path, "speed_tg"),
         "batched-pp": lambda: parse_batched(path, "speed_pp"), "decode": lambda: parse_decode(path),
         "step": lambda: parse_step(path), "ttft": lambda: parse_ttft(path),
         "bandwidth": lambda: parse_bandwidth(path)}[kind]()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["report"])
    for flag in ("--csv", "--config", "--out-dir", "--llama-commit", "--node-llama-cpp", "--threads",
                 "--rounds", "--quick", "--int8", "--seconds", "--isa"):
        ap.add_argument(flag, required=True)
    report(ap.parse_args())


if __name__ == "__main__":
    main()
