#!/usr/bin/python3
"""Where the passkey model's global attention goes, and how its answer margin shrinks, at long lengths.

Issue 54 ("understand why it fails where it does"). For each passkey prompt
(built exactly as pdserve-passkey builds it: common/passkey/passkey.cc) this
runs the model of docs/model.md in numpy, teacher-forcing the answer
" NNNNN", and reports at the answer positions:

  * per global layer and query head, the softmax mass on the sink (the
    clamped sink logit, which has no value), on the needle (the passkey
    sentence: its 10 digits and its words), on the filler and on the rest
    (task line, question, the answer typed so far);
  * the "temperature" view: the best needle score minus the log-sum-exp of
    the filler scores (and the sink logit minus the same), i.e. how far above
    the whole filler the needle stands in the softmax;
  * the logit margin of each of the 5 digits (correct digit's logit minus the
    best other token's) with the previous digits teacher-forced, and a
    least-squares fit of the margin against ln T.

The math is that of tests/reference/gpt_oss_lite_ref.py (imported: config,
checkpoint reader, rmsnorm, rope, swiglu), but attention is chunked so that
131,072 tokens fit: windowed layers only score their band of W keys, global
layers score query chunks against every earlier key, and the last global
layer (the last layer here) only runs its query rows for the answer
positions (its keys and values still come from every position). The MoE is
vectorised per expert with the reference's summation order. `--self-check`
holds the chunked forward to the reference's full T x T forward.

  /usr/bin/python3 scripts/passkey_attention_probe.py --self-check
  D=docs/bench/passkey_attention_xeon-emr_2026-12-07
  nice -n 15 /usr/bin/python3 scripts/passkey_attention_probe.py \
      --lengths 512,2048,8192,32768,65536,131072 --out $D      # attention.csv margins.csv fit.csv
  nice -n 15 /usr/bin/python3 scripts/passkey_attention_probe.py --ablate 512,8192 --out $D   # ablation.csv
  /usr/bin/python3 scripts/passkey_attention_probe.py --tables $D > $D/tables.md

Rows: the last prompt byte predicts the answer's leading space (the trained answer is " NNNNN."), the
space predicts digit 1 ("digit1" in the CSVs), digit k predicts digit k+1. Cost: global layer 1 runs
every query row against every earlier key, ~T^2/2 per head: about 3 CPU-minutes per 131,072-token
prompt on 2 cores, seconds below 8,192.

numpy only (Debian's /usr/bin/python3); the GEMMs use whatever BLAS numpy has.
"""
import argparse
import csv
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import gpt_oss_lite_ref as ref  # noqa: E402

F32 = np.float32
MASK64 = (1 << 64) - 1

# ----------------------------------------------------------------------------
# The prompt, byte for byte as common/passkey/passkey.cc builds it
# ----------------------------------------------------------------------------
TASK = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.")
QUESTION = "What is the passkey? The passkey is"
FILLER_SENTENCES = ["The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
                    "There and back again."]
FILLER_SALT = 0x66696C6C65720001
PASSKEY_SPACE = 100000


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, bound):
        threshold = ((1 << 64) - bound) % bound  # 2^64 mod bound, as (0 - bound) % bound in uint64
        while True:
            r = self.next()
            if r >= threshold:
                return r % bound


def draw_passkeys(n, base_seed, length):
    """DrawPasskeys: a partial Fisher-Yates shuffle of 0..99999 seeded by base_seed + length."""
    rng = SplitMix64(base_seed + length)
    swapped = {}
    out = []
    for i in range(n):
        j = i + rng.below(PASSKEY_SPACE - i)
        vi, vj = swapped.get(i, i), swapped.get(j, j)
        swapped[i], swapped[j] = vj, vi
        out.append(vj)
    return out


def filler_words(seed, n_words):
    words = []
    rng = SplitMix64(seed ^ FILLER_SALT)
    while len(words) < n_words:
        order = list(range(len(FILLER_SENTENCES)))
        for i in range(len(order) - 1, 0, -1):
            j = rng.below(i + 1)
            order[i], order[j] = order[j], order[i]
        for s in order:
            for w in FILLER_SENTENCES[s].split(" "):
                if len(words) == n_words:
                    return words
                words.append(w)
    return words


