#!/usr/bin/env bash
# Smoke test of the engine from ../build_engine.sh, run hermetically: a
# temporary PULUMI_HOME and file state backend, no update check, no plugin
# download, PATH starting with PULUMI_BIN_DIR. It checks `pulumi version`,
# then takes a tiny Python project (two outputs; a Kubernetes Provider with a
# fake kubeconfig and nothing on it; a Provider in render-to-YAML mode and a
# ConfigMap through it, so no cluster is needed) through `stack init`, `up`,
# `preview --expect-no-changes` and `destroy`, and checks the rendered YAML.
# Then, with the other language hosts: a YAML program with one output; a YAML
# program that uses a source-based YAML component package added with
# `pulumi package add <dir>`; and `pulumi package gen-sdk --language go` and
# `--language nodejs` from that package's schema.
# It is the executable form of the "Running the CLI hermetically" notes in
# README.md.
#
# Usage: tests/e2e/engine/smoke_engine.sh    (KEEP=1 keeps the work directory)
#   VENV=<dir>        the virtualenv with pulumi and pulumi-kubernetes
#                     (default: the repository's ./venv, made by ./scripts/setup)
#   PLUGIN_MODE=path  (default) the engine takes pulumi-resource-kubernetes
#                     from PATH, whatever version the SDK asks for; it warns
#                     "using pulumi-resource-kubernetes from $PATH" and
#                     "expected to have version >=<SDK's>, but has 4.25.0"
#   PLUGIN_MODE=cache the provider is installed into PULUMI_HOME's plugin cache
#                     under the version the SDK asks for, ambient plugins are
#                     ignored and PULUMI_DEV=true drops the version warning:
#                     no warning at all
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
CACHE=${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}
VENV=${VENV:-$REPO/venv}

