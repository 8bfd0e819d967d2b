#!/usr/bin/env bash
# The Dockerfiles, without building them (tests/k8s/image_build_test.sh
# builds the CPU image where buildah can):
#   - lint: Docker syntax and hadolint's main rules (lint_dockerfile.mjs;
#     hadolint itself is neither in Debian nor on npm);
#   - the build stages install every -dev package and compiler that
#     scripts/setup.sh installs (the GPU one less libtorch-dev, which the
#     CUDA LibTorch replaces, and libdnnl-dev, which that LibTorch carries
#     built in: the GPU build leaves gemm_dnnl.cc's oneDNN path out), so the
#     image builds what CI builds;
#   - the CPU runtime stage installs the package of every shared library the
#     built binaries load (readelf + dpkg), OpenBLAS included;
#   - .dockerignore keeps build trees, caches, .git and models out.
# Usage: dockerfile_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
k8s_init "$@"
cd "$SRC"
DF=(Dockerfile Dockerfile.gpu)
for f in "${DF[@]}"; do [ -f "$f" ] || fail "$f is missing"; done

# 1. Lint.
if command -v node >/dev/null; then
  node tests/k8s/lint_dockerfile.mjs "${DF[@]}" || fail "lint"
  echo "ok: lint"
else
  echo "note: node not found: the lint is left out"
fi

# side build|runtime FILE: the text of the build stages or of the runtime
# stages (the final one and those named runtime*), comments dropped and
# continuation lines joined.
side() {
  awk -v want="$1" '
    /^[ \t]*#/ { next }
    /^FROM / { n++; name[n] = (match($0, / [Aa][Ss] [^ ]+/) ? substr($0, RSTART + 4, RLENGTH - 4) : "") }
    { text[n] = text[n] "\n" $0 }
    END {
      for (i = 1; i <= n; i++) {
        runtime = (i == n || name[i] ~ /^runtime/)
        if ((want == "runtime") == runtime) print text[i]
      }
    }
  ' "$2" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta'
}

# 2. setup.sh's build packages are in the build stages.
mapfile -t setup_pkgs < <(sed -n '/^PKGS=(/,/^)/p' scripts/setup.sh | sed -e 's/#.*//' -e 's/PKGS=(//' -e 's/)//' |
                          tr -s ' \t' '\n' | grep -v '^$')
[ ${#setup_pkgs[@]} -gt 5 ] || fail "could not read PKGS from scripts/setup.sh"
need=()
for p in "${setup_pkgs[@]}"; do
  case $p in
    libclang-rt-dev) ;;  # the fuzzers' runtime (tests/fuzz/): test-only, never built into an image
    *-dev | build-essential | cmake | ninja-build | pkg-config | protobuf-compiler | protobuf-compiler-grpc) need+=("$p") ;;
  esac
done
for f in "${DF[@]}"; do
  text=$(side build "$f")
  grep "cmake -S" >/dev/null <<<"$text" || fail "$f: no build stage runs cmake -S"
  for p in "${need[@]}"; do
    [ "$f" = Dockerfile.gpu ] && { [ "$p" = libtorch-dev ] || [ "$p" = libdnnl-dev ]; } && continue
    grep -qw -- "$p" <<<"$text" || fail "$f: the build stage does not install $p, which scripts/setup.sh does"
  done
  echo "ok: $f builds with setup.sh's ${#need[@]} build packages"
done
side runtime Dockerfile | grep -w libopenblas0-openmp >/dev/null ||
  fail "Dockerfile: the runtime stages must install libopenblas0-openmp (LibTorch's fp32 matmuls)"

# 3. The runtime stage has the package of every library the binaries load.
runtime=$(side runtime Dockerfile | grep -o 'apt-get install[^&]*' | tr -s ' ' '\n' | grep -v -- '^-' |
          grep -v -e '^apt-get$' -e '^install$' -e '^$' || true)
