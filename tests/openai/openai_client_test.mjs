// The OpenAI-compatible HTTP API driven by the official `openai` npm client
// (pinned by tests/openai/package-lock.json, installed by
// scripts/fetch_openai_client.sh). Starts real pdserve-local processes on the
// shipped passkey-4l model with --http-listen 127.0.0.1:0 and checks, as a
// user of the SDK would see them:
//   1. models.list(): the served model, with an id and owned_by.
//   2. completions, non-streaming: text, finish_reason, usage consistent with
//      the prompt's bytes and max_tokens, the id also in X-Request-Id; a
//      token-id prompt answers like the same text.
//   3. completions, streaming (stream_options.include_usage): the chunks'
//      text concatenates to the non-streaming greedy text, one id, and the
//      last chunk carries the same usage.
//      curl -N sees the same stream as SSE lines ending in data: [DONE].
//   4. chat completions, streaming and not, where the model has a chat
//      template; a 400 naming the reason where it has none.
//   5. errors: n = 2 and a negative temperature are BadRequestError (400)
//      naming the field; an unknown model is NotFoundError (404).
//   6. a server started with --api-key: a wrong key is AuthenticationError
//      (401), the right one works.
// Usage: node openai_client_test.mjs BUILD_DIR SOURCE_DIR
// Exit: 0 pass, 1 fail, 77 skip (the client package is missing).
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [BUILD, SRC] = process.argv.slice(2).map((p) => path.resolve(p));
if (process.argv.length !== 4) {
  console.error("usage: openai_client_test.mjs BUILD_DIR SOURCE_DIR");
  process.exit(2);
}
const CLIENT_DIR = process.env.PDSERVE_OPENAI_CLIENT || path.join(SRC, ".cache/openai-client");
const CLIENT = path.join(CLIENT_DIR, "node_modules/openai/index.mjs");
if (!existsSync(CLIENT)) {
  console.log(`SKIP: the openai npm package is missing in ${CLIENT_DIR}: run 'bash scripts/fetch_openai_client.sh' ` +
              "(scripts/setup.sh runs it)");
  process.exit(77);
}
const { default: OpenAI, BadRequestError, NotFoundError, AuthenticationError } = await import(pathToFileURL(CLIENT).href);
const MODEL_DIR = path.join(SRC, "models/passkey-4l");
const HAS_CHAT_TEMPLATE = "chat_template" in JSON.parse(readFileSync(path.join(MODEL_DIR, "config.json"), "utf8"));

const servers = [];
function fail(msg) {
  console.error(`FAIL: ${msg}`);
  for (const s of servers) console.error(`--- ${s.name} log (last 40 lines)\n${s.log.split("\n").slice(-40).join("\n")}`);
  for (const s of servers) s.proc.kill("SIGKILL");
  process.exit(1);
}
function check(cond, msg) {
  if (!cond) fail(msg);
}
function ok(msg) {
  console.log(`ok: ${msg}`);
}

// A free TCP port on loopback, for the router's gRPC port.
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// pdserve-local with --http-listen 127.0.0.1:0 and `extra` flags; resolves
// to the base URL once it prints "http on port N" and "router on".
async function startServer(name, extra) {
  const bin = path.join(BUILD, "local/pdserve-local");
  const args = ["--model", MODEL_DIR, "--port", String(await freePort()), "--http-listen", "127.0.0.1:0", ...extra];
  const proc = spawn(bin, args, { env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } });
  const s = { name, proc, log: "" };
  servers.push(s);
  const onData = (d) => (s.log += d.toString());
  proc.stdout.on("data", onData);
  proc.stderr.on("data", onData);
  for (let i = 0; i < 600; ++i) {
    const m = s.log.match(/http on port (\d+)/);
    if (m && s.log.includes("router on")) return { ...s, baseURL: `http://127.0.0.1:${m[1]}/v1` };
    if (proc.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(`${name}: pdserve-local did not print 'http on port N' and 'router on' within 60 s`);
}

async function stopServer(s) {
  const exited = new Promise((r) => s.proc.once("exit", (code) => r(code)));
  s.proc.kill("SIGTERM");
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r("timeout"), 10000))]);
  check(code === 0, `${s.name}: exit ${code} after SIGTERM (expected 0 within 10 s)`);
  servers.splice(servers.indexOf(s), 1);
}

