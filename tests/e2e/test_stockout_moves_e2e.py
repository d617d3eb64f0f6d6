"""Issue 13, continued: the move back to plan A, and the fallback controller killed at the worst moments.

The same simulated GKE, Kueue configuration and controller as test_stockout_fallback_e2e.py (whose helpers this
uses), on a cluster of its own, so that a parallel run (./scripts/test, one module per worker at a time) runs the
two halves side by side. Run one alone with e.g.
`venv/bin/python -m pytest tests/e2e/test_stockout_moves_e2e.py -m e2e -s -k killed_right_after`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e.test_stockout_fallback_e2e import (
    PLAN_A,
    PLAN_A_POOL,
    PLAN_B,
    PLAN_B_POOL,
    assert_ran_once,
    events_on,
    report,
    taint_values,
)

pytestmark = pytest.mark.e2e


def test_move_back_to_plan_a_when_it_frees_never_once_dws_capacity_arrived(fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario() as env:
        out = fs.run_move_back(env)
        report(out)
    assert_move_back(out.facts)


def assert_move_back(facts: Mapping[str, Any]) -> None:
    jobs = facts["jobs"]
    first, second, third = jobs["move-1"], jobs["move-2"], jobs["move-3"]
    assert first["reserved"] == [PLAN_A] and first["worker_pools"] == {PLAN_A_POOL}, first
    # Job 2 waited on plan B (its ProvisioningRequest queued: dws stocked out), then moved to plan A once job 1
    # finished, and ran on plan A's pool.
    assert facts["second_flavor_before"] == PLAN_B, facts
    assert second["reserved"] == [PLAN_B, PLAN_A], second
    assert second["worker_pools"] == {PLAN_A_POOL}, second
    assert "tpu-fallback.dev/moved-to-plan-a" in second["annotations"], second
    assert fs.MOVING_ANNOTATION not in second["annotations"], second
    assert events_on(facts, fs.MOVED_EVENT, "Workload", second["workload_names"][0]) == 1, facts["events"]
    print(f"  job 2 ran on plan A {facts['second_running_after_first']:.1f} s after job 1 finished")
    # Job 3 got its DWS capacity (Provisioned) and ran on plan B; plan A's quota freed while it ran: not moved.
    assert any(c == {"Accepted": "True", "Provisioned": "True"} for c in facts["third_request"].values()), facts
    assert third["reserved"] == [PLAN_B] and third["worker_pools"] == {PLAN_B_POOL}, third
    assert facts["third_flavor_after"] == PLAN_B and facts["third_active_after"] is not False, facts
    assert third["evictions"] == {} and not third["annotations"], third
    assert events_on(facts, fs.MOVED_EVENT) == 1, facts["events"]
    # No stock-out here: plan A never closed.
    assert events_on(facts, fs.STOCKOUT_EVENT) == 0, facts["events"]
    for job in (first, second, third):
        assert_ran_once(job)
    # The controller that finished the move counted it (after a restart: the new process).
    assert facts["metrics"].get("tpu_fallback_moves_to_plan_a_total") == 1, facts["metrics"]


def test_controller_killed_right_after_the_taint_the_job_still_falls_back_once(fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario() as env:
        out = fs.run_restart_during_stockout(env)
        report(out)
    facts = out.facts
    bound: fs.Bounds = facts["bound"]
    (job,) = facts["jobs"].values()
    assert job["reserved"] == [PLAN_A, PLAN_B], job
    assert job["evictions"] == {"Deactivated": 1}, job  # evicted by the controller, not Kueue's timeout
    assert job["worker_pools"] == {PLAN_B_POOL}, job
    assert facts["to_running"] <= bound.to_plan_b(), (facts["to_running"], bound.describe())
    assert_ran_once(job)
    # The restarted controller kept the taint as it was (same value: no second close) ...
    before = facts["taint_before_kill"][PLAN_A][-1][1]
    assert before is not None and taint_values(facts["taint_after_restart"][PLAN_A])[1:] == [before], facts
    # ... and reopened plan A once a plan A node, newer than the taint, was Ready: before the cool-down's end.
    changes = facts["taints"][PLAN_A]
    assert taint_values(changes) == [None, before, None], changes
    assert facts["reopened_at"] < facts["cool_down_end"], facts
    # An Event is a courtesy: a kill between the taint and its Event loses that one, but none is ever repeated.
    assert events_on(facts, fs.STOCKOUT_EVENT, "ResourceFlavor", PLAN_A) <= 1, facts["events"]
    assert events_on(facts, fs.REOPENED_EVENT, "ResourceFlavor", PLAN_A) == 1, facts["events"]


def test_controller_killed_in_the_middle_of_a_move_back_the_move_completes(fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario() as env:
        out = fs.run_move_back(env, kill_after_deactivation=True)
        report(out)
    facts = out.facts
    # Killed while job 2's Workload was deactivated for the move (nothing reactivated it while the controller was
    # down); the restarted controller finished the move.
    assert facts["active_when_killed"] is False, facts
    assert fs.MOVING_ANNOTATION in facts["annotations_when_killed"], facts
    assert facts["active_while_down"] is False, facts
    assert_move_back(facts)
