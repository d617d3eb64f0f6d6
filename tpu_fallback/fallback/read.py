"""Reading the cluster: Kueue's objects, nodes, and GKE's evidence of a stock-out, into decide.py's Snapshot."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback import evidence as ev
from tpu_fallback.fallback.evidence import condition as _condition
from tpu_fallback.fallback.evidence import parse_time
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.model.quantity import parse_quantity

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PROVISIONING_REQUESTS = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
TPU_RESOURCE = ev.TPU_RESOURCE
RAY_CLUSTERS = "/apis/ray.io/v1/rayclusters"


# --- reading the cluster ------------------------------------------------------------------------------------------


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    cond = _condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def read_flavor(obj: Mapping[str, Any], taint_key: str) -> d.Flavor:
    spec = obj.get("spec") or {}
    taint = next((t for t in spec.get("nodeTaints") or [] if t.get("key") == taint_key), None)
    since = None
    if taint is not None:
        try:
            since = float(taint.get("value") or 0)
        except ValueError:
            since = 0.0  # a hand-made taint: treat as closed long ago, so the cool-down reopens it
    return d.Flavor(obj["metadata"]["name"], dict(spec.get("nodeLabels") or {}), since)


def _pod_set_shape(spec: Mapping[str, Any], pod_set: str | None) -> tuple[int, Decimal]:
    """(pod count, TPUs per pod) of the Workload's PodSet named `pod_set` (its TPU PodSet)."""
    for one in spec.get("podSets") or []:
        if one.get("name") == pod_set:
            return int(one.get("count") or 0), ev.tpu_request(one.get("template") or {})
    return 0, Decimal(0)


