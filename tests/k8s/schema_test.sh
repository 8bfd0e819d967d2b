#!/usr/bin/env bash
# (b) Every object of every rendering (tests/k8s/lib.sh: render_all) is
# valid against the Kubernetes OpenAPI schemas, has no unknown field, and
# follows pdserve's rules (tests/k8s/validate.mjs says which). Then the
# validator itself is shown to catch known mistakes, so a pass means
# something.
# Usage: schema_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
k8s_init "$@"
need_kubectl
need_node_tools

render_all
mapfile -t cpu <"$WORK/render/cpu.list"
mapfile -t gpu <"$WORK/render/gpu.list"
node "$SRC/tests/k8s/validate.mjs" "${cpu[@]}" || fail "the manifests do not validate"
node "$SRC/tests/k8s/validate.mjs" --expect-gpu "${gpu[@]}" || fail "the gpu manifests do not validate"

# Known mistakes, each of which must be caught.
base=$WORK/render/overlay-cpu.yaml
caught=0
mutant() {  # mutant WHAT SED-SCRIPT [RENDERING]
  local from=${3:-$base}
  sed "$2" "$from" >"$WORK/mutant.yaml"
  cmp -s "$from" "$WORK/mutant.yaml" && fail "mutation '$1' changed nothing (update this test)"
  caught_in "$1" "$WORK/mutant.yaml"
}
caught_in() {  # caught_in WHAT FILE
  if node "$SRC/tests/k8s/validate.mjs" "mutant=$2" >"$WORK/mutant.log" 2>&1; then
    fail "the validator missed: $1"
  fi
  echo "ok: caught $1: $(grep -m1 FAIL "$WORK/mutant.log")"
  caught=$((caught + 1))
}
mutant "a misspelled field" 's/readinessProbe:/readinesProbe:/'
mutant "a string where the schema wants an integer" 's/containerPort: 50052/containerPort: "50052"/'
mutant "a decode Service with a cluster IP" '0,/clusterIP: None/s//clusterIP: 10.96.0.10/'
mutant "an undefined \$(VAR)" 's/value: \$(POD_IP):50052/value: $(POD_ADDRESS):50052/'
mutant "a setting as \$(VAR) in a server's args" '0,/^        - pdserve-decode$/s//        - pdserve-decode\n        args: ["--threads=$(POD_NAME)"]/'
mutant "a grace period shorter than the drain" 's/terminationGracePeriodSeconds: 150/terminationGracePeriodSeconds: 30/'
mutant "a worker on loopback" 's/value: \$(POD_IP):50052/value: 127.0.0.1:50052/'
mutant "an HTTP readiness probe" '0,/readinessProbe:/{s/readinessProbe:/readinessProbe:\n          httpGet: {path: \/healthz, port: 8080}/}'
mutant "a router DNS name with no Service" 's/PDSERVE_DECODE_DNS: pdserve-decode:50052/PDSERVE_DECODE_DNS: pdserve-decoder:50052/'
mutant "a writable model mount" '0,/readOnly: true/s//readOnly: false/'
# KEDA (k8s/overlays/keda): the custom resources' schemas and rules.
base=$WORK/render/overlay-keda.yaml
mutant "a misspelled ScaledObject field" 's/minReplicaCount:/minReplicas:/'
mutant "a misspelled field deep in a ScaledObject" 's/horizontalPodAutoscalerConfig:/horizontalPodAutoscaler:/'
mutant "a string where a ScaledObject wants an integer" 's/maxReplicaCount: 8/maxReplicaCount: "8"/'
mutant "a query on a series no binary exports" 's/pdserve_decode_kv_usage_ratio/pdserve_decode_kv_utilization/'
mutant "a query on another namespace" '0,/namespace="pdserve"/s//namespace="default"/'
mutant "an object outside the namespace" '0,/^  namespace: pdserve$/{//d}'
mutant "a misspelled PodMonitor field" 's/podMetricsEndpoints:/podMetricEndpoints:/'
mutant "a PodMonitor on a port the pods do not have" 's/^    port: metrics$/    port: prometheus/'
{ cat "$WORK/render/overlay-cpu.yaml"; echo "---"; cat "$SRC/k8s/components/keda/scaledobjects.yaml"; } >"$WORK/both.yaml"
caught_in "ScaledObjects next to the CPU HPAs" "$WORK/both.yaml"
grep -q "two autoscalers fight" "$WORK/mutant.log" || fail "ScaledObjects next to the CPU HPAs: not for the right reason"
# The tls overlay's rules (docs/security.md).
tls=$WORK/render/overlay-tls.yaml
mutant "a gRPC probe on a TLS port" '0,/^          tcpSocket:$/s//          grpc:/
0,/^            port: grpc$/s//            port: 50052/' "$tls"
mutant "TLS without the CA" '0,/^  PDSERVE_TLS_CA: .*$/{//d}' "$tls"
mutant "the API key as a ConfigMap literal" '0,/^  PDSERVE_TLS_CA: /s//  PDSERVE_API_KEY: hunter2\n  PDSERVE_TLS_CA: /' "$tls"
mutant "a writable TLS mount" '/mountPath: \/etc\/pdserve\/tls$/{n;n;s/readOnly: true/readOnly: false/}' "$tls"
mutant "TLS on the workers only" '/^  PDSERVE_DECODE_DNS:/,/^kind:/{/PDSERVE_TLS_/d}' "$tls"
# The passkey Job against the tls overlay's router (k8s/jobs/passkey-tls):
# without the CA or the key, or with another Secret's key, it could not
# talk to the router; the plain Job with the tls overlay, or the TLS one
# with the plaintext cpu overlay, neither.
pk=$WORK/render/tls+job-passkey-tls.yaml
mutant "the passkey Job without --tls-ca against the tls overlay" '/- name: PDSERVE_TLS_CA$/,+1d' "$pk"
grep -q "client needs --tls-ca" "$WORK/mutant.log" || fail "passkey Job without --tls-ca: not for the right reason"
mutant "the passkey Job without the API key against the tls overlay" \
  '/^kind: Job$/,/^---$/{/- name: PDSERVE_API_KEY$/,+4d}' "$pk"
grep -q "client needs PDSERVE_API_KEY" "$WORK/mutant.log" || fail "passkey Job without the key: not for the right reason"
mutant "the passkey Job with another Secret's key" '/^kind: Job$/,/^---$/{s/name: pdserve-api-key$/name: pdserve-key/}' "$pk"
mutant "the passkey Job's CA on a writable mount" \
  '/^kind: Job$/,/^---$/{/mountPath: \/etc\/pdserve\/tls$/{n;n;s/readOnly: true/readOnly: false/}}' "$pk"
{ cat "$WORK/render/overlay-tls.yaml"; echo "---"; cat "$WORK/render/job-passkey.yaml"; } >"$WORK/mixed.yaml"
caught_in "the plain passkey Job with the tls overlay" "$WORK/mixed.yaml"
{ cat "$WORK/render/overlay-cpu.yaml"; echo "---"; cat "$WORK/render/job-passkey-tls.yaml"; } >"$WORK/mixed.yaml"
caught_in "the TLS passkey Job with the plaintext cpu overlay" "$WORK/mixed.yaml"
grep -q "router's port is plaintext" "$WORK/mutant.log" || fail "TLS Job, plaintext router: not for the right reason"
echo "PASS: ${#cpu[@]} + ${#gpu[@]} renderings valid, $caught known mistakes caught"
