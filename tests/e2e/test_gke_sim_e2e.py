"""The fallback on a simulated GKE (issue 12, "GKE in a box"): pods, nodes, autoscaling, DWS, stock-outs.

Real etcd, kube-apiserver, kube-controller-manager, kube-scheduler, Kueue, KubeRay operator and KWOK (all built
from Go modules by build_components.sh), the stacks' own objects from the offline plan, and gke_sim.py playing
GKE: node pools from the plan, the cluster autoscaler, DWS queued provisioning, capacity. Each test starts its
The tests share one cluster (started by the first, 20 to 40 s; reset between tests in a few seconds; set
TPU_FALLBACK_GKE_FRESH=1 for a new one each time) and run in simulated time (a simulated minute is 0.6 s). Selected
by the `e2e` marker; run one alone with e.g.
`venv/bin/python -m pytest tests/e2e/test_gke_sim_e2e.py -m e2e -s -k tutorial`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.gke_sim import GkeSim, pools_from_plan
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import ProgramRun

pytestmark = pytest.mark.e2e

TPU_GROUP = gs.TPU_GROUP


class Box(gs.SimBox):
    """The module's simulated GKE (gs.SimBox), with the pools of each test's stack."""

    def __init__(self) -> None:
        super().__init__(scale=gs.SCALE, timings=gs.TIMINGS)

    @contextlib.contextmanager
    def cluster(self, stack: gs.Stack, infra: ProgramRun | None = None
                ) -> Iterator[tuple[KubeClient, GkeSim, ProgramRun]]:
        """The cluster with the stack's node pools and nothing else of an earlier test."""
        infra = infra or stack.render()
        self.acquire(pools_from_plan(infra), stack.name)
        plane, sim = self.plane, self.sim
        before = plane.usage()
        yield plane.client, sim, infra
        after = plane.usage()
        print("  controllers (this test): " + ", ".join(
            f"{name} {u.cpu_seconds - (before[name].cpu_seconds if name in before else 0):.1f} s CPU "
            f"{u.peak_rss_bytes / 2**20:.0f} MiB peak" for name, u in after.items()))
        sim.check()


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    with Box() as cluster_box:
        yield cluster_box


def report(outcome: gs.Outcome) -> None:
    for line in outcome.watch.figures():
        print("  " + line)


def plans(infra: ProgramRun, sim: GkeSim) -> dict[str, str]:
    """Flavor -> plan ("on-demand", "flex-start", "system"): the tests assert plans, not flavor names."""
    return gs.flavor_plans(infra, list(sim.pools.values()))


def test_tutorial_job_1_runs_on_plan_a_job_2_waits_for_dws_then_runs_on_plan_b(box: Box) -> None:
    with box.cluster(gs.TUTORIAL) as (client, sim, infra):
        out = gs.run_tutorial(client, sim, infra)
        report(out)
    first, second = out.watch.jobs.values()
    plan = plans(infra, sim)

    # Job 1: plan A's quota, a scale-up of on-demand-pool, its 4 workers on that pool, the Ray head on the system pool.
    assert gs.tpu_plan(first, plan) == "on-demand", first.flavors
    assert list(first.worker_pools().values()) == [{"on-demand-pool": 4}], first.placements
    assert first.head_pools() == {"default-pool"}
    assert any(pod.startswith(f"{first.name}-") for pod in out.facts["triggered_scale_up"]), out.facts

    # Job 2: plan A is full, so dws; Kueue's ProvisioningRequest is Accepted then Provisioned by "DWS", and only then
    # is the job admitted; its workers consume the request and run on the queued pool.
    assert gs.tpu_plan(second, plan) == "flex-start", second.flavors
    ((request, conditions),) = out.facts["requests"].items()
    assert conditions == {"Accepted": "True", "Provisioned": "True"}
    provisioned = next(e.at for e in sim.log if e.what == f"ProvisioningRequest default/{request}: Provisioned")
    assert second.admitted is not None and second.admitted >= provisioned
    assert list(second.worker_pools().values()) == [{"dws-pool": 4}], second.placements
    assert set(second.consume_annotations.values()) == {request}
    assert len(second.consume_annotations) == 4

    # Both finish, their Workloads are Finished, the TPU nodes are gone and the quota is free again.
    assert first.state == second.state == "Complete"
    assert out.facts["finished"] == {first.name: "True", second.name: "True"}
    assert out.facts["queue_idle"]
    assert first.running is not None and second.running is not None and first.running < second.running


