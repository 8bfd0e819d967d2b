#!/usr/bin/env node
// Writes tests/data/harmony_prompts.jsonl: gpt-oss chat prompts as the
// model's own chat template renders them, for harmony_chat_test (which holds
// pdserve's HarmonyChat::Render to them id for id). One line per case:
//   {"name", "messages" (OpenAI chat messages), "reasoning_effort" (or
//    null: the default), "date", "text" (the template's output), "ids"}
//
// The text is rendered by gpt-oss-20b's chat_template.jinja (Hugging Face
// openai/gpt-oss-20b, the "Updated chat template" revision of 2025-08-07;
// not in this repository: pass its path) with npm @huggingface/jinja,
// add_generation_prompt true and the clock set to `date` (its strftime_now
// is built in). The ids are
// npm gpt-tokenizer's o200k_harmony (independent of the tokenizer.json
// pdserve loads): the text is cut at each harmony special token, the
// pieces between are encoded as text and each special token is its id, as
// make_gptoss_encodings.mjs does. So no message here spells a special token
// (the template would let it through as the token; pdserve keeps such text
// as text, which harmony_chat_test checks apart).
//
// An assistant message's `reasoning_content` (what pdserve accepts and
// drops) is passed to the template as its `thinking`, which the template
// drops for earlier turns as well.
//
// Usage: node tests/data/make_harmony_prompts.mjs CHAT_TEMPLATE.jinja [OUT]
// Needs node >= 18 and npm with network access (installs the packages into
// a temporary directory; nothing is added to the repository).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PKGS = ["@huggingface/jinja@0.5.11", "gpt-tokenizer@4.0.0"];
const here = dirname(fileURLToPath(import.meta.url));
if (!process.argv[2]) {
  console.error("usage: node make_harmony_prompts.mjs CHAT_TEMPLATE.jinja [OUT]");
  process.exit(2);
}
const templateText = readFileSync(process.argv[2], "utf8");
const out = process.argv[3] ?? join(here, "harmony_prompts.jsonl");

// The structure tokens a rendered prompt may hold.
const SPECIALS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"];

const cases = [
  { name: "user_only", date: "2025-08-05", reasoning_effort: null,
    messages: [{ role: "user", content: "What is 2 + 2?" }] },
  { name: "system_low", date: "2025-08-05", reasoning_effort: "low",
    messages: [{ role: "system", content: "Answer the user's questions like a robot." },
               { role: "user", content: "What is the capital of the largest country in the world?" }] },
  { name: "developer_high", date: "2024-12-31", reasoning_effort: "high",
    messages: [{ role: "developer", content: "Be brief.\n\nUse metric units." },
               { role: "user", content: "How tall is Mount Everest?" }] },
  { name: "medium_explicit", date: "2026-01-15", reasoning_effort: "medium",
    messages: [{ role: "user", content: "Hi" }] },
  { name: "multi_turn", date: "2025-08-05", reasoning_effort: null,
    messages: [{ role: "system", content: "You are helpful." },
               { role: "user", content: "What is 2 + 2?" },
               { role: "assistant", content: "2 + 2 = 4.", reasoning_content: "Simple arithmetic." },
               { role: "user", content: "And 3 + 5?" }] },
  { name: "assistant_last", date: "2025-08-05", reasoning_effort: "low",
    messages: [{ role: "user", content: "Say hi" }, { role: "assistant", content: "Hi!" }] },
  { name: "empty_system", date: "2025-08-05", reasoning_effort: null,
    messages: [{ role: "system", content: "" }, { role: "user", content: "Hello" }] },
  { name: "unicode_and_whitespace", date: "2025-08-05", reasoning_effort: null,
    messages: [{ role: "user", content: "  Ünïcödé 你好 😀👍🏽\n\n\tcode:\n    x = 1\n" },
               { role: "assistant", content: "Привет! 🤖" },
               { role: "user", content: "\n" }] },
];

// @huggingface/jinja's built-in strftime_now reads the clock: `fn` runs
// with a Date whose "now" is noon UTC of `date`.
function renderOn(date, fn) {
  const RealDate = globalThis.Date;
  const now = RealDate.parse(`${date}T12:00:00Z`);
  globalThis.Date = class extends RealDate {
    constructor(...args) { super(...(args.length ? args : [now])); }
    static now() { return now; }
  };
  try {
    return fn();
  } finally {
    globalThis.Date = RealDate;
  }
}

function nextSpecial(text, from) {
  let best = null;
  for (const s of SPECIALS) {
    const i = text.indexOf(s, from);
    if (i >= 0 && (best === null || i < best[0])) best = [i, s];
  }
  return best;
}

const tmp = mkdtempSync(join(tmpdir(), "harmony-prompts-"));
try {
  writeFileSync(join(tmp, "package.json"), "{\"private\": true}\n");
  execFileSync("npm", ["install", "--silent", "--no-audit", "--no-fund", ...PKGS], { cwd: tmp, stdio: "inherit" });
  const require = createRequire(join(tmp, "package.json"));
  const { Template } = require("@huggingface/jinja");
  const { encode } = require("gpt-tokenizer/encoding/o200k_harmony");
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
      const end = next === null ? text.length : next[0];
      if (end > pos) ids.push(...asText(text.slice(pos, end)));
      if (next === null) return ids;
      ids.push(specialId(next[1]));
      pos = end + next[1].length;
    }
  };
  const template = new Template(templateText);
  const lines = [];
  for (const c of cases) {
    const messages = c.messages.map(({ reasoning_content, ...m }) =>
      reasoning_content === undefined ? m : { ...m, thinking: reasoning_content });
    const context = { messages, add_generation_prompt: true };
    if (c.reasoning_effort !== null) context.reasoning_effort = c.reasoning_effort;
    const text = renderOn(c.date, () => template.render(context));
    if (!text.includes(`Current date: ${c.date}\n`)) throw new Error(`${c.name}: the date did not take`);
    lines.push(JSON.stringify({ name: c.name, messages: c.messages, reasoning_effort: c.reasoning_effort,
                                date: c.date, text, ids: parsed(text) }));
  }
  writeFileSync(out, lines.join("\n") + "\n");
  console.log(`wrote ${lines.length} prompts to ${out}`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