class Prompt:
    """The text plus a label per byte (task, filler, needle_digit, needle_text, question)."""

    def __init__(self, text, labels, filler_words_n, before):
        self.text, self.labels, self.filler_words, self.filler_words_before = text, labels, filler_words_n, before


def build_prompt(filler_seed, n_words, depth, passkey):
    """BuildPasskeyPrompt; `words` is FillerWords(filler_seed, n_words)."""
    words = filler_words(filler_seed, n_words)
    n = len(words)
    want = min(max(depth, 0.0), 1.0) * n
    best = 0
    for b in range(1, n + 1):
        boundary = b == n or (words[b - 1] != "" and words[b - 1][-1] == ".")
        if boundary and abs(b - want) < abs(best - want):
            best = b
    parts = [(TASK + "\n", "task")]
    if best > 0:
        parts.append((" ".join(words[:best]) + "\n", "filler"))
    needle = f"The passkey is {passkey}. Remember it. {passkey} is the passkey."
    parts.append(("NEEDLE", "needle"))
    parts.append(("\n", "needle_text"))
    if best < n:
        parts.append((" ".join(words[best:]) + "\n", "filler"))
    parts.append((QUESTION, "question"))
    text, labels = "", []
    for s, lab in parts:
        if s == "NEEDLE":
            text += needle
            labels += ["needle_digit" if c.isdigit() else "needle_text" for c in needle]
        else:
            text += s
            labels += [lab] * len(s)
    return Prompt(text, labels, n, best)


def size_prompt(length, depth, passkey, filler_seed):
    """SizePasskeyPrompt under the byte tokenizer: the most filler words whose prompt has <= length bytes.
    The byte count grows strictly with the word count, so this is the C++ search's unique answer."""
    def nbytes(w):
        return len(build_prompt(filler_seed, w, depth, passkey).text.encode())
    if nbytes(0) > length:
        raise ValueError(f"length {length} is below the shortest prompt ({nbytes(0)} bytes)")
    lo, hi = 0, 1
    while nbytes(hi) <= length:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        m = (lo + hi) // 2
        if nbytes(m) <= length:
            lo = m
        else:
            hi = m
    return build_prompt(filler_seed, lo, depth, passkey)


# ----------------------------------------------------------------------------
# Chunked forward
# ----------------------------------------------------------------------------
def moe_rows(cfg, W, b, h):
    """The reference's moe() vectorised per expert, each row summed in the reference's order:
    0 + w0 * expert(idx0) + w1 * expert(idx1) + ..., then + each shared expert."""
    E, top_k, S = cfg["n_experts"], cfg["top_k"], cfg["n_shared_experts"]
    r = h @ W[b + "moe.router.weight"].T
    idx = np.argsort(-r, axis=1, kind="stable")[:, :top_k]
    lg = np.take_along_axis(r, idx, axis=1)
    w = np.exp(lg - lg.max(axis=1, keepdims=True))
    w = (w / w.sum(axis=1, keepdims=True)).astype(F32)
    gate, up, down = (W[b + "moe.experts." + n] for n in ("gate_proj", "up_proj", "down_proj"))
    out = np.zeros_like(h)
    for slot in range(top_k):
        contrib = np.zeros_like(h)
        for e in range(E):
            rows = np.nonzero(idx[:, slot] == e)[0]
            if len(rows):
                contrib[rows] = w[rows, slot:slot + 1] * ref.swiglu(h[rows], gate[e], up[e], down[e])
        out += contrib
    for j in range(S):
        p = b + ("moe.shared." if S == 1 else f"moe.shared.{j}.")
        out += ref.swiglu(h, W[p + "gate_proj.weight"], W[p + "up_proj.weight"], W[p + "down_proj.weight"])
    return out.astype(F32)


def qkv(cfg, W, b, h, positions, is_global, q_rows=None):
    H, K, d = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    T = h.shape[0]
    kv = h @ W[b + "attn.kv_proj.weight"].T
    k = kv[:, :K * d].reshape(T, K, d)
    v = np.ascontiguousarray(kv[:, K * d:].reshape(T, K, d))
    c, s = ref.rope_tables(cfg, positions, is_global)
    k = ref.apply_rope(k, c, s)
    qr = np.arange(T) if q_rows is None else np.asarray(q_rows)
    q = (h[qr] @ W[b + "attn.q_proj.weight"].T).reshape(len(qr), H, d)
    q = ref.apply_rope(q, c[qr], s[qr])
    return q, k, v, qr


