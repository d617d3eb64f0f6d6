# shellcheck shell=bash
# Shared by build_components.sh and build_engine.sh (sourced, not run): the Go toolchain and its environment,
# logging, go.mod version reading, the cache lock, and the cached build of one binary.
# The sourcing script sets BUILD_NAME (its log prefix) and CACHE first.

log() { printf '[%s] %s\n' "$BUILD_NAME" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# How long a cold build of each component took on 2 cores, with the other build script beside it (as scripts/test
# runs them): measured so at d660333 for kube-apiserver, Kueue, KubeRay, the Pulumi CLI, the Python host and the
# Kubernetes provider (docs/measurements.md); the others one after the other on an idle machine (2026-12-02) times
# 1.8, the ratio the measured ones show between the two ways. The YAML, Go and Node.js language hosts were measured
# 2026-12-05 in build_engine.sh's own order (after the Python host, whose compiled pulumi v3.188.0 the Go and Node.js
# hosts reuse; YAML compiles pulumi v3.255.0 of its own) on 2 cores beside a test run (tests/e2e/engine/README.md).
# Printed as each build starts, so a cold run says from its first minute how long each step will be; a machine
# under other load takes longer.
declare -gA EXPECTED_SECONDS=(
  [kube-apiserver]=358 [kube-controller-manager]=90 [kube-scheduler]=11 [etcd]=47 [kueue]=358 [kwok]=25
  [kuberay-operator]=164 [pulumi]=354 [pulumi-language-python]=50 [pulumi-resource-kubernetes]=697
  [pulumi-language-yaml]=210 [pulumi-language-go]=25 [pulumi-language-nodejs]=10
)

# human_duration SECONDS: "42 s", "5 min 58 s".
human_duration() {
  if (($1 < 60)); then printf '%d s' "$1"; else printf '%d min %d s' $(($1 / 60)) $(($1 % 60)); fi
}

# expected_note NAME: what a cold build of NAME is expected to take, for the progress lines.
expected_note() {
  local seconds=${EXPECTED_SECONDS[$1]:-}
  if [[ -n "$seconds" ]]; then
    printf 'a cold build took about %s on 2 cores' "$(human_duration "$seconds")"
  else
    printf 'no measured cold build time'
  fi
}

# --- Go toolchain ----------------------------------------------------------
if command -v go >/dev/null 2>&1; then
  GO=$(command -v go)
elif [[ -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
else
  die "no Go toolchain found (need Go >= 1.26.6 on PATH or at /usr/local/go/bin/go)"
fi

export CGO_ENABLED=0
export GOWORK=off
# Own flags only: -buildvcs=false because the wrapper modules live inside this
# repository's git tree, and VCS stamping is neither needed nor always possible.
export GOFLAGS=-buildvcs=false

# mod_version GOMOD MODULE: prints the required version of MODULE in GOMOD (block or single form).
mod_version() {
  awk -v m="$2" '
    $1 == "require" { $0 = substr($0, index($0, $2)) }
    $1 == m && $2 ~ /^v/ { print $2; exit }
  ' "$1"
}

# take_lock FILE: holds an exclusive lock on FILE (fd 9) until the script exits; says so when it has to wait.
take_lock() {
  mkdir -p "$CACHE"
  command -v flock >/dev/null 2>&1 || return 0
  exec 9>"$1"
  if ! flock -n 9; then
    log "waiting for another $BUILD_NAME ($1)"
    flock 9
  fi
}

# build_component NAME VERSION BINARY BUILD-FUNCTION [EXTRA-FILE...]
# Runs BUILD-FUNCTION TMPDIR VERSION unless $CACHE/NAME-VERSION/BINARY is already there;
# the build goes to a temporary directory that is moved into place only whole.
# EXTRA-FILEs are further executables the function leaves in TMPDIR, moved alongside.
# Sets RESULT to the binary's path. Logs one line as the build starts (with the expected duration) and one as it
# ends (with the time it took), or one line when the cache has it.
build_component() {
  local name=$1 version=$2 binary=$3 fn=$4
  shift 4
  local dir="$CACHE/$name-$version"
  RESULT="$dir/$binary"
  if [[ -x "$RESULT" && -f "$dir/.complete" ]]; then
    log "reusing $name $version: $RESULT (cached; remove $dir to rebuild)"
    return 0
  fi
  log "building $name $version ($(expected_note "$name")) -> $RESULT (with $($GO env GOVERSION))"
  mkdir -p "$dir"
  local tmp start f
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  start=$SECONDS
  if ! "$fn" "$tmp" "$version"; then
    rm -rf "$tmp"
    die "building $name $version failed"
  fi
  for f in "$binary" "$@"; do
    [[ -x "$tmp/$f" ]] || { rm -rf "$tmp"; die "$name build produced no executable $f"; }
  done
  for f in "$@"; do mv -f "$tmp/$f" "$dir/$f"; done
  mv -f "$tmp/$binary" "$RESULT"
  rm -rf "$tmp"
  touch "$dir/.complete"
  log "built $name $version in $(human_duration $((SECONDS - start))) ($(expected_note "$name"); $(du -h "$RESULT" | cut -f1))"
}
