#!/usr/bin/python3
"""Checks of scripts/pdserve_to_gguf.py on the Hugging Face gpt-oss layout (issue 55, section 2).

  /usr/bin/python3 tests/reference/test_gguf_convert.py [-v]

Needs llama.cpp's gguf-py: GGUF_PY, else .cache/llama/src/gguf-py (the node-llama-cpp bundle that
scripts/bench_vs_llamacpp.sh's fetch_llama unpacks); without it every test is skipped, with a line
that says how to fetch it. Not registered in CMake.

Fresh tiny checkpoints (scripts/make_gptoss_checkpoint.py) in a temp dir, converted, read back
with gguf-py's GGUFReader:
  - every tensor's name, shape and type against a table written here from the HF names (not from
    gguf-py's name map), and nothing else in the file;
  - MXFP4: the GGUF bytes decoded with llama.cpp's block layout (scale byte, then element i in the
    low nibble and i + 16 in the high nibble of byte i; ggml's doubled e2m1 values times the half
    e8m0 scale), and again with gguf-py's own dequantizer, equal exactly to the HF bytes decoded by
    tests/reference/gpt_oss_ref.py (F4-F7); gate from the even rows of gate_up_proj, up from the
    odd ones, for the scale bytes as stored and for the values; one block checked by hand;
  - every other tensor: BF16 bits as stored, F32 as the stored value widened (biases, norms,
    sinks, the router, gate/up bias split the same way);
  - metadata: the keys and values llama.cpp's gpt-oss loader reads, the vocabulary (real
    tokenizer.json when .cache/tokenizers/gptoss has one; else the placeholder) and its ids;
  - a checkpoint with F32 small tensors and transformers 5's rope_parameters, with no tokenizer
    (--tokenizer none: the placeholder vocabulary);
  - bad inputs (truncated shard, an index naming a missing shard, quant_method not mxfp4) fail
    with one line, and a pdserve checkpoint is still taken as pdserve's layout;
  - where torch is installed (Debian's python3-torch): llama.cpp's own convert_hf_to_gguf.py run
    on the same checkpoint writes the same bytes. transformers cannot be installed here, so it
    runs against a stand-in: AutoConfig fails (llama.cpp then reads config.json itself, as it
    does without transformers), AutoTokenizer shows tokenizer.json's vocabulary and added tokens
    as transformers does, and get_vocab_base_pre is answered "gpt-4o". torch < 2.1 lacks the
    float8 dtypes that llama.cpp names in a table: they get unused stand-ins;
  - where node is installed: the ids of llama.cpp's pre-tokenizer test text under tokenizer.json
    (a small BPE in JavaScript: o200k split, byte-level, merges) hash to the value that
    llama.cpp's get_vocab_base_pre maps to "gpt-4o" -- what the stand-in answered.
"""
import ast
import hashlib
import json
import os
import re
import shutil
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
CONV = os.path.join(ROOT, "scripts", "pdserve_to_gguf.py")
LLAMA_SRC = os.path.join(ROOT, ".cache", "llama", "src")
GGUF_PY = os.environ.get("GGUF_PY", os.path.join(LLAMA_SRC, "gguf-py"))
TOKENIZER = os.path.join(ROOT, ".cache", "tokenizers", "gptoss", "tokenizer.json")
PDSERVE_MODEL = os.path.join(ROOT, "models", "passkey-4l")
PY = sys.executable
sys.path.insert(0, HERE)
import gpt_oss_ref as R  # noqa: E402

