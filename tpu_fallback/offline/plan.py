"""Offline plan: evaluate a stack without cloud credentials or the Pulumi CLI.

It runs the project's real `__main__.py` under Pulumi's mock runtime with the stack's config (as the
CLI would hand it over) and writes every Kubernetes object as YAML plus a readable summary of the
cloud resources and stack outputs (secrets masked). It renders the program; it is NOT a diff
against live state: `pulumi preview` is still what tells you what would change.

    python -m tpu_fallback.offline.plan dev                  # infra project, stack dev
    python -m tpu_fallback.offline.plan dev --project jobs   # the jobs project (its infraStack rendered from here)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import (
    REPO_ROOT,
    SECRET_PLACEHOLDER,
    ProgramRun,
    RecordedResource,
    apply_order,
    infra_references,
    kubernetes_manifest,
    run_program,
    whole_numbers,
)

DEFAULT_OUT = REPO_ROOT / "build" / "plan"


def _mask(value: Any, secret_paths: list[str], path: str = "") -> Any:
    if path in secret_paths or (not path and "." in secret_paths):
        return SECRET_PLACEHOLDER
    if isinstance(value, dict):
        return {k: _mask(v, secret_paths, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, secret_paths, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        rows: list[tuple[str, Any]] = []
        for k, v in value.items():
            rows.extend(_flatten(v, f"{prefix}.{k}" if prefix else k))
        return rows
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        rows = []
        for i, v in enumerate(value):
            rows.extend(_flatten(v, f"{prefix}[{i}]"))
        return rows
    return [(prefix, value)]


def _short(urn: str) -> str:
    return urn.split("::")[-1]


def _kubernetes_resources(run: ProgramRun) -> list[RecordedResource]:
    """Kubernetes objects in apply order; the logical name breaks ties between clusters of one stack."""
    found = [r for r in run.resources
             if r.type.startswith("kubernetes:") and not r.type.startswith("kubernetes:helm.sh/")]
    return sorted(found, key=lambda r: (apply_order(kubernetes_manifest(r)), r.name))


def _target(resource: RecordedResource) -> str:
    """The Kubernetes provider (so the cluster) an object is applied with: `<urn>::<id>` -> its logical name."""
    return resource.provider.split("::")[-2] if resource.provider else "default provider"


def kubernetes_yaml(run: ProgramRun) -> str:
    documents = [
        f"# cluster: {_target(r)}\n" + yaml.safe_dump(_mask(kubernetes_manifest(r), r.secret_inputs), sort_keys=False)
        for r in _kubernetes_resources(run)
    ]
    return "---\n".join(documents)


def summary(run: ProgramRun) -> str:
    lines = [
        f"# Offline plan of {run.project} stack {run.stack}",
        "",
        "Rendered from the program under Pulumi's mock runtime; NOT a diff against live state.",
        "Values computed by the cloud (endpoints, emails, ids) are placeholders.",
        "",
    ]
    cloud = sorted((r for r in run.resources if r.custom and not r.type.startswith("kubernetes:")),
                   key=lambda r: (r.type, r.name))
    helm = sorted((r for r in run.resources if r.type.startswith("kubernetes:helm.sh/")), key=lambda r: r.name)
    kube = _kubernetes_resources(run)
    lines.append(f"## Cloud resources ({len(cloud)})")
    for resource in cloud:
        lines.extend(_describe(resource))
    lines.append(f"## Helm releases ({len(helm)})")
    for resource in helm:
        lines.extend(_describe(resource))
    lines.append(f"## Kubernetes objects ({len(kube)}), full YAML in kubernetes.yaml")
    for resource in kube:
        manifest = resource.inputs
        meta = manifest.get("metadata") or {}
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        kind = manifest.get("kind") or resource.type.split(":")[-1]
        deps = ", ".join(sorted(_short(d) for d in resource.dependencies)) or "-"
        lines.append(f"- {kind} {where}{meta.get('name', resource.name)}  [{_target(resource)}]  (waits for: {deps})")
    lines.append("")
    lines.append("## Stack outputs")
    for name in sorted(run.outputs):
        shown = SECRET_PLACEHOLDER if name in run.secret_outputs else json.dumps(run.outputs[name])
        lines.append(f"- {name}: {shown}")
    components = [r for r in run.resources if not r.custom]
    lines.append("")
    lines.append(f"Totals: {len(run.resources)} registrations ({len(components)} components, "
                 f"{len(cloud)} cloud resources, {len(helm)} Helm releases, {len(kube)} Kubernetes objects)")
    return "\n".join(lines) + "\n"


# Inputs whose change makes the provider replace the resource (pulumi-gcp = terraform-provider-google:
# ForceNew in google/services/container/resource_container_node_pool.go, node_config.go and
# resource_container_cluster.go). A reviewer must not miss a change to these on a running TPU pool or cluster.
# placementPolicy is flagged whole: the block is ForceNew, and a new tpuTopology needs a new pool in any case.
FORCES_REPLACEMENT: dict[str, tuple[str, ...]] = {
    "gcp:container/nodePool:NodePool": (
        "name", "cluster", "location", "project", "initialNodeCount", "maxPodsPerNode", "placementPolicy",
        "queuedProvisioning", "nodeConfig.reservationAffinity", "nodeConfig.flexStart", "nodeConfig.maxRunDuration",
        "nodeConfig.shieldedInstanceConfig", "nodeConfig.serviceAccount", "nodeConfig.oauthScopes",
        "nodeConfig.spot", "nodeConfig.preemptible", "nodeConfig.guestAccelerators", "nodeConfig.metadata",
    ),
    "gcp:container/cluster:Cluster": (
        "name", "location", "project", "network", "subnetwork", "enableAutopilot", "privateClusterConfig",
        "initialNodeCount",
    ),
    "gcp:serviceaccount/account:Account": ("accountId", "project"),
}


def _replacement_note(resource: RecordedResource, key: str) -> str:
    top = key.split("[")[0]
    if any(top == i or top.startswith(f"{i}.") for i in resource.options.get("ignoreChanges", [])):
        return "  # ignored after creation (ignore_changes)"
    forcing = FORCES_REPLACEMENT.get(resource.type, ()) + tuple(resource.options.get("replaceOnChanges", []))
    if any(top == f or top.startswith(f"{f}.") for f in forcing):
        return "  # changing it REPLACES the resource"
    return ""


def _describe(resource: RecordedResource) -> list[str]:
    flags = []
    if resource.protect:
        flags.append("protect")
    head = f"### {resource.type}  {resource.name}" + (f"  [{', '.join(flags)}]" if flags else "")
    rows = [head]
    inputs = _mask(whole_numbers(resource.inputs), resource.secret_inputs)
    for key, value in _flatten(inputs):
        if key == "name" and value == resource.name:
            continue
        rows.append(f"    {key} = {json.dumps(value)}{_replacement_note(resource, key)}")
    if resource.dependencies:
        rows.append(f"    (waits for: {', '.join(sorted(_short(d) for d in resource.dependencies))})")
    rows.append("")
    return rows


def write_plan(run: ProgramRun, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    kube_path, summary_path = out_dir / "kubernetes.yaml", out_dir / "summary.md"
    kube_path.write_text(kubernetes_yaml(run))
    summary_path.write_text(summary(run))
    return kube_path, summary_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--project", default=".", help="project directory relative to the repository (default: .)")
    parser.add_argument("--out", type=Path, help="output directory (default: build/plan/<project>-<stack>)")
    parser.add_argument(
        "--stack-outputs", type=Path,
        help="JSON file of mocked outputs for StackReferences: {stackName: {outputs, secretOutputNames}}",
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the summary")
    args = parser.parse_args(argv)

    project_dir = (REPO_ROOT / args.project).resolve()
    name = "infra" if args.project in (".", "") else Path(args.project).name
    out_dir = args.out or DEFAULT_OUT / f"{name}-{args.stack}"
    shutil.rmtree(out_dir, ignore_errors=True)  # a failed render must not leave an earlier plan looking current
    started = time.perf_counter()
    try:
        if args.stack_outputs:
            references = json.loads(args.stack_outputs.read_text())
        else:  # a jobs stack: render its infraStack from this repository first
            references = infra_references(project_dir, args.stack)
        run = run_program(project_dir, args.stack, stack_references=references, raise_errors=False)
    except (FileNotFoundError, ValueError, yaml.YAMLError) as err:
        print(f"offline plan: cannot read stack {args.stack!r}: {err}", file=sys.stderr)
        return 2
    if run.error is not None:
        kind = "configuration error" if isinstance(run.error, ConfigError) else type(run.error).__name__
        print(f"offline plan of stack {args.stack!r} failed: {kind}: {run.error}", file=sys.stderr)
        print(f"({len(run.resources)} resources were registered before the failure)", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    kube_path, summary_path = write_plan(run, out_dir)
    if not args.quiet:
        print(summary_path.read_text())
    print(f"Rendered {len(run.resources)} registrations in {elapsed:.2f}s "
          f"(a render of the program, not a diff against live state).")
    print(f"Kubernetes objects: {_relative(kube_path)}")
    print(f"Summary:            {_relative(summary_path)}")
    return 0


def _relative(path: Path) -> Path:
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


if __name__ == "__main__":
    code = main()
    # The mock monitor's worker threads each opened an asyncio loop that is never closed; skip the
    # interpreter's teardown so their garbage collection does not print tracebacks after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
