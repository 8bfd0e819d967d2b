#!/usr/bin/env python3
"""gguf_hf_gptoss.py: a Hugging Face gpt-oss checkpoint as llama.cpp's own converter writes its GGUF.

Used by scripts/pdserve_to_gguf.py, which detects the layout; run that script.

Hugging Face gpt-oss layout (hf_* functions): the GGUF llama.cpp's own converter
(convert_hf_to_gguf.py, class GptOssModel, of the llama.cpp that the node-llama-cpp bundle pins)
writes from the same directory, without torch or transformers, on the bundle's gguf-py:
  hf_index          the shards the index names (sorted), each one's tensors sorted by name,
                    through gguf-py's SafetensorsLocal; self_attn.sinks gets ".weight"
  hf_add_experts    first, as GptOssModel.generate_extra_tensors: the MXFP4 experts repacked
                    byte for byte, never dequantized. Per 32-element block: the e8m0 scale
                    byte, then 16 bytes with element i in the low nibble and element i+16 in
                    the high one (the file has element 2j low, 2j+1 high in byte j).
                    gate_up_proj is split: rows 0::2 -> ffn_gate_exps, 1::2 -> ffn_up_exps.
  hf_add_dense      then every other tensor in the same order, names by gguf-py's GPT_OSS
                    map; gate_up_proj_bias split the same way; 1-D tensors, norms, the
                    router weight and every bias in F32; the other 2-D weights (q/k/v/o,
                    token_embd, output) in --outtype; auto (the default here) is llama.cpp's
                    guess from the first 2-D float tensor: bf16 as published.
  hf_convert        general.* through gguf-py's Metadata, as llama.cpp (name from the
                    directory, size label from the tensors); file type MOSTLY_MXFP4_MOE
  hf_write_params   the keys of TextModel and GptOssModel: context, embedding, feed-forward
                    and expert feed-forward lengths, heads, kv heads, key/value length
                    (head_dim), rope theta, YaRN (type, factor, original context, beta_fast,
                    beta_slow), rms eps, expert counts, sliding window (no
                    rope.dimension_count: llama.cpp's converter writes none for gpt-oss).
  hf_write_vocab    tokenizer.json (the model directory's, else --tokenizer, else
                    .cache/tokenizers/gptoss/tokenizer.json) as llama.cpp's _set_vocab_gpt2:
                    model "gpt2", pre "gpt-4o" (the o200k pre-tokenizer), every id below
                    vocab_size (unlisted ones "[PADi]", UNUSED; added tokens CONTROL), merges
                    and special ids by gguf-py's SpecialVocab. With no tokenizer.json at all
                    (or --tokenizer none, when MODEL_DIR has none), the byte-level
                    placeholder vocabulary below, pre "default", eos from config.json, a note.
Where it differs from llama.cpp's converter: no torch, tensors written in row chunks (bounded
memory at the 20b/120b sizes); config.json is read as is (llama.cpp reads it through
transformers' AutoConfig where transformers is installed, else as is too); an unknown
pre-tokenizer or non-MXFP4 experts are refused rather than guessed.

"""
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import gguf  # llama.cpp's gguf-py: pdserve_to_gguf.py checks it is on PYTHONPATH