def sinks(cfg, W, b):
    lo, hi = cfg["sink_clamp"]
    return [F32(min(max(float(z), lo), hi)) for z in W[b + "attn.sink_bias"]]


def attend_rows(q_h, kT_g, v_g, z, qpos, k0, window=None, work=None, blocked=None):
    """Softmax-with-sink attention of the query rows q_h [n, d] (ascending absolute positions qpos;
    already multiplied by 1/sqrt d) over the keys kT_g [d, T] / v_g [T, d] at positions k0 ..
    qpos[-1], causal, and within `window` when given. The sink z takes mass and gives no value.
    `work`: a flat fp32 buffer for the scores, reused across chunks (no page faults per chunk).
    `blocked` (ablation only): (key_mask [T] bool, q_from): queries at q_from or later see no masked key."""
    kend = int(qpos[-1]) + 1
    n, width = len(qpos), kend - k0
    sc = np.empty((n, width), F32) if work is None or work.size < n * width else work[:n * width].reshape(n, width)
    np.matmul(q_h, kT_g[:, k0:kend], out=sc)
    # Causality only bites from the first query's position on: mask that block alone.
    c0 = int(qpos[0]) - k0
    kp = np.arange(int(qpos[0]), kend)
    blk = sc[:, c0:]
    blk[kp[None, :] > qpos[:, None]] = -np.inf
    if window is not None:
        kp = np.arange(k0, kend)
        sc[(qpos[:, None] - kp[None, :]) >= window] = -np.inf
    if blocked is not None:
        key_mask, q_from = blocked
        rsel = np.nonzero(qpos >= q_from)[0]
        cols = np.nonzero(key_mask[k0:kend])[0]
        if len(rsel) and len(cols):
            sc[np.ix_(rsel, cols)] = -np.inf
    m = np.maximum(sc.max(axis=1, keepdims=True), z)
    np.subtract(sc, m, out=sc)
    np.exp(sc, out=sc)
    denom = np.exp(z - m) + sc.sum(axis=1, keepdims=True)
    return (sc @ v_g[k0:kend]) / denom


def attention_layer(cfg, W, b, h, layer, q_rows, chunk, blocked=None):
    """attention_l(...) Wo^T for the query rows `q_rows` (None: every row); keys from every row."""
    H, K, d, Wn = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["window"]
    is_global = layer % 2 == 1
    T = h.shape[0]
    positions = list(range(T))
    q, k, v, qr = qkv(cfg, W, b, h, positions, is_global, q_rows)
    zs = sinks(cfg, W, b)
    n_rep = H // K
    out = np.zeros((len(qr), H, d), dtype=F32)
    qs = (q * F32(1.0 / math.sqrt(d))).astype(F32)  # the scale folded into q (self-check: same logits)
    kT = [np.ascontiguousarray(k[:, g, :].T) for g in range(K)]
    vg = [np.ascontiguousarray(v[:, g, :]) for g in range(K)]
    step = chunk if is_global else min(chunk, 256)
    work = np.empty(step * (T if is_global else step + Wn), F32)
    for a in range(0, len(qr), step):
        rows = slice(a, min(a + step, len(qr)))
        qpos = qr[rows]
        k0 = 0 if is_global else max(0, int(qpos[0]) - Wn + 1)
        for hh in range(H):
            g = hh // n_rep
            out[rows, hh, :] = attend_rows(qs[rows, hh, :], kT[g], vg[g], zs[hh], qpos, k0,
                                           None if is_global else Wn, work, blocked)
    return (out.reshape(len(qr), H * d) @ W[b + "attn.o_proj.weight"].T).astype(F32), (q, k, qr)


