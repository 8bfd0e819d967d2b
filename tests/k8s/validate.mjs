// Validates rendered Kubernetes manifests (the output of `kubectl kustomize`).
//
//   node validate.mjs [--expect-gpu] [--emit-commands OUT.json] NAME=FILE.yaml...
//
// For every object:
//   1. the Kubernetes OpenAPI schema, through the npm package kubernetes-models
//      (types, required fields, formats: int32, quantities, ...);
//   2. no unknown fields (the OpenAPI schemas allow any, so a misspelled
//      `readinesProbe` would pass 1): every field is checked against the
//      model classes of @kubernetes/client-node, generated from the same
//      OpenAPI document (kubeconform's --strict, in effect).
// Then across the objects of one rendering, pdserve's own rules: Services and
// policies select real pods on real ports, the router's DNS targets are
// headless Services of the right pods and ports, every $(VAR) is defined,
// the servers take their settings from PDSERVE_<FLAG> variables (no $(VAR)
// in their args), drains fit in the grace period, probes are gRPC health on
// the pod's own port, workers listen on their pod IP, KEDA ScaledObjects
// query series the binaries export and share no Deployment with an HPA, a
// client Job speaks the router's TLS and key, and so on. A server's setting
// is its flag in args, else its PDSERVE_<FLAG> variable. Custom resources
// (KEDA, Prometheus Operator) are checked against the schemas of
// @kubernetes-models/keda and /prometheus-operator.
//
// --emit-commands writes every container's command line with $(VAR)s
// expanded, and its PDSERVE_* environment, for
// tests/k8s/manifest_args_test.sh to run against the binaries.
//
// The npm packages come from scripts/fetch_k8s_schemas.sh (.cache/k8s-tools,
// or $PDSERVE_K8S_TOOLS); NODE_PATH is not used by ES modules, so they are
// loaded by path.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const toolsDir = process.env.PDSERVE_K8S_TOOLS;
if (!toolsDir) {
  console.error("validate.mjs: set PDSERVE_K8S_TOOLS to the k8s-tools directory");
  process.exit(2);
}
const nm = path.join(toolsDir, "node_modules");
const load = (rel) => import(pathToFileURL(path.join(nm, rel)).href);
const yaml = (await load("js-yaml/index.js")).default;

// ---------------------------------------------------------------- arguments
let expectGpu = false;
let emitPath = null;
const inputs = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--expect-gpu") expectGpu = true;
  else if (argv[i] === "--emit-commands") emitPath = argv[++i];
  else {
    const eq = argv[i].indexOf("=");
    if (eq < 0) {
      console.error(`validate.mjs: expected NAME=FILE, got ${argv[i]}`);
      process.exit(2);
    }
    inputs.push({ name: argv[i].slice(0, eq), file: argv[i].slice(eq + 1) });
  }
}

const errors = [];
const fail = (where, msg) => errors.push(`${where}: ${msg}`);

// ------------------------------------------------------- 1. OpenAPI schemas
// apiVersion "apps/v1" -> kubernetes-models/apps/v1/index.js; "v1" -> v1.
// Custom resources come from their own packages, generated from the CRDs.
const CRD_PACKAGES = { "keda.sh": "@kubernetes-models/keda", "monitoring.coreos.com": "@kubernetes-models/prometheus-operator" };
const crdPackage = (apiVersion) => CRD_PACKAGES[apiVersion.split("/")[0]];
async function schemaValidate(obj, where) {
  const pkg = crdPackage(obj.apiVersion) ?? "kubernetes-models";
  const mod = await load(`${pkg}/${obj.apiVersion}/index.js`).catch(() => null);
  const Cls = mod && mod[obj.kind];
  if (!Cls) {
    fail(where, `no schema for ${obj.apiVersion} ${obj.kind} in ${pkg}`);
    return;
  }
  try {
    new Cls(obj).validate();
  } catch (e) {
    fail(where, `schema: ${e.message}`);
  }
}

