#!/usr/bin/env python3
"""Plots a pdserve-train run: OUT/loss.csv (answer and next-byte losses per
step, smoothed) and OUT/eval.csv (held-out passkey accuracy per length).
Usage: plot_training.py RUN_DIR PNG"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def smooth(values, n=25):
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > n:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main():
    run, png = sys.argv[1], sys.argv[2]
    rows = {}
    for r in csv.DictReader(open(f"{run}/loss.csv")):
        rows[int(r["step"])] = r  # a resumed step's last row wins
    steps = sorted(rows)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("loss", "total"), ("answer_loss", "answer digits"), ("lm_loss", "next byte (prompt)")):
        ax.plot(steps, smooth([float(rows[s][key]) for s in steps]), label=label)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats), 25-step mean")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("pdserve-train loss")
    ev = {}
    for r in csv.DictReader(open(f"{run}/eval.csv")):
        ev.setdefault(int(r["length"]), {})[int(r["step"])] = 100 * float(r["accuracy"])
    for length, pts in sorted(ev.items()):
        xs = sorted(pts)
        ax2.plot(xs, [pts[x] for x in xs], marker="o", label=f"{length} tokens")
    ax2.set_ylim(-2, 102)
    ax2.set_xlabel("step")
    ax2.set_ylabel("held-out passkey accuracy (%)")
    ax2.grid(alpha=0.3)
    ax2.legend()
    ax2.set_title("held-out seeds (trainer's own evaluation)")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
