# Shared by the serving benchmarks (scripts/bench_*.sh): background servers
# that stop with the script, and waiting for a server's log line.
#   bench_spawn CMD...        starts CMD in the background, stopped on exit
#   bench_stop                stops every server started so far
#   bench_await LOG PATTERN   waits up to 3 minutes for PATTERN in LOG
#   bench_port LOG            waits for a server's "serving on port N" in LOG and prints N
#                             (start servers on port 0: the kernel's pick cannot collide)
PIDS=()
bench_spawn() {
  "$@" &
  PIDS+=($!)
}
bench_stop() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap bench_stop EXIT
bench_await() {
  for _ in $(seq 1 900); do grep -q "$2" "$1" && return 0; sleep 0.2; done
  echo "timed out waiting for '$2' in $1:" >&2
  cat "$1" >&2
  exit 1
}
bench_port() {
  bench_await "$1" "serving on port [0-9]"
  sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$1" | head -1
}