// ---------------------------------------------------- 2. no unknown fields
// "apps/v1" Deployment -> V1Deployment; "autoscaling/v2" -> V2...;
// "v1beta1" -> V1beta1...
function modelName(apiVersion, kind) {
  const version = apiVersion.split("/").pop();
  return version[0].toUpperCase() + version.slice(1) + kind;
}
const modelCache = new Map();
async function attributeMap(type) {
  if (!modelCache.has(type)) {
    const mod = await load(`@kubernetes/client-node/dist/gen/models/${type}.js`).catch(() => null);
    modelCache.set(type, mod && mod[type] ? mod[type].getAttributeTypeMap() : null);
  }
  return modelCache.get(type);
}
const SCALARS = new Set(["string", "number", "boolean", "Date", "any", "object", "IntOrString"]);
async function strictWalk(value, type, where, p) {
  if (value === null || value === undefined) return;
  if (SCALARS.has(type)) return;
  let m = /^Array<(.+)>$/.exec(type);
  if (m) {
    if (!Array.isArray(value)) return; // the schema check reports the type
    for (let i = 0; i < value.length; i++) await strictWalk(value[i], m[1], where, `${p}[${i}]`);
    return;
  }
  m = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (m) {
    if (typeof value !== "object") return;
    for (const [k, v] of Object.entries(value)) await strictWalk(v, m[1], where, `${p}.${k}`);
    return;
  }
  const attrs = await attributeMap(type);
  if (!attrs) {
    fail(where, `strict: no model ${type} (at ${p || "/"})`);
    return;
  }
  if (typeof value !== "object" || Array.isArray(value)) return;
  const byName = new Map(attrs.map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!byName.has(k)) {
      fail(where, `unknown field ${p ? p + "." : ""}${k} (not in ${type})`);
      continue;
    }
    await strictWalk(v, byName.get(k), where, p ? `${p}.${k}` : k);
  }
}

// A custom resource's fields, from the TypeScript declarations its package
// ships next to the compiled schema (whose validator lets unknown fields
// through): "key"?: Type; members of the interface, followed into the
// interfaces it imports from its own package. ObjectMeta goes to the
// client-node models; anything else imported from elsewhere is not walked.
const dtsCache = new Map();
function dtsInterface(file) {
  if (!dtsCache.has(file)) {
    let text = null;
    try {
      text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    } catch {}
    let parsed = null;
    if (text !== null) {
      const imports = new Map();
      for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) imports.set(m[1], m[2]);
      const fields = new Map();
      const start = text.search(/export interface \w+[^{]*\{/);
      let depth = 0;
      for (const line of text.slice(start).split("\n")) {
        const m = depth === 1 && /^\s*"([^"]+)"\??:\s*(.+?);?$/.exec(line);
        if (m) fields.set(m[1], m[2]);
        depth += (line.match(/\{/g) || []).length - (line.match(/\}/g) || []).length;
        if (depth === 0 && line.includes("}")) break;
      }
      parsed = { fields, imports };
    }
    dtsCache.set(file, parsed);
  }
  return dtsCache.get(file);
}
async function crdWalk(value, file, where, p) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return;
  const iface = dtsInterface(file);
  if (!iface) {
    fail(where, `strict: no declarations ${file} (at ${p || "/"})`);
    return;
  }
  for (const [k, v] of Object.entries(value)) {
    if (!iface.fields.has(k)) {
      fail(where, `unknown field ${p ? p + "." : ""}${k} (not in ${path.basename(file, ".d.ts")})`);
      continue;
    }
    await crdWalkType(v, iface.fields.get(k), iface.imports, file, where, p ? `${p}.${k}` : k);
  }
}
async function crdWalkType(value, type, imports, file, where, p) {
  let m = /^Array<(\w+)>$/.exec(type);
  if (m) {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) await crdWalkType(value[i], m[1], imports, file, where, `${p}[${i}]`);
    }
    return;
  }
  const from = imports.get(type);
  if (!from) return; // a scalar, a literal or an inline type
  if (from.startsWith("./")) return crdWalk(value, path.join(path.dirname(file), from.replace(/\.js$/, ".d.ts")), where, p);
  if (/\/ObjectMeta$/.test(from)) return strictWalk(value, "V1ObjectMeta", where, p);
}
async function strictValidate(obj, where) {
  const pkg = crdPackage(obj.apiVersion);
  if (!pkg) return strictWalk(obj, modelName(obj.apiVersion, obj.kind), where, "");
  return crdWalk(obj, path.join(nm, pkg, obj.apiVersion, `${obj.kind}.d.ts`), where, "");
}

// ------------------------------------------------- 3. pdserve's own rules
const labelsMatch = (sel, labels) =>
  !!sel && Object.entries(sel).every(([k, v]) => labels && labels[k] === v);

function workloads(objs) {
  // Deployments, StatefulSets, Jobs (and bare Pods): their pod templates.
  const out = [];
  for (const o of objs) {
    if (["Deployment", "StatefulSet", "DaemonSet", "Job"].includes(o.kind)) {
      out.push({ obj: o, pod: o.spec.template, where: `${o.kind}/${o.metadata.name}` });
    } else if (o.kind === "Pod") {
      out.push({ obj: o, pod: { metadata: o.metadata, spec: o.spec }, where: `Pod/${o.metadata.name}` });
    }
  }
  return out;
}

