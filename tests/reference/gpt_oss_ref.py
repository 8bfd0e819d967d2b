#!/usr/bin/python3
"""Independent numpy reference for gpt-oss checkpoints in the Hugging Face layout
(openai/gpt-oss-20b, gpt-oss-120b, and the random ones scripts/make_gptoss_checkpoint.py writes).

Slow and obviously correct: no KV cache, the whole forward is recomputed over the whole
sequence for every generated token; MXFP4 experts are widened to fp32 at load (the reference
only: that is ~2 GB per layer at the 20b shapes, so run it on tiny checkpoints). numpy only;
run with /usr/bin/python3.

  generate --model DIR --prompt-ids 1,2,3 --max-new-tokens N
           [--temperature T] [--top-p P] [--top-k K] [--seed S] [--dump-logits FILE]
           [--float64] [--margins] [--ignore-eos]

The command line, the sampler (imported from gpt_oss_lite_ref.py: splitmix64 seeds, the
draw n uses uniform(seed, n), the same top-k / top-p rules), --float64, --margins and
--dump-logits (the last position's logits of the first step, as a JSON list) are those of
gpt_oss_lite_ref.py. Generation stops at any id of config.json's eos_token_id and
generation_config.json's eos_token_id (the union), unless --ignore-eos.

==============================================================================================
What was verified, and where (for the C++ implementer). Sources read for this file:
  [HF-cfg]  transformers src/transformers/models/gpt_oss/configuration_gpt_oss.py
  [HF-mod]  transformers src/transformers/models/gpt_oss/modeling_gpt_oss.py
  [HF-mx]   transformers src/transformers/integrations/mxfp4.py
  [HF-rope] transformers src/transformers/modeling_rope_utils.py (_compute_yarn_parameters)
  [HF-mask] transformers src/transformers/masking_utils.py (sliding_window_overlay)
  [OAI-m]   openai/gpt-oss gpt_oss/torch/model.py        [OAI-w] gpt_oss/torch/weights.py
  [LCPP]    llama.cpp convert_hf_to_gguf.py, class GptOssModel
  [PUB]     the published openai/gpt-oss-20b config.json, generation_config.json and
            model.safetensors.index.json (copies quoted verbatim in third-party repositories;
            the generator's 20b plan reproduces the index's total_size, 13761264768, to the
            byte, and its shard split: the third shard opens at layer 6's gate_up_proj_blocks)

Files
 F1 Shards are model-XXXXX-of-YYYYY.safetensors numbered from 0 where YYYYY is the LAST index,
    not the count: gpt-oss-20b is model-00000-of-00002 .. model-00002-of-00002 (3 files), 120b
    15 files "of-00014". Tensors are found through model.safetensors.index.json
    {"metadata": {"total_size": N}, "weight_map": {name: file}}; one layer can span two shards;
    embed_tokens, norm and lm_head sit in the last one. [PUB]
 F2 Every tensor other than the experts' blocks/scales is BF16 as published (embed, lm_head,
    q/k/v/o weights and biases, sinks, router weight and bias, expert biases, norms). [PUB]
    transformers keeps norms in fp32 at run time (_keep_in_fp32_modules [HF-mod]) and
    Mxfp4GptOssExperts declares the expert biases fp32 [HF-mx]: accept F32 or BF16 for them.
 F3 Per layer (prefix model.layers.L.; D hidden, H heads, K kv heads, d head_dim, E experts,
    I intermediate): input_layernorm.weight [D], post_attention_layernorm.weight [D],
    self_attn.{q,k,v,o}_proj.{weight,bias}: q [H*d, D] + [H*d], k and v [K*d, D] + [K*d],
    o [D, H*d] + [D] (PyTorch Linear: y = W x + b), self_attn.sinks [H],
    mlp.router.weight [E, D], mlp.router.bias [E],
    mlp.experts.gate_up_proj_blocks [E, 2I, D/32, 16] U8, _scales [E, 2I, D/32] U8,
    gate_up_proj_bias [E, 2I], down_proj_blocks [E, D, I/32, 16] U8, _scales [E, D, I/32] U8,
    down_proj_bias [E, D]; then model.embed_tokens.weight [V, D], model.norm.weight [D],
    lm_head.weight [V, D] (untied, no bias). [HF-mod, HF-mx Mxfp4GptOssExperts, PUB]
    head_dim comes from the config (64), NOT hidden/heads (2880/64 = 45): q is 4096 wide.
 F4 MXFP4 value table, code -> value: 0..7 = +0, 0.5, 1, 1.5, 2, 3, 4, 6; 8..15 = the same
    negated (bit 3 is the sign; e2m1). [HF-mx FP4_VALUES, OAI-w FP4_VALUES]
 F5 Nibble order: byte j of a 16-byte block holds element 2j in its LOW nibble and element
    2j+1 in its HIGH nibble: out[:, 0::2] = lut[blk & 0x0F], out[:, 1::2] = lut[blk >> 4].
    [HF-mx convert_moe_packed_tensors, OAI-w Checkpoint._get_mxfp4_tensor]
 F6 Scale: e8m0, value = code_value * 2^(scale_byte - 127) (torch.ldexp with scales - 127);
    one scale per 32 consecutive elements. Neither transformers nor openai checks for 255
    (NaN in the OCP MX spec; ldexp makes it inf); this reference refuses it. [HF-mx, OAI-w]
 F7 Reshape: blocks [..., R, G, 16] -> [..., R, G, 32] -> [..., R, G*32]: block g holds input
    columns 32g..32g+31 of row R. So gate_up_proj_blocks IS the dense [E, out=2I, in=D]
    matrix and down_proj_blocks the dense [E, out=D, in=I], both y = W x. transformers then
    transposes dims 1,2 into its own [E, in, out] parameter (x @ W); the FILE is [out, in].
    [HF-mx convert_moe_packed_tensors `out.transpose(1, 2)`, HF-mod GptOssExperts shapes,
    OAI-m MLPBlock mlp1_weight [E, 2I, D] used as einsum("beck,bk->bec")]
 F8 gate/up interleave: rows (and bias entries) 2j are gate_j, 2j+1 are up_j, in
    gate_up_proj_blocks, _scales and _bias alike. [HF-mod GptOssExperts.forward
    `gate_up[..., ::2], gate_up[..., 1::2]`, OAI-m swiglu `x[..., ::2], x[..., 1::2]`, LCPP
    generate_extra_tensors `data_torch[:, ::2, :, :]` -> gate, `[:, 1::2]` -> up]
 F9 (for GGUF) llama.cpp repacks each block as [scale byte, 16 bytes] with element i in the low
    nibble and element i+16 in the high nibble of byte i (transform_nibble_layout), and splits
    gate_up into separate gate and up tensors. [LCPP]

Math (fp32 here; --float64 for a judge)
 M1 Layer: x += o_proj(attn(rmsnorm(x) * w_in)); x += moe(rmsnorm(x) * w_post); logits =
    lm_head(rmsnorm(x) * w_final). [HF-mod GptOssDecoderLayer, OAI-m TransformerBlock]
 M2 RMSNorm: x * rsqrt(mean(x^2) + eps) * w, eps = rms_norm_eps (1e-5). [HF-mod GptOssRMSNorm]
 M3 Attention: q, k, v separate projections with biases; GQA: query head h reads kv head
    h // (H/K) [HF-mod repeat_kv, OAI-m q.view(T, K, H/K, d)]; scores q.k / sqrt(head_dim);
    causal. Sliding layers: query i sees key j iff i - W < j <= i, i.e. the last W positions
    including itself (W = sliding_window) [HF-mask `kv_idx > q_idx - sliding_window`, OAI-m
    sdpa `torch.tril(-inf, diagonal=-sliding_window)`]. layer_types says which layers slide;
    absent, transformers makes even layers sliding [HF-cfg], as published, and as openai hard
    codes (layer_idx % 2 == 0) [OAI-m].
 M4 Sinks: per query head one extra logit, the raw stored value (no 1/sqrt(d), no clamp),
    joins the scaled masked scores in the softmax; its probability is dropped (it has no
    value vector), so the weights over the real keys sum to less than 1. [HF-mod
    eager_attention_forward `cat([attn_weights, sinks])` ... `probs[..., :-1]`; OAI-m sdpa
    `torch.cat([QK, S], dim=-1)` ... `W[..., :-1]`]
 M5 RoPE: NeoX half split: pair (i, i + d/2) turns by pos * inv_freq[i]:
    [x1 cos - x2 sin, x2 cos + x1 sin] with x1, x2 = the halves (torch.chunk(x, 2)); every
    pair rotates (no identity pairs); same RoPE on sliding and full layers; positions are the
    absolute token indices from 0. [HF-mod _apply_rotary_emb, OAI-m _apply_rotary_emb]
 M6 YaRN: theta = rope_theta (150000), f = factor (32), L0 = original_max_position_embeddings
    (4096); corr(r) = d ln(L0 / (2 pi r)) / (2 ln theta); low = max(corr(beta_fast), 0), high =
    min(corr(beta_slow), d - 1); truncate false keeps them fractional (truncate absent or true:
    floor(low), ceil(high)); if low == high, high += 0.001; ramp_i = clip((i - low) / (high -
    low), 0, 1) for i < d/2; inv_freq_i = theta^(-2i/d) * ((1 - ramp_i) + ramp_i / f): the fast
    pairs (small i) keep their frequency, the slow ones are divided by f. Published values:
    low 8.09278, high 17.39802. [HF-rope _compute_yarn_parameters, find_correction_range;
    OAI-m RotaryEmbedding._compute_concentration_and_inv_freq (same formula; it names L0
    initial_context_length and beta_fast/beta_slow ntk_beta/ntk_alpha)]
    attention_factor (openai: "concentration") = 0.1 ln f + 1 = 1.3465736 at f = 32 (1 when
    f <= 1; rope_scaling's attention_factor, or mscale/mscale_all_dim, override it as in
    transformers) multiplies BOTH cos and sin, so q.k grows by its square. [HF-mod
    GptOssRotaryEmbedding.forward `cos = emb.cos() * self.attention_scaling`, OAI-m
    `cos = freqs.cos() * concentration`]
    Config: published (transformers 4.55) writes rope_scaling {rope_type yarn, factor,
    original_max_position_embeddings, beta_fast, beta_slow, truncate} plus top-level
    rope_theta; transformers 5 writes rope_parameters with rope_theta inside. [PUB, HF-cfg]
 M7 MoE: router logits = W_r h + b_r over E experts; take the top k (k = num_experts_per_tok =
    experts_per_token = 4); softmax over those k logits only; no shared expert. [HF-mod
    GptOssTopKRouter.forward, OAI-m MLPBlock.forward]. torch.topk's tie order is
    unspecified; this reference takes the lower expert index.
 M8 Expert: gu = W_gu h + b_gu; gate = gu[0::2], up = gu[1::2]; gate = min(gate, limit);
    up = clamp(up, -limit, limit); out = gate * sigmoid(1.702 gate) * (up + 1); y = W_d out +
    b_d; the layer's output is sum_k w_k y_k (the down bias is weighted too). limit =
    swiglu_limit (7.0); alpha 1.702 (transformers 5: swiglu_alpha). [HF-mod GptOssExperts,
    OAI-m swiglu / MLPBlock; older transformers' dense GptOssExperts hard-codes limit 7.0]
 M9 hidden_act ("silu") is in the config but unused by the experts; tie_word_embeddings false;
    config.json eos 200002; generation_config.json eos [200002, 199999, 200012] (<|return|>,
    <|endoftext|>, <|call|>), bos 199998, pad 199999. [PUB]
==============================================================================================
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_oss_lite_ref import add_generate_args, sample  # noqa: E402  (one sampler and CLI for both families)

F32 = np.float32

FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)   # F4


class RefError(Exception):
    pass


# ----------------------------------------------------------------------------
# Config (transformers' GptOssConfig keys; both rope spellings)
# ----------------------------------------------------------------------------
def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    if raw.get("model_type") != "gpt_oss":
        raise RefError(f"model_type {raw.get('model_type')!r} is not gpt_oss")
    c = dict(raw)
    n_exp = raw.get("num_local_experts", raw.get("num_experts"))
    ks = {raw[k] for k in ("num_experts_per_tok", "experts_per_token") if k in raw}
    if n_exp is None or len(ks) != 1:
        raise RefError("need num_local_experts and one value of num_experts_per_tok / experts_per_token")
    c["n_experts"], c["top_k"] = int(n_exp), int(ks.pop())
    c["head_dim"] = int(raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"])
    L = raw["num_hidden_layers"]
    lt = raw.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    if len(lt) != L or set(lt) - {"sliding_attention", "full_attention"}:
        raise RefError(f"layer_types must be {L} of sliding_attention / full_attention")
    c["layer_types"] = lt
    q = raw.get("quantization_config")
    if q is not None and q.get("quant_method") != "mxfp4":
        raise RefError(f"quant_method {q.get('quant_method')!r}: only mxfp4")
    # RoPE: transformers 4.x rope_scaling + rope_theta, or transformers 5 rope_parameters
    if "rope_parameters" in raw and raw["rope_parameters"] is not None:
        rp = dict(raw["rope_parameters"])
        theta = rp.get("rope_theta", raw.get("rope_theta"))
    else:
        rp = dict(raw.get("rope_scaling") or {"rope_type": "default"})
        theta = raw.get("rope_theta")
    if theta is None:
        raise RefError("no rope_theta (top level or inside rope_parameters)")
    rp["rope_theta"] = float(theta)
    rp["rope_type"] = rp.get("rope_type", rp.get("type", "default"))
    if rp["rope_type"] not in ("yarn", "default"):
        raise RefError(f"rope_type {rp['rope_type']!r}: only yarn or default")
    if rp["rope_type"] == "yarn":
        icl = raw.get("initial_context_length")
        if icl is not None and icl != rp["original_max_position_embeddings"]:
            print(f"gpt_oss_ref: note: initial_context_length {icl} != original_max_position_embeddings "
                  f"{rp['original_max_position_embeddings']}; using the latter as transformers does",
                  file=sys.stderr)
    c["rope"] = rp
    c["swiglu_limit"] = float(raw.get("swiglu_limit", 7.0))
    c["swiglu_alpha"] = float(raw.get("swiglu_alpha", 1.702))
    c["attention_bias"] = bool(raw.get("attention_bias", True))
    return c


def stop_ids(model_dir, cfg):
    ids = set()
    for src in (cfg.get("eos_token_id"),):
        ids |= set(src if isinstance(src, list) else [src] if src is not None else [])
    p = os.path.join(model_dir, "generation_config.json")
    if os.path.exists(p):
        with open(p) as f:
            e = json.load(f).get("eos_token_id")
        ids |= set(e if isinstance(e, list) else [e] if e is not None else [])
    return ids


# ----------------------------------------------------------------------------
# safetensors reader: index (any shard count) or one file; BF16 / F16 / F32 / U8
# ----------------------------------------------------------------------------
def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise RefError(f"{path}: shorter than 8 bytes")
        n = struct.unpack("<Q", raw)[0]
        h = f.read(n)
    if len(h) != n:
        raise RefError(f"{path}: header runs past the end")
    header = json.loads(h.decode())
    header.pop("__metadata__", None)
    return 8 + n, header


ITEM = {"F32": 4, "BF16": 2, "F16": 2, "U8": 1}


class Checkpoint:
    def __init__(self, model_dir):
        idx = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                wm = json.load(f)["weight_map"]
            files = sorted(set(wm.values()))
        elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
            files, wm = ["model.safetensors"], None
        else:
            raise RefError(f"{model_dir}: no model.safetensors.index.json and no model.safetensors")
        self.where = {}
        self.maps = {}
        for fn in files:
            path = os.path.join(model_dir, fn)
            if not os.path.exists(path):
                raise RefError(f"the index names {fn}, which does not exist")
            base, header = read_header(path)
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            self.maps[fn] = mm
            for name, info in header.items():
                if wm is not None and wm.get(name) != fn:
                    continue  # the index decides which file a name comes from
                b, e = info["data_offsets"]
                if info["dtype"] not in ITEM:
                    raise RefError(f"{name}: dtype {info['dtype']} unsupported")
                if e - b != ITEM[info["dtype"]] * int(np.prod(info["shape"], dtype=np.int64)):
                    raise RefError(f"{name}: data_offsets disagree with dtype and shape")
                if base + e > len(mm):
                    raise RefError(f"{fn}: truncated ({name} ends past the end of the file)")
                self.where[name] = (fn, base + b, base + e, info["dtype"], list(info["shape"]))
        if wm is not None:
            missing = [n for n in wm if n not in self.where]
            if missing:
                raise RefError(f"the index names {missing[0]} but its file lacks it")

    def has(self, name):
        return name in self.where

    def shape(self, name):
        return self.where[name][4]

    def get(self, name, shape=None):
        """fp32 for float tensors (BF16 = the top half of an fp32), uint8 for U8."""
        if name not in self.where:
            raise RefError(f"missing tensor {name}")
        fn, b, e, dt, shp = self.where[name]
        if shape is not None and list(shape) != shp:
            raise RefError(f"{name}: shape {shp}, expected {list(shape)}")
        buf = np.asarray(self.maps[fn][b:e])
        if dt == "U8":
            a = buf.copy()
        elif dt == "F32":
            a = buf.view("<f4").astype(np.float32)
        elif dt == "F16":
            a = buf.view("<f2").astype(np.float32)
        else:
            a = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
        return a.reshape(shp)


# ----------------------------------------------------------------------------
# MXFP4 (F4-F7)
# ----------------------------------------------------------------------------
def mxfp4_dequant(blocks, scales):
    """blocks [..., R, G, 16] U8, scales [..., R, G] U8 -> dense fp32 [..., R, G*32]."""
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
        raise RefError(f"MXFP4 blocks {blocks.shape} do not match scales {scales.shape}")
    if np.any(scales == 255):
        raise RefError("e8m0 scale 255 (NaN)")
    vals = np.empty(blocks.shape[:-1] + (32,), dtype=np.float32)
    vals[..., 0::2] = FP4_VALUES[blocks & 0x0F]       # low nibble: even element (F5)
    vals[..., 1::2] = FP4_VALUES[blocks >> 4]         # high nibble: odd element
    vals = np.ldexp(vals, (scales.astype(np.int32) - 127)[..., None])   # 2^(s - 127) (F6)
    return vals.reshape(blocks.shape[:-2] + (blocks.shape[-2] * 32,))  # block g = columns 32g.. (F7)


def fp4_encode(x):
    """Nearest FP4 code (ties to the even mantissa), saturating at +-6."""
    mags = FP4_VALUES[:8]
    a = np.minimum(np.abs(x), 6.0)
    # boundaries between neighbours; at a tie take the one with an even code
    idx = np.searchsorted((mags[:-1] + mags[1:]) / 2, a, side="left")
    mid = (mags[:-1] + mags[1:]) / 2
    tie = (idx < 7) & (a == mid[np.minimum(idx, 6)])
    idx = np.where(tie & (idx % 2 == 1), idx + 1, idx)
    return (idx + np.where(np.signbit(x) & (idx > 0), 8, 0)).astype(np.uint8)


def mxfp4_quant(dense):
    """dense [..., R, G*32] -> (blocks, scales): the OCP MX rule, shared exponent =
    floor(log2(max |x| of the block)) - 2 (e2m1's largest exponent), elements rounded to
    nearest. Exact on values that came from mxfp4_dequant."""
    *pre, n = dense.shape
    x = dense.reshape(*pre, n // 32, 32).astype(np.float32)
    amax = np.abs(x).max(axis=-1)
    e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - 2, -127).astype(np.int32)
    e = np.clip(e, -127, 127)
    codes = fp4_encode(np.ldexp(x, -e[..., None]))
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, (e + 127).astype(np.uint8)


# ----------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------
def load_weights(model_dir, c):
    ck = Checkpoint(model_dir)
    D, V, H, K, d = c["hidden_size"], c["vocab_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, I = c["n_experts"], c["intermediate_size"]
    W = {"embed": ck.get("model.embed_tokens.weight", [V, D]),
         "norm": ck.get("model.norm.weight", [D])}
    if c.get("tie_word_embeddings"):
        W["lm_head"] = W["embed"]
    else:
        W["lm_head"] = ck.get("lm_head.weight", [V, D])
    W["layers"] = []
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        Lw = {"ln1": ck.get(p + "input_layernorm.weight", [D]),
              "ln2": ck.get(p + "post_attention_layernorm.weight", [D]),
              "sinks": ck.get(p + "self_attn.sinks", [H]),
              "router_w": ck.get(p + "mlp.router.weight", [E, D]),
              "router_b": ck.get(p + "mlp.router.bias", [E])}
        for n, rows, cols in (("q", H * d, D), ("k", K * d, D), ("v", K * d, D), ("o", D, H * d)):
            Lw[n + "_w"] = ck.get(p + f"self_attn.{n}_proj.weight", [rows, cols])
            Lw[n + "_b"] = (ck.get(p + f"self_attn.{n}_proj.bias", [rows]) if c["attention_bias"]
                            else np.zeros(rows, np.float32))
        for n, rows, cols in (("gate_up_proj", 2 * I, D), ("down_proj", D, I)):
            q = p + "mlp.experts." + n
            if ck.has(q + "_blocks"):
                blocks = ck.get(q + "_blocks", [E, rows, cols // 32, 16])
                scales = ck.get(q + "_scales", [E, rows, cols // 32])
                dense = np.stack([mxfp4_dequant(blocks[e], scales[e]) for e in range(E)])  # [E, out, in]
            elif ck.has(q):
                # a dequantised checkpoint keeps transformers' in-memory [E, in, out] (F7)
                dense = np.ascontiguousarray(ck.get(q, [E, cols, rows]).transpose(0, 2, 1))
            else:
                raise RefError(f"missing tensor {q}_blocks")
            Lw[n] = dense
            Lw[n + "_bias"] = ck.get(q + "_bias", [E, rows])
        W["layers"].append(Lw)
    return W


# ----------------------------------------------------------------------------
# Model math
# ----------------------------------------------------------------------------
def rmsnorm(x, w, eps):
    # M2: x / sqrt(mean(x^2) + eps) * w
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + F32(eps)) * w).astype(F32)


def yarn_inv_freq(rope, d):
    """(inv_freq [d/2] float64, attention_factor) per M6."""
    theta = rope["rope_theta"]
    i = np.arange(d // 2, dtype=np.float64)
    base_inv = theta ** (-2.0 * i / d)
    if rope["rope_type"] == "default":
        return base_inv, 1.0
    f = float(rope["factor"])
    L0 = float(rope["original_max_position_embeddings"])
    fast, slow = float(rope.get("beta_fast") or 32), float(rope.get("beta_slow") or 1)
    corr = lambda r: d * math.log(L0 / (2 * math.pi * r)) / (2 * math.log(theta))
    low, high = corr(fast), corr(slow)
    if rope.get("truncate", True):                       # transformers' default when absent
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((i - low) / (high - low), 0.0, 1.0)   # 0: keep the frequency, 1: divide by f
    inv = base_inv * (1.0 - ramp) + (base_inv / f) * ramp
    mscale = lambda s, m=1.0: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
    af = rope.get("attention_factor")
    if af is None:
        m, mad = rope.get("mscale"), rope.get("mscale_all_dim")
        af = mscale(f, m) / mscale(f, mad) if (m and mad) else mscale(f)
    return inv, float(af)


def rope_tables(c, positions):
    """cos, sin [T, d/2]: angles in float64, times the attention factor, cast to fp32."""
    inv, af = yarn_inv_freq(c["rope"], c["head_dim"])
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    return (np.cos(ang) * af).astype(F32), (np.sin(ang) * af).astype(F32)


def apply_rope(x, cos, sin):
    """x [T, heads, d]: pairs (i, i + d/2) (M5)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(F32)


def attend(q, k, v, sinks, positions, window):
    """q [T, H, d], k and v [T, K, d]; sinks [H]; window 0 = full. M3 and M4."""
    T, H, d = q.shape
    n_rep = H // k.shape[1]
    pos = np.asarray(positions)
    allowed = pos[None, :] <= pos[:, None]                       # [i, j]: j <= i
    if window:
        allowed &= (pos[:, None] - pos[None, :]) < window        # i - W < j
    scale = F32(1.0 / math.sqrt(d))
    out = np.zeros((T, H, v.shape[2]), dtype=F32)
    for h in range(H):
        g = h // n_rep                                           # GQA
        s = ((q[:, h, :] @ k[:, g, :].T) * scale).astype(F32)
        s = np.where(allowed, s, F32(-np.inf))
        z = F32(sinks[h])                                        # raw sink logit
        m = np.maximum(s.max(axis=1, keepdims=True), z)
        e = np.exp(s - m)
        p = (e / (np.exp(z - m) + e.sum(axis=1, keepdims=True))).astype(F32)   # sink's share dropped
        out[:, h, :] = p @ v[:, g, :]
    return out


def attention(c, Lw, h, positions, layer):
    T = h.shape[0]
    H, K, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    q = (h @ Lw["q_w"].T + Lw["q_b"]).astype(F32).reshape(T, H, d)
    k = (h @ Lw["k_w"].T + Lw["k_b"]).astype(F32).reshape(T, K, d)
    v = (h @ Lw["v_w"].T + Lw["v_b"]).astype(F32).reshape(T, K, d)
    cos, sin = rope_tables(c, positions)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    window = c["sliding_window"] if c["layer_types"][layer] == "sliding_attention" else 0
    o = attend(q, k, v, Lw["sinks"], positions, window)
    return (o.reshape(T, H * d) @ Lw["o_w"].T + Lw["o_b"]).astype(F32)


def sigmoid(z):
    e = np.exp(-np.abs(z))                                       # no overflow either side
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(F32)


def expert_swiglu(gu, limit, alpha):
    """gu [n, 2I] interleaved -> [n, I] (F8, M8)."""
    gate, up = gu[:, 0::2], gu[:, 1::2]
    gate = np.minimum(gate, F32(limit))                          # clamped from above only
    up = np.clip(up, F32(-limit), F32(limit))
    return (gate * sigmoid(F32(alpha) * gate) * (up + F32(1.0))).astype(F32)


def route(logits, k):
    """Top-k experts (ties to the lower index) and the softmax over their logits (M7)."""
    idx = np.argsort(-logits, axis=-1, kind="stable")[..., :k]
    top = np.take_along_axis(logits, idx, axis=-1)
    w = np.exp(top - top.max(axis=-1, keepdims=True))
    return idx, (w / w.sum(axis=-1, keepdims=True)).astype(F32)


def moe(c, Lw, h):
    logits = (h @ Lw["router_w"].T + Lw["router_b"]).astype(F32)          # [T, E]
    idx, w = route(logits, c["top_k"])
    out = np.zeros_like(h)
    for r in range(c["top_k"]):                      # summed in rank order: best expert first
        for e in np.unique(idx[:, r]):
            rows = np.nonzero(idx[:, r] == e)[0]
            x = h[rows]
            gu = (x @ Lw["gate_up_proj"][e].T + Lw["gate_up_proj_bias"][e]).astype(F32)
            a = expert_swiglu(gu, c["swiglu_limit"], c["swiglu_alpha"])
            y = (a @ Lw["down_proj"][e].T + Lw["down_proj_bias"][e]).astype(F32)
            out[rows] += w[rows, r:r + 1] * y
    return out.astype(F32)


def forward(c, W, ids, all_logits=False):
    """Logits of the last position [V] (or of every position [T, V]) at positions 0..T-1."""
    eps = c["rms_norm_eps"]
    positions = list(range(len(ids)))
    x = W["embed"][np.asarray(ids)].astype(F32)
    for l, Lw in enumerate(W["layers"]):
        x = (x + attention(c, Lw, rmsnorm(x, Lw["ln1"], eps), positions, l)).astype(F32)
        x = (x + moe(c, Lw, rmsnorm(x, Lw["ln2"], eps))).astype(F32)
    x = rmsnorm(x if all_logits else x[-1:], W["norm"], eps)
    logits = (x @ W["lm_head"].T).astype(F32)
    return logits if all_logits else logits[0]


def cast_weights(W, dtype):
    if dtype == np.float32:
        return W
    cv = lambda a: a.astype(dtype) if a.dtype.kind == "f" else a
    return {"embed": cv(W["embed"]), "norm": cv(W["norm"]), "lm_head": cv(W["lm_head"]),
            "layers": [{k: cv(v) for k, v in Lw.items()} for Lw in W["layers"]]}


# ----------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------
def cmd_generate(args):
    c = load_config(args.model)
    W = cast_weights(load_weights(args.model, c), F32)
    stops = set() if args.ignore_eos else stop_ids(args.model, c)
    ids = [int(t) for t in args.prompt_ids.split(",") if t.strip() != ""]
    if not ids:
        raise RefError("empty prompt")
    if max(ids) >= c["vocab_size"] or min(ids) < 0:
        raise RefError("a prompt id is outside the vocabulary")
    out = []
    margins = [] if args.margins else None
    for n in range(args.max_new_tokens):
        last = forward(c, W, ids)
        if not np.all(np.isfinite(last)):
            raise RefError(f"non-finite logits at step {n}")
        if n == 0 and args.dump_logits:
            with open(args.dump_logits, "w") as f:
                json.dump([float(v) for v in last], f)
        tok = sample(last, args.temperature, args.top_p, args.top_k, args.seed, n, margins)
        out.append(tok)
        ids.append(tok)
        if tok in stops:
            break
    print(json.dumps({"token_ids": out, "margins": margins} if args.margins else {"token_ids": out}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pg = sub.add_parser("generate")
    add_generate_args(pg)
    pg.add_argument("--ignore-eos", action="store_true", help="do not stop at the eos ids")
    args = ap.parse_args()
    if args.float64:
        global F32
        F32 = np.float64  # every function reads F32 when called
    try:
        cmd_generate(args)
    except (RefError, OSError, ValueError, KeyError) as e:
        print(f"gpt_oss_ref: {'missing key ' if isinstance(e, KeyError) else ''}{e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