log() { printf '[smoke_engine] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

"$HERE/../build_engine.sh" >/dev/null
# shellcheck disable=SC1091
source "$CACHE/engine.env"
[[ -n "${PULUMI_BIN_DIR:-}" ]] || die "engine.env has no PULUMI_BIN_DIR"
for f in pulumi-language-yaml pulumi-language-go pulumi-language-nodejs; do
  [[ -x "$PULUMI_BIN_DIR/$f" ]] || die "$PULUMI_BIN_DIR has no $f"
done
[[ -x "$VENV/bin/python" ]] || die "no virtualenv at $VENV (run ./scripts/setup)"
"$VENV/bin/python" -c 'import pulumi, pulumi_kubernetes' \
  || die "$VENV lacks pulumi or pulumi_kubernetes"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tpu-fallback-engine.XXXXXX")
cleanup() {
  local rc=$?
  if [[ "${KEEP:-0}" == 1 || $rc -ne 0 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT

# --- the hermetic environment ------------------------------------------------
export PATH="$PULUMI_BIN_DIR:$PATH"
export PULUMI_HOME="$WORK/pulumi-home"             # no ~/.pulumi: plugins, credentials, workspaces
export PULUMI_SKIP_UPDATE_CHECK=true               # no call home for a newer CLI
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true  # never download a plugin
export PULUMI_CONFIG_PASSPHRASE=test               # passphrase secrets provider, no prompt
export PULUMI_SKIP_CONFIRMATIONS=true
unset PULUMI_ACCESS_TOKEN PULUMI_BACKEND_URL PULUMI_IGNORE_AMBIENT_PLUGINS PULUMI_DEV
mkdir -p "$PULUMI_HOME" "$WORK/state"
PLUGIN_MODE=${PLUGIN_MODE:-path}

run() { # pulumi ARGS... : prints the command and its output, fails on failure
  log "\$ pulumi $*"
  pulumi "$@" 2>&1 | tee -a "$WORK/pulumi.log"
  return "${PIPESTATUS[0]}"
}

[[ "$(command -v pulumi)" == "$PULUMI_BIN_DIR/pulumi" ]] || die "pulumi on PATH is $(command -v pulumi)"
got=$(pulumi version)
[[ "$got" == "$PULUMI_VERSION" ]] || die "pulumi version printed '$got', expected $PULUMI_VERSION"
log "pulumi version: $got"

# --- the project ---------------------------------------------------------------
PROJ="$WORK/project"
mkdir -p "$PROJ"
cat > "$PROJ/Pulumi.yaml" <<EOF
name: engine-smoke
runtime:
  name: python
  options:
    toolchain: pip
    virtualenv: $VENV
EOF
cat > "$PROJ/__main__.py" <<'EOF'
import os

import pulumi
import pulumi_kubernetes as k8s

# A provider with a kubeconfig that is no kubeconfig: fine while nothing
# uses it. It cannot also render: the provider rejects kubeconfig, context
# and cluster together with renderYamlToDirectory.
fake = k8s.Provider("fake-kubeconfig", kubeconfig="not-a-real-kubeconfig")
provider = k8s.Provider("render", render_yaml_to_directory=os.environ["SMOKE_RENDER_DIR"])
cm = k8s.core.v1.ConfigMap(
    "smoke",
    metadata={"name": "smoke", "namespace": "default"},
    data={"greeting": "hello"},
    opts=pulumi.ResourceOptions(provider=provider),
)
pulumi.export("greeting", "hello")
pulumi.export("configmap", cm.metadata["name"])
EOF
export SMOKE_RENDER_DIR="$WORK/rendered"

cd "$PROJ"
case "$PLUGIN_MODE" in
  path) ;;
  cache)
    # The version the SDK will ask for: pulumi_kubernetes' plugin version.
    want=$("$VENV/bin/python" -c 'import pulumi_kubernetes._utilities as u; print(u.get_version())')
    run plugin install resource kubernetes "$want" --file "$PULUMI_RESOURCE_KUBERNETES"
    export PULUMI_IGNORE_AMBIENT_PLUGINS=true PULUMI_DEV=true ;;
  *) die "PLUGIN_MODE must be path or cache, not '$PLUGIN_MODE'" ;;
esac
run login "file://$WORK/state"
run stack init smoke
run up --yes
[[ "$(pulumi stack output greeting)" == hello ]] || die "stack output greeting is not hello"
[[ "$(pulumi stack output configmap)" == smoke ]] || die "stack output configmap is not smoke"
rendered=$(find "$SMOKE_RENDER_DIR" -name '*.yaml' | head -n 1)
[[ -n "$rendered" ]] || die "no YAML rendered under $SMOKE_RENDER_DIR"
grep -q 'greeting: hello' "$rendered" || die "rendered $rendered lacks the ConfigMap data"
log "rendered ${rendered#"$WORK/"}:"
cat "$rendered" >&2
run preview --expect-no-changes
run destroy --yes
[[ -z "$(find "$SMOKE_RENDER_DIR" -name '*.yaml')" ]] || die "destroy left rendered YAML behind"
run stack rm --yes smoke

# --- YAML, a component package, and SDKs for Go and Node.js -------------------
# A YAML program with only an output.
mkdir -p "$WORK/yaml-outputs"
cd "$WORK/yaml-outputs"
printf 'name: yaml-smoke\nruntime: yaml\noutputs:\n  x: 1\n' > Pulumi.yaml
run stack init smoke
run preview
run up --yes
[[ "$(pulumi stack output x)" == 1 ]] || die "YAML stack output x is not 1"
run destroy --yes
run stack rm --yes smoke
# A source-based component package written in YAML (no provider binary: the
# YAML host runs it), added to a YAML program with `pulumi package add <dir>`,
# which writes sdks/greeter/greeter-0.1.0.yaml and a `packages:` entry. The
# version is set so that the plugin reports one (without it the engine warns
# "resource plugin greeter is expected to have version >=0.0.0, but has ").
mkdir -p "$WORK/greeter" "$WORK/yaml-component"
cat > "$WORK/greeter/PulumiPlugin.yaml" <<'EOF'
name: greeter
version: 0.1.0
runtime: yaml
components:
  Greeting:
    inputs:
      who:
        type: string
    outputs:
      message: Hello, ${who}!
EOF
cd "$WORK/yaml-component"
cat > Pulumi.yaml <<'EOF'
name: yaml-component-smoke
runtime: yaml
resources:
  hi:
    type: greeter:index:Greeting
    properties:
      who: world
outputs:
  message: ${hi.message}
EOF
run package add ../greeter
grep -q '^  greeter: \.\./greeter$' Pulumi.yaml || die "package add wrote no packages: entry for greeter"
[[ -f sdks/greeter/greeter-0.1.0.yaml ]] || die "package add wrote no sdks/greeter/greeter-0.1.0.yaml"
run stack init smoke
run up --yes
[[ "$(pulumi stack output message)" == "Hello, world!" ]] || die "component output message is not 'Hello, world!'"
run destroy --yes
run stack rm --yes smoke
# SDKs from the package's schema: the CLI has no code generator of its own, it
# calls GeneratePackage of pulumi-language-go and pulumi-language-nodejs.
cd "$WORK"
pulumi package get-schema ./greeter > greeter-schema.json
run package gen-sdk ./greeter-schema.json --language go --out "$WORK/sdk"
run package gen-sdk ./greeter-schema.json --language nodejs --out "$WORK/sdk"
[[ -f sdk/go/greeter/greeting.go ]] || die "gen-sdk --language go wrote no sdk/go/greeter/greeting.go"
[[ -f sdk/nodejs/greeting.ts ]] || die "gen-sdk --language nodejs wrote no sdk/nodejs/greeting.ts"

# Every warning the CLI printed, minus the two that PLUGIN_MODE=path expects.
# shellcheck disable=SC2016 # a literal $PATH in the pattern
unexpected=$(grep -o 'warning: .*' "$WORK/pulumi.log" | sort -u \
  | grep -v -e 'warning: using pulumi-resource-kubernetes from \$PATH at ' \
            -e 'warning: resource plugin kubernetes is expected to have version >=.*, but has ' || true)
if [[ "$PLUGIN_MODE" == cache ]] && grep -q 'warning: ' "$WORK/pulumi.log"; then
  die "PLUGIN_MODE=cache still printed warnings: $(grep -o 'warning: .*' "$WORK/pulumi.log" | sort -u)"
fi
[[ -z "$unexpected" ]] || die "unexpected warnings: $unexpected"
log "OK (PLUGIN_MODE=$PLUGIN_MODE)"
