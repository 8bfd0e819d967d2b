#!/usr/bin/python3
"""Plots pdserve-decode-bench CSVs (loop,position,ms,rss_mb).

Two panels: ms/token against position (cached decode vs no-cache replay) and
resident memory against position. Several CSVs may be given (one line style
per file, labelled by --label or the file name).

Run with the Debian interpreter, which has matplotlib and numpy:
  /usr/bin/python3 scripts/plot_decode_bench.py docs/bench/decode_default_f32_omp.csv \
      --out docs/bench/decode_default.png
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def read_csv(path):
    data = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"loop", "position", "ms", "rss_mb"} - set(reader.fieldnames or [])
        if missing:
            sys.exit(f"{path}: missing columns {sorted(missing)}")
        for row in reader:
            d = data.setdefault(row["loop"], {"position": [], "ms": [], "rss_mb": []})
            d["position"].append(int(row["position"]))
            d["ms"].append(float(row["ms"]))
            d["rss_mb"].append(float(row["rss_mb"]))
    return {k: {c: np.asarray(v) for c, v in d.items()} for k, d in data.items()}


def smooth(y, n):
    """Running median over n points (keeps spikes from hiding the trend)."""
    if n <= 1 or len(y) < n:
        return y
    pad = n // 2
    yp = np.pad(y, pad, mode="edge")
    return np.array([np.median(yp[i:i + n]) for i in range(len(y))])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="CSV file(s) written by pdserve-decode-bench --csv-out")
    ap.add_argument("--label", action="append", help="legend label per CSV (default: file name)")
    ap.add_argument("--out", required=True, help="output PNG")
    ap.add_argument("--title", default="pdserve decode benchmark (batch 1)")
    ap.add_argument("--smooth", type=int, default=1, help="running-median width for the ms/token curves")
    ap.add_argument("--logy", action="store_true", help="log scale for ms/token")
    ap.add_argument("--dpi", type=int, default=90)
    args = ap.parse_args()
    labels = args.label or []
    if labels and len(labels) != len(args.csv):
        sys.exit("give one --label per CSV")

    fig, (ax_ms, ax_rss) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"cached": "-", "nocache": "--"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, path in enumerate(args.csv):
        name = labels[i] if labels else os.path.splitext(os.path.basename(path))[0]
        color = colors[i % len(colors)]
        for loop, d in sorted(read_csv(path).items()):
            order = np.argsort(d["position"])
            x, ms, rss = d["position"][order], d["ms"][order], d["rss_mb"][order]
            ls = styles.get(loop, ":")
            ax_ms.plot(x, smooth(ms, args.smooth), ls, color=color, lw=1.2, label=f"{name} {loop}")
            ax_rss.plot(x, rss, ls, color=color, lw=1.2, label=f"{name} {loop}")

    ax_ms.set_xlabel("position (token index)")
    ax_ms.set_ylabel("ms per token")
    ax_ms.set_title("decode time per token" + (f" (running median of {args.smooth})" if args.smooth > 1 else ""))
    if args.logy:
        ax_ms.set_yscale("log")
    ax_ms.grid(True, alpha=0.3)
    ax_ms.legend(fontsize=8)
    ax_rss.set_xlabel("position (token index)")
    ax_rss.set_ylabel("resident memory (MiB)")
    ax_rss.set_title("RSS (/proc/self/statm) after each step")
    ax_rss.grid(True, alpha=0.3)
    ax_rss.legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
