"""Benchmark the offline plan: resources in the graph, wall time and peak memory per scenario.

    python -m tools.benchmark                                  # all scenarios, a table on stdout
    python -m tools.benchmark --scenario dev --scenario workers:3   # only these

(Kueue's admission latency on a real control plane is measured by `python -m tests.e2e.benchmark`.)

Each scenario runs in a fresh interpreter (so peak memory is its own): the dev stack (`dev`); the multi-region
stack with 1, 3, 10 and 20 workers (`workers:N`); the jobs stack with 1, 10 and 100 jobs (`jobs:N`). Wall time
and CPU time (the second hardly moves when the machine is busy). Figures are printed, never asserted: they belong
in docs/measurements.md, not in a timed test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from tpu_fallback.model import catalog

KINDS = ("dev", "workers", "jobs")
SCENARIOS: list[tuple[str, int]] = [("dev", 0)] + [("workers", n) for n in (1, 3, 10, 20)] + [
    ("jobs", n) for n in (1, 10, 100)]


def worker_zones(workers: int) -> list[tuple[str, bool]]:
    """(zone, plan B on) for each worker: the v6e zones of the catalog in turn, plan B only where GKE offers v6e
    flex-start (as Pulumi.global.yaml's europe worker does), since the program refuses flex-start elsewhere."""
    family = catalog.FAMILIES["v6e"]
    zones = sorted(family.known_zones)
    picked = [zones[i % len(zones)] for i in range(workers)]
    return [(zone, zone in family.flex_start_zones) for zone in picked]


def multikueue_overrides(workers: int) -> dict[str, Any]:
    return {
        "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}, "podMonitoring": True},
        "multikueue": {"enabled": True, "manager": {"location": "europe-west4"},
                       "workers": [{"name": f"w{i}", "location": zone, "flexStart": {"enabled": flex}}
                                   for i, (zone, flex) in enumerate(worker_zones(workers))]},
    }


def measure(kind: str, n: int) -> dict[str, Any]:
    from tpu_fallback.offline.mockrun import REPO_ROOT, infra_references, run_program

    started, cpu_started = time.perf_counter(), time.process_time()
    if kind == "dev":
        run = run_program(REPO_ROOT, "dev")
    elif kind == "workers":
        run = run_program(REPO_ROOT, "global", multikueue_overrides(n))
    else:
        refs = infra_references(REPO_ROOT / "jobs", "dev")
        # time the jobs program only, not the infra render it reads
        started, cpu_started = time.perf_counter(), time.process_time()
        run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": [{"name": "bench", "count": n}]}, stack_references=refs)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"resources": len(run.resources), "seconds": round(elapsed, 3), "cpu_seconds": round(cpu, 3),
            "peak_mib": round(peak_kib / 1024, 1)}


def scenario(text: str) -> tuple[str, int]:
    """`dev`, `workers:N` or `jobs:N` (N >= 1)."""
    kind, _, count = text.partition(":")
    if kind == "dev" and not count:
        return ("dev", 0)
    if kind in ("workers", "jobs") and count.isdigit() and int(count) >= 1:
        return (kind, int(count))
    raise argparse.ArgumentTypeError(f"scenario {text!r} is invalid: use dev, workers:N or jobs:N (N >= 1)")


def label(kind: str, n: int) -> str:
    plural = "" if n == 1 else "s"
    return {"dev": "infra dev stack", "workers": f"multi-region, {n} worker{plural}",
            "jobs": f"jobs stack, {n} job{plural}"}[kind]


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(argv[1], int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=scenario, action="append", metavar="dev|workers:N|jobs:N",
                        help="run only this scenario (repeatable); default: all of them")
    args = parser.parse_args(argv)
    for kind, n in args.scenario or SCENARIOS:
        out = subprocess.run([sys.executable, "-m", "tools.benchmark", "--one", kind, str(n)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.stderr.write(out.stderr)
            print(f"{label(kind, n)}: failed (exit code {out.returncode})", file=sys.stderr)
            return 1
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{label(kind, n):<28} {figures['resources']:>6} resources  {figures['seconds']:>7.2f} s"
              f"  {figures['cpu_seconds']:>7.2f} CPU s  {figures['peak_mib']:>7.1f} MiB peak", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
