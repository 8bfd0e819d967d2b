#!/usr/bin/python3
"""Merges the passkey.csv files of several scripts/passkey_eval.sh runs (e.g.
one for 512..32768 and one for 65536..131072) into one table and one plot:
OUT/passkey_table.md, OUT/passkey.csv and OUT/passkey.png (accuracy against
length on a log axis to 131,072, one line per position and one for all
positions, Wilson 95% intervals). No trial is run or compared again: each
run's own report did that. A (position, length) cell found in two runs is
refused.

A length run in pieces (FIRST_TRIAL, one piece per session) is given trial by
trial instead: --trials FILE, a CSV of one row per trial (context_length,
trial, position, passkey, extracted, correct, prompt_tokens, ttft_ms, error
and, where compared, same_as_pdserve_generate: 1 or 0), such as the pieces'
trials CSVs concatenated. Its cells are counted from the rows; a trial number
twice in a length, or a cell also in a passkey.csv, is refused. A trial with
an error counts as failed, not as a trial.

  /usr/bin/python3 scripts/passkey_merge.py --out DIR RUN1/passkey.csv RUN2/passkey.csv
  /usr/bin/python3 scripts/passkey_merge.py --out DIR RUN1/passkey.csv --trials trials_131072.csv
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from passkey_report import wilson  # noqa: E402


def read_cells(paths):
    cells = {}
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                key = (r["position"], int(r["context_length"]))
                if key in cells:
                    sys.exit(f"passkey_merge: {key} is in two runs ({path})")
                cells[key] = {"trials": int(r["trials"]), "correct": int(r["correct"]), "failed": int(r["failed"]),
                              "compared": int(r["compared_with_pdserve_generate"]),
                              "same": int(r["same_as_pdserve_generate"]), "ttft": r["ttft_ms_p50"]}
    return cells


def read_trials(paths, cells):
    """Adds the cells counted from per-trial CSVs to `cells` (see the module's docstring)."""
    counted, seen = {}, set()
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                L, key = int(r["context_length"]), (r["position"], int(r["context_length"]))
                if (L, int(r["trial"])) in seen:
                    sys.exit(f"passkey_merge: trial {r['trial']} at {L} is twice in {path}")
                seen.add((L, int(r["trial"])))
                if key in cells:
                    sys.exit(f"passkey_merge: {key} is in a passkey.csv and in {path}")
                c = counted.setdefault(key, {"trials": 0, "correct": 0, "failed": 0, "compared": 0, "same": 0,
                                             "ttfts": []})
                if r["error"]:
                    c["failed"] += 1
                    continue
                c["trials"] += 1
                c["correct"] += int(r["correct"])
                if r.get("ttft_ms"):
                    c["ttfts"].append(float(r["ttft_ms"]))
                if r.get("same_as_pdserve_generate", "") != "":
                    c["compared"] += 1
                    c["same"] += int(r["same_as_pdserve_generate"])
    for key, c in counted.items():
        t = sorted(c.pop("ttfts"))
        c["ttft"] = f"{t[len(t) // 2]:.1f}" if t else ""
        cells[key] = c


def table(cells, positions, lengths, train_tokens):
    md = ["| length | × training | " + " | ".join(positions) + " | all positions | RPC failures | "
          "same tokens as pdserve-generate |", "|---:|---:|" + "---:|" * len(positions) + "---:|---:|---:|"]
    for L in lengths:
        row, k, n, failed, same, cmp = [], 0, 0, 0, 0, 0
        for p in positions:
            c = cells.get((p, L))
            if c is None:
                row.append("-")
                continue
            lo, hi = wilson(c["correct"], c["trials"])
            row.append(f"{c['correct']}/{c['trials']} = {100 * c['correct'] / c['trials']:.0f}% "
                       f"({100 * lo:.0f}–{100 * hi:.0f})")
            k, n, failed = k + c["correct"], n + c["trials"], failed + c["failed"]
            same, cmp = same + c["same"], cmp + c["compared"]
        lo, hi = wilson(k, n)
        md.append(f"| {L} | {L / train_tokens:g}× | " + " | ".join(row) +
                  f" | **{k}/{n} = {100 * k / n:.1f}%** ({100 * lo:.1f}–{100 * hi:.1f}) | {failed} | {same}/{cmp} |")
    return "\n".join(md) + "\n"


def plot(cells, positions, lengths, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    series = [(p, [p]) for p in positions] + [("all positions", positions)]
    for name, ps in series:
        xs, acc, lo_e, hi_e = [], [], [], []
        for L in lengths:
            k = sum(cells[(p, L)]["correct"] for p in ps if (p, L) in cells)
            n = sum(cells[(p, L)]["trials"] for p in ps if (p, L) in cells)
            if n == 0:
                continue
            lo, hi = wilson(k, n)
            xs.append(L)
            acc.append(100 * k / n)
            lo_e.append(max(0.0, 100 * (k / n - lo)))
            hi_e.append(max(0.0, 100 * (hi - k / n)))
        style = {"lw": 2.2, "color": "black"} if name == "all positions" else {}
        ax.errorbar(xs, acc, yerr=[lo_e, hi_e], marker="o", capsize=4, label=name, **style)
    ax.axhline(95, color="tab:green", ls="--", lw=0.8, label="95% (issue 54)")
    ax.axhline(85, color="tab:red", ls="--", lw=0.8, label="85% (the seed's bar at 128K)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(L) for L in lengths], rotation=30)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("passkey accuracy (%), Wilson 95% CI")
    ax.set_title(title)
    ax.legend(loc="lower left", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-tokens", type=int, default=512)
    ap.add_argument("--title", default="passkey-4l: router → prefill → decode, greedy")
    ap.add_argument("--trials", action="append", default=[], help="a per-trial CSV (repeatable)")
    ap.add_argument("csvs", nargs="*", help="passkey.csv files of scripts/passkey_eval.sh runs")
    a = ap.parse_args()
    if not a.csvs and not a.trials:
        ap.error("give passkey.csv files, --trials files, or both")
    cells = read_cells(a.csvs)
    read_trials(a.trials, cells)
    positions = [p for p in ("start", "middle", "end") if any(k[0] == p for k in cells)]
    lengths = sorted({k[1] for k in cells})
    os.makedirs(a.out, exist_ok=True)
    md = table(cells, positions, lengths, a.train_tokens)
    open(os.path.join(a.out, "passkey_table.md"), "w").write(md)
    with open(os.path.join(a.out, "passkey.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["position", "context_length", "trials", "correct", "ci95_low", "ci95_high", "failed",
                    "compared_with_pdserve_generate", "same_as_pdserve_generate", "ttft_ms_p50"])
        for (p, L), c in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            lo, hi = wilson(c["correct"], c["trials"])
            w.writerow([p, L, c["trials"], c["correct"], round(lo, 4), round(hi, 4), c["failed"], c["compared"],
                        c["same"], c["ttft"]])
    plot(cells, positions, lengths, os.path.join(a.out, "passkey.png"), a.title)
    print(md)


if __name__ == "__main__":
    main()
