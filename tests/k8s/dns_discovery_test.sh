#!/usr/bin/env bash
# (c) The router, given the DNS names of the manifests (--prefill-dns and
# --decode-dns from the ConfigMap, which name the headless Services), finds
# the workers behind them, and follows the records as pods come and go, as a
# headless Service's DNS does on a cluster.
#
# The "cluster": a hosts file maps the Service names to loopback addresses,
# one per "pod" (127.0.0.11 prefill, 127.0.0.21-23 decode), and each worker
# listens on its own address and the manifests' port, as a pod does with
# --listen=$(POD_IP):PORT. The test runs in its own mount and network
# namespaces (unshare), where a private hosts file is bind-mounted on
# /etc/hosts and the manifests' ports are free; the machine's /etc/hosts and
# network are not touched. Without namespaces it falls back to editing
# /etc/hosts (root only, restored on exit) with ports the kernel picks, or
# skips. The router listens on a port the kernel picks in every mode.
#
#   1. requests succeed; prefill is the prefill "pod", decode one of two;
#   2. decode pod A leaves the Service (its record goes), then drains on
#      SIGTERM: requests go to B only, and A exits 0;
#   3. decode pod C arrives, B leaves: requests go to C;
#   4. the prefill pod is replaced the same way.
# Usage: dns_discovery_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

# --- outside: pick the isolation, then run this script again inside it.
if [ "${PDSERVE_DNS_TEST_MODE:-}" = "" ]; then
  [ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2; exit 2; }
  if command -v unshare >/dev/null && command -v ip >/dev/null && unshare --mount --net true 2>/dev/null; then
    PDSERVE_DNS_TEST_MODE=netns exec unshare --mount --net bash "$0" "$@"
  elif command -v unshare >/dev/null && command -v ip >/dev/null &&
       unshare --user --map-root-user --mount --net true 2>/dev/null; then
    PDSERVE_DNS_TEST_MODE=netns exec unshare --user --map-root-user --mount --net bash "$0" "$@"
  elif command -v unshare >/dev/null && unshare --mount true 2>/dev/null; then
    PDSERVE_DNS_TEST_MODE=mountns exec unshare --mount bash "$0" "$@"
  elif [ -w /etc/hosts ]; then
    PDSERVE_DNS_TEST_MODE=etc-hosts exec bash "$0" "$@"
  else
    echo "SKIP: cannot fake DNS here: needs unshare (root or user namespaces) or a writable /etc/hosts"
    exit 77
  fi
fi

# --- inside.
export PDSERVE_DNS_TEST_MODE
source "$HERE/lib.sh"
k8s_init "$@"
MODE=$PDSERVE_DNS_TEST_MODE
B=$BUILD
for b in router/pdserve-router prefill_service/pdserve-prefill decode_service/pdserve-decode \
         clients/pdserve-cli clients/pdserve-init-model; do
  [ -x "$B/$b" ] || fail "$B/$b is not built"
done
command -v python3 >/dev/null || skip "python3 not found"

# The names and ports the manifests give the router: from the rendered cpu
# overlay when kubectl is there (overlay overrides included), else from the
# base's router settings file (router.env: PDSERVE_<FLAG> variables).
if command -v kubectl >/dev/null && kubectl kustomize "$SRC/k8s/overlays/cpu" >"$WORK/cpu.yaml" 2>/dev/null; then
  setting() { sed -n "s/^  $1: //p" "$WORK/cpu.yaml" | head -1; }
  from="the rendered cpu overlay"
else
  setting() { sed -n "s/^$1=//p" "$SRC/k8s/base/router.env" | head -1; }
  from="k8s/base/router.env"