def forward_probe(cfg, W, ids, answer_rows, chunk=1024, keep_qk=True, log=None, block=None):
    """Logits [len(answer_rows), V] at `answer_rows` (absolute positions, ascending), and per global
    layer the (q at answer rows, k at all rows) needed for the attention statistics.
    `block` (ablation): {layer: (key_mask, q_from)}, see attend_rows."""
    block = block or {}
    eps = cfg["norm_eps"]
    L = cfg["n_layers"]
    last_global = max(l for l in range(L) if l % 2 == 1)
    x = W["embed.weight"][np.asarray(ids)].astype(F32)
    ans = np.asarray(answer_rows)
    qk = {}
    for l in range(L):
        t0 = time.time()
        b = f"blocks.{l}."
        h = ref.rmsnorm(x, W[b + "norm1.weight"], eps)
        if l > last_global:
            raise RuntimeError("a windowed layer after the last global layer is not supported")
        if l == last_global:
            # Past the last global layer's keys and values nothing but the answer rows matters.
            att, (q, k, qr) = attention_layer(cfg, W, b, h, l, ans, chunk, block.get(l))
            if keep_qk:
                qk[l] = (q, k)
            x = x[ans]
        else:
            att, (q, k, qr) = attention_layer(cfg, W, b, h, l, None, chunk, block.get(l))
            if keep_qk and l % 2 == 1:
                qk[l] = (q[ans], k)
        x = (x + att).astype(F32)
        h = ref.rmsnorm(x, W[b + "norm2.weight"], eps)
        x = (x + moe_rows(cfg, W, b, h)).astype(F32)
        if log:
            log(f"  layer {l} ({'global' if l % 2 else 'windowed'}): {time.time() - t0:.1f} s")
    head = W["embed.weight"] if cfg["tie_embeddings"] else W["head.weight"]
    logits = (ref.rmsnorm(x, W["norm.weight"], eps) @ head.T).astype(F32)
    return logits, qk


# ----------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------
CATS = ["sink", "needle_digit", "needle_text", "filler", "task", "question", "answer"]


def lse(a):
    if a.size == 0:
        return -np.inf
    m = a.max()
    return float(m + np.log(np.exp((a - m).astype(np.float64)).sum()))


def attention_stats(cfg, W, qk, labels, answer_rows, answer_names):
    """One row per (global layer, head, answer row)."""
    H, K, d = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    n_rep = H // K
    scale = 1.0 / math.sqrt(d)
    lab = np.asarray(labels)
    rows = []
    for l, (q, k) in sorted(qk.items()):
        zs = sinks(cfg, W, f"blocks.{l}.")
        for hh in range(H):
            g = hh // n_rep
            for r, pos in enumerate(answer_rows):
                s = (q[r, hh, :].astype(np.float64) @ k[:pos + 1, g, :].astype(np.float64).T) * scale
                z = float(zs[hh])
                m = max(s.max(), z)
                e = np.exp(s - m)
                denom = e.sum() + math.exp(z - m)
                rec = {"layer": l, "head": hh, "row": answer_names[r], "pos": pos, "sink_logit": z}
                rec["sink"] = math.exp(z - m) / denom
                lab_r = lab[:pos + 1]
                for c in CATS[1:]:
                    rec[c] = float(e[lab_r == c].sum() / denom)
                needle = (lab_r == "needle_digit") | (lab_r == "needle_text")
                filler = lab_r == "filler"
                ns = s[needle]
                rec["needle_max_score"] = float(ns.max())
                rec["needle_argmax"] = int(np.nonzero(needle)[0][int(ns.argmax())])
                rec["needle_argmax_offset"] = rec["needle_argmax"] - int(np.nonzero(needle)[0][0])
                rec["needle_argmax_byte"] = needle_text_byte(rec["needle_argmax_offset"])
                rec["lse_filler"] = lse(s[filler])
                rec["filler_max_score"] = float(s[filler].max()) if filler.any() else float("nan")
                rec["n_filler"] = int(filler.sum())
                rec["needle_minus_lse_filler"] = rec["needle_max_score"] - rec["lse_filler"]
                rec["sink_minus_lse_filler"] = z - rec["lse_filler"]
                top = int(s.argmax())
                rec["top_key_pos"] = top
                rec["top_key_label"] = str(lab_r[top])
                rows.append(rec)
    return rows


NEEDLE_SENTENCE = "The passkey is NNNNN. Remember it. NNNNN is the passkey.\n"


def needle_text_byte(offset):
    """The needle's byte at `offset`, with its neighbours: 'is[ ]N' for offset 14."""
    t = NEEDLE_SENTENCE
    return (t[max(0, offset - 2):offset] + "[" + t[offset] + "]" + t[offset + 1:offset + 3]).replace("\n", "\\n")


def margins(logits, targets):
    out = []
    for lg, t in zip(logits, targets):
        other = np.delete(lg, t)
        best_other = int(np.argmax(np.where(np.arange(len(lg)) == t, -np.inf, lg)))
        out.append((float(lg[t] - other.max()), int(np.argmax(lg)), best_other))
    return out


