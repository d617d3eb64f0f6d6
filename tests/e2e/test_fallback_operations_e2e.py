"""Issue 37 items 6 and 7 against a real API server, Kueue and the simulated GKE: two controllers and one Lease; a
controller killed for good or crash looping, and the sweeper undoing what it left.

The controllers are the plan's ConfigMap files run as processes (fallback_scenarios.Controller); the sweeper is run
the same way from the plan's CronJob (its container's command, the same ConfigMap, a token of its own
ServiceAccount), one run per call, as Kubernetes' CronJob controller would start it every minute (KWOK runs no
containers). Bounds are the Lease's and the config's times plus slack for a busy machine; nothing may happen early.
Run one alone with e.g. `venv/bin/python -m pytest tests/e2e/test_fallback_operations_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tpu_fallback.fallback.lease import DURATION, RENEW_EVERY, live
from tpu_fallback.render import fallback as render

pytestmark = pytest.mark.e2e

COOL_DOWN = 60.0  # long enough that a sweep after the dead controller's lease expired comes before its end
STACK = gs.Stack("dev", {"fallback": {**fs.FALLBACK_SETTINGS, "coolDown": f"{COOL_DOWN:.0f}s"}})
SLACK = 8.0  # seconds a busy machine may add to a timer's bound


def objects_named(infra: Any, name: str) -> list[dict[str, Any]]:
    return [o for o in infra.kubernetes_objects() if o["metadata"].get("name") == name]


def sweeper_bundle(infra: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """What the CronJob's pod runs: the ConfigMap's files as its volume mounts them, and its container."""
    files, _controller = fs.controller_bundle(infra)
    (cron,) = [o for o in infra.kubernetes_objects() if o["kind"] == "CronJob"]
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return files, container


def sweeper_kubeconfig(plane: Any, infra: Any) -> Path:
    """A kubeconfig with a token of the plan's sweeper ServiceAccount: the sweep runs with exactly its RBAC."""
    client = plane.client
    for obj in objects_named(infra, render.SWEEPER):
        if obj["kind"] != "CronJob":
            client.apply(obj)
    answer = client.request(
        "POST", f"/api/v1/namespaces/{render.NAMESPACE}/serviceaccounts/{render.SWEEPER}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    path = Path(plane.workdir) / "sweeper-kubeconfig.json"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sweeper",
        "clusters": [{"name": "e2e", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}],
        "users": [{"name": render.SWEEPER, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "sweeper", "context": {"cluster": "e2e", "user": render.SWEEPER}}],
    }))
    return path


class Sweeper:
    """`python -m tpu_fallback.fallback --sweep` as the CronJob's pod runs it, once per `run()`."""

    def __init__(self, env: fs.Env) -> None:
        self.env = env
        self.kubeconfig = sweeper_kubeconfig(env.plane, env.infra)
        self.bundle = sweeper_bundle(env.infra)
        self.runs: list[dict[str, Any]] = []

    def run(self) -> dict[str, Any]:
        ctl = fs.Controller(self.bundle, self.kubeconfig, self.env.plane.workdir,
                            name=f"sweeper-{id(self)}-{len(self.runs) + 1}")
        started = time.time()
        ctl.start()
        deadline = time.monotonic() + render.SWEEP_ACTIVE_DEADLINE
        while ctl.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        code = ctl.stop()
        run = {"started": started, "ended": time.time(), "exit": code, "log": ctl.lines()}
        self.runs.append(run)
        return run


def taint_value(client: Any, flavor: str) -> str | None:
    obj = client.get(fs.KUEUE_API, "ResourceFlavor", flavor) or {}
    return next((t.get("value") for t in (obj.get("spec") or {}).get("nodeTaints") or []
                 if t.get("key") == fs.DEFAULT_TAINT_KEY), None)


def workload_state(client: Any, name: str, namespace: str) -> dict[str, Any]:
    obj = client.get(fs.KUEUE_API, "Workload", name, namespace) or {}
    return {"active": (obj.get("spec") or {}).get("active"),
            "annotations": {k: v for k, v in ((obj.get("metadata") or {}).get("annotations") or {}).items()
                            if k.startswith("tpu-fallback")}}


def lease_spec(client: Any) -> dict[str, Any]:
    obj = client.get("coordination.k8s.io/v1", "Lease", render.NAME, render.NAMESPACE) or {}
    return dict(obj.get("spec") or {})


