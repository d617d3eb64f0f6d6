"""The simulated GKE's switches for issue 26's scenarios, without a cluster: autoscaler Events that are never seen,
KWOK stages for pods that start slowly or never, and the job changes the scenarios make."""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_sim


class _Recorder:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.created.append(obj)
        return obj


def _sim() -> tuple[gke_sim.GkeSim, _Recorder]:
    sim = object.__new__(gke_sim.GkeSim)  # only what set_events and _event use
    client = _Recorder()
    sim._client = client  # type: ignore[assignment]
    sim._lock = threading.RLock()
    sim._t0 = 0.0
    sim._recorder, sim.scale = gke_sim.Recorder(), gke_sim.TimeScale()
    sim.unseen_events, sim.suppressed_events, sim.log = set(), [], []
    sim.pools = {"on-demand-pool": object(), "dws-pool": object()}  # type: ignore[dict-item]
    return sim, client


def _pod(uid: str) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid}}


def test_autoscaler_events_of_a_pool_not_seen_are_kept_not_written() -> None:
    sim, client = _sim()
    sim.set_events(False, "on-demand-pool")
    sim._event(_pod("1"), "FailedScaleUp", "Warning", ["on-demand-pool"], "GCE out of resources")
    sim._event(_pod("2"), "TriggeredScaleUp", "Normal", ["dws-pool"], "pod triggered scale-up")
    sim._event(_pod("3"), "NotTriggerScaleUp", "Normal", ["dws-pool", "on-demand-pool"], "in backoff")
    assert [e["reason"] for e in client.created] == ["TriggeredScaleUp"]
    assert [(e.reason, e.pod) for e in sim.suppressed_events] == [("FailedScaleUp", "default/p-1"),
                                                                  ("NotTriggerScaleUp", "default/p-3")]
    sim._event(_pod("1"), "FailedScaleUp", "Warning", ["on-demand-pool"], "GCE out of resources")  # once per pod
    assert len(sim.suppressed_events) == 2
    sim.set_events(True, "on-demand-pool")
    sim._event(_pod("4"), "FailedScaleUp", "Warning", ["on-demand-pool"], "GCE out of resources")
    assert [e["reason"] for e in client.created] == ["TriggeredScaleUp", "FailedScaleUp"]


def test_no_autoscaler_event_is_written_when_none_is_seen() -> None:
    sim, client = _sim()
    sim.set_events(False)
    for i, reason in enumerate(fs.AUTOSCALER_REASONS):
        sim._event(_pod(str(i)), reason, "Normal", ["on-demand-pool"], "m")
    sim._event(_pod("x"), "NotTriggerScaleUp", "Normal", [], "no pool would take it")
    assert client.created == []
    assert len(sim.suppressed_events) == 4


def _stage_files(tmp_path: Path) -> Path:
    for name in gke_sim.KWOK_STAGE_FILES:
        kind = "Node" if name.startswith("node") else "Pod"
        (tmp_path / f"{name}.yaml").write_text(
            f"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\n"
            f"spec: {{resourceRef: {{apiGroup: v1, kind: {kind}}}, selector: {{matchExpressions: "
            f"[{{key: .status.podIP, operator: DoesNotExist}}]}}, next: {{statusTemplate: 'phase: Running'}}}}\n")
    return tmp_path


def test_pods_with_the_ready_after_annotation_are_left_to_the_sims_two_stages(tmp_path: Path) -> None:
    stages = {s["metadata"]["name"]: s for s in gke_sim.kwok_stages(1.0, _stage_files(tmp_path))}
    assert list(stages) == list(gke_sim.KWOK_STAGES)
    annotation = f'.metadata.annotations["{gke_sim.READY_AFTER_ANNOTATION}"]'
    ready = stages["pod-ready"]["spec"]["selector"]["matchExpressions"]
    assert {"key": annotation, "operator": "DoesNotExist"} in ready and len(ready) == 2, ready
    starting = stages["pod-starting"]["spec"]
    assert {"key": annotation, "operator": "Exists"} in starting["selector"]["matchExpressions"]
    assert "phase: Pending" in starting["next"]["statusTemplate"]
    assert "ImagePullBackOff" in starting["next"]["statusTemplate"]
    late = stages["pod-ready-late"]["spec"]
    assert "phase: Running" in late["next"]["statusTemplate"] and "podIP" not in late["next"]["statusTemplate"]
    assert late["delay"]["durationFrom"] == {"expressionFrom": annotation}
    assert {"key": annotation, "operator": "NotIn", "values": [gke_sim.NEVER]} in late["selector"]["matchExpressions"]
    assert {"key": ".status.phase", "operator": "In", "values": ["Pending"]} in late["selector"]["matchExpressions"]


