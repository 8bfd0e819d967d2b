#!/usr/bin/env bash
# The command lines and settings of the manifests run against the real
# binaries: a flag that a binary does not know makes it exit at start, which
# on a cluster is a crash loop, and a PDSERVE_<FLAG> variable that names no
# flag would be ignored. For every container of every rendering, with its
# $(VAR)s expanded and its PDSERVE_* environment from the ConfigMaps
# (tests/k8s/validate.mjs --emit-commands):
#   - each flag passed, and each PDSERVE_<FLAG> variable, is a flag the
#     binary lists in --helpfull;
#   - the servers (router, prefill, decode) parse the whole line and
#     environment: run with a
#     model directory that does not exist, they must fail on the model, not
#     on a flag or a value (--kv-transport=nccl of the gpu overlay parses in
#     every build: without NCCL the worker warns and uses gRPC);
#   - a worker binary that has --kv-transport gets it from the manifests;
#   - the router's clients (the passkey Job's pdserve-passkey) run their
#     whole line and environment against a router address where nothing
#     listens: they must fail on the router, not on a flag or a TLS file.
# The tls overlay's Secret (mounted at /etc/pdserve/tls) is stood in for by
# certificates made here (tests/e2e/make_test_certs.sh, openssl), so the
# servers and clients read real PEM files and still stop at the model (the
# router).
# Binaries not built here (pdserve-passkey before it lands) are reported and
# left out.
# Usage: manifest_args_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
k8s_init "$@"
need_kubectl
need_node_tools
command -v python3 >/dev/null || skip "python3 not found"
command -v openssl >/dev/null || skip "openssl not found (the tls overlay's certificates are made with it)"
bash "$SRC/tests/e2e/make_test_certs.sh" "$WORK/certs"
mkdir -p "$WORK/tls-secret"  # the keys of the Secret pdserve-tls
cp "$WORK/certs/node.crt" "$WORK/tls-secret/tls.crt"
cp "$WORK/certs/node.key" "$WORK/tls-secret/tls.key"
cp "$WORK/certs/ca.crt" "$WORK/tls-secret/ca.crt"

render_all
mapfile -t cpu <"$WORK/render/cpu.list"
mapfile -t gpu <"$WORK/render/gpu.list"
node "$SRC/tests/k8s/validate.mjs" --emit-commands "$WORK/cpu.json" "${cpu[@]}" >/dev/null 2>&1 ||
  fail "validate.mjs failed on the cpu renderings (run schema_test.sh)"
node "$SRC/tests/k8s/validate.mjs" --expect-gpu --emit-commands "$WORK/gpu.json" "${gpu[@]}" >/dev/null 2>&1 ||
  fail "validate.mjs failed on the gpu renderings (run schema_test.sh)"

OMP_WAIT_POLICY=PASSIVE python3 - "$BUILD" "$WORK" <<'PY'
import json, os, re, subprocess, sys

build, work = sys.argv[1], sys.argv[2]
TLS_MOUNT, TLS_STANDIN = "/etc/pdserve/tls/", os.path.join(work, "tls-secret") + "/"

def local_value(v):
    """A manifest value as this machine runs it: placeholders for the
    downward API, the stand-in for the TLS Secret's mount."""
    v = v.replace("<fieldRef:status.podIP>", "127.0.0.1")
    return v.replace(TLS_MOUNT, TLS_STANDIN)

binaries = {}
for root, dirs, files in os.walk(build):
    dirs[:] = [d for d in dirs if d != "CMakeFiles" and not d.startswith("k8s-test.")]
    for f in files:
        p = os.path.join(root, f)
        if f.startswith("pdserve-") and os.access(p, os.X_OK) and os.path.isfile(p):
            binaries.setdefault(f, p)

known_cache, help_text = {}, {}
def known_flags(binary):
    if binary not in known_cache:
        out = subprocess.run([binaries[binary], "--helpfull"], capture_output=True, text=True, timeout=120)
        help_text[binary] = out.stdout + out.stderr
        known_cache[binary] = set(re.findall(r"^\s+--([A-Za-z0-9_]+) \(", help_text[binary], re.M))
    return known_cache[binary]

def default_of(binary, flag):
    known_flags(binary)
    m = re.search(r"^\s+--" + flag + r" \(.*?\); default: \"?([^\";]*)\"?;", help_text[binary], re.M | re.S)
    return m.group(1) if m else None

def flag_name(arg):
    return arg[2:].split("=", 1)[0].replace("-", "_")

def env_flag(var):
    return var[len("PDSERVE_"):].lower()

SERVERS = {"pdserve-router", "pdserve-prefill", "pdserve-decode"}
CLIENTS = {"pdserve-passkey", "pdserve-cli", "pdserve-bench"}  # of the router's public port
MISSING_MODEL = "/nonexistent-pdserve-model"
CLOSED_ROUTER = "127.0.0.1:1"  # nothing listens there
failures, notes, checked = [], [], 0

