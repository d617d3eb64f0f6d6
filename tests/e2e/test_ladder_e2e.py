"""Issue 27's "done when" on the simulated GKE: a 4-rung capacity ladder (reservation -> on-demand -> spot ->
flex-start) with the real Kueue, KubeRay and the fallback controller as shipped (its ConfigMap's files, with
"rungs").

The stack is the example ladder (Pulumi.ladder.yaml) with fallback_scenarios' short fallback times, its pools,
Kueue objects and controller config as the program renders them; the jobs come from the jobs program (the
preemptible one with `preemptible: true`). One scenario (fallback_scenarios.run_ladder), four claims:

- the reservation full, on-demand stocked out, a job that is not preemptible lands on flex-start (closing
  on-demand on GKE's FailedScaleUp, never spot, whose taint it does not tolerate);
- a preemptible job lands on spot;
- a Spot preemption (GKE's graceful shutdown in the sim, no Spot capacity after it) requeues that job, and it
  finishes;
- a job waiting on flex-start moves up to the reservation when it frees;
- and, on the same cluster right after (`run_from_zero`), one moves up to the reservation while its pool has **no
  node at all** (autoscaled to zero): a reservation rung is `reserved` in the controller's "rungs", its free quota is
  capacity held for it, so the move needs no Ready node and the pool scales up from zero for the moved job.

Bounds are from the Events' and conditions' own times (whole seconds) plus fallback_scenarios.CONTROLLER_LATENCY
(15 s: the controller's pass, Kueue's admission, KubeRay's pods), never a race, so they hold beside a CPU hog. Run
it alone with `venv/bin/python -m pytest tests/e2e/test_ladder_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e.gke_sim import POOL_LABEL, with_run_time

pytestmark = pytest.mark.e2e

ROUNDING = 1.0  # Events, conditions and the taint's value carry whole seconds


@pytest.fixture(scope="module")
def ladder() -> Iterator[dict[str, Any]]:
    """The scenario, run once for the module's tests."""
    with fs.LadderBox() as box, box.scenario() as env:
        out = fs.run_ladder(env)
        facts = out.facts
        assert isinstance(out.watch, fs.FallbackWatch)
        facts["from_zero"] = run_from_zero(env, out.watch)
    zero = facts["from_zero"]
    print(f"  from zero: restart at {zero['restart']:.0f}, reservation nodes then {zero['nodes_at_restart']}, "
          f"moves {zero['moves']}, zero-2 reserved {zero['job']['kinds']}, its nodes created "
          f"{zero['worker_nodes_created']}")
    for name, job in facts["jobs"].items():
        print(f"  {name}: reserved {job['kinds']}, workers on {sorted(job['worker_pools'])}, evictions "
              f"{job['evictions']}")
    print(f"  closes (unix s): {facts['closes']}")
    print(f"  reservations (unix s): { {j: [(round(t), k) for t, k in r] for j, r in facts['reservations'].items()} }")
    print(f"  GKE's no-capacity Events: {facts['no_capacity']}; preempted at "
          f"{facts['preempted_at'] + facts['wall_minus_watch']:.0f}; Finished: {facts['finished_conditions']}")
    print("  controller: " + "\n  controller: ".join(
        line for line in facts["controller_log"] if any(w in line for w in ("close", "reopen", "evict", "move"))))
    yield facts


def reserved_at(facts: Mapping[str, Any], job: str, kind: str) -> float:
    """The unix time the watch first saw the job hold quota on a flavor of `kind`."""
    return float(next(t for t, k in facts["reservations"][job] if k == kind))


