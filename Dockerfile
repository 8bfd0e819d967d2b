# syntax=docker/dockerfile:1
#
# pdserve, CPU image: every pdserve-* binary on Debian 12, no model inside.
#
#   docker build -t pdserve:cpu .              # or: podman build / buildah bud
#   docker run --rm pdserve:cpu pdserve-router --help
#
# Models are mounted (a PersistentVolumeClaim or an image volume on
# Kubernetes, `-v DIR:/models/model:ro` with docker), never baked in. The GPU
# image is Dockerfile.gpu; docs/deploy.md has both.
#
# Build arguments:
#   DEBIAN_IMAGE  base of both stages (default debian:bookworm-slim)
#   JOBS          parallel compile jobs (default 2; LibTorch translation units
#                 take ~1.5 GiB of memory each)
#   PDSERVE_UID   the runtime user's uid and gid (default 10001)

ARG DEBIAN_IMAGE=debian:bookworm-slim

# ------------------------------------------------------------- build stages
# build-deps: the toolchain and libraries (a layer of its own, so that a
# source change rebuilds only the compile).
FROM ${DEBIAN_IMAGE} AS build-deps

# The Debian packages of scripts/setup.sh, less the Python ones (only the
# tests' outside clients use Python). tests/k8s/dockerfile_test.sh fails when
# setup.sh gains a -dev package or a compiler that is missing here.
# hadolint ignore=DL3008
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake ninja-build pkg-config git ca-certificates \
      libtorch-dev libdnnl-dev \
      libopenblas0-openmp \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libgtest-dev \
      nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libspdlog-dev \
 && rm -rf /var/lib/apt/lists/*

FROM build-deps AS build
ARG JOBS=2
WORKDIR /src
COPY . .
# Release, no test suites. Every executable named pdserve-* is installed, so
# a new tool needs no change here.
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDSERVE_BUILD_TESTS=OFF \
 && ninja -C /build -j"${JOBS}" \
 && mkdir -p /out/bin \
 && find /build -type f -name 'pdserve-*' -perm -u+x -not -path '*/CMakeFiles/*' \
      -exec install -m 0755 -s -t /out/bin {} + \
 && ls -l /out/bin

# ----------------------------------------------------------- runtime stages
# runtime-deps: the libraries and the user; runtime: plus the binaries.
FROM ${DEBIAN_IMAGE} AS runtime-deps
ARG PDSERVE_UID=10001

# Only the shared libraries the binaries load (ldd): LibTorch 1.13 (it pulls
# its own dependencies), gRPC, protobuf, abseil, PCRE2, OpenMP, and OpenBLAS
# (built for OpenMP), which becomes the system libblas.so.3: LibTorch's fp32
# matmuls are 20-40x slower on the reference BLAS.
# hadolint ignore=DL3008
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libopenblas0-openmp \
      libtorch1.13 \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
      libpcre2-8-0 libgomp1 libcpp-httplib0.11 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && groupadd --system --gid "${PDSERVE_UID}" pdserve \
 && useradd --system --uid "${PDSERVE_UID}" --gid pdserve --home-dir /home/pdserve --create-home \
      --shell /usr/sbin/nologin pdserve \
 && mkdir -p /models /results \
 && chown pdserve:pdserve /results

FROM runtime-deps AS runtime
ARG PDSERVE_UID=10001
COPY --from=build /out/bin/ /usr/local/bin/
COPY configs/ /usr/share/pdserve/configs/

# Numeric, so Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
USER ${PDSERVE_UID}:${PDSERVE_UID}
WORKDIR /home/pdserve
# No ENTRYPOINT: the Kubernetes manifests (k8s/) and `docker run IMAGE
# pdserve-decode ...` name the binary to run. Ports (the binaries'
# defaults): router gRPC 50051 and OpenAI HTTP 8000, decode 50052, prefill
# 50053; /metrics router 9400, prefill 9401, decode 9402.
EXPOSE 50051 50052 50053 8000 9400 9401 9402
CMD ["pdserve-router", "--help"]
