#!/usr/bin/env bash
# Configures and builds pdserve (Release, Ninja, -j2) into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build -j"${PDSERVE_JOBS:-2}"