// The usage block: numbers, total = prompt + completion, the prompt's bytes
// (byte tokenizer, no BOS), at most max_tokens generated.
function checkUsage(u, promptTokens, maxTokens, finishReason, what) {
  check(u && Number.isInteger(u.prompt_tokens) && Number.isInteger(u.completion_tokens), `${what}: usage ${JSON.stringify(u)}`);
  check(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: total_tokens != prompt + completion: ${JSON.stringify(u)}`);
  if (promptTokens !== null) check(u.prompt_tokens === promptTokens, `${what}: prompt_tokens ${u.prompt_tokens}, expected ${promptTokens}`);
  check(u.completion_tokens >= 1 && u.completion_tokens <= maxTokens, `${what}: completion_tokens ${u.completion_tokens} not in [1, ${maxTokens}]`);
  if (finishReason === "length") check(u.completion_tokens === maxTokens, `${what}: finish 'length' after ${u.completion_tokens} of ${maxTokens} tokens`);
}

async function expectError(promise, cls, status, what) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof cls, `${what}: got ${e?.constructor?.name} (${e?.status}: ${e?.message}), expected ${cls.name}`);
    check(e.status === status, `${what}: status ${e.status}, expected ${status}`);
    return e;
  }
  fail(`${what}: the request succeeded, expected ${cls.name} (${status})`);
}

const PROMPT = "The pass key is 42. Remember it. The pass key is";
const MAX_TOKENS = 12;

async function checkModels(client) {
  const page = await client.models.list();
  check(page.data.length >= 1, `models.list(): no model (${JSON.stringify(page.data)})`);
  const m = page.data[0];
  check(typeof m.id === "string" && m.id.length > 0, `models.list(): model without an id: ${JSON.stringify(m)}`);
  check(typeof m.owned_by === "string" && m.owned_by.length > 0, `models.list(): no owned_by: ${JSON.stringify(m)}`);
  ok(`models.list(): ${JSON.stringify(m)}`);
  return m.id;
}

// Non-streaming greedy completion; returns its text and finish reason.
async function checkCompletion(client, model) {
  const req = { model, prompt: PROMPT, max_tokens: MAX_TOKENS, temperature: 0, seed: 7 };
  const { data: c, response } = await client.completions.create(req).withResponse();
  check(c.object === "text_completion", `completion: object '${c.object}'`);
  check(typeof c.id === "string" && c.id.startsWith("cmpl-"), `completion: id '${c.id}' is not cmpl-...`);
  check(response.headers.get("x-request-id") === c.id, `completion: X-Request-Id '${response.headers.get("x-request-id")}' != id '${c.id}'`);
  check(c.choices.length === 1 && c.choices[0].index === 0, `completion: choices ${JSON.stringify(c.choices)}`);
  const { text, finish_reason } = c.choices[0];
  check(typeof text === "string" && text.length > 0, `completion: text ${JSON.stringify(text)}`);
  check(finish_reason === "stop" || finish_reason === "length", `completion: finish_reason '${finish_reason}'`);
  checkUsage(c.usage, Buffer.byteLength(PROMPT), MAX_TOKENS, finish_reason, "completion");
  ok(`completion: ${JSON.stringify(text)} (${finish_reason}, usage ${JSON.stringify(c.usage)})`);

  // The same prompt as token ids (the byte tokenizer: its UTF-8 bytes).
  const ids = [...Buffer.from(PROMPT, "utf8")];
  const byIds = await client.completions.create({ ...req, prompt: ids });
  check(byIds.choices[0].text === text, `token-id prompt: ${JSON.stringify(byIds.choices[0].text)} != ${JSON.stringify(text)}`);
  check(byIds.usage.prompt_tokens === ids.length, `token-id prompt: prompt_tokens ${byIds.usage.prompt_tokens} != ${ids.length}`);
  ok("a token-id prompt answers like the same text");

  // A second identical greedy request answers the same (the stream below relies on it).
  const again = await client.completions.create(req);
  check(again.choices[0].text === text && again.id !== c.id, `greedy repeat: ${JSON.stringify(again.choices[0].text)}, id ${again.id}`);
  return { req, text, finish_reason, usage: c.usage };
}

async function checkCompletionStream(client, base) {
  const stream = await client.completions.create({ ...base.req, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  check(chunks.length >= 2, `stream: ${chunks.length} chunks`);
  const ids = new Set(chunks.map((c) => c.id));
  check(ids.size === 1 && [...ids][0].startsWith("cmpl-"), `stream: chunk ids ${JSON.stringify([...ids])}`);
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.text ?? "")).join("");
  check(text === base.text, `stream: text ${JSON.stringify(text)} != non-streaming ${JSON.stringify(base.text)}`);
  const finishes = chunks.flatMap((c) => c.choices.filter((ch) => ch.finish_reason).map((ch) => ch.finish_reason));
  check(finishes.length === 1 && finishes[0] === base.finish_reason, `stream: finish reasons ${JSON.stringify(finishes)}, expected ['${base.finish_reason}']`);
  const last = chunks[chunks.length - 1];
  check(last.usage && last.choices.length === 0, `stream: last chunk is not the usage chunk: ${JSON.stringify(last)}`);
  check(JSON.stringify(last.usage) === JSON.stringify(base.usage) ||
        (last.usage.prompt_tokens === base.usage.prompt_tokens && last.usage.completion_tokens === base.usage.completion_tokens &&
         last.usage.total_tokens === base.usage.total_tokens), `stream: usage ${JSON.stringify(last.usage)} != ${JSON.stringify(base.usage)}`);
  check(chunks.slice(0, -1).every((c) => !c.usage), "stream: usage before the last chunk");
  ok(`stream: ${chunks.length} chunks, same text, finish_reason and usage as non-streaming`);

  // Without include_usage no chunk carries usage.
  const plain = await client.completions.create({ ...base.req, stream: true });
  const plainChunks = [];
  for await (const chunk of plain) plainChunks.push(chunk);
  check(plainChunks.every((c) => !c.usage), "stream without include_usage: a chunk has usage");
  check(plainChunks.flatMap((c) => c.choices.map((ch) => ch.text ?? "")).join("") === base.text, "stream without include_usage: other text");
  ok("stream without include_usage: no usage chunk");
  checkCurl(base);
}

// The same stream through curl -N: "data: " lines, the last one [DONE].
function checkCurl(base) {
  if (spawnSync("curl", ["--version"]).status !== 0) return console.log("skip: curl not found");
  const body = JSON.stringify({ ...base.req, stream: true });
  const r = spawnSync("curl", ["-sSN", "--max-time", "60", "-H", "Content-Type: application/json", "-d", body,
                               `${baseURL}/completions`], { encoding: "utf8" });
  check(r.status === 0, `curl -N: exit ${r.status}: ${r.stderr}`);
  const lines = r.stdout.split("\n").filter((l) => l.length > 0);
  check(lines.length >= 2 && lines.every((l) => l.startsWith("data: ")), `curl -N: not SSE data lines: ${r.stdout.slice(0, 300)}`);
  check(lines[lines.length - 1] === "data: [DONE]", `curl -N: last line ${lines[lines.length - 1]}`);
  const text = lines.slice(0, -1).map((l) => JSON.parse(l.slice(6))).flatMap((c) => c.choices.map((ch) => ch.text ?? "")).join("");
  check(text === base.text, `curl -N: text ${JSON.stringify(text)} != ${JSON.stringify(base.text)}`);
  ok(`curl -N: ${lines.length} SSE lines ending in data: [DONE], same text`);
}

const MESSAGES = [{ role: "system", content: "You remember pass keys." }, { role: "user", content: "The pass key is 42. What is it?" }];

async function checkChat(client, model) {
  const req = { model, messages: MESSAGES, max_tokens: MAX_TOKENS, temperature: 0, seed: 3 };
  if (!HAS_CHAT_TEMPLATE) {
    const e = await expectError(client.chat.completions.create(req), BadRequestError, 400, "chat without a chat template");
    check(/template/i.test(e.message), `chat without a template: the message does not say why: ${e.message}`);
    ok(`chat without a chat template: 400 (${e.message}); set chat_template in ${MODEL_DIR}/config.json to test chat`);
    return;
  }
  const c = await client.chat.completions.create(req);
  check(c.object === "chat.completion" && c.id.startsWith("chatcmpl-"), `chat: object '${c.object}', id '${c.id}'`);
  check(c.choices.length === 1, `chat: ${c.choices.length} choices`);
  const { message, finish_reason } = c.choices[0];
  check(message.role === "assistant" && typeof message.content === "string" && message.content.length > 0,
        `chat: message ${JSON.stringify(message)}`);
  check(finish_reason === "stop" || finish_reason === "length", `chat: finish_reason '${finish_reason}'`);
  checkUsage(c.usage, null, MAX_TOKENS, finish_reason, "chat");
  // The template adds text around the messages: more prompt tokens than their contents.
  const contentBytes = MESSAGES.reduce((n, m) => n + Buffer.byteLength(m.content), 0);
  check(c.usage.prompt_tokens > contentBytes, `chat: prompt_tokens ${c.usage.prompt_tokens} <= the messages' ${contentBytes} bytes`);
  ok(`chat: ${JSON.stringify(message.content)} (${finish_reason}, usage ${JSON.stringify(c.usage)})`);

  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  check(chunks.every((ch) => ch.object === "chat.completion.chunk" && ch.id === chunks[0].id), "chat stream: object or id differs");
  const deltas = chunks.flatMap((ch) => ch.choices.map((x) => x.delta));
  check(deltas.length > 0 && deltas[0].role === "assistant", `chat stream: first delta ${JSON.stringify(deltas[0])} has no role`);
  const text = deltas.map((d) => d.content ?? "").join("");
  check(text === message.content, `chat stream: ${JSON.stringify(text)} != non-streaming ${JSON.stringify(message.content)}`);
  const last = chunks[chunks.length - 1];
  check(last.usage && last.choices.length === 0 && last.usage.total_tokens === c.usage.total_tokens,
        `chat stream: last chunk ${JSON.stringify(last)} is not usage ${JSON.stringify(c.usage)}`);
  ok(`chat stream: ${chunks.length} chunks, same content and usage`);
}

async function checkErrors(client, model) {
  const base = { model, prompt: PROMPT, max_tokens: 4 };
  const named = (e, field) => e.param === field || new RegExp(`\\b${field}\\b`).test(e.message);
  const n2 = await expectError(client.completions.create({ ...base, n: 2 }), BadRequestError, 400, "n = 2");
  check(named(n2, "n"), `n = 2: the error does not name 'n': param ${n2.param}, ${n2.message}`);
  check(n2.error && typeof n2.error.message === "string" && "type" in n2.error, `n = 2: body is not OpenAI-shaped: ${JSON.stringify(n2.error)}`);
  ok(`n = 2: BadRequestError 400 (${n2.message})`);
  const t = await expectError(client.completions.create({ ...base, temperature: -1 }), BadRequestError, 400, "temperature -1");
  check(named(t, "temperature"), `temperature -1: the error does not name 'temperature': ${t.param}, ${t.message}`);
  ok(`temperature -1: BadRequestError 400 (${t.message})`);
  const nf = await expectError(client.completions.create({ ...base, model: "no-such-model" }), NotFoundError, 404, "unknown model");
  ok(`unknown model: NotFoundError 404 (${nf.message})`);
}

async function checkApiKey() {
  const KEY = "sk-pdserve-test-" + process.pid;
  const s = await startServer("keyed", ["--api-key", KEY]);
  const wrong = new OpenAI({ baseURL: s.baseURL, apiKey: "sk-wrong", maxRetries: 0, timeout: 60000 });
  const e = await expectError(wrong.models.list(), AuthenticationError, 401, "wrong API key");
  await expectError(wrong.completions.create({ model: "x", prompt: "a", max_tokens: 1 }), AuthenticationError, 401,
                    "wrong API key on completions");
  ok(`wrong API key: AuthenticationError 401 (${e.message})`);
  const right = new OpenAI({ baseURL: s.baseURL, apiKey: KEY, maxRetries: 0, timeout: 60000 });
  const model = (await right.models.list()).data[0].id;
  const c = await right.completions.create({ model, prompt: PROMPT, max_tokens: 2, temperature: 0 });
  check(c.choices.length === 1 && c.usage.completion_tokens >= 1, `right API key: ${JSON.stringify(c)}`);
  ok("right API key: models.list() and a completion");
  await stopServer(s);
}

const s = await startServer("open", []);
const baseURL = s.baseURL;
// Any key: the server has none, so it must not check one.
const client = new OpenAI({ baseURL: s.baseURL, apiKey: "unused", maxRetries: 0, timeout: 60000 });
const model = await checkModels(client);
const base = await checkCompletion(client, model);
await checkCompletionStream(client, base);
await checkChat(client, model);
await checkErrors(client, model);
await stopServer(s);
await checkApiKey();
console.log("PASS");
