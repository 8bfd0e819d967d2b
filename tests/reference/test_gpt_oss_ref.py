#!/usr/bin/python3
"""Self-checks of tests/reference/gpt_oss_ref.py and scripts/make_gptoss_checkpoint.py.

  /usr/bin/python3 tests/reference/test_gpt_oss_ref.py [-v]

Hand-computed cases for MXFP4 (table, nibble order, scale, block order, round trip on the
generator's codes), sinks, the sliding window, YaRN, the clamped SwiGLU and the router; then a
tiny checkpoint written to a temp dir: its layout (shard names, index, header padding, config
keys, determinism per seed, the 20b plan against the published total_size), and `generate` on a
prompt longer than both the window and original_max_position_embeddings: deterministic, finite,
and the same whether the small tensors are BF16 or F32 and the RoPE keys old or new.
numpy only.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # a test, not a benchmark: stay on one core
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GEN = os.path.join(ROOT, "scripts", "make_gptoss_checkpoint.py")
REF = os.path.join(HERE, "gpt_oss_ref.py")
PY = sys.executable
sys.path.insert(0, HERE)
import gpt_oss_ref as R  # noqa: E402

PUBLISHED_20B_TOTAL_SIZE = 13761264768  # openai/gpt-oss-20b model.safetensors.index.json


CK = {}          # name -> tiny checkpoint dir, written once by setUpModule
PROMPT = [int(t) for t in np.random.default_rng(3).integers(0, 201088, 300)]   # > window 32, > 256
_TMP = None


def setUpModule():
    global _TMP
    _TMP = tempfile.TemporaryDirectory()
    for key, args in (("bf16", ["--seed", "11"]), ("again", ["--seed", "11"]), ("seed2", ["--seed", "12"]),
                      ("f32", ["--seed", "11", "--f32", "norms,sinks,biases", "--rope-parameters",
                               "--dtype-key", "dtype"]),
                      ("one", ["--seed", "11", "--shard-size", "1e12"])):
        CK[key] = os.path.join(_TMP.name, key)
        gen(CK[key], *args)


def tearDownModule():
    _TMP.cleanup()


def gen(out, *args):
    subprocess.run([PY, GEN, "--out", out, *args], check=True, stderr=subprocess.DEVNULL)


def ref_generate(model, ids, n, *args):
    r = subprocess.run([PY, REF, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-new-tokens", str(n), *args], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["token_ids"]


class Mxfp4(unittest.TestCase):
    def test_table_nibbles_scale_blocks(self):
        # F4/F5: low nibble first; code 8 is -0, 15 is -6
        b = np.zeros((1, 1, 16), np.uint8)
        b[0, 0, 0] = 0x21          # element 0 = code 1 (0.5), element 1 = code 2 (1.0)
        b[0, 0, 1] = 0xF8          # element 2 = -0.0, element 3 = -6
        s = np.full((1, 1), 127, np.uint8)
        d = R.mxfp4_dequant(b, s)
        self.assertEqual(d.shape, (1, 32))
        self.assertEqual(list(d[0, :4]), [0.5, 1.0, 0.0, -6.0])
        self.assertTrue(np.signbit(d[0, 2]))
        # F6: scale byte 129 doubles twice, 126 halves
        self.assertEqual(R.mxfp4_dequant(b, np.full((1, 1), 129, np.uint8))[0, 1], 4.0)
        self.assertEqual(R.mxfp4_dequant(b, np.full((1, 1), 126, np.uint8))[0, 0], 0.25)
        # F7: [R, G, 16] -> [R, G*32]: block g is columns 32g..32g+31, each with its own scale
        b2 = np.zeros((2, 2, 16), np.uint8)
        b2[1, 1, :] = 0x22          # row 1, block 1: all 1.0
        s2 = np.array([[127, 127], [127, 130]], np.uint8)
        d2 = R.mxfp4_dequant(b2, s2)
        self.assertEqual(d2.shape, (2, 64))
        self.assertTrue(np.all(d2[1, 32:] == 8.0) and np.all(d2[1, :32] == 0) and np.all(d2[0] == 0))
        with self.assertRaises(R.RefError):
            R.mxfp4_dequant(b, np.full((1, 1), 255, np.uint8))

    def test_fp4_encode_rounds_to_nearest_even(self):
        x = np.array([0.2, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, -0.75, -5.0])
        want = [0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 10, 14]
        self.assertEqual(list(R.fp4_encode(x)), want)

    def test_roundtrip_on_generator_codes(self):
        ck = R.Checkpoint(CK["bf16"])
        for l in range(2):
            for n in ("gate_up_proj", "down_proj"):
                p = f"model.layers.{l}.mlp.experts.{n}"
                blocks, scales = ck.get(p + "_blocks"), ck.get(p + "_scales")
                self.assertEqual(len(np.unique(np.concatenate([blocks & 15, blocks >> 4]))), 16)
                dense = R.mxfp4_dequant(blocks, scales)
                b2, s2 = R.mxfp4_quant(dense)
                self.assertTrue(np.array_equal(R.mxfp4_dequant(b2, s2), dense))
                # where the block's largest |code| is 4 or 6 the scale is recovered and the codes
                # too (up to -0 becoming +0)
                mag = np.concatenate([blocks & 7, (blocks >> 4) & 7], axis=-1).max(axis=-1)
                big = mag >= 6
                self.assertTrue(big.mean() > 0.9)
                self.assertTrue(np.array_equal(s2[big], scales[big]))
                canon = lambda b: np.where(np.stack([b & 15, b >> 4]) == 8, 0, np.stack([b & 15, b >> 4]))
                self.assertTrue(np.array_equal(canon(b2)[:, big], canon(blocks)[:, big]))
        # the scales stay in the documented range (tiny: gate_up 122..125, down 117..120)
        g = ck.get("model.layers.0.mlp.experts.gate_up_proj_scales")
        dn = ck.get("model.layers.0.mlp.experts.down_proj_scales")
        self.assertEqual((g.min(), g.max(), dn.min(), dn.max()), (122, 125, 117, 120))


class Pieces(unittest.TestCase):
    def test_sinks(self):
        # 1 head, d = 4: scores = q.k / 2; both queries see key 0, query 1 also key 1
        q = np.array([[[2., 0, 0, 0]], [[2., 0, 0, 0]]], np.float32)
        k = np.array([[[1., 0, 0, 0]], [[0., 0, 0, 0]]], np.float32)
        v = np.array([[[1., 0, 0, 0]], [[0., 1, 0, 0]]], np.float32)
        out = R.attend(q, k, v, np.array([0.5], np.float32), [0, 1], 0)
        den1 = math.e + 1 + math.exp(0.5)          # scores 1 and 0, sink 0.5 (raw, unscaled)
        np.testing.assert_allclose(out[1, 0], [math.e / den1, 1 / den1, 0, 0], rtol=1e-6)
        np.testing.assert_allclose(out[0, 0], [math.e / (math.e + math.exp(0.5)), 0, 0, 0], rtol=1e-6)
        # a sink of -inf is plain softmax; a huge one swallows everything (no clamp)
        plain = R.attend(q, k, v, np.array([-np.inf], np.float32), [0, 1], 0)
        np.testing.assert_allclose(plain[1, 0, :2].sum(), 1.0, rtol=1e-6)
        self.assertLess(np.abs(R.attend(q, k, v, np.array([60.0], np.float32), [0, 1], 0)).max(), 1e-20)

    def test_sliding_window_boundary(self):
        T, W = 9, 3
        q = np.zeros((T, 2, 4), np.float32)                        # equal scores everywhere
        k = np.zeros((T, 1, 4), np.float32)                        # GQA: 2 q heads, 1 kv head
        v = np.eye(T, dtype=np.float32)[:, None, :]                # value j = one-hot j
        out = R.attend(q, k, v, np.full(2, -np.inf, np.float32), list(range(T)), W)
        for i in range(T):
            seen = [j for j in range(T) if out[i, 1, j] > 0]
            self.assertEqual(seen, list(range(max(0, i - W + 1), i + 1)))   # the last W incl. itself
            np.testing.assert_allclose(out[i, 0, seen], 1.0 / len(seen), rtol=1e-6)
        full = R.attend(q, k, v, np.full(2, -np.inf, np.float32), list(range(T)), 0)
        self.assertEqual(int((full[T - 1, 0] > 0).sum()), T)

    def test_yarn(self):
        rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False}
        d = 64
        inv, af = R.yarn_inv_freq(rope, d)
        # openai's form: low = d/2 ln(L0 / (beta 2 pi)) / ln(theta)
        low = d / 2 * math.log(4096 / (32 * 2 * math.pi)) / math.log(150000)
        high = d / 2 * math.log(4096 / (1 * 2 * math.pi)) / math.log(150000)
        self.assertAlmostEqual(low, 8.092779, places=5)
        self.assertAlmostEqual(high, 17.398025, places=5)
        self.assertAlmostEqual(af, 1 + 0.1 * math.log(32), places=12)
        self.assertAlmostEqual(af, 1.3465736, places=6)
        for i in range(32):
            base = 150000 ** (-2 * i / d)
            r = min(max((i - low) / (high - low), 0), 1)
            self.assertAlmostEqual(inv[i] / base, (1 - r) + r / 32, places=12)
        self.assertEqual(inv[0], 1.0)                        # fastest pair untouched
        self.assertAlmostEqual(inv[8] / 150000 ** (-16 / 64), 1.0, places=12)   # 8 < low
        self.assertAlmostEqual(inv[31] / 150000 ** (-62 / 64), 1 / 32, places=12)
        # truncate true (or absent): low 8, high 18 -> pair 9's ramp is exactly 0.1
        inv_t, _ = R.yarn_inv_freq(dict(rope, truncate=True), d)
        self.assertAlmostEqual(inv_t[9] / 150000 ** (-18 / 64), 0.9 + 0.1 / 32, places=12)
        del rope["truncate"]
        self.assertTrue(np.array_equal(R.yarn_inv_freq(rope, d)[0], inv_t))
        # rotation: pair (i, i + d/2), both cos and sin scaled by af
        c = {"rope": dict(rope, truncate=False), "head_dim": d}
        cos, sin = R.rope_tables(c, [0, 100])
        x = np.zeros((2, 1, d), np.float32)
        x[:, 0, 3], x[:, 0, 3 + d // 2] = 1.0, 0.0
        y = R.apply_rope(x, cos, sin)
        ang = 100 * inv[3]
        np.testing.assert_allclose(y[1, 0, [3, 3 + d // 2]], [af * math.cos(ang), af * math.sin(ang)], rtol=1e-5)
        np.testing.assert_allclose(y[0, 0, [3, 3 + d // 2]], [af, 0.0], rtol=1e-6)

    def test_swiglu(self):
        gu = np.array([[10.0, -10.0, -3.0, 2.0]], np.float32)   # gate0, up0, gate1, up1
        out = R.expert_swiglu(gu, 7.0, 1.702)
        sig = lambda z: 1 / (1 + math.exp(-z))
        np.testing.assert_allclose(out[0], [7 * sig(1.702 * 7) * (-7 + 1), -3 * sig(-1.702 * 3) * (2 + 1)],
                                   rtol=1e-6)
        # the gate is not clamped from below
        self.assertAlmostEqual(float(R.expert_swiglu(np.array([[-9.0, 0.0]], np.float32), 7.0, 1.702)[0, 0]),
                               -9 * sig(-1.702 * 9), places=9)

    def test_router(self):
        idx, w = R.route(np.array([[1.0, 3.0, 2.0, 3.0], [0.0, 1.0, 5.0, 2.0]], np.float32), 2)
        self.assertEqual(idx.tolist(), [[1, 3], [2, 3]])     # ties to the lower index
        np.testing.assert_allclose(w[0], [0.5, 0.5])
        np.testing.assert_allclose(w[1], [1 / (1 + math.exp(-3)), 1 / (1 + math.exp(3))], rtol=1e-6)


class Tiny(unittest.TestCase):
    dirs = CK
    prompt = PROMPT

    def files(self, key):
        d, out = self.dirs[key], {}
        for f in sorted(os.listdir(d)):
            with open(os.path.join(d, f), "rb") as fh:
                out[f] = fh.read()
        return out

    def test_deterministic_per_seed(self):
        a, b, c = self.files("bf16"), self.files("again"), self.files("seed2")
        self.assertEqual(a, b)
        shards = [f for f in a if f.endswith(".safetensors")]
        self.assertTrue(all(a[f] != c[f] for f in shards))

    def test_layout(self):
        d = self.dirs["bf16"]
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            idx = json.load(f)
        shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        n = len(shards)
        self.assertGreater(n, 2)
        self.assertEqual(shards, [f"model-{i:05d}-of-{n - 1:05d}.safetensors" for i in range(n)])
        seen, total = {}, 0
        for fn in shards:
            with open(os.path.join(d, fn), "rb") as f:
                hl = struct.unpack("<Q", f.read(8))[0]
                raw = f.read(hl)
                size = os.fstat(f.fileno()).st_size
            self.assertEqual(hl % 8, 0)
            self.assertTrue(raw.rstrip(b" ").endswith(b"}") and len(raw) - len(raw.rstrip(b" ")) < 8)
            h = json.loads(raw)
            self.assertEqual(h.pop("__metadata__"), {"format": "pt"})
            end = 0
            for name, info in h.items():
                seen[name] = fn
                nb = {"BF16": 2, "F32": 4, "U8": 1}[info["dtype"]] * int(np.prod(info["shape"]))
                self.assertEqual(info["data_offsets"][1] - info["data_offsets"][0], nb)
                end = max(end, info["data_offsets"][1])
                total += nb
            self.assertEqual(size, 8 + hl + end)
        self.assertEqual(seen, idx["weight_map"])
        self.assertEqual(total, idx["metadata"]["total_size"])
        # names, shapes, dtypes of layer 0 and the rest (config: D 64, I 96, H 4, K 2, d 64, E 8)
        ck = R.Checkpoint(d)
        want = {"input_layernorm.weight": [64], "post_attention_layernorm.weight": [64],
                "self_attn.q_proj.weight": [256, 64], "self_attn.q_proj.bias": [256],
                "self_attn.k_proj.weight": [128, 64], "self_attn.k_proj.bias": [128],
                "self_attn.v_proj.weight": [128, 64], "self_attn.v_proj.bias": [128],
                "self_attn.o_proj.weight": [64, 256], "self_attn.o_proj.bias": [64],
                "self_attn.sinks": [4], "mlp.router.weight": [8, 64], "mlp.router.bias": [8],
                "mlp.experts.gate_up_proj_blocks": [8, 192, 2, 16], "mlp.experts.gate_up_proj_scales": [8, 192, 2],
                "mlp.experts.gate_up_proj_bias": [8, 192], "mlp.experts.down_proj_blocks": [8, 64, 3, 16],
                "mlp.experts.down_proj_scales": [8, 64, 3], "mlp.experts.down_proj_bias": [8, 64]}
        layer0 = {k[len("model.layers.0."):]: v for k, v in ck.where.items() if k.startswith("model.layers.0.")}
        self.assertEqual({k: v[4] for k, v in layer0.items()}, want)
        for k, v in layer0.items():
            self.assertEqual(v[3], "U8" if k.endswith(("_blocks", "_scales")) else "BF16", k)
        rest = {k: (v[3], v[4]) for k, v in ck.where.items() if not k.startswith("model.layers.")}
        self.assertEqual(rest, {"model.embed_tokens.weight": ("BF16", [201088, 64]),
                                "model.norm.weight": ("BF16", [64]), "lm_head.weight": ("BF16", [201088, 64])})
        self.assertEqual(len(ck.where), 4 * 19 + 3)
        # the F32 variant stores the small tensors as F32
        f32 = R.Checkpoint(self.dirs["f32"])
        self.assertEqual({f32.where[n][3] for n in f32.where if n.endswith(("norm.weight", "sinks", "bias"))},
                         {"F32"})

    def test_config(self):
        with open(os.path.join(self.dirs["bf16"], "config.json")) as f:
            c = json.load(f)
        published_keys = {
            "architectures", "attention_bias", "attention_dropout", "eos_token_id", "experts_per_token",
            "head_dim", "hidden_act", "hidden_size", "initial_context_length", "initializer_range",
            "intermediate_size", "layer_types", "max_position_embeddings", "model_type",
            "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
            "num_local_experts", "output_router_logits", "pad_token_id", "quantization_config",
            "rms_norm_eps", "rope_scaling", "rope_theta", "router_aux_loss_coef", "sliding_window",
            "swiglu_limit", "tie_word_embeddings", "transformers_version", "use_cache", "vocab_size"}
        self.assertEqual(set(c), published_keys)
        self.assertEqual(c["rope_scaling"], {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                             "original_max_position_embeddings": 256, "rope_type": "yarn",
                                             "truncate": False})
        self.assertEqual(c["layer_types"], ["sliding_attention", "full_attention"] * 2)
        self.assertEqual(c["quantization_config"]["quant_method"], "mxfp4")
        with open(os.path.join(self.dirs["f32"], "config.json")) as f:
            c2 = json.load(f)
        self.assertNotIn("rope_scaling", c2)
        self.assertNotIn("rope_theta", c2)
        self.assertEqual(c2["rope_parameters"]["rope_theta"], 150000)
        self.assertEqual(c2["dtype"], "bfloat16")
        with open(os.path.join(self.dirs["bf16"], "generation_config.json")) as f:
            g = json.load(f)
        self.assertEqual((g["bos_token_id"], g["eos_token_id"], g["pad_token_id"]),
                         (199998, [200002, 199999, 200012], 199999))

    def test_published_20b_plan(self):
        r = subprocess.run([PY, GEN, "--preset", "20b", "--dry-run"], check=True, capture_output=True, text=True)
        plan = json.loads(r.stdout)
        self.assertEqual(plan["total_size"], PUBLISHED_20B_TOTAL_SIZE)
        self.assertEqual([s["file"] for s in plan["shards"]],
                         [f"model-0000{i}-of-00002.safetensors" for i in range(3)])
        self.assertEqual(plan["shards"][2]["first"], "model.layers.6.mlp.experts.gate_up_proj_blocks")
        self.assertEqual(plan["shards"][2]["last"], "lm_head.weight")

    def test_generate_long_prompt(self):
        d = self.dirs["bf16"]
        with tempfile.TemporaryDirectory() as t:
            dump = os.path.join(t, "logits.json")
            a = ref_generate(d, self.prompt, 4, "--dump-logits", dump)
            with open(dump) as f:
                logits = np.array(json.load(f))
        self.assertEqual(logits.shape, (201088,))
        self.assertTrue(np.all(np.isfinite(logits)))
        self.assertGreater(logits.std(), 1.0)
        self.assertEqual(len(a), 4)
        self.assertEqual(a[0], int(np.argmax(logits)))
        self.assertEqual(ref_generate(d, self.prompt, 4), a)                       # deterministic
        # the same model with F32 small tensors, rope_parameters and one shard: same tokens
        self.assertEqual(ref_generate(self.dirs["f32"], self.prompt, 4), a)
        self.assertEqual(ref_generate(self.dirs["one"], self.prompt, 4), a)
        s = ["--temperature", "0.8", "--top-p", "0.9", "--top-k", "50", "--seed", "7"]
        b = ref_generate(d, self.prompt, 4, *s)
        self.assertEqual(ref_generate(d, self.prompt, 4, *s), b)
        self.assertEqual(len(b), 4)

    def test_window_and_yarn_reach_the_logits(self):
        c = R.load_config(self.dirs["bf16"])
        W = R.load_weights(self.dirs["bf16"], c)
        ids = self.prompt[:280]
        base = R.forward(c, W, ids)
        self.assertTrue(np.all(np.isfinite(base)))
        no_window = dict(c, sliding_window=10 ** 9)
        self.assertGreater(np.abs(R.forward(no_window, W, ids) - base).max(), 1e-3)
        # same config as rope_parameters (transformers 5): the same logits
        c5 = R.load_config(self.dirs["f32"])
        W5 = R.load_weights(self.dirs["f32"], c5)
        self.assertTrue(np.array_equal(R.forward(c5, W5, ids), base))
        truncated = dict(c, rope=dict(c["rope"], truncate=True))
        self.assertGreater(np.abs(R.forward(truncated, W, ids) - base).max(), 1e-4)

    def test_bad_files_are_refused(self):
        with tempfile.TemporaryDirectory() as t:
            d = os.path.join(t, "m")
            os.makedirs(d)
            src = self.dirs["bf16"]
            for f in os.listdir(src):
                with open(os.path.join(src, f), "rb") as a, open(os.path.join(d, f), "wb") as b:
                    b.write(a.read())
            last = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))[-1]
            with open(os.path.join(d, last), "r+b") as f:
                f.truncate(os.path.getsize(os.path.join(d, last)) - 1)
            with self.assertRaisesRegex(R.RefError, "truncated"):
                R.Checkpoint(d)
            os.remove(os.path.join(d, last))
            with self.assertRaisesRegex(R.RefError, "does not exist"):
                R.Checkpoint(d)
            with open(os.path.join(src, "config.json")) as f:
                c = json.load(f)
            c["quantization_config"]["quant_method"] = "fp8"
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(c, f)
            with self.assertRaisesRegex(R.RefError, "quant_method"):
                R.load_config(d)


if __name__ == "__main__":
    unittest.main()