def gpt2_byte_tokens(vocab_size):
    """A byte-level vocabulary (GPT-2 byte-to-unicode) padded with placeholders; one merge."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    tokens = [chr(c) for c in cs] + ["Ġt"]
    tokens += [f"<|pd{i}|>" for i in range(len(tokens), vocab_size)]
    types = [gguf.TokenType.NORMAL] * 257 + [gguf.TokenType.CONTROL] * (vocab_size - 257)
    return tokens[:vocab_size], types[:vocab_size], ["Ġ t"]


# ----------------------------------------------------------------------------
# Hugging Face gpt-oss layout (llama.cpp convert_hf_to_gguf.py, GptOssModel)
# ----------------------------------------------------------------------------
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TOKENIZER = os.path.join(REPO_ROOT, ".cache", "tokenizers", "gptoss", "tokenizer.json")
# The pre-tokenizer regex of o200k (tokenizer.json's Split pattern), for which llama.cpp's
# get_vocab_base_pre finds "gpt-4o" (its hash of the ids of a test text; ref Xenova/gpt-4o).
O200K_SPLIT = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
               "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
               "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
               "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
HF_FLOAT_DTYPES = ("BF16", "F16", "F32")
CHUNK_BYTES = 64 << 20  # f32 bytes per written chunk of a dense tensor


def die(msg):
    sys.exit(f"pdserve_to_gguf.py: {msg}")


def is_hf_layout(model_dir):
    if os.path.isfile(os.path.join(model_dir, "model.safetensors.index.json")):
        return True
    try:
        with open(os.path.join(model_dir, "config.json")) as f:
            return json.load(f).get("model_type") == "gpt_oss"
    except (OSError, ValueError):
        return False


def hf_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        hp = json.load(f)
    if hp.get("model_type") != "gpt_oss" and "GptOssForCausalLM" not in (hp.get("architectures") or []):
        die(f"{path}: not a gpt-oss config (model_type {hp.get('model_type')!r}, "
            f"architectures {hp.get('architectures')!r})")
    q = hp.get("quantization_config") or {}
    if q.get("quant_method") != "mxfp4":
        die(f"{path}: quantization_config.quant_method is {q.get('quant_method')!r}; this converter "
            "writes MXFP4 experts as stored and takes only mxfp4")
    return hp


def hf_index(model_dir):
    """{name: gguf LocalTensor} in llama.cpp's order: the index's shards sorted by file name,
    each shard's tensors sorted by name (ModelBase.index_tensors, SafetensorsLocal)."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    names_from_index = set()
    weight_map = {}
    if os.path.isfile(index_path):
        with open(index_path) as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict):
            die(f"{index_path}: no weight_map")
        names_from_index = set(weight_map)
        parts = sorted(set(weight_map.values()))
    else:
        parts = sorted(n for n in os.listdir(model_dir) if n.startswith("model") and n.endswith(".safetensors"))
    if not parts:
        die(f"{model_dir}: no model*.safetensors")
    tensors, names_from_parts = {}, set()
    for part in parts:
        path = os.path.join(model_dir, part)
        if not os.path.isfile(path):
            die(f"{index_path}: names {part}, which is missing")
        try:
            st = gguf.utility.SafetensorsLocal(Path(path))
        except ValueError as e:
            die(f"{path}: {e}")
        size = os.path.getsize(path)
        for name, lt in st.tensors.items():
            end = lt.data_range.offset + lt.data_range.size
            if end > size:
                die(f"{path}: tensor {name} ends at byte {end}, the file has {size} (truncated?)")
            names_from_parts.add(name)
            if "sinks" in name:          # GptOssModel.filter_tensors
                name += ".weight"
            tensors[name] = lt
    if names_from_index and names_from_index != names_from_parts:
        missing = sorted(names_from_index - names_from_parts)
        extra = sorted(names_from_parts - names_from_index)
        die(f"{index_path}: the shards do not hold what the index names; missing {missing[:5]}, "
            f"extra {extra[:5]}")
    return tensors


def hf_rows(lt, rows=None, parity=None):
    """Rows [rows[0], rows[1]) of a float tensor as f32 (axis 0); parity p keeps [..., p::2]."""
    raw = lt.mmap_bytes()
    if lt.dtype == "BF16":
        a = raw.view("<u2").reshape(lt.shape)
    elif lt.dtype == "F16":
        a = raw.view("<f2").reshape(lt.shape)
    elif lt.dtype == "F32":
        a = raw.view("<f4").reshape(lt.shape)
    else:
        raise ValueError(lt.dtype)
    if rows is not None:
        a = a[rows[0]:rows[1]]
    if parity is not None:
        a = a[..., parity::2]
    if lt.dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def mxfp4_to_ggml(blocks):
    """HF MXFP4 code bytes [..., 16] (byte j: element 2j low nibble, 2j+1 high) -> ggml's
    (byte i: element i low nibble, element i + 16 high): the same codes, moved."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(blocks.shape[:-1] + (32,))
    return codes[..., :16] | (codes[..., 16:] << 4)


def hf_add_experts(w, tmap, tensors):
    """MXFP4 expert weights, repacked, in GptOssModel.generate_extra_tensors' order."""
    def add(new_name, blocks, scales, parity):
        if blocks.dtype != "U8" or scales.dtype != "U8":
            die(f"{new_name}: blocks / scales must be U8, got {blocks.dtype} / {scales.dtype}")
        if len(blocks.shape) != 4 or blocks.shape[-1] != 16 or tuple(scales.shape) != tuple(blocks.shape[:3]):
            die(f"{new_name}: blocks {list(blocks.shape)} and scales {list(scales.shape)} are not "
                "[E, R, G, 16] and [E, R, G]")
        n_exp, n_rows, n_grp = scales.shape
        if parity is not None and n_rows % 2:
            die(f"{new_name}: gate_up has an odd row count {n_rows}")
        out_rows = n_rows if parity is None else n_rows // 2

        def chunk(e):
            b = blocks.mmap_bytes().reshape(blocks.shape)[e]
            s = scales.mmap_bytes().reshape(scales.shape)[e]
            if parity is not None:
                b, s = b[parity::2], s[parity::2]
            return np.concatenate([s[..., None], mxfp4_to_ggml(b)], axis=-1).reshape(1, out_rows, n_grp * 17)

        data = gguf.LazyChunkedTensor([lambda e=e: chunk(e) for e in range(n_exp)],
                                      (n_exp, out_rows, n_grp * 17), np.uint8)
        w.add_tensor(new_name, data, raw_dtype=gguf.GGMLQuantizationType.MXFP4)

    for name, lt in tensors.items():
        if "mlp.experts.down_proj_scales" in name:
            add(hf_map(tmap, name.replace("_scales", ".weight")),
                hf_need(tensors, name.replace("_scales", "_blocks")), lt, None)
        elif "mlp.experts.gate_up_proj_scales" in name:
            blocks = hf_need(tensors, name.replace("_scales", "_blocks"))
            add(hf_map(tmap, name.replace("gate_up_proj_scales", "gate_proj.weight")), blocks, lt, 0)
            add(hf_map(tmap, name.replace("gate_up_proj_scales", "up_proj.weight")), blocks, lt, 1)


