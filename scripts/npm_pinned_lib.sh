# Sourced by the fetch_* scripts: installs the npm packages that a
# package.json + package-lock.json pair pins, into a git-ignored folder, so
# that the tests using them run offline afterwards.
#
#   npm_pinned_install NAME SRC DEST REQUIRED MARKER
#     NAME      the calling script, for its messages
#     SRC       the folder with package.json and package-lock.json
#     DEST      where node_modules goes
#     REQUIRED  1: exit 1 without node/npm; 0: say so and exit 0 (tests skip)
#     MARKER    a path under DEST that must exist for the install to count
# Returns 0 after installing, exits 0 when DEST is already up to date (the
# caller's own check of the install is then skipped).
npm_pinned_install() {
  local name=$1 src=$2 dest=$3 required=$4 marker=$5
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "$name: node/npm not found; the tests that need $dest will skip" >&2
    exit $((required))
  fi
  if [ -f "$dest/package-lock.json" ] && [ -e "$dest/$marker" ] &&
     cmp -s "$src/package-lock.json" "$dest/package-lock.json" &&
     cmp -s "$src/package.json" "$dest/package.json"; then
    echo "$name: $dest is up to date" >&2
    exit 0
  fi
  mkdir -p "$dest"
  cp "$src/package.json" "$src/package-lock.json" "$dest/"
  echo "$name: installing into $dest" >&2
  # --ignore-scripts: no package may run code at install time.
  (cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
}
