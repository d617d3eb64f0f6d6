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

ROUNDING = 1.0  # Events, conditions and the taint's value carry whole seconds


@pytest.fixture(scope="module")
def ladder() -> Iterator[dict[str, Any]]:
    """The scenario, run once for the module's tests."""
    with fs.LadderBox() as box, box.scenario() as env:
        out = fs.run_ladder(env)
    facts = out.facts
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
