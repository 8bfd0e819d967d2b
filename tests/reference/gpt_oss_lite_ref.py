#!/usr/bin/python3
"""Independent numpy reference for GPT-OSS-Lite (spec: docs/model.md, v1).

Slow and obviously correct: no KV cache, the full forward is recomputed over the
whole sequence for every generated token. numpy only; run with /usr/bin/python3.

  init     --config CONFIG.json --seed S --dtype {F32,BF16,F16} --out DIR
  generate --model DIR --prompt-ids 1,2,3 --max-new-tokens N
           [--temperature T] [--top-p P] [--top-k K] [--seed S] [--dump-logits FILE]
           [--float64] [--margins]

--float64 computes every step in float64 instead of the spec's fp32: a judge
for a sampled token where fp32 rounding (numpy's BLAS kernels differ by CPU)
flips a near-tie of the sampler. --margins prints, per step, how far the draw
was from another token (u's and top_p's distance to the nearest cumulative
boundary and the drawn token's probability gap to its neighbours in the order,
or the top two logits' gap when greedy): where it is within fp32 rounding,
either side is right.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

F32 = np.float32
MASK64 = (1 << 64) - 1


# ----------------------------------------------------------------------------
# Config (spec "Default configuration"; `yarn` may be nested or flat)
# ----------------------------------------------------------------------------
def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    y = cfg.get("yarn") or {}
    cfg["yarn"] = {
        "factor": float(y.get("factor", cfg.get("yarn_factor", 1.0))),
        "original_max_position": float(y.get("original_max_position",
                                             cfg.get("yarn_original_max_position", 4096))),
        "beta_fast": float(y.get("beta_fast", cfg.get("yarn_beta_fast", 32))),
        "beta_slow": float(y.get("beta_slow", cfg.get("yarn_beta_slow", 1))),
    }
    return cfg


# ----------------------------------------------------------------------------
# Checkpoint names and shapes (spec "Checkpoint" table)
# ----------------------------------------------------------------------------
def tensor_shapes(cfg):
    V, D, H, K, d = cfg["vocab_size"], cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    E, F, S = cfg["n_experts"], cfg["expert_hidden"], cfg["n_shared_experts"]
    shapes = {"embed.weight": [V, D]}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}."
        shapes[b + "norm1.weight"] = [D]
        shapes[b + "attn.q_proj.weight"] = [H * d, D]
        shapes[b + "attn.kv_proj.weight"] = [2 * K * d, D]
        shapes[b + "attn.o_proj.weight"] = [D, H * d]
        shapes[b + "attn.sink_bias"] = [H]
        shapes[b + "norm2.weight"] = [D]
        shapes[b + "moe.router.weight"] = [E, D]
        shapes[b + "moe.experts.gate_proj"] = [E, F, D]
        shapes[b + "moe.experts.up_proj"] = [E, F, D]
        shapes[b + "moe.experts.down_proj"] = [E, D, F]
        for j in range(S):
            p = b + ("moe.shared." if S == 1 else f"moe.shared.{j}.")
            shapes[p + "gate_proj.weight"] = [F, D]
            shapes[p + "up_proj.weight"] = [F, D]
            shapes[p + "down_proj.weight"] = [D, F]
    shapes["norm.weight"] = [D]
    if not cfg["tie_embeddings"]:
        shapes["head.weight"] = [V, D]
    return shapes


# ----------------------------------------------------------------------------
# Minimal safetensors writer / reader (F32, BF16, F16)
# ----------------------------------------------------------------------------
def f32_to_bf16_bits(a):
    """Round fp32 to nearest-even into the top 16 bits."""
    u = np.ascontiguousarray(a, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def encode(a, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(a, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(a, dtype=F32).astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(a).tobytes()
    raise ValueError(dtype)


def decode(buf, dtype, shape):
    if dtype == "F32":
        a = np.frombuffer(buf, dtype="<f4").astype(F32)
    elif dtype == "F16":
        a = np.frombuffer(buf, dtype="<f2").astype(F32)
    elif dtype == "BF16":  # bf16 = top 16 bits of an fp32
        a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(F32)
    else:
        raise ValueError("unsupported dtype " + dtype)
    return a.reshape(shape)


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = encode(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)  # pad header with spaces to 8-byte alignment
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode())
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = decode(data[base + b:base + e], info["dtype"], info["shape"])
    return out


# ----------------------------------------------------------------------------
# init: random weights
# ----------------------------------------------------------------------------
def cmd_init(args):
    cfg = load_config(args.config)
    rng = np.random.default_rng(args.seed)
    tensors = {}
    for name, shape in tensor_shapes(cfg).items():
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name == "norm.weight":
            a = 1.0 + 0.1 * rng.standard_normal(shape)          # norm weights ~ 1
        elif name.endswith("sink_bias"):
            a = 2.0 * rng.standard_normal(shape)                 # sometimes outside the clamp
        elif name in ("embed.weight", "head.weight"):
            # std 1/sqrt(D) (0.036 at D=768): tied logits get std ~1, so sampling is not flat
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        else:                                                    # linear [.., out, in]
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        tensors[name] = a.astype(F32)
    os.makedirs(args.out, exist_ok=True)
    shutil.copyfile(args.config, os.path.join(args.out, "config.json"))
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors, args.dtype)
    print(f"wrote {len(tensors)} tensors ({args.dtype}) to {args.out}", file=sys.stderr)


# ----------------------------------------------------------------------------
# Model math (spec "Forward pass")
# ----------------------------------------------------------------------------
def rmsnorm(x, w, eps):
    # x / sqrt(mean(x^2) + eps) * w, in fp32
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + F32(eps)) * w).astype(F32)


def rope_tables(cfg, positions, is_global):
    """cos/sin tables [T, d/2] (spec "RoPE with YaRN"); angles in float64, cast to fp32."""
    d, theta, y = cfg["head_dim"], float(cfg["rope_theta"]), cfg["yarn"]
    half = d // 2
    i = np.arange(half, dtype=np.float64)
    base = theta ** (-2.0 * i / d)
    corr = lambda r: d * math.log(y["original_max_position"] / (r * 2 * math.pi)) / (2 * math.log(theta))
    low = max(math.floor(corr(y["beta_fast"])), 0)
    high = min(math.ceil(corr(y["beta_slow"])), d - 1)
    if high == low:
        high = high + 0.001
    ramp = np.clip((i - low) / (high - low), 0.0, 1.0)
    inv = base / y["factor"] * ramp + base * (1.0 - ramp)
    mscale = 0.1 * math.log(y["factor"]) + 1.0
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang) * mscale, np.sin(ang) * mscale
    if is_global:  # pairs i < rope_identity_pairs_global are left unrotated (no mscale)
        n_id = cfg["rope_identity_pairs_global"]
        c[:, :n_id], s[:, :n_id] = 1.0, 0.0
    return c.astype(F32), s.astype(F32)


def apply_rope(x, c, s):
    """x [T, heads, d]; half-split pairs (i, i + d/2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = c[:, None, :], s[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(F32)


def attention(cfg, W, b, h, positions, layer):
    T = h.shape[0]
    H, K, d = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    n_rep = H // K
    is_global = layer % 2 == 1                          # windowed iff l % 2 == 0
    q = (h @ W[b + "attn.q_proj.weight"].T).reshape(T, H, d)
    kv = h @ W[b + "attn.kv_proj.weight"].T
    k = kv[:, :K * d].reshape(T, K, d)                  # rows 0..K*d-1 are K (head-major)
    v = kv[:, K * d:].reshape(T, K, d)                  # the rest are V
    c, s = rope_tables(cfg, positions, is_global)
    q, k = apply_rope(q, c, s), apply_rope(k, c, s)

    pos = np.asarray(positions)
    allowed = pos[None, :] <= pos[:, None]              # [i, j]: j <= i
    if not is_global:
        allowed &= (pos[:, None] - pos[None, :]) < cfg["window"]
    lo, hi = cfg["sink_clamp"]
    scale = F32(1.0 / math.sqrt(d))
    out = np.zeros((T, H, d), dtype=F32)
    for hh in range(H):
        g = hh // n_rep                                 # GQA: KV head h / n_rep
        sc = (q[:, hh, :] @ k[:, g, :].T) * scale       # [T, T]
        sc = np.where(allowed, sc, F32(-np.inf)).astype(F32)
        z = F32(min(max(float(W[b + "attn.sink_bias"][hh]), lo), hi))
        m = np.maximum(sc.max(axis=1, keepdims=True), z)
        e = np.exp(sc - m)                              # masked -> 0
        denom = np.exp(z - m) + e.sum(axis=1, keepdims=True)   # sink takes mass, no value
        p = (e / denom).astype(F32)
        out[:, hh, :] = p @ v[:, g, :]
    return out.reshape(T, H * d) @ W[b + "attn.o_proj.weight"].T


def silu(x):
    return (x / (F32(1.0) + np.exp(-x))).astype(F32)


def swiglu(h, gate, up, down):
    return silu(h @ gate.T) * (h @ up.T) @ down.T


def moe(cfg, W, b, h):
    """spec "MoE": top_k routed experts (softmax over the chosen logits) + shared experts."""
    E, top_k, S = cfg["n_experts"], cfg["top_k"], cfg["n_shared_experts"]
    r = h @ W[b + "moe.router.weight"].T                 # [T, E]
    gate, up, down = (W[b + "moe.experts." + n] for n in ("gate_proj", "up_proj", "down_proj"))
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        idx = np.argsort(-r[t], kind="stable")[:top_k]  # largest, ties to lower index
        lg = r[t, idx]
        w = np.exp(lg - lg.max())
        w = (w / w.sum()).astype(F32)
        for wk, e in zip(w, idx):
            out[t] += wk * swiglu(h[t:t + 1], gate[e], up[e], down[e])[0]
    for j in range(S):
        p = b + ("moe.shared." if S == 1 else f"moe.shared.{j}.")
        out += swiglu(h, W[p + "gate_proj.weight"], W[p + "up_proj.weight"], W[p + "down_proj.weight"])
    return out.astype(F32)


def forward(cfg, W, ids):
    """Logits [T, V] for the whole sequence at absolute positions 0..T-1."""
    eps = cfg["norm_eps"]
    positions = list(range(len(ids)))
    x = W["embed.weight"][np.asarray(ids)].astype(F32)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}."
        h = rmsnorm(x, W[b + "norm1.weight"], eps)
        x = (x + attention(cfg, W, b, h, positions, l)).astype(F32)
        h = rmsnorm(x, W[b + "norm2.weight"], eps)
        x = (x + moe(cfg, W, b, h)).astype(F32)
    head = W["embed.weight"] if cfg["tie_embeddings"] else W["head.weight"]
    return (rmsnorm(x, W["norm.weight"], eps) @ head.T).astype(F32)


# ----------------------------------------------------------------------------
# Sampling (spec "Sampling")
# ----------------------------------------------------------------------------
def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform(seed, n):
    return (splitmix64((seed & MASK64) ^ splitmix64(n)) >> 11) * 2.0 ** -53


def sample(logits, temperature, top_p, top_k, seed, n, margin=None):
    """The token; `margin` (a list) gets how far this draw was from choosing
    another: the distance of u, and of top_p, to the nearest cumulative
    boundary, and the drawn token's probability gap to its neighbours in the
    order (sampled), or the top two logits' gap (greedy)."""
    if temperature <= 0:
        if margin is not None:
            top2 = np.sort(logits.astype(np.float64))[-2:]
            margin.append(float(top2[1] - top2[0]))
        return int(np.argmax(logits))                   # first max = lower id
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")               # descending, ties to lower id
    if top_k > 0:
        order = order[:top_k]
    q = p[order] / p[order].sum()
    if 0 < top_p < 1:
        cum = np.cumsum(q)
        reach = np.nonzero(cum >= top_p)[0]         # shortest prefix whose mass reaches top_p
        keep = int(reach[0]) + 1 if len(reach) else len(q)
        order, q = order[:keep], q[:keep] / q[:keep].sum()
    u = uniform(seed, n)
    cum = np.cumsum(q)
    hit = np.nonzero(cum > u)[0]
    if margin is not None:
        # u's distance to a boundary, top_p's, and the drawn token's
        # probability gap to its neighbours in the order (a near-equal pair
        # swaps places, and so which of them u lands on)
        gaps = [abs(c - u) for c in cum]
        if 0 < top_p < 1:
            gaps += [abs(c - top_p) for c in np.cumsum(p[order] / p[order].sum())]
        h = int(hit[0]) if len(hit) else len(q) - 1
        gaps += [abs(q[h] - q[i]) for i in (h - 1, h + 1) if 0 <= i < len(q)]
        margin.append(float(min(gaps)))
    return int(order[hit[0]] if len(hit) else order[-1])


def cmd_generate(args):
    cfg = load_config(os.path.join(args.model, "config.json"))
    W = read_safetensors(os.path.join(args.model, "model.safetensors"))
    ids = [int(t) for t in args.prompt_ids.split(",") if t.strip() != ""]
    eos = cfg.get("eos_token_id")
    out = []
    margins = [] if args.margins else None
    for n in range(args.max_new_tokens):
        last = forward(cfg, W, ids)[-1]
        if n == 0 and args.dump_logits:
            with open(args.dump_logits, "w") as f:
                json.dump([float(v) for v in last], f)
        tok = sample(last, args.temperature, args.top_p, args.top_k, args.seed, n, margins)
        out.append(tok)
        ids.append(tok)
        if eos is not None and tok == eos:
            break
    print(json.dumps({"token_ids": out, "margins": margins} if args.margins else {"token_ids": out}))


def add_generate_args(pg):
    """The generate command's flags, shared with gpt_oss_ref.py."""
    pg.add_argument("--model", required=True)
    pg.add_argument("--prompt-ids", required=True)
    pg.add_argument("--max-new-tokens", type=int, required=True)
    pg.add_argument("--temperature", type=float, default=0.0)
    pg.add_argument("--top-p", type=float, default=1.0)
    pg.add_argument("--top-k", type=int, default=0)
    pg.add_argument("--seed", type=int, default=0)
    pg.add_argument("--dump-logits", default=None)
    pg.add_argument("--float64", action="store_true")
    pg.add_argument("--margins", action="store_true",
                    help="also print each step's margin: how far the draw was from another token")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("init")
    pi.add_argument("--config", required=True)
    pi.add_argument("--seed", type=int, default=0)
    pi.add_argument("--dtype", choices=["F32", "BF16", "F16"], default="F32")
    pi.add_argument("--out", required=True)
    add_generate_args(sub.add_parser("generate"))
    args = ap.parse_args()
    if getattr(args, "float64", False):
        global F32
        F32 = np.float64  # every function reads F32 when called
    cmd_init(args) if args.cmd == "init" else cmd_generate(args)


if __name__ == "__main__":
    main()