def test_two_on_demand_slices_each_slice_runs_in_one_node_pool(box: Box) -> None:
    """onDemand.maxSlices 2: two multi-host pools. Every slice's 4 workers must land in ONE pool, whatever order the
    pods and the nodes appear in (gs.SPLIT_VARIANTS, one after the other on one cluster). The plan gives each
    multi-host pool a flavor of its own, which keeps a RayJob's workers in one pool; with a flavor spanning pools,
    nothing would, and the scheduler spread a slice over both pools' nodes (two pools are two ICI slices on GKE).
    """
    infra = gs.TWO_SLICES.render()
    assert gs.flavors_spanning_pools(infra, pools_from_plan(infra)) == {}
    with box.cluster(gs.TWO_SLICES, infra) as (client, sim, infra):
        out = gs.run_two_slices(client, sim, infra)
        report(out)
    placements: dict[str, dict[str, dict[str, dict[str, int]]]] = out.facts["placements"]
    lines, split = [], False
    for variant, jobs in placements.items():
        for job, slices in jobs.items():
            # The harness itself must have worked: both jobs on the on-demand flavor, 4 workers placed each.
            record = out.watch.jobs[f"default/{job}"]
            assert gs.tpu_plan(record, plans(infra, sim)) == "on-demand", record.flavors
            assert sum(sum(p.values()) for p in slices.values()) == 4, slices
            for replica, pools in slices.items():
                where = ", ".join(f"{n} on {pool}" for pool, n in sorted(pools.items()))
                lines.append(f"{variant}: {job} slice {replica}: {where}")
                split = split or len(pools) > 1
    summary = "\n".join(lines)
    print(summary)
    assert not split, f"slices split across node pools {out.facts['pools']}:\n{summary}"


def test_prod_two_namespaces_capped_plan_b_jobs_queue_and_drain_in_order(box: Box) -> None:
    """The prod stack: 8 jobs from two namespaces, 6 fit (2 on plan A, 4 on plan B capped at 4 slices), 2 wait.

    Every CPU PodSet (the Ray head, the submitter) is pinned to the system pool: unpinned, Kueue gives it a TPU
    plan's flavor once the system quota is nearly full (seen here: the submitter on dws, its ProvisioningRequest
    never provisioned, the job stuck).
    """
    infra = gs.PROD.render()
    system = next(p.name for p in pools_from_plan(infra) if not p.autoscaled)
    assert not gs.unpinned_cpu_pod_sets(scenario.render_queue_jobs(infra, "ml-prod/prod-queue", 1, "probe"), system)
    with box.cluster(gs.PROD, infra) as (client, sim, infra):
        out = gs.run_prod(client, sim, infra)
        report(out)
    records: list[gs.JobRecord] = out.facts["records"]
    assert [r.namespace for r in records[:2]] == ["ml-research", "ml-prod"]
    # Plan A's 2 slices take the first two jobs, plan B (capped at 4 slices) the next four; the last two wait for
    # quota (plan B's cap) and go to whichever plan frees up first.
    tpu = [gs.tpu_plan(r, plans(infra, sim)) for r in records]
    assert tpu[:6] == ["on-demand"] * 2 + ["flex-start"] * 4, tpu
    waiting = records[6:]
    assert [r.queued for r in records] == [False] * 6 + [True] * 2, [(r.key, r.queued) for r in records]
    first_done = min(r.finished for r in records[:6] if r.finished is not None)
    assert all(r.reserved is not None and r.reserved >= first_done for r in waiting), [
        (r.key, r.reserved, first_done) for r in waiting]
    # Drained: every job admitted in the end. In which order the waiting ones go is Kueue's BestEffortFIFO
    # (usually submission order; a head that does not fit at the moment quota frees lets the next one go).
    order = [r.key for r in sorted(waiting, key=lambda r: r.reserved or 0)]
    print(f"  waiting jobs admitted in the order {order}")
    assert all(r.admitted is not None for r in records)
    # 6 jobs hold quota at once (the 6 that fit), 4 of them on plan B, never more.
    assert out.facts["at_once"] == {"reserved": 6, "dws": 4}, out.facts["at_once"]
    # Plan B stayed within its 4 pools of one slice each; every job finished.
    for pool, nodes in out.facts["max_nodes"].items():
        assert pool == "default-pool" or nodes <= 4, out.facts["max_nodes"]
    for r in records:
        assert r.state == "Complete", (r.key, r.state)
    # Every slice ran in one pool: a DWS slice in the one its ProvisioningRequest got, a plan A slice in the one its
    # flavor selects (one flavor per multi-host pool).
    assert gs.flavors_spanning_pools(infra, list(sim.pools.values())) == {}
    for r in records:
        split = {replica: pools for replica, pools in r.worker_pools().items() if len(pools) > 1}
        assert not split, (r.key, split)
    assert out.facts["queue_idle"]