fi
PREFILL_DNS=$(setting PDSERVE_PREFILL_DNS)
DECODE_DNS=$(setting PDSERVE_DECODE_DNS)
[ -n "$PREFILL_DNS" ] && [ -n "$DECODE_DNS" ] || fail "no PDSERVE_{PREFILL,DECODE}_DNS in $from"
case "$PREFILL_DNS$DECODE_DNS" in *,*) fail "one DNS target per kind expected, got $PREFILL_DNS / $DECODE_DNS" ;; esac
PREFILL_NAME=${PREFILL_DNS%:*}
DECODE_NAME=${DECODE_DNS%:*}
echo "mode: $MODE; names from $from: --prefill-dns $PREFILL_DNS --decode-dns $DECODE_DNS"
# They name the headless Services of the manifests.
for f in "$SRC"/k8s/base/*.yaml; do cat "$f"; echo "---"; done >"$WORK/base.yaml"
for svc in "$PREFILL_NAME" "$DECODE_NAME"; do
  is_headless "$WORK/base.yaml" "$svc" || fail "$svc is not a headless Service in k8s/base"
done

HOSTS=$WORK/hosts
case $MODE in
  netns)
    # A network of our own: the manifests' ports are free.
    ip link set lo up
    PREFILL_PORT=${PREFILL_DNS##*:}
    DECODE_PORT=${DECODE_DNS##*:}
    ;;
  mountns | etc-hosts)
    # Shared network: the first pod of each kind listens on port 0 (see
    # start_pod), and its kin on their own addresses take the port it got.
    # While one pod of a kind holds IP:PORT the kernel hands that port to no
    # one else, and at every step below a pod of each kind is up when the
    # next one starts.
    PREFILL_PORT=0 DECODE_PORT=0
    ;;
esac
case $MODE in
  netns | mountns)
    printf '127.0.0.1 localhost\n' >"$HOSTS"
    mount --bind "$HOSTS" /etc/hosts
    ;;
  etc-hosts)
    cp /etc/hosts "$WORK/hosts.orig"
    HOSTS=/etc/hosts
    ;;
esac

PIDS=()
cleanup() {
  local rc=$? p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  [ "$MODE" = etc-hosts ] && [ -f "$WORK/hosts.orig" ] && cat "$WORK/hosts.orig" >/etc/hosts
  if [ $rc -ne 0 ]; then
    for log in "$WORK"/*.log; do [ -f "$log" ] && { echo "--- $(basename "$log")"; tail -20 "$log"; } >&2; done
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

# set_records NAME=IP...: the DNS records, written in place (the bind mount
# follows the inode).
set_records() {
  {
    if [ "$MODE" = etc-hosts ]; then cat "$WORK/hosts.orig"; else echo "127.0.0.1 localhost"; fi
    local r
    for r in "$@"; do echo "${r#*=} ${r%%=*}"; done
  } >"$WORK/hosts.new"
  cat "$WORK/hosts.new" >"$HOSTS"
}

"$B/clients/pdserve-init-model" --config "$SRC/configs/tiny.json" --seed 1 --out "$WORK/model" >/dev/null 2>&1 ||
  fail "pdserve-init-model failed"
export OMP_WAIT_POLICY=PASSIVE

# Binaries that serve /metrics get a free port each (their defaults would
# collide: several "pods" share this network namespace).
declare -A EXTRA
for b in router/pdserve-router prefill_service/pdserve-prefill decode_service/pdserve-decode; do
  EXTRA[$b]=
  help=$("$B/$b" --helpfull 2>&1 || true)
  if grep -q -- "--metrics_port" <<<"$help"; then EXTRA[$b]="--metrics-port=0"; fi
done
declare -A POD_PID
declare -a LONG
start_pod() {  # start_pod NAME KIND IP: with a port of 0, waits for it and sets the kind's port
  local name=$1 kind=$2 ip=$3
  if [ "$kind" = decode ]; then
    "$B/decode_service/pdserve-decode" --model "$WORK/model" --listen "$ip:$DECODE_PORT" --threads 1 \
      --kv-budget-mb 256 --drain-timeout-s 5 ${EXTRA[decode_service/pdserve-decode]} >"$WORK/$name.log" 2>&1 &
  else
    "$B/prefill_service/pdserve-prefill" --model "$WORK/model" --listen "$ip:$PREFILL_PORT" --threads 1 \
      --drain-timeout-s 5 ${EXTRA[prefill_service/pdserve-prefill]} >"$WORK/$name.log" 2>&1 &
  fi
  POD_PID[$name]=$!
  PIDS+=($!)
  if [ "$kind" = decode ] && [ "$DECODE_PORT" = 0 ]; then
    wait_serving "$name"
    DECODE_PORT=$(serving_port "$name")
  elif [ "$kind" = prefill ] && [ "$PREFILL_PORT" = 0 ]; then
    wait_serving "$name"
    PREFILL_PORT=$(serving_port "$name")
  fi
}
serving_port() { sed -n 's/.*serving on port \([0-9][0-9]*\).*/\1/p' "$WORK/$1.log" | head -1; }
wait_serving() {  # wait_serving NAME
  local i
  for i in $(seq 1 600); do
    grep -q "serving on port" "$WORK/$1.log" && return 0
    kill -0 "${POD_PID[$1]}" 2>/dev/null || fail "$1 exited: $(tail -3 "$WORK/$1.log")"
    sleep 0.1
  done
  fail "$1 is not serving after 60 s"
}
stop_pod() {  # stop_pod NAME: SIGTERM, as the kubelet after preStop; must drain and exit 0
  local pid=${POD_PID[$1]} i rc
  kill -TERM "$pid"
  for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "$1 still running 15 s after SIGTERM"
  wait "$pid" && rc=0 || rc=$?
  [ "$rc" -eq 0 ] || fail "$1 exited $rc after SIGTERM"
  echo "ok: $1 drained and exited 0 on SIGTERM"
}

