#!/usr/bin/python3
"""Write a random gpt-oss checkpoint in the Hugging Face layout of openai/gpt-oss-20b / -120b.

The output directory looks like a downloaded snapshot:

  config.json                    transformers' GptOssConfig keys, as the published config has them
  generation_config.json         bos 199998, eos [200002, 199999, 200012], pad 199999 (as published)
  model-00000-of-0000N.safetensors ...   shards numbered from 0; N is the LAST index, as published
                                 (gpt-oss-20b: model-00000-of-00002 .. model-00002-of-00002, 3 files)
  model.safetensors.index.json   {"metadata": {"total_size": ...}, "weight_map": {...}}
  tokenizer.json                 only with --tokenizer PATH (copied)

Tensors, per layer L (prefix model.layers.L.), with the published names, shapes and dtypes
(D hidden_size, H heads, K kv heads, d head_dim, E experts, I intermediate_size, G = in/32):

  input_layernorm.weight, post_attention_layernorm.weight   [D]            BF16
  self_attn.q_proj.weight [H*d, D]   .bias [H*d]                            BF16
  self_attn.k_proj.weight [K*d, D]   .bias [K*d]                            BF16
  self_attn.v_proj.weight [K*d, D]   .bias [K*d]                            BF16
  self_attn.o_proj.weight [D, H*d]   .bias [D]                              BF16
  self_attn.sinks [H]                                                       BF16
  mlp.router.weight [E, D]   mlp.router.bias [E]                            BF16
  mlp.experts.gate_up_proj_blocks [E, 2I, D/32, 16]  U8  (rows interleaved: 2j gate, 2j+1 up)
  mlp.experts.gate_up_proj_scales [E, 2I, D/32]      U8  (e8m0, bias 127)
  mlp.experts.gate_up_proj_bias   [E, 2I]            BF16 (same interleave)
  mlp.experts.down_proj_blocks    [E, D, I/32, 16]   U8
  mlp.experts.down_proj_scales    [E, D, I/32]       U8
  mlp.experts.down_proj_bias      [E, D]             BF16
and model.embed_tokens.weight [V, D], model.norm.weight [D], lm_head.weight [V, D] (untied), BF16.
--f32 norms,sinks,biases stores those small tensors as F32 instead (loaders must accept either);
their values stay bf16-representable, so such a checkpoint computes exactly what the BF16 one does.

MXFP4: each byte holds two FP4 e2m1 codes, the LOW nibble first (element 2i in the low nibble of
byte i, element 2i+1 in the high nibble); 32 elements (16 bytes) share one e8m0 scale 2^(s-127).
The codes are uniform random (all 16, -0 included); each block's scale exponent is drawn
uniformly from 4 consecutive values centred so that the dense weight's rms is about
gain/sqrt(fan_in), gain 2.5 for gate_up (pre-activations of rms ~3: the +-7 clamps bite on a
few per cent) and 0.1 for down. Exponents: tiny gate_up 2^-5..2^-2 (scale bytes 122..125),
down 2^-10..2^-7 (117..120); 20b gate_up 2^-8..2^-5 (119..122), down 2^-13..2^-10 (114..117).

Random values (per tensor, from a generator seeded by (--seed, crc32(name)); values are
generated in fixed-size chunks, so the output is byte-identical for a seed and independent of
memory): embeddings N(0,1); norms 1 + 0.1 N(0,1); attention / router weights
N(0, 1/fan_in); biases small N(0, 0.02..0.1); sinks N(0, 1.5^2) (unclamped in gpt-oss);
lm_head N(0, logit_std^2/D) so that logits have a std of about --logit-std (default 5: a
peaked but not degenerate next-token distribution over the 201,088 tokens).

Presets: tiny (CI: hidden 64, 4 layers, 8 experts top-4, intermediate 96 = 3 MXFP4 blocks,
head_dim 64 with 4 q heads / 2 kv heads, real vocab 201088, sliding_window 32,
original_max_position_embeddings 256, YaRN factor 32), 20b and 120b (the exact published
shapes and config). --set KEY=JSON overrides a config field (dotted keys reach into
rope_scaling, e.g. --set rope_scaling.factor=16; num_experts_per_tok and experts_per_token
are set together; a new num_hidden_layers gets the alternating layer_types; a new
original_max_position_embeddings also sets initial_context_length, and it or a new factor
sets max_position_embeddings = their product, unless given).

Shards: huggingface_hub's greedy split at --shard-size bytes (default 5e9 for 20b/120b, which
reproduces the published 20b split; 4e5 for tiny, which gives embed_tokens and lm_head shards
of their own and a layer split across two shards). The published config has no torch_dtype /
dtype key; --dtype-key adds one. The 20b / 120b presets are written tensor by tensor in
bounded chunks, never holding the model in memory (about 13.8 GB / 65 GB of files); --dry-run
prints the shard plan and total_size without writing anything.

numpy only; run with /usr/bin/python3.

  make_gptoss_checkpoint.py --preset tiny --out DIR [--seed S] [--set KEY=VALUE ...]
      [--rope-parameters] [--f32 norms,sinks,biases] [--shard-size BYTES]
      [--dtype-key {none,torch_dtype,dtype}] [--logit-std X] [--tokenizer PATH] [--dry-run]
"""
import argparse
import copy
import json
import math
import os
import shutil
import struct
import sys
import zlib

