#!/usr/bin/env bash
# README command 1 (scripts/demo.sh) as a user runs it: it serves the
# shipped passkey model with separate processes and gets back, from a
# 2048-token prompt, the passkey it inserted.
# Usage: demo_e2e_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
e2e_init "$@"
E2E_LOGS=(demo.txt)
rc=0
# Without PDSERVE_PORT every server of the demo listens on a port the kernel
# picks (port 0), read back from its log: nothing to collide with.
env -u PDSERVE_PORT bash "$SRC/scripts/demo.sh" >"$WORK/demo.txt" 2>&1 || rc=$?
sed -n '/^--- a /,$p' "$WORK/demo.txt"
[ "$rc" = 0 ] || fail "demo.sh exited $rc"
inserted=$(sed -n 's/^passkey inserted: *\([0-9]\{5\}\)$/\1/p' "$WORK/demo.txt")
answered=$(sed -n 's/^model answered: .*->  \([0-9]\{5\}\)  (correct;.*/\1/p' "$WORK/demo.txt")
[ -n "$inserted" ] || fail "no 'passkey inserted' line"
[ "$inserted" = "$answered" ] || fail "inserted $inserted, answered '$answered'"
ok "the demo's passkey came back: $inserted"
grep -q "^--- a 20[0-9][0-9]-token prompt" "$WORK/demo.txt" || fail "the prompt is not ~2048 tokens"
grep -q "^request .*: OK, prompt 20[0-9][0-9], generated 16, .* kv [1-9][0-9]* B" "$WORK/demo.txt" ||
  fail "no access-log line with a KV hand-off"
grep -q "$inserted" <(sed -n '/streamed by pdserve-cli/,/access log/p' "$WORK/demo.txt") ||
  fail "pdserve-cli did not stream the passkey"
ok "pdserve-cli streamed it; the router logged the KV hand-off"
echo "PASS"