// The container's environment as Kubernetes builds it: envFrom first, then
// env. Values from the downward API get placeholders.
function containerEnv(c, configMaps, where) {
  const env = new Map();
  for (const src of c.envFrom || []) {
    if (src.configMapRef) {
      const cm = configMaps.get(src.configMapRef.name);
      if (!cm) {
        fail(where, `envFrom names ConfigMap ${src.configMapRef.name}, which is not in the rendering`);
        continue;
      }
      for (const [k, v] of Object.entries(cm.data || {})) env.set((src.prefix || "") + k, v);
    }
  }
  for (const e of c.env || []) {
    if (e.value !== undefined) env.set(e.name, expand(e.value, env, where).text);
    else if (e.valueFrom?.fieldRef) env.set(e.name, `<fieldRef:${e.valueFrom.fieldRef.fieldPath}>`);
    else if (e.valueFrom?.configMapKeyRef) {
      const ref = e.valueFrom.configMapKeyRef;
      const cm = configMaps.get(ref.name);
      if (!cm) fail(where, `env ${e.name}: ConfigMap ${ref.name} is not in the rendering`);
      else if (!(ref.key in (cm.data || {}))) fail(where, `env ${e.name}: ConfigMap ${ref.name} has no key ${ref.key}`);
      else env.set(e.name, cm.data[ref.key]);
    } else env.set(e.name, "<valueFrom>");
  }
  return env;
}

// $(VAR) expansion as the kubelet does it ($$ escapes).
function expand(s, env, where) {
  const unresolved = [];
  const text = String(s).replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name) => {
    if (m === "$$") return "$";
    if (env.has(name)) return env.get(name);
    unresolved.push(name);
    return m;
  });
  for (const name of unresolved) fail(where, `$(${name}) is not defined in the container's environment`);
  return { text, unresolved };
}

function flagValue(args, flag) {
  // --flag=value or --flag value; dashes or underscores.
  const norm = (s) => s.replace(/_/g, "-");
  for (let i = 0; i < args.length; i++) {
    const a = norm(args[i].split("=")[0]);
    if (a === `--${flag}`) return args[i].includes("=") ? args[i].slice(args[i].indexOf("=") + 1) : args[i + 1];
  }
  return undefined;
}

// A server's setting: --flag in args (the command line wins), else the
// PDSERVE_<FLAG> variable of its environment.
function setting(args, env, flag) {
  return flagValue(args, flag) ?? env.get("PDSERVE_" + flag.toUpperCase().replace(/-/g, "_"));
}

// The API key of a server or client container: only PDSERVE_API_KEY from a
// Secret (secretKeyRef), never a literal, a ConfigMap or an argument.
// Returns its secretKeyRef, or undefined when the container has no key.
function checkApiKey(cw, c, args, env) {
  const apiKey = (c.env || []).find((e) => e.name === "PDSERVE_API_KEY");
  if (env.has("PDSERVE_API_KEY") && !apiKey?.valueFrom?.secretKeyRef) {
    fail(cw, "PDSERVE_API_KEY must come from a Secret (secretKeyRef), not a literal or a ConfigMap");
  }
  if (flagValue(args, "api-key") !== undefined) fail(cw, "--api-key in args shows the key: use PDSERVE_API_KEY from a Secret");
  return apiKey?.valueFrom?.secretKeyRef;
}

// The TLS settings given ([flag, file] pairs of --tls-cert/--tls-key/
// --tls-ca), each a file on a read-only Secret volume.
function tlsFiles(cw, c, args, env, spec) {
  const files = ["tls-cert", "tls-key", "tls-ca"].map((f) => [f, setting(args, env, f)]);
  const given = files.filter(([, v]) => v);
  for (const [flag, file] of given) {
    const mount = (c.volumeMounts || []).find((m) => file.startsWith(m.mountPath + "/"));
    const volume = mount && (spec.volumes || []).find((v) => v.name === mount.name);
    if (!mount) fail(cw, `no volume is mounted where --${flag} ${file} points`);
    else if (mount.readOnly !== true) fail(cw, `the TLS volume ${mount.name} must be mounted readOnly`);
    else if (!volume?.secret) fail(cw, `--${flag} ${file}: the volume ${mount.name} must be a Secret`);
  }
  return given;
}

// TLS of a server container (docs/security.md): off, or all of --tls-cert,
// --tls-key and --tls-ca (workers refuse TLS without the CA: mTLS only)
// from a read-only Secret volume; an API key only from a Secret, and only
// on the router. Returns whether TLS is on.
function checkTls(cw, kind, c, args, env, spec) {
  checkApiKey(cw, c, args, env);
  if (env.has("PDSERVE_API_KEY") && kind !== "router") fail(cw, "only the router takes an API key");
  const given = tlsFiles(cw, c, args, env, spec);
  if (given.length === 0) return false;
  if (given.length !== 3) {
    fail(cw, `TLS needs --tls-cert, --tls-key and --tls-ca together (has ${given.map(([f]) => f).join(", ")})`);
  }
  return true;
}

