"""Issue 37's "done when" on the simulated GKE (dev stack, real Kueue, KubeRay, kube-scheduler, the controller as
shipped): the fallback trusts only evidence GKE really gives.

- A Ray head unschedulable on the CPU system pool, with GKE's no-capacity FailedScaleUp on it, never closes plan A
  nor evicts a job whose TPU workers run.
- A failure that is not about capacity (IP space exhausted), and the back-off GKE lists on every pending pod after
  it, close plan A no earlier than stockoutAfter (the backstop), never on GKE's words.
- A job waiting for DWS is never moved onto plan A nodes that are busy (Ready, plan A open and its quota free, but
  every host running another pod); it moves once hosts are free.

The simulated GKE plays GKE's autoscaler from its source (tests/e2e/gke_sim: messages.py, autoscaler.py), so the
traps are real: each test also asserts that GKE's words it must not act on were written. Bounds are the config's
times plus fallback_scenarios.CONTROLLER_LATENCY, from the Events' and conditions' own times. Run it alone with
`venv/bin/python -m pytest tests/e2e/test_evidence_v3_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.gke_sim import POOL_LABEL, pools_from_plan
from tests.e2e.kube import KubeClient

pytestmark = pytest.mark.e2e

PLAN_A, PLAN_B = "on-demand", "dws"
PLAN_A_POOL, PLAN_B_POOL = fs.PLAN_A_POOL, fs.PLAN_B_POOL
ROUNDING = 1.0  # Events, conditions and the taint's value carry whole seconds


@pytest.fixture(scope="module")
def box() -> Iterator[fs.FallbackBox]:
    with fs.FallbackBox() as cluster_box:
        yield cluster_box


def _unix(stamp: str | None) -> float | None:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def pod_events(client: KubeClient, reason: str, pod_prefix: str, words: str = "") -> list[dict[str, Any]]:
    """GKE's autoscaler Events of `reason` on pods whose name starts with `pod_prefix` (and whose message has
    `words`)."""
    return [e for e in gs.events(client, "default", reason)
            if str((e.get("involvedObject") or {}).get("name", "")).startswith(pod_prefix)
            and words in str(e.get("message", ""))]


def taint_history(watch: fs.FallbackWatch) -> dict[str, list[tuple[float, str | None]]]:
    return watch.plan_a_taint_changes()


def ever_tainted(watch: fs.FallbackWatch) -> bool:
    return any(value is not None for history in taint_history(watch).values() for _t, value in history)


def hold(watch: fs.FallbackWatch, seconds: float, what: str) -> None:
    """Let the controllers run for `seconds` (the watch polling meanwhile)."""
    until = watch.now() + seconds
    watch.wait(lambda: watch.now() >= until, seconds + 30, what)


def ballast_pod(name: str, node: str, requests: Mapping[str, str]) -> dict[str, Any]:
    """A pod bound to `node` by name (no scheduler, no Kueue: no queue label), requesting `requests`; KWOK runs it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                            "labels": {"app": "ballast"}},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": dict(requests), "limits": dict(requests)}}]}}


def _nodes_of(client: KubeClient, pool: str) -> list[dict[str, Any]]:
    return [n for n in client.list("v1", "Node") if (n["metadata"].get("labels") or {}).get(POOL_LABEL) == pool]


def _running(client: KubeClient, names: list[str]) -> bool:
    pods = {p["metadata"]["name"]: p for p in client.list("v1", "Pod", "default")}
    return all((pods.get(n, {}).get("status") or {}).get("phase") == "Running" for n in names)


# --- 1. a Ray head unschedulable on the CPU pool --------------------------------------------------------------------


