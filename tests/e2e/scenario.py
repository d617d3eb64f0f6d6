"""The tutorial's scenario on a real Kueue: objects from the offline plan, jobs submitted, Kueue's verdicts read.

Shared by the end-to-end tests (tests/e2e/test_fallback_e2e.py, and tests/e2e/gke_scenarios.py for the simulated
GKE) and the benchmarks (tests/e2e/benchmark.py, tests/e2e/benchmark_gke_sim.py).
"""

from __future__ import annotations

import copy
import functools
import time
from dataclasses import dataclass
from typing import Any

from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

INFRA_STACK = "organization/tpu-fallback/dev"
KUEUE_API = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class Case:
    """One infra configuration under test, isolated by its own ClusterQueue and namespace."""

    cluster_queue: str
    namespace: str
    infra_overrides: dict[str, Any]

    def overrides(self) -> dict[str, Any]:
        if self.cluster_queue == "cluster-queue" and self.namespace == "default":
            return dict(self.infra_overrides)  # the dev stack exactly as the tutorial has it
        local_queues = [{"namespace": self.namespace, "name": "user-queue"}]
        queues = {**self.infra_overrides.get("queues", {}), "clusterQueue": self.cluster_queue,
                  "localQueues": local_queues}
        return {**self.infra_overrides, "queues": queues}


def render_infra(case: Case) -> ProgramRun:
    return run_program(REPO_ROOT, "dev", case.overrides())


def render_jobs(infra: ProgramRun, case: Case, count: int, name: str = "rayjob-tpu-v6e-dws") -> list[dict[str, Any]]:
    """The jobs dev stack's objects (ConfigMap, RayJobs) for `count` copies on the case's queue."""
    return render_queue_jobs(infra, f"{case.namespace}/user-queue", count, name)


def render_queue_jobs(infra: ProgramRun, queue: str, count: int, name: str = "rayjob-tpu-v6e-dws"
                      ) -> list[dict[str, Any]]:
    """The jobs dev stack's objects (ConfigMap, RayJobs) for `count` copies on `queue` ("namespace/name"),
    with the infra stack's outputs (any infra stack: they are handed over as the dev stack's reference)."""
    refs = {INFRA_STACK: {"outputs": copy.deepcopy(infra.outputs), "secretOutputNames": sorted(infra.secret_outputs)}}
    jobs = [{"name": name, "count": count, "queue": queue}]
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": jobs}, stack_references=refs)
    return run.kubernetes_objects()  # the ConfigMap, then <name>-1, <name>-2, ... as the tutorial submits them


def apply_infra(client: KubeClient, infra: ProgramRun) -> None:
    """Everything the infra stack creates in Kubernetes except the Helm release (the running Kueue replaces it)."""
    for obj in infra.kubernetes_objects():
        client.apply(obj)
    cq = next(o for o in infra.kubernetes_objects() if o["kind"] == "ClusterQueue")
    client.wait_for(lambda: true_condition(client.get(KUEUE_API, "ClusterQueue", cq["metadata"]["name"]), "Active"),
                    60, f"ClusterQueue {cq['metadata']['name']} Active")


def true_condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    """The object's condition of that type if its status is True, else None."""
    if not obj:
        return None
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0] if found and found[0]["status"] == "True" else None


def condition_status(obj: dict[str, Any], kind: str) -> str | None:
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind]
    return found[0]["status"] if found else None


def workload_of(client: KubeClient, namespace: str, job_name: str) -> dict[str, Any] | None:
    for workload in client.list(KUEUE_API, "Workload", namespace):
        owners = workload["metadata"].get("ownerReferences", [])
        if any(o["kind"] == "RayJob" and o["name"] == job_name for o in owners):
            return workload
    return None


def flavors(workload: dict[str, Any]) -> dict[str, set[str]]:
    """PodSet name -> the flavors its resources were assigned."""
    assignments = workload.get("status", {}).get("admission", {}).get("podSetAssignments", [])
    return {a["name"]: set(a.get("flavors", {}).values()) for a in assignments}


def evaluated(workload: dict[str, Any] | None) -> dict[str, Any] | None:
    """A workload Kueue has decided on: quota reserved, or found not to fit (QuotaReserved False with a reason)."""
    if workload is None:
        return None
    status = condition_status(workload, "QuotaReserved")
    if status == "True":
        return workload
    pending = [c for c in workload.get("status", {}).get("conditions", [])
               if c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message")]
    return workload if pending else None


def submit(client: KubeClient, objects: list[dict[str, Any]], timeout: float = 60) -> list[tuple[str, float]]:
    """Apply the ConfigMap, then the RayJobs one at a time (as the tutorial's loop does), each after the
    previous one has been evaluated, so the order of admission is the order of submission.
    Returns (job name, seconds from creation to a decision) per job."""
    timings = []
    for obj in objects:
        if obj["kind"] != "RayJob":
            client.apply(obj)
    for obj in objects:
        if obj["kind"] != "RayJob":
            continue
        started = time.perf_counter()
        client.apply(obj)
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        client.wait_for(functools.partial(_decision, client, namespace, name), timeout,
                        f"Kueue's decision on RayJob {namespace}/{name}")
        timings.append((name, time.perf_counter() - started))
    return timings


def _decision(client: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    return evaluated(workload_of(client, namespace, name))


def provisioning_requests(client: KubeClient, namespace: str, workload: dict[str, Any]) -> list[dict[str, Any]]:
    name = workload["metadata"]["name"]
    return [pr for pr in client.list("autoscaling.x-k8s.io/v1", "ProvisioningRequest", namespace)
            if any(o.get("name") == name for o in pr["metadata"].get("ownerReferences", []))]


def time_to_flavor(client: KubeClient, objects: list[dict[str, Any]], timeout: float = 120) -> tuple[float, float]:
    """Create every RayJob at once; seconds until the first and the last Workload have flavors assigned."""
    jobs = [o for o in objects if o["kind"] == "RayJob"]
    for obj in objects:
        if obj["kind"] != "RayJob":
            client.apply(obj)
    started = time.perf_counter()
    for obj in jobs:
        client.apply(obj)
    done: dict[str, float] = {}

    def all_assigned() -> bool | None:
        for obj in jobs:
            name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
            if name not in done:
                workload = workload_of(client, namespace, name)
                if workload and flavors(workload):
                    done[name] = time.perf_counter() - started
        return True if len(done) == len(jobs) else None

    client.wait_for(all_assigned, timeout, f"flavors for {len(jobs)} RayJobs")
    return min(done.values()), max(done.values())
