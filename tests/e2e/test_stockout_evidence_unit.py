"""The simulated GKE's switches for issue 26's scenarios, without a cluster: autoscaler Events that are never seen,
KWOK stages for pods that start slowly or never, and the job changes the scenarios make."""

from __future__ import annotations

import copy
import threading
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
    sim._events_sent = set()
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
