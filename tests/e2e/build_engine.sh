#!/usr/bin/env bash
# Builds the real Pulumi engine the end-to-end tests drive, from Go modules:
#
#   pulumi                       the CLI, github.com/pulumi/pulumi/pkg/v3/cmd/pulumi,
#                                through the wrapper module in ./engine/cli
#   pulumi-language-python       the Python language host,
#                                github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3,
#                                through the wrapper module in ./engine/python-host,
#                                plus its shim pulumi-language-python-exec
#                                (a Python script shipped in github.com/pulumi/pulumi/sdk/v3)
#   pulumi-resource-kubernetes   the Kubernetes provider,
#                                github.com/pulumi/pulumi-kubernetes/provider/v4,
#                                through the wrapper module and main in ./engine/kubernetes
#   pulumi-language-yaml         the Pulumi YAML language host,
#                                github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml,
#                                through the wrapper module in ./engine/yaml-host
#   pulumi-language-go           the Go language host,
#                                github.com/pulumi/pulumi/sdk/go/pulumi-language-go/v3,
#                                through the wrapper module in ./engine/go-host
#   pulumi-language-nodejs       the Node.js language host,
#                                github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs/v3,
#                                through the wrapper module in ./engine/nodejs-host
#
# The Go and Node.js hosts are there for `pulumi package gen-sdk --language go|nodejs`
# (and `pulumi package add` in such a project): the CLI generates an SDK by calling
# the language host's GeneratePackage, it has no code generator of its own
# (pkg/v3 cmd/pulumi/packages/packages.go, GenSDK). No test runs a Go or Node.js
# program with them.
#
# Everything comes from Go modules through the Go module proxy; no prebuilt
# binary or plugin is downloaded. The binaries are cached outside the
# repository, one directory per component and version:
#
#   ${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}/<component>-<version>/
#
# so a second run builds nothing. When the CLI, the Python host and the
# provider are there, the script also makes $CACHE/engine-bin-<versions>/, one
# directory of hard links to `pulumi`, `pulumi-language-python`,
# `pulumi-language-python-exec`, `pulumi-resource-kubernetes` and whichever of
# `pulumi-language-yaml`, `pulumi-language-go` and `pulumi-language-nodejs` this
# run built or found cached (its name lists each with its version), to put first
# on PATH. At the end it prints the paths and writes them to $CACHE/engine.env
# (PULUMI=..., PULUMI_BIN_DIR=..., PULUMI_LANGUAGE_PYTHON=...,
# PULUMI_RESOURCE_KUBERNETES=..., PULUMI_LANGUAGE_YAML=..., PULUMI_LANGUAGE_GO=...,
# PULUMI_LANGUAGE_NODEJS=..., and the versions PULUMI_VERSION,
# PULUMI_LANGUAGE_PYTHON_VERSION, PULUMI_KUBERNETES_PROVIDER_VERSION,
# PULUMI_LANGUAGE_YAML_VERSION, PULUMI_LANGUAGE_GO_VERSION,
# PULUMI_LANGUAGE_NODEJS_VERSION), which a harness can source.
#
# Usage: tests/e2e/build_engine.sh [cli] [python] [kubernetes] [yaml] [go] [nodejs]
#   (no argument: all six; engine.env lists only what is built or cached,
#   and PULUMI_BIN_DIR only when cli, python and kubernetes are)
#
# Versions are pinned by the go.mod of each wrapper module (bump there and
# re-run `go mod tidy`; see the comment at the top of each go.mod):
#   cli          github.com/pulumi/pulumi/pkg/v3 (= sdk/v3)      -> pulumi version
#   python       github.com/pulumi/pulumi/sdk/v3 (= pkg/v3) it is compiled and
#                stamped with, and the host module's pseudo-version commit
#   kubernetes   github.com/pulumi/pulumi-kubernetes/sdk/v4: the provider's
#                release version (the provider module itself has pseudo-versions only)
#   yaml         github.com/pulumi/pulumi-yaml, a tagged module -> its version
#   go, nodejs   like python: sdk/v3 (= pkg/v3) and the host's pseudo-version commit
#
# A cold build takes a long while on 2 cores and fills the Go module and build
# caches with a few GiB (see the report in engine/README.md).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENGINE="$HERE/engine"
CACHE=${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}