def run_env_of(env):
    """The process environment of a container's PDSERVE_* variables, as this
    machine runs them (the model pointing nowhere)."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("PDSERVE_")}
    for k, v in env.items():
        run_env[k] = MISSING_MODEL if k == "PDSERVE_MODEL" else local_value(v)
    return run_env

def check_client(where, binary, cmd, env):
    """A client runs its whole line and environment (its --tls-ca read from
    the Secret's stand-in) against a router address where nothing listens:
    it must get past its flags and files and fail on the router (exit 1),
    not on a flag or a file (exit 2)."""
    line = [binaries[binary]] + [local_value(a) for a in cmd[1:]] + ["--router=" + CLOSED_ROUTER]
    r = subprocess.run(line, capture_output=True, text=True, timeout=120, env=run_env_of(env))
    err = (r.stdout + r.stderr).strip()
    if r.returncode == 1 and CLOSED_ROUTER in err:
        print(f"ok: {where}: {binary} parses its command line and files (stops at the router)")
    else:
        failures.append(f"{where}: {binary} exits {r.returncode} before reaching the router: {err[-400:]}")
seen = {}  # identical command lines (the components change no args) run once
for rendering_set in ("cpu", "gpu"):
    for c in json.load(open(os.path.join(work, rendering_set + ".json"))):
        where = f'{c["rendering"]}: {c["workload"]} {c["container"]}'
        cmd = c["command"] + c["args"]
        binary = cmd[0]
        if not binary.startswith("pdserve-"):
            continue  # sleep, in the passkey reader pod
        if binary not in binaries:
            notes.append(f"{where}: {binary} is not built in {build}: left out")
            continue
        checked += 1
        flags = [a for a in cmd[1:] if a.startswith("--")]
        env = c.get("env", {})
        unknown = [a for a in flags if flag_name(a) not in known_flags(binary)]
        unknown += [v for v in env if env_flag(v) not in known_flags(binary)]
        if unknown:
            failures.append(f"{where}: {binary} does not know {' '.join(unknown)}")
            continue
        passed = {flag_name(a) for a in flags} | {env_flag(v) for v in env}
        if binary in ("pdserve-prefill", "pdserve-decode") and "kv_transport" in known_flags(binary) \
                and "kv_transport" not in passed:
            failures.append(f"{where}: {binary} has --kv-transport but the manifest does not pass it "
                            f"(add PDSERVE_KV_TRANSPORT to its ConfigMap in k8s/base)")
        if binary in CLIENTS:
            check_client(where, binary, cmd, env)
            continue
        if binary not in SERVERS:
            print(f"ok: {where}: {binary} knows every flag")
            continue
        # /metrics: the port the binary will serve (--metrics-port, or its
        # default) is the one the pod declares and Prometheus scrapes.
        if "metrics_port" in known_flags(binary):
            mp = next((a.split("=", 1)[1] for a in flags if flag_name(a) == "metrics_port" and "=" in a), None)
            if mp is None:
                mp = env.get("PDSERVE_METRICS_PORT")
            if mp is None:
                mp = default_of(binary, "metrics_port")
            if str(mp) != str(c["metricsPort"]) or str(mp) != str(c["scrapePort"]):
                failures.append(f"{where}: {binary} serves /metrics on {mp}, but the pod declares "
                                f"{c['metricsPort']} and prometheus.io/port is {c['scrapePort']}")
        # Parse the whole line for real: downward-API values get loopback
        # placeholders, the model points nowhere, so nothing starts serving.
        line = []
        for a in cmd:
            a = local_value(a)
            if flag_name(a) == "model" and a.startswith("--"):
                a = "--model=" + MISSING_MODEL
            line.append(a)
        line[0] = binaries[binary]
        key = (tuple(line), tuple(sorted(env.items())))
        if key not in seen:
            r = subprocess.run(line, capture_output=True, text=True, timeout=120, env=run_env_of(env))
            seen[key] = (r.returncode, (r.stdout + r.stderr).strip())
        returncode, err = seen[key]
        if returncode == 0:
            failures.append(f"{where}: {binary} exited 0 without a model: {err}")
        elif "ERROR:" in err:
            failures.append(f"{where}: {binary} rejects its flags: {err}")
        elif MISSING_MODEL in err:
            print(f"ok: {where}: {binary} parses its command line (stops at the missing model)")
        elif rendering_set == "gpu":
            notes.append(f"{where}: {binary} (this CPU build) stops before the model: {err}")
        else:
            failures.append(f"{where}: {binary} fails before the model check: {err}")
for n in notes:
    print("note: " + n)
for f in failures:
    print("FAIL: " + f, file=sys.stderr)
if checked == 0:
    print("FAIL: no container command was checked (are the binaries built?)", file=sys.stderr)
    sys.exit(1)
print(f"{'PASS' if not failures else 'FAIL'}: {checked} command lines checked, {len(failures)} problems")
sys.exit(1 if failures else 0)
PY
