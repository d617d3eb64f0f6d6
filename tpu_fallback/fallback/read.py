"""Reading the cluster: Kueue's objects, nodes, and GKE's evidence of a stock-out, into decide.py's Snapshot."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.model.quantity import parse_quantity

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PROVISIONING_REQUESTS = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
TPU_RESOURCE = "google.com/tpu"


# --- reading the cluster ------------------------------------------------------------------------------------------


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


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


# --- GKE's evidence of a stock-out --------------------------------------------------------------------------------
# GKE's cluster autoscaler writes Events on the pending pods it tried to place (GKE, "Troubleshoot cluster
# autoscaler not scaling up", https://cloud.google.com/kubernetes-engine/docs/troubleshooting/cluster-autoscaler-scale-up;
# kubernetes-sigs/cluster-autoscaler, core/scaleup/orchestrator and processors/status/eventing_scale_up_processor.go):
#   FailedScaleUp     "Node scale up in zones <zone> associated with this pod failed: GCE out of resources. Pod is at
#                      risk of not being scheduled."  (also "GCE quota exceeded", and ZONE_RESOURCE_POOL_EXHAUSTED /
#                      stockout errors, as Cloud Logging's scale.up.error.out.of.resources / .quota.exceeded)
#   NotTriggerScaleUp "pod didn't trigger scale-up: 1 in backoff after failed scale-up, ..." (the node group is in
#                      back-off after such a failure: still no capacity)
# A FailedScaleUp for another reason (a bad instance template, an IP range exhausted) is not a stock-out and is left
# to the stockoutAfter backstop.
SCALE_UP_FAILED, SCALE_UP_NOT_TRIGGERED = "FailedScaleUp", "NotTriggerScaleUp"
_NO_CAPACITY = ("out of resources", "quota exceeded", "quota_exceeded", "resource_pool_exhausted", "stockout",
                "stock-out")
_BACKOFF = "in backoff after failed scale-up"
# What names a pod's job: a Job's pods carry the Job's name (batch.kubernetes.io/job-name); a RayJob's pods carry
# their RayCluster's (ray.io/cluster, KubeRay ray-operator/controllers/ray/common/pod.go labelPod), and the RayCluster
# is owned by the RayJob (rayjob_controller.go constructRayClusterForRayJob).
JOB_NAME_LABEL, RAY_CLUSTER_LABEL = "batch.kubernetes.io/job-name", "ray.io/cluster"
RAY_CLUSTERS = "/apis/ray.io/v1/rayclusters"


def says_no_capacity(reason: str, message: str) -> bool:
    """An autoscaler Event saying GKE has no VMs for the pod now (a stock-out, quota, or the back-off after one)."""
    text = message.lower()
    if reason == SCALE_UP_FAILED:
        return any(marker in text for marker in _NO_CAPACITY)
    return reason == SCALE_UP_NOT_TRIGGERED and _BACKOFF in text


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending and refused by the scheduler (PodScheduled False/Unschedulable); a scheduled pod never counts."""
    if (pod.get("status") or {}).get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    cond = _condition(pod, "PodScheduled")
    return cond is not None and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"


@dataclass(frozen=True)
class PodEvidence:
    """Per (namespace, job name): has an unschedulable pod; when GKE first said it has no capacity for one."""

    unschedulable: set[tuple[str, str]]
    no_capacity_since: dict[tuple[str, str], float]

    @classmethod
    def read(cls, pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]],
             ray_clusters: Iterable[Mapping[str, Any]] = ()) -> PodEvidence:
        ray_job_of = {(c["metadata"]["namespace"], c["metadata"]["name"]): owner
                      for c in ray_clusters if (owner := _owner_name(c, "RayJob"))}
        job_of: dict[tuple[str, str], tuple[str, str]] = {}  # (namespace, pod name) of an unschedulable pod -> job
        for pod in pods:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            job = labels.get(JOB_NAME_LABEL) or ray_job_of.get((meta["namespace"], labels.get(RAY_CLUSTER_LABEL, "")))
            if job and unschedulable(pod):
                job_of[(meta["namespace"], meta["name"])] = (meta["namespace"], job)
        since: dict[tuple[str, str], float] = {}
        for event in events:
            involved = event.get("involvedObject") or {}
            job = job_of.get((involved.get("namespace", ""), involved.get("name", "")))
            if job is None or involved.get("kind") != "Pod" or not says_no_capacity(
                    str(event.get("reason", "")), str(event.get("message", ""))):
                continue
            when = parse_time(event.get("firstTimestamp") or event.get("eventTime")
                              or (event.get("metadata") or {}).get("creationTimestamp")) or 0.0
            since[job] = min(since.get(job, when), when)
        return cls(set(job_of.values()), since)


