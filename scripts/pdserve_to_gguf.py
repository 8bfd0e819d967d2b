#!/usr/bin/env python3
"""pdserve_to_gguf.py: a pdserve or a Hugging Face gpt-oss checkpoint as a llama.cpp gpt-oss GGUF.

Usage: PYTHONPATH=.cache/llama/src/gguf-py python3 scripts/pdserve_to_gguf.py \
           MODEL_DIR OUT.gguf [--outtype f32|bf16|f16|q8_0|auto] [--tokenizer tokenizer.json]

The layout is detected: model.safetensors.index.json, or config.json with model_type gpt_oss,
is the Hugging Face gpt-oss layout (openai/gpt-oss-20b, -120b, scripts/make_gptoss_checkpoint.py);
anything else is pdserve's own GPT-OSS-Lite layout, converted exactly as before. The Hugging
Face layout's conversion is scripts/gguf_hf_gptoss.py (llama.cpp's GptOssModel, byte for byte).

pdserve's own layout, for scripts/bench_vs_llamacpp.sh: llama.cpp must load the model and run it
at the same cost as pdserve, not compute the same numbers. Contents:
  read_checkpoint   config.json + model.safetensors (F32/BF16/F16) -> numpy f32
  moe_tensors       the shared expert becomes a 9th routed expert; top_k + 1
                    used, so a token reads the same expert bytes. Its router
                    row is zero with a large bias, so it is always picked.
  write_gguf        metadata gpt-oss needs (sliding window, sinks, YaRN,
                    expert counts, a byte-level tokenizer) and the tensors.
What differs from pdserve's math (stated in the benchmark table): gpt-oss's
clamped SwiGLU (x*sigmoid(1.702x)*(up+1)) instead of silu(x)*up, a softmax
over 3 gates instead of 2 plus an ungated shared expert, zero biases that
gpt-oss requires, no rotary identity pairs on global layers, sinks stored
already clamped, and the tied embedding written twice (token_embd, output).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("pdserve_to_gguf.py: needs llama.cpp's gguf-py on PYTHONPATH "
             "(.cache/llama/src/gguf-py, fetched by scripts/bench_vs_llamacpp.sh)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_hf_gptoss import die, gpt2_byte_tokens, hf_convert, is_hf_layout, mxfp4_to_ggml  # noqa: E402,F401

ROUTER_BIAS_SHARED = 30.0  # softmax weight of the always-on expert ~1


def read_checkpoint(model_dir):
    """Returns (config dict, {name: np.float32 array}) of a pdserve model dir."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        raw = data[begin:end]
        if meta["dtype"] == "F32":
            arr = raw.view(np.float32)
        elif meta["dtype"] == "F16":
            arr = raw.view(np.float16).astype(np.float32)
        elif meta["dtype"] == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            sys.exit(f"{path}: tensor {name} has dtype {meta['dtype']}, expected F32, BF16 or F16")
        tensors[name] = arr.reshape(meta["shape"])
    return config, tensors


def cfg(config, key, default):
    return config.get(key, default)


def shared_names(prefix, n_shared, proj):
    if n_shared == 1:
        return [f"{prefix}moe.shared.{proj}.weight"]
    return [f"{prefix}moe.shared.{j}.{proj}.weight" for j in range(n_shared)]


def moe_tensors(t, prefix, n_shared):
    """Routed experts plus shared ones as extra experts: gate, up, down, router, router bias."""
    stacked = {}
    for proj in ("gate_proj", "up_proj", "down_proj"):
        extra = [t[n][None] for n in shared_names(prefix, n_shared, proj)]
        stacked[proj] = np.concatenate([t[f"{prefix}moe.experts.{proj}"]] + extra, axis=0)
    router = t[f"{prefix}moe.router.weight"]
    n_routed, d_model = router.shape
    router = np.concatenate([router, np.zeros((n_shared, d_model), np.float32)], axis=0)
    bias = np.concatenate([np.zeros(n_routed, np.float32), np.full(n_shared, ROUTER_BIAS_SHARED, np.float32)])
    return stacked, router, bias


