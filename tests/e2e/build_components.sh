#!/usr/bin/env bash
# Builds the real Kubernetes components the end-to-end tests run against:
#
#   kube-apiserver  k8s.io/kubernetes, through the wrapper module in ./apiserver
#   etcd            go.etcd.io/etcd/server/v3, through the wrapper module in ./etcd
#   kueue           sigs.k8s.io/kueue/cmd/kueue, with `go install module@version`
#
# Everything comes from Go modules through the Go module proxy; nothing else is
# downloaded. The binaries are cached outside the repository, one directory per
# component and version:
#
#   ${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}/<component>-<version>/
#
# so a second run builds nothing. At the end the script prints the three paths
# and writes them to $CACHE/bin.env (KUBE_APISERVER=..., ETCD=..., KUEUE=...,
# plus the versions and KUEUE_CRD_DIR, a copy of Kueue's CRD manifests, with
# webhook-manifests.yaml beside it), which a harness can source.
#
# Usage: tests/e2e/build_components.sh [apiserver] [etcd] [kueue]
#   (no argument: all three; bin.env lists only what is built or cached)
#
# Versions: kube-apiserver and etcd are pinned by the go.mod of their wrapper
# module (bump there and re-run `go mod tidy`); Kueue by KUEUE_VERSION below,
# overridable from the environment.
#
# A cold build of all three takes a long while on 2 cores (see NOTES.md) and
# fills the Go module and build caches with a few GiB.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}