[ -n "$runtime" ] || fail "Dockerfile: no apt-get install in the runtime stages"
if command -v dpkg-query >/dev/null && command -v readelf >/dev/null && [ -x "$BUILD/router/pdserve-router" ]; then
  # Installed closure of the runtime packages (from this machine's dpkg
  # status; they are installed here, since the -dev packages depend on
  # them), plus what the Debian base image always has.
  # One dpkg-query for every installed package's dependencies, then the
  # closure of the runtime list (alternatives count as pulled in).
  declare -A have=([libc6]=1 [libgcc-s1]=1 [libstdc++6]=1)
  while read -r p; do have[$p]=1; done < <(
    dpkg-query -W -f='${Package}\t${Depends}, ${Pre-Depends}\n' 2>/dev/null |
      awk -F'\t' -v roots="$(tr '\n' ' ' <<<"$runtime")" '
        { deps[$1] = $2 }
        END {
          n = split(roots, q, " ")
          for (i = 1; i <= n; i++) seen[q[i]] = 1
          for (i = 1; i <= n; i++) {
            m = split(deps[q[i]], d, /[,|]/)
            for (j = 1; j <= m; j++) {
              x = d[j]; sub(/\(.*/, "", x); gsub(/ /, "", x); sub(/:any$/, "", x)
              if (x != "" && !(x in seen)) { seen[x] = 1; q[++n] = x }
            }
          }
          for (x in seen) print x
        }')
  # Which binary loads which library (NEEDED), then one dpkg -S for all.
  declare -A user_of=() nccl_libs=()
  for bin in router/pdserve-router prefill_service/pdserve-prefill decode_service/pdserve-decode \
             local/pdserve-local clients/pdserve-cli clients/pdserve-init-model clients/pdserve-passkey; do
    [ -x "$BUILD/$bin" ] || continue
    for lib in $(readelf -d "$BUILD/$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      # The NCCL hand-off's libraries (a build that found CUDA and NCCL):
      # the CPU image builds without them, the GPU one installs them
      # (CUDA_RUNTIME_PKGS in Dockerfile.gpu).
      case $lib in libcudart.so* | libnccl.so*) nccl_libs[$lib]=1; continue ;; esac
      user_of[$lib]=$bin
    done
  done
  declare -A pkg_of=()
  patterns=()
  for lib in "${!user_of[@]}"; do patterns+=("*/$lib"); done
  while IFS= read -r line; do
    pkg=${line%%:*}
    file=${line##* }
    case $pkg in lib32* | libx32* | libc6-i386 | diversion*) continue ;; esac
    lib=$(basename "$file")
    [ -n "${user_of[$lib]:-}" ] && [ -z "${pkg_of[$lib]:-}" ] && pkg_of[$lib]=$pkg
  done < <(dpkg -S "${patterns[@]}" 2>/dev/null || true)
  checked=0
  for lib in "${!user_of[@]}"; do
    pkg=${pkg_of[$lib]:-}
    [ -n "$pkg" ] || fail "${user_of[$lib]} loads $lib, which no installed package provides"
    [ -n "${have[$pkg]:-}" ] ||
      fail "${user_of[$lib]} loads $lib from $pkg, which the runtime stages of Dockerfile neither install nor pull in"
    checked=$((checked + 1))
  done
  echo "ok: the runtime stages provide all $checked libraries the binaries load"
  [ ${#nccl_libs[@]} -eq 0 ] ||
    echo "note: left out the NCCL hand-off's ${!nccl_libs[*]} (the CPU image builds without NCCL)"
else
  echo "note: no built binaries in $BUILD (or no dpkg/readelf): the runtime library check is left out"
fi

# 4. .dockerignore.
[ -f .dockerignore ] || fail ".dockerignore is missing"
for pat in 'build\*' '\.cache' '\.git' 'models'; do
  grep -q "^$pat" .dockerignore || fail ".dockerignore does not leave out ${pat//\\/}"
done
echo "ok: .dockerignore"

# 5. The GPU image: NCCL on, the CUDA LibTorch required, a non-root user.
grep -q -- "-DPDSERVE_WITH_NCCL=ON" Dockerfile.gpu || fail "Dockerfile.gpu does not pass -DPDSERVE_WITH_NCCL=ON"
grep -q "\.cache/gpu/libtorch" Dockerfile.gpu || fail "Dockerfile.gpu does not take the LibTorch from .cache/gpu/libtorch"
echo "PASS: Dockerfile and Dockerfile.gpu"
