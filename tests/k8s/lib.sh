# shellcheck shell=bash
# Shared by the tests in tests/k8s/ (sourced). A test starts with
#   source "$(dirname "$0")/lib.sh"; k8s_init "$@"      # BUILD_DIR SOURCE_DIR
# and exits 77 (CTest's SKIP_RETURN_CODE in tests/k8s_tests.cmake) when a
# tool it needs is missing, saying which and how to get it.

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

k8s_init() {
  [ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2; exit 2; }
  BUILD=$(cd "$1" && pwd)
  SRC=$(cd "$2" && pwd)
  TOOLS=${PDSERVE_K8S_TOOLS:-$SRC/.cache/k8s-tools}
  export PDSERVE_K8S_TOOLS=$TOOLS
  WORK=$(mktemp -d "$BUILD/k8s-test.XXXXXX")
  trap 'k8s_cleanup' EXIT
}
k8s_cleanup() {
  local rc=$?
  [ -n "${WORK:-}" ] && rm -rf "$WORK"
  exit $rc
}

need_kubectl() {
  command -v kubectl >/dev/null ||
    skip "kubectl not found: the manifests are rendered with 'kubectl kustomize' (Debian: the kubectl package)"
  kubectl kustomize --help >/dev/null 2>&1 || skip "this kubectl has no kustomize subcommand"
}
need_node_tools() {
  command -v node >/dev/null || skip "node not found (the schema checks run on Node.js)"
  local pkg
  for pkg in kubernetes-models @kubernetes/client-node @kubernetes-models/keda @kubernetes-models/prometheus-operator; do
    [ -d "$TOOLS/node_modules/$pkg" ] ||
      skip "npm package $pkg missing in $TOOLS: run 'bash scripts/fetch_k8s_schemas.sh' (scripts/setup.sh runs it)"
  done
}

