#!/usr/bin/env python3
"""The passkey report of docs/passkey.md, from pdserve-passkey's JSON files.

Runs the very same prompts through pdserve-generate (one process, one loaded
model, --prompts-jsonl) and compares its tokens with the served ones trial for
trial, then writes OUT/passkey_table.md, OUT/passkey.csv, OUT/trials.csv (every
trial without its prompt) and OUT/passkey.png (accuracy against length, one line
per position, Wilson 95% intervals).
Exit 1 when a trial's served tokens differ from pdserve-generate's."""
import argparse
import csv
import json
import math
import os
import subprocess
import sys


def wilson(k, n, z=1.96):
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--generate", required=True, help="the pdserve-generate binary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-tokens", type=int, default=512, help="for the 'x training length' column")
    ap.add_argument("--compare-per-cell", type=int, default=0,
                    help="compare only the first N trials of each (position, length) with pdserve-generate; "
                         "0: all of them")
    ap.add_argument("runs", nargs="+",
                    help="pdserve-passkey --json-out files (one --protocol seed run, or one run per position); "
                         "each trial's position is read from the trial")
    a = ap.parse_args()

    trials = []
    for path in a.runs:
        j = json.load(open(path))
        trials += j["trials"]
    # Each trial's rank in its cell (position, length) by trial index: with
    # --protocol seed a length's trials take turns at the three positions
    # (trial i at i % 3), so "the first N of a cell" is not trial < N.
    rank = {}
    cells = {}
    for i, t in enumerate(trials):
        cells.setdefault((t["position"], t["context_length"]), []).append(i)
    for members in cells.values():
        for r, i in enumerate(sorted(members, key=lambda i: trials[i]["trial"])):
            rank[i] = r
    jsonl = os.path.join(a.out, "prompts.jsonl")
    compared = set()
    with open(jsonl, "w") as f:
        for i, t in enumerate(trials):
            if a.compare_per_cell and rank[i] >= a.compare_per_cell:
                continue
            compared.add(i)
            f.write(json.dumps({"id": i, "token_ids": list(t["prompt"].encode())}) + "\n")
    n_new = max(len(t["answer_token_ids"]) for t in trials)
    print(f"passkey_report: {len(compared)} of {len(trials)} trials through {a.generate} (one process)", flush=True)
    out = subprocess.run([a.generate, "--model", a.model, "--prompts-jsonl", jsonl, "--max-new-tokens", str(n_new)],
                         check=True, capture_output=True, text=True)
    single = {}
    for line in out.stdout.splitlines():
        r = json.loads(line)
        single[r["id"]] = r["token_ids"]

    rows = {}
    mismatches = []
    for i, t in enumerate(trials):
        key = (t["position"], t["context_length"])
        r = rows.setdefault(key, {"trials": 0, "correct": 0, "failed": 0, "same": 0, "compared": 0, "prompt_min": 10**9,
                                  "prompt_max": 0, "ttft": []})
        r["trials"] += 1
        r["correct"] += bool(t["correct"])
        r["failed"] += t["error"] is not None
        r["prompt_min"] = min(r["prompt_min"], t["prompt_tokens"] or 0)
        r["prompt_max"] = max(r["prompt_max"], t["prompt_tokens"] or 0)
        if t["ttft_ms"] is not None:
            r["ttft"].append(t["ttft_ms"])
        served = t["answer_token_ids"]
        if i not in compared:
            continue
        r["compared"] += 1
        if single.get(i, [])[: len(served)] == served and t["error"] is None:
            r["same"] += 1
        else:
            mismatches.append((key, t["trial"], served, single.get(i)))

    # Every trial, without its prompt (which a --json-out file holds): small enough to keep beside the table.
    with open(os.path.join(a.out, "trials.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["context_length", "trial", "position", "passkey", "extracted", "correct", "prompt_tokens",
                    "ttft_ms", "error", "same_as_pdserve_generate"])
        for i, t in enumerate(trials):
            same = "" if i not in compared else int(single.get(i, [])[: len(t["answer_token_ids"])] ==
                                                    t["answer_token_ids"] and t["error"] is None)
            w.writerow([t["context_length"], t["trial"], t["position"], t["passkey"], t["extracted"] or "",
                        int(bool(t["correct"])), t["prompt_tokens"] or "",
                        round(t["ttft_ms"], 1) if t["ttft_ms"] is not None else "", t["error"] or "", same])

    positions = [p for p in ("start", "middle", "end") if any(k[0] == p for k in rows)]
    lengths = sorted({k[1] for k in rows})
    with open(os.path.join(a.out, "passkey.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["position", "context_length", "trials", "correct", "accuracy", "ci95_low", "ci95_high", "failed",
                    "compared_with_pdserve_generate", "same_as_pdserve_generate", "ttft_ms_p50"])
        for p in positions:
            for L in lengths:
                r = rows[(p, L)]
                lo, hi = wilson(r["correct"], r["trials"])
                ttft = sorted(r["ttft"])
                w.writerow([p, L, r["trials"], r["correct"], r["correct"] / r["trials"], round(lo, 4), round(hi, 4),
                            r["failed"], r["compared"], r["same"], round(ttft[len(ttft) // 2], 1) if ttft else ""])

    md = ["| length | × training | prompt tokens | " + " | ".join(positions) + " | all positions | "
          "same tokens as pdserve-generate |",
          "|---:|---:|---:|" + "---:|" * len(positions) + "---:|---:|"]
    for L in lengths:
        cells, k_all, n_all, same, cmp = [], 0, 0, 0, 0
        for p in positions:
            r = rows[(p, L)]
            lo, hi = wilson(r["correct"], r["trials"])
            cells.append(f"{r['correct']}/{r['trials']} = {100 * r['correct'] / r['trials']:.0f}% "
                         f"({100 * lo:.0f}–{100 * hi:.0f})")
            k_all += r["correct"]
            n_all += r["trials"]
            same += r["same"]
            cmp += r["compared"]
        lo, hi = wilson(k_all, n_all)
        pmin = min(rows[(p, L)]["prompt_min"] for p in positions)
        pmax = max(rows[(p, L)]["prompt_max"] for p in positions)
        md.append(f"| {L} | {L / a.train_tokens:g}× | {pmin}–{pmax} | " + " | ".join(cells) +
                  f" | {100 * k_all / n_all:.1f}% ({100 * lo:.1f}–{100 * hi:.1f}) | {same}/{cmp} |")
    table = "\n".join(md) + "\n"
    open(os.path.join(a.out, "passkey_table.md"), "w").write(table)
    print(table)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for p in positions:
            acc, err_lo, err_hi = [], [], []
            for L in lengths:
                r = rows[(p, L)]
                v = r["correct"] / r["trials"]
                lo, hi = wilson(r["correct"], r["trials"])
                acc.append(100 * v)
                err_lo.append(max(0.0, 100 * (v - lo)))
                err_hi.append(max(0.0, 100 * (hi - v)))
            ax.errorbar(lengths, acc, yerr=[err_lo, err_hi], marker="o", capsize=4, label=f"passkey at {p}")
        ax.axvline(a.train_tokens, color="gray", ls=":", label=f"training length {a.train_tokens}")
        ax.axhline(85, color="tab:red", ls="--", lw=0.8, label="85% target (4×)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths)
        ax.set_xticklabels([str(L) for L in lengths])
        ax.set_ylim(-2, 102)
        ax.set_xlabel("prompt length (tokens)")
        ax.set_ylabel("passkey accuracy (%), Wilson 95% CI")
        ax.set_title(f"{os.path.basename(os.path.normpath(a.model))}: router → prefill → decode, greedy")
        ax.legend(loc="lower left", fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "passkey.png"), dpi=110)
    except ImportError:
        print("passkey_report: no matplotlib, no plot", file=sys.stderr)

    if mismatches:
        for key, trial, served, single_ids in mismatches[:5]:
            print(f"MISMATCH {key} trial {trial}: served {served}, pdserve-generate {single_ids}", file=sys.stderr)
        print(f"passkey_report: {len(mismatches)} of {len(compared)} compared trials differ from pdserve-generate",
              file=sys.stderr)
        return 1
    print(f"passkey_report: all {len(compared)} compared trials: the served tokens equal pdserve-generate's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
