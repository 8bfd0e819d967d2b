#!/usr/bin/env bash
# Encoding throughput of pdserve's BPE tokenizer on the gpt-oss tokenizer
# (o200k_harmony), side by side with two independent implementations, on the
# same two 1 MB inputs (English, and mixed multilingual text and code):
#   pdserve        build/clients/pdserve-tokenize --bench, the gpt-oss tokenizer.json
#   gpt-tokenizer  npm gpt-tokenizer 4.0.0 (tiktoken ported to JavaScript),
#                  gpt-tokenizer/encoding/o200k_harmony; once with its merge cache
#                  cleared before each run (pdserve's cache lives for one call),
#                  once with the default cache, warm from the previous runs
#   tiktoken       npm tiktoken 1.0.22 (OpenAI's Rust core compiled to WASM):
#                  o200k_harmony where the version has it, else o200k_base (same
#                  regex and ranks; only the special tokens differ, and the
#                  inputs have none); the table says which
# Each encodes the whole file in one call, RUNS times, on one thread (the
# first run is counted: no implementation gets a warm-up). The script prints
# a markdown table (best and mean seconds, MB/s, tokens/s) and checks that
# each implementation gives exactly pdserve's ids on each input.
#
#   scripts/bench_tokenizer.sh          # about 75 s on 2 busy cores (RUNS=10)
#   RUNS=20 scripts/bench_tokenizer.sh
#   scripts/bench_tokenizer.sh --help   # this text
#
# Inputs, written to $WORK (their sha256 is printed, to compare across machines):
#   english_1mb.txt  the Debian licence texts (/usr/share/common-licenses) 7
#                    times, cut to 1,000,000 bytes: the input of the LLaMA-3
#                    table in docs/tokenizer.md
#   mixed_1mb.txt    7 parts, each cut to its byte budget on a character
#                    boundary (so a few bytes under 1,000,000 in all), in order:
#                    Japanese (150 kB), C++ (150 kB: libstdc++-12's stl_algo.h),
#                    Chinese (150 kB), Korean (125 kB), Python (100 kB:
#                    python3.11's typing.py), Russian (125 kB), Greek + Arabic +
#                    Hindi (200 kB); the natural languages are the translations
#                    (msgstr only) of coreutils.mo (ja, zh_CN, ko, ru) and
#                    glib20.mo (el, ar, hi) in /usr/share/locale, via msgunfmt
# Needs: the tool (ninja -C build pdserve-tokenize), the tokenizer.json
# (scripts/fetch_tokenizer.sh gptoss), node >= 18 and npm (network on the
# first run only: the two packages go to $TOKBENCH_DIR, git-ignored), msgunfmt
# (gettext), and on Debian 12 the packages base-files, coreutils,
# libglib2.0-data, libstdc++-12-dev and libpython3.11-minimal for the inputs.
#
# Environment (defaults):
#   RUNS=10                                   timed encodes per implementation and input
#   WORK=/tmp/pdserve-tokbench                inputs and pdserve's ids
#   TOKBENCH_DIR=.cache/tokbench              where npm installs the two packages
#   TOKENIZER_JSON=.cache/tokenizers/gptoss/tokenizer.json
#   PDSERVE_TOKENIZE=build/clients/pdserve-tokenize
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."

RUNS=${RUNS:-10}
WORK=${WORK:-/tmp/pdserve-tokbench}
TOKBENCH_DIR=${TOKBENCH_DIR:-.cache/tokbench}
TOKENIZER_JSON=${TOKENIZER_JSON:-.cache/tokenizers/gptoss/tokenizer.json}
PDSERVE_TOKENIZE=${PDSERVE_TOKENIZE:-build/clients/pdserve-tokenize}
GPT_TOKENIZER_VERSION=4.0.0
TIKTOKEN_VERSION=1.0.22

die() { echo "bench_tokenizer: $*" >&2; exit 1; }
[ -x "$PDSERVE_TOKENIZE" ] || die "$PDSERVE_TOKENIZE not built (ninja -C build pdserve-tokenize)"
[ -s "$TOKENIZER_JSON" ] || die "$TOKENIZER_JSON missing (scripts/fetch_tokenizer.sh gptoss)"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then die "needs node and npm"; fi
command -v msgunfmt >/dev/null || die "needs msgunfmt (apt-get install gettext)"
mkdir -p "$WORK" "$TOKBENCH_DIR"
TOKBENCH_DIR=$(cd "$TOKBENCH_DIR" && pwd)