def _owner_name(obj: Mapping[str, Any], kind: str | None = None) -> str | None:
    """The name of an object's controlling owner (of `kind`, if given)."""
    owners = [o for o in obj["metadata"].get("ownerReferences") or [] if kind is None or o.get("kind") == kind]
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    return None if owner is None else str(owner.get("name"))


def read_workload(obj: Mapping[str, Any], provisioned: set[tuple[str, str]],
                  evidence: PodEvidence | None = None) -> d.Workload:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    admission = status.get("admission") or {}
    tpu_flavor: str | None = None
    usage: dict[str, Decimal] = {}
    for assignment in admission.get("podSetAssignments") or []:
        flavor = (assignment.get("flavors") or {}).get(TPU_RESOURCE)
        if flavor is None:
            continue
        tpu_flavor = flavor
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
    job = (meta["namespace"], _owner_name(obj) or "")  # the job it stands for: a RayJob, a Job
    evidence = evidence or PodEvidence(set(), {})
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
        pods_unschedulable=job in evidence.unschedulable,
        stockout_event=evidence.no_capacity_since.get(job),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


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


def read_node(obj: Mapping[str, Any]) -> d.Node:
    meta = obj["metadata"]
    ready = _true(obj, "Ready") and not (obj.get("spec") or {}).get("unschedulable", False)
    return d.Node(dict(meta.get("labels") or {}), parse_time(meta.get("creationTimestamp")) or 0.0, ready)


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
PENDING_PODS = "/api/v1/pods?fieldSelector=status.phase%3DPending"


def nodes_path(selector: str | None) -> str:
    return "/api/v1/nodes" + (f"?labelSelector={urllib.parse.quote(selector, safe='')}" if selector else "")


def scale_up_events_path(reason: str) -> str:
    """GKE's autoscaler Events of one reason on pods (the server filters them: not every Event of the cluster)."""
    return f"/api/v1/events?fieldSelector=involvedObject.kind%3DPod%2Creason%3D{reason}"


def build_snapshot(config: d.Config, now: float, *, flavors: Iterable[Mapping[str, Any]],
                   workloads: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]],
                   cluster_queues: Iterable[Mapping[str, Any]], provisioning_requests: Iterable[Mapping[str, Any]],
                   evidence: PodEvidence) -> d.Snapshot:
    provisioned = provisioned_owners(provisioning_requests)
    read = tuple(read_workload(o, provisioned, evidence) for o in workloads)
    held = held_quota(read)
    return d.Snapshot(
        now=now,
        flavors={f.name: f for f in (read_flavor(o, config.taint_key) for o in flavors)},
        workloads=read,
        nodes=tuple(read_node(o) for o in nodes),
        free={o["metadata"]["name"]: free_quota(o, held.get(o["metadata"]["name"])) for o in cluster_queues},
    )


def snapshot(kube: Kube, config: d.Config, now: float, node_selector: str | None = None) -> d.Snapshot:
    """The cluster read with LISTs (ListingView)."""
    # No ProvisioningRequest API: no DWS, nothing provisioned.
    provisioning_requests = list_if_served(kube, PROVISIONING_REQUESTS)
    evidence = _pod_evidence(kube)
    return build_snapshot(
        config, now, flavors=kube.list(FLAVORS), workloads=kube.list(WORKLOADS),
        nodes=kube.list(nodes_path(node_selector)), cluster_queues=kube.list(CLUSTER_QUEUES),
        provisioning_requests=provisioning_requests, evidence=evidence)


def _pod_evidence(kube: Kube) -> PodEvidence:
    """Pending pods, and only when one is unschedulable the autoscaler's two Event reasons on pods and the
    RayClusters: in steady state one small LIST, not every Event of the cluster."""
    pending = kube.list(PENDING_PODS)
    if not any(unschedulable(p) for p in pending):
        return PodEvidence(set(), {})
    events = [e for reason in (SCALE_UP_FAILED, SCALE_UP_NOT_TRIGGERED)
              for e in kube.list(scale_up_events_path(reason))]
    return PodEvidence.read(pending, events, list_if_served(kube, RAY_CLUSTERS))  # no KubeRay: Jobs only