gguf = None
CK, OUT, RD = {}, {}, {}   # checkpoint dirs, GGUF paths, GGUFReaders
_TMP = None
# ggml's kvalues_mxfp4 (e2m1 doubled) and ggml_e8m0_to_fp32_half: value = kv[code] * 2^(e - 128)
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def run(args, env=None, check=True):
    e = dict(os.environ, PYTHONPATH=GGUF_PY)
    e.update(env or {})
    p = subprocess.run(["nice", "-n", "10"] + args, capture_output=True, text=True, env=e)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def setUpModule():
    global gguf, _TMP
    sys.path.insert(0, GGUF_PY)
    try:
        import gguf as g
        g.GGMLQuantizationType.MXFP4, g.LazyChunkedTensor  # the bundle's gguf-py, not an old one
    except (ImportError, AttributeError) as e:
        msg = (f"gguf-py not found or too old at {GGUF_PY} ({e}); fetch it as scripts/bench_vs_llamacpp.sh's "
               "fetch_llama does (npm pack node-llama-cpp@3.22.1 in .cache/llama, untar "
               "package/llama/gitRelease.bundle, git clone it to .cache/llama/src), or set GGUF_PY")
        print(f"test_gguf_convert.py: SKIPPED: {msg}", file=sys.stderr)
        raise unittest.SkipTest(msg)
    gguf = g
    _TMP = tempfile.TemporaryDirectory()
    tok = ["--tokenizer", TOKENIZER] if os.path.isfile(TOKENIZER) else []
    for key, args in (("tiny", ["--seed", "21"] + tok),
                      ("f32", ["--seed", "22", "--f32", "norms,sinks,biases", "--rope-parameters"])):
        CK[key] = os.path.join(_TMP.name, key, "tiny")   # same base name: same general.name
        run([PY, GEN, "--preset", "tiny", "--out", CK[key]] + args)
    OUT["tiny"] = os.path.join(_TMP.name, "tiny.gguf")
    run([PY, CONV, CK["tiny"], OUT["tiny"]])
    OUT["f32"] = os.path.join(_TMP.name, "f32.gguf")
    run([PY, CONV, CK["f32"], OUT["f32"], "--tokenizer", "none"])
    for k in OUT:
        RD[k] = gguf.GGUFReader(OUT[k])


def tearDownModule():
    if _TMP is not None:
        _TMP.cleanup()


def field(rd, key):
    f = rd.fields.get(key)
    return None if f is None else f.contents()


def expected_tensors(c):
    """{gguf name: (numpy-order shape, type name, HF source name, row parity or None)}."""
    D, H, K, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, I, V = c["n_experts"], c["intermediate_size"], c["vocab_size"]
    out = {"token_embd.weight": ([V, D], "BF16", "model.embed_tokens.weight", None),
           "output_norm.weight": ([D], "F32", "model.norm.weight", None),
           "output.weight": ([V, D], "BF16", "lm_head.weight", None)}
    for l in range(c["num_hidden_layers"]):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        out.update({
            b + "attn_norm.weight": ([D], "F32", p + "input_layernorm.weight", None),
            b + "post_attention_norm.weight": ([D], "F32", p + "post_attention_layernorm.weight", None),
            b + "attn_q.weight": ([H * d, D], "BF16", p + "self_attn.q_proj.weight", None),
            b + "attn_q.bias": ([H * d], "F32", p + "self_attn.q_proj.bias", None),
            b + "attn_k.weight": ([K * d, D], "BF16", p + "self_attn.k_proj.weight", None),
            b + "attn_k.bias": ([K * d], "F32", p + "self_attn.k_proj.bias", None),
            b + "attn_v.weight": ([K * d, D], "BF16", p + "self_attn.v_proj.weight", None),
            b + "attn_v.bias": ([K * d], "F32", p + "self_attn.v_proj.bias", None),
            b + "attn_output.weight": ([D, H * d], "BF16", p + "self_attn.o_proj.weight", None),
            b + "attn_output.bias": ([D], "F32", p + "self_attn.o_proj.bias", None),
            b + "attn_sinks.weight": ([H], "F32", p + "self_attn.sinks", None),
            b + "ffn_gate_inp.weight": ([E, D], "F32", p + "mlp.router.weight", None),
            b + "ffn_gate_inp.bias": ([E], "F32", p + "mlp.router.bias", None),
            b + "ffn_gate_exps.weight": ([E, I, D], "MXFP4", p + "mlp.experts.gate_up_proj", 0),
            b + "ffn_up_exps.weight": ([E, I, D], "MXFP4", p + "mlp.experts.gate_up_proj", 1),
            b + "ffn_down_exps.weight": ([E, D, I], "MXFP4", p + "mlp.experts.down_proj", None),
            b + "ffn_gate_exps.bias": ([E, I], "F32", p + "mlp.experts.gate_up_proj_bias", 0),
            b + "ffn_up_exps.bias": ([E, I], "F32", p + "mlp.experts.gate_up_proj_bias", 1),
            b + "ffn_down_exps.bias": ([E, D], "F32", p + "mlp.experts.down_proj_bias", None),
        })
    return out