# ----------------------------------------------------------------------------
def self_check(cfg, W, T=300, chunks=(64, 1024)):
    p = size_prompt(T, 0.5, "48213", filler_seed=T)
    ids = list((p.text + " 48213").encode())
    t0 = time.time()
    full = ref.forward(cfg, W, ids)
    print(f"self-check: reference forward over {len(ids)} tokens: {time.time() - t0:.1f} s")
    rows = list(range(len(ids) - 7, len(ids)))
    worst = 0.0
    for ch in chunks:
        lg, _ = forward_probe(cfg, W, ids, rows, chunk=ch, keep_qk=False)
        diff = float(np.abs(lg - full[rows]).max())
        worst = max(worst, diff)
        print(f"self-check: chunk {ch}: max |logit diff| over the last {len(rows)} rows = {diff:.3g}")
    # every row through a windowed+global stack: check a prefix run too (rows far from the end)
    rows2 = [0, 1, 63, 64, 65, 130, len(ids) - 1]
    lg, _ = forward_probe(cfg, W, ids, rows2, chunk=64, keep_qk=False)
    diff = float(np.abs(lg - full[rows2]).max())
    worst = max(worst, diff)
    print(f"self-check: rows {rows2}: max |logit diff| = {diff:.3g}")
    ok = worst < 1e-3
    print(f"self-check: {'PASS' if ok else 'FAIL'} (max {worst:.3g}, bound 1e-3)")
    return ok


def check_prompt_builder():
    """Fixed points of tests/passkey_test.cc and of the C++ builder (checked once against a build of it)."""
    p = build_prompt(1000, 30, 0.5, "04321")
    assert p.text.startswith("There is an important info hidden inside a lot of irrelevant text.")
    assert p.text.endswith("\nWhat is the passkey? The passkey is")
    assert "\nThe passkey is 04321. Remember it. 04321 is the passkey.\n" in p.text
    assert sum(c.isdigit() for c in p.text) == 10
    assert build_prompt(2048, 200, 0.0, "11111").filler_words_before == 0
    assert draw_passkeys(3, 0, 512) == [27302, 92179, 50652]  # DrawPasskeys(3, 0, 512) in C++
    q = size_prompt(512, 0.5, "27302", 512)  # SizePasskeyPrompt(512, middle) in C++: 511 bytes, 57 words, 27 before
    assert (len(q.text), q.filler_words, q.filler_words_before) == (511, 57, 27), (len(q.text), q.filler_words)


def ablate(cfg, W, lengths, pk, chunk, out):
    """Which global layer carries the passkey: the answer's digit margins when the queries of the
    question line and the answer (from the question's first byte on) cannot see the needle sentence
    in global layer 1, in global layer 3, or in both (passkey in the middle, so that no windowed
    layer at those rows reaches the needle either)."""
    rows_out = []
    for length in lengths:
        p = size_prompt(length, 0.5, pk, filler_seed=length)
        answer = " " + pk
        ids = list((p.text + answer).encode())
        lab = np.asarray(p.labels + ["answer"] * len(answer))
        T = len(p.text)
        needle = (lab == "needle_digit") | (lab == "needle_text")
        q_from = p.text.rindex("\n") + 1
        assert q_from - int(np.nonzero(needle)[0][-1]) > cfg["window"], "the needle is within a window of the question"
        rows = list(range(T, T + 5))
        targets = [ord(c) for c in pk]
        for name, blk in [("none", {}), ("L1", {1: (needle, q_from)}), ("L3", {3: (needle, q_from)}),
                          ("L1+L3", {1: (needle, q_from), 3: (needle, q_from)})]:
            lg, _ = forward_probe(cfg, W, ids, rows, chunk=chunk, keep_qk=False, block=blk)
            ms = margins(lg, targets)
            got = "".join(chr(m[1]) for m in ms)
            rec = {"length": length, "prompt_tokens": T, "blocked": name, "answer": got, "correct": got == pk}
            for i, m in enumerate(ms):
                rec[f"margin_digit{i + 1}"] = m[0]
            rows_out.append(rec)
            print(f"ablation {length} middle, needle hidden from {name:5s}: answer {got!r}, digit margins "
                  + " ".join(f"{m[0]:6.2f}" for m in ms), flush=True)
    if out:
        write_csv(os.path.join(out, "ablation.csv"), rows_out)