BUILD_NAME=build_engine
# shellcheck source-path=SCRIPTDIR source=go_build.sh
source "$HERE/go_build.sh"

# Pulumi's Python, Go and Node.js language hosts are only published as
# pseudo-versions of nested modules that the checksum database does not know.
# Their hashes are in engine/*-host/go.sum, so a download is still verified;
# only the checksum-database look-up is skipped, and only for those module paths.
PY_HOST_MODULE=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3
GO_HOST_MODULE=github.com/pulumi/pulumi/sdk/go/pulumi-language-go/v3
NODEJS_HOST_MODULE=github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs/v3
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python"
GONOSUMDB+=",github.com/pulumi/pulumi/sdk/go/pulumi-language-go,github.com/pulumi/pulumi/sdk/nodejs/cmd/pulumi-language-nodejs"
YAML_HOST_PACKAGE=github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml
BUILD_FLAGS=(-trimpath -mod=readonly)
# Pulumi's own release build of the CLI and language hosts uses these tags.
PULUMI_TAGS=osusergo,grpcnotrace
PULUMI_VERSION_VAR=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
K8S_VERSION_VAR=github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version
# pulumi-yaml's release build (its .goreleaser.yml) stamps the tag, with its v, and uses no tags.
YAML_VERSION_VAR=github.com/pulumi/pulumi-yaml/pkg/version.Version

# --- versions from the wrapper modules -------------------------------------
need_version() { # GOMOD MODULE -> prints the version or dies
  local v
  v=$(mod_version "$1" "$2")
  [[ -n "$v" ]] || die "cannot read the $2 version from ${1#"$HERE/"}"
  printf '%s\n' "$v"
}

# host_sdk_version GOMOD: the sdk/v3 version a language-host wrapper pins (its pkg/v3 must be the same).
host_sdk_version() {
  local sdk pkg
  sdk=$(need_version "$1" github.com/pulumi/pulumi/sdk/v3)
  pkg=$(need_version "$1" github.com/pulumi/pulumi/pkg/v3)
  [[ "$pkg" == "$sdk" ]] \
    || die "${1#"$HERE/"}: pkg/v3 is at $pkg but sdk/v3 at $sdk; they must match"
  printf '%s\n' "$sdk"
}

CLI_MOD="$ENGINE/cli/go.mod"
PY_MOD="$ENGINE/python-host/go.mod"
K8S_MOD="$ENGINE/kubernetes/go.mod"
YAML_MOD="$ENGINE/yaml-host/go.mod"
GO_MOD="$ENGINE/go-host/go.mod"
NODEJS_MOD="$ENGINE/nodejs-host/go.mod"

PULUMI_VERSION=$(need_version "$CLI_MOD" github.com/pulumi/pulumi/pkg/v3)
v=$(need_version "$CLI_MOD" github.com/pulumi/pulumi/sdk/v3)
[[ "$v" == "$PULUMI_VERSION" ]] \
  || die "engine/cli/go.mod: sdk/v3 is at $v but pkg/v3 at $PULUMI_VERSION; they must match"