# generate: one request through the router; prints "PREFILL DECODE" (the
# workers the router's Usage names) after checking the tokens came.
generate() {
  local out
  out=$("$B/clients/pdserve-cli" --router "127.0.0.1:$ROUTER_PORT" --prompt-ids 1,2,3 --max-new-tokens 4 \
        --json --deadline-ms 20000 2>"$WORK/cli.err") || { echo "ERROR $(tail -1 "$WORK/cli.err")"; return 0; }
  python3 -c '
import json, sys
j = json.loads(sys.argv[1])
u = j.get("usage") or {}
if len(j.get("token_ids", [])) != 4:
    print("ERROR got", j.get("token_ids"))
else:
    print(u.get("prefill_worker", "?"), u.get("decode_worker", "?"))
' "$out"
}
# expect_only PREFILL DECODE...: within 20 s requests start to land only on
# these workers, then 4 requests in a row do.
expect_only() {
  local want_prefill=$1 got ok i n=0
  shift
  for i in $(seq 1 100); do
    got=$(generate)
    ok=0
    for d in "$@"; do [ "$got" = "$want_prefill $d" ] && ok=1; done
    if [ $ok -eq 1 ]; then
      n=$((n + 1))
      [ $n -ge 4 ] && { echo "ok: 4 requests in a row on prefill $want_prefill, decode ${*}"; return 0; }
    else
      n=0
      sleep 0.2
    fi
  done
  fail "requests did not settle on prefill $want_prefill, decode $* (last: $got)"
}

set_records "$PREFILL_NAME=127.0.0.11" "$DECODE_NAME=127.0.0.21" "$DECODE_NAME=127.0.0.22"
start_pod prefill-1 prefill 127.0.0.11
start_pod decode-a decode 127.0.0.21
start_pod decode-b decode 127.0.0.22
for p in prefill-1 decode-a decode-b; do wait_serving $p; done
P=$PREFILL_PORT D=$DECODE_PORT

"$B/router/pdserve-router" --model "$WORK/model" --listen 127.0.0.1:0 --http-listen= \
  --prefill-dns "$PREFILL_NAME:$P" --decode-dns "$DECODE_NAME:$D" \
  --resolve-interval-s 1 --poll-interval-ms 200 --wait-for-workers-s 30 ${EXTRA[router/pdserve-router]} \
  >"$WORK/router.log" 2>&1 &
ROUTER=$!
PIDS+=("$ROUTER")
for _ in $(seq 1 600); do grep -q "serving on port" "$WORK/router.log" && break; sleep 0.1; done
grep -q "serving on port" "$WORK/router.log" || fail "the router is not serving"
ROUTER_PORT=$(serving_port router)
grep -q "warning" "$WORK/router.log" && fail "router: $(grep warning "$WORK/router.log")"
echo "ok: router up with --prefill-dns $PREFILL_NAME:$P --decode-dns $DECODE_NAME:$D"

# 1. Both decode records are workers; the KV went to a decode pod's own address.
expect_only "127.0.0.11:$P" "127.0.0.21:$D" "127.0.0.22:$D"
# Requests in flight together spread over both (the router places by load
# and its own in-flight count).
for i in 1 2 3 4; do
  "$B/clients/pdserve-cli" --router "127.0.0.1:$ROUTER_PORT" --prompt-ids 1,2,3 --max-new-tokens 1500 \
    --ignore-eos --json --deadline-ms 60000 >"$WORK/long-$i.json" 2>"$WORK/long-$i.err" &
  PIDS+=($!)
  LONG[$i]=$!
done
for i in 1 2 3 4; do wait "${LONG[$i]}" || fail "long request $i: $(tail -1 "$WORK/long-$i.err")"; done
seen=$(for i in 1 2 3 4; do
         python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["decode_worker"])' "$WORK/long-$i.json"
       done | sort -u | tr '\n' ' ')
[ "$seen" = "127.0.0.21:$D 127.0.0.22:$D " ] || fail "4 concurrent requests went to decode: $seen (want both)"
echo "ok: 4 concurrent requests spread over both decode pods: $seen"

# 2. Decode pod A leaves the Service, then drains.
set_records "$PREFILL_NAME=127.0.0.11" "$DECODE_NAME=127.0.0.22"
expect_only "127.0.0.11:$P" "127.0.0.22:$D"
stop_pod decode-a
expect_only "127.0.0.11:$P" "127.0.0.22:$D"

# 3. Scale-out and replacement: C arrives (ready first, then published), B leaves.
start_pod decode-c decode 127.0.0.23
wait_serving decode-c
set_records "$PREFILL_NAME=127.0.0.11" "$DECODE_NAME=127.0.0.22" "$DECODE_NAME=127.0.0.23"
set_records "$PREFILL_NAME=127.0.0.11" "$DECODE_NAME=127.0.0.23"
expect_only "127.0.0.11:$P" "127.0.0.23:$D"
stop_pod decode-b

# 4. The prefill pod is replaced.
start_pod prefill-2 prefill 127.0.0.12
wait_serving prefill-2
set_records "$PREFILL_NAME=127.0.0.12" "$DECODE_NAME=127.0.0.23"
expect_only "127.0.0.12:$P" "127.0.0.23:$D"
stop_pod prefill-1
expect_only "127.0.0.12:$P" "127.0.0.23:$D"

kill -TERM "$ROUTER"
for _ in $(seq 1 150); do kill -0 "$ROUTER" 2>/dev/null || break; sleep 0.1; done
wait "$ROUTER" && rc=0 || rc=$?
[ "$rc" -eq 0 ] || fail "router exited $rc after SIGTERM"
echo "PASS: the router found the workers through $PREFILL_NAME and $DECODE_NAME and followed their records"
