#!/usr/bin/env bash
# Builds the real Kubernetes components the end-to-end tests run against, and
# copies the CRDs they install:
#
#   kube-apiserver           k8s.io/kubernetes, through the wrapper module in ./apiserver
#   kube-controller-manager  k8s.io/kubernetes, the same wrapper module (./apiserver/cmd/kube-controller-manager)
#   kube-scheduler           k8s.io/kubernetes, the same wrapper module (./apiserver/cmd/kube-scheduler)
#   etcd                     go.etcd.io/etcd/server/v3, through the wrapper module in ./etcd
#   kueue                    sigs.k8s.io/kueue/cmd/kueue, through the wrapper module in ./controllers,
#                            plus its CRDs, webhook manifests and Helm chart from the same module
#   crds                     KubeRay's CRDs (github.com/ray-project/kuberay/ray-operator), the
#                            ProvisioningRequest CRD (k8s.io/autoscaler/cluster-autoscaler/apis) and the
#                            JobSet CRD (sigs.k8s.io/jobset; the CRD only: the JobSet controller is not built,
#                            the tests play it)
#   kwok                     the KWOK controller (fake nodes and pods), sigs.k8s.io/kwok/cmd/kwok,
#                            the same wrapper module (one module graph: see its go.mod), plus its
#                            Stage manifests
#   kuberay                  the KubeRay operator, github.com/ray-project/kuberay/ray-operator, with
#                            `go install module@version` (the same version as the KubeRay CRDs)
#
# Everything comes from Go modules through the Go module proxy (`go mod download`
# for the manifests); nothing else is downloaded. The results are cached outside
# the repository, one directory per component and version:
#
#   ${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}/<component>-<version>/
#
# so a second run builds nothing. At the end the script prints the paths and
# writes them to $CACHE/bin.env, which a harness can source:
#
#   KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, ETCD, KUEUE   the binaries
#   KUBE_SCHEDULER, KWOK, KUBERAY_OPERATOR                 the simulated GKE's binaries (gke_sim.py)
#   KWOK_STAGES_DIR    KWOK's node and pod Stage manifests (kustomize/stage, "fast" set)
#   KUEUE_CRD_DIR      Kueue's config/components/crd/bases/*.yaml (with
#                      webhook-manifests.yaml in the directory above it)
#   KUEUE_CHART        Kueue's Helm chart (charts/kueue), for a real-engine test
#   KUBERAY_CRD_DIR    KubeRay's ray.io_{rayjobs,rayclusters,rayservices}.yaml
#   PROVREQ_CRD_DIR    autoscaling.x-k8s.io_provisioningrequests.yaml
#   JOBSET_CRD_DIR     jobset.x-k8s.io_jobsets.yaml
#   *_VERSION          the version of each
#
# Usage: tests/e2e/build_components.sh [apiserver] [controller-manager] [scheduler] [etcd] [kueue] [crds]
#                                      [kwok] [kuberay]
#   (no argument: all eight; bin.env lists only what is built or cached)
#
# Versions: kube-apiserver, kube-controller-manager, kube-scheduler and etcd are
# pinned by the go.mod of their wrapper module (bump there and re-run `go mod
# tidy`), and so are Kueue and KWOK (./controllers/go.mod); KubeRay (CRDs and
# operator) by KUBERAY_VERSION below, overridable from the environment; the
# ProvisioningRequest API and the JobSet API are taken at the versions Kueue's own
# go.mod requires (PROVREQ_VERSION and JOBSET_VERSION override them). The Kueue and KWOK binaries are cached under
# their version plus a digest of ./controllers/go.sum, so a change of what they
# are built with rebuilds them.
#
# A cold build takes a long while on 2 cores (see NOTES.md) and fills the Go
# module and build caches with a few GiB.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}
# KubeRay: GKE does not publish the version its Ray add-on runs, so the newest
# ray-operator release the proxy serves (v1.7.0 and later give 403), which is
# also the version Kueue v0.19.2's go.mod requires.
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.6.2}
KUBERAY_MODULE=github.com/ray-project/kuberay/ray-operator
PROVREQ_MODULE=k8s.io/autoscaler/cluster-autoscaler/apis
PROVREQ_VERSION=${PROVREQ_VERSION:-}  # default: what Kueue's go.mod requires
# JobSet: `go list -m -versions` lists none, but the proxy serves the exact version Kueue requires (v0.12.0 for
# Kueue v0.19.2), which is the one whose JobSets Kueue's jobset integration is built against.
JOBSET_MODULE=sigs.k8s.io/jobset
JOBSET_VERSION=${JOBSET_VERSION:-}  # default: what Kueue's go.mod requires

