"""Elastic RayJobs on the simulated GKE (issue 15 item 1): scaled up and down on plan A, never given plan B.

Real etcd, kube-apiserver, kube-controller-manager, kube-scheduler, Kueue 0.19.2 (with the stack's Helm release's
integrations and feature gates: ElasticJobsViaWorkloadSlices, ray.io/raycluster), the KubeRay operator and KWOK;
gke_sim.py plays GKE (node pools from the plan, the cluster autoscaler, DWS). The stack is v6e 2x2 (single host),
the only slice the jobs project lets be elastic. The tests share one cluster (reset between them); 60 to 80 s.
Run alone with `venv/bin/python -m pytest tests/e2e/test_elastic_e2e.py -m e2e -s`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.e2e import elastic_scenarios as es
from tests.e2e import gke_scenarios as gs
from tests.e2e.gke_sim import QUEUED_LABEL, GkeSim, pools_from_plan
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import ProgramRun

pytestmark = pytest.mark.e2e


class ElasticBox(gs.SimBox):
    """The module's simulated GKE (gs.SimBox) with the elastic stack's pools and Kueue options."""

    def __init__(self, infra: ProgramRun) -> None:
        self.infra = infra
        self.kueue = es.kueue_options(infra)
        super().__init__(scale=gs.SCALE, timings=gs.TIMINGS, **self.kueue)

    @contextlib.contextmanager
    def cluster(self) -> Iterator[tuple[KubeClient, GkeSim]]:
        self.acquire(pools_from_plan(self.infra), f"elastic, Kueue {self.kueue}")
        yield self.plane.client, self.sim
        self.sim.check()


@pytest.fixture(scope="module")
def box(infra: ProgramRun) -> Iterator[ElasticBox]:
    with ElasticBox(infra) as cluster_box:
        yield cluster_box


@pytest.fixture(scope="module")
def infra() -> ProgramRun:
    run = es.ELASTIC.render()
    # What the scenarios rest on (the product's side): the dws flavor declares the queued-provisioning taint, and
    # an elastic job's workers do not tolerate it (a plain job's do).
    flavors = {o["metadata"]["name"]: o for o in run.kubernetes_objects() if o["kind"] == "ResourceFlavor"}
    assert {"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"} in flavors["dws"]["spec"].get(
        "nodeTaints", []), flavors["dws"]
    assert "nodeTaints" not in flavors["on-demand"]["spec"], flavors["on-demand"]

    def worker_tolerations(elastic: bool) -> set[str]:
        (job,) = [o for o in es.render_jobs(run, "probe", elastic=elastic) if o["kind"] == "RayJob"]
        spec = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
        return {t.get("key", "") for t in spec.get("tolerations", [])}

    assert QUEUED_LABEL not in worker_tolerations(True)
    assert QUEUED_LABEL in worker_tolerations(False)
    return run


def sim_seconds(real: float) -> str:
    return f"{real:.1f} s real, {gs.SCALE.sim(real):.0f} s simulated"


def test_elastic_job_scales_up_and_down_on_plan_a_through_workload_slices(box: ElasticBox, infra: ProgramRun) -> None:
    with box.cluster() as (client, sim):
        out = es.run_scale_up_down(client, sim, infra)
    facts = out.facts
    watch = out.watch
    assert isinstance(watch, es.ElasticWatch)
    (job,) = watch.jobs.values()
    first, second = facts["slices_after_up"]
    print(f"  scale-up: new slice admitted after {sim_seconds(facts['scale_up_admitted_after'])}, 2 workers "
          f"Running after {sim_seconds(facts['scale_up_running_after'])}")
    print(f"  scale-down: quota back to 4 chips after {sim_seconds(facts['scale_down_quota_after'])}, "
          f"{es.PLAN_A_POOL} at 1 node after {sim_seconds(facts['scale_down_node_after'])}")
    for s in facts["slices_after_down"]:
        print(f"  slice {s.name}: workers {s.worker_counts}, flavors {sorted(s.tpu_flavors)}, "
              f"replaces {s.replacement_for}, finished {s.finished_reason}")

    # Admitted with 1 worker on plan A: one node of on-demand-pool, 4 chips of on-demand.
    assert facts["first_slice"].counts[es.WORKER_GROUP] == 1 and facts["first_slice"].tpu_flavors == {"on-demand"}
    assert list(facts["workers_before"].values()) == [es.PLAN_A_POOL], facts["workers_before"]
    assert facts["pool_before"] == 1
    assert es.tpu_chips(facts["usage_before"], "admitted", "on-demand") == "4", facts["usage_before"]
    # Kueue's RayCluster webhook gated the elastic pod templates: a scaled-up worker waits for its slice.
    assert es.ELASTIC_GATE in facts["worker_template_gates"], facts["worker_template_gates"]

    # Scale-up: a new Workload slice (replacing the first) with 2 workers, admitted on the same flavor; the first
    # slice finished as replaced; the pool grew to 2 nodes, the 2 workers Running there; 8 chips of on-demand.
    assert second.replacement_for == f"{job.namespace}/{first.name}", (first, second)
    assert second.worker_counts[0] == 2 and second.tpu_flavors == {"on-demand"}, second
    assert first.finished_reason == "WorkloadSliceReplaced", first
    assert second.admitted is not None and first.finished is not None
    assert sorted(facts["workers_after_up"].values()) == [es.PLAN_A_POOL] * 2, facts["workers_after_up"]
    assert facts["pool_after_up"] == 2
    assert es.tpu_chips(facts["usage_after_up"], "admitted", "on-demand") == "8", facts["usage_after_up"]

    # Scale-down: the same slice's count goes 2 -> 1 in place (no new slice), the admitted usage drops to 4 chips,
    # the named worker goes and the autoscaler removes its idle node.
    assert [s.name for s in facts["slices_after_down"]] == [first.name, second.name]
    assert facts["slices_after_down"][1].worker_counts == [2, 1], facts["slices_after_down"][1]
    assert facts["slices_after_down"][1].finished is None
    for kind in ("reserved", "admitted"):
        assert es.tpu_chips(facts["usage_after_down"], kind, "on-demand") == "4", facts["usage_after_down"]
    assert facts["victim"] not in facts["workers_after_down"], facts["workers_after_down"]
    assert list(facts["workers_after_down"].values()) == [es.PLAN_A_POOL]
    assert facts["victim_node"] not in facts["nodes_after_down"], facts
    assert len(facts["nodes_after_down"]) == 1

    # Plan A only, throughout: never a dws flavor, no ProvisioningRequest; the pool never went past 2 nodes.
    assert watch.tpu_flavors_ever(job) == {"on-demand"}
    assert facts["requests"] == {} and facts["sim_requests"] == {}, (facts["requests"], facts["sim_requests"])
    assert facts["provisioning_events"] == {}, facts["provisioning_events"]
    assert watch.max_nodes.get(es.PLAN_B_POOL, 0) == 0
    assert watch.max_nodes[es.PLAN_A_POOL] == 2
    assert watch.max_pool_size_between(es.PLAN_A_POOL, 0, facts["t_up"]) == 1


def test_elastic_jobs_wait_for_plan_a_while_a_plain_job_falls_back_to_dws(box: ElasticBox,
                                                                           infra: ProgramRun) -> None:
    with box.cluster() as (client, sim):
        out = es.run_plan_a_only(client, sim, infra)
    facts = out.facts
    records = facts["records"]
    up: es.SliceRecord = facts["scale_up_slice"]
    third = facts["third_slices_while_full"]
    print(f"  scale-up of {records['second'].key} while plan A is full: {up.pending_messages}")
    print(f"  {records['third'].key} while plan A is full: {third[0].pending_messages}")
    print(f"  freed on-demand quota went to {facts['freed_to_job']} ({facts['freed_to'].name})")

    # Plan A full: two elastic jobs of one slice each, 8 chips of on-demand.
    assert es.tpu_chips(facts["usage_full"], "admitted", "on-demand") == "8", facts["usage_full"]

    # The second job's scale-up waits for plan A: its new slice has no quota, Kueue's reason names the dws taint;
    # the job keeps running on its first slice, the extra worker stays gated (not even Pending for a node).
    assert up.reserved is None and up.tpu_flavors == set(), up
    assert any(es.QUEUED_TAINT_IN_DWS in m for m in up.pending_messages), up.pending_messages
    assert facts["second_active"] is not None and facts["second_active"].name == facts["second_before"].name
    placed = [pool for pool, _phase, _gates in facts["second_workers"].values() if pool]
    gated = [name for name, (_pool, _phase, g) in facts["second_workers"].items() if es.ELASTIC_GATE in g]
    assert placed == [es.PLAN_A_POOL] and len(gated) == 1, facts["second_workers"]

    # A third elastic job waits in the queue: QuotaReserved False, the message names the untolerated taint of dws.
    assert records["third"].queued is True
    (waiting,) = third
    assert waiting.reserved is None and waiting.tpu_flavors == set(), waiting
    assert any(es.QUEUED_TAINT_IN_DWS in m for m in waiting.pending_messages), waiting.pending_messages
    assert facts["third_conditions"]["QuotaReserved"]["status"] == "False", facts["third_conditions"]

    # The contrast, at that very moment: a plain (non-elastic) job falls back to dws, with a ProvisioningRequest,
    # and runs on the queued pool; the elastic ones still wait.
    assert facts["flavors_ever"][records["plain"].key] == {"dws"}
    assert len(facts["plain_requests"]) == 1, facts["plain_requests"]
    assert len(facts["provisioning_events"][records["plain"].key]) == 1, facts["provisioning_events"]
    assert list(facts["plain_workers"].values()) == [es.PLAN_B_POOL], facts["plain_workers"]
    assert all(s.reserved is None for s in facts["third_after_plain"]), facts["third_after_plain"]
    assert facts["scale_up_after_plain"].reserved is None, facts["scale_up_after_plain"]

    # The first job goes: the freed on-demand quota goes to an elastic job that waited, on on-demand.
    assert facts["freed_to"].tpu_flavors == {"on-demand"}, facts["freed_to"]
    # No elastic job ever got dws or a ProvisioningRequest.
    for key in (records["first"].key, records["second"].key, records["third"].key):
        assert facts["flavors_ever"][key] <= {"on-demand"}, (key, facts["flavors_ever"])
        assert facts["requests_ever"][key] == [], (key, facts["requests_ever"])
        assert facts["provisioning_events"][key] == {}, (key, facts["provisioning_events"])