def write_metadata(w, c, n_experts, n_used):
    w.add_name(cfg(c, "name", "gpt-oss-lite"))
    w.add_context_length(cfg(c, "max_context", 131072))
    w.add_embedding_length(c["d_model"])
    w.add_block_count(c["n_layers"])
    w.add_feed_forward_length(c["expert_hidden"])
    w.add_expert_feed_forward_length(c["expert_hidden"])
    w.add_head_count(c["n_heads"])
    w.add_head_count_kv(c["n_kv_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_rope_freq_base(float(cfg(c, "rope_theta", 100000)))
    yarn = cfg(c, "yarn", {})
    if float(yarn.get("factor", 32)) > 1:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(yarn.get("factor", 32)))
        w.add_rope_scaling_orig_ctx_len(int(yarn.get("original_max_position", 4096)))
        w.add_rope_scaling_yarn_beta_fast(float(yarn.get("beta_fast", 32)))
        w.add_rope_scaling_yarn_beta_slow(float(yarn.get("beta_slow", 1)))
    w.add_layer_norm_rms_eps(float(cfg(c, "norm_eps", 1e-5)))
    w.add_sliding_window(c["window"])  # pattern 2: even layers windowed, as in pdserve
    w.add_expert_count(n_experts)
    w.add_expert_used_count(n_used)
    tokens, types, merges = gpt2_byte_tokens(c["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = c.get("eos_token_id")
    w.add_bos_token_id(c["vocab_size"] - 2)  # placeholders (CONTROL) in a vocabulary above 258
    w.add_eos_token_id(int(eos) if eos is not None else c["vocab_size"] - 1)
    w.add_add_bos_token(False)


class TensorSink:
    """Adds tensors in the chosen dtype; 1-D tensors and the router stay F32."""

    QTYPE = {"f32": gguf.GGMLQuantizationType.F32, "bf16": gguf.GGMLQuantizationType.BF16,
             "f16": gguf.GGMLQuantizationType.F16}

    def __init__(self, writer, outtype):
        self.w, self.qtype = writer, self.QTYPE[outtype]

    def add(self, name, arr, keep_f32=False):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if keep_f32 or arr.ndim == 1 or self.qtype == gguf.GGMLQuantizationType.F32:
            self.w.add_tensor(name, arr)
        elif self.qtype == gguf.GGMLQuantizationType.F16:
            self.w.add_tensor(name, arr.astype(np.float16))
        else:
            self.w.add_tensor(name, gguf.quants.quantize(arr, self.qtype), raw_dtype=self.qtype)


def write_layer(sink, c, t, l):
    p, b = f"blocks.{l}.", f"blk.{l}."
    kd = c["n_kv_heads"] * c["head_dim"]
    n_shared = cfg(c, "n_shared_experts", 1)
    sink.add(b + "attn_norm.weight", t[p + "norm1.weight"])
    sink.add(b + "attn_q.weight", t[p + "attn.q_proj.weight"])
    kv = t[p + "attn.kv_proj.weight"]
    sink.add(b + "attn_k.weight", kv[:kd])
    sink.add(b + "attn_v.weight", kv[kd:])
    sink.add(b + "attn_output.weight", t[p + "attn.o_proj.weight"])
    sink.add(b + "attn_output.bias", np.zeros(c["d_model"], np.float32))
    lo, hi = cfg(c, "sink_clamp", [-10, 15])
    sink.add(b + "attn_sinks.weight", np.clip(t[p + "attn.sink_bias"], lo, hi))
    sink.add(b + "post_attention_norm.weight", t[p + "norm2.weight"])
    experts, router, router_bias = moe_tensors(t, p, n_shared)
    n_exp = router.shape[0]
    sink.add(b + "ffn_gate_inp.weight", router, keep_f32=True)
    sink.add(b + "ffn_gate_inp.bias", router_bias)
    sink.add(b + "ffn_gate_exps.weight", experts["gate_proj"])
    sink.add(b + "ffn_up_exps.weight", experts["up_proj"])
    sink.add(b + "ffn_down_exps.weight", experts["down_proj"])
    zeros_f = np.zeros((n_exp, c["expert_hidden"]), np.float32)
    sink.add(b + "ffn_gate_exps.bias", zeros_f, keep_f32=True)
    sink.add(b + "ffn_up_exps.bias", zeros_f, keep_f32=True)
    sink.add(b + "ffn_down_exps.bias", np.zeros((n_exp, c["d_model"]), np.float32), keep_f32=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "bf16", "f16", "q8_0", "auto"], default=None,
                    help="weights other than the MXFP4 experts; default: f32 for a pdserve checkpoint, "
                         "auto (as stored: bf16) for the Hugging Face layout; q8_0 and auto for the latter only")
    ap.add_argument("--tokenizer", default=None,
                    help="Hugging Face layout: tokenizer.json to use when MODEL_DIR has none "
                         "(default .cache/tokenizers/gptoss/tokenizer.json); none: a byte-level placeholder")
    args = ap.parse_args()
    if is_hf_layout(args.model_dir):
        hf_convert(args.model_dir, args.out, args.outtype or "auto", args.tokenizer)
        return
    if args.outtype in ("q8_0", "auto"):
        die(f"--outtype {args.outtype}: for the Hugging Face layout only (a pdserve checkpoint: f32, bf16, "
            "f16; Q8_0 by llama-quantize)")
    args.outtype = args.outtype or "f32"
    c, t = read_checkpoint(args.model_dir)
    n_shared = cfg(c, "n_shared_experts", 1)
    n_experts, n_used = c["n_experts"] + n_shared, c["top_k"] + n_shared
    w = gguf.GGUFWriter(args.out, "gpt-oss")
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
             "f16": gguf.LlamaFileType.MOSTLY_F16}[args.outtype]
    w.add_file_type(ftype)
    write_metadata(w, c, n_experts, n_used)
    sink = TensorSink(w, args.outtype)
    sink.add("token_embd.weight", t["embed.weight"])
    for l in range(c["n_layers"]):
        write_layer(sink, c, t, l)
    sink.add("output_norm.weight", t["norm.weight"])
    sink.add("output.weight", t["embed.weight"] if cfg(c, "tie_embeddings", True) else t["head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: {n_experts} experts ({n_shared} shared as routed), top-{n_used}, {args.outtype}")


if __name__ == "__main__":
    main()