def fit(xs, ys):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    A = np.vstack([xs, np.ones_like(xs)]).T
    (slope, icept), *_ = np.linalg.lstsq(A, ys, rcond=None)
    return float(slope), float(icept)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "passkey-4l"))
    ap.add_argument("--self-check", action="store_true", help="hold the chunked forward to the reference's and exit")
    ap.add_argument("--lengths", default="512,2048,8192,32768")
    ap.add_argument("--positions", default="start,middle,end")
    ap.add_argument("--long-positions", default=None,
                    help="positions for lengths > --long-from (default: all of --positions)")
    ap.add_argument("--long-from", type=int, default=32768)
    ap.add_argument("--passkey", default="48213")
    ap.add_argument("--chunk", type=int, default=1024, help="query rows per global-attention chunk")
    ap.add_argument("--out", default=None, help="folder for attention.csv, margins.csv, fit.csv")
    ap.add_argument("--tables", default=None, metavar="DIR", help="instead: print the markdown tables of a run")
    ap.add_argument("--ablate", default=None, metavar="LENGTHS",
                    help="instead: hide the needle from global layer 1 / 3 at these lengths (writes ablation.csv)")
    args = ap.parse_args()

    cfg = ref.load_config(os.path.join(args.model, "config.json"))
    W = ref.read_safetensors(os.path.join(args.model, "model.safetensors"))
    if args.tables:
        tables(args.tables)
        return
    check_prompt_builder()
    if args.self_check:
        sys.exit(0 if self_check(cfg, W) else 1)

    depths = {"start": 0.0, "middle": 0.5, "end": 1.0}
    pk = args.passkey
    assert len(pk) == 5 and pk.isdigit()
    if args.ablate:
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        ablate(cfg, W, [int(x) for x in args.ablate.split(",")], pk, args.chunk, args.out)
        return
    att_rows, mar_rows = [], []
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    for length in [int(x) for x in args.lengths.split(",")]:
        poss = args.positions.split(",")
        if length > args.long_from and args.long_positions:
            poss = args.long_positions.split(",")
        for pos_name in poss:
            t0 = time.time()
            p = size_prompt(length, depths[pos_name], pk, filler_seed=length)  # pdserve-passkey seeds by length
            answer = " " + pk
            ids = list((p.text + answer).encode())
            labels = p.labels + ["answer"] * len(answer)
            T = len(p.text)
            # rows: the last prompt byte predicts " ", " " predicts digit 1, digit i predicts digit i+1.
            rows = list(range(T - 1, T + 5))
            names = ["last_prompt(->space)"] + [f"digit{i}" for i in range(1, 6)]
            targets = [ord(" ")] + [ord(c) for c in pk]
            print(f"length {length} {pos_name}: {T} prompt tokens, {p.filler_words} filler words "
                  f"({p.filler_words_before} before the needle)", flush=True)
            logits, qk = forward_probe(cfg, W, ids, rows, chunk=args.chunk, log=print)
            ms = margins(logits, targets)
            for name, pos, (mg, am, bo), tgt in zip(names, rows, ms, targets):
                mar_rows.append({"length": length, "prompt_tokens": T, "position": pos_name, "row": name,
                                 "pos": pos, "target": chr(tgt), "margin": mg, "argmax": chr(am),
                                 "best_other": chr(bo), "correct": am == tgt})
            st = attention_stats(cfg, W, qk, labels, rows, names)
            for r in st:
                r.update(length=length, prompt_tokens=T, position=pos_name)
            att_rows += st
            dig = " ".join(f"{m[0]:.2f}" for m in ms[1:])
            got = "".join(chr(m[1]) for m in ms[1:])
            print(f"  answer {got!r} (want {pk}); digit margins {dig}; {time.time() - t0:.1f} s", flush=True)
            for r in [r for r in st if r["row"] == "digit1"]:
                print(f"  L{r['layer']} h{r['head']} at ' '(->d1): sink {r['sink']:.3f} needle "
                      f"{r['needle_digit'] + r['needle_text']:.3f} (digits {r['needle_digit']:.3f}) filler "
                      f"{r['filler']:.3f} other {r['task'] + r['question'] + r['answer']:.3f}; "
                      f"needle_max-LSE(filler) {r['needle_minus_lse_filler']:.2f}; top key {r['top_key_label']}",
                      flush=True)
            if args.out:
                write_csv(os.path.join(args.out, "attention.csv"), att_rows)
                write_csv(os.path.join(args.out, "margins.csv"), mar_rows)

    # Margin against ln T, per digit and over all digits (the prompt length T in tokens).
    fits = []
    dig_rows = [r for r in mar_rows if r["row"].startswith("digit")]
    groups = [("all digits", dig_rows)] + [(f"digit{i}", [r for r in dig_rows if r["row"] == f"digit{i}"])
                                          for i in range(1, 6)]
    for pos_name in args.positions.split(","):
        groups.append((f"all digits, {pos_name}", [r for r in dig_rows if r["position"] == pos_name]))
    groups.append(("min digit per prompt", min_per_prompt(dig_rows)))
    print("\nmargin = a + b ln T (T = prompt tokens)")
    for name, rs in groups:
        if len({r["prompt_tokens"] for r in rs}) < 2:
            continue
        b, a = fit([math.log(r["prompt_tokens"]) for r in rs], [r["margin"] for r in rs])
        zero = math.exp(min(-a / b, 700.0)) if b < 0 else float("inf")
        fits.append({"group": name, "n": len(rs), "slope_per_lnT": b, "intercept": a,
                     "per_doubling": b * math.log(2), "zero_at_tokens": zero})
        print(f"  {name:28s} n={len(rs):3d}  b={b:+.3f} per ln T ({b * math.log(2):+.3f} per doubling), "
              f"a={a:.2f}, margin 0 at T ~ {zero:.3g}")
    # The temperature view against ln T, per global layer and head (at the ' ' row, predicting digit 1).
    for l in sorted({r["layer"] for r in att_rows}):
        for hh in sorted({r["head"] for r in att_rows}):
            rs = [r for r in att_rows if r["layer"] == l and r["head"] == hh and r["row"] == "digit1"]
            if len({r["prompt_tokens"] for r in rs}) < 2:
                continue
            b, a = fit([math.log(r["prompt_tokens"]) for r in rs], [r["needle_minus_lse_filler"] for r in rs])
            fits.append({"group": f"needle_max-LSE(filler) L{l} h{hh} digit1", "n": len(rs), "slope_per_lnT": b,
                         "intercept": a, "per_doubling": b * math.log(2),
                         "zero_at_tokens": math.exp(min(-a / b, 700.0)) if b < 0 else float("inf")})
    if args.out:
        write_csv(os.path.join(args.out, "fit.csv"), fits)
        print(f"wrote {args.out}/attention.csv, margins.csv, fit.csv")