def decode_ggml_mxfp4(raw, shape):
    """GGUF MXFP4 bytes -> fp32 [..., cols], llama.cpp's block_mxfp4 written out by hand."""
    blk = np.asarray(raw, dtype=np.uint8).reshape(-1, 17)
    e, qs = blk[:, 0].astype(np.int32), blk[:, 1:]
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=1)          # elements 0..15, then 16..31
    scale = np.ldexp(np.float32(1), e - 128).astype(np.float32)    # the half scale (ggml)
    return (KVALUES_MXFP4[codes] * scale[:, None]).reshape(shape)


class GgufConvert(unittest.TestCase):
    def check_file(self, key):
        rd, c = RD[key], R.load_config(CK[key])
        ck = R.Checkpoint(CK[key])
        want = expected_tensors(c)
        got = {t.name: t for t in rd.tensors}
        self.assertEqual(sorted(got), sorted(want), "tensor names")
        for name, (shape, tname, src, parity) in want.items():
            t = got[name]
            with self.subTest(tensor=name):
                self.assertEqual(list(reversed([int(x) for x in t.shape])), shape, "shape (ne reversed)")
                self.assertEqual(t.tensor_type.name, tname, "type")
                if tname == "MXFP4":
                    self.check_mxfp4(ck, t, src, parity, shape)
                    continue
                hf = ck.get(src)
                if parity is not None:
                    hf = hf[..., parity::2]
                if tname == "F32":
                    self.assertTrue(np.array_equal(np.asarray(t.data).reshape(shape), hf), "F32 values")
                else:
                    bits = np.asarray(t.data).view("<u2").reshape(shape)
                    self.assertTrue(np.array_equal(bits, (hf.view(np.uint32) >> 16).astype(np.uint16)),
                                    "BF16 bits as stored")

    def check_mxfp4(self, ck, t, src, parity, shape):
        blocks, scales = ck.get(src + "_blocks"), ck.get(src + "_scales")
        E, rows, G = scales.shape
        hf = np.stack([R.mxfp4_dequant(blocks[e], scales[e]) for e in range(E)])   # [E, out, in]
        raw = np.asarray(t.data, dtype=np.uint8)
        self.assertEqual(raw.shape, (shape[0], shape[1], G * 17), "bytes: scale + 16 per block")
        sel = slice(None) if parity is None else slice(parity, None, 2)
        # the scale bytes as stored, from the even (gate) or odd (up) rows
        self.assertTrue(np.array_equal(raw.reshape(shape[0], shape[1], G, 17)[..., 0], scales[:, sel]),
                        "scale bytes")
        mine = decode_ggml_mxfp4(raw, shape)
        theirs = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.MXFP4).reshape(shape)
        self.assertTrue(np.array_equal(mine, hf[:, sel]), "values, llama.cpp layout vs HF layout")
        self.assertTrue(np.array_equal(theirs, hf[:, sel]), "values, gguf-py's dequantize vs HF layout")
        if parity is not None:   # and not the other half
            other = hf[:, 1 - parity::2]
            self.assertFalse(np.array_equal(mine, other), "gate and up swapped")

    def test_tiny_tensors(self):
        self.check_file("tiny")

    def test_f32_small_tensors_rope_parameters(self):
        self.check_file("f32")

    def test_metadata(self):
        for key in ("tiny", "f32"):
            rd, c = RD[key], R.load_config(CK[key])
            want = {
                "general.architecture": "gpt-oss", "general.type": "model",
                "general.file_type": int(gguf.LlamaFileType.MOSTLY_MXFP4_MOE),
                "gpt-oss.block_count": c["num_hidden_layers"],
                "gpt-oss.context_length": c["max_position_embeddings"],
                "gpt-oss.embedding_length": c["hidden_size"],
                "gpt-oss.feed_forward_length": c["intermediate_size"],
                "gpt-oss.expert_feed_forward_length": c["intermediate_size"],
                "gpt-oss.attention.head_count": c["num_attention_heads"],
                "gpt-oss.attention.head_count_kv": c["num_key_value_heads"],
                "gpt-oss.attention.key_length": c["head_dim"],
                "gpt-oss.attention.value_length": c["head_dim"],
                "gpt-oss.attention.sliding_window": c["sliding_window"],
                "gpt-oss.expert_count": c["n_experts"],
                "gpt-oss.expert_used_count": c["top_k"],
                "gpt-oss.rope.freq_base": c["rope"]["rope_theta"],
                "gpt-oss.rope.scaling.type": "yarn",
                "gpt-oss.rope.scaling.factor": c["rope"]["factor"],
                "gpt-oss.rope.scaling.original_context_length": c["rope"]["original_max_position_embeddings"],
                "gpt-oss.rope.scaling.yarn_beta_fast": c["rope"]["beta_fast"],
                "gpt-oss.rope.scaling.yarn_beta_slow": c["rope"]["beta_slow"],
                "tokenizer.ggml.model": "gpt2",
            }
            for k, v in want.items():
                with self.subTest(file=key, key=k):
                    self.assertEqual(field(rd, k), v)
            with self.subTest(file=key, key="rms eps"):
                self.assertAlmostEqual(field(rd, "gpt-oss.attention.layer_norm_rms_epsilon"), c["rms_norm_eps"], places=12)
            # llama.cpp's converter writes no rope.dimension_count for gpt-oss (n_rot = head_dim)
            self.assertIsNone(rd.fields.get("gpt-oss.rope.dimension_count"))
            self.assertEqual(len(rd.fields["tokenizer.ggml.tokens"].data), c["vocab_size"])
            self.assertEqual(len(rd.fields["tokenizer.ggml.token_type"].data), c["vocab_size"])
            self.assertEqual(field(rd, "tokenizer.ggml.eos_token_id"), 200002)

    def test_vocabulary(self):
        rd = RD["tiny"]
        if not os.path.isfile(TOKENIZER):
            self.assertEqual(field(rd, "tokenizer.ggml.pre"), "default")
            self.skipTest(f"{TOKENIZER} absent: the placeholder vocabulary was written")
        with open(TOKENIZER, encoding="utf-8") as f:
            tok = json.load(f)
        self.assertEqual(field(rd, "tokenizer.ggml.pre"), "gpt-4o")
        tf, yf = rd.fields["tokenizer.ggml.tokens"], rd.fields["tokenizer.ggml.token_type"]
        types = yf.contents()
        T = gguf.TokenType
        for text, i in list(tok["model"]["vocab"].items())[:2000:97] + [("Ġthe", tok["model"]["vocab"]["Ġthe"])]:
            self.assertEqual(tf.contents(i), text)
            self.assertEqual(types[i], T.NORMAL)
        for a in tok["added_tokens"]:
            self.assertEqual(tf.contents(a["id"]), a["content"])
            self.assertEqual(types[a["id"]], T.CONTROL)
        self.assertEqual(tf.contents(200002), "<|return|>")
        self.assertEqual(tf.contents(200012), "<|call|>")
        top = max(a["id"] for a in tok["added_tokens"])
        self.assertEqual(tf.contents(top + 1), f"[PAD{top + 1}]")
        self.assertEqual(types[top + 1], T.UNUSED)
        merges = rd.fields["tokenizer.ggml.merges"]
        self.assertEqual(len(merges.data), len(tok["model"]["merges"]))
        self.assertEqual(merges.contents(0), " ".join(tok["model"]["merges"][0]))
        self.assertEqual(field(rd, "tokenizer.ggml.padding_token_id"), 199999)

    def test_placeholder_vocabulary(self):
        rd = RD["f32"]
        self.assertEqual(field(rd, "tokenizer.ggml.pre"), "default")
        self.assertEqual(rd.fields["tokenizer.ggml.tokens"].contents(0), "!")

    def test_repack_one_block_by_hand(self):
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import pdserve_to_gguf as P
        # HF: byte j = element 2j (low nibble) | element 2j+1 (high). Elements e_k = k % 16.
        elems = np.arange(32) % 16
        hf = (elems[0::2] | (elems[1::2] << 4)).astype(np.uint8)
        want = (elems[:16] | (elems[16:] << 4)).astype(np.uint8)   # byte i = e_i | e_(i+16) << 4
        self.assertEqual(P.mxfp4_to_ggml(hf[None]).tolist(), [want.tolist()])
        self.assertEqual(want[:3].tolist(), [0x00, 0x11, 0x22])

    def test_bad_inputs(self):
        base = CK["tiny"]
        shards = sorted(n for n in os.listdir(base) if n.endswith(".safetensors"))

        def variant(name, skip=()):
            d = os.path.join(_TMP.name, name)
            os.makedirs(d)
            for n in os.listdir(base):
                if n not in skip and n != "tokenizer.json":
                    os.symlink(os.path.join(base, n), os.path.join(d, n))
            return d
        cases = []
        d = variant("bad_trunc", skip=(shards[-1],))            # a truncated shard
        with open(os.path.join(base, shards[-1]), "rb") as f, open(os.path.join(d, shards[-1]), "wb") as g:
            g.write(f.read()[:-100])
        cases.append((d, "truncated"))
        cases.append((variant("bad_missing", skip=(shards[-1],)), "missing"))   # the index names it
        d = variant("bad_quant", skip=("config.json",))         # quant_method other than mxfp4
        with open(os.path.join(base, "config.json")) as f:
            cfg = json.load(f)
        cfg["quantization_config"]["quant_method"] = "fp8"
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        cases.append((d, "mxfp4"))
        for d, word in cases:
            with self.subTest(case=os.path.basename(d)):
                out = os.path.join(_TMP.name, os.path.basename(d) + ".gguf")
                p = run([PY, CONV, d, out], check=False)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(word, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_pdserve_layout_still_detected(self):
        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import pdserve_to_gguf as P
        self.assertTrue(P.is_hf_layout(CK["tiny"]))
        if not os.path.isfile(os.path.join(PDSERVE_MODEL, "model.safetensors")):
            self.skipTest(f"{PDSERVE_MODEL} absent")
        self.assertFalse(P.is_hf_layout(PDSERVE_MODEL))
        out = os.path.join(_TMP.name, "pdserve.gguf")
        p = run([PY, CONV, PDSERVE_MODEL, out])
        self.assertIn("shared as routed", p.stdout)
        rd = gguf.GGUFReader(out)
        self.assertEqual(field(rd, "general.architecture"), "gpt-oss")
        self.assertEqual({t.tensor_type.name for t in rd.tensors}, {"F32"})   # its default, as before

    def test_same_bytes_as_llamacpp_converter(self):
        conv = os.path.join(LLAMA_SRC, "convert_hf_to_gguf.py")
        if not os.path.isfile(conv):
            self.skipTest(f"{conv} absent")
        if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
            self.skipTest("torch not installed (Debian: python3-torch): llama.cpp's converter needs it")
        if not os.path.isfile(os.path.join(CK["tiny"], "tokenizer.json")):
            self.skipTest("no tokenizer.json in the checkpoint: llama.cpp's converter needs one")
        shim = os.path.join(_TMP.name, "shim")
        os.makedirs(os.path.join(shim, "transformers"))
        os.makedirs(os.path.join(shim, "tqdm"))
        with open(os.path.join(shim, "transformers", "__init__.py"), "w") as f:
            f.write(SHIM_TRANSFORMERS)
        with open(os.path.join(shim, "tqdm", "__init__.py"), "w") as f:
            f.write(SHIM_TQDM)
        driver = os.path.join(shim, "run_convert_hf_to_gguf.py")
        with open(driver, "w") as f:
            f.write(SHIM_DRIVER)
        for outtype in ("auto", "q8_0"):
            with self.subTest(outtype=outtype):
                theirs = os.path.join(_TMP.name, f"llamacpp-{outtype}.gguf")
                run([PY, driver, LLAMA_SRC, CK["tiny"], "--outtype", outtype, "--outfile", theirs],
                    env={"PYTHONPATH": shim})
                mine = OUT["tiny"] if outtype == "auto" else os.path.join(_TMP.name, f"mine-{outtype}.gguf")
                if outtype != "auto":
                    run([PY, CONV, CK["tiny"], mine, "--outtype", outtype])
                with open(theirs, "rb") as a, open(mine, "rb") as b:
                    same = a.read() == b.read()
                if not same:
                    self.fail(describe_difference(gguf.GGUFReader(theirs), gguf.GGUFReader(mine)))

    def test_pretokenizer_hash_is_gpt4o(self):
        base_py = os.path.join(LLAMA_SRC, "conversion", "base.py")
        if not os.path.isfile(base_py):
            self.skipTest(f"{base_py} absent")
        if shutil.which("node") is None:
            self.skipTest("node absent")
        if not os.path.isfile(TOKENIZER):
            self.skipTest(f"{TOKENIZER} absent")
        with open(base_py, encoding="utf-8") as f:
            src = f.read()
        chktxt = ast.literal_eval(re.search(r"^\s*chktxt = ('.*')$", src, re.M).group(1))
        m = re.search(r'if chkhsh == "([0-9a-f]{64})":\n\s*#[^\n]*\n\s*res = "gpt-4o"', src)
        self.assertIsNotNone(m, "llama.cpp's get_vocab_base_pre has a gpt-4o entry")
        js = os.path.join(_TMP.name, "bpe.js")
        txt = os.path.join(_TMP.name, "chktxt.json")
        with open(js, "w") as f:
            f.write(BPE_JS)
        with open(txt, "w") as f:
            json.dump(chktxt, f)
        ids = json.loads(run(["node", js, TOKENIZER, txt]).stdout)
        self.assertEqual(hashlib.sha256(str(ids).encode()).hexdigest(), m.group(1))


def describe_difference(a, b):
    lines = []
    ka, kb = list(a.fields), list(b.fields)
    if ka != kb:
        lines.append(f"keys: llama.cpp {ka}\n mine {kb}")
    for k in ka:
        if k in b.fields and k not in ("GGUF.tensor_count", "GGUF.kv_count"):
            va, vb = a.fields[k].contents(), b.fields[k].contents()
            if va != vb:
                lines.append(f"{k}: llama.cpp {str(va)[:200]} mine {str(vb)[:200]}")
    ta, tb = [t.name for t in a.tensors], [t.name for t in b.tensors]
    if ta != tb:
        lines.append(f"tensor order/names: llama.cpp {ta}\n mine {tb}")
    tb_ = {t.name: t for t in b.tensors}
    for t in a.tensors:
        u = tb_.get(t.name)
        if u is None:
            continue
        if t.tensor_type != u.tensor_type or list(t.shape) != list(u.shape):
            lines.append(f"{t.name}: llama.cpp {t.tensor_type.name} {list(t.shape)}, mine {u.tensor_type.name} {list(u.shape)}")
        elif np.asarray(t.data).tobytes() != np.asarray(u.data).tobytes():
            lines.append(f"{t.name}: data differ")
    return "the GGUFs differ:\n" + "\n".join(lines or ["(only in layout/padding)"])


SHIM_TRANSFORMERS = '''"""Stand-in for transformers (not installable here): AutoConfig fails, so llama.cpp reads
config.json itself; AutoTokenizer shows tokenizer.json as the fast tokenizer does."""
import json
from pathlib import Path


class AutoConfig:
    @staticmethod
    def from_pretrained(*a, **k):
        raise RuntimeError("stand-in transformers: no AutoConfig")


class _Added:
    def __init__(self, d):
        self.content, self.special, self.normalized = d["content"], d["special"], d["normalized"]


class _Tok:
    def __init__(self, path):
        with open(Path(path) / "tokenizer.json", encoding="utf-8") as f:
            t = json.load(f)
        self.vocab = dict(t["model"]["vocab"])
        self.added_tokens_decoder = {a["id"]: _Added(a) for a in t["added_tokens"]}
        self._added = {a["content"]: a["id"] for a in t["added_tokens"]}
        self.vocab.update(self._added)

    def get_added_vocab(self):
        return dict(self._added)

    def encode(self, text, add_special_tokens=True):
        if text in self._added:
            return [self._added[text]]
        raise NotImplementedError("stand-in tokenizer: added tokens only")

    def decode(self, ids):
        return "".join(self.added_tokens_decoder[i].content for i in ids)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, **k):
        return _Tok(path)
'''

SHIM_TQDM = '''class tqdm:
    def __init__(self, *a, **k): pass
    def update(self, *a, **k): pass
    def close(self): pass
    def set_description(self, *a, **k): pass
'''

SHIM_DRIVER = '''import runpy, sys
import torch
for n, stand_in in (("float8_e4m3fn", torch.complex64), ("float8_e5m2", torch.complex128)):
    if not hasattr(torch, n):   # torch < 2.1: only named in llama.cpp's dtype tables
        setattr(torch, n, stand_in)
src = sys.argv[1]
sys.path[0:0] = [src, src + "/gguf-py"]
import conversion.base as base
# needs a real tokenizer to encode its test text; test_pretokenizer_hash_is_gpt4o checks the answer
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-4o"
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''

BPE_JS = r'''// ids of a text (JSON string in argv[3]) under tokenizer.json (argv[2]): the Split
// pre-tokenizer (Isolated; (?i:...) spelled out for node 20), byte-level, BPE by merge rank,
// ignore_merges (a whole piece in the vocabulary is one token). No added tokens in the text.
const fs = require("fs");
const tok = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const text = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const vocab = tok.model.vocab;
const ranks = new Map();
tok.model.merges.forEach((m, i) => ranks.set(Array.isArray(m) ? m[0] + " " + m[1] : m, i));
const split = tok.pre_tokenizer.pretokenizers.find(p => p.type === "Split").pattern.Regex
  .split("(?i:'s|'t|'re|'ve|'m|'ll|'d)").join("(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");
const re = new RegExp(split, "gu");
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
let n = 0;
for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
const byte2u = new Array(256);
bs.forEach((b, i) => { byte2u[b] = String.fromCodePoint(cs[i]); });
const pieces = [];
let last = 0;
for (const m of text.matchAll(re)) {
  if (m.index > last) pieces.push(text.slice(last, m.index));
  pieces.push(m[0]);
  last = m.index + m[0].length;
}
if (last < text.length) pieces.push(text.slice(last));
const ids = [];
for (const p of pieces) {
  const parts = [...Buffer.from(p, "utf8")].map(b => byte2u[b]);
  if (tok.model.ignore_merges && parts.join("") in vocab) { ids.push(vocab[parts.join("")]); continue; }
  for (;;) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = ranks.get(parts[i] + " " + parts[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) break;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
  for (const s of parts) {
    if (!(s in vocab)) throw new Error("no id for " + JSON.stringify(s));
    ids.push(vocab[s]);
  }
}
console.log(JSON.stringify(ids));
'''


if __name__ == "__main__":
    unittest.main()