import numpy as np

CHUNK = 1 << 20  # elements per generation step: fixed, so the bytes do not depend on memory

# ----------------------------------------------------------------------------
# Presets (published values: https://huggingface.co/openai/gpt-oss-20b/raw/main/config.json)
# ----------------------------------------------------------------------------
BASE_20B = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": None,  # filled: sliding, full, sliding, full, ...
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "transformers_version": "4.55.0.dev0",
    "use_cache": True,
    "vocab_size": 201088,
}

PRESETS = {
    "20b": ({}, 5_000_000_000),
    "120b": ({"num_hidden_layers": 36, "num_local_experts": 128}, 5_000_000_000),
    "tiny": ({
        "hidden_size": 64,
        "intermediate_size": 96,          # 3 MXFP4 blocks per down_proj row: an odd count
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_local_experts": 8,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "sliding_window": 32,
        "rope_scaling.original_max_position_embeddings": 256,   # also sets initial_context_length
                                                                # and max_position_embeddings 8192
    }, 400_000),                          # small shards: embed, lm_head alone; a layer split in two
}

GENERATION_CONFIG = {
    "bos_token_id": 199998,
    "do_sample": True,
    "eos_token_id": [200002, 199999, 200012],
    "pad_token_id": 199999,
    "transformers_version": "4.55.0.dev0",
}

# Per-layer tensor order of the published index (model.safetensors.index.json of gpt-oss-20b)
LAYER_ORDER = [
    "input_layernorm.weight",
    "self_attn.o_proj.bias", "self_attn.o_proj.weight",
    "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.sinks",
    "mlp.router.bias", "mlp.router.weight",
    "mlp.experts.gate_up_proj_bias", "mlp.experts.gate_up_proj_blocks", "mlp.experts.gate_up_proj_scales",
    "mlp.experts.down_proj_bias", "mlp.experts.down_proj_blocks", "mlp.experts.down_proj_scales",
    "post_attention_layernorm.weight",
]

DTYPE_BYTES = {"BF16": 2, "F32": 4, "U8": 1}
# safetensors writes tensors sorted by dtype (wider first), then by name; we do the same
DTYPE_RANK = {"F32": 0, "BF16": 1, "U8": 2}
FP4_RMS = math.sqrt(sum(v * v for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)) / 8)  # 2.926


def die(msg):
    print("make_gptoss_checkpoint: " + msg, file=sys.stderr)
    sys.exit(2)


# ----------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------
def parse_value(s):
    try:
        return json.loads(s)
    except ValueError:
        return s