// The clients of the router's public API (a Job's pdserve-passkey, ...):
// their TLS files on read-only Secret volumes, the key from a Secret; with
// the router in the same rendering (a job rendered with its serving
// overlay), a client that dials the router's Service speaks what the router
// serves: --tls-ca when its port is TLS (plaintext otherwise), and the
// router's API key (the same Secret and key) when it requires one.
const CLIENTS = new Set(["pdserve-passkey", "pdserve-cli", "pdserve-bench", "pdserve-ttft-bench"]);
function checkClient(cw, c, args, env, spec) {
  const apiKey = checkApiKey(cw, c, args, env);
  const given = tlsFiles(cw, c, args, env, spec);
  const target = setting(args, env, "router");
  if (!target) fail(cw, "a client must name the router (--router)");
  return { cw, target, tls: given.some(([f]) => f === "tls-ca" || f === "tls-cert"), apiKey };
}
function checkClientsAgainstRouter(name, clients, router, services) {
  if (!router) return;  // a job alone: its serving overlay is checked with it elsewhere
  const routerTls = !!setting(router.args, router.env, "tls-cert");
  const routerKey = (router.c.env || []).find((e) => e.name === "PDSERVE_API_KEY")?.valueFrom?.secretKeyRef;
  for (const cl of clients.filter((x) => x.target)) {
    const svcName = cl.target.slice(0, cl.target.lastIndexOf(":")).split(".")[0];
    const port = Number(cl.target.slice(cl.target.lastIndexOf(":") + 1));
    const svc = services.find((s) => s.metadata.name === svcName);
    if (!svc || !labelsMatch(svc.spec.selector, router.w.pod.metadata.labels)) {
      fail(cl.cw, `--router ${cl.target}: no Service ${svcName} in front of the router pods`);
      continue;
    }
    if (!(svc.spec.ports || []).some((p) => p.port === port)) fail(cl.cw, `--router ${cl.target}: Service ${svcName} has no port ${port}`);
    if (routerTls && !cl.tls) fail(cl.cw, "the router's port is TLS: the client needs --tls-ca (PDSERVE_TLS_CA)");
    if (!routerTls && cl.tls) fail(cl.cw, "the router's port is plaintext: a client with --tls-ca cannot connect");
    if (routerKey && !cl.apiKey) fail(cl.cw, "the router requires an API key: the client needs PDSERVE_API_KEY from its Secret");
    else if (routerKey && (cl.apiKey.name !== routerKey.name || cl.apiKey.key !== routerKey.key)) {
      fail(cl.cw, `PDSERVE_API_KEY from Secret ${cl.apiKey.name} key ${cl.apiKey.key}, but the router's is ` +
                  `${routerKey.name} key ${routerKey.key}`);
    }
  }
}

// The PDSERVE_* variables of a container's environment.
function pdserveEnv(env) {
  return Object.fromEntries([...env].filter(([k]) => k.startsWith("PDSERVE_")));
}