def _rayjob() -> dict[str, Any]:
    worker = {"groupName": "tpu-group", "template": {"spec": {"containers": [{"name": "w"}],
                                                             "tolerations": [{"key": "google.com/tpu"}]}}}
    return {"kind": "RayJob", "metadata": {"name": "j"}, "spec": {"rayClusterSpec": {
        "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}}, "workerGroupSpecs": [worker]}}}


def test_workers_that_start_slowly_or_never() -> None:
    job = _rayjob()
    slow = gke_sim.with_workers_ready_after(job, 40)
    never = gke_sim.with_workers_ready_after(job, None)
    for out, value in ((slow, "40000ms"), (never, gke_sim.NEVER)):
        (worker,) = out["spec"]["rayClusterSpec"]["workerGroupSpecs"]
        assert worker["template"]["metadata"]["annotations"] == {gke_sim.READY_AFTER_ANNOTATION: value}
        assert "metadata" not in out["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert job == _rayjob()  # unchanged


def test_jobs_tolerating_the_admins_taint() -> None:
    job = _rayjob()
    out = fs.tolerating(copy.deepcopy(job), fs.ADMIN_TOLERATION)
    (worker,) = out["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert worker["template"]["spec"]["tolerations"] == [{"key": "google.com/tpu"}, dict(fs.ADMIN_TOLERATION)]
    assert job == _rayjob()
    assert fs.ADMIN_TOLERATION["key"] == fs.ADMIN_TAINT["key"] and fs.ADMIN_TAINT["effect"] == "NoSchedule"


# --- the autoscaler's event recorder (kubernetes-sigs/cluster-autoscaler@33c3f97b pkg/utils/kubernetes/factory.go) ---


def test_the_recorder_lets_one_event_of_a_reason_through_per_pod_every_5_minutes() -> None:
    rec = gke_sim.Recorder()  # simulated seconds
    assert rec.admit("u1", "NotTriggerScaleUp", "a", 0.0) == "a"
    assert rec.admit("u1", "NotTriggerScaleUp", "b", 10.0) is None  # burst 1, refilled at 1 per 300 s
    assert rec.admit("u1", "FailedScaleUp", "x", 10.0) == "x"  # another reason: its own bucket
    assert rec.admit("u2", "NotTriggerScaleUp", "b", 10.0) == "b"  # another pod
    assert rec.admit("u1", "NotTriggerScaleUp", "b", 299.0) is None
    assert rec.admit("u1", "NotTriggerScaleUp", "b", 310.0) == "b"
    assert rec.admit("u1", "NotTriggerScaleUp", "b", 700.0) is None  # the same message: GKE counts it, no new Event


def test_the_tenth_distinct_message_of_a_reason_within_10_minutes_is_combined() -> None:
    rec = gke_sim.Recorder()
    out = [rec.admit("u1", "NotTriggerScaleUp", f"m{i}", i * 301.0) for i in range(10)]
    # client-go events_cache.go: 10 similar events (same reason, pod) in a rolling 10 minutes are aggregated.
    assert out[:9] == [f"m{i}" for i in range(9)]
    assert out[9] == "(combined from similar events): m9"
    # More than 10 minutes since the last similar event: a fresh start.
    assert rec.admit("u1", "NotTriggerScaleUp", "later", 9 * 301.0 + 601.0) == "later"


# --- GKE's stock-out evidence as the sim writes it: what the fallback controller reads -----------------------------


class _Cluster(_Recorder):
    """_Recorder, with what the autoscaler loop reads and writes besides Events (nodes, its log)."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[str, dict[str, Any]] = {}

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Node":
            self.nodes[obj["metadata"]["name"]] = obj
            return obj
        return super().create(obj)

    def informer(self, api: str, kind: str) -> _Cluster:
        return self

    def observe(self, obj: Any) -> None:
        return


def _pool(name: str, *, tpu: bool = True, max_nodes: int = 4) -> gke_sim.NodePool:
    machine = gke_sim.machine("ct6e-standard-4t" if tpu else "n2-standard-16")
    return gke_sim.NodePool(name=name, cluster="c", zone="us-east5-b", machine=machine, config_labels={"pool": name},
                            max_nodes=max_nodes, topology="4x4" if tpu else None, hosts_per_slice=4 if tpu else 1,
                            project="p")


def _unschedulable(name: str, pool: str, tpu: bool = True) -> dict[str, Any]:
    requests = {"cpu": "1", **({"google.com/tpu": "4"} if tpu else {})}
    spec: dict[str, Any] = {"nodeSelector": {"pool": pool}, "containers": [{"resources": {"requests": requests}}]}
    if tpu:
        spec["tolerations"] = [{"key": "google.com/tpu", "operator": "Exists"}]
    meta = {"name": name, "namespace": "default", "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}


def _pass(sim: gke_sim.GkeSim, pods: list[dict[str, Any]], now: float) -> None:
    sim._t0 = time.monotonic() - now
    sim._finish_upcoming(now)
    sim._scale_up(now, [], pods)


def test_a_stock_out_as_the_fallback_controller_sees_it_on_its_pods_and_on_an_unrelated_one() -> None:
    client = _Cluster()
    sim = gke_sim.GkeSim([_pool("on-demand-pool"), _pool("cpu", tpu=False, max_nodes=0)],
                         scale=gke_sim.TimeScale(real_per_sim=1.0))
    sim._client, sim._cache = client, client  # type: ignore[assignment]
    worker, head = _unschedulable("worker", "on-demand-pool"), _unschedulable("head", "cpu", tpu=False)
    sim.set_capacity("on-demand-pool", False)
    _pass(sim, [worker], 0.0)
    _pass(sim, [worker], 180.0)
    _pass(sim, [worker, head], 200.0)
    said = [(e["involvedObject"]["name"], e["reason"], e["message"]) for e in client.created]
    # The texts as GKE writes them (GoogleCloudPlatform/cluster-autoscaler@7d250507: failed_scale_up_event_logger.go,
    # internal_eventing_scale_up_processor.go; kubernetes-sigs/cluster-autoscaler@33c3f97b skippedreasons.go).
    assert said[1] == ("worker", "FailedScaleUp", "Node scale up in zones us-east5-b associated with this pod failed: "
                       "GCE out of resources. Pod is at risk of not being scheduled.")
    assert ("worker", "NotTriggerScaleUp", "Pod didn't trigger scale-up: 1 in backoff after failed scale-up, "
            "1 max node group size reached") in said
    # The head pod, which no TPU pool could take, is told about the TPU pool's back-off too, never of its failure.
    (head_says,) = [(r, m) for n, r, m in said if n == "head"]
    assert head_says[0] == "NotTriggerScaleUp" and "1 in backoff after failed scale-up" in head_says[1]
    # With the TPU pool's Events unseen, that NotTriggerScaleUp (about the TPU pool's state) is kept unwritten too.
    client2 = _Cluster()
    sim2 = gke_sim.GkeSim([_pool("on-demand-pool"), _pool("cpu", tpu=False, max_nodes=0)],
                          scale=gke_sim.TimeScale(real_per_sim=1.0))
    sim2._client, sim2._cache = client2, client2  # type: ignore[assignment]
    sim2.set_events(False, "on-demand-pool")
    sim2.set_capacity("on-demand-pool", False)
    _pass(sim2, [worker], 0.0)
    _pass(sim2, [worker], 180.0)
    _pass(sim2, [worker, head], 200.0)
    assert client2.created == []
    assert {(e.pod, e.reason) for e in sim2.suppressed_events} == {
        ("default/worker", "TriggeredScaleUp"), ("default/worker", "FailedScaleUp"),
        ("default/worker", "NotTriggerScaleUp"), ("default/head", "NotTriggerScaleUp")}
