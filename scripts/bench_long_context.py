#!/usr/bin/env python3
"""The measuring half of scripts/bench_long_context.sh (which starts the servers).

Sends one request of --length tokens to the router (a passkey prompt through
pdserve-passkey, or random token ids through pdserve-cli), polls the decode
worker's /metrics while it runs (its KV reservation and allocation for the
sequence), then reads every server's counters and peak RSS (VmHWM) and writes
OUT/result.json and OUT/result.md (also printed).
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def scrape(addr):
    """/metrics at addr as {name: value summed over label sets}."""
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def delta(before, after, name):
    return after.get(name, 0.0) - before.get(name, 0.0)


def proc_memory(pid):
    """VmHWM and VmRSS of pid in bytes, from /proc/PID/status."""
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                got[key] = int(rest.split()[0]) * 1024
    return got


def reset_peak(pid):
    """Restarts VmHWM from the current RSS (clear_refs 5, Linux >= 4.0): the load's peak is gone."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def memory_estimate(log):
    """The 'memory estimate X: ...' line a worker printed at load, and X in bytes."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    with open(log) as f:
        for line in f:
            m = re.search(r"memory estimate ([0-9.]+) (B|KiB|MiB|GiB|TiB): (.*)", line)
            if m:
                return {"bytes": int(float(m.group(1)) * units[m.group(2)]), "line": m.group(0).strip()}
    return None


def kv_layout(build, model, kv_dtype):
    """Rows per token and ring rows, and bytes per row of one layer, from pdserve-model-info."""
    info = json.loads(subprocess.run([f"{build}/clients/pdserve-model-info", "--config", model],
                                     check=True, capture_output=True, text=True).stdout)
    config = json.load(open(os.path.join(model, "config.json")))
    row = info["kv_bytes_per_token_per_layer"] * (2 if kv_dtype == "f32" else 1)  # model-info counts bf16
    return {"global_layers": info["global_layers"], "windowed_layers": info["windowed_layers"],
            "window": config["window"], "row_bytes": row, "max_context": config["max_context"],
            "vocab_size": config["vocab_size"]}


def kv_bytes(layout, t):
    """(mixed, all-global) KV bytes of a sequence of t positions (docs/benchmarks.md §9)."""
    mixed_rows = layout["global_layers"] * t + layout["windowed_layers"] * min(t, layout["window"])
    all_rows = (layout["global_layers"] + layout["windowed_layers"]) * t
    return mixed_rows * layout["row_bytes"], all_rows * layout["row_bytes"]


def client_command(args, layout, prompt_len):
    """The client's command line for one request of prompt_len tokens."""
    if args.kind == "passkey":
        return [f"{args.build}/clients/pdserve-passkey", "--router", args.router, "--context-lengths",
                str(prompt_len), "--n-trials", "1", "--position", "middle", "--seed", "0",
                "--max-new-tokens", str(args.new_tokens), "--target", "1.0",
                "--json-out", os.path.join(args.out, "passkey.json")]
    rng = random.Random(prompt_len)
    ids = [rng.randrange(1000, min(100000, layout["vocab_size"])) for _ in range(prompt_len)]
    flags = os.path.join(args.out, "prompt.flags")  # longer than one argument may be (128 KiB)
    with open(flags, "w") as f:
        f.write("--prompt_ids=" + ",".join(map(str, ids)) + "\n")
    return [f"{args.build}/clients/pdserve-cli", "--router", args.router, "--flagfile", flags,
            "--max-new-tokens", str(args.new_tokens), "--ignore-eos", "--json"]


def run_polling(cmd, decode_addr, out_path):
    """Runs cmd to its end, polling the decode worker's KV gauges; the peaks and wall time."""
    peaks = {"pdserve_decode_kv_bytes_used": 0.0, "pdserve_decode_kv_bytes_allocated": 0.0}
    start = time.monotonic()
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            m = scrape(decode_addr)
            for k in peaks:
                peaks[k] = max(peaks[k], m.get(k, 0.0))
            time.sleep(0.02)
    return proc.returncode, time.monotonic() - start, peaks


