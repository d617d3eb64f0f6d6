"""Issue 13: fall back on a real stock-out, not only on quota (simulated GKE, real Kueue, the fallback controller).

The cluster is gke_sim's (real etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK, KubeRay and
Kueue 0.19.2, all from Go modules), with Kueue running the `waitForPodsReady` block of the stack's offline plan
and the fallback controller (`python -m tpu_fallback.fallback`) as a subprocess with the plan's config.json; see
tests/e2e/fallback_scenarios.py. The stack is dev with short fallback times (fallback_scenarios.FALLBACK:
stockoutAfter 20 s, coolDown 45 s, poll 1 s, requeue backoff 1 s; real seconds, since Kueue and the controller run
on the wall clock). One cluster for the module (reset between tests; TPU_FALLBACK_GKE_FRESH=1: one per test), a
fresh controller per test. Run one alone with e.g.
`venv/bin/python -m pytest tests/e2e/test_stockout_fallback_e2e.py -m e2e -s -k stockout`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs

pytestmark = pytest.mark.e2e

PLAN_A, PLAN_B = "on-demand", "dws"  # the dev stack's TPU flavors
PLAN_A_POOL, PLAN_B_POOL = fs.PLAN_A_POOL, fs.PLAN_B_POOL
# The controller's pass and the watch's view of the taint after GKE's Event, on top of one poll (real seconds).
CLOSE_LATENCY = 5.0


def report(outcome: gs.Outcome) -> None:
    for line in outcome.watch.figures():
        print("  " + line)
    watch = outcome.watch
    if isinstance(watch, fs.FallbackWatch):
        print(watch.describe_workloads())
        print(f"  plan A taints: {watch.plan_a_taint_changes()}")
    for line in outcome.facts.get("controller_log", []):
        print(f"  | {line}")


def taint_values(changes: Sequence[tuple[float, str | None]]) -> list[str | None]:
    return [value for _t, value in changes]


def events_on(facts: Mapping[str, Any], reason: str, kind: str | None = None, name: str | None = None) -> int:
    return fs.event_count(facts["events"][reason], kind, name)


def assert_ran_once(job: Mapping[str, Any]) -> None:
    """One Workload for the RayJob, ever; it completed, and its Ray job succeeded once."""
    assert job["workloads_ever"] == 1 and job["workloads_now"] == 1, job
    assert job["state"] == "Complete", job
    assert job["succeeded_submitters"] == 1, job
    assert job["succeeded"] in (None, 1), job


def test_kueue_runs_with_the_plans_wait_for_pods_ready(fallback_box: fs.FallbackBox) -> None:
    """The Kueue under test has the block the plan's Helm values ship (its log prints the loaded Configuration)."""
    block = fallback_box.wait_for_pods_ready
    assert block is not None, "the plan's Kueue Helm values have no waitForPodsReady"
    config = fs.controller_config(fallback_box.infra)
    assert fs.parse_duration(block["timeout"]) > config["stockoutAfterSeconds"], (block, config)
    assert block.get("blockAdmission") is False, block
    assert block["requeuingStrategy"]["timestamp"] == "Creation", block
    with fallback_box.scenario(controller=False) as env:
        assert env.plane.kueue_configuration()["waitForPodsReady"] == block
        loaded = next(line for line in env.plane.kueue_log.read_text().splitlines() if "Configuration loaded" in line)
    assert "waitForPodsReady" in loaded, loaded
    # Kueue prints the loaded config with Go's time.Duration format (1800s as 30m0s).
    assert f"timeout: {go_duration(int(fs.parse_duration(block['timeout'])))}" in loaded.replace('\\n', '\n'), loaded