def wait_for_line(ctl: fs.Controller, text: str, timeout: float) -> float:
    """time.time() when `text` first showed in the process's log (polled every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in line for line in ctl.lines()):
            return time.time()
        time.sleep(0.1)
    raise TimeoutError(f"no {text!r} in {ctl.log} within {timeout:.0f}s:\n{ctl.tail()}")


# --- the rendered sweeper is accepted by the API server -------------------------------------------------------------


def test_the_rendered_cron_job_priority_class_and_sweeper_rbac_are_accepted(fallback_box: fs.FallbackBox) -> None:
    with fallback_box.scenario(controller=False) as env:
        infra, client = env.infra, env.client
        (priority,) = [o for o in infra.kubernetes_objects() if o["kind"] == "PriorityClass"]
        client.apply(priority)
        sweeper_kubeconfig(env.plane, infra)
        (cron,) = [o for o in infra.kubernetes_objects() if o["kind"] == "CronJob"]
        client.apply(cron)
        stored = client.get("batch/v1", "CronJob", render.SWEEPER, render.NAMESPACE)
        assert stored is not None
        assert stored["spec"]["schedule"] == "* * * * *" and stored["spec"]["concurrencyPolicy"] == "Forbid"
        template = stored["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert template["priorityClassName"] == priority["metadata"]["name"]
        assert template["containers"][0]["command"][-1] == "--sweep"
        stored_priority = client.get("scheduling.k8s.io/v1", "PriorityClass", priority["metadata"]["name"])
        assert stored_priority is not None and stored_priority["value"] == render.PRIORITY
        client.delete("batch/v1", "CronJob", render.SWEEPER, render.NAMESPACE)  # KWOK would run no sweep anyway


# --- item 6: two controllers, one Lease ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_controllers(fallback_box: fs.FallbackBox) -> Iterator[dict[str, Any]]:
    with fallback_box.scenario() as env:
        leader = env.controller
        standby = fs.Controller(fs.controller_bundle(env.infra), leader.kubeconfig, env.plane.workdir,
                                name=f"{leader.mount.name}-standby")
        facts: dict[str, Any] = {"leader_name": leader.mount.name}  # its POD_NAME, the Lease's holder
        try:
            facts["leader_acquired"] = wait_for_line(leader, "acquired the lease", 60)
            standby.start()
            wait_for_line(standby, "waiting for the lease", 30)
            # The leader goes round a few times while the standby waits.
            deadline = time.monotonic() + 60
            while leader.metrics().get("tpu_fallback_reconcile_passes_total", 0) < 5 and time.monotonic() < deadline:
                time.sleep(0.2)
            facts["leader_before"], facts["standby_before"] = leader.metrics(), standby.metrics()
            facts["lease_before"] = lease_spec(env.client)
            facts["killed_at"] = time.time()
            leader.kill()
            facts["standby_acquired"] = wait_for_line(standby, "acquired the lease", DURATION + 4 * RENEW_EVERY + 30)
            deadline = time.monotonic() + 30
            while standby.metrics().get("tpu_fallback_reconcile_passes_total", 0) < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            facts["standby_after"] = standby.metrics()
            facts["lease_after"] = lease_spec(env.client)
            facts["standby_exit"] = standby.stop()
            facts["lease_released"] = lease_spec(env.client)
            facts["leader_log"], facts["standby_log"] = leader.lines(), standby.lines()
        finally:
            standby.stop()
        yield facts


def test_only_the_holder_of_the_lease_runs_passes_the_standby_waits(two_controllers: dict[str, Any]) -> None:
    facts = two_controllers
    leader, standby = facts["leader_before"], facts["standby_before"]
    print(f"  leader: {leader.get('tpu_fallback_reconcile_passes_total')} passes, lease held "
          f"{leader.get('tpu_fallback_lease_held')}; standby: {standby.get('tpu_fallback_reconcile_passes_total')} "
          f"passes, lease held {standby.get('tpu_fallback_lease_held')}; lease {facts['lease_before']}")
    assert leader["tpu_fallback_reconcile_passes_total"] >= 5 and leader["tpu_fallback_lease_held"] == 1, leader
    assert standby["tpu_fallback_reconcile_passes_total"] == 0 and standby["tpu_fallback_lease_held"] == 0, standby
    assert standby["tpu_fallback_loop_heartbeat_timestamp_seconds"] > 0  # alive as far as its probe can tell
    assert facts["lease_before"]["holderIdentity"] == facts["leader_name"], facts["lease_before"]
    # Nothing decided by the standby before it held the lease.
    waiting = [line for line in facts["standby_log"][:next(
        (i for i, line in enumerate(facts["standby_log"]) if "acquired the lease" in line), None)]]
    assert not any(word in line for line in waiting for word in ("close ", "evict", "reopen", "move")), waiting


def test_the_standby_takes_over_one_lease_duration_after_the_leader_is_killed_never_sooner(
        two_controllers: dict[str, Any]) -> None:
    facts = two_controllers
    took = facts["standby_acquired"] - facts["killed_at"]
    print(f"  the standby took the lease {took:.1f} s after the leader's SIGKILL (lease {DURATION} s, renewed "
          f"every {RENEW_EVERY:g} s); then {facts['standby_after'].get('tpu_fallback_reconcile_passes_total')} "
          f"passes; released on its clean exit: {facts['lease_released']}")
    # Not before the leader's last renewal (at most one renewal period before the kill) has aged one duration ...
    assert took >= DURATION - RENEW_EVERY - 1, took
    # ... and within a duration and two renewal periods of it.
    assert took <= DURATION + 2 * RENEW_EVERY + SLACK, took
    assert facts["standby_after"]["tpu_fallback_reconcile_passes_total"] >= 1, facts["standby_after"]
    assert facts["lease_after"]["leaseTransitions"] >= 1 and facts["lease_after"]["holderIdentity"] != \
        facts["lease_before"]["holderIdentity"], (facts["lease_before"], facts["lease_after"])
    assert facts["standby_exit"] == 0 and facts["lease_released"]["holderIdentity"] == "", facts["lease_released"]


# --- item 7: a controller that is not running leaves nothing behind for long -----------------------------------------


def close_then_lose_the_controller(env: fs.Env, crash_loop: bool) -> dict[str, Any]:
    """Plan A stocked out; the controller closes it and evicts job 1 (deactivates it; KubeRay paused, so Kueue does
    not release it and the eviction stays half done); then the controller is SIGKILLed and never comes back, or
    comes back crash looping (a config it cannot read: it exits 1 right after each start). The sweeper runs while
    the dead controller's Lease is live, after it expired within the cool-down, and after the cool-down."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(fs.PLAN_A_POOL, False)
    sim.scale_up_delays[fs.PLAN_A_POOL] = sim.scale.sim(10.0)
    (job,) = watch.submit(fs._jobs(env, 1, "crash" if crash_loop else "killed"))
    track = watch.track(job)
    watch.wait(lambda: len(fs.worker_pods(client, job)) >= 4, 30, "KubeRay to create job 1's worker pods")
    sweeper = Sweeper(env)
    facts: dict[str, Any] = {"sweeps": sweeper.runs}

    def deactivated() -> bool:
        return track.last.get("spec", {}).get("active") is False and fs.EVICTING_ANNOTATION in track.annotations

    with fs.paused(env.plane, "kuberay"):
        watch.wait(deactivated, 120, "the controller to close plan A and evict job 1", interval=0.1)
        env.controller.kill()
    sim.scale_up_delays.pop(fs.PLAN_A_POOL)
    facts["killed_at"] = time.time()
    (name,) = sorted(track.names)
    plan_a = watch.plan_a[0]
    facts["close"] = float(taint_value(client, plan_a) or "nan")
    stop = threading.Event()
    crashes: list[int | None] = []
    looper: threading.Thread | None = None
    if crash_loop:
        files, container = fs.controller_bundle(env.infra)
        bad = {**json.loads(files[fs.CONTROLLER_CONFIG_KEY]), "coolDownSeconds": "soon"}
        broken = fs.Controller(({**files, fs.CONTROLLER_CONFIG_KEY: json.dumps(bad)}, container),
                               env.controller.kubeconfig, env.plane.workdir, name=f"{env.controller.mount.name}-crash")

        def crash_looping() -> None:  # as the kubelet restarts a crashing container (without its back-off)
            while not stop.is_set():
                broken.start()
                while broken.running():
                    time.sleep(0.05)
                crashes.append(broken.stop())
                stop.wait(1.0)

        looper = threading.Thread(target=crash_looping, daemon=True)
        looper.start()
    try:
        # 1. The dead controller's Lease is still live: the sweep does nothing.
        facts["lease_at_first_sweep"] = lease_spec(client)
        facts["first"] = sweeper.run()
        facts["first_state"] = {"taint": taint_value(client, plan_a),
                                "job": workload_state(client, name, job.namespace)}
        # 2. The Lease expired, the cool-down not over: the half-done eviction is queued again, the close kept.
        watch.wait(lambda: not live(lease_spec(client), time.time()), DURATION + 30, "the dead controller's lease "
                   "to expire", interval=0.2)
        facts["second"] = sweeper.run()
        facts["second_state"] = {"taint": taint_value(client, plan_a),
                                 "job": workload_state(client, name, job.namespace)}
        # 3. After the cool-down: plan A reopened.
        watch.wait(lambda: time.time() >= facts["close"] + COOL_DOWN + 1, COOL_DOWN + 30, "the cool-down to pass")
        facts["third"] = sweeper.run()
        facts["third_state"] = {"taint": taint_value(client, plan_a),
                                "job": workload_state(client, name, job.namespace)}
    finally:
        stop.set()
        if looper is not None:
            looper.join(10)
    facts["crashes"] = crashes
    facts["requeue_events"] = [e for e in client.list("v1", "Event", job.namespace)
                               if e.get("reason") == "RequeuedBySweeper"]
    facts["lease_at_end"] = lease_spec(client)
    return facts


