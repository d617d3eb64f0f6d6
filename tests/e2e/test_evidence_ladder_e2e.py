"""Issue 37's "done when" on the simulated GKE, for the controller's evidence (tpu_fallback/fallback/evidence.py,
decide.py): another pool's back-off never closes a rung, and a slice that takes longer than stockoutAfter to create
is not evicted. The real Kueue, KubeRay and the fallback controller as shipped (fallback_scenarios.Controller: the
plan's ConfigMap files, its ServiceAccount's token).

One cluster for the module (a fallback_scenarios.FallbackBox, reset between the scenarios): the example ladder
stack (Pulumi.ladder.yaml: reservation -> on-demand -> spot -> flex-start, v6e 4x4, 4 hosts a slice) for the first
scenario, the dev stack (plan A on-demand, plan B DWS) for the second, both with fallback_scenarios' short times
(stockoutAfter 20 s, coolDown 45 s, poll 1 s; real seconds: Kueue and the controller run on the wall clock) and so
the same Kueue configuration. The sim's timings (TIMINGS, simulated seconds, 10 ms real each) are the ladder's with a
back-off long enough to outlast the first scenario's window (90 s real instead of 3) and a TPU max node provision
time (180 s real) above both scenarios' slow scale-ups, so neither fails as a timeout.

1. **Another pool's back-off never closes a rung** (`run_backoff_trap`). Spot is stocked out. Job `res-1` is
   admitted to the reservation rung and GKE triggers its slice (slowly: RESERVATION_SLICE s; TriggeredScaleUp on its
   TPU pods). Another team's pods on the reservation's pool, outside Kueue, older than res-1's and held by a
   scheduling gate until then, are released: the autoscaler places the oldest pending pods first, so they take the
   slice under way and res-1's pods are left with the pool at its max size. Job `od-1` takes on-demand; the
   preemptible `spot-1` goes to spot, its TPU pods get GKE's FailedScaleUp "GCE out of resources": spot closes (a
   real stock-out, within FailedScaleUp + 15 s) and the spot pool is in back-off. From then on every
   NotTriggerScaleUp on res-1's pending pods counts that back-off ("1 in backoff after failed scale-up": the trap,
   asserted to be written). The reservation and on-demand stay open for stockoutAfter + 2 polls + the controllers'
   latency after that Event, res-1 admitted longer than stockoutAfter before and still waiting (its own scale-up's
   TriggeredScaleUp, with no failure since, holds the backstop). Then the other team's pods go, the slice comes up
   for res-1, and it runs on the reservation's pool, never evicted.
2. **A slice that takes longer than stockoutAfter to create is not evicted** (`run_slow_slice`). Plan A's
   scale-up takes SLOW_SLICE s (> stockoutAfter, < the sim's max node provision time); GKE writes TriggeredScaleUp
   on the job's TPU pods, the hosts register one by one, the slice turns Ready, the job runs and finishes on plan
   A: no close, no eviction, one reservation (on-demand) of its one Workload.

Bounds are from the Events', conditions' and taints' own times (whole seconds) plus fallback_scenarios'
CONTROLLER_LATENCY, never a tight race, so they hold beside a CPU busy loop. Run it alone with
`venv/bin/python -m pytest tests/e2e/test_evidence_ladder_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.gke_sim import POOL_LABEL, REGISTERING_ANNOTATION, SLICE_ANNOTATION, TPU_RESOURCE, with_run_time
from tests.e2e.gke_sim.messages import BACKOFF_REASON, MAX_LIMIT_REACHED_REASON
from tests.e2e.kube import KubeClient

pytestmark = pytest.mark.e2e

ROUNDING = 1.0  # Events, conditions, creation times and the taint's value carry whole seconds
# The ladder's timings (simulated seconds, at gs.SCALE: the box's), with a node group back-off of 90 s real (GKE:
# 5 min, 3 s real at the scale) that outlasts the first scenario's window, its reset after 10 min real, and a TPU max
# node provision time of 180 s real (GKE's is 10 h) above both slow scale-ups below.
TIMINGS = replace(fs.LADDER_TIMINGS, backoff=gs.SCALE.sim(90.0), max_backoff=gs.SCALE.sim(90.0),
                  backoff_reset=gs.SCALE.sim(600.0), tpu_max_node_provision=gs.SCALE.sim(180.0))
# Real seconds the reservation's slice takes (first scenario): longer than the trap's window and what leads to it.
RESERVATION_SLICE = 90.0
# Real seconds plan A's slice takes (second scenario): longer than stockoutAfter (20 s).
SLOW_SLICE = 32.0
OTHER_TEAM = "other-team"  # the pods that use the reservation's pool outside Kueue
OTHER_TEAM_GATE = "example.com/other-team-hold"


@pytest.fixture(scope="module")
def box() -> Iterator[fs.FallbackBox]:
    """One simulated GKE for the module: the ladder stack's, the dev stack's for the second scenario."""
    with fs.FallbackBox(fs.LADDER, TIMINGS) as cluster_box:
        yield cluster_box


def _print_controller(facts: Mapping[str, Any]) -> None:
    words = ("close", "reopen", "evict", "move", "unschedulable")
    print("  controller: " + "\n  controller: ".join(
        line for line in facts["controller_log"] if any(w in line for w in words)))


def _pod_events(client: KubeClient, namespace: str, reason: str, pods: Sequence[str]) -> list[dict[str, Any]]:
    """Events of `reason` on the named pods, oldest first."""
    return sorted((e for e in client.list("v1", "Event", namespace) if e.get("reason") == reason
                   and (e.get("involvedObject") or {}).get("kind") == "Pod"
                   and (e.get("involvedObject") or {}).get("name") in pods),
                  key=lambda e: str(e.get("firstTimestamp") or ""))


def _stamped(events: Sequence[Mapping[str, Any]]) -> list[tuple[float, str, str]]:
    """(unix first time, pod, message) of each Event."""
    return [(stamp, str(e["involvedObject"].get("name")), str(e.get("message", ""))) for e in events
            if (stamp := fs._unix(e.get("firstTimestamp"))) is not None]


def _closes(watch: fs.FallbackWatch, plans: Mapping[str, str]) -> dict[str, list[float]]:
    """Per kind of rung: the value (unix time of the close) of every close the watch saw on its flavors."""
    return {kind: sorted({float(v) for f, k in plans.items() if k == kind
                          for v in fs.taint_values_of(watch.taints.get(f, []))}) for kind in set(plans.values())}


def _node_created(client: KubeClient, names: Sequence[str]) -> dict[str, float | None]:
    return {n: fs._unix(((client.get("v1", "Node", n) or {}).get("metadata") or {}).get("creationTimestamp"))
            for n in sorted(names)}


# --- 1. another pool's back-off never closes a rung ------------------------------------------------------------------


def other_team_pods(rayjob: Mapping[str, Any], pool: str) -> list[dict[str, Any]]:
    """One pod per host of a slice of `pool`, not Kueue's (no queue name: Kueue 0.19.2 leaves them alone, its
    manageJobsWithoutQueueName being off), held by a scheduling gate of their own until `release_gate`: the job's
    TPU worker template, pinned to the pool by its own nodeSelector. Another team's pods on a shared reservation."""
    (group,) = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    spec = copy.deepcopy(group["template"]["spec"])
    spec.pop("volumes", None)
    for container in spec["containers"]:
        container.pop("volumeMounts", None)
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), POOL_LABEL: pool}
    spec["schedulingGates"] = [{"name": OTHER_TEAM_GATE}]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{OTHER_TEAM}-{i}", "namespace": "default", "labels": {"app": OTHER_TEAM}},
             "spec": spec} for i in range(int(group.get("numOfHosts", 1)))]