def tables(folder):
    """Markdown tables of docs/passkey.md from the CSVs of a run."""
    att = list(csv.DictReader(open(os.path.join(folder, "attention.csv"))))
    mar = list(csv.DictReader(open(os.path.join(folder, "margins.csv"))))
    lengths = sorted({int(r["length"]) for r in att})
    layers = sorted({int(r["layer"]) for r in att})
    heads = sorted({int(r["head"]) for r in att})
    f = lambda r, k: float(r[k])
    needle = lambda r: f(r, "needle_digit") + f(r, "needle_text")
    pt = {int(r["length"]): int(r["prompt_tokens"]) for r in att}

    def sel(length, layer=None, head=None, row=None):
        return [r for r in att if int(r["length"]) == length and (layer is None or int(r["layer"]) == layer)
                and (head is None or int(r["head"]) == head) and (row is None or r["row"] == row)]

    cols = [(l, h) for l in layers for h in heads]
    print("Mass at the answer's space (the row whose next token is digit 1): needle sentence / filler, "
          "mean over start, middle, end\n")
    print("| length | " + " | ".join(f"L{l} h{h}" for l, h in cols) + " | sink, largest of all |")
    print("|---:|" + "---:|" * (len(cols) + 1))
    for n in lengths:
        cells = []
        for l, h in cols:
            rs = sel(n, l, h, "digit1")
            cells.append(f"{np.mean([needle(r) for r in rs]):.3f} / {np.mean([f(r, 'filler') for r in rs]):.3f}")
        sink = max(f(r, "sink") for r in sel(n))
        print(f"| {pt[n]} | " + " | ".join(cells) + f" | {sink:.1e} |")
    print("\nNeedle share of the best head of each global layer, per answer row (digit k = the row whose next "
          "token is digit k), lower of start and middle (at the end the passkey's second copy lies within the "
          "windowed layers' reach of the answer rows, and the global layers are not needed for digits 3-5)\n")
    print("| length | " + " | ".join(f"L{l} d{k}" for l in layers for k in range(1, 6)) + " |")
    print("|---:|" + "---:|" * (5 * len(layers)))
    for n in lengths:
        cells = []
        for l in layers:
            for k in range(1, 6):
                per_pos = {}
                for r in sel(n, l, None, f"digit{k}"):
                    if r["position"] == "end":
                        continue
                    per_pos[r["position"]] = max(per_pos.get(r["position"], 0.0), needle(r))
                cells.append(f"{min(per_pos.values()):.3f}")
        print(f"| {pt[n]} | " + " | ".join(cells) + " |")
    print("\nBest needle score minus log-sum-exp of the filler scores (nats) at the digit-1 row, mean over "
          "positions; last line: least-squares slope against ln T\n")
    print("| length | " + " | ".join(f"L{l} h{h}" for l, h in cols) + " | ln(filler keys) |")
    print("|---:|" + "---:|" * (len(cols) + 1))
    slopes = []
    for l, h in cols:
        rs = [r for r in att if int(r["layer"]) == l and int(r["head"]) == h and r["row"] == "digit1"]
        slopes.append(fit([math.log(int(r["prompt_tokens"])) for r in rs],
                          [f(r, "needle_minus_lse_filler") for r in rs])[0])
    for n in lengths:
        cells = [f"{np.mean([f(r, 'needle_minus_lse_filler') for r in sel(n, l, h, 'digit1')]):+.2f}"
                 for l, h in cols]
        nf = np.mean([int(r["n_filler"]) for r in sel(n, layers[0], heads[0], "digit1")])
        print(f"| {pt[n]} | " + " | ".join(cells) + f" | {math.log(nf):.2f} |")
    print("| slope per ln T | " + " | ".join(f"{b:+.2f}" for b in slopes) + " | +1 |")
    print("\nDigit margins (logit of the right digit minus the best other token), teacher-forced, mean over "
          "start / middle / end, and the smallest of the 15\n")
    print("| length | digit 1 | digit 2 | digit 3 | digit 4 | digit 5 | smallest | all answers right |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in lengths:
        rs = [r for r in mar if int(r["length"]) == n and r["row"].startswith("digit")]
        cells = [f"{np.mean([f(r, 'margin') for r in rs if r['row'] == f'digit{k}']):.2f}" for k in range(1, 6)]
        ok = all(r["correct"] == "True" for r in rs)
        print(f"| {pt[n]} | " + " | ".join(cells) + f" | {min(f(r, 'margin') for r in rs):.2f} | {ok} |")
    fp = os.path.join(folder, "fit.csv")
    if os.path.exists(fp):
        print("\nmargin = a + b ln T\n")
        print("| group | n | b (per ln T) | per doubling | a | margin 0 at T |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in csv.DictReader(open(fp)):
            if r["group"].startswith("needle_max"):
                continue
            print(f"| {r['group']} | {r['n']} | {float(r['slope_per_lnT']):+.3f} | {float(r['per_doubling']):+.3f} "
                  f"| {float(r['intercept']):.2f} | {float(r['zero_at_tokens']):.2g} |")
    ap_path = os.path.join(folder, "ablation.csv")
    if os.path.exists(ap_path):
        print("\nDigit margins with the needle sentence hidden from the question and answer rows in one global "
              "layer (passkey in the middle)\n")
        print("| length | needle hidden from | answer (teacher-forced argmax) | digit 1 | digit 2 | digit 3 | digit 4 "
              "| digit 5 |")
        print("|---:|---|---|---:|---:|---:|---:|---:|")
        for r in csv.DictReader(open(ap_path)):
            print(f"| {r['prompt_tokens']} | {r['blocked']} | {r['answer']} | "
                  + " | ".join(f"{float(r[f'margin_digit{k}']):.2f}" for k in range(1, 6)) + " |")


def min_per_prompt(dig_rows):
    best = {}
    for r in dig_rows:
        key = (r["length"], r["position"])
        if key not in best or r["margin"] < best[key]["margin"]:
            best[key] = r
    return list(best.values())


def write_csv(path, rows):
    if not rows:
        return
    keys = list(rows[0].keys())
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(path + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
