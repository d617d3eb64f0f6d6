"""What an infra stack needs to exist in Google Cloud before it can be previewed or deployed (issue 39 item 5).

The preview workflow previews every example stack. Three of them lean on things the stack never creates:

- existing-cluster mode (`existingCluster`) *reads* the cluster by name and location while the program runs, so
  `pulumi preview` itself fails when the cluster is not there: that prerequisite is blocking, and without it the
  workflow skips the stack's preview with a notice saying why;
- a stack's `network.network` / `network.subnetwork` and a ladder rung's `reservation` are only referenced: a
  preview of a stack with no state plans them as inputs and succeeds, `pulumi up` would fail. Those are warnings.

It reads the stack file as the program does (tpu_fallback.offline.stacks.infra_settings) and, with --check, asks
`gcloud ... describe` for each one with the caller's (read-only) credentials.

    python -m tools.prerequisites existing                 # list them
    python -m tools.prerequisites existing --check --github-output "$GITHUB_OUTPUT"   # check; preview=true|false
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpu_fallback.model.settings import Settings
from tpu_fallback.offline.mockrun import REPO_ROOT
from tpu_fallback.offline.stacks import infra_settings


@dataclass(frozen=True)
class Prerequisite:
    kind: str  # cluster, network, subnetwork, reservation
    name: str
    where: str  # the cluster's location, the subnetwork's region, the reservation's zone; "global" for a network
    project: str
    blocking: bool  # True: `pulumi preview` fails without it; False: only `pulumi up` would
    key: str  # the stack setting that names it, for messages

    def command(self) -> list[str]:
        """The read-only `gcloud ... describe` that succeeds when it exists."""
        base = {
            "cluster": ["container", "clusters", "describe", self.name, "--location", self.where],
            "network": ["compute", "networks", "describe", self.name],
            "subnetwork": ["compute", "networks", "subnets", "describe", self.name, "--region", self.where],
            "reservation": ["compute", "reservations", "describe", self.name, "--zone", self.where],
        }[self.kind]
        return ["gcloud", *base, "--project", self.project, "--format", "value(name)"]

    def describe(self) -> str:
        place = "" if self.where == "global" else f" in {self.where}"
        return f"{self.kind} {self.name}{place} (project {self.project}, from {self.key})"


def prerequisites(settings: Settings) -> list[Prerequisite]:
    """Everything the stack references in Google Cloud without creating it, blocking ones first."""
    found: list[Prerequisite] = []
    existing = settings.existing_cluster
    if existing is not None and not existing.kubeconfig:
        # components/existing.py: gcp.container.Cluster.get(...) for the endpoint and CA, during preview too.
        found.append(Prerequisite("cluster", existing.name, existing.location, settings.project, True,
                                  "existingCluster"))
    network = settings.network
    if network.network:
        found.append(Prerequisite("network", network.network, "global", settings.project, False, "network.network"))
    if network.subnetwork:
        found.append(Prerequisite("subnetwork", network.subnetwork, settings.region, settings.project, False,
                                  "network.subnetwork"))
    if existing is None:
        for rung in settings.capacity_ladder.rungs:
            if rung.reservation is not None:
                found.append(Prerequisite("reservation", rung.reservation.name, settings.location,
                                          rung.reservation.project or settings.project, False,
                                          f"{rung.key}.reservation"))
    for worker in settings.multikueue.workers:  # MultiKueue: each worker cluster has its own network and rungs
        found.extend(item for item in prerequisites(worker.settings) if item not in found)
    return found


Runner = Callable[[list[str]], bool]


def _gcloud(command: list[str]) -> bool:
    try:
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):  # no gcloud on PATH, or no answer: not found, as far as we know
        return False


def check(stack: str, found: list[Prerequisite], run: Runner | None = None) -> tuple[bool, list[str]]:
    """(whether `pulumi preview` can run, the GitHub annotations to print); `run`: gcloud by default."""
    run = run or _gcloud
    can_preview = True
    lines: list[str] = []
    for item in found:
        if run(item.command()):
            lines.append(f"{stack}: {item.describe()} exists")
        elif item.blocking:
            can_preview = False
            lines.append(f"::notice::{stack}: not previewed: the stack reads the {item.describe()}, which does not "
                         "exist or the preview identity cannot read it. Point the stack file at a real one to "
                         "preview it.")
        else:
            lines.append(f"::warning::{stack}: the {item.describe()} does not exist or the preview identity cannot "
                         "read it: the preview plans it as an input, `pulumi up` would fail.")
    return can_preview, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="infra stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--project-dir", type=Path, default=REPO_ROOT, help="the infra project's directory")
    parser.add_argument("--check", action="store_true", help="ask gcloud whether each one exists")
    parser.add_argument("--github-output", type=Path, help="append preview=true|false to this file ($GITHUB_OUTPUT)")
    args = parser.parse_args(argv)
    try:
        found = prerequisites(infra_settings(args.project_dir, args.stack))
    except (ValueError, OSError) as err:  # a bad stack config, or no such stack file
        print(f"{args.stack}: {err}", file=sys.stderr)
        return 2
    if not args.check:
        for item in found:
            print(("blocking  " if item.blocking else "for up    ") + item.describe())
        if not found:
            print(f"{args.stack}: nothing outside the stack")
        return 0
    can_preview, lines = check(args.stack, found)
    print("\n".join(lines) or f"{args.stack}: nothing outside the stack")
    if args.github_output is not None:
        with args.github_output.open("a") as out:
            out.write(f"preview={'true' if can_preview else 'false'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
