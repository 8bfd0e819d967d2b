#!/usr/bin/python3
"""Optional cross-check of gpt_oss_ref.py against openai's own PyTorch gpt-oss code.

Not run by CI and not a dependency of anything: it needs PyTorch (Debian: apt-get install
python3-torch) and a checkout of https://github.com/openai/gpt-oss (for gpt_oss/torch/model.py
and weights.py). It loads a checkpoint in the Hugging Face layout (e.g. one written by
scripts/make_gptoss_checkpoint.py), fills openai's Transformer with it (q/k/v concatenated into
qkv, the experts decoded by openai's own MXFP4 code in weights.py), runs it in fp32, and
compares the logits with gpt_oss_ref.forward at a few prompt lengths.

  crosscheck_openai_torch.py --model DIR --oai-src PATH/TO/gpt-oss [--tokens 300]

openai's model.py takes YaRN's original length from initial_context_length, slides on even
layers (ignoring layer_types) and never rounds the YaRN correction range (truncate false).
Measured on the tiny preset (seed 5, 300 tokens: past the 32-token window and the 256-token
original_max_position_embeddings): max |logit difference| 4.9e-05 of logits up to 25, same
argmax; the decoded experts are bit-identical.
"""
import argparse
import importlib.util
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--oai-src", required=True, help="a checkout of openai/gpt-oss")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--tolerance", type=float, default=1e-3, help="max |d logit| allowed")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(1)
    if importlib.util.find_spec("safetensors") is None:
        # weights.py imports safe_open at the top; we never call it
        sys.modules["safetensors"] = types.SimpleNamespace(safe_open=None)
    sys.path[:0] = [args.oai_src, HERE]
    from gpt_oss.torch.model import ModelConfig, Transformer
    from gpt_oss.torch.weights import Checkpoint
    import gpt_oss_ref as R

    c = R.load_config(args.model)
    ck = R.Checkpoint(args.model)
    rp = c["rope"]
    if rp["rope_type"] != "yarn" or rp.get("truncate", True):
        sys.exit("openai's model.py implements YaRN with truncate false only")
    cfg = ModelConfig(
        num_hidden_layers=c["num_hidden_layers"], num_experts=c["n_experts"], experts_per_token=c["top_k"],
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
        swiglu_limit=c["swiglu_limit"], head_dim=c["head_dim"], num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"], sliding_window=c["sliding_window"],
        initial_context_length=rp["original_max_position_embeddings"], rope_theta=rp["rope_theta"],
        rope_scaling_factor=rp["factor"], rope_ntk_alpha=rp["beta_slow"], rope_ntk_beta=rp["beta_fast"])
    model = Transformer(cfg, device=torch.device("cpu")).float().eval()

    oc = object.__new__(Checkpoint)            # openai's MXFP4 decoder, reading through our reader
    oc.tensor_name_to_file = {n: None for n in ck.where}
    oc._get_tensor = lambda name: torch.from_numpy(np.array(ck.get(name)))
    T = oc._get_tensor
    mx = lambda p: oc._get_mxfp4_tensor(p + "_blocks", p + "_scales", dtype=torch.float32)
    sd = {"embedding.weight": T("model.embed_tokens.weight"), "norm.scale": T("model.norm.weight"),
          "unembedding.weight": T("lm_head.weight")}
    for l in range(c["num_hidden_layers"]):
        p, a, b = f"model.layers.{l}.", f"block.{l}.attn.", f"block.{l}.mlp."
        sd[a + "norm.scale"] = T(p + "input_layernorm.weight")
        sd[a + "qkv.weight"] = torch.cat([T(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
        sd[a + "qkv.bias"] = torch.cat([T(p + f"self_attn.{x}_proj.bias") for x in "qkv"])
        sd[a + "sinks"] = T(p + "self_attn.sinks")
        sd[a + "out.weight"] = T(p + "self_attn.o_proj.weight")
        sd[a + "out.bias"] = T(p + "self_attn.o_proj.bias")
        sd[b + "norm.scale"] = T(p + "post_attention_layernorm.weight")
        sd[b + "gate.weight"] = T(p + "mlp.router.weight")
        sd[b + "gate.bias"] = T(p + "mlp.router.bias")
        sd[b + "mlp1_weight"] = mx(p + "mlp.experts.gate_up_proj")
        sd[b + "mlp1_bias"] = T(p + "mlp.experts.gate_up_proj_bias")
        sd[b + "mlp2_weight"] = mx(p + "mlp.experts.down_proj")
        sd[b + "mlp2_bias"] = T(p + "mlp.experts.down_proj_bias")
    model.load_state_dict(sd, strict=True)

    W = R.load_weights(args.model, c)
    same = all(np.array_equal(W["layers"][l]["gate_up_proj"], sd[f"block.{l}.mlp.mlp1_weight"].numpy()) and
               np.array_equal(W["layers"][l]["down_proj"], sd[f"block.{l}.mlp.mlp2_weight"].numpy())
               for l in range(c["num_hidden_layers"]))
    print(f"experts decoded identically by openai's weights.py: {same}")
    ids = [int(t) for t in np.random.default_rng(3).integers(0, c["vocab_size"], args.tokens)]
    with torch.no_grad():
        want = model(torch.tensor(ids)).numpy()
    worst = 0.0
    for n in sorted({args.tokens, min(args.tokens, 200), min(args.tokens, 40)}, reverse=True):
        got = R.forward(c, W, ids[:n])
        diff = float(np.abs(got - want[n - 1]).max())
        worst = max(worst, diff)
        print(f"T={n}: max |d logit| {diff:.3e} of max |logit| {np.abs(want[n - 1]).max():.2f}; "
              f"argmax {int(got.argmax())} vs {int(want[n - 1].argmax())}")
    sys.exit(0 if same and worst <= args.tolerance else 1)


if __name__ == "__main__":
    main()