# What a stock-out of plan A does with the tutorial's setup (gs.STOCKOUT: fallback off; this module's Kueue runs
# without waitForPodsReady): Kueue admitted the job on plan A's *quota*, the autoscaler cannot get the VMs, and the
# job waits there while plan B stays idle (Kueue falls back on quota, not on a stock-out). This stays the baseline;
# the project's fallback (waitForPodsReady plus the fallback controller) moving such a job to plan B is tested in
# test_stockout_fallback_e2e.py.


def test_plan_a_stockout_as_it_is_today_then_capacity_returns_then_a_preemption(box: Box) -> None:
    with box.cluster(gs.STOCKOUT) as (client, sim, infra):
        out = gs.run_stockout(client, sim, infra)
        report(out)
    facts = out.facts
    (job,) = out.watch.jobs.values()
    # The autoscaler's view, as GKE reports it: the scale-up failed, then the pool is in back-off.
    assert facts["failed_scale_up"], facts
    assert any("in backoff after failed scale-up" in m for m in facts["not_triggered"]), facts["not_triggered"]
    plan_during = ",".join(sorted({plans(infra, sim)[f] for f in facts["flavors_during"].get(TPU_GROUP, ())}))
    # Stuck on on-demand: admitted there, its pods Pending, no node anywhere, no ProvisioningRequest.
    assert plan_during == "on-demand", facts
    assert not facts["running_during"], facts
    assert facts["nodes_during"] == ["default-pool"], facts
    assert facts["requests_during"] == {}, facts
    # Capacity returns: the next scale-up works and the job runs on plan A after all.
    assert facts["pools_after"] == {"on-demand-pool"}, facts
    # GCE preempts the slice: KubeRay recreates the workers, the autoscaler brings a new slice, the job goes on
    # (the sim has no Ray: the Ray job itself does not notice).
    assert len(facts["preempted"]) == 4, facts["preempted"]
    assert facts["pools_after_preemption"] == {"on-demand-pool"}, facts
    assert not set(facts["nodes_after_preemption"]) & set(facts["preempted"]), facts
    assert job.state == "Complete" and facts["finished"] == "True", (job.state, facts["finished"])


def test_dws_failed_booking_expired_and_capacity_revoked_as_kueue_reads_them(box: Box) -> None:
    with box.cluster(gs.DWS_FAULTS) as (client, sim, infra):
        out = gs.run_dws_faults(client, sim, infra)
        report(out)
    facts = out.facts
    # Queued (plan B stocked out): Kueue shows the request's state on its check, Pending.
    assert facts["check_queued"]["state"] == "Pending", facts["check_queued"]
    # Failed: Kueue retries (state Retry: a new request after its back-off, 60 s real by default), it does not give
    # up at once.
    assert facts["check_after_failed"]["state"] == "Retry", facts["check_after_failed"]
    assert "Retrying after failure" in facts["check_after_failed"].get("message", ""), facts["check_after_failed"]
    # BookingExpired once the pods run: ignored, the job keeps running.
    assert facts["check_after_booking_expired"]["state"] == "Ready", facts["check_after_booking_expired"]
    assert facts["state_after_booking_expired"] == "Running"
    # CapacityRevoked: the nodes are gone, Kueue rejects the check and deactivates the Workload, which evicts it
    # with the rejected check as the reason. The eviction resets the check to Pending ("Previously: Rejected"), then
    # Kueue drops it from the status with the admission it belonged to: read right after the deactivation, it is in
    # one of those states.
    evicted = facts["evicted_after_revoked"]
    assert evicted["reason"] == "DeactivatedDueToAdmissionCheck", evicted
    assert 'AdmissionCheck in Rejected state: "dws-prov"' in evicted["message"], evicted
    check = facts["check_after_revoked"]
    assert (not check or check["state"] == "Rejected" or "Previously: Rejected" in check.get("message", "")), check
    assert facts["after_revoked"]["spec"]["active"] is False
    assert "dws-pool" not in facts["nodes_after_revoked"], facts["nodes_after_revoked"]
