"""Benchmark the offline plan: resources in the graph, wall time and peak memory per scenario.

    python -m tools.benchmark            # all scenarios, a table on stdout

(Kueue's admission latency on a real control plane is measured by `python -m tests.e2e.benchmark`.)

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

from tpu_fallback.model import catalog

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
    from tpu_fallback.offline.mockrun import REPO_ROOT, infra_references, run_program

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


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(measure(argv[1], int(argv[2]))))
        return 0
    for kind, n in SCENARIOS:
        out = subprocess.run([sys.executable, "-m", "tools.benchmark", "--one", kind, str(n)],
                             capture_output=True, text=True, check=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        label = {"dev": "infra dev stack", "workers": f"multi-region, {n} workers", "jobs": f"jobs stack, {n} jobs"}
        print(f"{label[kind]:<28} {figures['resources']:>6} resources  {figures['seconds']:>7.2f} s"
              f"  {figures['peak_mib']:>7.1f} MiB peak", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
