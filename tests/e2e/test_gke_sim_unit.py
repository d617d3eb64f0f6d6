"""The simulated GKE's pure parts (no cluster): pools from the plan, machine sizes, matching, KWOK stages."""

from __future__ import annotations

import builtins
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import gke_sim
from tests.e2e.gke_scenarios import PROD, TUTORIAL, flavor_plans, flavors_spanning_pools
from tests.e2e.kube import KubeError
from tpu_fallback.model import capacity


def _dev_pools() -> tuple[gke_sim.NodePool, gke_sim.NodePool, gke_sim.NodePool]:
    pools = {p.name: p for p in gke_sim.pools_from_plan(TUTORIAL.render())}
    assert set(pools) == {"default-pool", "on-demand-pool", "dws-pool"}
    return pools["default-pool"], pools["on-demand-pool"], pools["dws-pool"]


def test_pools_of_the_dev_plan_with_gke_labels_taints_and_sizes() -> None:
    system, plan_a, plan_b = _dev_pools()
    assert (system.name, system.fixed_nodes, system.machine.name) == ("default-pool", 1, "n2-standard-16")
    assert not system.tpu and system.node_taints() == []
    assert (plan_a.name, plan_a.max_nodes, plan_a.hosts_per_slice, plan_a.queued) == ("on-demand-pool", 4, 4, False)
    assert plan_a.node_labels()["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert plan_a.node_labels()["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert plan_a.node_labels()["tpu-fallback/plan"] == "on-demand"
    assert plan_a.node_taints() == [gke_sim.TPU_TAINT]
    assert (plan_b.name, plan_b.queued, plan_b.flex_start) == ("dws-pool", True, True)
    assert plan_b.node_labels()["cloud.google.com/gke-queued"] == "true"
    assert plan_b.node_taints() == [gke_sim.TPU_TAINT, gke_sim.QUEUED_TAINT]


def test_allocatable_is_capacity_minus_gkes_reservations() -> None:
    tpu_host = gke_sim.machine("ct6e-standard-4t").allocatable()
    # 180 vCPU: 60m + 10m + 10m + 0.25 % of 176 = 520m reserved.
    assert tpu_host["cpu"] == Decimal("179.48")
    assert tpu_host["google.com/tpu"] == 4 and tpu_host["pods"] == 110
    # 720 GiB less the kernel's share, kube-reserved with image streaming's and the 100 MiB eviction threshold, as
    # GKE's autoscaler predicts it (tpu_fallback/model/capacity.py; worked by hand in tests/test_allocatable.py).
    assert tpu_host["memory"] == capacity.gke_allocatable(180, 720).memory
    assert 686 * 2**30 < tpu_host["memory"] < 687 * 2**30
    n2 = gke_sim.machine("n2-standard-16")
    assert (n2.vcpus, n2.memory_gib, n2.tpu_chips) == (16, 64, 0)
    with pytest.raises(ValueError, match="unknown machine type"):
        gke_sim.machine("a3-megagpu-8g")


def test_a_ray_worker_fits_plan_a_but_not_the_system_pool() -> None:
    system, plan_a, plan_b = _dev_pools()
    worker = {"metadata": {"name": "w"}, "spec": {
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice", "cloud.google.com/gke-nodepool":
                         "on-demand-pool"},
        "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"resources": {"requests": {"cpu": "8", "memory": "16Gi", "google.com/tpu": "4"}}}]}}
    request = gke_sim.pod_requests(worker)
    assert gke_sim.fits(request, plan_a.machine.allocatable())
    assert gke_sim.selector_matches(worker, plan_a.node_labels())
    assert not gke_sim.untolerated(worker, plan_a.node_taints())
    assert not gke_sim.selector_matches(worker, system.node_labels())
    # Plan B's queued taint is not tolerated by this pod (the RayJob's workers do tolerate it).
    assert gke_sim.untolerated(worker, plan_b.node_taints()) == [gke_sim.QUEUED_TAINT]


def test_flavors_map_to_plans_and_none_spans_two_multi_host_pools() -> None:
    infra = PROD.render()
    pools = gke_sim.pools_from_plan(infra)
    plans = flavor_plans(infra, pools)
    assert plans["default-cpu"] == "system"
    assert {plans[f] for f in plans if f.startswith("on-demand")} == {"on-demand"}
    assert {plans[f] for f in plans if f.startswith("dws")} == {"flex-start"}
    assert flavors_spanning_pools(infra, pools) == {}


def test_kwok_stages_delay_only_job_pods_and_keep_the_per_pod_override(tmp_path: Path) -> None:
    for name in gke_sim.KWOK_STAGES:
        kind = "Node" if name.startswith("node") else "Pod"
        (tmp_path / f"{name}.yaml").write_text(
            f"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\n"
            f"spec: {{resourceRef: {{apiGroup: v1, kind: {kind}}}, next: {{}}}}\n")
    stages = {s["metadata"]["name"]: s for s in gke_sim.kwok_stages(2.5, tmp_path)}
    assert set(stages) == set(gke_sim.KWOK_STAGES)
    delay = stages["pod-complete"]["spec"]["delay"]
    assert delay["durationMilliseconds"] == 2500
    assert gke_sim.KWOK_COMPLETE_DELAY in delay["durationFrom"]["expressionFrom"]
    assert "delay" not in stages["pod-ready"]["spec"]


def test_a_rayjob_with_its_own_run_time() -> None:
    rayjob = {"kind": "RayJob", "metadata": {"name": "j"}, "spec": {"rayClusterSpec": {"headGroupSpec": {
        "template": {"spec": {"containers": [{"image": "rayproject/ray:2.53.0-py311"}]}}}}}}
    out = gke_sim.with_run_time(rayjob, 12)
    template = out["spec"]["submitterPodTemplate"]
    assert template["metadata"]["annotations"] == {gke_sim.KWOK_COMPLETE_DELAY: "12000ms"}
    assert template["spec"]["containers"][0]["image"] == "rayproject/ray:2.53.0-py311"
    assert gke_sim.with_run_time({"kind": "ConfigMap", "metadata": {"name": "c"}}, 1) == {
        "kind": "ConfigMap", "metadata": {"name": "c"}}


def test_the_run_time_keeps_the_projects_submitter_template() -> None:
    pinned = {"spec": {"nodeSelector": {"cloud.google.com/gke-nodepool": "default-pool"}, "containers": [{}]}}
    rayjob = {"kind": "RayJob", "metadata": {"name": "j"}, "spec": {"submitterPodTemplate": pinned, "rayClusterSpec": {
        "headGroupSpec": {"template": {"spec": {"containers": [{"image": "i"}]}}}}}}
    template = gke_sim.with_run_time(rayjob, 1)["spec"]["submitterPodTemplate"]
    assert template["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "default-pool"}
    assert template["metadata"]["annotations"] == {gke_sim.KWOK_COMPLETE_DELAY: "1000ms"}


def test_the_fake_dashboard_answers_only_ray_head_services() -> None:
    dashboard = gke_sim.RayDashboard()
    try:
        assert dashboard.url.startswith("http://127.0.0.1:")
        status, _ = dashboard.answer("GET", "http://example.com/api/jobs/x", "")
        assert status == 404
        status, _ = dashboard.answer("GET", "http://head-svc.default.svc.cluster.local:8265/api/jobs/", "")
        assert status == 404  # not connected to a cluster yet
    finally:
        dashboard.close()


def test_the_fake_dashboard_keeps_a_jobs_start_and_end_time() -> None:
    """As Ray's job API: start_time stays what it was at the first answer and end_time is set once the submitter Job
    finished (it answered the current time at every call before)."""
    submitter: dict[str, Any] = {"metadata": {"name": "j", "namespace": "ns"}, "status": {}}

    class Store:
        def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
            return submitter if (name, namespace) == ("j", "ns") else None

    class Cache:
        def items(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
            return [{"metadata": {"name": "j", "namespace": "ns"}, "spec": {"entrypoint": "python t.py"},
                     "status": {"jobId": "j-123"}}] if (kind, namespace) == ("RayJob", "ns") else []

        def informer(self, api_version: str, kind: str) -> Store:
            return Store()

    dashboard = gke_sim.RayDashboard()
    try:
        dashboard.connect(Cache())  # type: ignore[arg-type]
        url = "http://j-head-svc.ns.svc.cluster.local:8265/api/jobs/j-123"
        status, first = dashboard.answer("GET", url, "")
        assert status == 200 and first["status"] == "RUNNING" and first["end_time"] == 0
        time.sleep(0.01)
        assert dashboard.answer("GET", url, "")[1]["start_time"] == first["start_time"]
        submitter["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        done = dashboard.answer("GET", url, "")[1]
        assert done["status"] == "SUCCEEDED" and done["start_time"] == first["start_time"] <= done["end_time"]
        time.sleep(0.01)
        assert dashboard.answer("GET", url, "")[1]["end_time"] == done["end_time"]
        assert dashboard.answer("GET", url.replace("j-123", "other"), "")[0] == 404
    finally:
        dashboard.close()


class _FakeClient:
    """Answers GET from a dict keyed by (kind, name); everything else is absent."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    def get(self, api: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.objects.get((kind, name))


def _request(uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": "pr", "namespace": "default", "uid": uid},
            "spec": {"podSets": [{"podTemplateRef": {"name": "ppt"}, "count": 2}]}}


def _sim_with(objects: dict[tuple[str, str], dict[str, Any]]) -> gke_sim.GkeSim:
    sim = object.__new__(gke_sim.GkeSim)  # only the client is used by the method under test
    sim._client = _FakeClient(objects)  # type: ignore[assignment]
    return sim


def test_a_request_deleted_with_its_pod_templates_is_skipped_not_an_error() -> None:
    # Kueue deletes the ProvisioningRequest and its PodTemplates when the Workload is evicted or deactivated; the
    # informer can still list the request for a moment after its template is gone.
    assert _sim_with({})._request_pod_sets(_request()) is None
    replaced = {("ProvisioningRequest", "pr"): _request(uid="u2")}
    assert _sim_with(replaced)._request_pod_sets(_request()) is None
    deleting = _request()
    deleting["metadata"]["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    assert _sim_with({("ProvisioningRequest", "pr"): deleting})._request_pod_sets(_request()) is None


def test_a_live_request_without_its_pod_template_is_an_error() -> None:
    with pytest.raises(KubeError, match="PodTemplate ppt of ProvisioningRequest pr not found"):
        _sim_with({("ProvisioningRequest", "pr"): _request()})._request_pod_sets(_request())


def test_a_request_with_its_template_gives_the_pod_and_count() -> None:
    template = {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}}
    sets = _sim_with({("PodTemplate", "ppt"): template})._request_pod_sets(_request())
    assert sets == [({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}, 2)]


def _node(name: str, reason: str) -> dict[str, Any]:
    status = "Unknown" if reason == "NodeStatusUnknown" else "True"
    return {"metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": status, "reason": reason,
                                       "message": "Kubelet stopped posting node status."}]}}


def test_a_node_whose_heartbeat_lapsed_is_a_sim_error_once() -> None:
    # kube-controller-manager marks a node whose Lease is not renewed Unknown and its pods not Ready for good (KWOK's
    # stages only ready Pending pods), which once stalled a RayCluster: the sim reports it instead of waiting.
    sim = object.__new__(gke_sim.GkeSim)
    sim.errors, sim._lapsed = [], set()
    nodes = [_node("tpu-1", "KubeletReady"), _node("tpu-2", "NodeStatusUnknown")]
    sim._check_heartbeats(50.0, nodes)
    sim._check_heartbeats(51.0, nodes)
    assert len(sim.errors) == 1, sim.errors
    assert "tpu-2" in sim.errors[0] and "Lease" in sim.errors[0]


# --- Spot preemption, stock-out switches, reservation pools (a fake API: what the sim writes) ------------------------


class _Store:
    """The sim's client and informer cache over one dict of nodes and pods, recording its writes."""

    def __init__(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.events: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str]] = []

    # KubeClient
    def list(self, api: str, kind: str) -> list[dict[str, Any]]:
        return list((self.pods if kind == "Pod" else self.nodes).values())

    def get(self, api: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return (self.pods if kind == "Pod" else self.nodes).get(name)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "Node":
            self.nodes[obj["metadata"]["name"]] = obj
            return obj
        assert obj["kind"] == "Event"
        self.events.append(obj)
        return obj

    def delete(self, api: str, kind: str, name: str, namespace: str | None = None) -> None:
        self.writes.append(("DELETE", f"{kind}/{name}"))
        self.nodes.pop(name, None)

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "") -> dict[str, Any]:
        self.writes.append((method, path))
        parts = path.strip("/").split("/")
        if parts[2] == "nodes":
            node = self.nodes[parts[3]]
            node.setdefault("spec", {}).update(body.get("spec") or {})
            annotations = node["metadata"].setdefault("annotations", {})
            for key, value in ((body.get("metadata") or {}).get("annotations") or {}).items():
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value
            return node
        pod = self.pods[parts[5]]
        if method == "DELETE":
            del self.pods[parts[5]]
            return pod
        pod["status"] = {**pod.get("status", {}), **body["status"]}
        return pod

    # ClusterCache
    def informer(self, api: str, kind: str) -> _Store:
        return self

    def items(self) -> builtins.list[dict[str, Any]]:
        return list(self.nodes.values())

    def observe(self, obj: Any) -> None:
        return

    def forget(self, obj: Any) -> None:
        return


def _spot_pool(name: str = "spot-pool", hosts: int = 4) -> gke_sim.NodePool:
    return gke_sim.NodePool(name=name, cluster="c", zone="us-east5-b", machine=gke_sim.machine("ct6e-standard-4t"),
                            config_labels={}, max_nodes=8, topology="4x4", hosts_per_slice=hosts, spot=True)


def _sim_on(pools: list[gke_sim.NodePool], store: _Store) -> gke_sim.GkeSim:
    sim = gke_sim.GkeSim(pools)
    sim._client, sim._cache = store, store  # type: ignore[assignment]
    return sim


def _tpu_node(name: str, pool: str, slice_id: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {gke_sim.POOL_LABEL: pool},
                         "annotations": {gke_sim.KWOK_ANNOTATION: "fake", gke_sim.SLICE_ANNOTATION: slice_id}},
            "spec": {"taints": [dict(gke_sim.TPU_TAINT)]}, "status": {}}


def _running_pod(name: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def test_spot_nodes_carry_gkes_spot_label_and_a_spot_or_reservation_pool_is_read_from_the_plan() -> None:
    assert _spot_pool().node_labels()[gke_sim.SPOT_LABEL] == "true"
    assert gke_sim.SPOT_LABEL not in _dev_pools()[1].node_labels()

    class Res:
        def __init__(self, inputs: dict[str, Any]) -> None:
            self.inputs = inputs

    class Run:
        project, stack = "p", "s"

        def of_type(self, kind: str) -> list[Res]:
            base = {"location": "us-east5-b", "autoscaling": {"maxNodeCount": 8},
                    "placementPolicy": {"type": "COMPACT", "tpuTopology": "4x4"}}
            spot = {"spot": True, "machineType": "ct6e-standard-4t",
                    "taints": [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NO_SCHEDULE"}]}
            reserved = {"machineType": "ct6e-standard-4t", "reservationAffinity": {
                "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
                "values": ["tpu-res"]}}
            return [Res({**base, "name": "spot-pool", "nodeConfig": spot}),
                    Res({**base, "name": "res-pool", "nodeConfig": reserved, "autoscaling": None, "nodeCount": 4})]

    spot, reserved = gke_sim.pools_from_plan(Run())  # type: ignore[arg-type]
    assert spot.spot and spot.reservation is None and spot.node_labels()[gke_sim.SPOT_LABEL] == "true"
    assert {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"} in spot.node_taints()
    assert reserved.reservation == "tpu-res" and reserved.fixed_nodes == 4 and not reserved.spot


def test_a_spot_preemption_shuts_the_slice_down_as_gke_does_then_the_vms_are_gone() -> None:
    store = _Store([_tpu_node(f"a{i}", "spot-pool", "s1") for i in range(4)]
                   + [_tpu_node(f"b{i}", "spot-pool", "s2") for i in range(4)],
                   [_running_pod("worker-a", "a0"), _running_pod("worker-b", "b0")])
    sim = _sim_on([_spot_pool()], store)
    assert sim.preempt_spot("spot-pool", 1) == ["a0", "a1", "a2", "a3"]  # one slice, whole
    # At once: the kubelet's Event on each node, the not-ready taint, the pod Failed as graceful shutdown leaves it.
    assert {(e["involvedObject"]["name"], e["reason"], e["source"]["component"]) for e in store.events} == {
        (f"a{i}", "Shutdown", "kubelet") for i in range(4)}
    assert any(t["key"] == gke_sim.NOT_READY_TAINT for t in store.nodes["a0"]["spec"]["taints"])
    assert not any(t["key"] == gke_sim.NOT_READY_TAINT for t in store.nodes["b0"]["spec"]["taints"])
    status = store.pods["worker-a"]["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "Terminated")
    assert "imminent node shutdown" in status["message"]
    assert {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}.items() <= \
        next(c for c in status["conditions"] if c["type"] == "DisruptionTarget").items()
    assert store.pods["worker-b"]["status"]["phase"] == "Running"
    assert "a0" in store.nodes  # the grace period: the VM is still there
    sim._finish_shutdowns(sim.elapsed() + sim.scale.real(gke_sim.SHUTDOWN_GRACE))
    assert set(store.nodes) == {f"b{i}" for i in range(4)} and set(store.pods) == {"worker-b"}


def test_only_spot_pools_are_preempted_and_a_reservation_has_no_stock_out_switch() -> None:
    on_demand = gke_sim.NodePool(name="od", cluster="c", zone="z", machine=gke_sim.machine("ct6e-standard-4t"),
                                 config_labels={}, max_nodes=4)
    reserved = gke_sim.NodePool(name="res", cluster="c", zone="z", machine=gke_sim.machine("ct6e-standard-4t"),
                                config_labels={}, fixed_nodes=4, reservation="tpu-res")
    sim = _sim_on([on_demand, reserved, _spot_pool()], _Store([], []))
    with pytest.raises(ValueError, match="'od' is not a Spot pool"):
        sim.preempt_spot("od")
    with pytest.raises(ValueError, match="consumes reservation 'tpu-res'"):
        sim.set_capacity(["od", "res"], False)
    assert sim.capacity == {"od": True, "res": True, "spot-pool": True}  # refused as a whole
    sim.set_capacity(["od", "spot-pool"], False)
    assert sim.capacity == {"od": False, "res": True, "spot-pool": False}
    sim.set_capacity("spot-pool", True)
    assert sim.capacity == {"od": False, "res": True, "spot-pool": True}


# --- the autoscaler as GKE's: failures, back-off, its Events (upstream texts copied here, not the sim's constants) ---

# GoogleCloudPlatform/cluster-autoscaler@7d250507 pkg/visibility/events/failed_scale_up_event_logger.go
ZONAL = "Node scale up in zones {} associated with this pod failed: {}. Pod is at risk of not being scheduled."
# kubernetes/autoscaler@55c37cd5 cluster-autoscaler/cloudprovider/gce/gce_url.go GenerateMigUrl
MIG_URL = "https://www.googleapis.com/compute/v1/projects/{}/zones/{}/instanceGroups/{}"
ZONE = "us-east5-b"
SIM_SECONDS = gke_sim.TimeScale(real_per_sim=1.0, min_real_wait=0.0)  # the unit tests' clock reads simulated seconds


def _pool(name: str, *, tpu: bool = True, max_nodes: int = 4, subnetwork: str = "default",
          reservation: str | None = None) -> gke_sim.NodePool:
    if tpu:
        return gke_sim.NodePool(name=name, cluster="c", zone=ZONE, machine=gke_sim.machine("ct6e-standard-4t"),
                                config_labels={"pool": name}, max_nodes=max_nodes, topology="4x4", hosts_per_slice=4,
                                project="p", subnetwork=subnetwork, reservation=reservation)
    return gke_sim.NodePool(name=name, cluster="c", zone=ZONE, machine=gke_sim.machine("n2-standard-16"),
                            config_labels={"pool": name}, max_nodes=max_nodes, project="p", subnetwork=subnetwork)


def _pending(name: str, pool: str, *, tpu: bool = True, cpu: str = "1", created: str = "2026-01-01T00:00:00Z",
             tolerate_tpu: bool | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": "1Gi", **({"google.com/tpu": "4"} if tpu else {})}
    spec: dict[str, Any] = {"nodeSelector": {"pool": pool}, "containers": [{"resources": {"requests": requests}}]}
    if tpu if tolerate_tpu is None else tolerate_tpu:
        spec["tolerations"] = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "creationTimestamp": created},
            "spec": spec, "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}


def _autoscaler(pools: list[gke_sim.NodePool], pods: list[dict[str, Any]]) -> tuple[gke_sim.GkeSim, _Store]:
    store = _Store([], pods)
    sim = gke_sim.GkeSim(pools, scale=SIM_SECONDS)
    sim._client, sim._cache = store, store  # type: ignore[assignment]
    return sim, store


def _loop(sim: gke_sim.GkeSim, store: _Store, now: float) -> None:
    """One pass of the autoscaler at `now` (simulated seconds since the start, as the sim's clock reads it)."""
    sim._t0 = time.monotonic() - now
    sim._forget_stale_backoffs(now)
    sim._finish_upcoming(now)
    nodes = [n for n in store.nodes.values() if not gke_sim.is_registering(n)]
    sim._scale_up(now, nodes, list(store.pods.values()))


def _messages(store: _Store, reason: str, pod: str | None = None) -> list[str]:
    return [e["message"] for e in store.events
            if e["reason"] == reason and (pod is None or e["involvedObject"]["name"] == pod)]


# Each failure kind and the part of the FailedScaleUp message GKE writes for it (failureToMessage), {id}: the MIG URL.
FAILURE_TEXTS = {
    "out-of-resources": "GCE out of resources",
    "quota-exceeded": "GCE quota exceeded",
    "ip-space-exhausted": "IP space exhausted",
    "service-account-deleted": "Service Account was deleted",
    "invalid-reservation": "Invalid Reservation: {id}",
    "invalid-tpu-configuration": "Invalid TPU configuration",
    "internal-error": "Internal error",
}
RESERVATION_TEXTS = {
    "reservation-not-ready": "Reservation not ready: {id}",
    "reservation-capacity-exceeded": "Reservation capacity exceeded: {id}",
    "reservation-not-found": "Reservation not found or incorrectly shared: {id}",
}


@pytest.mark.parametrize("kind", [*FAILURE_TEXTS, *RESERVATION_TEXTS])
def test_each_failure_writes_gkes_text_on_the_scale_ups_pods_then_backs_the_pool_off(kind: str) -> None:
    reserved = kind in RESERVATION_TEXTS
    pool = _pool("tpu-a", reservation="res-1" if reserved else None)
    sim, store = _autoscaler([pool, _pool("cpu", tpu=False, max_nodes=0)], [_pending("w1", "tpu-a")])
    sim.set_failure("tpu-a", kind)
    assert sim.capacity["tpu-a"] is False and sim.failures["tpu-a"] == kind
    _loop(sim, store, 0.0)
    node_group = MIG_URL.format("p", ZONE, pool.mig_name)
    assert _messages(store, "TriggeredScaleUp") == [f"Pod triggered scale-up: [{{{node_group} 0->4 (max: 4)}}]"]
    _loop(sim, store, 179.0)
    assert _messages(store, "FailedScaleUp") == []  # not before the scale-up's delay (timings.scale_up)
    _loop(sim, store, 180.0)
    text = {**FAILURE_TEXTS, **RESERVATION_TEXTS}[kind].format(id=node_group)
    assert _messages(store, "FailedScaleUp", "w1") == [ZONAL.format(ZONE, text)[:250]]
    assert {e["type"] for e in store.events if e["reason"] == "FailedScaleUp"} == {"Warning"}
    assert sim.backed_off()["tpu-a"] == kind
    _loop(sim, store, 300.0)  # still backed off: no second scale-up, the pod says why
    assert len(_messages(store, "TriggeredScaleUp")) == 1
    # (After an IP space exhausted, the CPU pool of the same subnet is backed off too, not skipped for its size.)
    counts = ("2 in backoff after failed scale-up" if kind == "ip-space-exhausted"
              else "1 in backoff after failed scale-up, 1 max node group size reached")
    assert _messages(store, "NotTriggerScaleUp", "w1") == [f"Pod didn't trigger scale-up: {counts}"]


def test_the_back_off_doubles_after_each_failure_up_to_its_max_and_capacity_back_does_not_end_it() -> None:
    sim, store = _autoscaler([_pool("tpu-a")], [_pending("w1", "tpu-a")])
    sim.set_capacity("tpu-a", False)
    durations, now = [], 0.0
    for i in range(5):
        _loop(sim, store, now)  # a scale-up
        now += 180.0
        _loop(sim, store, now)  # it fails
        entry = sim._node_group_backoff.entries["tpu-a"]
        durations.append(entry.duration)
        assert entry.until == now + entry.duration
        if i < 4:
            now = entry.until + 1.0  # the back-off is over: the next pass scales up again
    # kubernetes-sigs/cluster-autoscaler@33c3f97b flags: initial 5 min, max 30 min; doubled at each failure after one.
    assert durations == [300.0, 600.0, 1200.0, 1800.0, 1800.0]
    # The same message five times: one Event (GKE's recorder bumps its count; the sim writes it once).
    assert len(_messages(store, "FailedScaleUp", "w1")) == 1
    sim.set_capacity("tpu-a", True)  # capacity is back, but the back-off runs out by itself
    _loop(sim, store, now + 1.0)
    def scale_ups() -> int:
        return len([e for e in sim.log if e.what.startswith("scale-up of tpu-a 0->4")])

    assert sim.backed_off() == {"tpu-a": "out-of-resources"} and scale_ups() == 5
    _loop(sim, store, now + 1801.0)
    assert sim.backed_off() == {} and scale_ups() == 6
    # Forgotten 3 h after the last failure (--node-group-backoff-reset-timeout): the next one starts at 5 min again.
    sim._forget_stale_backoffs(now + 10800.0 + 1.0)
    assert sim._node_group_backoff.entries == {}


def test_a_scale_up_that_never_completes_fails_after_the_max_node_provision_time() -> None:
    pool = _pool("tpu-a")
    sim, store = _autoscaler([pool, _pool("cpu", tpu=False, max_nodes=1)],
                             [_pending("w1", "tpu-a"), _pending("h1", "cpu", tpu=False)])
    sim.set_failure("tpu-a", "instances-timeout")
    sim.scale_up_delays["cpu"] = 1000.0  # slower than the CPU pools' 15 min: it times out too
    _loop(sim, store, 0.0)
    _loop(sim, store, 1.0)  # one scale-up per loop: the CPU pool's comes in the next one
    _loop(sim, store, 901.0)
    assert sim.backed_off() == {"cpu": "instances-timeout"}
    _loop(sim, store, 3600.0)
    assert _messages(store, "FailedScaleUp", "w1") == []  # a TPU pool waits 10 h
    assert _messages(store, "FailedScaleUp", "h1") == [ZONAL.format(  # cut at 250 bytes (below)
        ZONE, 'Some nodes in node group ["' + MIG_URL.format("p", ZONE, _pool("cpu", tpu=False).mig_name)
        + '"] failed to appear in time')[:250]]
    _loop(sim, store, 36000.0)
    assert _messages(store, "FailedScaleUp", "w1") == [ZONAL.format(
        ZONE, f'Some nodes in node group ["{MIG_URL.format("p", ZONE, pool.mig_name)}"] failed to appear in time'
    )[:250]]
    assert sim.backed_off()["tpu-a"] == "instances-timeout"
    assert store.nodes == {}


def test_an_invalid_tpu_topology_fails_the_resize_at_once_without_triggered_scale_up() -> None:
    sim, store = _autoscaler([_pool("tpu-a")], [_pending("w1", "tpu-a")])
    sim.set_failure("tpu-a", "invalid-tpu-topology")
    _loop(sim, store, 0.0)
    assert _messages(store, "TriggeredScaleUp") == []
    assert _messages(store, "FailedScaleUp", "w1") == [ZONAL.format(ZONE, "Invalid TPU topology: 4x4")]
    # The loop's result is an error: the pod is left unschedulable, with the failed node group's reason.
    assert _messages(store, "NotTriggerScaleUp", "w1") == ["Pod didn't trigger scale-up: 1 scale-up execution failed"]
    assert sim.backed_off() == {"tpu-a": "invalid-tpu-topology"}


def test_failed_scale_up_goes_to_the_pods_of_that_scale_up_only() -> None:
    sim, store = _autoscaler([_pool("tpu-a"), _pool("cpu", tpu=False, max_nodes=1)],
                             [_pending("w1", "tpu-a"), _pending("w2", "tpu-a")])
    sim.set_capacity("tpu-a", False)
    _loop(sim, store, 0.0)
    # A worker created after the scale-up decision waits for its nodes but did not trigger it; a head pod on the CPU
    # pool never asks the TPU pool for anything.
    store.pods["w3"] = _pending("w3", "tpu-a", created="2026-01-01T00:01:00Z")
    store.pods["h1"] = _pending("h1", "cpu", tpu=False)
    _loop(sim, store, 10.0)
    assert len(_messages(store, "TriggeredScaleUp", "h1")) == 1  # the next loop's scale-up
    _loop(sim, store, 180.0)
    failed = {e["involvedObject"]["name"] for e in store.events if e["reason"] == "FailedScaleUp"}
    assert failed == {"w1", "w2"}
    assert {e["involvedObject"]["name"] for e in store.events if e["reason"] == "TriggeredScaleUp"} == {
        "w1", "w2", "h1"}


def test_every_backed_off_node_group_is_counted_on_every_pending_pod() -> None:
    # A head pod that only the CPU pool could take, the CPU pool at its max: GKE counts the TPU pools' back-off on it
    # too (--scaleup-simulation-for-skipped-node-groups-enabled off, GetRemainingPods).
    pools = [_pool("tpu-a"), _pool("tpu-b"), _pool("cpu", tpu=False, max_nodes=0)]
    sim, store = _autoscaler(pools, [_pending("w1", "tpu-a")])
    sim.set_capacity("tpu-a", False)
    _loop(sim, store, 0.0)
    _loop(sim, store, 180.0)
    store.pods["h1"] = _pending("h1", "cpu", tpu=False)
    _loop(sim, store, 200.0)
    (message,) = _messages(store, "NotTriggerScaleUp", "h1")
    assert message.startswith("Pod didn't trigger scale-up: ")
    assert sorted(message.removeprefix("Pod didn't trigger scale-up: ").split(", ")) == sorted([
        "1 in backoff after failed scale-up", "1 max node group size reached",
        "1 node(s) had untolerated taint {google.com/tpu: present}"])
    assert "FailedScaleUp" not in {e["reason"] for e in store.events if e["involvedObject"]["name"] == "h1"}
    # With the flag on, a skipped node group the pod does not fit counts its predicate failure instead.
    sim2, store2 = _autoscaler(pools, [_pending("w1", "tpu-a")])
    sim2.skipped_simulation = True
    sim2.set_capacity("tpu-a", False)
    _loop(sim2, store2, 0.0)
    _loop(sim2, store2, 180.0)
    store2.pods["h1"] = _pending("h1", "cpu", tpu=False)
    _loop(sim2, store2, 200.0)
    (message,) = _messages(store2, "NotTriggerScaleUp", "h1")
    assert sorted(message.removeprefix("Pod didn't trigger scale-up: ").split(", ")) == sorted([
        "2 node(s) had untolerated taint {google.com/tpu: present}", "1 max node group size reached"])


def test_a_pod_no_pool_can_take_gets_upstreams_reasons_never_a_failed_scale_up() -> None:
    pools = [_pool("tpu-a"), _pool("cpu", tpu=False, max_nodes=1), _pool("cpu-2", tpu=False, max_nodes=2)]
    sim, store = _autoscaler(pools, [_pending("h1", "cpu", tpu=False, cpu="64")])
    sim.set_capacity("tpu-a", False)
    _loop(sim, store, 0.0)
    # No node of any group could hold 64 CPUs: its own pool says so, cpu-2 does not match its selector, the TPU pool
    # has a taint it does not tolerate (the scheduler's filters in their order: the first failing one counts).
    (message,) = _messages(store, "NotTriggerScaleUp", "h1")
    assert sorted(message.removeprefix("Pod didn't trigger scale-up: ").split(", ")) == sorted([
        "1 Insufficient cpu", "1 node(s) didn't match Pod's node affinity/selector",
        "1 node(s) had untolerated taint {google.com/tpu: present}"])
    assert _messages(store, "TriggeredScaleUp") == _messages(store, "FailedScaleUp") == []
    # A head that fits but whose pool is at its max size; a fixed-size pool (no autoscaling) is no node group at
    # all, and a queued one is DWS's: neither is counted.
    fixed = gke_sim.NodePool(name="system", cluster="c", zone=ZONE, machine=gke_sim.machine("n2-standard-16"),
                             config_labels={"pool": "system"}, fixed_nodes=1)
    queued = replace(_pool("dws"), queued=True)
    sim, store = _autoscaler([_pool("cpu", tpu=False, max_nodes=0), fixed, queued],
                             [_pending("h2", "cpu", tpu=False)])
    _loop(sim, store, 0.0)
    assert _messages(store, "NotTriggerScaleUp", "h2") == ["Pod didn't trigger scale-up: 1 max node group size reached"]


def test_one_scale_up_per_loop_and_none_while_the_pods_wait_for_it() -> None:
    sim, store = _autoscaler([_pool("tpu-a"), _pool("tpu-b")], [_pending("a1", "tpu-a"), _pending("b1", "tpu-b")])
    _loop(sim, store, 0.0)
    assert [e["involvedObject"]["name"] for e in store.events] == ["a1"]  # and no NotTriggerScaleUp for b1
    _loop(sim, store, 10.0)
    assert [e["involvedObject"]["name"] for e in store.events] == ["a1", "b1"]
    _loop(sim, store, 20.0)
    assert len(store.events) == 2


def test_ip_space_exhausted_backs_off_every_pool_of_the_subnet() -> None:
    pools = [_pool("tpu-a"), _pool("tpu-b"), _pool("cpu", tpu=False), _pool("tpu-c", subnetwork="other")]
    sim, store = _autoscaler(pools, [_pending("w1", "tpu-a")])
    sim.set_failure("tpu-a", "ip-space-exhausted")
    _loop(sim, store, 0.0)
    _loop(sim, store, 180.0)
    assert _messages(store, "FailedScaleUp", "w1") == [ZONAL.format(ZONE, "IP space exhausted")]
    # GoogleCloudPlatform/cluster-autoscaler@7d250507 pkg/backoff/cidr_ip_backoff.go: the entire subnet.
    assert sim.backed_off() == {"tpu-a": "ip-space-exhausted", "tpu-b": "ip-space-exhausted",
                                "cpu": "ip-space-exhausted"}
    store.pods["b1"] = _pending("b1", "tpu-b")
    _loop(sim, store, 200.0)
    assert _messages(store, "TriggeredScaleUp", "b1") == []
    assert "3 in backoff after failed scale-up" in _messages(store, "NotTriggerScaleUp", "b1")[0]
    sim._t0 = time.monotonic() - (180.0 + 300.0 + 1.0)
    assert sim.backed_off() == {}


def test_a_reservation_error_backs_off_every_pool_of_the_reservation() -> None:
    pools = [_pool("res-a", reservation="r1"), _pool("res-b", reservation="r1"), _pool("res-c", reservation="r2")]
    sim, store = _autoscaler(pools, [_pending("w1", "res-a")])
    sim.set_failure("res-a", "reservation-not-ready")
    _loop(sim, store, 0.0)
    _loop(sim, store, 180.0)
    assert sim.backed_off() == {"res-a": "reservation-not-ready", "res-b": "reservation-not-ready"}


def test_failures_a_pool_cannot_have_are_refused() -> None:
    sim, _store = _autoscaler([_pool("tpu-a"), _pool("res", reservation="r"), replace(_pool("dws"), queued=True)], [])
    with pytest.raises(ValueError, match="unknown failure"):
        sim.set_failure("tpu-a", "gce-on-fire")
    with pytest.raises(ValueError, match="consumes no specific reservation"):
        sim.set_failure("tpu-a", "reservation-capacity-exceeded")
    with pytest.raises(ValueError, match="consumes reservation 'r'"):
        sim.set_failure(["tpu-a", "res"], "out-of-resources")
    with pytest.raises(ValueError, match="queued provisioning pool"):
        sim.set_failure("dws", "quota-exceeded")
    assert sim.failures == {"tpu-a": None, "res": None, "dws": None}
    sim.set_failure("res", "invalid-reservation")
    sim.set_capacity("dws", False)
    assert sim.failures == {"tpu-a": None, "res": "invalid-reservation", "dws": "out-of-resources"}


def test_a_multi_host_slice_registers_host_by_host_and_turns_ready_as_a_whole() -> None:
    sim, store = _autoscaler([_pool("tpu-a")], [_pending("w1", "tpu-a")])
    sim.scale_up_delays["tpu-a"] = 400.0
    _loop(sim, store, 0.0)
    registering = gke_sim.REGISTERING_ANNOTATION
    for now, expected in ((99.0, 0), (100.0, 1), (250.0, 2), (399.0, 3)):
        _loop(sim, store, now)
        assert len(store.nodes) == expected, now
        assert all(registering in n["metadata"]["annotations"] for n in store.nodes.values())
        assert len({n["metadata"]["annotations"][gke_sim.SLICE_ANNOTATION] for n in store.nodes.values()}) <= 1
    assert [e["reason"] for e in store.events] == ["TriggeredScaleUp"]  # the hosts coming up are the scale-up's
    _loop(sim, store, 400.0)
    assert len(store.nodes) == 4 and not any(registering in n["metadata"]["annotations"] for n in store.nodes.values())
    assert len({n["metadata"]["annotations"][gke_sim.SLICE_ANNOTATION] for n in store.nodes.values()}) == 1
    # A slice that fails takes its registered hosts away (all or none).
    sim, store = _autoscaler([_pool("tpu-a")], [_pending("w1", "tpu-a")])
    sim.scale_up_delays["tpu-a"] = 400.0
    _loop(sim, store, 0.0)
    _loop(sim, store, 300.0)
    assert len(store.nodes) == 3
    sim.set_capacity("tpu-a", False)
    _loop(sim, store, 400.0)
    assert store.nodes == {} and _messages(store, "FailedScaleUp", "w1")


def test_kwok_leaves_a_registering_node_not_ready(tmp_path: Path) -> None:
    for name in gke_sim.KWOK_STAGES:
        kind = "Node" if name.startswith("node") else "Pod"
        (tmp_path / f"{name}.yaml").write_text(
            f"apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\n"
            f"spec: {{resourceRef: {{apiGroup: v1, kind: {kind}}}, next: {{}}}}\n")
    stages = {s["metadata"]["name"]: s for s in gke_sim.kwok_stages(1.0, tmp_path)}
    assert {"key": f'.metadata.annotations["{gke_sim.REGISTERING_ANNOTATION}"]', "operator": "DoesNotExist"} in \
        stages["node-initialize"]["spec"]["selector"]["matchExpressions"]


def test_failed_scale_up_messages_are_cut_at_250_bytes() -> None:
    # GKE's emitEventOnPods: message[:messageLengthLimit], messageLengthLimit = 250.
    zones = [f"zone-{i:02d}-with-a-long-name" for i in range(8)]
    full = ZONAL.format(", ".join(zones), "GCE out of resources")
    assert len(full) > 250
    assert gke_sim.failed_scale_up(zones, ["GCE out of resources"]) == full[:250]
    assert len(gke_sim.failed_scale_up(zones, ["GCE out of resources"]).encode()) == 250
    short = ZONAL.format(ZONE, "GCE quota exceeded")
    assert gke_sim.failed_scale_up([ZONE, ZONE], ["GCE quota exceeded", "GCE quota exceeded"]) == short
    # A pool whose MIG URL is long enough: the Event the sim writes is cut there too.
    pool = replace(_pool("tpu-a"), project="a-project-with-a-name-as-long-as-gcp-allows-it", zone="us-east5-b")
    sim, store = _autoscaler([pool], [_pending("w1", "tpu-a")])
    sim.set_failure("tpu-a", "invalid-reservation")
    _loop(sim, store, 0.0)
    _loop(sim, store, 180.0)
    full = ZONAL.format(ZONE, f"Invalid Reservation: {MIG_URL.format(pool.project, ZONE, pool.mig_name)}")
    assert len(full) > 250 and _messages(store, "FailedScaleUp", "w1") == [full[:250]]
