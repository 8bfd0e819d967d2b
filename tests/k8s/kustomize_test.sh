#!/usr/bin/env bash
# (a) Every kustomization under k8s/ renders with `kubectl kustomize`: each
# overlay, each component on the cpu overlay, all components on each
# overlay, each job, and each job with the overlay it is made for; and each
# serving rendering has the objects that docs/deploy.md promises (the
# passkey Job for the tls overlay: the CA and the key).
# Usage: kustomize_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
k8s_init "$@"
need_kubectl
echo "kubectl: $(kubectl version --client 2>/dev/null | head -2 | tr '\n' ' ')"

render_all
n=0
while IFS='=' read -r name file; do
  n=$((n + 1))
  echo "ok: $name renders $(objects "$file" | wc -l) objects"
done < <(cat "$WORK/render/cpu.list" "$WORK/render/gpu.list")
[ "$n" -ge 5 ] || fail "only $n renderings"

has() {  # has NAME FILE "Kind name"
  objects "$2" | grep -x "$3" >/dev/null || fail "$1: no $3"
}
headless() {  # headless NAME FILE SERVICE
  is_headless "$2" "$3" || fail "$1: Service $3 is not headless (clusterIP: None)"
}
# autoscaled NAME FILE: the workers are scaled by exactly one kind of
# autoscaler: KEDA's ScaledObjects (with the PodMonitor their Prometheus
# reads), or the base's CPU HPAs.
autoscaled() {
  local o
  if objects "$2" | grep -q "^ScaledObject "; then
    for o in "ScaledObject pdserve-prefill" "ScaledObject pdserve-decode" "PodMonitor pdserve"; do has "$1" "$2" "$o"; done
    objects "$2" | grep -q "^HorizontalPodAutoscaler " && fail "$1: both KEDA ScaledObjects and CPU HPAs"
    echo "ok: $1 is autoscaled by KEDA"
  else
    for o in "HorizontalPodAutoscaler pdserve-prefill" "HorizontalPodAutoscaler pdserve-decode"; do has "$1" "$2" "$o"; done
  fi
}
for overlay in "$WORK"/render/overlay-*.yaml; do
  name=$(basename "$overlay" .yaml)
  for obj in "Deployment pdserve-router" "Service pdserve-router" "PodDisruptionBudget pdserve-router" \
             "Deployment pdserve-prefill" "Service pdserve-prefill" \
             "PodDisruptionBudget pdserve-prefill" "NetworkPolicy pdserve-prefill" \
             "Deployment pdserve-decode" "Service pdserve-decode" \
             "PodDisruptionBudget pdserve-decode" "NetworkPolicy pdserve-decode" \
             "PersistentVolumeClaim pdserve-model" "Namespace pdserve"; do
    has "$name" "$overlay" "$obj"
  done
  autoscaled "$name" "$overlay"
  objects "$overlay" | grep "^ConfigMap pdserve-config-" >/dev/null || fail "$name: no pdserve-config ConfigMap"
  headless "$name" "$overlay" pdserve-decode
  headless "$name" "$overlay" pdserve-prefill
  echo "ok: $name has every object, decode and prefill Services headless"
done
grep -q "nvidia.com/gpu" "$WORK/render/overlay-gpu.yaml" || fail "overlay-gpu requests no nvidia.com/gpu"
grep -q "nvidia.com/gpu" "$WORK/render/overlay-cpu.yaml" && fail "overlay-cpu requests nvidia.com/gpu"
# The tls overlay: the Secret on every pod, the key from its own Secret;
# the others stay plaintext.
[ "$(grep -c "secretName: pdserve-tls" "$WORK/render/overlay-tls.yaml")" = 3 ] ||
  fail "overlay-tls does not mount the Secret pdserve-tls in its 3 Deployments"
grep -q "name: pdserve-api-key" "$WORK/render/overlay-tls.yaml" || fail "overlay-tls: no API key from pdserve-api-key"
for o in cpu gpu; do
  grep -q "PDSERVE_TLS_" "$WORK/render/overlay-$o.yaml" && fail "overlay-$o sets TLS"
done
has job-passkey "$WORK/render/job-passkey.yaml" "Job pdserve-passkey"
has job-passkey "$WORK/render/job-passkey.yaml" "PersistentVolumeClaim pdserve-passkey-results"
# The passkey Job for the tls overlay: the CA (only ca.crt of pdserve-tls)
# and the key from pdserve-api-key; the plain one has neither.
j=$WORK/render/job-passkey-tls.yaml
has job-passkey-tls "$j" "Job pdserve-passkey"
for want in "- name: PDSERVE_TLS_CA" "value: /etc/pdserve/tls/ca.crt" "secretName: pdserve-tls" "- key: ca.crt" \
            "- name: PDSERVE_API_KEY" "name: pdserve-api-key"; do
  grep -q -- "$want" "$j" || fail "job-passkey-tls: no '$want'"
done
grep -q -- "key: tls.key" "$j" && fail "job-passkey-tls mounts the private key (it needs ca.crt only)"
grep -Eq "PDSERVE_TLS_|PDSERVE_API_KEY|pdserve-tls" "$WORK/render/job-passkey.yaml" && fail "job-passkey sets TLS"
for pair in tls+job-passkey-tls cpu+job-passkey; do
  [ -s "$WORK/render/$pair.yaml" ] || fail "no rendering $pair (a job with its overlay)"
done
has cpu+router-loadbalancer "$WORK/render/cpu+router-loadbalancer.yaml" "Service pdserve-router-public"
# The CPU HPAs stay the default (cpu, gpu); KEDA replaces them in its overlay.
for name in overlay-cpu overlay-gpu; do
  objects "$WORK/render/$name.yaml" | grep -q "^ScaledObject " && fail "$name: has KEDA ScaledObjects"
done
[ -f "$WORK/render/overlay-keda.yaml" ] || fail "no k8s/overlays/keda"
objects "$WORK/render/overlay-keda.yaml" | grep -q "^ScaledObject " || fail "overlay-keda: no ScaledObjects"
autoscaled cpu+keda "$WORK/render/cpu+keda.yaml"
# The router serves the HTTP API on 8000 next to gRPC.
grep -B1 -- "  name: http$" "$WORK/render/overlay-cpu.yaml" | grep -q -- "- containerPort: 8000" ||
  fail "overlay-cpu: the router has no container port http: 8000"
echo "PASS: $n renderings"
