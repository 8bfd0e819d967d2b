#!/usr/bin/env bash
# Installs the official OpenAI JavaScript client (the npm package `openai`),
# which tests/openai/openai_client_test.mjs drives the HTTP API with. The
# version is pinned by tests/openai/package-lock.json; it goes to
# .cache/openai-client (git-ignored), or $PDSERVE_OPENAI_CLIENT. Once there,
# the test runs offline.
#
# Idempotent: does nothing while the installed lock file matches. Needs node
# and npm. Without them it says so and exits 0 unless --required is given:
# the test then skips.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=tests/openai
DEST=${PDSERVE_OPENAI_CLIENT:-.cache/openai-client}
required=0
[ "${1:-}" = "--required" ] && required=1

source scripts/npm_pinned_lib.sh
npm_pinned_install fetch_openai_client "$SRC" "$DEST" "$required" node_modules/openai
# Prove the install works as the test uses it.
node -e '
  const p = process.argv[1] + "/node_modules/openai/";
  Promise.all([import(p + "index.mjs"), import(p + "version.mjs")]).then(([m, v]) => {
    if (typeof m.default !== "function" || typeof m.BadRequestError !== "function") {
      throw new Error("openai: no client class or BadRequestError");
    }
    console.error("fetch_openai_client: ok (openai " + v.VERSION + ")");
  });
' "$(cd "$DEST" && pwd)"
