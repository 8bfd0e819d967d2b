// The OpenAI-compatible HTTP API driven by the official `openai` npm client
// (pinned by tests/openai/package-lock.json, installed by
// scripts/fetch_openai_client.sh). Starts real pdserve-local processes on the
// shipped passkey-4l model, every port one the kernel picks (--port 0,
// --http-listen 127.0.0.1:0, --metrics-port 0) and read back from its log,
// and checks, as a user of the SDK would see them:
//   1. models.list(): the served model, with an id and owned_by.
//   2. completions, non-streaming: text, finish_reason, usage consistent with
//      the prompt's bytes and max_tokens, the id also in X-Request-Id; a
//      token-id prompt answers like the same text.
//   3. completions, streaming (stream_options.include_usage): the chunks'
//      text concatenates to the non-streaming greedy text, one id, and the
//      last chunk carries the same usage.
//      A raw HTTP client (node:http, no SDK) sees the same stream as SSE
//      events ending in data: [DONE].
//   4. chat completions, streaming and not, where the model has a chat
//      template; a 400 naming the reason where it has none.
//   5. errors: n = 2 and a negative temperature are BadRequestError (400)
//      naming the field; an unknown model is NotFoundError (404).
//   6. a server started with --api-key: a wrong key is AuthenticationError
//      (401), the right one works.
//   7. HTTPS: a server with a certificate made at run time (make_test_certs.sh)
//      and an API key; the SDK, in a child node process that trusts the
//      test CA (NODE_EXTRA_CA_CERTS), lists the models, completes and
//      streams over an https:// base URL; a lower-case "bearer" scheme works.
// Usage: node openai_client_test.mjs BUILD_DIR SOURCE_DIR
// Exit: 0 pass, 1 fail, 77 skip (the client package is missing).
import { spawn } from "node:child_process";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