def test_a_ray_head_unschedulable_on_the_cpu_pool_never_closes_plan_a(box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim = env.client, env.sim
        bound = env.bounds()
        # The system pool autoscaled (one node, room for one more) and stocked out; its node full of other work.
        pools = pools_from_plan(env.infra)
        system = next(p for p in pools if not p.tpu)
        sim.reconfigure([replace(p, fixed_nodes=None, max_nodes=2) if p is system else p for p in pools])
        (node,) = sim.add_nodes(system.name, 1)
        client.wait_for(lambda: _nodes_of(client, system.name), 30, "the system pool's node")
        allocatable = _nodes_of(client, system.name)[0]["status"]["allocatable"]
        client.create(ballast_pod("system-ballast", node, {"cpu": allocatable["cpu"], "memory": "1Gi"}))
        client.wait_for(lambda: _running(client, ["system-ballast"]), 60, "the ballast on the system pool")
        sim.set_capacity(system.name, False)
        watch = env.watch()
        scenario.apply_infra(client, env.infra)
        watch.poll()
        objects = fs._jobs(env, 1, "head")
        (job,) = watch.submit(objects)
        track = watch.track(job)
        watch.wait(lambda: track.admitted_at, 60, "the job admitted to plan A")
        admitted = track.admitted_at[0]
        # GKE's no-capacity word on the head (the trap the old evidence fell into), and the workers on plan A.
        watch.wait(lambda: pod_events(client, "FailedScaleUp", f"{job.name}-", "GCE out of resources"), 60,
                   "GKE's FailedScaleUp (out of resources) on the Ray head")
        watch.wait(lambda: fs.workers_on_nodes(client, job) == 4, 60, "the TPU workers on plan A's nodes")
        hold(watch, max(0.0, admitted + bound.stockout_after + 2 * bound.poll + fs.CONTROLLER_LATENCY
                        - (time.time())), "the controller's passes past stockoutAfter")
        facts: dict[str, Any] = {
            "failed_on_head": [e["message"] for e in pod_events(client, "FailedScaleUp", f"{job.name}-")],
            "head_backoff": pod_events(client, "NotTriggerScaleUp", f"{job.name}-", "in backoff"),
            "workers": fs.pod_states(watch, job),
            "tainted": ever_tainted(watch),
            "track": (track.flavors_reserved(), dict(track.evictions), track.deactivated_at),
            "metrics": env.controller.metrics(),
        }
        # The head gets room: the job runs where it was admitted and finishes.
        client.delete("v1", "Pod", "system-ballast", "default")
        watch.wait_finished([job], 120)
        summary = fs.job_summary(client, watch, job)
    print(f"  GKE on the head: {facts['failed_on_head'][:1]}; workers {facts['workers']}; reserved "
          f"{facts['track'][0]}")
    assert all("GCE out of resources" in m for m in facts["failed_on_head"]) and facts["failed_on_head"], facts
    assert all(w["pool"] == PLAN_A_POOL for w in facts["workers"]), facts["workers"]
    assert facts["tainted"] is False, taint_history(watch)
    assert facts["track"] == ([PLAN_A], {}, None), facts["track"]
    assert facts["metrics"].get("tpu_fallback_plan_a_closes_total") == 0, facts["metrics"]
    assert facts["metrics"].get("tpu_fallback_evictions_total") == 0, facts["metrics"]
    assert summary["reserved"] == [PLAN_A] and summary["worker_pools"] == {PLAN_A_POOL}, summary
    assert summary["workloads_ever"] == 1 and summary["state"] == "Complete", summary


# --- 2. a failure that is not about capacity -------------------------------------------------------------------------


def test_a_non_capacity_failure_and_its_back_off_close_plan_a_only_at_stockout_after(box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim = env.client, env.sim
        bound = env.bounds()
        sim.set_failure(PLAN_A_POOL, "ip-space-exhausted")
        watch = env.watch()
        scenario.apply_infra(client, env.infra)
        watch.poll()
        (job,) = watch.submit(fs._jobs(env, 1, "ipspace"))
        track = watch.track(job)
        watch.wait(lambda: watch.tainted_since() is not None,
                   bound.stockout_after + bound.poll + fs.CONTROLLER_LATENCY + 60, "plan A closed by the backstop")
        watch.wait(lambda: PLAN_B in track.flavors_reserved(), 60, "the job re-admitted to plan B")
        close = min(float(v) for h in taint_history(watch).values() for _t, v in h if v is not None)
        facts: dict[str, Any] = {
            "admitted": track.admitted_at[0], "close": close,
            "ip_space": [_unix(e.get("firstTimestamp")) for e in
                         pod_events(client, "FailedScaleUp", f"{job.name}-", "IP space exhausted")],
            "backoff": [_unix(e.get("firstTimestamp")) for e in
                        pod_events(client, "NotTriggerScaleUp", f"{job.name}-", "in backoff after failed scale-up")],
            "reserved": track.flavors_reserved(),
            "stockout_events": fs.fallback_events(client, fs.STOCKOUT_EVENT),
            "backed_off": sim.backed_off(),
        }
        sim.set_failure(PLAN_A_POOL, None)
    print(f"  admitted {facts['admitted']:.0f}, IP space {facts['ip_space']}, back-off {facts['backoff'][:3]}, "
          f"closed {facts['close']:.0f}; back-offs {facts['backed_off']}")
    # The trap: GKE said "IP space exhausted" and then listed the back-off, both well before stockoutAfter.
    assert facts["ip_space"] and min(facts["ip_space"]) < facts["admitted"] + bound.stockout_after, facts
    assert facts["backoff"] and min(facts["backoff"]) < facts["admitted"] + bound.stockout_after, facts
    # Closed by the backstop: not before stockoutAfter after admission, and not much after it.
    assert facts["close"] >= facts["admitted"] + bound.stockout_after - ROUNDING, facts
    assert facts["close"] <= facts["admitted"] + bound.stockout_after + bound.poll + fs.CONTROLLER_LATENCY, facts
    (event,) = [e for e in facts["stockout_events"] if e["involvedObject"]["kind"] == "Workload"]
    assert "stockoutAfter" in event["message"] and "no scale-up under way" in event["message"], event
    assert facts["reserved"][:2] == [PLAN_A, PLAN_B], facts


# --- 3. a job waiting for DWS and plan A's busy nodes ---------------------------------------------------------------


def test_a_job_waiting_for_dws_is_never_moved_onto_busy_plan_a_nodes_and_moves_once_they_are_free(
        box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim = env.client, env.sim
        bound = env.bounds()
        sim.set_capacity([PLAN_A_POOL, PLAN_B_POOL], False)  # plan A stocked out, DWS keeps its request queued
        watch = env.watch()
        scenario.apply_infra(client, env.infra)
        watch.poll()
        (job,) = watch.submit(fs._jobs(env, 1, "busy", {1: 5}))
        track = watch.track(job)
        watch.wait(lambda: PLAN_B in track.flavors_reserved() and fs._check_pending(client, job), 90,
                   "the job evicted from plan A and waiting for DWS on plan B")
        # Plan A's capacity is back: a slice of Ready nodes, every host busy with another (non-Kueue) TPU pod. The
        # controller is down while the pods are bound, so it never sees the nodes idle.
        env.controller.kill()
        sim.set_capacity(PLAN_A_POOL, True)
        nodes = sim.add_nodes(PLAN_A_POOL)
        tpus = str(Decimal(_nodes_of(client, PLAN_A_POOL)[0]["status"]["allocatable"]["google.com/tpu"]))
        ballast = [f"tpu-ballast-{i}" for i in range(len(nodes))]
        for name, node in zip(ballast, nodes, strict=True):
            client.create(ballast_pod(name, node, {"google.com/tpu": tpus}))
        client.wait_for(lambda: _running(client, ballast), 60, "the ballast on plan A's nodes")
        env.controller.start()
        watch.wait(lambda: not watch.tainted(), 30 + fs.CONTROLLER_LATENCY,
                   "plan A reopened (a Ready node appeared after the close)")
        reopened = watch.now()
        hold(watch, 4 * bound.poll + fs.CONTROLLER_LATENCY, "the controller's passes with plan A open and busy")
        busy: dict[str, Any] = {
            "moving": fs.fallback_events(client, "MovingToPlanA"),
            "reserved": track.flavors_reserved(),
            "active": (track.last.get("spec") or {}).get("active"),
            "held_for": watch.now() - reopened,
        }
        for name in ballast:
            client.delete("v1", "Pod", name, "default")
        watch.wait(lambda: track.flavors_reserved()[-1:] == [PLAN_A], 60 + fs.CONTROLLER_LATENCY,
                   "the job moved to plan A once its hosts were free")
        watch.wait_finished([job], 120)
        summary = fs.job_summary(client, watch, job)
        moved = fs.fallback_events(client, "MovedToPlanA")
    print(f"  held {busy['held_for']:.0f} s with plan A open and busy: moves {len(busy['moving'])}, reserved "
          f"{busy['reserved']}; then {summary['reserved']} on {summary['worker_pools']}")
    assert busy["moving"] == [] and busy["reserved"] == [PLAN_A, PLAN_B] and busy["active"] is not False, busy
    assert busy["held_for"] >= 4 * bound.poll, busy
    assert summary["reserved"] == [PLAN_A, PLAN_B, PLAN_A] and summary["worker_pools"] == {PLAN_A_POOL}, summary
    assert summary["state"] == "Complete", summary
    assert len([e for e in moved if e["involvedObject"]["kind"] == "Workload"]) == 1, moved
