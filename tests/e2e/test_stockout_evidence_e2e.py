"""Issue 26's "done when" on the simulated GKE: plan A closes on evidence of a stock-out, never on a job's own slow
start, and Kueue's backstop never evicts a plan B job that starts slowly. What the fallback leaves behind (an
admin's taint, the probe after the cool-down, the controller removed or restarted) is test_fallback_lifecycle_e2e.py.

The same simulated GKE, Kueue configuration (the plan's waitForPodsReady: a 30 min backstop) and controller
subprocess as test_stockout_fallback_e2e.py (whose helpers this uses), on a cluster of its own (reset between
tests), so a parallel run works on both at once. The stack is dev with fallback_scenarios.FALLBACK's short times
(stockoutAfter 20 s, coolDown 45 s, poll 1 s, requeue back-off 1 s; real seconds); one scenario adds a second
plan A slice (TWO_SLICES_FALLBACK). Bounds are the config's times plus fallback_scenarios.CONTROLLER_LATENCY (15 s)
for the controllers and the polls, never a tight race. Run one alone with e.g.
`venv/bin/python -m pytest tests/e2e/test_stockout_evidence_e2e.py -m e2e -p no:xdist -s -k backstop`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e.test_stockout_fallback_e2e import (
    CLOSE_LATENCY,
    PLAN_A,
    PLAN_A_POOL,
    PLAN_B,
    PLAN_B_POOL,
    assert_ran_once,
    events_on,
    report,
)

pytestmark = pytest.mark.e2e

# Kueue's old PodsReady timeout, which evicted plan B jobs that started slowly: stockoutAfter + this.
OLD_TIMEOUT_MARGIN = 15.0


def _tainted_ever(facts: Mapping[str, Any]) -> dict[str, list[tuple[float, str | None]]]:
    return {f: h for f, h in facts["all_taints"].items() if any(v is not None for _t, v in h)}


# --- 1. events never seen: the backstop ----------------------------------------------------------------------------


def test_autoscaler_events_never_seen_the_stockout_after_backstop_still_moves_job_1_to_plan_b(
        fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario() as env:
        out = fs.run_backstop_without_events(env)
        report(out)
    facts = out.facts
    bound: fs.Bounds = facts["bound"]
    job = facts["jobs"]["backstop-1"]
    close, admitted = facts["close_value"], facts["admitted_kueue"]
    print(f"  job 1: plan A closed {close - admitted:.0f} s after its admission (stockoutAfter "
          f"{bound.stockout_after:g} s), all pods Running on plan B {facts['to_running']:.1f} s after submission "
          f"(bound {bound.backstop_to_plan_b():g} s); autoscaler Events not written: {facts['suppressed_count']} "
          f"({', '.join(facts['suppressed'])})")

    # The switch worked: GKE's autoscaler had things to say (it failed the scale-ups) and none of it was written.
    assert "FailedScaleUp" in facts["suppressed"], facts["suppressed"]
    assert facts["autoscaler_events"] == dict.fromkeys(fs.AUTOSCALER_REASONS, 0), facts["autoscaler_events"]
    # Closed by the timer: not before stockoutAfter after Kueue's admission (both in whole seconds: the taint's
    # value is the close's unix time, truncated; the Admitted condition's time too), and not much after it.
    assert close is not None and admitted is not None, facts
    assert close >= admitted + bound.stockout_after, (close, admitted, bound.describe())
    assert close <= admitted + bound.stockout_after + bound.poll + CLOSE_LATENCY, (close, admitted)
    # Job 1 evicted once by the controller, re-admitted to plan B, ran there within the backstop's bound.
    assert job["reserved"] == [PLAN_A, PLAN_B], job
    assert job["evictions"] == {"Deactivated": 1}, job
    assert job["worker_pools"] == {PLAN_B_POOL}, job
    assert facts["to_running"] <= bound.backstop_to_plan_b(), (facts["to_running"], bound.backstop_to_plan_b())
    assert_ran_once(job)
    assert events_on(facts, fs.STOCKOUT_EVENT, "ResourceFlavor", PLAN_A) == 1, facts["events"]
    assert events_on(facts, fs.STOCKOUT_EVENT, "Workload", job["workload_names"][0]) == 1, facts["events"]
    assert facts["metrics"].get("tpu_fallback_plan_a_closes_total") == 1, facts["metrics"]


# --- 2. a job that is scheduled but never Ready is its own problem ------------------------------------------------


def test_a_job_scheduled_on_plan_a_but_never_ready_never_closes_plan_a(fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario(stack=fs.TWO_SLICES_FALLBACK) as env:
        out = fs.run_not_ready_with_capacity(env)
        report(out)
    facts = out.facts
    bound: fs.Bounds = facts["bound"]
    plans = facts["plans"]
    first, second = facts["jobs"]["notready-1"], facts["jobs"]["notready-2"]
    print(f"  job 1 admitted to {facts['first_flavor']}, its workers {facts['first_pods']}; held "
          f"{facts['held_after_admission']:.1f} s after its admission (stockoutAfter {bound.stockout_after:g} s); "
          f"job 2 reserved {second['reserved']} and ran on {sorted(second['worker_pools'])}")

    # Job 1: on plan A with capacity (the pool grew, its workers are bound there), never Ready (image never pulls).
    assert plans.get(facts["first_flavor"]) == "on-demand", (facts["first_flavor"], plans)
    assert len(facts["first_pods"]) == 4, facts["first_pods"]
    for pod in facts["first_pods"] + facts["first_pods_end"]:
        assert pod == {"phase": "Pending", "pool": PLAN_A_POOL, "ready": "False", "waiting": ["ImagePullBackOff"]}, pod
    assert facts["first_running"] is None, facts
    assert facts["held_after_admission"] >= bound.stockout_after + 5 * bound.poll, facts
    # Plan A was never closed, no stock-out was claimed, nothing was evicted.
    assert facts["tainted_before_second"] is None, facts["all_taints"]
    assert _tainted_ever(facts) == {}, facts["all_taints"]
    assert events_on(facts, fs.STOCKOUT_EVENT) == 0, facts["events"]
    assert first["evictions"] == {} and first["workloads_ever"] == 1, first
    metrics = facts["metrics"]
    assert metrics.get("tpu_fallback_plan_a_closes_total") == 0, metrics
    assert metrics.get("tpu_fallback_evictions_total") == 0, metrics
    # Job 2, healthy, submitted after all that: plan A (its second slice), not plan B.
    assert len(second["reserved"]) == 1 and plans.get(second["reserved"][0]) == "on-demand", (second, plans)
    assert second["worker_pools"] == {f"{PLAN_A_POOL}-2"}, second
    assert second["evictions"] == {}, second
    assert_ran_once(second)


# --- 3. a plan B job whose pods start slowly is never evicted ------------------------------------------------------


def test_a_plan_b_job_whose_pods_start_slowly_after_dws_provisioning_is_never_evicted(
        fallback_box: fs.FallbackBox) -> None:
    settings = fs.FALLBACK_SETTINGS
    ready_after = fs.parse_duration(settings["stockoutAfter"]) + OLD_TIMEOUT_MARGIN + 5
    with fallback_box.scenario() as env:
        out = fs.run_slow_start_on_plan_b(env, ready_after)
        report(out)
    facts = out.facts
    bound: fs.Bounds = facts["bound"]
    first, second = facts["jobs"]["slow-1"], facts["jobs"]["slow-2"]
    admitted_to_ready = facts["second_running"] - facts["second_admitted_kueue"]
    print(f"  job 2: admitted to {PLAN_B} (DWS provisioned), workers bound and starting; all Running and Ready "
          f"{admitted_to_ready:.1f} s after its admission (Kueue's old timeout: stockoutAfter + "
          f"{OLD_TIMEOUT_MARGIN:g} = {bound.stockout_after + OLD_TIMEOUT_MARGIN:g} s); conditions seen "
          f"{facts['second_conditions_seen']}")

    assert first["reserved"] == [PLAN_A] and first["worker_pools"] == {PLAN_A_POOL}, first
    assert second["reserved"] == [PLAN_B] and second["worker_pools"] == {PLAN_B_POOL}, second
    assert any(c == {"Accepted": "True", "Provisioned": "True"} for c in facts["second_requests"].values()), facts
    # The slow start really happened: bound on the DWS nodes, not Ready, for longer than the old timeout.
    assert len(facts["second_pods_bound"]) == 4, facts["second_pods_bound"]
    for pod in facts["second_pods_bound"]:
        assert pod == {"phase": "Pending", "pool": PLAN_B_POOL, "ready": "False", "waiting": ["ContainerCreating"]}, pod
    assert admitted_to_ready > bound.stockout_after + OLD_TIMEOUT_MARGIN, (admitted_to_ready, facts)
    # Never evicted, by anyone: no eviction counted, no Evicted condition ever seen, no PodsReadyTimeout, its
    # reservation never released, one Workload; it completed.
    assert second["evictions"] == {}, second
    seen = facts["second_conditions_seen"]
    assert not [c for c in seen if c[0] == "Evicted" and c[1] == "True"], seen
    assert not [c for c in seen if c[2] == "PodsReadyTimeout"], seen
    assert facts["second_releases"] == [], facts["second_releases"]
    assert not second["annotations"], second
    for job in (first, second):
        assert_ran_once(job)
    assert all(events_on(facts, reason) == 0 for reason in fs.FALLBACK_EVENTS), facts["events"]
    assert _tainted_ever(facts) == {}, facts["all_taints"]
    assert facts["metrics"].get("tpu_fallback_evictions_total") == 0, facts["metrics"]
