"""Offline policy check: the CrossGuard pack's rules (tpu_fallback/policy/checks.py) over the offline plan.

Evaluates a stack under Pulumi's mock runtime (tpu_fallback/offline/mockrun.py), exactly like the offline plan, and
runs every policy of the pack over what it registered: resource policies over each resource's inputs
and options, stack policies over all of them plus the stack outputs. No Pulumi CLI, no credentials.
The real pack (`pulumi preview --policy-pack policy`) sees the same rules, on the engine's values.

    python -m tools.policycheck                   # every stack of the infra project (Pulumi.*.yaml)
    python -m tools.policycheck dev prod          # some stacks
    python -m tools.policycheck dev --project jobs --stack-outputs refs.json

Exit status: 0 no violation, 1 violations, 2 a stack could not be evaluated.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program
from tpu_fallback.policy.checks import STACK, Context, Resource, Violation, evaluate


def policy_resources(run: ProgramRun) -> list[Resource]:
    """The run's registrations as the policies see them, plus the stack (its outputs) as pulumi:pulumi:Stack."""
    resources = [
        Resource(r.type, r.inputs, name=r.name, urn=r.urn, protect=r.protect, secret_paths=frozenset(r.secret_inputs))
        for r in run.resources
    ]
    stack_urn = f"urn:pulumi:{run.stack}::{run.project}::{STACK}::{run.project}-{run.stack}"
    resources.append(Resource(STACK, run.outputs, name=f"{run.project}-{run.stack}", urn=stack_urn,
                              secret_paths=frozenset(run.secret_outputs)))
    return resources


def check_run(run: ProgramRun) -> list[Violation]:
    return evaluate(policy_resources(run), Context(stack=run.stack))


def stacks_of(project_dir: Path) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))


def _short(urn: str) -> str:
    return urn.split("::")[-1] if urn else "(stack)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stacks", nargs="*", help="stack names (default: every Pulumi.<stack>.yaml of the project)")
    parser.add_argument("--project", default=".", help="project directory relative to the repository (default: .)")
    parser.add_argument(
        "--stack-outputs", type=Path,
        help="JSON file of mocked outputs for StackReferences: {stackName: {outputs, secretOutputNames}}",
    )
    args = parser.parse_args(argv)

    project_dir = (REPO_ROOT / args.project).resolve()
    references: dict[str, Any] | None = json.loads(args.stack_outputs.read_text()) if args.stack_outputs else None
    stacks = args.stacks or stacks_of(project_dir)
    if not stacks:
        print(f"policy check: no Pulumi.<stack>.yaml in {project_dir}", file=sys.stderr)
        return 2
    status = 0
    for stack in stacks:
        try:
            run = run_program(project_dir, stack, stack_references=references, raise_errors=False)
        except (FileNotFoundError, yaml.YAMLError) as err:
            print(f"policy check: cannot read stack {stack!r}: {err}", file=sys.stderr)
            return 2
        if run.error is not None:
            print(f"policy check of stack {stack!r}: the program failed: {type(run.error).__name__}: {run.error}",
                  file=sys.stderr)
            return 2
        violations = check_run(run)
        label = f"{run.project}/{stack}"
        if not violations:
            print(f"policy check {label}: {len(run.resources)} resources, no violations")
            continue
        status = 1
        print(f"policy check {label}: {len(violations)} violation(s)")
        for v in violations:
            print(f"  [{v.policy}] {_short(v.urn)}: {v.message}")
    return status


if __name__ == "__main__":
    code = main()
    # As the offline plan does: skip the interpreter's teardown of the mock monitor's never-closed loops.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
