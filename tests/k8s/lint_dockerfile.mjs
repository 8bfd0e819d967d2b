// Lints Dockerfiles: the Docker syntax through dockerfile-utils (the Docker
// language server's validator, an npm package), then a set of hadolint's
// rules (hadolint itself is not in Debian nor on npm) and pdserve's own:
//
//   DL3002  the final stage's last USER is not root
//   DL3003  no `cd` in RUN (WORKDIR)
//   DL3007  no :latest base image
//   DL3009  apt lists deleted in the RUN that fetched them
//   DL3014  apt-get install -y
//   DL3015  apt-get install --no-install-recommends
//   DL3020  ADD only for URLs and archives (COPY otherwise)
//   DL3025  CMD and ENTRYPOINT in JSON form
//   DL4006  a RUN with a pipe sets pipefail (SHELL is ignored by OCI builds)
//   PD1     multi-stage: a build stage and a runtime stage
//   PD2     the runtime stages (the final one, those named runtime*) install
//           no -dev package and no compiler
//   PD3     no model in the image (no COPY/ADD of models/ or *.safetensors)
//   PD4     Release, without the test suites
//
// `# hadolint ignore=DL3008,DL3015` on the line above an instruction mutes
// those rules for it, as in hadolint.
//
//   node lint_dockerfile.mjs Dockerfile...      (PDSERVE_K8S_TOOLS as for validate.mjs)
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const toolsDir = process.env.PDSERVE_K8S_TOOLS;
const require = createRequire(import.meta.url);
let dockerfileUtils = null;
if (toolsDir) {
  try {
    dockerfileUtils = require(path.join(toolsDir, "node_modules", "dockerfile-utils"));
  } catch {
    dockerfileUtils = null;
  }
}