@pytest.fixture(scope="module", params=["killed", "crash looping"])
def lost(request: pytest.FixtureRequest, fallback_box: fs.FallbackBox) -> Iterator[dict[str, Any]]:
    with fallback_box.scenario(stack=STACK) as env:
        facts = close_then_lose_the_controller(env, crash_loop=request.param == "crash looping")
        facts["how"] = request.param
        yield facts


def test_the_sweeper_leaves_a_live_controllers_work_alone_then_requeues_the_half_done_eviction(
        lost: dict[str, Any]) -> None:
    facts = lost
    first, second = facts["first"], facts["second"]
    print(f"  {facts['how']}: sweeps {first['started'] - facts['killed_at']:.1f} s and "
          f"{second['started'] - facts['killed_at']:.1f} s after the kill; job 1 {facts['first_state']['job']} -> "
          f"{facts['second_state']['job']}; crash-looping exits {facts['crashes']}")
    # 1: the Lease of the controller just killed was live: nothing touched, and said so.
    if first["ended"] < facts["killed_at"] + DURATION - RENEW_EVERY:
        assert first["exit"] == 0 and any("holds the lease" in line for line in first["log"]), first["log"]
        assert facts["first_state"]["job"]["active"] is False, facts["first_state"]
        assert fs.EVICTING_ANNOTATION in facts["first_state"]["job"]["annotations"], facts["first_state"]
    # 2: no live controller: job 1, deactivated by the controller, is active again and our annotation gone.
    assert second["exit"] == 0, second["log"]
    assert facts["second_state"]["job"] == {"active": True, "annotations": {}}, facts["second_state"]
    assert [e["involvedObject"]["kind"] for e in facts["requeue_events"]] == ["Workload"], facts["requeue_events"]
    if facts["how"] == "crash looping":  # it crashed again and again, and never took the lease
        assert len(facts["crashes"]) >= 3 and all(c not in (0, None) for c in facts["crashes"]), facts["crashes"]
        assert not facts["lease_at_end"].get("holderIdentity", "").endswith("-crash"), facts["lease_at_end"]


def test_the_sweeper_reopens_plan_a_after_the_cool_down_and_not_before(lost: dict[str, Any]) -> None:
    facts = lost
    close, second, third = facts["close"], facts["second"], facts["third"]
    print(f"  {facts['how']}: closed at {close:.0f}; sweep 2 at +{second['ended'] - close:.1f} s "
          f"(taint {facts['second_state']['taint']}), sweep 3 at +{third['started'] - close:.1f} s "
          f"(taint {facts['third_state']['taint']}), coolDown {COOL_DOWN:g} s")
    assert close == close, "the controller left no close"  # not NaN
    # Sweep 2 ran inside the cool-down (the expired Lease let it act): the close stayed.
    assert second["ended"] < close + COOL_DOWN, (second, close)
    assert facts["second_state"]["taint"] == f"{close:.0f}", facts["second_state"]
    # Sweep 3 ran after it: plan A is open again, with no controller running.
    assert third["started"] >= close + COOL_DOWN and third["exit"] == 0, third["log"]
    assert facts["third_state"]["taint"] is None, facts["third_state"]
    assert any("reopened" in line and "on-demand" in line for line in third["log"]), third["log"]