log() { printf '[build_components] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- Go toolchain ----------------------------------------------------------
if command -v go >/dev/null 2>&1; then
  GO=$(command -v go)
elif [[ -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
else
  die "no Go toolchain found (need Go >= 1.26 on PATH or at /usr/local/go/bin/go)"
fi

export CGO_ENABLED=0
export GOWORK=off
# Own flags only: -buildvcs=false because the wrapper modules live inside this
# repository's git tree, and VCS stamping is neither needed nor always possible.
export GOFLAGS=-buildvcs=false
BUILD_FLAGS=(-trimpath)

# --- versions from the wrapper modules -------------------------------------
# Prints the required version of module $2 in go.mod $1 (block or single form).
mod_version() {
  awk -v m="$2" '
    $1 == "require" { $0 = substr($0, index($0, $2)) }
    $1 == m && $2 ~ /^v/ { print $2; exit }
  ' "$1"
}

KUBE_VERSION=$(mod_version "$HERE/apiserver/go.mod" k8s.io/kubernetes)
ETCD_VERSION=$(mod_version "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)
[[ -n "$KUBE_VERSION" ]] || die "cannot read the k8s.io/kubernetes version from apiserver/go.mod"
[[ -n "$ETCD_VERSION" ]] || die "cannot read the etcd version from etcd/go.mod"

# kubernetes vX.Y.Z needs every k8s.io staging module replaced at v0.Y.Z.
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
if awk -v want="$STAGING_VERSION" '
     $2 == "=>" && $1 ~ /^k8s\.io\// && $4 != want { bad = 1; print "  " $0 }
     END { exit !bad }' "$HERE/apiserver/go.mod" >&2; then
  die "apiserver/go.mod: the replace lines above are not at $STAGING_VERSION (kubernetes $KUBE_VERSION)"
fi

# --- cache and lock ----------------------------------------------------------
mkdir -p "$CACHE"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/.lock"
  flock 9
fi

# build_component NAME VERSION BINARY BUILD-FUNCTION
# Runs BUILD-FUNCTION TMPDIR unless $CACHE/NAME-VERSION/BINARY is already there;
# the build goes to a temporary directory that is moved into place only whole.
# Sets RESULT to the binary's path.
build_component() {
  local name=$1 version=$2 binary=$3 fn=$4
  local dir="$CACHE/$name-$version"
  RESULT="$dir/$binary"
  if [[ -x "$RESULT" && -f "$dir/.complete" ]]; then
    log "reusing $RESULT (cached; remove $dir to rebuild)"
    return 0
  fi
  log "building $name $version -> $RESULT (with $($GO env GOVERSION))"
  mkdir -p "$dir"
  local tmp start
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  start=$SECONDS
  if ! "$fn" "$tmp" "$version"; then
    rm -rf "$tmp"
    die "building $name $version failed"
  fi
  [[ -x "$tmp/$binary" ]] || { rm -rf "$tmp"; die "$name build produced no $binary"; }
  mv -f "$tmp/$binary" "$RESULT"
  rm -rf "$tmp"
  touch "$dir/.complete"
  log "built $name $version in $((SECONDS - start))s ($(du -h "$RESULT" | cut -f1))"
}

build_apiserver() { # TMPDIR VERSION
  local v=$2 minor
  minor=${v#v1.}; minor=${minor%%.*}
  # Version stamping as Kubernetes' hack/lib/version.sh does, so /version
  # reports the real version (clients such as Kueue parse it).
  local ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  (cd "$HERE/apiserver" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "$ldflags" -o "$1/kube-apiserver" .)
}

build_etcd() { # TMPDIR VERSION
  (cd "$HERE/etcd" && "$GO" build "${BUILD_FLAGS[@]}" -mod=readonly \
      -ldflags "-s -w" -o "$1/etcd" .)
}

build_kueue() { # TMPDIR VERSION
  # Kueue's go.mod has no replace directives, so go install module@version works.
  (cd "$1" && GOBIN="$1" "$GO" install "${BUILD_FLAGS[@]}" \
      -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$2" \
      "sigs.k8s.io/kueue/cmd/kueue@$2")
}

# kueue_manifests VERSION: copies Kueue's CRDs (config/components/crd/bases)
# and webhook configuration manifests from the module source next to the
# binary, once, so the harness can apply them. Sets RESULT to the CRD dir.
kueue_manifests() {
  local v=$1 dir="$CACHE/kueue-$1" src tmp
  RESULT="$dir/crd"
  if [[ -d "$RESULT" ]]; then
    log "reusing $RESULT (cached)"
    return 0
  fi
  src=$(cd "$CACHE" && "$GO" mod download -json "sigs.k8s.io/kueue@$v" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -n "$src" && -d "$src/config/components/crd/bases" ]] \
    || die "cannot find Kueue $v source in the module cache"
  tmp=$(mktemp -d "$dir/.crd.XXXXXX")
  cp "$src"/config/components/crd/bases/*.yaml "$tmp/"
  chmod 755 "$tmp" && chmod 644 "$tmp"/*.yaml
  cp "$src/config/components/webhook/manifests.yaml" "$dir/webhook-manifests.yaml"
  chmod 644 "$dir/webhook-manifests.yaml"
  mv "$tmp" "$RESULT"
  log "copied Kueue $v CRDs to $RESULT and webhooks to $dir/webhook-manifests.yaml"
}

# --- main ---------------------------------------------------------------------
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(apiserver etcd kueue)

KUBE_APISERVER="" ETCD="" KUEUE="" KUEUE_CRD_DIR=""
for c in "${want[@]}"; do
  case "$c" in
    apiserver|kube-apiserver)
      build_component kube-apiserver "$KUBE_VERSION" kube-apiserver build_apiserver
      KUBE_APISERVER=$RESULT ;;
    etcd)
      build_component etcd "$ETCD_VERSION" etcd build_etcd
      ETCD=$RESULT ;;
    kueue)
      build_component kueue "$KUEUE_VERSION" kueue build_kueue
      KUEUE=$RESULT
      kueue_manifests "$KUEUE_VERSION"
      KUEUE_CRD_DIR=$RESULT ;;
    *) die "unknown component '$c' (expected: apiserver, etcd, kueue)" ;;
  esac
done

envfile="$CACHE/bin.env"
{
  echo "# written by tests/e2e/build_components.sh"
  [[ -z "$KUBE_APISERVER" ]] || printf 'KUBE_APISERVER=%s\nKUBE_VERSION=%s\n' "$KUBE_APISERVER" "$KUBE_VERSION"
  [[ -z "$ETCD" ]] || printf 'ETCD=%s\nETCD_VERSION=%s\n' "$ETCD" "$ETCD_VERSION"
  [[ -z "$KUEUE" ]] || printf 'KUEUE=%s\nKUEUE_VERSION=%s\nKUEUE_CRD_DIR=%s\n' "$KUEUE" "$KUEUE_VERSION" "$KUEUE_CRD_DIR"
} > "$envfile.tmp"
mv -f "$envfile.tmp" "$envfile"

log "binaries (also in $envfile):"
[[ -z "$KUBE_APISERVER" ]] || echo "KUBE_APISERVER=$KUBE_APISERVER"
[[ -z "$ETCD" ]] || echo "ETCD=$ETCD"
[[ -z "$KUEUE" ]] || echo "KUEUE=$KUEUE"