def build_config(preset, sets, rope_parameters, dtype_key):
    cfg = copy.deepcopy(BASE_20B)
    overrides, _ = PRESETS[preset]
    items = list(overrides.items()) + sets
    explicit = set()
    for key, val in items:
        explicit.add(key)
        if key in ("num_experts_per_tok", "experts_per_token"):
            cfg["num_experts_per_tok"] = cfg["experts_per_token"] = val   # the two aliases agree
        elif "." in key:
            head, tail = key.split(".", 1)
            if head not in cfg or not isinstance(cfg[head], dict):
                die(f"--set {key}: {head} is not a dictionary field")
            cfg[head][tail] = val
        else:
            if key not in cfg:
                print(f"make_gptoss_checkpoint: note: {key} is not a published gpt-oss config key",
                      file=sys.stderr)
            cfg[key] = val
    if cfg["layer_types"] is None or ("num_hidden_layers" in explicit and "layer_types" not in explicit):
        # transformers' default, and the published pattern: even layers slide, odd are full
        cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                              for i in range(cfg["num_hidden_layers"])]
    rs = cfg["rope_scaling"]
    if "rope_scaling.original_max_position_embeddings" in explicit and "initial_context_length" not in explicit:
        # openai's gpt_oss/torch/model.py takes YaRN's original length from initial_context_length
        cfg["initial_context_length"] = rs["original_max_position_embeddings"]
    if ({"rope_scaling.original_max_position_embeddings", "rope_scaling.factor"} & explicit
            and "max_position_embeddings" not in explicit):
        # as published: 131072 = 4096 * 32
        cfg["max_position_embeddings"] = int(rs["original_max_position_embeddings"] * rs["factor"])
    validate(cfg)
    if rope_parameters:
        # newer transformers (v5): rope_theta moves inside rope_parameters; no rope_scaling
        rp = dict(rs)
        rp["rope_theta"] = cfg.pop("rope_theta")
        del cfg["rope_scaling"]
        cfg["rope_parameters"] = rp
    if dtype_key != "none":
        cfg[dtype_key] = "bfloat16"
    return cfg


def validate(cfg):
    D, I, H, K = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if D % 32 or I % 32:
        die(f"hidden_size ({D}) and intermediate_size ({I}) must be multiples of 32 (MXFP4 blocks)")
    if H % K:
        die(f"num_attention_heads ({H}) must be a multiple of num_key_value_heads ({K})")
    if cfg["head_dim"] % 2:
        die("head_dim must be even")
    if len(cfg["layer_types"]) != cfg["num_hidden_layers"]:
        die("layer_types must have num_hidden_layers entries")
    if not 0 < cfg["num_experts_per_tok"] <= cfg["num_local_experts"]:
        die("num_experts_per_tok must be in 1..num_local_experts")


# ----------------------------------------------------------------------------
# Tensor plan
# ----------------------------------------------------------------------------
class Spec:
    def __init__(self, name, shape, dtype, kind, **kw):
        self.name, self.shape, self.dtype, self.kind, self.kw = name, list(shape), dtype, kind, kw

    @property
    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self):
        return self.numel * DTYPE_BYTES[self.dtype]


def mx_exponents(gain, fan_in):
    """Four consecutive scale exponents centred so that dense rms ~ gain / sqrt(fan_in)."""
    c = int(round(math.log2(gain / (math.sqrt(fan_in) * FP4_RMS))))
    return c - 2, c + 1