def release_gate(client: KubeClient, pod: Mapping[str, Any]) -> None:
    """Remove the pod's scheduling gate (removing gates is the one change the API allows to them): the scheduler
    tries it from now on."""
    client.request("PATCH", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}",
                   {"spec": {"schedulingGates": []}}, content_type="application/merge-patch+json")


def run_backoff_trap(env: fs.Env) -> gs.Outcome:
    """Scenario 1 (see the module's docstring)."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    plans = fs.plan_of(env.infra, sim)
    pools_of = {kind: sorted(p.name for p in sim.pools.values() if p.plan == kind) for kind in set(plans.values())}
    (reserved_pool,) = pools_of[fs.RESERVATION]
    sim.set_capacity(pools_of[fs.SPOT], False)
    sim.scale_up_delays[reserved_pool] = sim.scale.sim(RESERVATION_SLICE)
    bound = env.bounds()
    wall_minus_watch = time.time() - watch.now()
    queue = "default/user-queue"
    objects = fs.render_jobs(env.infra, [{"name": "res", "count": 1, "queue": queue},
                                         {"name": "od", "count": 1, "queue": queue},
                                         {"name": "spot", "count": 1, "queue": queue, "preemptible": True}])
    run_times = {"res-1": 5.0, "od-1": 300.0, "spot-1": 5.0}  # od-1 holds on-demand's quota to the end
    objects = [with_run_time(o, run_times[o["metadata"]["name"]]) if o["kind"] == "RayJob" else o for o in objects]
    facts: dict[str, Any] = {"bound": bound, "plans": plans, "pools_of": pools_of, "reserved_pool": reserved_pool,
                             "node_group_id": sim.pools[reserved_pool].node_group_id,
                             "wall_minus_watch": wall_minus_watch}

    def last_kind(record: gs.JobRecord) -> str | None:
        reserved = watch.track(record).flavors_reserved()
        return plans.get(reserved[-1]) if reserved else None

    def closed(kind: str) -> bool:
        return bool(_closes(watch, plans).get(kind))

    rayjob = next(o for o in objects if o["kind"] == "RayJob")
    others = other_team_pods(rayjob, reserved_pool)
    try:
        for pod in others:  # gated: the scheduler and the autoscaler leave them alone for now
            client.apply(pod)
        res = fs._submit_one(watch, objects, "res-1")
        watch.wait(lambda: last_kind(res) == fs.RESERVATION, 60, "res-1 on the reservation")

        def res_workers() -> list[str]:
            return [p["metadata"]["name"] for p in fs.worker_pods(client, res)]

        facts["res_triggered"] = watch.wait(
            lambda: _stamped(_pod_events(client, "default", "TriggeredScaleUp", res_workers())), 60,
            f"GKE's TriggeredScaleUp of {reserved_pool} on res-1's TPU pods")
        # The other team's older pods now want the slice under way, and the autoscaler places them on it first.
        for pod in others:
            release_gate(client, pod)
        od = fs._submit_one(watch, objects, "od-1")
        watch.wait(lambda: last_kind(od) == fs.ON_DEMAND, 60, "od-1 on on-demand")
        spot = fs._submit_one(watch, objects, "spot-1")
        watch.wait(lambda: last_kind(spot) == fs.SPOT, 60, "spot-1 on spot")
        watch.wait(lambda: closed(fs.SPOT), 90, "spot to close on GKE's FailedScaleUp", interval=0.1)
        facts["backed_off_after_close"] = sim.backed_off()
        watch.wait(lambda: last_kind(spot) == fs.FLEX_START, 60, "spot-1 evicted down to flex-start")

        def backoff_trap() -> list[tuple[float, str, str]] | None:
            found = [e for e in _stamped(_pod_events(client, "default", "NotTriggerScaleUp", res_workers()))
                     if BACKOFF_REASON in e[2]]
            return found or None

        trap = watch.wait(backoff_trap, 60, "a NotTriggerScaleUp counting the spot pool's back-off on res-1's pods")
        facts["trap"] = trap
        trap_at = trap[0][0]
        window_end = trap_at + bound.stockout_after + 2 * bound.poll + fs.CONTROLLER_LATENCY
        facts["window"] = (trap_at, window_end)
        watch.wait(lambda: time.time() >= window_end + ROUNDING, window_end + ROUNDING - time.time() + 30,
                   "the window after the back-off Event")
        # At the window's end the trap still holds: spot backed off, res-1 on the reservation, its pods pending.
        facts["backed_off_at_window_end"] = sim.backed_off()
        facts["res_at_window_end"] = {"kind": last_kind(res), "evictions": dict(watch.track(res).evictions),
                                      "pods": {p["metadata"]["name"]: {**fs.pod_state(p, watch),
                                                                       "node": (p.get("spec") or {}).get("nodeName")}
                                               for p in fs.worker_pods(client, res)}}
        facts["closes_at_window_end"] = _closes(watch, plans)
        facts["res_not_triggered"] = _stamped(_pod_events(client, "default", "NotTriggerScaleUp", res_workers()))
        facts["res_failed"] = _stamped(_pod_events(client, "default", "FailedScaleUp", res_workers()))
        registering = [n["metadata"]["name"] for n in client.list("v1", "Node")
                       if (n["metadata"].get("labels") or {}).get(POOL_LABEL) == reserved_pool]
        facts["reserved_nodes_at_window_end"] = _node_created(client, registering)
    finally:
        for pod in others:  # the other team gives the slice up (or the scenario failed: leave nothing behind)
            client.delete("v1", "Pod", pod["metadata"]["name"], "default")
    facts["released_at"] = time.time()
    watch.wait_running([res], RESERVATION_SLICE + 60)
    watch.wait_finished([res], 90)
    track = watch.track(res)
    facts["res_admitted"] = track.admitted_at[0] if track.admitted_at else None
    facts["res_running"] = (res.running or 0.0) + wall_minus_watch
    worker_nodes = {node for node, _pool, replica in res.placements.values() if replica}
    facts["res_worker_nodes"] = _node_created(client, sorted(worker_nodes))
    records = (res, od, spot)
    facts["jobs"] = {r.name: {**fs.job_summary(client, watch, r),
                              "kinds": [plans.get(f, f) for f in watch.track(r).flavors_reserved()]}
                     for r in records}
    failed = _stamped([e for e in client.list("v1", "Event", "default") if e.get("reason") == "FailedScaleUp"])
    facts["failed_anywhere"] = failed
    facts["spot_failed"] = [e for e in failed if e[1].startswith("spot-1-")]
    facts["closes"] = _closes(watch, plans)
    facts["rung_of_kind"] = {plans[r["flavors"][0]]: r["name"] for r in env.config["rungs"]}
    facts["stockout_events"] = [(str(e["involvedObject"].get("kind")), str(e["involvedObject"].get("name")))
                                for e in fs.ladder_events(client, "RungStockOut")]
    facts["metrics"] = env.controller.metrics()
    facts["controller_log"] = env.controller.lines()
    return gs.Outcome(watch, facts)


@pytest.fixture(scope="module")
def backoff_trap(box: fs.FallbackBox) -> dict[str, Any]:
    with box.scenario() as env:
        out = run_backoff_trap(env)
    facts = out.facts
    window = facts["window"]
    print(f"  spot FailedScaleUp {facts['spot_failed'][:1]}; closes (unix s) {facts['closes']}; backed off after the "
          f"close {facts['backed_off_after_close']}, at the window's end {facts['backed_off_at_window_end']}")
    print(f"  the trap: {facts['trap'][0]}; window {window[0]:.0f} -> {window[1]:.0f} "
          f"({window[1] - window[0]:.0f} s); res-1 admitted {facts['res_admitted']}, TriggeredScaleUp "
          f"{facts['res_triggered'][:1]}, running {facts['res_running']:.0f}, reservation nodes at the window's end "
          f"{facts['reserved_nodes_at_window_end']}, res-1's TPU pods then {facts['res_at_window_end']['pods']}")
    for name, job in facts["jobs"].items():
        print(f"  {name}: reserved {job['kinds']}, workers on {sorted(job['worker_pools'])}, evictions "
              f"{job['evictions']}")
    _print_controller(facts)
    return facts


def test_a_real_stockout_still_closes_spot_within_failed_scale_up_plus_15_s(backoff_trap: dict[str, Any]) -> None:
    facts = backoff_trap
    # GKE's FailedScaleUp on spot-1's TPU pods, in GKE's words for a stock-out.
    assert facts["spot_failed"], facts["failed_anywhere"]
    (first_failed, _pod, message), *_ = facts["spot_failed"]
    assert "GCE out of resources" in message, message
    # Spot closed once, on that Event, within FailedScaleUp + 15 s (the close's own time, the taint's value).
    (close,) = facts["closes"][fs.SPOT]
    assert first_failed - ROUNDING <= close <= first_failed + fs.CONTROLLER_LATENCY, (first_failed, close)
    # The controller's RungStockOut Events: on spot's flavors and on spot-1's Workload, nothing else.
    spot_flavors = {f for f, k in facts["plans"].items() if k == fs.SPOT}
    assert {n for k, n in facts["stockout_events"] if k == "ResourceFlavor"} == spot_flavors, facts["stockout_events"]
    assert {(k, n) for k, n in facts["stockout_events"] if k != "ResourceFlavor"} <= {
        ("Workload", n) for n in facts["jobs"]["spot-1"]["workload_names"]}, facts["stockout_events"]
    # The spot pool was backed off by the failure (and still was at the window's end); the preemptible job went on
    # down the ladder to flex-start.
    spot_pools = facts["pools_of"][fs.SPOT]
    assert any(facts["backed_off_after_close"].get(p) == "out-of-resources" for p in spot_pools), facts
    job = facts["jobs"]["spot-1"]
    assert job["kinds"][:2] == [fs.SPOT, fs.FLEX_START], job
    rung = facts["rung_of_kind"][fs.SPOT]
    assert facts["metrics"].get(f'tpu_fallback_rung_closes_total{{rung="{rung}"}}') == 1, facts["metrics"]


def test_another_pools_backoff_never_closes_the_reservation_or_on_demand(backoff_trap: dict[str, Any]) -> None:
    facts = backoff_trap
    bound: fs.Bounds = facts["bound"]
    # The trap was there: a NotTriggerScaleUp on one of res-1's TPU pods counts a node group in back-off, the
    # spot pool's (the only pool that failed), while the reservation's pool is at its max size with the slice under
    # way, which the other team's pods took. res-1's own scale-up was triggered before and never failed.
    (trap_at, pod, message), *_ = facts["trap"]
    assert pod.startswith("res-1-") and BACKOFF_REASON in message and MAX_LIMIT_REACHED_REASON in message, message
    assert all(p.startswith("spot-1-") for _t, p, _m in facts["failed_anywhere"]), facts["failed_anywhere"]
    (triggered_at, _pod, triggered), *_ = facts["res_triggered"]
    assert f"{{{facts['node_group_id']} 0->4 (max: 4)}}" in triggered and triggered_at <= trap_at, facts
    assert facts["res_failed"] == [], facts["res_failed"]
    start, end = facts["window"]
    assert end - start >= bound.stockout_after + 2 * bound.poll + fs.CONTROLLER_LATENCY, facts["window"]
    # ... and held over the whole window: at its end the spot pool was still backed off, res-1 still on the
    # reservation with its TPU pods pending, not evicted, and admitted longer than stockoutAfter before.
    assert set(facts["backed_off_at_window_end"]) & set(facts["pools_of"][fs.SPOT]), facts["backed_off_at_window_end"]
    # Its pending pods are the controller's evidence, and the back-off Event is on one of them. (A host of the sim's
    # slice coming up has no Ready condition, so the node lifecycle controller lifts the API server's not-ready taint
    # and the scheduler binds pods there: one or two of res-1's may be bound by then, never all four before the
    # slice is complete.)
    held = facts["res_at_window_end"]
    assert held["kind"] == fs.RESERVATION and held["evictions"] == {}, held
    pending = {name for name, p in held["pods"].items() if p["phase"] == "Pending" and p["node"] is None}
    assert len(held["pods"]) == 4 and pending, held
    assert pending & {p for _t, p, m in facts["res_not_triggered"] if BACKOFF_REASON in m}, (pending, facts)
    assert facts["res_admitted"] is not None and facts["res_admitted"] + bound.stockout_after <= end, facts
    # The reservation and on-demand were never closed (neither in the window nor after), spot only.
    assert facts["closes_at_window_end"][fs.RESERVATION] == [] == facts["closes_at_window_end"][fs.ON_DEMAND], \
        facts["closes_at_window_end"]
    assert facts["closes"][fs.RESERVATION] == [] and facts["closes"][fs.ON_DEMAND] == [], facts["closes"]
    metrics, rung = facts["metrics"], facts["rung_of_kind"]
    for kind in (fs.RESERVATION, fs.ON_DEMAND):
        assert metrics.get(f'tpu_fallback_rung_closes_total{{rung="{rung[kind]}"}}') == 0, metrics
    assert not [line for line in facts["controller_log"] if f"close the {rung[fs.RESERVATION]} rung" in line
                or f"close the {rung[fs.ON_DEMAND]} rung" in line], facts["controller_log"]


def test_the_reservation_job_runs_on_the_reservation_pool_and_is_never_evicted(backoff_trap: dict[str, Any]) -> None:
    facts = backoff_trap
    job = facts["jobs"]["res-1"]
    assert job["kinds"] == [fs.RESERVATION], job
    assert job["evictions"] == {} and job["workloads_ever"] == 1 and job["deactivated_at"] is None, job
    assert job["worker_pools"] == {facts["reserved_pool"]}, job
    assert job["state"] == "Complete" and job["succeeded_submitters"] == 1, job
    # It ran once the other team gave the slice up, on the slice whose hosts were registering at the window's end.
    assert facts["res_running"] >= facts["released_at"] - ROUNDING, facts
    registering = facts["reserved_nodes_at_window_end"]
    assert registering and set(registering) <= set(facts["res_worker_nodes"]), facts
    od = facts["jobs"]["od-1"]
    assert od["kinds"] == [fs.ON_DEMAND] and od["evictions"] == {}, od


# --- 2. a slice that takes longer than stockoutAfter to create is not evicted ----------------------------------------


def run_slow_slice(env: fs.Env) -> gs.Outcome:
    """Scenario 2 (see the module's docstring)."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    bound = env.bounds()
    sim.scale_up_delays[fs.PLAN_A_POOL] = sim.scale.sim(SLOW_SLICE)
    wall_minus_watch = time.time() - watch.now()
    (job,) = watch.submit(fs._jobs(env, 1, "slow-slice", {1: 5.0}))

    def registering() -> dict[str, Any] | None:
        return next((n for n in client.list("v1", "Node") if (n["metadata"].get("labels") or {}).get(
            POOL_LABEL) == fs.PLAN_A_POOL and REGISTERING_ANNOTATION in (n["metadata"].get("annotations") or {})),
            None)

    host = watch.wait(registering, SLOW_SLICE + 60, "plan A's first host registering")
    host_seen = {"name": host["metadata"]["name"], "taints": (host.get("spec") or {}).get("taints") or [],
                 "ready": next((c.get("status") for c in (host.get("status") or {}).get("conditions") or []
                                if c.get("type") == "Ready"), None)}
    watch.wait_running([job], SLOW_SLICE + bound.stockout_after + 60)
    track = watch.track(job)
    workers = [p["metadata"]["name"] for p in fs.worker_pods(client, job)]
    worker_nodes = sorted({node for node, _pool, replica in job.placements.values() if replica})
    facts: dict[str, Any] = {
        "bound": bound, "wall_minus_watch": wall_minus_watch,
        "max_provision": sim.scale.real(sim.timings.tpu_max_node_provision),
        "node_group_id": sim.pools[fs.PLAN_A_POOL].node_group_id,
        "admitted": track.admitted_at[0] if track.admitted_at else None,
        "running": (job.running or 0.0) + wall_minus_watch,
        "triggered": _stamped(_pod_events(client, job.namespace, "TriggeredScaleUp", workers)),
        "failed": _stamped([e for e in client.list("v1", "Event", job.namespace)
                            if e.get("reason") == "FailedScaleUp"]),
        "worker_nodes": _node_created(client, worker_nodes),
        "slices": {n: ((client.get("v1", "Node", n) or {}).get("metadata") or {}).get("annotations", {}).get(
            SLICE_ANNOTATION) for n in worker_nodes},
        "tpu_per_node": {n: ((client.get("v1", "Node", n) or {}).get("status") or {}).get("allocatable", {}).get(
            TPU_RESOURCE) for n in worker_nodes},
        "sim_log": [f"{e.at:.1f}s {e.what}" for e in sim.log if fs.PLAN_A_POOL in e.what],
        "registering_host": host_seen,
    }
    watch.wait_finished([job], 90)
    facts["evictions_metric"] = env.controller.metrics().get("tpu_fallback_evictions_total")
    return fs._finish(env, watch, facts, [job])


@pytest.fixture(scope="module")
def slow_slice(box: fs.FallbackBox) -> dict[str, Any]:
    with box.scenario(stack=fs.FALLBACK) as env:
        out = run_slow_slice(env)
    facts = out.facts
    created = sorted(t for t in facts["worker_nodes"].values() if t is not None)
    print(f"  admitted {facts['admitted']}, TriggeredScaleUp {facts['triggered'][:1]}, hosts created "
          f"{[c - created[0] for c in created]} s after the first, all Running {facts['running']:.0f}; sim: "
          f"{facts['sim_log']}; a registering host: {facts['registering_host']}")
    _print_controller(facts)
    return facts


def test_a_slice_slower_than_stockout_after_is_triggered_and_comes_up_host_by_host(slow_slice: dict[str, Any]) -> None:
    facts = slow_slice
    bound: fs.Bounds = facts["bound"]
    # The sim's max node provision time is above the slow scale-up: it does not fail as a timeout.
    assert bound.stockout_after < SLOW_SLICE < facts["max_provision"], facts["max_provision"]
    assert facts["failed"] == [], facts["failed"]
    # GKE said so on the job's TPU pods: a scale-up of plan A's node group (its MIG's URL) from 0 to a slice.
    assert facts["triggered"], facts
    (triggered_at, _pod, message), *_ = facts["triggered"]
    assert f"{{{facts['node_group_id']} 0->4 (max: 4)}}" in message, message
    # Its 4 hosts registered one by one over the scale-up (at a quarter, a half, three quarters of it and at its
    # end), all of one slice, and the last one more than stockoutAfter after GKE's TriggeredScaleUp.
    created = sorted(t for t in facts["worker_nodes"].values() if t is not None)
    assert len(created) == 4 and len(set(facts["slices"].values())) == 1, facts
    assert len(set(created)) >= 3 and created[-1] - created[0] >= SLOW_SLICE / 2 - ROUNDING, created
    assert created[-1] - triggered_at >= bound.stockout_after, (created, triggered_at)
    # The job waited longer than stockoutAfter and two polls after its admission: the backstop's time came and
    # went while the scale-up was under way.
    assert facts["admitted"] is not None, facts
    assert facts["running"] - facts["admitted"] >= bound.stockout_after + 2 * bound.poll, facts


def test_a_slice_slower_than_stockout_after_is_not_evicted_and_runs_on_plan_a(slow_slice: dict[str, Any]) -> None:
    facts = slow_slice
    (job,) = facts["jobs"].values()
    # Never closed, never evicted: no taint on any flavor at any time, no Eviction, one Workload that reserved
    # on-demand once, and it ran there and finished.
    assert {f: [v for _t, v in h if v is not None] for f, h in facts["all_taints"].items()} == {
        f: [] for f in facts["all_taints"]}, facts["all_taints"]
    assert job["reserved"] == ["on-demand"], job
    assert job["evictions"] == {} and job["deactivated_at"] is None and not job["annotations"], job
    assert job["workloads_ever"] == 1 and job["workloads_now"] == 1, job
    assert job["worker_pools"] == {fs.PLAN_A_POOL}, job
    assert job["state"] == "Complete" and job["succeeded_submitters"] == 1, job
    assert all(fs.event_count(facts["events"][reason]) == 0 for reason in fs.FALLBACK_EVENTS), facts["events"]
    metrics = facts["metrics"]
    assert metrics.get("tpu_fallback_plan_a_closes_total") == 0, metrics
    assert metrics.get("tpu_fallback_evictions_total") == 0, metrics
    assert not [line for line in facts["controller_log"] if "close plan A" in line or "evict from" in line], \
        facts["controller_log"]
