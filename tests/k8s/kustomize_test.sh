#!/usr/bin/env bash
# (a) Every kustomization under k8s/ renders with `kubectl kustomize`: each
# overlay, each component on the cpu overlay, all components on each
# overlay, and each job; and each serving rendering has the objects that
# docs/deploy.md promises.
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
for overlay in "$WORK"/render/overlay-*.yaml; do
  name=$(basename "$overlay" .yaml)
  for obj in "Deployment pdserve-router" "Service pdserve-router" "PodDisruptionBudget pdserve-router" \
             "Deployment pdserve-prefill" "Service pdserve-prefill" "HorizontalPodAutoscaler pdserve-prefill" \
             "PodDisruptionBudget pdserve-prefill" "NetworkPolicy pdserve-prefill" \
             "Deployment pdserve-decode" "Service pdserve-decode" "HorizontalPodAutoscaler pdserve-decode" \
             "PodDisruptionBudget pdserve-decode" "NetworkPolicy pdserve-decode" \
             "PersistentVolumeClaim pdserve-model" "Namespace pdserve"; do
    has "$name" "$overlay" "$obj"
  done
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
has cpu+router-loadbalancer "$WORK/render/cpu+router-loadbalancer.yaml" "Service pdserve-router-public"
echo "PASS: $n renderings"
