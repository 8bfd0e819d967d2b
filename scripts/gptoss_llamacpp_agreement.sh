#!/usr/bin/env bash
# gptoss_llamacpp_agreement.sh: greedy tokens of pdserve and llama.cpp on one random gpt-oss checkpoint.
#
# What it does (docs/benchmarks.md §16):
#   1. a random gpt-oss checkpoint in the Hugging Face layout (scripts/make_gptoss_checkpoint.py
#      --preset 20b with hidden 512, intermediate 512, 4 layers, 16 q / 4 kv heads of 64; the
#      20b's 32 experts top-4 in MXFP4, sliding window 128, YaRN factor 32 over 4096, the real
#      o200k tokenizer .cache/tokenizers/gptoss/tokenizer.json), and a copy whose config says
#      rope_scaling.truncate: true (the same shards, linked): llama.cpp's YaRN correction dims;
#   2. its GGUFs by scripts/pdserve_to_gguf.py: dense weights bf16 and f32, experts MXFP4 as is;
#   3. 8 text prompts (one of 150+ tokens, past the window; one with harmony special tokens),
#      tokenized by llama.cpp (add_special, parse_special, as llama-completion does; checked
#      against pdserve-tokenize), N_NEW greedy tokens (--ignore-eos) from
#        llama.cpp:  scripts/llamacpp_greedy.cpp (built here against .cache/llama/build: what
#                    llama-completion --temp 0 -no-cnv --ignore-eos does, printing the ids and
#                    the top 5 logits of every step): bf16 GGUF with llama-completion's f16 KV
#                    cache and flash attention auto, and f32 GGUF with an f32 KV cache;
#                    llama-completion itself on the bf16 GGUF must print the same text;
#        pdserve:    pdserve-generate --mxfp4-kernel fma and dot (default f32 weights and KV), on
#                    the checkpoint and on its truncate: true copy;
#   4. per prompt, the number of leading tokens that agree, for each pair; the table into
#      $WORK/agreement.md, and at each first divergence llama.cpp's logit gap between its token and
#      pdserve's (from its top 5).
# Time (2 busy Zen 5 cores): ~6 min the first time (checkpoint 35 s, GGUFs 1 min, 2 llama.cpp
# runs 1.7 min, 8 llama-completion runs 2 min, 4 pdserve-generate runs 1.2 min), 5 min when
# $WORK already holds the model and GGUFs.
# Needs: the llama.cpp build of scripts/bench_vs_llamacpp.sh (.cache/llama/build/bin with
# llama-completion and libllama), build/clients/pdserve-generate and pdserve-tokenize, g++.
# Environment: WORK (.cache/llama/agreement), N_NEW (32), THREADS (2).
# Usage: scripts/gptoss_llamacpp_agreement.sh [--help]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=$ROOT/.cache/llama
WORK=${WORK:-$CACHE/agreement}
N_NEW=${N_NEW:-32}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
LB=$CACHE/build/bin
GEN=$ROOT/build/clients/pdserve-generate
TOKENIZE=$ROOT/build/clients/pdserve-tokenize
DRIVER=$CACHE/build/llamacpp-greedy
TOKENIZER=$ROOT/.cache/tokenizers/gptoss/tokenizer.json
M=$WORK/model
MT=$WORK/model-truncate
SHAPE=(--set hidden_size=512 --set intermediate_size=512 --set num_hidden_layers=4
  --set num_attention_heads=16 --set num_key_value_heads=4)

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--help]" >&2; exit 2; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
for f in "$LB/llama-completion" "$LB/libllama.so" "$GEN" "$TOKENIZE" "$TOKENIZER"; do
  [[ -e $f ]] || { echo "missing $f (llama.cpp: scripts/bench_vs_llamacpp.sh builds it; pdserve: ninja -C build pdserve-generate pdserve-tokenize)" >&2; exit 1; }
done
mkdir -p "$WORK"
SECONDS=0

if [[ ! -x $DRIVER || $ROOT/scripts/llamacpp_greedy.cpp -nt $DRIVER ]]; then
  log "building $DRIVER"
  g++ -O2 -std=c++17 -I"$CACHE/src/include" -I"$CACHE/src/ggml/include" "$ROOT/scripts/llamacpp_greedy.cpp" \
    -L"$LB" -lllama -lggml -lggml-base -Wl,-rpath,"$LB" -o "$DRIVER"
fi

if [[ ! -f $M/model.safetensors.index.json ]]; then
  log "random checkpoint -> $M"
  $PY "$ROOT/scripts/make_gptoss_checkpoint.py" --preset 20b "${SHAPE[@]}" --seed 1 \
    --tokenizer "$TOKENIZER" --out "$M" >/dev/null
