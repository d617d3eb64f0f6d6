"""Issue 37 item 8 on the simulated GKE (dev stack, real Kueue, the controller as shipped): no job lost to DWS
failures.

- Repeated Failed ProvisioningRequests never deactivate the job: the stack's retryStrategy has no retry limit
  (render/kueue.py dws_retry_strategy; docs/dws-failures.md). Kueue's default limit (3) deactivated the Workload
  after the fourth failure for good. The test shortens only the back-off in the cluster's ProvisioningRequestConfig
  (the stack's is 60 s doubling to 600 s, real seconds here), never the limit.
- A Workload Kueue deactivates anyway (GKE revoked the capacity of a running job: CapacityRevoked, which Kueue
  rejects whatever the strategy) is told in one Warning Event on the Workload (DeactivatedByKueue) and queued
  again by the controller after the cool-down (Revived), and runs.

Run it alone with `venv/bin/python -m pytest tests/e2e/test_dws_failures_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import scenario
from tests.e2e.gke_sim import with_run_time
from tpu_fallback.render.kueue import DWS_CONFIG

pytestmark = pytest.mark.e2e

PLAN_A, PLAN_B = "on-demand", "dws"
FAILURES = 5  # more than Kueue's default backoffLimitCount (3), which deactivated the job at the fourth


@pytest.fixture(scope="module")
def box() -> Iterator[fs.FallbackBox]:
    with fs.FallbackBox() as cluster_box:
        yield cluster_box


def requests_of(env: fs.Env, job: str) -> dict[str, dict[str, dict[str, str]]]:
    return {k: c for k, c in env.sim.requests().items() if k.startswith(f"default/rayjob-{job}-")}


def attempt(name: str) -> int:
    """The attempt number Kueue puts at the end of a request's name (<workload>-dws-prov-<N>)."""
    return int(name.rsplit("-", 1)[1])


def workload(env: fs.Env, job: str) -> dict[str, Any]:
    return scenario.workload_of(env.client, "default", job) or {}


def events_of(env: fs.Env, reason: str, name: str) -> list[dict[str, Any]]:
    return [e for e in fs.fallback_events(env.client, reason) if e["involvedObject"].get("name") == name]


