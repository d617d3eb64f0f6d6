"""Benchmark the offline plan: resources in the graph, wall time and peak memory per scenario.

    python -m tools.benchmark            # all scenarios, a table on stdout
    python -m tools.benchmark --e2e      # also Kueue's admission latency on a real control plane (tests/e2e)

Each scenario runs in a fresh interpreter (so peak memory is its own): the dev stack; the multi-region
stack with 1, 3, 10 and 20 workers; the jobs stack with 1, 10 and 100 jobs. Figures are printed, never
asserted: they belong in the README, not in a timed test.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from typing import Any

from components import catalog

SCENARIOS: list[tuple[str, int]] = [("dev", 0)] + [("workers", n) for n in (1, 3, 10, 20)] + [
    ("jobs", n) for n in (1, 10, 100)]


def multikueue_overrides(workers: int) -> dict[str, Any]:
    zones = sorted(catalog.FAMILIES["v6e"].known_zones)
    return {
        "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}, "podMonitoring": True},
        "multikueue": {"enabled": True, "manager": {"location": "europe-west4"},
                       "workers": [{"name": f"w{i}", "location": zones[i % len(zones)]} for i in range(workers)]},
    }


def measure(kind: str, n: int) -> dict[str, Any]:
    from tools.mockrun import REPO_ROOT, infra_references, run_program

    started = time.perf_counter()
    if kind == "dev":
        run = run_program(REPO_ROOT, "dev")
    elif kind == "workers":
        run = run_program(REPO_ROOT, "global", multikueue_overrides(n))
    else:
        refs = infra_references(REPO_ROOT / "jobs", "dev")
        started = time.perf_counter()  # time the jobs program only, not the infra render it reads
        run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": [{"name": "bench", "count": n}]}, stack_references=refs)
    elapsed = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"resources": len(run.resources), "seconds": round(elapsed, 3), "peak_mib": round(peak_kib / 1024, 1)}


def kueue_latency() -> None:
    """Seconds from creating RayJobs to their Workloads having flavors, for 1 and 20 jobs, on a real Kueue."""
    from tests.e2e import scenario
    from tests.e2e.controlplane import ControlPlane

    with ControlPlane() as plane:
        for count in (1, 20):
            # Room on the CPU pool for every job's Ray head (3 CPU / 4.7Gi each): the tutorial's 10 CPU admits 3.
            system = {"cpu": 3 * count + 1, "memory": f"{5 * count}Gi"}
            case = scenario.Case(f"cq-bench-{count}", f"bench-{count}", {"queues": {"quotas": {"system": system}}})
            infra = scenario.render_infra(case)
            scenario.apply_infra(plane.client, infra)
            first, last = scenario.time_to_flavor(plane.client, scenario.render_jobs(infra, case, count, "bench"))
            print(f"Kueue, {count:>2} RayJob(s) created at once: flavors assigned after {first:.2f} s (first) "
                  f"to {last:.2f} s (last)", flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(argv[1], int(argv[2]))))
        return 0
    rows = []
    for kind, n in SCENARIOS:
        out = subprocess.run([sys.executable, "-m", "tools.benchmark", "--one", kind, str(n)],
                             capture_output=True, text=True, check=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        label = {"dev": "infra dev stack", "workers": f"multi-region, {n} workers", "jobs": f"jobs stack, {n} jobs"}
        rows.append((label[kind], figures))
        print(f"{label[kind]:<28} {figures['resources']:>6} resources  {figures['seconds']:>7.2f} s"
              f"  {figures['peak_mib']:>7.1f} MiB peak", flush=True)
    if "--e2e" in argv:
        kueue_latency()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
