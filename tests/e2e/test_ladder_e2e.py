"""Issue 27's "done when" on the simulated GKE: a 4-rung capacity ladder (reservation -> on-demand -> spot ->
flex-start) with the real Kueue, KubeRay and the fallback controller as shipped (its ConfigMap's files, with
"rungs").

The ladder's plan is the dev stack's with the fallback, grown to four rungs by fallback_scenarios.ladder_plan (the
program does not render ladders yet). One scenario (fallback_scenarios.run_ladder), four claims:

- the reservation full, on-demand stocked out, a job that is not preemptible lands on flex-start (closing
  on-demand on GKE's FailedScaleUp, never spot, whose taint it does not tolerate);
- a preemptible job lands on spot;
- a Spot preemption (GKE's graceful shutdown in the sim, no Spot capacity after it) requeues that job, and it
  finishes;
- a job waiting on flex-start moves up to the reservation when it frees.

Bounds are from the Events' and conditions' own times (whole seconds) plus fallback_scenarios.CONTROLLER_LATENCY
(15 s: the controller's pass, Kueue's admission, KubeRay's pods), never a race, so they hold beside a CPU hog. Run
it alone with `venv/bin/python -m pytest tests/e2e/test_ladder_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs

pytestmark = pytest.mark.e2e

ON_DEMAND, DWS = "on-demand", "dws"
ROUNDING = 1.0  # Events, conditions and the taint's value carry whole seconds


@pytest.fixture(scope="module")
def ladder() -> Iterator[dict[str, Any]]:
    """The scenario, run once for the module's tests."""
    with fs.LadderBox() as box, box.scenario() as env:
        out = fs.run_ladder(env)
    facts = out.facts
    for name, job in facts["jobs"].items():
        print(f"  {name}: reserved {job['reserved']}, workers on {sorted(job['worker_pools'])}, evictions "
              f"{job['evictions']}")
    print(f"  closes: { {f: fs.taint_values_of(h) for f, h in facts['taints'].items()} }")
    start = facts["wall_minus_watch"]
    held = {j: [(round(t + start), f) for t, f in r] for j, r in facts["reservations"].items()}
    print(f"  reservations (unix s): {held}")
    print(f"  GKE's no-capacity Events: {facts['no_capacity']}; preempted at {facts['preempted_at'] + start:.0f}; "
          f"Finished: {facts['finished_conditions']}")
    print("  controller: " + "\n  controller: ".join(
        line for line in facts["controller_log"] if any(w in line for w in ("close", "reopen", "evict", "move"))))
    yield facts


def closes(facts: Mapping[str, Any], flavor: str) -> list[float]:
    return [float(v) for v in fs.taint_values_of(facts["taints"].get(flavor, []))]


def reserved_at(facts: Mapping[str, Any], job: str, flavor: str) -> float:
    """The unix time the watch first saw the job hold quota on `flavor`."""
    return float(next(t for t, f in facts["reservations"][job] if f == flavor) + facts["wall_minus_watch"])


def test_a_job_that_is_not_preemptible_lands_on_flex_start_past_the_full_reservation_and_stocked_out_on_demand(
        ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["ladder-2"]
    assert ladder["jobs"]["ladder-1"]["reserved"] == [fs.RESERVATION], ladder["jobs"]["ladder-1"]
    # On-demand first (the reservation's quota was taken), then flex-start; never spot.
    assert job["reserved"][:2] == [ON_DEMAND, DWS], job
    assert fs.SPOT not in job["reserved"], job
    # On-demand closed on GKE's FailedScaleUp, not before it, within the controller's latency; nothing else closed
    # then (the reservation never: it holds its own capacity).
    (event, *_) = ladder["no_capacity"]["ladder-2"]
    (close, *_) = closes(ladder, ON_DEMAND)
    assert event - ROUNDING <= close <= event + fs.CONTROLLER_LATENCY, (event, close)
    assert closes(ladder, fs.RESERVATION) == [], ladder["taints"]
    assert all(c > close + ROUNDING for c in closes(ladder, fs.SPOT)), ladder["taints"]
    assert reserved_at(ladder, "ladder-2", DWS) <= event + fs.CONTROLLER_LATENCY, ladder["reservations"]


def test_a_preemptible_job_lands_on_spot(ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["ladder-3"]
    assert job["reserved"][0] == fs.SPOT, job
    assert ladder["third_on_spot"] == {fs.SPOT_POOL}, ladder["third_on_spot"]


def test_a_spot_preemption_requeues_the_job_and_it_finishes(ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["ladder-3"]
    # GKE's shutdown of every preempted node was recorded (the kubelet's Event), and the job lost its workers.
    assert {e["involvedObject"]["name"] for e in ladder["node_shutdown_events"]} == set(ladder["preempted_nodes"])
    # Spot closed on the FailedScaleUp of the replacement workers, within the controller's latency; the job was
    # requeued (deactivated by the controller, active again), went down to flex-start, then up to the reservation.
    spot_events = [t for t in ladder["no_capacity"]["ladder-3"]
                   if t >= ladder["preempted_at"] + ladder["wall_minus_watch"] - ROUNDING]
    assert spot_events, ladder["no_capacity"]
    close = closes(ladder, fs.SPOT)[0]
    assert spot_events[0] - ROUNDING <= close <= spot_events[0] + fs.CONTROLLER_LATENCY, (spot_events, close)
    assert job["reserved"] == [fs.SPOT, DWS, fs.RESERVATION], job
    assert job["evictions"].get("Deactivated", 0) == 2, job  # the requeue, then the move up
    assert reserved_at(ladder, "ladder-3", DWS) <= spot_events[0] + fs.CONTROLLER_LATENCY, ladder["reservations"]
    assert job["succeeded"] == 1 or job["state"] == "Complete", job
    assert fs.events_of(ladder, "EvictedFromRung", "Workload") >= 2  # ladder-2 from on-demand, ladder-3 from spot


def test_a_job_waiting_on_flex_start_moves_to_the_reservation_when_it_frees(ladder: dict[str, Any]) -> None:
    job = ladder["jobs"]["ladder-2"]
    assert job["reserved"] == [ON_DEMAND, DWS, fs.RESERVATION], job
    assert job["worker_pools"] == {fs.RESERVATION_POOL}, job
    # Moved within the controller's latency of the reservation's release (job 1's Workload Finished).
    released = ladder["finished_conditions"]["ladder-1"]
    assert released is not None
    assert released - ROUNDING <= reserved_at(ladder, "ladder-2", fs.RESERVATION) <= \
        released + fs.CONTROLLER_LATENCY, (released, ladder["reservations"]["ladder-2"])
    assert fs.events_of(ladder, "MovedUp", "Workload") == 2  # ladder-2, then ladder-3
    metrics = ladder["metrics"]
    assert metrics.get('tpu_fallback_moves_up_total{rung="reservation"}') == 2, metrics
    assert metrics.get('tpu_fallback_rung_closes_total{rung="onDemand"}') == 1, metrics
    assert metrics.get('tpu_fallback_rung_closes_total{rung="spot"}') == 1, metrics
    assert metrics.get('tpu_fallback_rung_closes_total{rung="reservation"}') == 0, metrics
    assert "tpu_fallback_plan_a_closed" not in metrics, metrics