def client_result(args, out_path):
    """TTFT, e2e, tokens and (passkey) correctness from the client's own report."""
    if args.kind == "passkey":
        trial = json.load(open(os.path.join(args.out, "passkey.json")))["trials"][0]
        if trial["error"]:
            sys.exit(f"bench_long_context: the request failed: {trial['error']}")
        return {"prompt_tokens": trial["usage_prompt_tokens"], "generated_tokens": trial["tokens"],
                "ttft_s": trial["ttft_ms"] / 1e3, "e2e_s": trial["latency_ms"] / 1e3,
                "passkey": trial["passkey"], "answer": trial["answer_text"], "correct": trial["correct"],
                "error": trial["error"]}
    text = open(out_path).read()
    reply = json.loads(text[text.index("{"):text.rindex("}") + 1])
    u = reply["usage"]
    return {"prompt_tokens": u["prompt_tokens"], "generated_tokens": u["generated_tokens"],
            "ttft_s": u["ttft_ns"] / 1e9, "e2e_s": u["e2e_ns"] / 1e9, "finish_reason": reply["finish_reason"]}


def measure(args, layout, prompt_len):
    addrs = dict(a.split("=", 1) for a in args.metrics)
    before = {k: scrape(v) for k, v in addrs.items()}
    # Each process's peak up to now (its load), then its peak restarts: the
    # VmHWM read after the request is the request's.
    at_load = {}
    for name, pid in (a.split("=", 1) for a in args.pid):
        at_load[name] = proc_memory(pid)
        reset_peak(pid)
    load_before = os.getloadavg()[0]
    rc, wall, peaks = run_polling(client_command(args, layout, prompt_len), addrs["decode"],
                                  os.path.join(args.out, "client.txt"))
    if rc != 0:
        sys.exit(f"bench_long_context: the client exited {rc}: {open(os.path.join(args.out, 'client.txt')).read()}")
    after = {k: scrape(v) for k, v in addrs.items()}
    d, p = (lambda n: delta(before["decode"], after["decode"], n)), (lambda n: delta(before["prefill"], after["prefill"], n))
    steps, step_s = d("pdserve_decode_step_seconds_count"), d("pdserve_decode_step_seconds_sum")
    return {
        "client": client_result(args, os.path.join(args.out, "client.txt")), "client_wall_s": wall,
        "prefill_s": p("pdserve_prefill_seconds_sum"), "prefill_prompt_tokens": p("pdserve_prefill_prompt_tokens_total"),
        "handoff_bytes_sent": p("pdserve_kv_handoff_bytes_total"),
        "handoff_bytes_received": d("pdserve_kv_received_bytes_total"),
        "handoff_s": p("pdserve_kv_handoff_seconds_sum"), "handoff_exposed_s": p("pdserve_kv_handoff_exposed_seconds_sum"),
        "decode_steps": steps, "decode_step_mean_s": step_s / steps if steps else None,
        "decode_tokens_per_s": steps / step_s if step_s else None,
        "decode_kv_reserved_peak": peaks["pdserve_decode_kv_bytes_used"],
        "decode_kv_allocated_peak": peaks["pdserve_decode_kv_bytes_allocated"],
        "decode_kv_reserved_after": after["decode"].get("pdserve_decode_kv_bytes_used"),
        "before_request": at_load,
        # Others' work on the same cores stretches every time above.
        "loadavg_1min": [load_before, os.getloadavg()[0]],
    }


def processes(args):
    pids = dict(a.split("=", 1) for a in args.pid)
    out = {}
    for name, pid in pids.items():
        log = os.path.join(args.out, f"{name}.log")
        out[name] = {"pid": int(pid), **proc_memory(pid), "estimate": memory_estimate(log)}
    return out


def mib(b):
    return "-" if b is None else f"{b / 2**20:,.1f} MiB"