# --- the npm packages, exact versions (neither has dependencies) ---
installed() { node -p "require('$TOKBENCH_DIR/node_modules/$1/package.json').version" 2>/dev/null || true; }
if [ "$(installed gpt-tokenizer)" != "$GPT_TOKENIZER_VERSION" ] || [ "$(installed tiktoken)" != "$TIKTOKEN_VERSION" ]; then
  echo "bench_tokenizer: installing gpt-tokenizer@$GPT_TOKENIZER_VERSION tiktoken@$TIKTOKEN_VERSION into $TOKBENCH_DIR" >&2
  printf '{"private": true, "dependencies": {"gpt-tokenizer": "%s", "tiktoken": "%s"}}\n' \
    "$GPT_TOKENIZER_VERSION" "$TIKTOKEN_VERSION" > "$TOKBENCH_DIR/package.json"
  # --ignore-scripts: no package may run code at install time.
  (cd "$TOKBENCH_DIR" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
fi

# --- the inputs ---
# cut_utf8 N: stdin cut to at most N bytes, backing off to a character boundary.
cut_utf8() {
  node -e 'const n = +process.argv[1]; let b = require("fs").readFileSync(0);
    if (b.length > n) { let e = n; while (e > 0 && (b[e] & 0xc0) === 0x80) e--; b = b.subarray(0, e); }
    process.stdout.write(b);' "$1"
}
# translations LANG DOMAIN...: the msgstr lines of /usr/share/locale/LANG/LC_MESSAGES/DOMAIN.mo.
translations() {
  local lang=$1 domain; shift
  for domain; do
    msgunfmt "/usr/share/locale/$lang/LC_MESSAGES/$domain.mo" 2>/dev/null | awk '/^msgid/ { s = 0 } /^msgstr/ { s = 1 } s'
  done
}
for f in /usr/include/c++/12/bits/stl_algo.h /usr/lib/python3.11/typing.py \
         /usr/share/locale/{ja,zh_CN,ko,ru}/LC_MESSAGES/coreutils.mo /usr/share/locale/{el,ar,hi}/LC_MESSAGES/glib20.mo; do
  [ -f "$f" ] || die "$f missing (its package: see the header)"
done
for _ in 1 2 3 4 5 6 7; do
  cat /usr/share/common-licenses/{Apache-2.0,Artistic,BSD,CC0-1.0,GFDL-1.3,GPL-2,GPL-3,LGPL-2.1,LGPL-3,MPL-2.0}
done | cut_utf8 1000000 > "$WORK/english_1mb.txt"  # cut_utf8 reads to the end: no SIGPIPE
{
  translations ja coreutils | cut_utf8 150000
  cut_utf8 150000 < /usr/include/c++/12/bits/stl_algo.h
  translations zh_CN coreutils | cut_utf8 150000
  translations ko coreutils | cut_utf8 125000
  cut_utf8 100000 < /usr/lib/python3.11/typing.py
  translations ru coreutils | cut_utf8 125000
  { translations el glib20; translations ar glib20; translations hi glib20; } | cut_utf8 200000
} > "$WORK/mixed_1mb.txt"
INPUTS=(english_1mb mixed_1mb)

# --- the JavaScript side: one process per implementation and input ---
cat > "$WORK/bench.cjs" <<'EOF'
// node bench.cjs DIR IMPL FILE RUNS PDSERVE_IDS_JSON -> one JSON line
const fs = require("fs");
const { createRequire } = require("module");
const [dir, impl, file, runsArg, idsFile] = process.argv.slice(2);
const req = createRequire(dir + "/package.json");
const text = fs.readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
const runs = +runsArg;
let encode, before = () => {}, encoding;
if (impl.startsWith("gpt-tokenizer")) {
  const g = req("gpt-tokenizer/encoding/o200k_harmony");
  encoding = "o200k_harmony";
  // Special tokens are ordinary text, as in pdserve's Encode of plain text.
  const opts = { allowedSpecial: new Set(), disallowedSpecial: new Set() };
  encode = (t) => g.encode(t, opts);
  if (impl === "gpt-tokenizer-cold") before = () => g.clearMergeCache();
} else if (impl === "tiktoken") {
  const { get_encoding } = req("tiktoken");
  let enc;
  for (const name of ["o200k_harmony", "o200k_base"]) {
    try { enc = get_encoding(name); encoding = name; break; } catch (e) { /* not in this version */ }
  }
  encode = (t) => enc.encode(t, [], []);
} else {
  throw new Error("unknown implementation " + impl);
}
let best = Infinity, total = 0, ids;
for (let i = 0; i < runs; ++i) {
  before();
  const t0 = process.hrtime.bigint();
  ids = encode(text);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  total += s;
  best = Math.min(best, s);
}
const ref = JSON.parse(fs.readFileSync(idsFile, "utf8")).ids;
let firstDiff = -1;
const n = Math.max(ref.length, ids.length);
for (let i = 0; i < n; ++i) if (ref[i] !== ids[i]) { firstDiff = i; break; }
console.log(JSON.stringify({ impl, encoding, bytes, tokens: ids.length, best_seconds: best,
                             mean_seconds: total / runs, first_diff: firstDiff }));
EOF

pdserve_version=$("$PDSERVE_TOKENIZE" --version 2>&1 | head -1 || true)
echo "bench_tokenizer: $(date -u '+%Y-%m-%d %H:%M UTC'); $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p'), $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "bench_tokenizer: $pdserve_version; gpt-tokenizer $(installed gpt-tokenizer); tiktoken $(installed tiktoken); node $(node --version); RUNS=$RUNS" >&2

rows=()
for input in "${INPUTS[@]}"; do
  file=$WORK/$input.txt
  echo "bench_tokenizer: $input.txt: $(wc -c < "$file") bytes, sha256 $(sha256sum "$file" | cut -c1-64)" >&2
  "$PDSERVE_TOKENIZE" --tokenizer-json "$TOKENIZER_JSON" < "$file" > "$WORK/$input.pdserve_ids.json"
  pd=$("$PDSERVE_TOKENIZE" --tokenizer-json "$TOKENIZER_JSON" --bench "$RUNS" < "$file")
  rows+=("$(node -e 'const j = JSON.parse(process.argv[1]);
    console.log(JSON.stringify({impl: "pdserve", encoding: "tokenizer.json", bytes: j.bytes, tokens: j.tokens,
      best_seconds: j.best_seconds, mean_seconds: j.mean_seconds, first_diff: -1}));' "$pd") $input")
  for impl in gpt-tokenizer-cold gpt-tokenizer tiktoken; do
    rows+=("$(node "$WORK/bench.cjs" "$TOKBENCH_DIR" "$impl" "$file" "$RUNS" "$WORK/$input.pdserve_ids.json") $input")
  done
  echo "bench_tokenizer: $input done; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

# --- the table ---
# shellcheck disable=SC2016  # JavaScript template literals, not shell
printf '%s\n' "${rows[@]}" | node -e '
  const names = {
    "pdserve": "pdserve `BpeTokenizer`",
    "gpt-tokenizer-cold": "gpt-tokenizer '"$GPT_TOKENIZER_VERSION"', merge cache cleared per run",
    "gpt-tokenizer": "gpt-tokenizer '"$GPT_TOKENIZER_VERSION"', default (cache warm after run 1)",
    "tiktoken": "tiktoken '"$TIKTOKEN_VERSION"' (WASM)",
  };
  const lines = require("fs").readFileSync(0, "utf8").trim().split("\n");
  console.log("| input | implementation | tokens | best of '"$RUNS"' | mean | MB/s (best / mean) | tokens/s (best) | ids |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const line of lines) {
    const cut = line.lastIndexOf(" ");
    const r = JSON.parse(line.slice(0, cut)), input = line.slice(cut + 1);
    const mb = r.bytes / 1e6;
    const name = names[r.impl] + (r.impl === "tiktoken" ? ", " + r.encoding : "");
    const same = r.impl === "pdserve" ? "reference" : r.first_diff < 0 ? "same" : "differ from token " + r.first_diff;
    console.log(`| ${input} | ${name} | ${r.tokens} | ${r.best_seconds.toFixed(3)} s | ${r.mean_seconds.toFixed(3)} s | ` +
      `${(mb / r.best_seconds).toFixed(1)} / ${(mb / r.mean_seconds).toFixed(1)} | ` +
      `${(r.tokens / r.best_seconds / 1e6).toFixed(2)} M | ${same} |`);
  }'
