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

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.kube import KubeClient, KubeError
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


# --- 4. a Workload patch the API server rejects does not stop the close ----------------------------------------------

CONTROLLER_USER = f"system:serviceaccount:{fs.CONTROLLER_NAMESPACE}:{fs.CONTROLLER_NAME}"
REJECT_POLICY = "e2e-reject-the-fallbacks-patches-of-one-job"


PROBE_WORKLOAD = "e2e-policy-probe"


def _reject_policy(job: str) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) that denies the fallback controller's (its ServiceAccount's)
    updates of the Workloads of RayJob `job` (and of PROBE_WORKLOAD), and nobody else's: what a cluster's own
    admission policy (or a webhook that is down) does to one of the controller's patches."""
    expression = (f"!(request.userInfo.username == '{CONTROLLER_USER}' && (object.metadata.name == "
                  f"'{PROBE_WORKLOAD}' || (has(object.metadata.ownerReferences) && "
                  f"object.metadata.ownerReferences.exists(r, r.name == '{job}'))))")
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": REJECT_POLICY},
         "spec": {"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"],
                                                          "operations": ["UPDATE"], "resources": ["workloads"]}]},
                  "validations": [{"expression": expression, "message": "e2e: this job's Workload is not yours"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": REJECT_POLICY},
         "spec": {"policyName": REJECT_POLICY, "validationActions": ["Deny"]}},
    ]


def _wait_policy_in_force(env: fs.Env) -> None:
    """Until the API server denies the controller a (dry-run) update of PROBE_WORKLOAD: it loads a new policy a
    moment after it is stored, and patches let through meanwhile would make the scenario prove nothing. The probe
    Workload names a LocalQueue that does not exist, so Kueue never admits it; it is deleted afterwards."""
    client = env.client
    path = f"/apis/{fs.KUEUE_API}/namespaces/default/workloads"
    client.request("POST", path, {
        "apiVersion": fs.KUEUE_API, "kind": "Workload", "metadata": {"name": PROBE_WORKLOAD, "namespace": "default"},
        "spec": {"queueName": "e2e-no-such-queue", "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"containers": [{"name": "c", "image": "e2e.invalid/none"}]}}}]}})
    kubeconfig = json.loads(Path(env.plane.workdir, "fallback-controller-kubeconfig.json").read_text())
    as_controller = KubeClient(env.plane.server, env.plane.ca_file, kubeconfig["users"][0]["user"]["token"])

    def denied() -> bool:
        try:
            as_controller.request("PATCH", f"{path}/{PROBE_WORKLOAD}", {"metadata": {"labels": {"e2e-probe": "1"}}},
                                  content_type="application/merge-patch+json", query={"dryRun": "All"})
        except KubeError as err:
            if "not yours" in str(err):
                return True
            raise
        return False

    client.wait_for(denied, 30, "the admission policy in force")
    client.request("DELETE", f"{path}/{PROBE_WORKLOAD}")


def run_rejected_patch(env: fs.Env) -> gs.Outcome:
    """Plan A stocked out; an admission policy denies the controller's updates of job 1's Workload. GKE's
    FailedScaleUp on job 1's pods: the controller still closes plan A (the close comes first, and one failed action
    does not end the pass), counts the rejected eviction, and retries it on every pass; job 2, submitted while plan
    A is closed, runs on plan B. Once the policy is removed, the next pass evicts job 1 and it runs on plan B too."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    for obj in _reject_policy("rejected-1"):
        client.apply(obj)
    _wait_policy_in_force(env)
    sim.set_capacity(PLAN_A_POOL, False)
    bound = env.bounds()
    wall_minus_watch = time.time() - watch.now()
    objects = fs._jobs(env, 2, "rejected")
    first = fs._submit_one(watch, objects, "rejected-1")
    watch.wait(watch.tainted, bound.after_signal() + 30, "plan A closed in spite of the rejected patch")
    facts: dict[str, Any] = {
        "bound": bound, "tainted_at": watch.tainted_at_first(),
        "failed_scale_up_at": fs.first_event_time(client, "FailedScaleUp", wall_minus_watch)}
    # A few more passes with the policy in force: the eviction keeps failing, job 1 stays on plan A.
    watch.wait(lambda: env.controller.metrics().get("tpu_fallback_action_errors_total", 0) >= 3,
               10 * bound.poll + 30, "the rejected eviction retried on later passes")
    facts["errors_while_denied"] = env.controller.metrics().get("tpu_fallback_action_errors_total")
    facts["first_flavor_while_denied"] = fs.tpu_flavor(watch.track(first).last)
    facts["first_evictions_while_denied"] = dict(watch.track(first).evictions)
    second = fs._submit_one(watch, objects, "rejected-2")
    watch.wait_running([second], bound.dws_provision + 60)
    facts["tainted_when_second_ran"] = watch.tainted()
    for obj in reversed(_reject_policy("rejected-1")):
        client.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
    facts["policy_removed_at"] = watch.now()
    watch.wait_running([first], bound.to_plan_b() + 60)
    facts["first_running_after_removal"] = (first.running or 0) - facts["policy_removed_at"]
    watch.wait_finished([first, second], 90)
    return fs._finish(env, watch, facts, [first, second])


def test_a_workload_patch_the_api_server_rejects_does_not_stop_the_close(fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario() as env:
        out = run_rejected_patch(env)
        report(out)
    facts = out.facts
    bound: fs.Bounds = facts["bound"]
    first, second = facts["jobs"]["rejected-1"], facts["jobs"]["rejected-2"]
    print(f"  plan A closed {facts['tainted_at'] - facts['failed_scale_up_at']:.1f} s after FailedScaleUp with job "
          f"1's eviction denied; {facts['errors_while_denied']:g} failed actions before job 2; job 1 on plan B "
          f"{facts['first_running_after_removal']:.1f} s after the policy was removed")

    # The close did not wait for the eviction: within the signal's bound of GKE's first FailedScaleUp.
    assert facts["failed_scale_up_at"] is not None and facts["tainted_at"] is not None, facts
    assert facts["tainted_at"] <= facts["failed_scale_up_at"] + CLOSE_LATENCY, facts
    # The rejected eviction was counted (and tried again), and did nothing: job 1 still on plan A, not evicted.
    assert facts["errors_while_denied"] >= 3, facts["metrics"]
    assert facts["first_flavor_while_denied"] == PLAN_A, facts
    assert facts["first_evictions_while_denied"] == {}, facts
    # Plan A closed meanwhile: job 2 went straight to plan B.
    assert facts["tainted_when_second_ran"], facts["all_taints"]
    assert second["reserved"] == [PLAN_B] and second["worker_pools"] == {PLAN_B_POOL}, second
    # Policy gone: the retried eviction went through; job 1 ran on plan B, once.
    assert first["reserved"][0] == PLAN_A and first["reserved"][-1] == PLAN_B, first
    assert first["evictions"] == {"Deactivated": 1}, first
    assert first["worker_pools"] == {PLAN_B_POOL}, first
    assert facts["first_running_after_removal"] <= bound.to_plan_b() + 30, facts
    assert_ran_once(first)
    assert_ran_once(second)