BUILD_NAME=build_components
# shellcheck source-path=SCRIPTDIR source=go_build.sh
source "$HERE/go_build.sh"

BUILD_FLAGS=(-trimpath)

# --- versions from the wrapper modules -------------------------------------
KUBE_VERSION=$(mod_version "$HERE/apiserver/go.mod" k8s.io/kubernetes)
ETCD_VERSION=$(mod_version "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)
# KWOK v0.8.0 is the newest release the proxy serves.
KUEUE_VERSION=$(mod_version "$HERE/controllers/go.mod" sigs.k8s.io/kueue)
KWOK_VERSION=$(mod_version "$HERE/controllers/go.mod" sigs.k8s.io/kwok)
[[ -n "$KUBE_VERSION" ]] || die "cannot read the k8s.io/kubernetes version from apiserver/go.mod"
[[ -n "$ETCD_VERSION" ]] || die "cannot read the etcd version from etcd/go.mod"
[[ -n "$KUEUE_VERSION" && -n "$KWOK_VERSION" ]] || die "cannot read the Kueue and KWOK versions from controllers/go.mod"
# The cache key of the binaries built in ./controllers: their version and what they are built with.
CONTROLLERS_SUM=$(sha256sum "$HERE/controllers/go.sum" | cut -c1-12)

# kubernetes vX.Y.Z needs every k8s.io staging module replaced at v0.Y.Z.
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
if awk -v want="$STAGING_VERSION" '
     $2 == "=>" && $1 ~ /^k8s\.io\// && $4 != want { bad = 1; print "  " $0 }
     END { exit !bad }' "$HERE/apiserver/go.mod" >&2; then
  die "apiserver/go.mod: the replace lines above are not at $STAGING_VERSION (kubernetes $KUBE_VERSION)"
fi

# --- cache and lock ----------------------------------------------------------
take_lock "$CACHE/.lock"

# kube_ldflags VERSION: version stamping as Kubernetes' hack/lib/version.sh
# does, so /version reports the real version (clients such as Kueue parse it).
kube_ldflags() {
  local v=$1 minor pkg ldflags="-s -w"
  minor=${v#v1.}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  printf '%s' "$ldflags"
}

build_apiserver() { # TMPDIR VERSION
  (cd "$HERE/apiserver" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "$(kube_ldflags "$2")" -o "$1/kube-apiserver" .)
}

build_controller_manager() { # TMPDIR VERSION
  # Same module (same go.sum, same stamping) as kube-apiserver, so the second
  # of the two mostly reuses the first one's build cache.
  (cd "$HERE/apiserver" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "$(kube_ldflags "$2")" -o "$1/kube-controller-manager" ./cmd/kube-controller-manager)
}

build_scheduler() { # TMPDIR VERSION
  # Same module as kube-apiserver and kube-controller-manager.
  (cd "$HERE/apiserver" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "$(kube_ldflags "$2")" -o "$1/kube-scheduler" ./cmd/kube-scheduler)
}

build_kwok() { # TMPDIR VERSION
  # pkg/consts.Version is a constant (0.8.0 in v0.8.0), so there is nothing to stamp.
  (cd "$HERE/controllers" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly -ldflags "-s -w" \
      -o "$1/kwok" sigs.k8s.io/kwok/cmd/kwok)
}

build_kuberay() { # TMPDIR VERSION
  # ray-operator's go.mod (module github.com/ray-project/kuberay/ray-operator, main package at its root) has no
  # replace directives, so go install module@version works; the binary is named ray-operator.
  (cd "$1" && GOBIN="$1" "$GO" install "${BUILD_FLAGS[@]}" -ldflags "-s -w" "$KUBERAY_MODULE@$2")
}

build_etcd() { # TMPDIR VERSION
  (cd "$HERE/etcd" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "-s -w" -o "$1/etcd" .)
}

build_kueue() { # TMPDIR VERSION
  (cd "$HERE/controllers" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      -o "$1/kueue" sigs.k8s.io/kueue/cmd/kueue)
}

# module_dir MODULE VERSION: the module's source directory in the module cache
# (`go mod download` fetches it through the proxy if needed). Sets RESULT.
# Also sets RESULT_GOMOD to the module's go.mod file.
module_dir() {
  local json
  json=$(cd "$CACHE" && "$GO" mod download -json "$1@$2") \
    || die "go mod download $1@$2 failed: $(printf '%s' "$json" | sed -n 's/^[[:space:]]*"Error": //p')"
  RESULT=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  RESULT_GOMOD=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -n "$RESULT" && -d "$RESULT" ]] || die "cannot find $1@$2 in the module cache"
}