def hf_need(tensors, name):
    if name not in tensors:
        die(f"tensor {name} is missing")
    return tensors[name]


def hf_map(tmap, name):
    new_name = tmap.get_name(key=name, try_suffixes=(".weight", ".bias"))
    if new_name is None:
        die(f"tensor {name!r}: no gpt-oss GGUF name for it")
    return new_name


def hf_dense_qtype(new_name, n_dims, bid, ftype_qtype):
    """prepare_tensors' rules, as they apply to gpt-oss's tensors."""
    Q = gguf.GGMLQuantizationType
    if n_dims <= 1 or new_name.endswith("_norm.weight"):
        return Q.F32
    router = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.FFN_GATE_INP].format(bid=bid) + ".weight" if bid is not None else None
    if new_name == router or new_name[-7:] not in (".weight", ".lora_a", ".lora_b"):
        return Q.F32
    return ftype_qtype


def hf_add_dense(w, tmap, tensors, ftype_qtype):
    """Every other tensor, in order (GptOssModel.modify_tensors' names and splits)."""
    for name, lt in tensors.items():
        if name.endswith((".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")):
            continue
        if "down_proj" in name or "gate_up_proj" in name:
            if name.endswith(("_blocks", "_scales")):
                continue  # written by hf_add_experts
            if name.endswith("down_proj_bias"):
                outs = [(name.replace("down_proj_bias", "down_proj.bias"), None)]
            elif name.endswith("gate_up_proj_bias"):
                outs = [(name.replace("gate_up_proj_bias", "gate_proj.bias"), 0),
                        (name.replace("gate_up_proj_bias", "up_proj.bias"), 1)]
            else:
                die(f"tensor {name}: expert weights not in MXFP4 blocks/scales; this converter "
                    "takes MXFP4 experts only")
        else:
            outs = [(name, None)]
        if lt.dtype not in HF_FLOAT_DTYPES:
            die(f"tensor {name}: dtype {lt.dtype}, expected one of {', '.join(HF_FLOAT_DTYPES)}")
        bid = next((int(p) for p in name.split(".") if p.isdecimal()), None)
        for src_name, parity in outs:
            new_name = hf_map(tmap, src_name)
            shape = list(lt.shape)
            if parity is not None:
                shape[-1] //= 2
            qtype = hf_dense_qtype(new_name, len(shape), bid, ftype_qtype)
            if len(shape) <= 1:
                chunks = [lambda lt=lt, parity=parity: hf_rows(lt, parity=parity)]
            else:
                row_bytes = 4 * int(np.prod(shape[1:]))
                step = max(1, CHUNK_BYTES // row_bytes)
                chunks = [lambda lt=lt, parity=parity, rows=(r, min(r + step, shape[0])): hf_rows(lt, rows, parity)
                          for r in range(0, shape[0], step)]
            data = gguf.LazyChunkedTensor(chunks, tuple(shape), np.float32)
            try:
                data = data.quantize(qtype)
            except gguf.QuantError as e:
                print(f"pdserve_to_gguf.py: {new_name}: {e}, falling back to F16", file=sys.stderr)
                qtype = gguf.GGMLQuantizationType.F16
                data = data.quantize(qtype)
            w.add_tensor(new_name, data, raw_dtype=qtype)


def find_hparam(hp, keys):
    return next((hp[k] for k in keys if k in hp), None)


def hf_write_params(w, hp, block_count, ftype):
    """TextModel.set_gguf_parameters and GptOssModel.set_gguf_parameters, for gpt-oss's keys."""
    w.add_block_count(block_count)
    if (n_ctx := find_hparam(hp, ["max_position_embeddings", "n_ctx", "n_positions", "max_length",
                                  "max_sequence_length", "model_max_length"])) is not None:
        w.add_context_length(n_ctx)
    if (n_embd := find_hparam(hp, ["hidden_size", "n_embd", "dim"])) is not None:
        w.add_embedding_length(n_embd)
    if (n_ff := find_hparam(hp, ["prefix_dense_intermediate_size", "dense_intermediate_size",
                                 "intermediate_size", "n_inner", "hidden_dim"])) is not None:
        w.add_feed_forward_length(n_ff)
    if (n_head := find_hparam(hp, ["num_attention_heads", "n_head", "n_heads"])) is not None:
        w.add_head_count(n_head)
    if (n_head_kv := find_hparam(hp, ["num_key_value_heads", "n_kv_heads"])) is not None:
        w.add_head_count_kv(n_head_kv)
    if hp.get("is_causal") is False:
        w.add_causal_attention(False)
    # rope: rope_parameters (transformers 5) or rope_scaling + top-level rope_theta (4.x)
    rope = dict(hp.get("rope_parameters", hp.get("rope_scaling")) or {})
    if "full_attention" not in rope and "sliding_attention" not in rope:
        theta = find_hparam(hp, ["global_rope_theta", "rope_global_theta", "rope_theta_global",
                                 "rope_theta", "rotary_emb_base"])
        if "rope_theta" not in rope and theta is not None:
            rope["rope_theta"] = theta
        if "rope_type" not in rope and rope.get("type") is not None:
            rope["rope_type"] = rope["type"]
        if "original_max_position_embeddings" not in rope and "original_max_position_embeddings" in hp:
            rope["original_max_position_embeddings"] = hp["original_max_position_embeddings"]
    rp = rope.get("full_attention", rope)
    if (rope_type := rp.get("rope_type")) is not None:
        factor = rp.get("factor")
        if rope_type == "yarn" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(factor)
            w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
            if (v := rp.get("extrapolation_factor")) is not None:
                w.add_rope_scaling_yarn_ext_factor(v)
            if (v := rp.get("attention_factor", rp.get("attn_factor"))) is not None:
                w.add_rope_scaling_yarn_attn_factor(v)
            if (v := rp.get("beta_fast")) is not None:
                w.add_rope_scaling_yarn_beta_fast(v)
            if (v := rp.get("beta_slow")) is not None:
                w.add_rope_scaling_yarn_beta_slow(v)
        elif rope_type == "linear" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(factor)
        elif rope_type != "default":
            die(f"config.json: rope_type {rope_type!r}: gpt-oss uses yarn (or none)")
    if (theta := rp.get("rope_theta")) is not None:
        w.add_rope_freq_base(theta)
    if (eps := find_hparam(hp, ["rms_norm_eps", "norm_eps"])) is not None:
        w.add_layer_norm_rms_eps(eps)
    if (n_exp := find_hparam(hp, ["num_local_experts", "num_experts", "n_routed_experts"])) is not None:
        w.add_expert_count(n_exp)
    if (n_used := find_hparam(hp, ["num_experts_per_tok", "num_experts_per_token", "top_k_experts"])) is not None:
        w.add_expert_used_count(n_used)
    if (head_dim := hp.get("head_dim")) is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(ftype)
    w.add_sliding_window(hp["sliding_window"])
    w.add_expert_feed_forward_length(hp["intermediate_size"])


def looks_special(token):
    """TextModel.does_token_look_special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<｜") and token.endswith("｜>"))
            or (token.startswith("<unused") and token.endswith(">")))


def hf_write_vocab(w, model_dir, hp, tokenizer_arg):
    """TextModel._set_vocab_gpt2 from tokenizer.json, as transformers' fast tokenizer shows it.
    Returns the tokenizer.json used, or "byte-level placeholder"."""
    own = os.path.join(model_dir, "tokenizer.json")
    if tokenizer_arg not in (None, "none") and not os.path.isfile(tokenizer_arg):
        die(f"--tokenizer {tokenizer_arg}: no such file")
    path = own if os.path.isfile(own) else tokenizer_arg or DEFAULT_TOKENIZER
    if path == "none" or not os.path.isfile(path):
        why = "--tokenizer none" if path == "none" else f"not in {model_dir}, nor {path}"
        print(f"pdserve_to_gguf.py: note: no tokenizer.json ({why}): writing a byte-level placeholder "
              "vocabulary (text will not tokenize as gpt-oss's)", file=sys.stderr)
        tokens, types, merges = gpt2_byte_tokens(hp["vocab_size"])
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        eos = hp.get("eos_token_id")
        w.add_eos_token_id(int(eos[0] if isinstance(eos, list) else eos) if eos is not None else hp["vocab_size"] - 1)
        return "byte-level placeholder"
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        die(f"{path}: model type {model.get('type')!r}, expected BPE")
    splits = [p.get("pattern", {}).get("Regex") for p in (tok.get("pre_tokenizer") or {}).get("pretokenizers", [])
              if p.get("type") == "Split"]
    if splits != [O200K_SPLIT]:
        die(f"{path}: not the o200k pre-tokenizer; llama.cpp's converter would not know it either")
    vocab = dict(model["vocab"])
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    for a in added.values():
        vocab[a["content"]] = a["id"]
    vocab_size = hp.get("vocab_size", len(vocab))
    if max(vocab.values()) >= vocab_size:
        die(f"{path}: token id {max(vocab.values())} >= vocab_size {vocab_size}")
    reverse = {i: t for t, i in vocab.items()}
    added_contents = {a["content"] for a in added.values()}
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added_contents:
            # (llama.cpp re-encodes non-normalized added tokens; special ones come back unchanged)
            if added[i]["special"] or looks_special(t):
                types.append(gguf.TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    if path == own:
        gguf.SpecialVocab(Path(model_dir), load_merges=True).add_to_gguf(w, quiet=True)
    else:
        # SpecialVocab reads one directory: the model's files beside the chosen tokenizer.json
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(os.path.abspath(path), os.path.join(tmp, "tokenizer.json"))
            for n in ("config.json", "tokenizer_config.json", "chat_template.json", "chat_template.jinja"):
                if os.path.isfile(os.path.join(model_dir, n)):
                    os.symlink(os.path.abspath(os.path.join(model_dir, n)), os.path.join(tmp, n))
            gguf.SpecialVocab(Path(tmp), load_merges=True).add_to_gguf(w, quiet=True)
    return path


def hf_convert(model_dir, out, outtype, tokenizer_arg):
    hp = hf_config(model_dir)
    tensors = hf_index(model_dir)
    LFT, Q = gguf.LlamaFileType, gguf.GGMLQuantizationType
    if outtype == "auto":   # ModelBase.__init__'s guess: the first float tensor of 2 dims or more
        ftype = LFT.MOSTLY_F16
        for lt in tensors.values():
            if len(lt.shape) >= 2 and lt.dtype in ("BF16", "F16"):
                ftype = LFT.MOSTLY_BF16 if lt.dtype == "BF16" else LFT.MOSTLY_F16
                break
    else:
        ftype = {"f32": LFT.ALL_F32, "f16": LFT.MOSTLY_F16, "bf16": LFT.MOSTLY_BF16, "q8_0": LFT.MOSTLY_Q8_0}[outtype]
    ftype_qtype = {LFT.ALL_F32: Q.F32, LFT.MOSTLY_F16: Q.F16, LFT.MOSTLY_BF16: Q.BF16, LFT.MOSTLY_Q8_0: Q.Q8_0}[ftype]
    block_count = find_hparam(hp, ["n_layers", "num_hidden_layers", "n_layer", "num_layers"])
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, block_count)
    w = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT_OSS])
    hf_add_experts(w, tmap, tensors)
    hf_add_dense(w, tmap, tensors, ftype_qtype)
    # ModelBase.prepare_metadata
    total, shared, expert, expert_count = w.get_total_parameter_count()
    meta = gguf.Metadata.load(None, Path(model_dir), None, total)
    if meta.name is None:
        meta.name = Path(model_dir).name
    if ftype in (LFT.ALL_F32, LFT.MOSTLY_F16, LFT.MOSTLY_BF16):
        ftype = LFT.MOSTLY_MXFP4_MOE
    if meta.size_label is None and total > 0:
        meta.size_label = gguf.size_label(total, shared, expert, expert_count)
    w.add_type(gguf.GGUFType.MODEL)
    meta.set_gguf_meta_model(w)
    hf_write_params(w, hp, block_count, ftype)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    vocab = hf_write_vocab(w, model_dir, hp, tokenizer_arg)
    w.write_header_to_file(path=out)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    n_exp = find_hparam(hp, ["num_local_experts", "num_experts", "n_routed_experts"])
    print(f"wrote {out}: gpt-oss, {block_count} layers, {n_exp} MXFP4 experts, other weights "
          f"{ftype_qtype.name}, {len(w.tensors[0]) if w.tensors else 0} tensors, vocabulary {vocab}")
