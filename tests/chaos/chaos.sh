#!/usr/bin/env bash
# The chaos suite (tests/chaos/chaos.py): 1 router, 2 prefill and 2 decode
# workers under load, server faults and hand-off faults; see --help.
#   tests/chaos/chaos.sh [--build BUILD_DIR] [--config configs/tiny.json] [--n 5000] [...]
# BUILD_DIR defaults to ./build of the checkout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/chaos.py" "$@"