# copy_manifests DEST SRC-DIR FILE...: copies the files (each must exist) from
# SRC-DIR into DEST through a temporary directory moved into place whole.
copy_manifests() {
  local dest=$1 src=$2 tmp f
  shift 2
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp -d "$(dirname "$dest")/.copy.XXXXXX")
  for f in "$@"; do
    [[ -f "$src/$f" ]] || { rm -rf "$tmp"; die "$src/$f does not exist"; }
    cp "$src/$f" "$tmp/"
  done
  chmod 755 "$tmp" && chmod 644 "$tmp"/*
  rm -rf "$dest"
  mv "$tmp" "$dest"
}

# kueue_manifests VERSION: copies Kueue's CRDs (config/components/crd/bases),
# webhook configuration manifests and Helm chart (charts/kueue) from the module
# source next to the binary, once, so the harness can apply them. Sets RESULT
# to the CRD dir and KUEUE_CHART to the chart dir.
kueue_manifests() {
  local v=$1 dir="$CACHE/kueue-$1" src crd tmp
  crd="$dir/crd"
  KUEUE_CHART="$dir/chart"
  if [[ -d "$crd" && -f "$dir/webhook-manifests.yaml" && -f "$KUEUE_CHART/Chart.yaml" ]]; then
    log "reusing $crd and $KUEUE_CHART (cached)"
    RESULT=$crd
    return 0
  fi
  module_dir sigs.k8s.io/kueue "$v"; src=$RESULT
  [[ -d "$src/config/components/crd/bases" && -d "$src/charts/kueue" ]] \
    || die "Kueue $v source ($src) lacks config/components/crd/bases or charts/kueue"
  mkdir -p "$dir"
  (cd "$src/config/components/crd/bases" && copy_manifests "$crd" . *.yaml)
  cp "$src/config/components/webhook/manifests.yaml" "$dir/webhook-manifests.yaml"
  chmod 644 "$dir/webhook-manifests.yaml"
  tmp=$(mktemp -d "$dir/.chart.XXXXXX")
  cp -R "$src/charts/kueue/." "$tmp/"
  chmod -R u+w,go-w,a+rX "$tmp"
  rm -rf "$KUEUE_CHART"
  mv "$tmp" "$KUEUE_CHART"
  log "copied Kueue $v CRDs to $crd, webhooks to $dir/webhook-manifests.yaml, chart to $KUEUE_CHART"
  RESULT=$crd
}

# kuberay_crds VERSION: KubeRay's CRDs from ray-operator's config/crd/bases.
# Sets RESULT to the CRD dir.
kuberay_crds() {
  local v=$1 dest="$CACHE/kuberay-$1/crd" src f files=()
  RESULT=$dest
  if [[ -f "$dest/ray.io_rayjobs.yaml" ]]; then
    log "reusing $dest (cached)"
    return 0
  fi
  module_dir "$KUBERAY_MODULE" "$v"; src="$RESULT/config/crd/bases"
  for f in ray.io_rayjobs.yaml ray.io_rayclusters.yaml ray.io_rayservices.yaml; do
    [[ -f "$src/$f" || "$f" == ray.io_rayservices.yaml ]] || die "$KUBERAY_MODULE@$v has no config/crd/bases/$f"
    [[ ! -f "$src/$f" ]] || files+=("$f")
  done
  copy_manifests "$dest" "$src" "${files[@]}"
  RESULT=$dest
  log "copied KubeRay $v CRDs (${files[*]}) to $dest"
}

# provreq_crd VERSION: the ProvisioningRequest CRD from cluster-autoscaler's
# apis module (config/crd). Sets RESULT to the CRD dir.
provreq_crd() {
  local v=$1 dest="$CACHE/cluster-autoscaler-apis-$1/crd" f=autoscaling.x-k8s.io_provisioningrequests.yaml
  RESULT=$dest
  if [[ -f "$dest/$f" ]]; then
    log "reusing $dest (cached)"
    return 0
  fi
  module_dir "$PROVREQ_MODULE" "$v"
  copy_manifests "$dest" "$RESULT/config/crd" "$f"
  RESULT=$dest
  log "copied the ProvisioningRequest CRD of $PROVREQ_MODULE@$v to $dest"
}

# jobset_crd VERSION: the JobSet CRD from sigs.k8s.io/jobset's config/components/crd/bases. Sets RESULT to the
# CRD dir.
jobset_crd() {
  local v=$1 dest="$CACHE/jobset-$1/crd" f=jobset.x-k8s.io_jobsets.yaml
  RESULT=$dest
  if [[ -f "$dest/$f" ]]; then
    log "reusing $dest (cached)"
    return 0
  fi
  module_dir "$JOBSET_MODULE" "$v"
  copy_manifests "$dest" "$RESULT/config/components/crd/bases" "$f"
  RESULT=$dest
  log "copied the JobSet CRD of $JOBSET_MODULE@$v to $dest"
}

# kwok_stages VERSION: KWOK's own Stage manifests (kustomize/stage of sigs.k8s.io/kwok, the "fast" node and pod
# stages and the node heartbeat with leases), flattened into one directory that gke_sim.py reads. Sets RESULT.
kwok_stages() {
  local v=$1 dest="$CACHE/kwok-$1/stages" src tmp f
  RESULT=$dest
  if [[ -f "$dest/pod-complete.yaml" && -f "$dest/node-initialize.yaml" ]]; then
    log "reusing $dest (cached)"
    return 0
  fi
  module_dir sigs.k8s.io/kwok "$v"; src="$RESULT/kustomize/stage"
  mkdir -p "$(dirname "$dest")"
  tmp=$(mktemp -d "$(dirname "$dest")/.stages.XXXXXX")
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [[ -f "$src/$f" ]] || { rm -rf "$tmp"; die "sigs.k8s.io/kwok@$v has no kustomize/stage/$f"; }
    cp "$src/$f" "$tmp/"
  done
  chmod 755 "$tmp" && chmod 644 "$tmp"/*
  rm -rf "$dest"
  mv "$tmp" "$dest"
  RESULT=$dest
  log "copied KWOK $v stages to $dest"
}

# kueue_gomod: Kueue $KUEUE_VERSION's go.mod, kept as $CACHE/kueue-<v>/go.mod. Sets RESULT to its path.
kueue_gomod() {
  local gomod="$CACHE/kueue-$KUEUE_VERSION/go.mod"
  if [[ ! -f "$gomod" ]]; then
    module_dir sigs.k8s.io/kueue "$KUEUE_VERSION"
    mkdir -p "$(dirname "$gomod")"
    cp "$RESULT_GOMOD" "$gomod.tmp" && chmod 644 "$gomod.tmp" && mv -f "$gomod.tmp" "$gomod"
  fi
  RESULT=$gomod
}

# Sets PROVREQ_VERSION (unless given) to the cluster-autoscaler apis version
# Kueue $KUEUE_VERSION requires, from its go.mod.
provreq_version() {
  if [[ -n "$PROVREQ_VERSION" ]]; then return 0; fi
  kueue_gomod
  PROVREQ_VERSION=$(mod_version "$RESULT" "$PROVREQ_MODULE")
  [[ -n "$PROVREQ_VERSION" ]] || die "Kueue $KUEUE_VERSION's go.mod ($RESULT) does not require $PROVREQ_MODULE"
}

# Sets JOBSET_VERSION (unless given) to the sigs.k8s.io/jobset version Kueue $KUEUE_VERSION requires, from its
# go.mod.
jobset_version() {
  if [[ -n "$JOBSET_VERSION" ]]; then return 0; fi
  kueue_gomod
  JOBSET_VERSION=$(mod_version "$RESULT" "$JOBSET_MODULE")
  [[ -n "$JOBSET_VERSION" ]] || die "Kueue $KUEUE_VERSION's go.mod ($RESULT) does not require $JOBSET_MODULE"
}

# --- main ---------------------------------------------------------------------
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(apiserver controller-manager scheduler etcd kueue crds kwok kuberay)

KUBE_APISERVER="" KUBE_CONTROLLER_MANAGER="" KUBE_SCHEDULER="" ETCD="" KUEUE="" KUEUE_CRD_DIR="" KUEUE_CHART=""
KWOK="" KWOK_STAGES_DIR="" KUBERAY_OPERATOR=""
KUBERAY_CRD_DIR="" PROVREQ_CRD_DIR="" JOBSET_CRD_DIR=""
for c in "${want[@]}"; do
  case "$c" in
    apiserver|kube-apiserver)
      build_component kube-apiserver "$KUBE_VERSION" kube-apiserver build_apiserver
      KUBE_APISERVER=$RESULT ;;
    controller-manager|kube-controller-manager)
      build_component kube-controller-manager "$KUBE_VERSION" kube-controller-manager build_controller_manager
      KUBE_CONTROLLER_MANAGER=$RESULT ;;
    scheduler|kube-scheduler)
      build_component kube-scheduler "$KUBE_VERSION" kube-scheduler build_scheduler
      KUBE_SCHEDULER=$RESULT ;;
    kwok)
      build_component kwok "$KWOK_VERSION-$CONTROLLERS_SUM" kwok build_kwok
      KWOK=$RESULT
      kwok_stages "$KWOK_VERSION"
      KWOK_STAGES_DIR=$RESULT ;;
    kuberay|ray-operator)
      build_component kuberay-operator "$KUBERAY_VERSION" ray-operator build_kuberay
      KUBERAY_OPERATOR=$RESULT ;;
    etcd)
      build_component etcd "$ETCD_VERSION" etcd build_etcd
      ETCD=$RESULT ;;
    kueue)
      build_component kueue "$KUEUE_VERSION-$CONTROLLERS_SUM" kueue build_kueue
      KUEUE=$RESULT
      kueue_manifests "$KUEUE_VERSION"
      KUEUE_CRD_DIR=$RESULT ;;
    crds)
      kuberay_crds "$KUBERAY_VERSION"
      KUBERAY_CRD_DIR=$RESULT
      provreq_version
      provreq_crd "$PROVREQ_VERSION"
      PROVREQ_CRD_DIR=$RESULT
      jobset_version
      jobset_crd "$JOBSET_VERSION"
      JOBSET_CRD_DIR=$RESULT ;;
    *) die "unknown component '$c' (expected: apiserver, controller-manager, scheduler, etcd, kueue, crds, kwok, kuberay)" ;;
  esac
done

envfile="$CACHE/bin.env"
{
  echo "# written by tests/e2e/build_components.sh"
  [[ -z "$KUBE_APISERVER" ]] || printf 'KUBE_APISERVER=%s\nKUBE_VERSION=%s\n' "$KUBE_APISERVER" "$KUBE_VERSION"
  [[ -z "$KUBE_CONTROLLER_MANAGER" ]] || printf 'KUBE_CONTROLLER_MANAGER=%s\n' "$KUBE_CONTROLLER_MANAGER"
  [[ -z "$KUBE_SCHEDULER" ]] || printf 'KUBE_SCHEDULER=%s\n' "$KUBE_SCHEDULER"
  [[ -n "$KUBE_APISERVER" || ( -z "$KUBE_CONTROLLER_MANAGER" && -z "$KUBE_SCHEDULER" ) ]] \
    || printf 'KUBE_VERSION=%s\n' "$KUBE_VERSION"
  [[ -z "$ETCD" ]] || printf 'ETCD=%s\nETCD_VERSION=%s\n' "$ETCD" "$ETCD_VERSION"
  [[ -z "$KUEUE" ]] || printf 'KUEUE=%s\nKUEUE_VERSION=%s\nKUEUE_CRD_DIR=%s\nKUEUE_CHART=%s\n' \
    "$KUEUE" "$KUEUE_VERSION" "$KUEUE_CRD_DIR" "$KUEUE_CHART"
  [[ -z "$KUBERAY_CRD_DIR" ]] || printf 'KUBERAY_CRD_DIR=%s\nKUBERAY_VERSION=%s\n' "$KUBERAY_CRD_DIR" "$KUBERAY_VERSION"
  [[ -z "$PROVREQ_CRD_DIR" ]] || printf 'PROVREQ_CRD_DIR=%s\nPROVREQ_VERSION=%s\n' "$PROVREQ_CRD_DIR" "$PROVREQ_VERSION"
  [[ -z "$JOBSET_CRD_DIR" ]] || printf 'JOBSET_CRD_DIR=%s\nJOBSET_VERSION=%s\n' "$JOBSET_CRD_DIR" "$JOBSET_VERSION"
  [[ -z "$KWOK" ]] || printf 'KWOK=%s\nKWOK_STAGES_DIR=%s\nKWOK_VERSION=%s\n' "$KWOK" "$KWOK_STAGES_DIR" "$KWOK_VERSION"
  [[ -z "$KUBERAY_OPERATOR" ]] || printf 'KUBERAY_OPERATOR=%s\nKUBERAY_OPERATOR_VERSION=%s\n' "$KUBERAY_OPERATOR" "$KUBERAY_VERSION"
} > "$envfile.tmp"
mv -f "$envfile.tmp" "$envfile"

log "binaries and manifests (also in $envfile):"
grep -v '^#' "$envfile" | grep -v '_VERSION=' || true