def read_workload(obj: Mapping[str, Any], provisioned: set[tuple[str, str]],
                  evidence: ev.Evidence | None = None) -> d.Workload:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    admission = status.get("admission") or {}
    tpu_flavor: str | None = None
    tpu_pod_set: str | None = None
    usage: dict[str, Decimal] = {}
    for assignment in admission.get("podSetAssignments") or []:
        flavor = (assignment.get("flavors") or {}).get(TPU_RESOURCE)
        if flavor is None:
            continue
        tpu_flavor, tpu_pod_set = flavor, assignment.get("name")
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            if (assignment.get("flavors") or {}).get(resource) == flavor:
                usage[resource] = usage.get(resource, Decimal(0)) + parse_quantity(amount)
    admitted = _condition(obj, "Admitted")
    pods_ready = _condition(obj, "PodsReady")
    # Kueue's own test for "never started" (pkg/controller/core/workload_controller.go, admittedNotReadyWorkload).
    never_started = pods_ready is None or (pods_ready.get("status") != "True" and pods_ready.get("reason") in (
        "WaitForStart", "PodsReady"))
    checks = status.get("admissionChecks") or []
    key = (meta["namespace"], meta["name"])
    said = (evidence or ev.Evidence()).of(*key)
    evicted = _condition(obj, "Evicted")
    # Kueue v0.19.2 deactivates a Workload whose admission check was Rejected (pkg/controller/core/
    # workload_controller.go reconcileCheckBasedEviction): DeactivationTarget True (reason AdmissionCheck) first,
    # then Evicted True with reason DeactivatedDueToAdmissionCheck and spec.active false.
    target = _condition(obj, "DeactivationTarget")
    by_kueue = next((c for c in (evicted, target) if c is not None and c.get("status") == "True"
                     and c.get("reason") in ("DeactivatedDueToAdmissionCheck", "AdmissionCheck")), None)
    tpu_pods, tpu_per_pod = _pod_set_shape(spec, tpu_pod_set)
    return d.Workload(
        namespace=meta["namespace"], name=meta["name"], created=parse_time(meta.get("creationTimestamp")) or 0.0,
        cluster_queue=admission.get("clusterQueue"), tpu_flavor=tpu_flavor, usage=usage,
        quota_reserved=_true(obj, "QuotaReserved"),
        admitted_since=parse_time(admitted.get("lastTransitionTime"))
        if admitted is not None and admitted.get("status") == "True" else None,
        pods_started=not never_started,
        capacity_arrived=(bool(checks) and all(c.get("state") == "Ready" for c in checks)) or key in provisioned,
        active=spec.get("active", True) is not False,
        finished=_true(obj, "Finished"),
        multikueue_copy=d.MULTIKUEUE_ORIGIN_LABEL in (meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        pods_unschedulable=said.unschedulable,
        stockout_event=said.no_capacity_since,
        scale_up_since=said.scale_up_since,
        resource_version=str(meta.get("resourceVersion") or ""),
        tpu_pods=tpu_pods, tpu_per_pod=tpu_per_pod,
        kueue_deactivated=str(by_kueue.get("message") or by_kueue.get("reason")) if by_kueue is not None else None,
        kueue_deactivated_since=parse_time(by_kueue.get("lastTransitionTime")) if by_kueue is not None else None,
        stuck_unqueued=_stuck_unqueued(obj),
    )


# Kueue v0.19.2 (pkg/controller/core/workload_controller.go, the active branch) turns Requeued back to True on a
# reactivation only when its reason is exactly "Deactivated"; a Workload it deactivated itself carries the reason
# with the cause ("DeactivatedDueToAdmissionCheck", ...), and pkg/cache/queue/cluster_queue.go
# backoffWaitingTimeExpired keeps any Workload with Requeued False out of the queue: reactivated, it would wait for
# ever.
def _stuck_unqueued(obj: Mapping[str, Any]) -> bool:
    requeued = _condition(obj, "Requeued")
    return (requeued is not None and requeued.get("status") == "False"
            and str(requeued.get("reason", "")).startswith("DeactivatedDueTo"))


def provisioned_owners(requests: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, Workload name) of every ProvisioningRequest that is Provisioned."""
    out = set()
    for req in requests:
        if _true(req, "Provisioned"):
            for owner in req["metadata"].get("ownerReferences") or []:
                if owner.get("kind") == "Workload":
                    out.add((req["metadata"]["namespace"], owner["name"]))
    return out


def free_quota(cluster_queue: Mapping[str, Any], held: Mapping[str, Mapping[str, Decimal]] | None = None
               ) -> dict[str, dict[str, Decimal]]:
    """flavor -> resource -> nominal quota minus what is reserved (borrowing is not counted): the reservation Kueue
    reports, or what the Workloads holding quota there add up to (`held`, flavor -> resource) when that is more.
    Kueue writes a ClusterQueue's status in batches, a second or more after a Workload's admission (Kueue 0.19.2,
    clusterqueue_controller.go: constants.UpdatesBatchPeriod); a pass reading in between would see the quota of a
    Workload just admitted as free, and move a second job onto it."""
    free: dict[str, dict[str, Decimal]] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            free[flavor["name"]] = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor.get("resources") or []}
    reported: dict[str, dict[str, Decimal]] = {}
    for flavor in (cluster_queue.get("status") or {}).get("flavorsReservation") or []:
        for r in flavor.get("resources") or []:
            reported.setdefault(flavor["name"], {})[r["name"]] = parse_quantity(r.get("total") or 0)
    for flavor, resources in free.items():
        for resource in resources:
            resources[resource] -= max(reported.get(flavor, {}).get(resource, Decimal(0)),
                                       (held or {}).get(flavor, {}).get(resource, Decimal(0)))
    return free


def held_quota(workloads: Iterable[d.Workload]) -> dict[str, dict[str, dict[str, Decimal]]]:
    """ClusterQueue -> flavor -> resource -> what the Workloads holding quota on their TPU flavor use there (a
    finished Workload has released it)."""
    held: dict[str, dict[str, dict[str, Decimal]]] = {}
    for w in workloads:
        if w.quota_reserved and not w.finished and w.cluster_queue and w.tpu_flavor:
            flavor = held.setdefault(w.cluster_queue, {}).setdefault(w.tpu_flavor, {})
            for resource, amount in w.usage.items():
                flavor[resource] = flavor.get(resource, Decimal(0)) + amount
    return held


# Taints that take a node out of service, whatever it holds: the autoscaler removing it (cluster-autoscaler's
# ToBeDeletedByClusterAutoscaler) and a cordon's. Not the node lifecycle controller's not-ready taint: a node that
# registers carries it until its kubelet reports Ready, and such a node is capacity on its way (decide.scaling_up).
_OUT_OF_SERVICE = ("ToBeDeletedByClusterAutoscaler", "node.kubernetes.io/unschedulable")


def read_node(obj: Mapping[str, Any], tpu_in_use: Mapping[str, Decimal] | None = None) -> d.Node:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    out = spec.get("unschedulable", False) or any(t.get("key") in _OUT_OF_SERVICE for t in spec.get("taints") or [])
    allocatable = ((obj.get("status") or {}).get("allocatable") or {}).get(TPU_RESOURCE)
    return d.Node(dict(meta.get("labels") or {}), parse_time(meta.get("creationTimestamp")) or 0.0,
                  _true(obj, "Ready") and not out, name=str(meta.get("name") or ""),
                  tpu_free=(parse_quantity(allocatable) if allocatable is not None else Decimal(0))
                  - (tpu_in_use or {}).get(str(meta.get("name") or ""), Decimal(0)),
                  out_of_service=bool(out))


def get_if_found(kube: Kube, path: str) -> Any | None:
    """The object, or None when it (or its API) does not exist (404); any other error is raised."""
    try:
        return kube.get(path)
    except KubeError as err:
        if err.status != 404:
            raise
        return None


def list_if_served(kube: Kube, path: str) -> list[Any]:
    """The list, or none when the API is not served (404: the CRD is not installed); any other error is raised."""
    try:
        return kube.list(path)
    except KubeError as err:
        if err.status != 404:
            raise
        return []


# What the controller reads: the same collections whether listed every pass or watched.
FLAVORS, WORKLOADS, CLUSTER_QUEUES = f"{KUEUE}/resourceflavors", f"{KUEUE}/workloads", f"{KUEUE}/clusterqueues"
# Pods that are not finished: the pending ones are evidence, the running ones use TPUs of their nodes (moves count
# only free hosts). Terminal pods are left out by the server.
ACTIVE_PODS = "/api/v1/pods?fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed"


def nodes_path(selector: str | None) -> str:
    return "/api/v1/nodes" + (f"?labelSelector={urllib.parse.quote(selector, safe='')}" if selector else "")


def scale_up_events_path(reason: str) -> str:
    """GKE's autoscaler Events of one reason on pods (the server filters them: not every Event of the cluster)."""
    return f"/api/v1/events?fieldSelector=involvedObject.kind%3DPod%2Creason%3D{reason}"


def build_snapshot(config: d.Config, now: float, *, flavors: Iterable[Mapping[str, Any]],
                   workloads: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]],
                   cluster_queues: Iterable[Mapping[str, Any]], provisioning_requests: Iterable[Mapping[str, Any]],
                   pods: Iterable[Mapping[str, Any]] = (), events: Iterable[Mapping[str, Any]] = (),
                   ray_clusters: Iterable[Mapping[str, Any]] = (), memory: ev.Memory | None = None) -> d.Snapshot:
    flavors = list(flavors)
    workloads = list(workloads)
    read_flavors = {f.name: f for f in (read_flavor(o, config.taint_key) for o in flavors)}
    evidence = ev.read(now=now, pods=pods, events=events, workloads=workloads, ray_clusters=ray_clusters,
                       flavors={n: f.node_labels for n, f in read_flavors.items()},
                       reserved=[f for r in config.ladder if r.reserved for f in r.flavors], memory=memory)
    provisioned = provisioned_owners(provisioning_requests)
    read = tuple(read_workload(o, provisioned, evidence) for o in workloads)
    held = held_quota(read)
    return d.Snapshot(
        now=now,
        flavors=read_flavors,
        workloads=read,
        nodes=tuple(read_node(o, evidence.tpu_in_use) for o in nodes),
        free={o["metadata"]["name"]: free_quota(o, held.get(o["metadata"]["name"])) for o in cluster_queues},
        evidence=evidence.flavors,
    )


def snapshot(kube: Kube, config: d.Config, now: float, node_selector: str | None = None,
             memory: ev.Memory | None = None) -> d.Snapshot:
    """The cluster read with LISTs (ListingView). GKE's Events and the RayClusters are read only when a TPU pod is
    unschedulable: in steady state no Event of the cluster is listed."""
    # No ProvisioningRequest API: no DWS, nothing provisioned.
    provisioning_requests = list_if_served(kube, PROVISIONING_REQUESTS)
    pods = kube.list(ACTIVE_PODS)
    waiting = any(ev.unschedulable(p) and ev.tpu_request(p) > 0 for p in pods)
    events = [e for reason in ev.AUTOSCALER_REASONS for e in kube.list(scale_up_events_path(reason))] if waiting \
        else []
    return build_snapshot(
        config, now, flavors=kube.list(FLAVORS), workloads=kube.list(WORKLOADS),
        nodes=kube.list(nodes_path(node_selector)), cluster_queues=kube.list(CLUSTER_QUEUES),
        provisioning_requests=provisioning_requests, pods=pods, events=events,
        ray_clusters=list_if_served(kube, RAY_CLUSTERS) if waiting else [], memory=memory)