let problems = 0;
for (const file of process.argv.slice(2)) {
  const text = fs.readFileSync(file, "utf8");
  const report = (line, rule, msg) => {
    problems++;
    console.error(`${file}:${line}: ${rule}: ${msg}`);
  };

  if (dockerfileUtils) {
    for (const d of dockerfileUtils.validate(text, {})) {
      if (d.severity <= 2) report(d.range.start.line + 1, "syntax", d.message);
    }
  } else {
    console.log(`${file}: dockerfile-utils not installed (scripts/fetch_k8s_schemas.sh): syntax not checked`);
  }

  // Instructions, with continuation lines joined and comment lines inside
  // them dropped (as Docker does), and the ignore pragmas above them.
  const lines = text.split("\n");
  const instrs = [];
  let pendingIgnore = new Set();
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i];
    const trimmed = raw.trim();
    const ignore = /^#\s*hadolint\s+ignore=([A-Z0-9,]+)/.exec(trimmed);
    if (ignore) {
      pendingIgnore = new Set(ignore[1].split(","));
      continue;
    }
    if (trimmed === "" || trimmed.startsWith("#")) continue;
    const start = i + 1;
    let body = trimmed;
    while (body.endsWith("\\") && i + 1 < lines.length) {
      body = body.slice(0, -1);
      i++;
      const next = lines[i].trim();
      if (next.startsWith("#")) {
        body += "\\";
        continue;
      }
      body += " " + next;
    }
    const m = /^(\S+)\s*(.*)$/s.exec(body);
    instrs.push({ line: start, kw: m[1].toUpperCase(), args: m[2], ignore: pendingIgnore });
    pendingIgnore = new Set();
  }
  const rule = (ins, id, cond, msg) => {
    if (cond && !ins.ignore.has(id)) report(ins.line, id, msg);
  };

  // Stages.
  const stages = [];
  for (const ins of instrs) {
    if (ins.kw === "FROM") {
      const as = /\sAS\s+(\S+)/i.exec(ins.args);
      stages.push({ from: ins, name: as ? as[1] : "", instrs: [] });
    }
    else if (stages.length) stages[stages.length - 1].instrs.push(ins);
  }
  if (stages.length < 2) report(1, "PD1", "expected a multi-stage build (a build stage and a runtime stage)");
  const args = Object.fromEntries(
    instrs.filter((i) => i.kw === "ARG" && i.args.includes("=")).map((i) => {
      const [k, ...v] = i.args.split("=");
      return [k.trim(), v.join("=").replace(/^"|"$/g, "")];
    }));
  const final = stages[stages.length - 1];

  for (const st of stages) {
    const image = st.from.args.split(/\s+/)[0].replace(/\$\{(\w+)\}/g, (_, k) => args[k] ?? "");
    rule(st.from, "DL3007", /:latest$/.test(image), `base image ${image} uses :latest`);
    // The runtime side: the final stage and the stages named runtime*.
    const isRuntime = st === final || /^runtime/.test(st.name);
    for (const ins of st.instrs) {
      if (ins.kw === "RUN") {
        const cmd = ins.args;
        rule(ins, "DL3003", /(^|&&|;|\|\|)\s*cd\s/.test(cmd), "use WORKDIR instead of cd");
        if (/apt-get\s+(\S+\s+)*install/.test(cmd)) {
          rule(ins, "DL3014", !/\s(-y|--yes|--assume-yes|-qq?y)\b/.test(cmd), "apt-get install without -y");
          rule(ins, "DL3015", !/--no-install-recommends/.test(cmd), "apt-get install without --no-install-recommends");
        }
        if (/apt-get\s+(\S+\s+)*update/.test(cmd)) {
          rule(ins, "DL3009", !/rm\s+-[a-z]*r[a-z]*f?\s+[^&;]*\/var\/lib\/apt\/lists/.test(cmd),
               "apt lists not deleted in the same RUN");
        }
        const hasPipe = /[^|]\|[^|]/.test(cmd.replace(/'[^']*'|"[^"]*"/g, ""));
        rule(ins, "DL4006", hasPipe && !/set -[a-z]*o pipefail|set -o pipefail/.test(cmd),
             "a pipe without `set -o pipefail` (SHELL is ignored by OCI-format builds)");
        if (isRuntime) {
          const installs = (cmd.match(/apt-get[^&;]*install[^&;]*/g) || []).join(" ");
          rule(ins, "PD2", /\S+-dev\b|build-essential|\bg\+\+|\bcmake\b|ninja-build/.test(installs),
               "the runtime stage installs a development package or a compiler");
        }
        if (/cmake\s/.test(cmd) && /-S\s/.test(cmd)) {
          rule(ins, "PD4", !/-DCMAKE_BUILD_TYPE=Release/.test(cmd), "configure with -DCMAKE_BUILD_TYPE=Release");
          rule(ins, "PD4", !/-DPDSERVE_BUILD_TESTS=OFF/.test(cmd), "configure with -DPDSERVE_BUILD_TESTS=OFF");
        }
      }
      if (ins.kw === "ADD") {
        const srcs = ins.args.split(/\s+/).filter((a) => !a.startsWith("--")).slice(0, -1);
        const local = srcs.filter((s) => !/^(https?:\/\/|\$\{?\w+\}?\/)/.test(s) && !/\.(tar|tar\.\w+|tgz)$/.test(s));
        rule(ins, "DL3020", local.length > 0, `ADD of local files ${local.join(" ")}: use COPY`);
      }
      if (ins.kw === "CMD" || ins.kw === "ENTRYPOINT") {
        rule(ins, "DL3025", !ins.args.trim().startsWith("["), `${ins.kw} in shell form: use JSON`);
      }
      if (ins.kw === "COPY" || ins.kw === "ADD") {
        rule(ins, "PD3", /(^|\s|\/)models?\/|\.safetensors/.test(ins.args), "a model copied into the image");
      }
    }
  }

  // DL3002: the final stage runs as a non-root user.
  const users = final ? final.instrs.filter((i) => i.kw === "USER") : [];
  if (users.length === 0) report(final ? final.from.line : 1, "DL3002", "the final stage sets no USER (runs as root)");
  else {
    const last = users[users.length - 1];
    const who = last.args.trim().split(":")[0].replace(/\$\{(\w+)\}/g, (_, k) => args[k] ?? "");
    rule(last, "DL3002", who === "root" || who === "0" || who === "", `the final USER is ${who || "empty"}`);
  }
}
console.log(`lint_dockerfile.mjs: ${problems} problems`);
process.exit(problems ? 1 : 0);