function cpuCores(q) {
  if (q === undefined) return undefined;
  const s = String(q);
  return s.endsWith("m") ? Number(s.slice(0, -1)) / 1000 : Number(s);
}
function memMiB(q) {
  if (q === undefined) return undefined;
  const m = /^([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  if (!m) return undefined;
  const mult = { Ki: 1 / 1024, Mi: 1, Gi: 1024, Ti: 1024 * 1024, k: 1e3 / 1048576, M: 1e6 / 1048576,
    G: 1e9 / 1048576, T: 1e12 / 1048576 }[m[2]] ?? 1 / 1048576;
  return Number(m[1]) * mult;
}

const SERVERS = { "pdserve-router": "router", "pdserve-prefill": "prefill", "pdserve-decode": "decode" };

// The metric names the binaries register: every "pdserve_..." string literal
// in the servers' sources (a histogram's also with _bucket, _sum, _count).
const SRC_DIR = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../..");
let exportedMetrics = null;
function exportedMetricNames() {
  if (exportedMetrics) return exportedMetrics;
  exportedMetrics = new Set();
  for (const dir of ["router", "decode_service", "prefill_service", "common/net"]) {
    for (const f of fs.readdirSync(path.join(SRC_DIR, dir)).filter((f) => f.endsWith(".cc"))) {
      const text = fs.readFileSync(path.join(SRC_DIR, dir, f), "utf8");
      for (const m of text.matchAll(/"(pdserve_[a-z0-9_]+)"/g)) {
        for (const suffix of ["", "_bucket", "_sum", "_count"]) exportedMetrics.add(m[1] + suffix);
      }
    }
  }
  return exportedMetrics;
}

// KEDA: a ScaledObject scales a Deployment of the rendering that no HPA
// scales too (KEDA makes its own), and its Prometheus queries name series
// that pdserve exports, in the namespace the objects are in.
function checkScaledObject(name, o, objs) {
  const where = `${name}: ScaledObject/${o.metadata.name}`;
  const t = o.spec.scaleTargetRef;
  const kind = t.kind ?? "Deployment";
  const target = objs.find((x) => x.kind === kind && x.metadata.name === t.name);
  if (!target) fail(where, `scaleTargetRef ${kind}/${t.name} is not in the rendering`);
  else if (target.spec.replicas !== undefined) fail(where, `${kind}/${t.name} sets replicas, which each apply would reset`);
  for (const h of objs.filter((x) => x.kind === "HorizontalPodAutoscaler")) {
    if (h.spec.scaleTargetRef.name === t.name) {
      fail(where, `HorizontalPodAutoscaler/${h.metadata.name} scales ${t.name} too: two autoscalers fight`);
    }
  }
  if (o.spec.minReplicaCount === undefined || o.spec.maxReplicaCount === undefined) fail(where, "set minReplicaCount and maxReplicaCount");
  else if (!(o.spec.minReplicaCount >= 1 && o.spec.minReplicaCount <= o.spec.maxReplicaCount)) {
    fail(where, `replicas ${o.spec.minReplicaCount}..${o.spec.maxReplicaCount}: need 1 <= min <= max (a worker never scales to 0)`);
  }
  for (const trig of o.spec.triggers || []) {
    if (trig.type !== "prometheus") continue;
    const q = trig.metadata?.query ?? "";
    const names = q.match(/\bpdserve_[a-z0-9_]+/g) || [];
    if (names.length === 0) fail(where, `query ${q} names no pdserve series`);
    for (const n of names) if (!exportedMetricNames().has(n)) fail(where, `query names ${n}, which no pdserve binary exports`);
    const ns = /namespace="([^"]*)"/.exec(q);
    if (!ns) fail(where, `query ${q} does not select a namespace`);
    else if (o.metadata.namespace && ns[1] !== o.metadata.namespace) {
      fail(where, `query selects namespace ${ns[1]}, but the objects are in ${o.metadata.namespace}`);
    }
    if (!trig.metadata?.serverAddress) fail(where, "prometheus trigger without serverAddress");
    if (!(Number(trig.metadata?.threshold) > 0)) fail(where, `threshold ${trig.metadata?.threshold} is not a positive number`);
  }
}

// A PodMonitor scrapes a named container port of every pdserve server.
function checkPodMonitor(name, o, wl) {
  const where = `${name}: PodMonitor/${o.metadata.name}`;
  const pods = wl.filter((w) => labelsMatch(o.spec.selector?.matchLabels, w.pod.metadata?.labels));
  const kinds = new Set(pods.flatMap((w) => w.pod.spec.containers.map((c) => SERVERS[(c.command || [])[0]])));
  for (const k of ["router", "prefill", "decode"]) if (!kinds.has(k)) fail(where, `selects no ${k} pods`);
  for (const ep of o.spec.podMetricsEndpoints || []) {
    for (const w of pods.filter((w) => w.pod.spec.containers.some((c) => SERVERS[(c.command || [])[0]]))) {
      if (!w.pod.spec.containers.some((c) => (c.ports || []).some((cp) => cp.name === ep.port))) {
        fail(where, `${w.where} has no container port named ${ep.port}`);
      }
    }
  }
}