PY_HOST_PSEUDO=$(need_version "$PY_MOD" "$PY_HOST_MODULE")
PY_HOST_COMMIT=${PY_HOST_PSEUDO##*-}
PULUMI_LANGUAGE_PYTHON_VERSION=$(host_sdk_version "$PY_MOD")

GO_HOST_PSEUDO=$(need_version "$GO_MOD" "$GO_HOST_MODULE")
GO_HOST_COMMIT=${GO_HOST_PSEUDO##*-}
PULUMI_LANGUAGE_GO_VERSION=$(host_sdk_version "$GO_MOD")

NODEJS_HOST_PSEUDO=$(need_version "$NODEJS_MOD" "$NODEJS_HOST_MODULE")
NODEJS_HOST_COMMIT=${NODEJS_HOST_PSEUDO##*-}
PULUMI_LANGUAGE_NODEJS_VERSION=$(host_sdk_version "$NODEJS_MOD")

PULUMI_LANGUAGE_YAML_VERSION=$(need_version "$YAML_MOD" github.com/pulumi/pulumi-yaml)

K8S_PROVIDER_PSEUDO=$(need_version "$K8S_MOD" github.com/pulumi/pulumi-kubernetes/provider/v4)
K8S_PROVIDER_COMMIT=${K8S_PROVIDER_PSEUDO##*-}
K8S_SDK_VERSION=$(need_version "$K8S_MOD" github.com/pulumi/pulumi-kubernetes/sdk/v4)
# The provider reports its version without the leading v, as its Makefile stamps it.
PULUMI_KUBERNETES_PROVIDER_VERSION=${K8S_SDK_VERSION#v}
unset v

# --- cache and lock ----------------------------------------------------------
# A lock of its own, not build_components.sh's $CACHE/.lock: the two scripts
# write different directories and need not wait for each other.
take_lock "$CACHE/.engine.lock"

# module_dir WRAPPER-DIR MODULE: prints the module cache directory of MODULE
# at the version WRAPPER-DIR's go.mod selects, downloading it if needed.
module_dir() {
  local dir
  dir=$(cd "$1" && "$GO" mod download -json "$2" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -n "$dir" && -d "$dir" ]] || die "cannot find $2 in the module cache"
  printf '%s\n' "$dir"
}

build_cli() { # TMPDIR VERSION
  # The CLI's main package is built as a dependency (the wrapper's `tool`
  # directive keeps it in the module graph); see engine/cli/go.mod.
  (cd "$ENGINE/cli" && "$GO" build "${BUILD_FLAGS[@]}" -tags "$PULUMI_TAGS" \
      -ldflags "-s -w -X $PULUMI_VERSION_VAR=$2" \
      -o "$1/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
}

# build_pulumi_host TMPDIR WRAPPER MODULE BINARY SDK-VERSION: one of Pulumi's
# language hosts (the main package at the root of MODULE), built as Pulumi's
# release does (.goreleaser.yml: -trimpath, osusergo, the version stamped).
build_pulumi_host() {
  (cd "$ENGINE/$2" && "$GO" build "${BUILD_FLAGS[@]}" -tags "$PULUMI_TAGS" \
      -ldflags "-s -w -X $PULUMI_VERSION_VAR=$5" -o "$1/$4" "$3")
}

build_python_host() { # TMPDIR KEY
  local sdk
  build_pulumi_host "$1" python-host "$PY_HOST_MODULE" pulumi-language-python \
    "$PULUMI_LANGUAGE_PYTHON_VERSION" || return 1
  # The host runs programs through pulumi-language-python-exec, which it looks
  # for next to its own (symlink-resolved) executable. The script ships in the
  # sdk/v3 module the host is compiled with.
  sdk=$(module_dir "$ENGINE/python-host" github.com/pulumi/pulumi/sdk/v3)
  [[ -f "$sdk/python/cmd/pulumi-language-python-exec" ]] \
    || { log "no python/cmd/pulumi-language-python-exec in $sdk"; return 1; }
  cp "$sdk/python/cmd/pulumi-language-python-exec" "$1/"
  chmod 755 "$1/pulumi-language-python-exec"
}

build_go_host() { # TMPDIR KEY
  build_pulumi_host "$1" go-host "$GO_HOST_MODULE" pulumi-language-go "$PULUMI_LANGUAGE_GO_VERSION"
}

build_nodejs_host() { # TMPDIR KEY
  build_pulumi_host "$1" nodejs-host "$NODEJS_HOST_MODULE" pulumi-language-nodejs "$PULUMI_LANGUAGE_NODEJS_VERSION"
}

build_yaml_host() { # TMPDIR VERSION
  # The main package is built as a dependency, kept in the module graph by the
  # wrapper's `tool` directive (see engine/yaml-host/go.mod).
  (cd "$ENGINE/yaml-host" && "$GO" build "${BUILD_FLAGS[@]}" \
      -ldflags "-s -w -X $YAML_VERSION_VAR=$2" \
      -o "$1/pulumi-language-yaml" "$YAML_HOST_PACKAGE")
}

build_kubernetes() { # TMPDIR VERSION
  local tmp=$1 src provider
  provider=$(module_dir "$ENGINE/kubernetes" github.com/pulumi/pulumi-kubernetes/provider/v4)
  local cmd="$provider/cmd/pulumi-resource-kubernetes"
  local f
  for f in schema.json terraform-mapping.json generate.go; do
    [[ -f "$cmd/$f" ]] || { log "no cmd/pulumi-resource-kubernetes/$f in $provider"; return 1; }
  done
  # Build from a copy of the wrapper module, completed with what the
  # provider's Makefile generates: the schema stamped with the version and
  # the compacted terraform mapping, by the provider's own generate.go.
  src="$tmp/src"
  mkdir -p "$src"
  cp "$ENGINE/kubernetes/go.mod" "$ENGINE/kubernetes/go.sum" "$ENGINE/kubernetes/main.go" "$src/"
  cp "$cmd/schema.json" "$cmd/terraform-mapping.json" "$cmd/generate.go" "$src/"
  chmod u+w "$src"/*
  (cd "$src" && VERSION=$PULUMI_KUBERNETES_PROVIDER_VERSION "$GO" run -mod=readonly generate.go) || return 1
  [[ -s "$src/schema-embed.json" && -s "$src/terraform-mapping-embed.json" ]] \
    || { log "generate.go wrote no schema-embed.json / terraform-mapping-embed.json"; return 1; }
  rm -f "$src/schema.json" "$src/terraform-mapping.json"
  cat > "$src/embed.go" <<'EOF'
// Code generated by tests/e2e/build_engine.sh. DO NOT EDIT.

package main

import _ "embed"

//go:embed schema-embed.json
var schemaEmbed []byte

//go:embed terraform-mapping-embed.json
var terraformMappingEmbed []byte

func init() {
	pulumiSchema = schemaEmbed
	terraformMapping = terraformMappingEmbed
}
EOF
  (cd "$src" && "$GO" build "${BUILD_FLAGS[@]}" \
      -ldflags "-s -w -X $K8S_VERSION_VAR=$PULUMI_KUBERNETES_PROVIDER_VERSION" \
      -o "$tmp/pulumi-resource-kubernetes" .)
}

# bin_dir: one directory holding the four executables of the CLI, the Python
# host and the provider, plus the YAML, Go and Node.js hosts that this run has,
# named after the versions of what it holds, to put first on PATH. They are
# hard links to the cached files (a copy where the file system refuses links),
# not symlinks: the CLI looks for its bundled language hosts (python, yaml, go,
# nodejs, ...) next to its own symlink-resolved executable and warns "using
# pulumi-language-python from $PATH" when that is elsewhere, and the host finds
# pulumi-language-python-exec the same way. The directory is reused while
# every entry is still the same file as its source.
# Sets RESULT to it.
bin_dir() {
  local dir="$CACHE/engine-bin-pulumi-$PULUMI_VERSION-python-$PULUMI_LANGUAGE_PYTHON_VERSION-kubernetes-v$PULUMI_KUBERNETES_PROVIDER_VERSION"
  local -A src=(
    [pulumi]=$PULUMI
    [pulumi-language-python]=$PULUMI_LANGUAGE_PYTHON
    [pulumi-language-python-exec]="$(dirname "$PULUMI_LANGUAGE_PYTHON")/pulumi-language-python-exec"
    [pulumi-resource-kubernetes]=$PULUMI_RESOURCE_KUBERNETES
  )
  if [[ -n "$PULUMI_LANGUAGE_YAML" ]]; then
    dir+="-yaml-$PULUMI_LANGUAGE_YAML_VERSION"
    src[pulumi-language-yaml]=$PULUMI_LANGUAGE_YAML
  fi
  if [[ -n "$PULUMI_LANGUAGE_GO" ]]; then
    dir+="-go-$PULUMI_LANGUAGE_GO_VERSION"
    src[pulumi-language-go]=$PULUMI_LANGUAGE_GO
  fi
  if [[ -n "$PULUMI_LANGUAGE_NODEJS" ]]; then
    dir+="-nodejs-$PULUMI_LANGUAGE_NODEJS_VERSION"
    src[pulumi-language-nodejs]=$PULUMI_LANGUAGE_NODEJS
  fi
  local f ok=1 tmp
  RESULT=$dir
  [[ -f "$dir/.complete" ]] || ok=0
  for f in "${!src[@]}"; do
    [[ "$dir/$f" -ef "${src[$f]}" ]] || ok=0
  done
  if ((ok)); then
    log "reusing $dir (cached)"
    return 0
  fi
  tmp=$(mktemp -d "$CACHE/.engine-bin.XXXXXX")
  for f in "${!src[@]}"; do
    ln "${src[$f]}" "$tmp/$f" 2>/dev/null || cp -p "${src[$f]}" "$tmp/$f"
  done
  touch "$tmp/.complete"
  chmod 755 "$tmp"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "made $dir"
}

# --- main ---------------------------------------------------------------------
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=(cli python kubernetes yaml go nodejs)

PULUMI="" PULUMI_LANGUAGE_PYTHON="" PULUMI_RESOURCE_KUBERNETES="" PULUMI_BIN_DIR=""
PULUMI_LANGUAGE_YAML="" PULUMI_LANGUAGE_GO="" PULUMI_LANGUAGE_NODEJS=""
for c in "${want[@]}"; do
  case "$c" in
    cli|pulumi)
      build_component pulumi "$PULUMI_VERSION" pulumi build_cli
      PULUMI=$RESULT ;;
    python|python-host|pulumi-language-python)
      build_component pulumi-language-python "$PULUMI_LANGUAGE_PYTHON_VERSION-$PY_HOST_COMMIT" \
        pulumi-language-python build_python_host pulumi-language-python-exec
      PULUMI_LANGUAGE_PYTHON=$RESULT ;;
    kubernetes|pulumi-resource-kubernetes)
      build_component pulumi-resource-kubernetes "v$PULUMI_KUBERNETES_PROVIDER_VERSION-$K8S_PROVIDER_COMMIT" \
        pulumi-resource-kubernetes build_kubernetes
      PULUMI_RESOURCE_KUBERNETES=$RESULT ;;
    yaml|yaml-host|pulumi-language-yaml)
      build_component pulumi-language-yaml "$PULUMI_LANGUAGE_YAML_VERSION" \
        pulumi-language-yaml build_yaml_host
      PULUMI_LANGUAGE_YAML=$RESULT ;;
    go|go-host|pulumi-language-go)
      build_component pulumi-language-go "$PULUMI_LANGUAGE_GO_VERSION-$GO_HOST_COMMIT" \
        pulumi-language-go build_go_host
      PULUMI_LANGUAGE_GO=$RESULT ;;
    nodejs|nodejs-host|pulumi-language-nodejs)
      build_component pulumi-language-nodejs "$PULUMI_LANGUAGE_NODEJS_VERSION-$NODEJS_HOST_COMMIT" \
        pulumi-language-nodejs build_nodejs_host
      PULUMI_LANGUAGE_NODEJS=$RESULT ;;
    *) die "unknown component '$c' (expected: cli, python, kubernetes, yaml, go, nodejs)" ;;
  esac
done

if [[ -n "$PULUMI" && -n "$PULUMI_LANGUAGE_PYTHON" && -n "$PULUMI_RESOURCE_KUBERNETES" ]]; then
  bin_dir
  PULUMI_BIN_DIR=$RESULT
fi

envfile="$CACHE/engine.env"
{
  echo "# written by tests/e2e/build_engine.sh"
  [[ -z "$PULUMI" ]] || printf 'PULUMI=%s\nPULUMI_VERSION=%s\n' "$PULUMI" "$PULUMI_VERSION"
  [[ -z "$PULUMI_LANGUAGE_PYTHON" ]] || printf 'PULUMI_LANGUAGE_PYTHON=%s\nPULUMI_LANGUAGE_PYTHON_VERSION=%s\n' \
    "$PULUMI_LANGUAGE_PYTHON" "$PULUMI_LANGUAGE_PYTHON_VERSION"
  [[ -z "$PULUMI_RESOURCE_KUBERNETES" ]] || printf 'PULUMI_RESOURCE_KUBERNETES=%s\nPULUMI_KUBERNETES_PROVIDER_VERSION=%s\n' \
    "$PULUMI_RESOURCE_KUBERNETES" "$PULUMI_KUBERNETES_PROVIDER_VERSION"
  [[ -z "$PULUMI_LANGUAGE_YAML" ]] || printf 'PULUMI_LANGUAGE_YAML=%s\nPULUMI_LANGUAGE_YAML_VERSION=%s\n' \
    "$PULUMI_LANGUAGE_YAML" "$PULUMI_LANGUAGE_YAML_VERSION"
  [[ -z "$PULUMI_LANGUAGE_GO" ]] || printf 'PULUMI_LANGUAGE_GO=%s\nPULUMI_LANGUAGE_GO_VERSION=%s\n' \
    "$PULUMI_LANGUAGE_GO" "$PULUMI_LANGUAGE_GO_VERSION"
  [[ -z "$PULUMI_LANGUAGE_NODEJS" ]] || printf 'PULUMI_LANGUAGE_NODEJS=%s\nPULUMI_LANGUAGE_NODEJS_VERSION=%s\n' \
    "$PULUMI_LANGUAGE_NODEJS" "$PULUMI_LANGUAGE_NODEJS_VERSION"
  [[ -z "$PULUMI_BIN_DIR" ]] || printf 'PULUMI_BIN_DIR=%s\n' "$PULUMI_BIN_DIR"
} > "$envfile.tmp"
mv -f "$envfile.tmp" "$envfile"

log "binaries (also in $envfile):"
[[ -z "$PULUMI" ]] || echo "PULUMI=$PULUMI"
[[ -z "$PULUMI_LANGUAGE_PYTHON" ]] || echo "PULUMI_LANGUAGE_PYTHON=$PULUMI_LANGUAGE_PYTHON"
[[ -z "$PULUMI_RESOURCE_KUBERNETES" ]] || echo "PULUMI_RESOURCE_KUBERNETES=$PULUMI_RESOURCE_KUBERNETES"
[[ -z "$PULUMI_LANGUAGE_YAML" ]] || echo "PULUMI_LANGUAGE_YAML=$PULUMI_LANGUAGE_YAML"
[[ -z "$PULUMI_LANGUAGE_GO" ]] || echo "PULUMI_LANGUAGE_GO=$PULUMI_LANGUAGE_GO"
[[ -z "$PULUMI_LANGUAGE_NODEJS" ]] || echo "PULUMI_LANGUAGE_NODEJS=$PULUMI_LANGUAGE_NODEJS"
[[ -z "$PULUMI_BIN_DIR" ]] || echo "PULUMI_BIN_DIR=$PULUMI_BIN_DIR"