def test_a_job_that_is_not_preemptible_lands_on_flex_start_past_the_full_reservation_and_stocked_out_on_demand(
        ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["ladder-2"]
    assert ladder["jobs"]["ladder-1"]["kinds"] == [fs.RESERVATION], ladder["jobs"]["ladder-1"]
    # On-demand first (the reservation's quota was taken), then flex-start; never spot.
    assert job["kinds"][:2] == [fs.ON_DEMAND, fs.FLEX_START], job
    assert fs.SPOT not in job["kinds"], job
    # On-demand closed on GKE's FailedScaleUp, not before it, within the controller's latency; the reservation never
    # (it holds its own capacity), spot not then.
    (event, *_) = ladder["no_capacity"]["ladder-2"]
    (close, *_) = ladder["closes"][fs.ON_DEMAND]
    assert event - ROUNDING <= close <= event + fs.CONTROLLER_LATENCY, (event, close)
    assert ladder["closes"][fs.RESERVATION] == [], ladder["closes"]
    assert all(c > close + ROUNDING for c in ladder["closes"][fs.SPOT]), ladder["closes"]
    assert reserved_at(ladder, "ladder-2", fs.FLEX_START) <= event + fs.CONTROLLER_LATENCY, ladder["reservations"]


def test_a_preemptible_job_lands_on_spot(ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["spot-1"]
    assert job["kinds"][0] == fs.SPOT, job
    assert {ladder["pool_kinds"][p] for p in ladder["third_pools"]} == {fs.SPOT}, ladder["third_pools"]


def test_a_spot_preemption_requeues_the_job_and_it_finishes(ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["spot-1"]
    # GKE's shutdown of every preempted node was recorded (the kubelet's Event), and the job lost its workers.
    assert ladder["preempted_nodes"], ladder
    assert {e["involvedObject"]["name"] for e in ladder["node_shutdown_events"]} == set(ladder["preempted_nodes"])
    # Spot closed on the FailedScaleUp of the replacement workers, within the controller's latency; the job was
    # requeued (deactivated by the controller, active again), went down to flex-start, then up to the reservation.
    spot_events = [t for t in ladder["no_capacity"]["spot-1"]
                   if t >= ladder["preempted_at"] + ladder["wall_minus_watch"] - ROUNDING]
    assert spot_events, ladder["no_capacity"]
    close = ladder["closes"][fs.SPOT][0]
    assert spot_events[0] - ROUNDING <= close <= spot_events[0] + fs.CONTROLLER_LATENCY, (spot_events, close)
    assert job["kinds"] == [fs.SPOT, fs.FLEX_START, fs.RESERVATION], job
    assert job["evictions"].get("Deactivated", 0) == 2, job  # the requeue, then the move up
    assert reserved_at(ladder, "spot-1", fs.FLEX_START) <= spot_events[0] + fs.CONTROLLER_LATENCY, \
        ladder["reservations"]
    assert job["succeeded"] == 1 or job["state"] == "Complete", job
    assert fs.events_of(ladder, "EvictedFromRung", "Workload") >= 2  # ladder-2 from on-demand, spot-1 from spot


def test_a_job_waiting_on_flex_start_moves_to_the_reservation_when_it_frees(ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["ladder-2"]
    assert job["kinds"] == [fs.ON_DEMAND, fs.FLEX_START, fs.RESERVATION], job
    assert {ladder["pool_kinds"][p] for p in job["worker_pools"]} == {fs.RESERVATION}, job
    # Moved within the controller's latency of the reservation's release (job 1's Workload Finished).
    released = ladder["finished_conditions"]["ladder-1"]
    assert released is not None
    assert released - ROUNDING <= reserved_at(ladder, "ladder-2", fs.RESERVATION) <= \
        released + fs.CONTROLLER_LATENCY, (released, ladder["reservations"]["ladder-2"])
    assert fs.events_of(ladder, "MovedUp", "Workload") == 2  # ladder-2, then spot-1
    metrics, rung = ladder["metrics"], ladder["rung_of_kind"]
    assert metrics.get(f'tpu_fallback_moves_up_total{{rung="{rung[fs.RESERVATION]}"}}') == 2, metrics
    assert metrics.get(f'tpu_fallback_rung_closes_total{{rung="{rung[fs.ON_DEMAND]}"}}') == 1, metrics
    assert metrics.get(f'tpu_fallback_rung_closes_total{{rung="{rung[fs.SPOT]}"}}') == 1, metrics
    assert metrics.get(f'tpu_fallback_rung_closes_total{{rung="{rung[fs.RESERVATION]}"}}') == 0, metrics
    assert "tpu_fallback_plan_a_closed" not in metrics, metrics


# --- a move up to a reservation whose pool is at zero nodes -----------------------------------------------------------


def _reservation_free(env: fs.Env, flavors: set[str]) -> bool:
    """No Workload holds quota on these flavors of the stack's ClusterQueue (Kueue's own accounting)."""
    (name,) = [o["metadata"]["name"] for o in env.infra.kubernetes_objects() if o["kind"] == "ClusterQueue"]
    cq = env.client.get(fs.KUEUE_API, "ClusterQueue", name) or {}
    return all(all(str(r.get("total", "0")) in ("0", "") for r in usage.get("resources", []))
               for usage in (cq.get("status") or {}).get("flavorsReservation", []) if usage.get("name") in flavors)


def run_from_zero(env: fs.Env, watch: fs.FallbackWatch) -> dict[str, Any]:
    """After run_ladder, on the same cluster (on-demand, spot and flex-start still without capacity): `zero-1` takes
    the reservation; `zero-2` (not preemptible) goes past it to flex-start and waits for DWS. The controller then
    restarts (a crash or a rollout) and, while it is away, zero-1 is cancelled (its RayJob deleted: Kueue releases
    the reservation's quota) and the reservation's pool, idle, scales down to zero (GKE: after 10 min; made prompt
    here, and put back). The restarted controller reads the cluster afresh: zero-2 waits on flex-start, the
    reservation has its quota free and no node. It moves zero-2 up there (the rung is `reserved`: no Ready node
    needed), Kueue admits it, and the autoscaler grows the reservation's pool from zero for its workers."""
    client, sim = env.client, env.sim
    plans = fs.plan_of(env.infra, sim)
    reservation_flavors = {f for f, k in plans.items() if k == fs.RESERVATION}
    (pool,) = [p.name for p in sim.pools.values() if p.plan == fs.RESERVATION]
    objects = fs.render_jobs(env.infra, [{"name": "zero", "count": 2, "queue": "default/user-queue"}])
    run_times = {"zero-1": 600.0, "zero-2": 5.0}  # zero-1 never ends by itself: it is cancelled
    objects = [with_run_time(o, run_times[o["metadata"]["name"]]) if o["kind"] == "RayJob" else o for o in objects]

    def last_kind(record: gs.JobRecord) -> str | None:
        reserved = watch.track(record).flavors_reserved()
        return plans.get(reserved[-1]) if reserved else None

    def pool_nodes() -> list[dict[str, Any]]:
        return [n for n in client.list("v1", "Node") if (n["metadata"].get("labels") or {}).get(POOL_LABEL) == pool]

    first = fs._submit_one(watch, objects, "zero-1")
    watch.wait(lambda: last_kind(first) == fs.RESERVATION, 60, "zero-1 on the reservation")
    second = fs._submit_one(watch, objects, "zero-2")
    watch.wait(lambda: last_kind(second) == fs.FLEX_START and watch.track(second).last.get("spec", {}).get(
        "active") is not False, 60, "zero-2 waiting on flex-start")
    env.controller.kill()
    client.delete("ray.io/v1", "RayJob", first.name, first.namespace)
    watch.wait(lambda: _reservation_free(env, reservation_flavors), 60, "Kueue to release zero-1's reservation")
    timings = sim.timings
    sim.timings = replace(timings, scale_down_unneeded=100)  # 1 s real instead of 30 s
    try:
        watch.wait(lambda: not pool_nodes(), 60, f"{pool} to scale down to zero")
    finally:
        sim.timings = timings
    nodes_at_restart = [n["metadata"]["name"] for n in pool_nodes()]
    restart = time.time()
    env.controller.start()
    watch.wait(lambda: last_kind(second) == fs.RESERVATION, 60, "zero-2 to move up to the reservation")
    watch.wait_finished([second], 90)
    track = watch.track(second)
    moving = [e for e in fs.ladder_events(client, "MovingUp")
              if e["involvedObject"].get("kind") == "Workload" and e["involvedObject"].get("name") in track.names]
    scale_ups = [e for e in client.list("v1", "Event", second.namespace) if e.get("reason") == "TriggeredScaleUp"
                 and str(e["involvedObject"].get("name", "")).startswith(f"{second.name}-")]
    worker_nodes = {node for node, node_pool, replica in second.placements.values() if replica and node_pool == pool}
    created = {n: fs._unix((client.get("v1", "Node", n) or {}).get("metadata", {}).get("creationTimestamp"))
               for n in sorted(worker_nodes)}
    closes = {kind: sorted({float(v) for f, k in plans.items() if k == kind
                            for v in fs.taint_values_of(watch.taints.get(f, []))}) for kind in set(plans.values())}
    return {
        "restart": restart, "nodes_at_restart": nodes_at_restart,
        "moves": [(fs._unix(e.get("firstTimestamp")), str(e.get("message", ""))) for e in moving],
        "scale_ups": [(fs._unix(e.get("firstTimestamp")), str(e.get("message", ""))) for e in scale_ups],
        "worker_nodes_created": created, "pool": pool, "pool_id": sim.pools[pool].node_group_id, "closes": closes,
        "job": {**fs.job_summary(client, watch, second), "kinds": [plans.get(f, f) for f in track.flavors_reserved()]},
        "metrics": env.controller.metrics(),
    }


def test_a_job_moves_up_to_a_reservation_whose_pool_is_at_zero_nodes(ladder: dict[str, Any]) -> None:
    zero = ladder["from_zero"]
    job, pool_id = zero["job"], zero["pool_id"]
    # The reservation's pool had no node when the restarted controller looked, and its quota was free.
    assert zero["nodes_at_restart"] == [], zero
    # One move (never a second), by the restarted controller, saying the reservation holds the capacity.
    ((moved_at, message),) = zero["moves"]
    assert moved_at is not None and zero["restart"] - ROUNDING <= moved_at <= zero["restart"] + fs.CONTROLLER_LATENCY
    assert "no node yet" in message, message
    # From flex-start up to the reservation, where its workers ran on nodes the pool grew from zero for them.
    assert job["kinds"][-2:] == [fs.FLEX_START, fs.RESERVATION], job
    assert {ladder["pool_kinds"][p] for p in job["worker_pools"]} == {fs.RESERVATION}, job
    # GKE names the node group by its MIG's URL (gke_sim NodePool.node_group_id).
    assert any(f"{{{pool_id} 0->" in m for _t, m in zero["scale_ups"]), zero["scale_ups"]
    assert zero["worker_nodes_created"] and all(
        c is not None and c >= moved_at - ROUNDING for c in zero["worker_nodes_created"].values()), zero
    assert job["succeeded"] == 1 or job["state"] == "Complete", job
    # The reservation was never closed, and the restarted controller counted the move on the reservation's rung.
    assert zero["closes"][fs.RESERVATION] == [], zero["closes"]
    rung = ladder["rung_of_kind"][fs.RESERVATION]
    assert zero["metrics"].get(f'tpu_fallback_moves_up_total{{rung="{rung}"}}') == 1, zero["metrics"]