def go_duration(seconds: int) -> str:
    """Go's time.Duration.String() of whole seconds: 45s, 10m0s, 1h0m0s."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def test_plan_a_stockout_job_1_falls_back_new_jobs_skip_plan_a_then_plan_a_reopens(
        fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario() as env:
        out = fs.run_stockout_fallback(env)
        report(out)
    facts = out.facts
    bound: fs.Bounds = facts["bound"]
    jobs = facts["jobs"]
    first, second, third = jobs["stockout-1"], jobs["stockout-2"], jobs["stockout-3"]
    print(f"  job 1: all pods Running on plan B {facts['first_to_running']:.1f} s after submission "
          f"(bound {bound.describe()}), GKE's FailedScaleUp at {facts['failed_scale_up_at']}; "
          f"plan A tainted {facts['tainted_at'] - facts['first_submitted']:.1f} s after submission, "
          f"reopened at {facts['reopened_at']:.1f} s")

    # Job 1: admitted to plan A (stocked out), evicted once by the controller on GKE's FailedScaleUp (not by Kueue's
    # PodsReady timeout, and well before stockoutAfter), re-admitted to plan B, ran on the DWS pool.
    assert first["reserved"] == [PLAN_A, PLAN_B], first
    assert first["evictions"] == {"Deactivated": 1}, first
    assert first["worker_pools"] == {PLAN_B_POOL}, first
    signal = facts["failed_scale_up_at"]
    assert signal is not None, "the simulated GKE wrote no FailedScaleUp"
    # Events carry whole seconds: 1 s of slack on the event's time.
    assert facts["tainted_at"] - signal <= bound.poll + 1 + CLOSE_LATENCY, facts
    assert facts["tainted_at"] - facts["first_submitted"] < bound.stockout_after, facts
    assert facts["running_at"] - signal <= bound.after_signal() + 1, (facts, bound.describe())
    assert_ran_once(first)

    # Job 2, submitted while plan A is closed: straight to plan B, never reserved on plan A, never evicted.
    assert facts["tainted_when_second_submitted"], facts
    assert second["reserved"] == [PLAN_B], second
    assert second["evictions"] == {}, second
    assert second["worker_pools"] == {PLAN_B_POOL}, second
    assert_ran_once(second)

    # Capacity back and the cool-down over: plan A is offered again and job 3 runs there.
    assert third["reserved"] == [PLAN_A], third
    assert third["worker_pools"] == {PLAN_A_POOL}, third
    assert third["evictions"] == {}, third
    assert_ran_once(third)

    # The taint went on once and came off once, on plan A's flavor only; one Event of each.
    changes = facts["taints"][PLAN_A]
    assert taint_values(changes)[0] is None and taint_values(changes)[2:] == [None], changes
    assert len(changes) == 3 and changes[1][1] is not None, changes
    assert changes[2][0] - changes[1][0] >= bound.cool_down - bound.poll - 1, changes
    assert all(value is None for value in taint_values(facts["all_taints"].get(PLAN_B, []))), facts["all_taints"]
    assert events_on(facts, fs.STOCKOUT_EVENT, "ResourceFlavor", PLAN_A) == 1, facts["events"]
    assert events_on(facts, fs.STOCKOUT_EVENT, "Workload", first["workload_names"][0]) == 1, facts["events"]
    assert events_on(facts, fs.REOPENED_EVENT, "ResourceFlavor", PLAN_A) == 1, facts["events"]
    assert events_on(facts, fs.MOVED_EVENT) == 0, facts["events"]
    metrics = facts["metrics"]
    assert metrics.get("tpu_fallback_plan_a_closes_total") == 1, metrics
    assert metrics.get("tpu_fallback_plan_a_reopens_total") == 1, metrics
    assert metrics.get("tpu_fallback_plan_a_closed") == 0, metrics
    assert metrics.get("tpu_fallback_moves_to_plan_a_total") == 0, metrics


def test_plan_a_quota_full_falls_back_as_before_and_never_taints(fallback_box: fs.FallbackBox) -> None:
    """The tutorial (2 jobs, dev stack) with the fallback on: plan A's quota takes job 1, job 2 goes to dws."""
    with fallback_box.scenario() as env:
        out = fs.run_quota_fallback(env)
        report(out)
    facts = out.facts
    first, second = facts["jobs"]["quota-1"], facts["jobs"]["quota-2"]
    assert first["reserved"] == [PLAN_A] and first["worker_pools"] == {PLAN_A_POOL}, first
    assert second["reserved"] == [PLAN_B] and second["worker_pools"] == {PLAN_B_POOL}, second
    ((_request, conditions),) = facts["requests"].items()
    assert conditions == {"Accepted": "True", "Provisioned": "True"}, facts["requests"]
    for job in (first, second):
        assert job["evictions"] == {}, job
        assert_ran_once(job)
    assert all(value is None for changes in facts["taints"].values() for value in taint_values(changes)), facts
    assert all(events_on(facts, reason) == 0 for reason in fs.FALLBACK_EVENTS), facts["events"]
