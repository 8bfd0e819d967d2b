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

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "fetch_k8s_schemas: node/npm not found; the k8s schema tests will skip" >&2
  exit $((required))
fi

if [ -f "$DEST/package-lock.json" ] && [ -d "$DEST/node_modules" ] &&
   cmp -s "$SRC/package-lock.json" "$DEST/package-lock.json" &&
   cmp -s "$SRC/package.json" "$DEST/package.json"; then
  echo "fetch_k8s_schemas: $DEST is up to date" >&2
  exit 0
fi

mkdir -p "$DEST"
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
echo "fetch_k8s_schemas: installing into $DEST" >&2
# --ignore-scripts: no package may run code at install time.
(cd "$DEST" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
# Prove the install works as the tests use it.
node -e '
  const p = process.argv[1] + "/node_modules/";
  import(p + "kubernetes-models/apps/v1/index.js").then((m) => {
    if (!m.Deployment) throw new Error("kubernetes-models: no Deployment");
    return import(p + "@kubernetes/client-node/dist/gen/models/V1Deployment.js");
  }).then(() => console.error("fetch_k8s_schemas: ok"));
' "$(cd "$DEST" && pwd)"
