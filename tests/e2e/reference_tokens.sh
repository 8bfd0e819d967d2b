# reference_tokens GOT MODEL PROMPT [ARGS...]: the numpy reference's tokens
# ($REF generate, printed as {"token_ids":[...]} with no spaces) for a model,
# prompt and generation flags, for comparing with GOT (pdserve's, in the same
# form). Those of its fp32 run (the spec's precision) when they equal GOT,
# else those of its float64 run. fp32 rounding depends on numpy's BLAS
# kernels, so on the CPU: where the reference's own rounding flips a
# near-tie of the sampler, the float64 run judges (seen on a Zen 4 EPYC: an
# F16 checkpoint, sampled, token 55 of 70). Where GOT differs from both, it
# is still right when the first step where it leaves the float64 run is a
# near tie there (--margins: two tokens within 1e-4 of probability, or u or
# top_p within 1e-4 of a boundary; seen on a Xeon: the same token 55, two
# tokens at p 0.012314 and 0.012305, flipped by the prefill kernel's
# rounding): then GOT up to that step is what is checked.
# The caller defines REF (the reference command), PY (a python3 with numpy),
# norm (strips spaces and newlines) and fail (lib.sh).
reference_tokens() {
  local got=$1 model=$2 prompt=$3
  shift 3
  local want want64 judged
  want=$($REF generate --model "$model" --prompt-ids "$prompt" "$@" | norm) || fail "the reference failed: $*"
  if [ "$got" != "$want" ]; then
    want64=$($REF generate --model "$model" --prompt-ids "$prompt" "$@" --float64 --margins | norm) ||
      fail "the float64 reference failed: $*"
    judged=$($PY -c '
import json, sys
got, ref = json.loads(sys.argv[1]), json.loads(sys.argv[2])
g, w, m = got["token_ids"], ref["token_ids"], ref["margins"]
i = next((i for i in range(min(len(g), len(w))) if g[i] != w[i]), None)
if i is not None and m[i] < 1e-4:
    print("near tie at step %d (margin %.2g)" % (i, m[i]), file=sys.stderr)
    print(json.dumps({"token_ids": g}, separators=(",", ":")))
else:
    print(json.dumps({"token_ids": w}, separators=(",", ":")))
' "$got" "$want64") || fail "judging the float64 run"
    if [ "$got" == "$judged" ]; then
      echo "    (fp32 reference $want differs; its float64 run agrees up to a near tie or all through)" >&2
      want=$got
    else
      want=$judged
    fi
  fi
  echo "$want"
}