def tensor_plan(cfg, f32, logit_std):
    D, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, K, d, E = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_local_experts"]
    small = lambda what: "F32" if what in f32 else "BF16"
    per_layer = {
        "input_layernorm.weight": ([D], small("norms"), "norm", {}),
        "post_attention_layernorm.weight": ([D], small("norms"), "norm", {}),
        "self_attn.q_proj.weight": ([H * d, D], "BF16", "normal", {"std": 1 / math.sqrt(D)}),
        "self_attn.k_proj.weight": ([K * d, D], "BF16", "normal", {"std": 1 / math.sqrt(D)}),
        "self_attn.v_proj.weight": ([K * d, D], "BF16", "normal", {"std": 1 / math.sqrt(D)}),
        "self_attn.o_proj.weight": ([D, H * d], "BF16", "normal", {"std": 1 / math.sqrt(H * d)}),
        "self_attn.q_proj.bias": ([H * d], small("biases"), "normal", {"std": 0.1}),
        "self_attn.k_proj.bias": ([K * d], small("biases"), "normal", {"std": 0.1}),
        "self_attn.v_proj.bias": ([K * d], small("biases"), "normal", {"std": 0.1}),
        "self_attn.o_proj.bias": ([D], small("biases"), "normal", {"std": 0.02}),
        "self_attn.sinks": ([H], small("sinks"), "normal", {"std": 1.5}),
        "mlp.router.weight": ([E, D], "BF16", "normal", {"std": 1 / math.sqrt(D)}),
        "mlp.router.bias": ([E], small("biases"), "normal", {"std": 0.1}),
        # gate_up: pre-activations of rms ~3, so the +-7 clamps bite now and then
        "mlp.experts.gate_up_proj_blocks": ([E, 2 * I, D // 32, 16], "U8", "codes", {}),
        "mlp.experts.gate_up_proj_scales": ([E, 2 * I, D // 32], "U8", "scales", {"exps": mx_exponents(2.5, D)}),
        "mlp.experts.gate_up_proj_bias": ([E, 2 * I], small("biases"), "normal", {"std": 0.1}),
        "mlp.experts.down_proj_blocks": ([E, D, I // 32, 16], "U8", "codes", {}),
        "mlp.experts.down_proj_scales": ([E, D, I // 32], "U8", "scales", {"exps": mx_exponents(0.1, I)}),
        "mlp.experts.down_proj_bias": ([E, D], small("biases"), "normal", {"std": 0.02}),
    }
    assert set(per_layer) == set(LAYER_ORDER)
    specs = []
    # The published index lists the layers in string order (0, 1, 10, 11, ..., 19, 2, 20, ...)
    for l in sorted(range(cfg["num_hidden_layers"]), key=str):
        for short in LAYER_ORDER:
            shape, dtype, kind, kw = per_layer[short]
            specs.append(Spec(f"model.layers.{l}.{short}", shape, dtype, kind, **kw))
    specs.append(Spec("model.embed_tokens.weight", [V, D], "BF16", "normal", std=1.0))
    specs.append(Spec("model.norm.weight", [D], small("norms"), "norm"))
    specs.append(Spec("lm_head.weight", [V, D], "BF16", "normal", std=logit_std / math.sqrt(D)))
    return specs


def split_shards(specs, max_bytes):
    """huggingface_hub's split_state_dict_into_shards: greedy in order; a tensor larger than
    the limit gets a shard of its own (appended at once); a tensor that would tip the current
    shard over the limit closes it."""
    shards, cur, cur_bytes = [], [], 0
    for s in specs:
        if s.nbytes > max_bytes:
            shards.append([s])
            continue
        if cur and cur_bytes + s.nbytes > max_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(s)
        cur_bytes += s.nbytes
    if cur:
        shards.append(cur)
    return shards


def shard_name(i, n):
    # numbered from 0, "of" the last index: gpt-oss-20b has model-0000{0,1,2}-of-00002.safetensors
    return f"model-{i:05d}-of-{n - 1:05d}.safetensors"


# ----------------------------------------------------------------------------
# Values
# ----------------------------------------------------------------------------
def f32_to_bf16_bits(a):
    """Round fp32 to nearest-even into the top 16 bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def tensor_rng(seed, name):
    return np.random.default_rng([seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(name.encode())])


def tensor_chunks(spec, seed):
    """Yield the tensor's bytes in order, CHUNK elements at a time."""
    rng = tensor_rng(seed, spec.name)
    n = spec.numel
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        if spec.kind == "codes":                     # two random FP4 codes per byte
            yield rng.integers(0, 256, m, dtype=np.uint8).tobytes()
            continue
        if spec.kind == "scales":                    # e8m0: byte = exponent + 127
            lo, hi = spec.kw["exps"]
            yield rng.integers(127 + lo, 127 + hi + 1, m, dtype=np.uint8).tobytes()
            continue
        z = rng.standard_normal(m, dtype=np.float32)
        if spec.kind == "norm":
            a = 1.0 + 0.1 * z
        else:
            a = z * np.float32(spec.kw["std"])
        bits = f32_to_bf16_bits(a)
        if spec.dtype == "F32":   # the same bf16-representable values, widened: same model
            yield (bits.astype(np.uint32) << 16).astype("<u4").tobytes()
        else:
            yield bits.tobytes()


# ----------------------------------------------------------------------------
# safetensors writer (streaming)
# ----------------------------------------------------------------------------
def shard_header(specs):
    """The header bytes (JSON padded with spaces to 8-byte alignment, as the reference writer
    does) and the specs in their data order."""
    ordered = sorted(specs, key=lambda s: (DTYPE_RANK[s.dtype], s.name))
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for s in ordered:
        header[s.name] = {"dtype": s.dtype, "shape": s.shape, "data_offsets": [off, off + s.nbytes]}
        off += s.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return h, ordered


def write_shard(path, specs, seed):
    h, ordered = shard_header(specs)
    with open(path + ".part", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for s in ordered:
            written = 0
            for b in tensor_chunks(s, seed):
                f.write(b)
                written += len(b)
            assert written == s.nbytes, (s.name, written, s.nbytes)
    os.replace(path + ".part", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--out", help="output directory (created)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field (VALUE is JSON; dotted keys reach into rope_scaling)")
    ap.add_argument("--rope-parameters", action="store_true",
                    help="write newer transformers' rope_parameters (with rope_theta inside) "
                         "instead of rope_scaling + rope_theta")
    ap.add_argument("--f32", default="", help="comma list of norms,sinks,biases to store as F32, not BF16")
    ap.add_argument("--shard-size", type=float, default=None,
                    help="max bytes per shard (default: 5e9 for 20b/120b, 4e5 for tiny)")
    ap.add_argument("--dtype-key", choices=["none", "torch_dtype", "dtype"], default="none",
                    help="also write this key = \"bfloat16\" (the published config has neither)")
    ap.add_argument("--logit-std", type=float, default=5.0, help="lm_head std times sqrt(hidden_size)")
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json to copy into the output")
    ap.add_argument("--dry-run", action="store_true", help="print the shard plan; write nothing")
    args = ap.parse_args()

    f32 = {w for w in args.f32.split(",") if w}
    if f32 - {"norms", "sinks", "biases"}:
        die(f"--f32: unknown {sorted(f32 - {'norms', 'sinks', 'biases'})}; use norms,sinks,biases")
    sets = []
    for kv in args.sets:
        if "=" not in kv:
            die(f"--set {kv}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        sets.append((k, parse_value(v)))
    cfg = build_config(args.preset, sets, args.rope_parameters, args.dtype_key)
    specs = tensor_plan(cfg, f32, args.logit_std)
    max_bytes = int(args.shard_size if args.shard_size is not None else PRESETS[args.preset][1])
    shards = split_shards(specs, max_bytes)
    names = [shard_name(i, len(shards)) for i in range(len(shards))]
    total = sum(s.nbytes for s in specs)
    if args.dry_run:
        print(json.dumps({
            "total_size": total,
            "params": sum(s.numel * (2 if s.kind == "codes" else 1) for s in specs if s.kind != "scales"),
            "shards": [{"file": n, "bytes": sum(s.nbytes for s in sh), "tensors": len(sh),
                        "first": sh[0].name, "last": sh[-1].name} for n, sh in zip(names, shards)],
        }, indent=1))
        return
    if not args.out:
        die("--out is required (or --dry-run)")
    if args.tokenizer and not os.path.isfile(args.tokenizer):
        die(f"--tokenizer {args.tokenizer}: no such file")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f, indent=2)
        f.write("\n")
    weight_map = {}
    for name, sh in zip(names, shards):
        write_shard(os.path.join(args.out, name), sh, args.seed)
        for s in sh:
            weight_map[s.name] = name
        print(f"wrote {name} ({sum(s.nbytes for s in sh)} bytes, {len(sh)} tensors)", file=sys.stderr)
    # weight_map in plan order, as the published index lists it
    weight_map = {s.name: weight_map[s.name] for s in specs}
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    if args.tokenizer:
        shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    print(f"wrote {args.preset} checkpoint ({total} bytes of tensors, {len(shards)} shards) to {args.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
