"""Kueue's admission latency on a real control plane: seconds from creating RayJobs to flavors assigned.

    python -m tests.e2e.benchmark

Builds (or reuses) the end-to-end components like the e2e tests. Figures are printed, never asserted.
"""

from __future__ import annotations

from tests.e2e import scenario
from tests.e2e.controlplane import ControlPlane


def kueue_latency() -> None:
    """Seconds from creating RayJobs to their Workloads having flavors, for 1 and 20 jobs, on a real Kueue."""
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



if __name__ == "__main__":
    kueue_latency()