# render_all: renders every kustomization under k8s/ into $WORK/render and
# writes the lists $WORK/render/cpu.list and gpu.list (NAME=FILE lines):
#   overlay-NAME        each k8s/overlays/NAME
#   NAME+COMPONENT      each k8s/components/COMPONENT on the cpu overlay
#   NAME+components     every component together, on each overlay; the
#                       components that replace the CPU HPAs
#                       (SCALING_COMPONENTS) exclude each other, so with
#                       them it is NAME+components+SCALER, once per scaler,
#                       and none when the overlay has a scaler already;
#                       components the overlay uses already are left out
#   job-NAME            each k8s/jobs/NAME
#   OVERLAY+job-NAME    each job with the serving overlay it is made for
#                       (k8s/overlays/OVERLAY for a job NAME ending in
#                       -OVERLAY, passkey-tls: tls; cpu for the others), so
#                       the rules across objects see both (a client Job
#                       speaks its router's TLS and API key)
#   file-NAME           plain manifests beside the job kustomizations
# A rendering whose name has "gpu" in it goes to gpu.list.
# Components that take the replica counts from the base's CPU HPAs (each
# deletes them): at most one in a rendering.
SCALING_COMPONENTS="manual-scaling keda"
render_all() {
  local out=$WORK/render k8s=$SRC/k8s d name comp rel on o
  mkdir -p "$out"
  : >"$out/cpu.list"
  : >"$out/gpu.list"
  _render() {  # NAME DIR
    local list=cpu
    case $1 in *gpu*) list=gpu ;; esac
    kubectl kustomize "$2" >"$out/$1.yaml" 2>"$out/$1.err" ||
      fail "kubectl kustomize ${2#"$SRC"/} failed: $(cat "$out/$1.err")"
    [ -s "$out/$1.yaml" ] || fail "kubectl kustomize ${2#"$SRC"/} rendered nothing"
    echo "$1=$out/$1.yaml" >>"$out/$list.list"
  }
  # A kustomization in $WORK that combines an overlay with components
  # (kustomize takes relative paths only).
  _combine() {  # NAME OVERLAY COMPONENT...
    local name=$1 overlay=$2 dir=$out/k-$1 c
    shift 2
    mkdir -p "$dir"
    rel=$(realpath --relative-to="$dir" "$k8s")
    {
      echo "apiVersion: kustomize.config.k8s.io/v1beta1"
      echo "kind: Kustomization"
      echo "resources:"
      echo "  - $rel/overlays/$overlay"
      echo "components:"
      for c in "$@"; do echo "  - $rel/components/$c"; done
    } >"$dir/kustomization.yaml"
    _render "$name" "$dir"
  }
  # A job with its overlay, in one rendering.
  _with_job() {  # OVERLAY JOB
    local dir=$out/k-$1+job-$2
    mkdir -p "$dir"
    rel=$(realpath --relative-to="$dir" "$k8s")
    printf '%s\n' "apiVersion: kustomize.config.k8s.io/v1beta1" "kind: Kustomization" "resources:" \
      "  - $rel/overlays/$1" "  - $rel/jobs/$2" >"$dir/kustomization.yaml"
    _render "$1+job-$2" "$dir"
  }
  # Every component the overlay does not use yet, with each scaler in turn.
  _combine_all() {  # OVERLAY
    local used rest=() scalers=() c s
    used=" $(grep -o 'components/[A-Za-z0-9_-]*' "$k8s/overlays/$1/kustomization.yaml" | sed 's|components/||' | tr '\n' ' ' || true) "
    for c in "${components[@]}"; do
      [[ $used == *" $c "* ]] && continue
      if [[ " $SCALING_COMPONENTS " == *" $c "* ]]; then scalers+=("$c"); else rest+=("$c"); fi
    done
    for s in $SCALING_COMPONENTS; do [[ $used == *" $s "* ]] && scalers=(); done
    if [ ${#scalers[@]} -eq 0 ]; then
      [ ${#rest[@]} -eq 0 ] || _combine "$1+components" "$1" "${rest[@]}"
      return
    fi
    for s in "${scalers[@]}"; do _combine "$1+components+$s" "$1" "${rest[@]}" "$s"; done
  }
  local overlays=() components=()
  for d in "$k8s"/overlays/*/; do overlays+=("$(basename "$d")"); done
  for d in "$k8s"/components/*/; do [ -f "$d/kustomization.yaml" ] && components+=("$(basename "$d")"); done
  [ ${#overlays[@]} -gt 0 ] || fail "no overlays under k8s/overlays"
  for name in "${overlays[@]}"; do _render "overlay-$name" "$k8s/overlays/$name"; done
  for comp in "${components[@]}"; do _combine "cpu+$comp" cpu "$comp"; done
  for name in "${overlays[@]}"; do _combine_all "$name"; done
  for d in "$k8s"/jobs/*/; do
    [ -f "$d/kustomization.yaml" ] || continue
    name=$(basename "$d")
    _render "job-$name" "$d"
    on=cpu
    for o in "${overlays[@]}"; do if [[ $name == *-"$o" ]]; then on=$o; fi; done
    _with_job "$on" "$name"
    # Manifests in the job's folder that its kustomization does not list.
    for f in "$d"*.yaml; do
      case $(basename "$f") in kustomization.yaml) continue ;; esac
      grep -q "^\s*-\s*$(basename "$f")\s*$" "$d/kustomization.yaml" && continue
      cp "$f" "$out/file-$name-$(basename "$f")"
      echo "file-$name-$(basename "$f" .yaml)=$out/file-$name-$(basename "$f")" >>"$out/cpu.list"
    done
  done
}

# objects FILE: one "Kind name" line per object of a rendered stream.
objects() {
  awk '
    /^---/ { if (kind != "") print kind, name; kind = ""; name = ""; inmeta = 0; next }
    /^kind: / { kind = $2 }
    /^metadata:/ { inmeta = 1; next }
    /^[a-z]/ { inmeta = 0 }
    inmeta && /^  name: / && name == "" { name = $2 }
    END { if (kind != "") print kind, name }
  ' "$1"
}

# is_headless FILE SERVICE: FILE (a YAML stream) has Service SERVICE with
# clusterIP: None.
is_headless() {
  awk -v svc="$2" '
    function done() { if (kind == "Service" && name == svc) { found = 1; exit !(headless) } }
    /^---/ { done(); kind = ""; name = ""; headless = 0; inmeta = 0; next }
    /^kind: / { kind = $2 }
    /^metadata:/ { inmeta = 1; next }
    /^[a-z]/ { inmeta = 0 }
    inmeta && /^  name: / && name == "" { name = $2 }
    /^  clusterIP: None$/ { headless = 1 }
    END { if (!found) { done(); if (!found) exit 2 } }
  ' "$1"
}
