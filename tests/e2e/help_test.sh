#!/usr/bin/env bash
# Every pdserve-* binary of the build answers --help with exit 0 and some
# text, as the container image test demands of the installed ones (there
# it takes ~15 minutes to find out; here seconds).
#   help_test.sh BUILD_DIR
set -euo pipefail
BUILD=$1
n=0
for b in "$BUILD"/*/pdserve-*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  out=$(timeout 60 "$b" --help 2>&1) || { echo "FAIL: $b --help exited $?"; echo "$out" | tail -5; exit 1; }
  [ -n "$out" ] || { echo "FAIL: $b --help printed nothing"; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 10 ] || { echo "FAIL: only $n pdserve-* binaries under $BUILD"; exit 1; }
echo "PASS: $n binaries answer --help"
