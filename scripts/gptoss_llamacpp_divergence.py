#!/usr/bin/python3
"""gptoss_llamacpp_divergence.py: which of llama.cpp's numeric differences decides one greedy divergence.

At a step where pdserve and llama.cpp pick different tokens A (llama.cpp's) and B (pdserve's)
(scripts/gptoss_llamacpp_agreement.sh finds them), this recomputes the last position's logits with
the numpy reference (tests/reference/gpt_oss_ref.py) exactly and with llama.cpp's roundings
emulated: YaRN correction dims floored/ceiled, the MXFP4 experts' input activations rounded to
Q8_0 (int8 per 32, fp16 block scale, as ggml's quantize_row_q8_0), both, and int8 with fp32 scales
(pdserve's --mxfp4-kernel dot). It prints logit[A] - logit[B] and the top 5 of each, then how many
(position, layer) router top-k sets the Q8_0 rounding changes and their 4th-5th router logit gaps.
numpy only; seconds on the agreement script's checkpoint (not for 20b shapes: the reference
widens the experts to fp32).

  gptoss_llamacpp_divergence.py MODEL_DIR PREFIX_IDS A B     (PREFIX_IDS: 1,2,3 = prompt + common tokens)
"""
import sys, json, copy, os
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import numpy as np
import gpt_oss_ref as R
F32 = np.float32
if len(sys.argv) != 5 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
model = sys.argv[1]
ids = [int(t) for t in sys.argv[2].split(",")]
A, B = int(sys.argv[3]), int(sys.argv[4])
c = R.load_config(model)
W = R.load_weights(model, c)

FP16_SCALE = True
def q8_0(x):
    """llama.cpp quantize_row_q8_0_ref: per 32, d = amax/127 (stored fp16), q = round(x/d)."""
    n, k = x.shape
    xb = x.reshape(n, k // 32, 32).astype(F32)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    d = amax / F32(127)
    idd = np.where(d > 0, F32(1) / np.where(d > 0, d, 1), 0).astype(F32)
    q = np.rint(xb * idd)          # roundf: half away from zero; rint: half to even (ties are rare)
    d16 = d.astype(np.float16).astype(F32) if FP16_SCALE else d
    return (q * d16).reshape(n, k).astype(F32)

orig_moe = R.moe
def moe_q8(c, Lw, h):
    logits = (h @ Lw["router_w"].T + Lw["router_b"]).astype(F32)
    idx, w = R.route(logits, c["top_k"])
    out = np.zeros_like(h)
    for r in range(c["top_k"]):
        for e in np.unique(idx[:, r]):
            rows = np.nonzero(idx[:, r] == e)[0]
            x = q8_0(h[rows])
            gu = (x @ Lw["gate_up_proj"][e].T + Lw["gate_up_proj_bias"][e]).astype(F32)
            a = q8_0(R.expert_swiglu(gu, c["swiglu_limit"], c["swiglu_alpha"]))
            y = (a @ Lw["down_proj"][e].T + Lw["down_proj_bias"][e]).astype(F32)
            out[rows] += w[rows, r:r + 1] * y
    return out.astype(F32)

def run(name, q8=False, truncate=False):
    cc = copy.deepcopy(c)
    cc["rope"]["truncate"] = truncate
    R.moe = moe_q8 if q8 else orig_moe
    l = R.forward(cc, W, ids)
    top = np.argsort(-l)[:5]
    print(f"{name:34s} logit[{A}] - logit[{B}] = {l[A] - l[B]:+.3f}; top 5 {[(int(t), round(float(l[t]), 3)) for t in top]}")

run("exact (gpt-oss)")
run("YaRN dims floor/ceil", truncate=True)
run("Q8_0 expert activations", q8=True)
run("Q8_0 + floor/ceil", q8=True, truncate=True)
FP16_SCALE = False
run("int8, fp32 scales (pdserve dot)", q8=True)
FP16_SCALE = True

# Router choices: how many (position, layer) top-4 sets change between exact and Q8_0 activations?
routes = {}
def tracing(q8):
    base = moe_q8 if q8 else orig_moe
    rec = []
    def f(c, Lw, h):
        logits = (h @ Lw["router_w"].T + Lw["router_b"]).astype(F32)
        s = np.sort(logits, axis=-1)[:, ::-1]
        rec.append((np.sort(np.argsort(-logits, axis=-1, kind="stable")[:, :c["top_k"]], axis=-1), s[:, 3] - s[:, 4]))
        return base(c, Lw, h)
    return f, rec
for q8 in (False, True):
    f, rec = tracing(q8)
    R.moe = f
    R.forward(c, W, ids)
    routes[q8] = rec
diff = 0; tot = 0; gaps = []
for (a, g), (b, _) in zip(routes[False], routes[True]):
    ch = (a != b).any(axis=-1)
    diff += int(ch.sum()); tot += len(ch)
    gaps += list(g[ch])
print(f"router top-4 sets that differ (exact vs Q8_0 activations): {diff} of {tot} (position, layer) pairs; "
      f"their 4th-5th router logit gaps in the exact run: {[round(float(x), 4) for x in gaps]}")
allg = np.concatenate([g for _, g in routes[False]])
print(f"4th-5th router logit gap, all pairs: median {np.median(allg):.3f}, smallest {allg.min():.4f}")
