"""Issue 26's "done when" on the simulated GKE, the fallback's life cycle: an admin's own taint on plan A through a
close, a reopen and a second close; the probe of a reopened, still stocked-out plan A; the controller removed (plan
A reopened at once, the job it had deactivated active again) and restarted with its Deployment in place (the close
kept).

A module of its own beside test_stockout_evidence_e2e.py (the same simulated GKE, Kueue configuration and
controller subprocess, on a cluster of its own) so that a parallel run works on both at once: each waits on the
fallback's timers (the 45 s cool-down) most of its time. Bounds are the config's times plus
fallback_scenarios.CONTROLLER_LATENCY (15 s), never a tight race. Each scenario is asserted by two tests (one
run, two independent claims). Run one alone with e.g.
`venv/bin/python -m pytest tests/e2e/test_fallback_lifecycle_e2e.py -m e2e -p no:xdist -s -k restarted`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e.test_stockout_fallback_e2e import (
    CLOSE_LATENCY,
    PLAN_A,
    PLAN_B,
    PLAN_B_POOL,
    assert_ran_once,
    events_on,
    report,
    taint_values,
)

pytestmark = pytest.mark.e2e


# --- 4 and 6: an admin's taint through close, reopen and a second close; the probe after the cool-down -------------


@pytest.fixture(scope="module")
def probe(fallback_box: fs.FallbackBox) -> Iterator[gs.Outcome]:
    """One run of fs.run_admin_taint_and_probe for the two tests below."""
    with fallback_box.scenario() as env:
        out = fs.run_admin_taint_and_probe(env)
        report(out)
    yield out


def test_an_admins_taint_on_plan_a_survives_the_close_and_the_reopen(probe: gs.Outcome) -> None:
    facts = probe.facts
    admin = dict(fs.ADMIN_TAINT)
    ours = facts["taints"][facts["flavor"]]
    print(f"  {facts['flavor']}'s taints: before {facts['taints_before']}, closed {facts['taints_closed']}, "
          f"reopened {facts['taints_reopened']}, closed again {facts['taints_reclosed']}")
    assert facts["taints_before"] == [admin], facts["taints_before"]
    # Closed: the admin's taint unchanged, the controller's next to it.
    assert admin in facts["taints_closed"] and len(facts["taints_closed"]) == 2, facts["taints_closed"]
    assert {t["key"] for t in facts["taints_closed"]} == {admin["key"], fs.DEFAULT_TAINT_KEY}, facts["taints_closed"]
    # Reopened: only the controller's taint is gone.
    assert facts["taints_reopened"] == [admin], facts["taints_reopened"]
    assert admin in facts["taints_reclosed"] and len(facts["taints_reclosed"]) == 2, facts["taints_reclosed"]
    # And at every change the watch saw from the admin's patch on.
    history = facts["flavor_taints"][facts["flavor"]]
    start = next(i for i, (_t, taints) in enumerate(history) if admin in taints)
    assert all(admin in taints and sum(t["key"] == admin["key"] for t in taints) == 1
               for _t, taints in history[start:]), history
    assert taint_values(ours)[-3:] == [facts["taints_closed"][-1]["value"], None,
                                       facts["taints_reclosed"][-1]["value"]], ours


def test_a_probe_of_the_reopened_still_stocked_out_plan_a_costs_seconds_not_stockout_after(probe: gs.Outcome) -> None:
    facts = probe.facts
    bound: fs.Bounds = facts["bound"]
    first, second = facts["jobs"]["probe-1"], facts["jobs"]["probe-2"]
    s = facts["second"]
    assert s["no_capacity"], "GKE's autoscaler said nothing about job 2's pods"
    signal = s["no_capacity"][0] - facts["wall_minus_watch"]  # watch time
    # From the close (the taint's value: its unix time, truncated) to the reopen the watch saw (never early).
    closed_for = facts["reopened_at"] - (facts["close_value"] - facts["wall_minus_watch"])
    print(f"  plan A closed for {closed_for:.1f} s (coolDown {bound.cool_down:g} s); "
          f"job 2 admitted to the reopened plan A, GKE's first no-capacity Event on its pods "
          f"{signal - s['submitted']:.0f} s after submission, plan A closed again "
          f"{facts['reclose_value'] - s['no_capacity'][0]:.0f} s after it, job 2 Running on plan B "
          f"{s['running'] - signal:.1f} s after it (bound {bound.after_signal() + 1:g} s), "
          f"{s['running'] - s['submitted']:.1f} s after submission")

    # Plan A stayed closed for the cool-down, then reopened (capacity never came back).
    assert closed_for >= bound.cool_down - 0.5, (closed_for, facts)
    # Job 2 went to the reopened plan A, was evicted once on GKE's Event and ran on plan B.
    assert second["reserved"] == [PLAN_A, PLAN_B], second
    assert second["evictions"] == {"Deactivated": 1}, second
    assert second["worker_pools"] == {PLAN_B_POOL}, second
    assert_ran_once(second)
    # The second close came on the Event (whole seconds: 1 s of slack), long before stockoutAfter.
    reclose, admitted = facts["reclose_value"], s["admitted_kueue"]
    assert reclose - s["no_capacity"][0] <= bound.poll + 1 + CLOSE_LATENCY, facts
    assert reclose < admitted + bound.stockout_after, (reclose, admitted)
    assert s["running"] - signal <= bound.after_signal() + 1, (s, bound.describe())
    # Job 1 as in the plain stock-out; two closes, one reopen.
    assert first["reserved"] == [PLAN_A, PLAN_B] and first["worker_pools"] == {PLAN_B_POOL}, first
    assert_ran_once(first)
    assert events_on(facts, fs.STOCKOUT_EVENT, "ResourceFlavor", PLAN_A) == 2, facts["events"]
    assert events_on(facts, fs.REOPENED_EVENT, "ResourceFlavor", PLAN_A) == 1, facts["events"]
    metrics = facts["metrics"]
    assert metrics.get("tpu_fallback_plan_a_closes_total") == 2, metrics
    assert metrics.get("tpu_fallback_plan_a_reopens_total") == 1, metrics


# --- 5. the controller removed leaves no taint; restarted, it keeps the close ------------------------------------


@pytest.fixture(scope="module")
def removal(fallback_box: fs.FallbackBox) -> Iterator[gs.Outcome]:
    """One run of fs.run_controller_removed_then_restarted for the two tests below."""
    with fallback_box.scenario() as env:
        out = fs.run_controller_removed_then_restarted(env)
        report(out)
    yield out


def test_the_controller_removed_reopens_plan_a_at_once_and_requeues_the_job_it_had_deactivated(
        removal: gs.Outcome) -> None:
    facts = removal.facts
    print(f"  job 1 before SIGTERM: {facts['before_sigterm']}; exit {facts['exit_removed']} "
          f"{facts['exited_at'] - facts['sigterm_at']:.2f} s after SIGTERM; plan A reopened "
          f"{_after(facts['reopened_at'], facts['sigterm_at'])} after SIGTERM; job 1 after: {facts['after_removal']}")
    assert facts["deployment_before"], "the scenario needs the controller's Deployment in the API server"
    # When the Deployment went, job 1 was deactivated by the controller, still reserved (Kueue had not released
    # it, so the controller could not have reactivated it itself).
    before = facts["before_sigterm"]
    assert before["active"] is False and before["reserved"] == "True", before
    assert fs.EVICTING_ANNOTATION in before["annotations"], before
    deployment = facts["deployment_after"]
    assert deployment is None or deployment["metadata"].get("deletionTimestamp"), deployment
    assert facts["exit_removed"] == 0, facts["controller_log"][-20:]
    # No taint outlives the controller: gone at once (well within the cool-down).
    assert facts["reopened_at"] is not None, facts["taints_after_removal"]
    assert facts["reopened_at"] - facts["sigterm_at"] <= CLOSE_LATENCY, facts
    close = facts["taints_after_removal"][PLAN_A]
    assert taint_values(close)[0] is None and taint_values(close)[-1] is None and len(close) == 3, close
    # ... and no job stays deactivated by a controller that will not come back.
    assert facts["after_removal"]["active"] is not False, facts["after_removal"]
    assert fs.EVICTING_ANNOTATION not in facts["after_removal"]["annotations"], facts["after_removal"]


def test_the_controller_restarted_with_its_deployment_in_place_keeps_the_close(removal: gs.Outcome) -> None:
    facts = removal.facts
    (job,) = facts["jobs"].values()
    changes = facts["taints"][PLAN_A]
    print(f"  taint changes {changes}; job 1 reserved {job['reserved']}, evictions {job['evictions']}")
    assert facts["reclose_value"] is not None, changes
    reclose = f"{facts['reclose_value']:.0f}"
    # SIGTERM with the Deployment in place: the process exits cleanly and the close stays, as it was.
    assert facts["exit_restart"] == 0, facts["controller_log"][-20:]
    assert facts["taint_after_restart_exit"] == reclose, facts
    assert facts["tainted_while_down"], facts
    # The next process carried on (no second stamp, no reopen): job 1 ran on plan B, once.
    assert taint_values(changes)[-1] == reclose and taint_values(changes).count(reclose) == 1, changes
    assert events_on(facts, fs.REOPENED_EVENT, "ResourceFlavor", PLAN_A) == 1, facts["events"]  # the removal's
    assert job["reserved"][0] == PLAN_A and job["reserved"][-1] == PLAN_B, job
    assert job["worker_pools"] == {PLAN_B_POOL}, job
    assert_ran_once(job)


def _after(t: float | None, since: float) -> str:
    return "never" if t is None else f"{t - since:.2f} s"