function checkRendering(name, objs, commands) {
  const configMaps = new Map(objs.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata.name, o]));
  const services = objs.filter((o) => o.kind === "Service");
  const wl = workloads(objs);
  const byKind = {}; // router/prefill/decode -> {w, c, env, args}
  const clients = []; // checkClient's

  for (const w of wl) {
    const spec = w.pod.spec;
    const where = `${name}: ${w.where}`;
    if (spec.securityContext?.runAsNonRoot !== true) fail(where, "pod must set securityContext.runAsNonRoot: true");
    for (const v of spec.volumes || []) {
      if (v.persistentVolumeClaim) {
        const claim = v.persistentVolumeClaim.claimName;
        // Claims made outside this kustomization (the serving overlays'
        // model PVC, for a Job) are checked where they are made.
        const local = objs.some((o) => o.kind === "PersistentVolumeClaim" && o.metadata.name === claim);
        if (!local && !["pdserve-model", "pdserve-passkey-results"].includes(claim)) {
          fail(where, `volume ${v.name}: PersistentVolumeClaim ${claim} is neither rendered nor a known pdserve claim`);
        }
      }
    }
    for (const c of spec.containers) {
      const cw = `${where} container ${c.name}`;
      // The API server's rule, which the schemas do not express: one
      // handler per probe and per lifecycle hook.
      const handlers = ["exec", "httpGet", "tcpSocket", "grpc", "sleep"];
      for (const [what, h] of [["startupProbe", c.startupProbe], ["readinessProbe", c.readinessProbe],
                               ["livenessProbe", c.livenessProbe], ["preStop", c.lifecycle?.preStop],
                               ["postStart", c.lifecycle?.postStart]]) {
        if (h && handlers.filter((k) => h[k] !== undefined).length !== 1) fail(cw, `${what} must have exactly one handler`);
      }
      const env = containerEnv(c, configMaps, cw);
      const cmd = (c.command || []).map((s) => expand(s, env, cw).text);
      const args = (c.args || []).map((s) => expand(s, env, cw).text);
      if (!c.resources?.requests?.cpu || !c.resources?.requests?.memory) fail(cw, "needs cpu and memory requests");
      if (!c.resources?.limits?.memory) fail(cw, "needs a memory limit");
      if (c.securityContext?.allowPrivilegeEscalation !== false) fail(cw, "must set allowPrivilegeEscalation: false");
      const metricsPort = (c.ports || []).find((p) => p.name === "metrics")?.containerPort;
      const scrapePort = w.pod.metadata?.annotations?.["prometheus.io/port"];
      commands.push({ rendering: name, workload: w.where, container: c.name, command: cmd, args, env: pdserveEnv(env),
                      metricsPort: metricsPort ?? null, scrapePort: scrapePort ?? null });

      if (CLIENTS.has(cmd[0])) clients.push(checkClient(cw, c, args, env, spec));
      const kind = SERVERS[cmd[0]];
      if (!kind) continue;
      byKind[kind] = { w, c, env, args, cw };
      for (const a of c.args || []) {
        if (a.includes("$(")) fail(cw, `${a}: pass settings as PDSERVE_<FLAG> variables, not $(VAR) in args`);
      }
      if (w.obj.kind !== "Deployment" && w.obj.kind !== "StatefulSet") fail(cw, `${cmd[0]} should run as a Deployment or StatefulSet`);

      // The gRPC port: the container port named grpc, which --listen uses.
      const grpcPort = (c.ports || []).find((p) => p.name === "grpc")?.containerPort;
      if (!grpcPort) fail(cw, "needs a container port named grpc");
      const listen = setting(args, env, "listen");
      const rawListen = flagValue(c.args || [], "listen") ?? (c.env || []).find((e) => e.name === "PDSERVE_LISTEN")?.value;
      if (!listen) fail(cw, "must set --listen (PDSERVE_LISTEN)");
      else {
        if (!listen.endsWith(`:${grpcPort}`)) fail(cw, `--listen ${listen} is not on the grpc port ${grpcPort}`);
        if (/^(127\.|localhost|\[::1\])/.test(listen)) fail(cw, `--listen ${listen} is loopback: nobody else can reach it`);
        if (kind !== "router") {
          // Workers are addressed by pod IP: bind it (downward API).
          if (!/^\$\(POD_IP\):/.test(rawListen || "")) fail(cw, "workers must listen on $(POD_IP):PORT");
          if (env.get("POD_IP") !== "<fieldRef:status.podIP>") fail(cw, "POD_IP must come from fieldRef status.podIP");
        }
      }

      // Probes: gRPC health on the grpc port. Liveness never involves
      // another pod (a grpc probe of our own port can't). With TLS the
      // kubelet's gRPC probe (plaintext) cannot talk to the port: tcpSocket
      // on it instead.
      const tls = checkTls(cw, kind, c, args, env, spec);
      for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const pr = c[probe];
        const want = tls ? "tcpSocket" : "grpc";
        const port = pr?.[want]?.port;
        if (!pr) fail(cw, `needs a ${probe}`);
        else if (!pr[want]) fail(cw, `${probe} must be a ${tls ? "tcpSocket probe (the port is TLS)" : "gRPC health probe"}`);
        else if (port !== grpcPort && port !== "grpc") fail(cw, `${probe} probes port ${port}, not the grpc port ${grpcPort}`);
      }
      if (kind !== "router" && c.startupProbe) {
        const budget = (c.startupProbe.periodSeconds ?? 10) * (c.startupProbe.failureThreshold ?? 3);
        if (budget < 300) fail(cw, `startupProbe allows ${budget} s for loading the model; give it at least 300`);
      }

      // Graceful termination: preStop + drain fit in the grace period.
      const drain = Number(setting(args, env, "drain-timeout-s") ?? 20);
      const pre = c.lifecycle?.preStop?.exec?.command;
      const preSleep = pre && pre[0] === "sleep" ? Number(pre[1]) : (c.lifecycle?.preStop?.sleep?.seconds ?? 0);
      const grace = spec.terminationGracePeriodSeconds ?? 30;
      if (!(grace > preSleep + drain)) {
        fail(cw, `terminationGracePeriodSeconds ${grace} must exceed preStop ${preSleep} s + drain ${drain} s`);
      }

      // Threads match the CPU limit (0 = every core of the node).
      const threads = setting(args, env, "threads");
      const cpuLimit = cpuCores(c.resources?.limits?.cpu);
      if (threads !== undefined) {
        if (Number(threads) === 0 && cpuLimit) fail(cw, "--threads 0 uses every core of the node: set it to the CPU limit");
        if (cpuLimit && Number(threads) > cpuLimit) fail(cw, `--threads ${threads} exceeds the CPU limit ${cpuLimit}`);
      }
      const budget = setting(args, env, "kv-budget-mb");
      const mem = memMiB(c.resources?.limits?.memory);
      if (budget !== undefined && mem !== undefined && !c.resources?.limits?.["nvidia.com/gpu"] && Number(budget) >= mem) {
        fail(cw, `--kv-budget-mb ${budget} does not fit in the memory limit (${mem} MiB)`);
      }

      // The model: mounted read-only.
      const model = setting(args, env, "model");
      const mount = (c.volumeMounts || []).find((m) => model && model.startsWith(m.mountPath));
      if (!mount) fail(cw, `no volume is mounted where --model ${model} points`);
      else if (mount.readOnly !== true) fail(cw, `the model volume ${mount.name} must be mounted readOnly`);

      if (kind !== "router") {
        const gpu = c.resources?.limits?.["nvidia.com/gpu"];
        if (expectGpu && !gpu) fail(cw, "the gpu rendering must request nvidia.com/gpu");
        if (!expectGpu && gpu) fail(cw, "only the gpu rendering may request nvidia.com/gpu");
      }
      const ann = w.pod.metadata?.annotations || {};
      if (ann["prometheus.io/scrape"] !== "true" || !ann["prometheus.io/port"]) {
        fail(cw, "pod template needs prometheus.io/scrape and prometheus.io/port annotations");
      } else if (String(metricsPort) !== String(ann["prometheus.io/port"])) {
        fail(cw, `prometheus.io/port ${ann["prometheus.io/port"]} is not the container port named metrics (${metricsPort})`);
      }
    }
  }

  // Services select pods that have the target port.
  for (const s of services) {
    const where = `${name}: Service/${s.metadata.name}`;
    const pods = wl.filter((w) => labelsMatch(s.spec.selector, w.pod.metadata?.labels));
    if (pods.length === 0) fail(where, "selects no pods");
    for (const port of s.spec.ports || []) {
      for (const w of pods) {
        const ok = w.pod.spec.containers.some((c) =>
          (c.ports || []).some((p) => p.name === port.targetPort || p.containerPort === port.targetPort));
        if (!ok) fail(where, `port ${port.port}: ${w.where} has no container port ${port.targetPort}`);
      }
    }
  }

  // TLS on every server or on none (a plaintext peer of a TLS one cannot
  // connect), with the same name for the workers' certificate.
  const servers = Object.entries(byKind);
  const tlsOf = ([, s]) => `${setting(s.args, s.env, "tls-cert") ? "TLS" : "plaintext"}` +
    ` ${setting(s.args, s.env, "tls-server-name") ?? ""}`;
  if (new Set(servers.map(tlsOf)).size > 1) {
    fail(`${name}: servers`, `disagree on TLS: ${servers.map((e) => `${e[0]} ${tlsOf(e)}`).join(", ")}`);
  }

  checkClientsAgainstRouter(name, clients, byKind.router, services);

  // The router's DNS targets: headless Services in front of the right pods.
  const router = byKind.router;
  if (router) {
    for (const [flag, kind] of [["prefill-dns", "prefill"], ["decode-dns", "decode"]]) {
      const where = `${name}: router --${flag}`;
      const value = setting(router.args, router.env, flag);
      if (!value) {
        fail(where, "not set");
        continue;
      }
      for (const target of value.split(",")) {
        const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
        const svcName = host.split(".")[0];
        const svc = services.find((s) => s.metadata.name === svcName);
        if (!svc) {
          fail(where, `${target}: no Service ${svcName}`);
          continue;
        }
        if (svc.spec.clusterIP !== "None") fail(where, `${target}: Service ${svcName} must be headless (clusterIP: None)`);
        if (svc.spec.publishNotReadyAddresses) fail(where, `${target}: Service ${svcName} must publish ready pods only`);
        if (!(svc.spec.ports || []).some((p) => p.port === port)) fail(where, `${target}: Service ${svcName} has no port ${port}`);
        const worker = byKind[kind];
        if (!worker) fail(where, `no ${kind} Deployment in the rendering`);
        else {
          if (!labelsMatch(svc.spec.selector, worker.w.pod.metadata.labels)) {
            fail(where, `${target}: Service ${svcName} does not select the ${kind} pods`);
          }
          // The router dials the pod IP on the Service's port, without
          // translation: the worker must listen on that very port.
          if (!String(setting(worker.args, worker.env, "listen")).endsWith(`:${port}`)) {
            fail(where, `${target}: the ${kind} pods do not listen on port ${port}`);
          }
        }
      }
    }
  }

  // A rendering that makes a Namespace puts everything else in it (objects
  // from a component come after the base's namespace: field).
  const CLUSTER_SCOPED = new Set(["Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"]);
  const namespaces = objs.filter((o) => o.kind === "Namespace").map((o) => o.metadata.name);
  if (namespaces.length === 1) {
    for (const o of objs.filter((x) => !CLUSTER_SCOPED.has(x.kind))) {
      if (o.metadata.namespace !== namespaces[0]) {
        fail(`${name}: ${o.kind}/${o.metadata.name}`, `in namespace ${o.metadata.namespace ?? "(none: kubectl's default)"}, not ${namespaces[0]}`);
      }
    }
  }

  // Autoscalers, disruption budgets and policies point at real workloads.
  for (const o of objs) {
    const where = `${name}: ${o.kind}/${o.metadata.name}`;
    if (o.kind === "HorizontalPodAutoscaler") {
      const t = o.spec.scaleTargetRef;
      const target = objs.find((x) => x.kind === t.kind && x.metadata.name === t.name);
      if (!target) fail(where, `scaleTargetRef ${t.kind}/${t.name} is not in the rendering`);
      else if (target.spec.replicas !== undefined) fail(where, `${t.kind}/${t.name} sets replicas, which each apply would reset under the HPA`);
    }
    if (o.kind === "ScaledObject") checkScaledObject(name, o, objs);
    if (o.kind === "PodMonitor") checkPodMonitor(name, o, wl);
    if (o.kind === "PodDisruptionBudget" && !wl.some((w) => labelsMatch(o.spec.selector.matchLabels, w.pod.metadata?.labels))) {
      fail(where, "selects no pods");
    }
    if (o.kind === "NetworkPolicy") {
      const pods = wl.filter((w) => labelsMatch(o.spec.podSelector.matchLabels, w.pod.metadata?.labels));
      if (pods.length === 0) fail(where, "selects no pods");
      for (const rule of o.spec.ingress || []) {
        for (const from of rule.from || []) {
          if (from.podSelector && !from.namespaceSelector &&
              !wl.some((w) => labelsMatch(from.podSelector.matchLabels, w.pod.metadata?.labels))) {
            fail(where, `an ingress rule admits pods that do not exist: ${JSON.stringify(from.podSelector.matchLabels)}`);
          }
        }
        for (const p of rule.ports || []) {
          if (p.endPort) continue;
          const known = pods.every((w) =>
            w.pod.spec.containers.some((c) => (c.ports || []).some((cp) => cp.containerPort === p.port || cp.name === p.port)));
          if (!known) fail(where, `port ${p.port} is not a port of the selected pods`);
        }
      }
    }
  }
  // Only the router reaches prefill; only router and prefill reach decode.
  const admitted = (kind) => {
    const out = new Set();
    for (const o of objs.filter((x) => x.kind === "NetworkPolicy")) {
      if (o.spec.podSelector.matchLabels?.["app.kubernetes.io/component"] !== kind) continue;
      for (const rule of o.spec.ingress || []) {
        if (!rule.from) out.add("<anyone>");
        for (const from of rule.from || []) {
          if (from.namespaceSelector) out.add(`<namespace ${JSON.stringify(from.namespaceSelector.matchLabels)}>`);
          else out.add(from.podSelector?.matchLabels?.["app.kubernetes.io/component"] ?? "<any pod>");
        }
      }
    }
    return out;
  };
  if (byKind.prefill && byKind.decode) {
    const p = admitted("prefill");
    const d = admitted("decode");
    if (!p.has("router")) fail(name, "no NetworkPolicy admits the router to the prefill pods");
    if (!d.has("router") || !d.has("prefill")) fail(name, "NetworkPolicies must admit the router and prefill to the decode pods");
    const allowed = (s) => ["router", "prefill", "decode"].includes(s) || s.startsWith("<namespace");
    for (const s of [...p, ...d]) if (!allowed(s)) fail(name, `a worker NetworkPolicy admits ${s}`);
  }
}

// ------------------------------------------------------------------- main
const commands = [];
let count = 0;
for (const { name, file } of inputs) {
  const objs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((o) => o);
  if (objs.length === 0) fail(name, "renders no objects");
  for (const o of objs) {
    const where = `${name}: ${o.kind}/${o.metadata?.name}`;
    await schemaValidate(o, where);
    await strictValidate(o, where);
    count++;
  }
  checkRendering(name, objs, commands);
}
if (emitPath) fs.writeFileSync(emitPath, JSON.stringify(commands, null, 1));
for (const e of errors) console.error(`FAIL ${e}`);
console.log(`validate.mjs: ${count} objects in ${inputs.length} renderings, ${errors.length} problems`);
process.exit(errors.length ? 1 : 0);
