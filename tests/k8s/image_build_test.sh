#!/usr/bin/env bash
# Builds the CPU image (./Dockerfile) with buildah, Debian's daemonless
# image builder (no Docker engine runs here), and checks what came out:
#   - it runs as the non-root user 10001 and cannot write outside /results,
#     /tmp and its home;
#   - every pdserve binary is there and finds every shared library;
#   - LibTorch loads OpenBLAS (OpenMP) as its BLAS;
#   - there is no model inside;
#   - the whole stack serves a request inside it (pdserve-local + pdserve-cli
#     on a tiny random model made in the container's /tmp).
#
# The base image (debian:bookworm-slim) comes from the local buildah
# storage, else from its registry, else is made with debootstrap from the
# Debian mirror apt uses (this machine reaches Debian's packages but not
# Docker Hub) and cached in .cache/images/. The storage (with its layer
# cache: the apt stages stay tagged as localhost/pdserve-cache:*, so a
# rebuild after a source change skips them; the rest is pruned) is
# .cache/buildah/ and is kept only with PDSERVE_IMAGE_CACHE=keep: by default
# the test deletes it when done (several GB: CI's disk must then hold the
# sanitized trees).
#
# Skips without buildah (Debian: buildah; debootstrap for the base image),
# when not root, or when PDSERVE_SKIP_IMAGE_TEST=1. A cold build takes about
# 15 minutes on 2 cores (the apt layers about 5, the compile about 8).
# Usage: image_build_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
k8s_init "$@"
# scripts/test.sh runs this beside the other tests (ctest -j2): at nice 15 the
# build takes the cycles they leave idle and never slows them much.
renice -n 15 -p $$ >/dev/null 2>&1 || true
[ "${PDSERVE_SKIP_IMAGE_TEST:-0}" = 1 ] && skip "PDSERVE_SKIP_IMAGE_TEST=1"
command -v buildah >/dev/null || skip "buildah not found (Debian package buildah; scripts/setup.sh can install it)"
[ "$(id -u)" -eq 0 ] || skip "buildah runs here as root (chroot isolation); run the test as root"

CACHE=$SRC/.cache
IMAGE=localhost/pdserve:image-test-$$
RUNROOT=$WORK/run
mkdir -p "$CACHE/buildah" "$CACHE/images"
# One build at a time per storage (two ctest runs of the same tree would
# otherwise share and clean up each other's images).
if command -v flock >/dev/null; then
  exec 9>"$CACHE/buildah/.lock"
  flock -w 3600 9 || fail "another image build holds $CACHE/buildah/.lock"
fi

# overlay when the kernel (or gVisor) mounts it, else vfs (slow, but works
# anywhere). Each driver has its own storage directory.
DRIVER=
for d in overlay vfs; do
  if buildah --root "$CACHE/buildah/$d" --runroot "$RUNROOT" --storage-driver "$d" from --name probe-$$ scratch \
       >/dev/null 2>"$WORK/probe.err" &&
     buildah --root "$CACHE/buildah/$d" --runroot "$RUNROOT" --storage-driver "$d" mount probe-$$ >/dev/null 2>>"$WORK/probe.err"; then
    buildah --root "$CACHE/buildah/$d" --runroot "$RUNROOT" --storage-driver "$d" rm probe-$$ >/dev/null 2>&1 || true
    DRIVER=$d
    break
  fi
  buildah --root "$CACHE/buildah/$d" --runroot "$RUNROOT" --storage-driver "$d" rm probe-$$ >/dev/null 2>&1 || true
done
[ -n "$DRIVER" ] || skip "buildah cannot use its storage here: $(tail -1 "$WORK/probe.err")"
bah() { buildah --root "$CACHE/buildah/$DRIVER" --runroot "$RUNROOT" --storage-driver "$DRIVER" "$@"; }
echo "buildah $(buildah --version | awk '{print $3}'), storage driver $DRIVER"

CTR=
cleanup_image() {
  local rc=$?
  [ -n "$CTR" ] && bah rm "$CTR" >/dev/null 2>&1 || true
  bah rmi "$IMAGE" >/dev/null 2>&1 || true
  bah rmi --prune >/dev/null 2>&1 || true
  if [ "${PDSERVE_IMAGE_CACHE:-drop}" != keep ]; then
    bah rmi --all --force >/dev/null 2>&1 || true
    echo "storage: $(du -sm "$CACHE/buildah/$DRIVER" 2>/dev/null | cut -f1) MiB, deleted (PDSERVE_IMAGE_CACHE=keep keeps it)"
    rm -rf "${CACHE:?}/buildah/$DRIVER"
  fi
  [ -n "${WORK:-}" ] && rm -rf "$WORK"
  exit $rc
}
trap cleanup_image EXIT

# The base image.
BASE=docker.io/library/debian:bookworm-slim
if bah inspect --type image "$BASE" >/dev/null 2>&1; then
  echo "base image: $BASE (local storage)"
elif timeout 120 bah pull -q "$BASE" >/dev/null 2>&1; then
  echo "base image: $BASE (pulled)"