def test_repeated_dws_failures_never_deactivate_the_job_and_it_runs_once_capacity_comes(box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim = env.client, env.sim
        watch = env.watch()
        scenario.apply_infra(client, env.infra)
        config = client.get("kueue.x-k8s.io/v1beta2", "ProvisioningRequestConfig", DWS_CONFIG) or {}
        limit = config["spec"]["retryStrategy"]["backoffLimitCount"]
        config["spec"]["retryStrategy"].update(backoffBaseSeconds=1, backoffMaxSeconds=2)  # the limit stays
        client.apply({"apiVersion": config["apiVersion"], "kind": config["kind"],
                      "metadata": {"name": DWS_CONFIG}, "spec": config["spec"]})
        watch.poll()
        sim.set_capacity(fs.PLAN_B_POOL, False)  # DWS keeps the request queued: only the failures below end them
        objects = fs._jobs(env, 2, "dwsfail", {1: 150, 2: 5})
        first = fs._submit_one(watch, objects, "dwsfail-1")  # holds plan A's quota throughout
        second = fs._submit_one(watch, objects, "dwsfail-2")
        watch.wait_running([first], 60)
        seen_inactive: list[Any] = []
        for n in range(1, FAILURES + 1):
            def accepted(n: int = n) -> str | None:
                watch.poll()
                wl = workload(env, "dwsfail-2")
                if (wl.get("spec") or {}).get("active") is False:
                    seen_inactive.append(wl)
                return next((k for k, c in requests_of(env, "dwsfail-2").items() if attempt(k) == n
                             and c.get("Accepted", {}).get("status") == "True"), None)

            request = watch.wait(accepted, 90, f"attempt {n} of job 2's ProvisioningRequest Accepted")
            sim.inject_condition(request, "Failed", "simulated failure: capacity not found within the deadline")
        sim.set_capacity(fs.PLAN_B_POOL, True)
        watch.wait_running([second], 120)
        final = workload(env, "dwsfail-2")
        check = next(c for c in final["status"]["admissionChecks"] if c["name"] == "dws-prov")
        track = watch.track(second)
        watch.wait_finished([second], 120)
        told = events_of(env, "DeactivatedByKueue", final["metadata"]["name"])
        attempts = sorted(attempt(k) for k in requests_of(env, "dwsfail-2"))
    print(f"  retry limit {limit}; attempts {attempts}; check {check}; reserved {track.flavors_reserved()}")
    assert limit >= 2**31 - 1, limit  # the stack's: no limit Kueue could reach
    assert seen_inactive == [] and track.deactivated_at is None, (seen_inactive[:1], track.deactivated_at)
    assert ("DeactivationTarget", "True", "AdmissionCheck") not in track.conditions_seen, track.conditions_seen
    assert attempts == list(range(1, FAILURES + 2)), attempts  # five failed, the sixth provisioned
    assert check["state"] == "Ready", check
    assert told == [], told  # nothing to tell: Kueue never gave up
    assert track.flavors_reserved()[-1] == PLAN_B, track.flavors_reserved()


def test_a_job_kueue_deactivates_after_gke_revokes_its_capacity_is_told_and_queued_again(
        box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim = env.client, env.sim
        bound = env.bounds()
        watch = env.watch()
        scenario.apply_infra(client, env.infra)
        watch.poll()
        objects = fs._jobs(env, 2, "revoke", {1: 150})
        objects = [with_run_time(o, 60) if o["metadata"]["name"] == "revoke-2" else o for o in objects]
        first = fs._submit_one(watch, objects, "revoke-1")  # plan A's quota, so that job 2 goes to plan B
        second = fs._submit_one(watch, objects, "revoke-2")
        watch.wait_running([first, second], 90)
        (request,) = requests_of(env, "revoke-2")
        sim.inject_condition(request, "CapacityRevoked")
        track = watch.track(second)
        watch.wait(lambda: track.deactivated_at, 60, "Kueue to deactivate job 2 (its check Rejected)")
        name = sorted(track.names)[0]
        told = watch.wait(lambda: events_of(env, "DeactivatedByKueue", name), 30,
                          "the controller's one Event on the deactivated Workload")
        # The cool-down runs from Kueue's deactivation (its condition's time), to the Revived Event's: both written
        # by the components, in whole seconds, so the bound holds whatever this test's own latency under load.
        conditions = (workload(env, "revoke-2").get("status") or {}).get("conditions") or []
        deactivated_at = max(fs._unix(c.get("lastTransitionTime")) or 0.0 for c in conditions
                             if str(c.get("reason", "")).startswith("DeactivatedDueTo"))
        revived = watch.wait(lambda: events_of(env, "Revived", name), bound.cool_down + fs.CONTROLLER_LATENCY + 30,
                             "the controller to queue job 2 again after the cool-down")
        revived_at = fs._unix(revived[0].get("firstTimestamp") or revived[0].get("eventTime")) or 0.0
        revived_after = revived_at - deactivated_at
        watch.wait_finished([second], 180)
        summary = fs.job_summary(client, watch, second)
        told_again = events_of(env, "DeactivatedByKueue", name)
    print(f"  told: {told[0]['message']}\n  revived {revived_after:.0f} s later: {revived[0]['message']}; "
          f"reserved {summary['reserved']}, state {summary['state']}")
    assert told[0]["type"] == "Warning" and "dws-prov" in told[0]["message"], told
    assert "queues it again in" in told[0]["message"], told
    assert len(told_again) == 1, told_again  # told once
    assert bound.cool_down - 1 <= revived_after <= bound.cool_down + fs.CONTROLLER_LATENCY + 1, revived_after
    assert len(revived) == 1 and "revival 1 of 3" in revived[0]["message"], revived
    assert summary["reserved"][:1] == [PLAN_B] and len(summary["reserved"]) >= 2, summary
    assert summary["state"] == "Complete", summary
