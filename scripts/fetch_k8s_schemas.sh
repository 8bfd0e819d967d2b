#!/usr/bin/env bash
# Installs the npm packages of the Kubernetes manifest tests (tests/k8s/):
# kubernetes-models (the OpenAPI schemas, compiled validators),
# @kubernetes-models/keda and /prometheus-operator (the same for the
# ScaledObject and PodMonitor custom resources of k8s/components/keda),
# @kubernetes/client-node (its model classes list every field, for the
# unknown-field check), js-yaml, and dockerfile-utils (the Dockerfile lint).
# Versions are pinned by tests/k8s/package-lock.json; they go to
# .cache/k8s-tools (git-ignored), or $PDSERVE_K8S_TOOLS. Once there, the
# tests run offline.
#
# Idempotent: does nothing while the installed lock file matches. Needs node
# and npm (on the machine; Debian's `nodejs npm` work too). Without them it
# says so and exits 0 unless --required is given: the tests then skip.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=tests/k8s
DEST=${PDSERVE_K8S_TOOLS:-.cache/k8s-tools}
required=0
[ "${1:-}" = "--required" ] && required=1

source scripts/npm_pinned_lib.sh
npm_pinned_install fetch_k8s_schemas "$SRC" "$DEST" "$required" node_modules
# Prove the install works as the tests use it.
node -e '
  const p = process.argv[1] + "/node_modules/";
  import(p + "kubernetes-models/apps/v1/index.js").then((m) => {
    if (!m.Deployment) throw new Error("kubernetes-models: no Deployment");
    return import(p + "@kubernetes/client-node/dist/gen/models/V1Deployment.js");
  }).then(() => console.error("fetch_k8s_schemas: ok"));
' "$(cd "$DEST" && pwd)"