def write_report(r, out):
    c, m, kv = r["client"], r["measured"], r["kv"]
    rows = [
        ("model", f'{r["model"]} ({r["kind"]}), weights {r["weights_dtype"]}, KV {r["kv_dtype"]}'),
        ("prompt tokens / generated", f'{c["prompt_tokens"]:,} / {c["generated_tokens"]}'
         + (f' (passkey {c["passkey"]} -> "{c["answer"].strip()}": {"correct" if c["correct"] else "WRONG"})'
            if "passkey" in c else "")),
        ("TTFT (client) / prefill (prefill worker)", f'{c["ttft_s"]:.2f} s / {m["prefill_s"]:.2f} s'),
        ("K/V handed off (sent / received)", f'{m["handoff_bytes_sent"]:,.0f} / {m["handoff_bytes_received"]:,.0f} B'
         f' ({mib(m["handoff_bytes_sent"])}); hand-off {m["handoff_s"]:.2f} s, exposed {m["handoff_exposed_s"] * 1e3:.1f} ms'),
        ("decode KV for the sequence: reserved (peak) / allocated (peak)",
         f'{m["decode_kv_reserved_peak"]:,.0f} / {m["decode_kv_allocated_peak"]:,.0f} B'),
        (f'mixed / all-global KV at {kv["positions"]:,} positions (computed)',
         f'{kv["mixed_bytes"]:,} / {kv["all_global_bytes"]:,} B: all-global / reserved = **{kv["ratio_measured"]:.3f}x**'
         f' (computed {kv["ratio_computed"]:.3f}x)'),
        ("decode at this depth", f'{m["decode_tokens_per_s"] or 0:.1f} tokens/s ({m["decode_steps"]:.0f} steps,'
         f' mean {(m["decode_step_mean_s"] or 0) * 1e3:.1f} ms)'),
    ]
    for name, p in r["processes"].items():
        est = p["estimate"]
        load = m["before_request"][name]
        rows.append((f"{name}: peak RSS during the request / RSS before it / peak while loading / startup estimate",
                     f'{mib(p.get("VmHWM"))} / {mib(load["VmRSS"])} / {mib(load["VmHWM"])} / '
                     f'{mib(est["bytes"]) if est else "none printed"}'))
    rows.append(("wall: setup / servers+request / request", f'{r["setup_s"]:.1f} s / {r["total_s"] - r["setup_s"]:.1f} s'
                 f' / {m["client_wall_s"]:.1f} s'))
    rows.append(("load average (1 min) before / after the request, on "
                 f'{os.cpu_count()} CPUs', " / ".join(f"{x:.2f}" for x in m["loadavg_1min"])))
    md = "| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    open(os.path.join(out, "result.md"), "w").write(md)
    json.dump(r, open(os.path.join(out, "result.json"), "w"), indent=2)
    print(md)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    for flag in ("--kind", "--model", "--kv-dtype", "--weights-dtype", "--build", "--out", "--router"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--length", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--metrics", action="append", default=[], help="NAME=HOST:PORT (decode, prefill, router)")
    ap.add_argument("--pid", action="append", default=[], help="NAME=PID")
    ap.add_argument("--t0", type=float, required=True)
    ap.add_argument("--t-ready", type=float, required=True)
    args = ap.parse_args()
    layout = kv_layout(args.build, args.model, args.kv_dtype)
    prompt_len = min(args.length, layout["max_context"] - args.new_tokens)
    if prompt_len < args.length:
        print(f"bench_long_context: {args.length} + {args.new_tokens} new tokens is above max_context "
              f"{layout['max_context']}: the prompt is {prompt_len} tokens", file=sys.stderr)
    measured = measure(args, layout, prompt_len)
    positions = measured["client"]["prompt_tokens"] + args.new_tokens  # what the decode worker reserves
    mixed, all_global = kv_bytes(layout, positions)
    r = {"model": args.model, "kind": args.kind, "length": args.length, "kv_dtype": args.kv_dtype,
         "weights_dtype": args.weights_dtype, "client": measured.pop("client"), "measured": measured,
         "kv": {"positions": positions, "mixed_bytes": mixed, "all_global_bytes": all_global,
                "ratio_computed": all_global / mixed,
                "ratio_measured": all_global / measured["decode_kv_reserved_peak"]
                if measured["decode_kv_reserved_peak"] else 0.0},
         "processes": processes(args), "setup_s": args.t_ready - args.t0, "total_s": time.time() - args.t0}
    write_report(r, args.out)


if __name__ == "__main__":
    main()