fi
if [[ ! -f $MT/config.json ]]; then
  mkdir -p "$MT"
  for f in "$M"/*; do [[ $(basename "$f") == config.json ]] || ln -sf "$f" "$MT/"; done
  $PY -c 'import json,sys; c=json.load(open(sys.argv[1])); c["rope_scaling"]["truncate"]=True
json.dump(c, open(sys.argv[2], "w"), indent=2)' "$M/config.json" "$MT/config.json"
fi
for t in bf16 f32; do
  if [[ ! -f $WORK/model-$t.gguf ]]; then
    log "GGUF $t"
    PYTHONPATH=$CACHE/src/gguf-py $PY "$ROOT/scripts/pdserve_to_gguf.py" "$M" "$WORK/model-$t.gguf" \
      --outtype "$t" >"$WORK/convert-$t.log" 2>&1 || { tail "$WORK/convert-$t.log"; exit 1; }
  fi
done

# The prompts: one a line (no newlines inside).
LONG="In the beginning of the eighteenth century the town was small, with a market square, a church, two inns and a mill by the river."
LONG="$LONG $LONG The miller kept a ledger of every sack of grain that passed through his hands, and the ledger survives."
LONG="$LONG $LONG"
cat >"$WORK/prompts.txt" <<EOF
The quick brown fox jumps over the lazy dog.
Once upon a time, in a land far away,
def fibonacci(n):
Die Hauptstadt von Frankreich ist
1, 2, 3, 4, 5, 6,
<|start|>user<|message|>What is the capital of France?<|end|><|start|>assistant
東京は日本の首都です。
$LONG
EOF

log "llama.cpp: bf16 GGUF, f16 KV, flash attention auto"
"$DRIVER" -m "$WORK/model-bf16.gguf" -n "$N_NEW" -t "$THREADS" --top 5 <"$WORK/prompts.txt" >"$WORK/llama_bf16.jsonl"
log "llama.cpp: f32 GGUF, f32 KV"
"$DRIVER" -m "$WORK/model-f32.gguf" -n "$N_NEW" -t "$THREADS" --kv f32 --top 5 <"$WORK/prompts.txt" >"$WORK/llama_f32.jsonl"

log "llama-completion (bf16 GGUF): its text must be the driver's"
i=0
while IFS= read -r p; do
  "$LB/llama-completion" -m "$WORK/model-bf16.gguf" -p "$p" -n "$N_NEW" --temp 0 -no-cnv --ignore-eos \
    -t "$THREADS" --no-display-prompt -c 4096 >"$WORK/completion_$i.txt" 2>"$WORK/completion_$i.err" </dev/null ||
    { tail -5 "$WORK/completion_$i.err"; exit 1; }
  i=$((i + 1))
done <"$WORK/prompts.txt"

# pdserve's prompts: llama.cpp's ids. pdserve-tokenize's ids for the same text are compared.
$PY - "$WORK" "$TOKENIZE" "$TOKENIZER" <<'EOF'
import json, subprocess, sys
work, tok, tj = sys.argv[1:]
prompts = open(f"{work}/prompts.txt", encoding="utf-8").read().splitlines()
rows = [json.loads(l) for l in open(f"{work}/llama_bf16.jsonl")]
with open(f"{work}/prompts.jsonl", "w") as f:
    for i, (p, r) in enumerate(zip(prompts, rows)):
        f.write(json.dumps({"id": i, "token_ids": r["prompt_ids"]}) + "\n")
same = 0
for p, r in zip(prompts, rows):
    ids = json.loads(subprocess.run([tok, "--tokenizer-json", tj], input=p.encode(), capture_output=True,
                                    check=True).stdout)["ids"]
    same += ids == r["prompt_ids"]
    if ids != r["prompt_ids"]:
        print(f"tokenizers differ on {p[:40]!r}: llama.cpp {r['prompt_ids'][:12]}..., pdserve {ids[:12]}...")
with open(f"{work}/tokenize_check.txt", "w") as f:
    f.write(f"{same}/{len(prompts)}\n")
EOF

for m in M MT; do
  for k in fma dot; do
    tag=$([[ $m == MT ]] && echo "${k}_truncate" || echo "$k")
    log "pdserve-generate --mxfp4-kernel $k ($([[ $m == MT ]] && echo "truncate: true" || echo "as published"))"
    "$GEN" --model "${!m}" --prompts-jsonl "$WORK/prompts.jsonl" --max-new-tokens "$N_NEW" --ignore-eos \
      --mxfp4-kernel "$k" --threads "$THREADS" >"$WORK/pdserve_$tag.jsonl" 2>"$WORK/pdserve_$tag.err" ||
      { tail -5 "$WORK/pdserve_$tag.err"; exit 1; }
  done
done

$PY - "$WORK" "$N_NEW" "$SECONDS" <<'EOF'
import json, sys
work, n_new, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl") if l.strip()]
    if "id" in rows[0]:
        rows.sort(key=lambda r: r["id"])
    return rows
L = {"bf16": load("llama_bf16"), "f32": load("llama_f32")}
P = {k: load(f"pdserve_{k}") for k in ("fma", "dot", "fma_truncate", "dot_truncate")}
prompts = [json.loads(l)["token_ids"] for l in open(f"{work}/prompts.jsonl")]
# llama-completion's text against the driver's
comp = []
for i, r in enumerate(L["bf16"]):
    got = open(f"{work}/completion_{i}.txt", "rb").read()
    want = bytes.fromhex(r["text_hex"])
    comp.append(got.startswith(want) or got.rstrip(b"\n") == want.rstrip(b"\n"))
def lead(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
pairs = [("pdserve fma", P["fma"], "llama.cpp bf16", L["bf16"]),
         ("pdserve dot", P["dot"], "llama.cpp bf16", L["bf16"]),
         ("pdserve fma", P["fma"], "llama.cpp f32", L["f32"]),
         ("pdserve dot", P["dot"], "llama.cpp f32", L["f32"]),
         ("pdserve fma, truncate", P["fma_truncate"], "llama.cpp f32", L["f32"]),
         ("pdserve dot, truncate", P["dot_truncate"], "llama.cpp f32", L["f32"]),
         ("pdserve dot, truncate", P["dot_truncate"], "llama.cpp bf16", L["bf16"]),
         ("pdserve fma", P["fma"], "pdserve dot", P["dot"]),
         ("pdserve fma", P["fma"], "pdserve fma, truncate", P["fma_truncate"]),
         ("llama.cpp bf16", L["bf16"], "llama.cpp f32", L["f32"])]
out = []
out.append(f"Leading tokens that agree, of {n_new} greedy tokens per prompt ({len(prompts)} prompts; "
           f"prompt lengths {', '.join(str(len(p)) for p in prompts)}):\n")
out.append("| pair | " + " | ".join(f"p{i}" for i in range(len(prompts))) + " | total | identical |")
out.append("|---|" + "---|" * (len(prompts) + 2))
for na, a, nb, b in pairs:
    ls = [lead(x["token_ids"], y["token_ids"]) for x, y in zip(a, b)]
    out.append(f"| {na} vs {nb} | " + " | ".join(map(str, ls)) +
               f" | {sum(ls)}/{n_new * len(ls)} | {sum(l == n_new for l in ls)}/{len(ls)} |")
out.append("")
out.append("At each first divergence from llama.cpp's run (its top-5 logits at that step): llama.cpp's "
           "token, pdserve's, and llama.cpp's logit gap between them (> if pdserve's is not in its top 5):\n")
for name in ("fma", "dot", "dot_truncate"):
    for lname in ("bf16", "f32"):
        gaps = []
        for x, y in zip(P[name], L[lname]):
            n = lead(x["token_ids"], y["token_ids"])
            if n == n_new:
                continue
            top = dict((t, v) for t, v in y["top"][n])
            lt, pt = y["token_ids"][n], x["token_ids"][n]
            gaps.append(f"{top[lt] - top[pt]:.3f}" if pt in top else f">{top[lt] - min(top.values()):.2f}")
        out.append(f"- pdserve {name} vs llama.cpp {lname}: " + (", ".join(gaps) if gaps else "no divergence"))
# llama.cpp's own top-2 gaps: how close the random model's choices are
g = sorted(s[0][1] - s[1][1] for r in L["f32"] for s in r["top"])
out.append(f"- llama.cpp f32's top-1 minus top-2 logit over all {len(g)} steps: median {g[len(g)//2]:.3f}, "
           f"10th percentile {g[len(g)//10]:.3f}, smallest {g[0]:.4f}")
tok = open(f"{work}/tokenize_check.txt").read().strip()
out.append(f"- prompts tokenized alike by llama.cpp and pdserve-tokenize: {tok}; llama-completion's text "
           f"is the driver's: {sum(comp)}/{len(comp)}")
out.append(f"- run time {secs} s")
text = "\n".join(out) + "\n"
open(f"{work}/agreement.md", "w").write(text)
print(text)
EOF
log "wrote $WORK/agreement.md"