// The HTTPS child: node openai_client_test.mjs --https-child BASE_URL KEY.
const HTTPS_CHILD = process.argv[2] === "--https-child";
const [BUILD, SRC] = HTTPS_CHILD ? ["", ""] : process.argv.slice(2).map((p) => path.resolve(p));
if (!HTTPS_CHILD && process.argv.length !== 4) {
  console.error("usage: openai_client_test.mjs BUILD_DIR SOURCE_DIR");
  process.exit(2);
}
const CLIENT_DIR = process.env.PDSERVE_OPENAI_CLIENT ||
  path.join(HTTPS_CHILD ? path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..") : SRC, ".cache/openai-client");
const CLIENT = path.join(CLIENT_DIR, "node_modules/openai/index.mjs");
if (!existsSync(CLIENT)) {
  console.log(`SKIP: the openai npm package is missing in ${CLIENT_DIR}: run 'bash scripts/fetch_openai_client.sh' ` +
              "(scripts/setup.sh runs it)");
  process.exit(77);
}
const { default: OpenAI, BadRequestError, NotFoundError, AuthenticationError } = await import(pathToFileURL(CLIENT).href);
if (HTTPS_CHILD) await httpsChild(process.argv[3], process.argv[4]);
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

// pdserve-local on ports the kernel picks (port 0: nothing to collide with)
// and `extra` flags; resolves to the base URL once it prints
// "router on 127.0.0.1:N" and "http on port N".
async function startServer(name, extra) {
  const bin = path.join(BUILD, "local/pdserve-local");
  const args = ["--model", MODEL_DIR, "--port", "0", "--http-listen", "127.0.0.1:0", "--metrics-port", "0", ...extra];
  const proc = spawn(bin, args, { env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } });
  const s = { name, proc, log: "" };
  servers.push(s);
  const onData = (d) => (s.log += d.toString());
  proc.stdout.on("data", onData);
  proc.stderr.on("data", onData);
  for (let i = 0; i < 600; ++i) {
    const m = s.log.match(/http on port (\d+)/);
    if (m && /router on 127\.0\.0\.1:\d+/.test(s.log)) return { ...s, baseURL: `http://127.0.0.1:${m[1]}/v1` };
    if (proc.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(`${name}: pdserve-local did not print 'http on port N' and 'router on 127.0.0.1:N' within 60 s`);
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
  await checkRawStream(base);
}

// POST `body` (JSON) to `url` with node:http, no SDK in between: resolves to
// { status, headers, body } (the raw bytes as text); rejects after 60 s.
function rawPost(url, body) {
  return new Promise((resolve, reject) => {
    const data = Buffer.from(JSON.stringify(body));
    const headers = { "Content-Type": "application/json", "Content-Length": data.length };
    const req = http.request(url, { method: "POST", timeout: 60000, headers }, (res) => {
      const parts = [];
      res.on("data", (d) => parts.push(d));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error("no complete answer within 60 s")));
    req.on("error", reject);
    req.end(data);
  });
}

// The same stream as raw HTTP: "data: " events, the last one [DONE].
async function checkRawStream(base) {
  let r;
  try {
    r = await rawPost(`${baseURL}/completions`, { ...base.req, stream: true });
  } catch (e) {
    fail(`raw HTTP stream: ${e.message}`);
  }
  check(r.status === 200, `raw HTTP stream: status ${r.status}: ${r.body.slice(0, 300)}`);
  check(/^text\/event-stream/.test(r.headers["content-type"] ?? ""), `raw HTTP stream: Content-Type ${r.headers["content-type"]}`);
  const events = r.body.split("\n\n");
  check(events.length >= 3 && events[events.length - 1] === "", `raw HTTP stream: not blank-line-separated events: ${r.body.slice(-300)}`);
  const lines = events.slice(0, -1);
  check(lines.every((l) => l.startsWith("data: ") && !l.includes("\n")), `raw HTTP stream: not SSE data lines: ${r.body.slice(0, 300)}`);
  check(lines[lines.length - 1] === "data: [DONE]", `raw HTTP stream: last event ${lines[lines.length - 1]}`);
  const text = lines.slice(0, -1).map((l) => JSON.parse(l.slice(6))).flatMap((c) => c.choices.map((ch) => ch.text ?? "")).join("");
  check(text === base.text, `raw HTTP stream: text ${JSON.stringify(text)} != ${JSON.stringify(base.text)}`);
  ok(`raw HTTP stream: ${lines.length} SSE events ending in data: [DONE], same text`);
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

// Runs in the child process, which trusts the test CA from its start.
async function httpsChild(baseURL, key) {
  const c = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 60000 });
  const model = (await c.models.list()).data[0].id;
  const done = await c.completions.create({ model, prompt: "The passkey is", max_tokens: 4, temperature: 0 });
  if (done.choices.length !== 1 || done.usage.completion_tokens < 1) throw new Error(`completion: ${JSON.stringify(done)}`);
  let text = "";
  const stream = await c.completions.create({ model, prompt: "The passkey is", max_tokens: 4, temperature: 0, stream: true });
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  if (text !== done.choices[0].text) throw new Error(`stream '${text}' != '${done.choices[0].text}'`);
  const lower = await fetch(`${baseURL}/models`, { headers: { Authorization: `bearer ${key}` } });
  if (lower.status !== 200) throw new Error(`lower-case bearer: ${lower.status}`);
  console.log(`https: models.list, a completion and a stream ('${text}') over ${baseURL}`);
  process.exit(0);
}

async function checkHttps() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "pdserve-https-"));
  try {
    execFileSync("bash", [path.join(SRC, "tests/e2e/make_test_certs.sh"), dir], { stdio: "inherit" });
    const KEY = "sk-pdserve-https-" + process.pid;
    const s = await startServer("https", ["--api-key", KEY, "--tls-cert", path.join(dir, "node.crt"),
                                          "--tls-key", path.join(dir, "node.key")]);
    check(/http on port \d+ \(https /.test(s.log), "the server does not say it serves https");
    const url = s.baseURL.replace("http://", "https://");
    let out;
    try {
      out = execFileSync(process.execPath, [new URL(import.meta.url).pathname, "--https-child", url, KEY],
                         { env: { ...process.env, NODE_EXTRA_CA_CERTS: path.join(dir, "ca.crt") }, encoding: "utf8" });
    } catch (e) {
      fail(`HTTPS with the SDK: ${e.stdout ?? ""}${e.stderr ?? ""}${e.message}`);
    }
    ok(out.trim());
    // Plain HTTP to the HTTPS port is not answered as HTTP.
    const plain = await fetch(s.baseURL + "/models").then((r) => r.status, () => "refused");
    check(plain !== 200, `plain HTTP to the HTTPS port answered ${plain}`);
    ok(`plain HTTP to the HTTPS port: ${plain}`);
    await stopServer(s);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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
await checkHttps();
console.log("PASS");
