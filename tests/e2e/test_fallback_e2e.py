"""Prove the fallback on a real Kueue (issue: end-to-end test).

A real kube-apiserver, etcd and Kueue controller (built from Go modules by build_components.sh) with
the CRDs of Kueue, KubeRay and the ProvisioningRequest API. The objects are the ones the offline plan
renders for the infra and jobs dev stacks; Kueue itself decides where each RayJob goes. Selected by
the `e2e` marker; `./scripts/test` runs it (set TPU_FALLBACK_SKIP_E2E=1 to leave it out).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import scenario
from tests.e2e.kube import KubeClient
from tests.e2e.scenario import Case

pytestmark = pytest.mark.e2e

TUTORIAL = Case("cluster-queue", "default", {})
TWO_SLICES = Case("cq-two-slices", "two-slices", {"onDemand": {"maxSlices": 2}})
NO_FLEX = Case("cq-no-flex", "no-flex", {"flexStart": {"enabled": False}})
TPU_GROUP, HEAD, SUBMITTER = "tpu-group", "head", "submitter"  # KubeRay's submitter Job is a PodSet too
CPU_ONLY = {HEAD: {"default-cpu"}, SUBMITTER: {"default-cpu"}}


@pytest.fixture(scope="module")
def client() -> Iterator[KubeClient]:
    from tests.e2e.controlplane import ControlPlane

    with ControlPlane() as plane:
        yield plane.client


def run_case(client: KubeClient, case: Case, count: int) -> list[dict[str, Any]]:
    infra = scenario.render_infra(case)
    scenario.apply_infra(client, infra)
    objects = scenario.render_jobs(infra, case, count)
    for name, seconds in scenario.submit(client, objects):
        print(f"{case.namespace}/{name}: Kueue decided in {seconds:.2f} s")
    workloads = []
    for obj in objects:
        if obj["kind"] == "RayJob":
            workload = scenario.workload_of(client, case.namespace, obj["metadata"]["name"])
            assert workload is not None, obj["metadata"]["name"]
            workloads.append(workload)
    return workloads


def test_tutorial_job_1_on_demand_job_2_dws_job_3_dws(client: KubeClient) -> None:
    first, second, third = run_case(client, TUTORIAL, 3)

    # Job 1: the TPU workers on plan A, the Ray head on the CPU pool, admitted (no check on on-demand).
    assert scenario.flavors(first) == {**CPU_ONLY, TPU_GROUP: {"on-demand"}}
    assert scenario.condition_status(first, "Admitted") == "True"
    assert scenario.provisioning_requests(client, "default", first) == []

    # Job 2: plan A's 16 chips are taken, so its TPU PodSet falls back to dws.
    assert scenario.flavors(second) == {**CPU_ONLY, TPU_GROUP: {"dws"}}
    checks = {c["name"]: c["state"] for c in second["status"].get("admissionChecks", [])}
    assert checks == {"dws-prov": "Pending"}
    requests = client.wait_for(lambda: scenario.provisioning_requests(client, "default", second) or None, 30,
                               "the ProvisioningRequest of job 2")
    (request,) = requests
    assert request["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    (pod_set,) = request["spec"]["podSets"]  # only the TPU PodSet: GKE takes one PodSet per request
    assert pod_set["count"] == 4  # hosts per slice of v6e 4x4

    # No autoscaler answers here, so job 2 must stay waiting for DWS: reserved, not admitted.
    time.sleep(3)
    second = scenario.workload_of(client, "default", second["metadata"]["ownerReferences"][0]["name"]) or {}
    assert scenario.condition_status(second, "QuotaReserved") == "True"
    assert scenario.condition_status(second, "Admitted") != "True"

    # Job 3 also lands on dws (its quota is unlimited, as in the tutorial).
    assert scenario.flavors(third) == {**CPU_ONLY, TPU_GROUP: {"dws"}}


def test_the_system_quota_caps_concurrent_jobs(client: KubeClient) -> None:
    """Each job's Ray head and submitter take 2.5 CPU of default-cpu; the tutorial's 10 CPU admits 4 jobs.
    The head is pinned to the system pool, so it cannot fall back to a TPU flavor: job 5 waits for CPU quota."""
    *admitted, fourth = run_case(client, Case("cq-system-quota", "system-quota", {}), 5)
    assert len(admitted) == 4
    assert all(scenario.flavors(w)[HEAD] == {"default-cpu"} for w in admitted)
    assert scenario.flavors(fourth) == {}
    message = next(c["message"] for c in fourth["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert "pod set head" in message and "insufficient unused quota for cpu in flavor default-cpu" in message


def test_two_on_demand_slices_take_two_jobs(client: KubeClient) -> None:
    first, second, third = run_case(client, TWO_SLICES, 3)
    # One flavor per plan A pool: each job is pinned to one pool (one ICI slice), the two jobs to different ones.
    # Which job gets which pool follows creation order, ties broken by UID.
    pools = [scenario.flavors(job)[TPU_GROUP] for job in (first, second)]
    assert all(len(p) == 1 for p in pools) and set().union(*pools) == {"on-demand", "on-demand-2"}
    assert scenario.flavors(third)[TPU_GROUP] == {"dws"}


def test_without_flex_start_the_second_job_waits_in_the_queue(client: KubeClient) -> None:
    first, second = run_case(client, NO_FLEX, 2)
    assert scenario.flavors(first)[TPU_GROUP] == {"on-demand"}
    assert scenario.condition_status(first, "Admitted") == "True"
    assert scenario.flavors(second) == {}
    assert scenario.condition_status(second, "QuotaReserved") == "False"
    assert scenario.provisioning_requests(client, "no-flex", second) == []
