#!/usr/bin/env bash
# Builds pdserve and runs every test (CTest labels: unit, e2e; gpu tests are
# left out on machines without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -LE gpu
