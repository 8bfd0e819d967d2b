#!/usr/bin/env bash
# pdserve-local links the component flags of the standalone binaries
# (router_flags, decode_flags, prefill_flags, engine_flags): every flag it
# shares with pdserve-router, pdserve-prefill or pdserve-decode must show the
# same default in --help and come from the same file. Only the per-process
# flags below may differ (pdserve-local serves on loopback, in one process);
# --model is the router's own (it reads config.json only, without LibTorch)
# but must default alike. Then one validation: a bad component value gets
# the same one-line error, naming the flag and the value, from both.
# Usage: flag_defaults_test.sh BUILD_DIR
set -euo pipefail
BUILD=$1
PER_PROCESS="metrics_port metrics_host kv_transport http_listen"
OWN_FILE="model"
/usr/bin/python3 - "$BUILD" "$PER_PROCESS" "$OWN_FILE" <<'PY'
import re, subprocess, sys

build, per_process, own_file = sys.argv[1], set(sys.argv[2].split()), set(sys.argv[3].split())
binaries = {"local": "local/pdserve-local", "router": "router/pdserve-router",
            "prefill": "prefill_service/pdserve-prefill", "decode": "decode_service/pdserve-decode"}

def flags(path):
    """{name: (file, default)} from --help."""
    out = subprocess.run([f"{build}/{path}", "--help"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"FAIL: {path} --help exited {out.returncode}: {out.stderr}")
    result, file = {}, None
    for line in out.stdout.splitlines():
        m = re.match(r"\s+Flags from (\S+):$", line)
        if m:
            file = m.group(1)
            continue
        m = re.match(r"\s+--(\w+) \(.*\); default: \"(.*)\";$", line)
        if m:
            result[m.group(1)] = (file, m.group(2))
    if not result:
        sys.exit(f"FAIL: {path} --help lists no flags:\n{out.stdout}")
    return result

local = flags(binaries["local"])
failures, shared = [], set()
for name in ("router", "prefill", "decode"):
    own = flags(binaries[name])
    for flag in sorted(set(own) & set(local)):
        shared.add(flag)
        if flag in per_process:
            continue
        if own[flag][1] != local[flag][1]:
            failures.append(f"--{flag}: pdserve-{name} default \"{own[flag][1]}\", pdserve-local \"{local[flag][1]}\"")
        if own[flag][0] != local[flag][0] and flag not in own_file:
            failures.append(f"--{flag}: pdserve-{name} defines it in {own[flag][0]}, pdserve-local in {local[flag][0]}")
    print(f"ok: pdserve-{name} shares {len(set(own) & set(local))} flags with pdserve-local")
# The component flags must be shared at all (else the test checks nothing).
for flag in ("kv_budget_mb", "max_batch", "local_prefill_limit", "log_requests", "local_prefill_max_tokens",
             "max_new_tokens_cap", "max_queue", "executors", "prefill_batch_tokens", "model", "kv_dtype",
             "prefill_chunk"):
    if flag not in shared:
        failures.append(f"--{flag} is not shared between pdserve-local and a standalone binary")
for f in failures:
    print("FAIL: " + f, file=sys.stderr)
print(f"{'PASS' if not failures else 'FAIL'}: {len(shared)} shared flags, {len(failures)} problems")
sys.exit(1 if failures else 0)
PY

fail() { echo "FAIL: $*" >&2; exit 1; }
for pair in decode_service/pdserve-decode:--max-batch=0 decode_service/pdserve-decode:--local-prefill-limit=-1 \
            router/pdserve-router:--max-attempts=0 router/pdserve-router:--max-inflight=0 \
            prefill_service/pdserve-prefill:--executors=0 prefill_service/pdserve-prefill:--handoff-heartbeat-ms=0 \
            prefill_service/pdserve-prefill:--prefill-batch-tokens=-2; do
  b=${pair%%:*} flag=${pair#*:}
  rc=0; standalone=$("$BUILD/$b" "$flag" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "$b $flag exited $rc: $standalone"
  grep -qF -- "error: $flag: " <<<"$standalone" || fail "$b $flag: the error does not name $flag: $standalone"
  rc=0; local_err=$("$BUILD/local/pdserve-local" "$flag" 2>&1 >/dev/null) || rc=$?
  [ "$rc" = 2 ] || fail "pdserve-local $flag exited $rc: $local_err"
  [ "${standalone#*error: }" = "${local_err#*error: }" ] ||
    fail "$flag: ${b##*/} says '$standalone', pdserve-local '$local_err'"
  echo "ok: $flag rejected alike by ${b##*/} and pdserve-local"
done
echo PASS