else
  ROOTFS_TAR=$CACHE/images/debian-bookworm-minbase.tar
  if [ ! -s "$ROOTFS_TAR" ]; then
    command -v debootstrap >/dev/null ||
      skip "no $BASE: its registry is unreachable and debootstrap (Debian package) is not installed"
    mirror=$(grep -rhoE '^(deb|URIs:)\s*(\[[^]]*\]\s*)?https?://[^ ]+/debian/?' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
             grep -oE 'https?://[^ ]+' | grep -v security | head -1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    echo "base image: debootstrap bookworm (minbase) from $mirror"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
      fail "debootstrap failed: $(tail -3 "$WORK/debootstrap.log")"
    rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
    tar -C "$WORK/rootfs" -cf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf "$WORK/rootfs"
  fi
  mkdir -p "$WORK/base"
  ln "$ROOTFS_TAR" "$WORK/base/rootfs.tar" 2>/dev/null || cp "$ROOTFS_TAR" "$WORK/base/rootfs.tar"
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$WORK/base/Containerfile"
  bah bud --quiet --isolation chroot --format docker -f "$WORK/base/Containerfile" -t "$BASE" "$WORK/base" >/dev/null ||
    fail "could not make $BASE from the debootstrap rootfs"
  echo "base image: $BASE (made from $ROOTFS_TAR)"
fi

# The image.
start=$(date +%s)
if ! bah bud --isolation chroot --format docker --layers --pull=never \
       --build-arg "JOBS=$(nproc)" -f "$SRC/Dockerfile" -t "$IMAGE" "$SRC" >"$WORK/build.log" 2>&1; then
  tail -40 "$WORK/build.log" >&2
  fail "buildah bud failed"
fi
echo "ok: built $IMAGE in $(($(date +%s) - start)) s ($(bah images --format '{{.Size}}' "$IMAGE" | head -1))"
# Keep the dependency stages (apt layers) under a name, so that the dangling
# compile layers can be pruned at the end while the next build still finds
# its apt layers in the cache (the storage stays at about one build).
for target in build-deps runtime-deps; do
  bah bud --isolation chroot --format docker --layers --pull=never --target "$target" \
    -t "localhost/pdserve-cache:$target" -f "$SRC/Dockerfile" "$SRC" >"$WORK/tag.log" 2>&1 ||
    fail "tagging the $target stage: $(tail -3 "$WORK/tag.log")"
done

user=$(bah inspect --type image --format '{{.Docker.Config.User}}' "$IMAGE")
case ${user%%:*} in "" | 0 | root) fail "the image runs as '$user'" ;; esac
echo "ok: the image's user is $user"

CTR=$(bah from --pull=false "$IMAGE")
bah run --isolation chroot "$CTR" -- sh -c '
  set -e
  test "$(id -u)" != 0 || { echo "running as root"; exit 1; }
  if touch /usr/local/bin/x 2>/dev/null; then echo "/usr/local/bin is writable"; exit 1; fi
  touch /results/x /tmp/x && rm /results/x /tmp/x
  for b in pdserve-router pdserve-prefill pdserve-decode pdserve-local pdserve-cli pdserve-init-model; do
    command -v $b >/dev/null || { echo "missing $b"; exit 1; }
  done
  for b in /usr/local/bin/pdserve-*; do
    if ldd "$b" | grep "not found"; then echo "$b misses libraries"; exit 1; fi
    "$b" --help >/dev/null 2>&1 || { echo "$b --help failed"; exit 1; }
  done
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
  case $blas in *openblas*openmp*) ;; *) echo "libblas.so.3 is $blas, not OpenBLAS (OpenMP)"; exit 1 ;; esac
  models=$(find / -xdev \( -name "*.safetensors" -o -name "model.safetensors" \) 2>/dev/null | head -1)
  test -z "$models" || { echo "a model in the image: $models"; exit 1; }
  echo "in the image: user $(id -un), $(ls /usr/local/bin/pdserve-* | wc -l) binaries, BLAS $blas"
  export OMP_WAIT_POLICY=PASSIVE
  pdserve-init-model --config /usr/share/pdserve/configs/tiny.json --seed 1 --out /tmp/m >/dev/null 2>&1
  # The host network: every port is one the kernel picks (port 0), the
  # router port read back from its "router on 127.0.0.1:N" line.
  pdserve-local --model /tmp/m --port 0 --http-listen 127.0.0.1:0 --metrics-port 0 >/tmp/local.log 2>&1 &
  pid=$!
  i=0
  until grep -q "router on 127.0.0.1:[0-9]" /tmp/local.log; do
    i=$((i + 1)); [ $i -lt 300 ] || { cat /tmp/local.log; exit 1; }; sleep 0.1
  done
  port=$(sed -n "s/.*router on 127[.]0[.]0[.]1:\([0-9]*\).*/\1/p" /tmp/local.log | head -1)
  test -n "$port" || { cat /tmp/local.log; exit 1; }
  out=$(pdserve-cli --router 127.0.0.1:$port --prompt-ids 1,2,3 --max-new-tokens 4 --json)
  kill -TERM $pid; wait $pid
  echo "$out" | grep -q "\"generated_tokens\":4" || { echo "unexpected answer: $out"; exit 1; }
  echo "in the image: pdserve-local answered: $out"
' || fail "the image does not work (above)"
echo "PASS: the CPU image builds here and serves"
