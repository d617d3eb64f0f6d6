"""The fallback controller's loop: read the cluster, decide (decide.py), act, tell (Events, log lines, metrics).

It reads the cluster from informers (watch.py, `WatchingView`): each kind is listed once and then watched, so a
pass reads memory and costs the API server nothing, and the loop runs a pass soon after something changed (a burst
of changes is one pass) and at least every pollSeconds (its decisions depend on the time: stockoutAfter, the
cool-down). `ListingView` is the former way, every kind LISTed on every pass: for `--once`, the tests and
`--list-every-pass` (to compare). Either way all state is in the cluster, so a restart loses nothing; writes go
straight to the API with the resourceVersion read as a precondition. One replica runs (a Recreate Deployment of 1).

Two plans (planAFlavors/planBFlavors) keep their Events (PlanAStockOut, PlanAReopened, EvictedFromPlanA,
MovingToPlanA, MovedToPlanA) and metrics (tpu_fallback_plan_a_*); a ladder ("rungs") writes RungStockOut,
RungReopened, EvictedFromRung, MovingUp and MovedUp, and per-rung series with a `rung` label
(tpu_fallback_rung_closed, _rung_closes_total, _rung_reopens_total, tpu_fallback_moves_up_total by target rung).
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.fallback.watch import Informer, Transport
from tpu_fallback.model.quantity import parse_quantity

log = logging.getLogger("tpu-fallback")

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PROVISIONING_REQUESTS = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
TPU_RESOURCE = "google.com/tpu"
COMPONENT = "tpu-fallback-controller"  # the Events' source


@dataclass(frozen=True)
class Settings:
    decide: d.Config
    poll_seconds: float = 5.0
    metrics_port: int = 9090  # 0: no metrics endpoint
    # The controller's own Deployment ("namespace/name"): when it is deleted or scaled to zero, the controller
    # reopens plan A on its way out, so no taint outlives it. None: run outside a Deployment (tests, --once).
    deployment: str | None = None
    # A label selector for the nodes of plan A's pools, the only nodes decide.py looks at (render/fallback.py
    # derives it from the plan A flavors' nodeLabels); None: every node is read.
    node_selector: str | None = None

    @classmethod
    def from_file(cls, path: Path) -> Settings:
        """The config.json the infra stack renders (tpu_fallback/render/fallback.py writes the same keys)."""
        raw = json.loads(path.read_text())
        rungs = parse_rungs(raw["rungs"]) if "rungs" in raw else ()
        if rungs:
            plan_a = tuple(f for r in rungs if not r.queued for f in r.flavors)
            plan_b = tuple(f for r in rungs if r.queued for f in r.flavors)
            selectors = [str(r["nodeSelector"]) for r in raw["rungs"] if not r.get("queued") and r.get("nodeSelector")]
            closable = sum(1 for r in rungs if not r.queued)
            node_selector = merge_selectors(selectors) if len(selectors) == closable else None
        else:
            plan_a, plan_b = tuple(raw["planAFlavors"]), tuple(raw["planBFlavors"])
            node_selector = raw.get("planANodeSelector") or None
        plan_a_reserved = raw.get("planAReserved", False)
        if not isinstance(plan_a_reserved, bool) or (plan_a_reserved and rungs):
            raise ValueError(f"planAReserved {plan_a_reserved!r} is invalid: expected true or false, and only without "
                             "\"rungs\" (a ladder marks its reserved rungs itself)")
        return cls(
            decide=d.Config(
                plan_a_flavors=plan_a, plan_b_flavors=plan_b,
                stockout_after=float(raw["stockoutAfterSeconds"]), cool_down=float(raw["coolDownSeconds"]),
                taint_key=str(raw["taintKey"]), reverse_move=bool(raw["reverseMove"]), rungs=rungs,
                plan_a_reserved=plan_a_reserved,
            ),
            poll_seconds=float(raw["pollSeconds"]), metrics_port=int(raw["metricsPort"]),
            deployment=raw.get("deployment"), node_selector=node_selector,
        )


_RUNG_KEYS = {"name", "flavors", "queued", "reserved", "nodeSelector"}


def parse_rungs(raw: Any) -> tuple[d.Rung, ...]:
    """config.json's "rungs": [{"name", "flavors", "queued", "reserved"?, "nodeSelector"?}, ...], most preferred
    first ("reserved": a specific reservation's rung, moved to without a Ready node). The program renders it; a
    hand-edited file that does not fit is refused with what is wrong."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"rungs {raw!r} is invalid: expected a non-empty list of rungs")
    rungs: list[d.Rung] = []
    seen_flavors: set[str] = set()
    for i, one in enumerate(raw):
        where = f"rungs[{i}]"
        if not isinstance(one, dict):
            raise ValueError(f"{where} {one!r} is invalid: expected an object")
        unknown = sorted(set(one) - _RUNG_KEYS)
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}: allowed are {sorted(_RUNG_KEYS)}")
        name, flavors, queued = one.get("name"), one.get("flavors"), one.get("queued", False)
        reserved = one.get("reserved", False)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name {name!r} is invalid: expected a non-empty string")
        if any(r.name == name for r in rungs):
            raise ValueError(f"{where}.name {name!r} is invalid: another rung has that name")
        if not isinstance(flavors, list) or not flavors or not all(isinstance(f, str) and f for f in flavors):
            raise ValueError(f"{where}.flavors {flavors!r} is invalid: expected a non-empty list of flavor names")
        shared = sorted(seen_flavors & set(flavors))
        if shared:
            raise ValueError(f"{where}.flavors {flavors!r} is invalid: {shared} is on another rung already")
        if not isinstance(queued, bool):
            raise ValueError(f"{where}.queued {queued!r} is invalid: expected true or false")
        if not isinstance(reserved, bool):
            raise ValueError(f"{where}.reserved {reserved!r} is invalid: expected true or false")
        if reserved and queued:
            raise ValueError(f"{where}.reserved true is invalid with queued true: a queued (flex-start) rung holds "
                             "no reservation")
        seen_flavors.update(flavors)
        rungs.append(d.Rung(name, tuple(flavors), queued, reserved))
    return tuple(rungs)


_IN_SELECTOR = re.compile(r"^\s*(?P<key>[A-Za-z0-9./_-]+)\s+in\s+\((?P<values>[^()]*)\)\s*$")
_EQ_SELECTOR = re.compile(r"^\s*(?P<key>[A-Za-z0-9./_-]+)\s*==?\s*(?P<values>[A-Za-z0-9._-]+)\s*$")


def merge_selectors(selectors: Iterable[str]) -> str | None:
    """One label selector for the nodes of every rung: `<key> in (...)` when each rung's selector is `<key> in
    (...)` or `<key>=<value>` on the same key; None (every node read) otherwise, since a selector cannot say "or"."""
    key: str | None = None
    values: set[str] = set()
    for selector in selectors:
        found = _IN_SELECTOR.match(selector) or _EQ_SELECTOR.match(selector)
        if found is None or (key is not None and found["key"] != key):
            return None
        key = found["key"]
        values.update(v.strip() for v in found["values"].split(",") if v.strip())
    return None if key is None or not values else f"{key} in ({','.join(sorted(values))})"


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


def _get_if_found(kube: Kube, path: str) -> Any | None:
    """The object, or None when it (or its API) does not exist (404); any other error is raised."""
    try:
        return kube.get(path)
    except KubeError as err:
        if err.status != 404:
            raise
        return None


def _list_if_served(kube: Kube, path: str) -> list[Any]:
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
    provisioning_requests = _list_if_served(kube, PROVISIONING_REQUESTS)
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
    return PodEvidence.read(pending, events, _list_if_served(kube, RAY_CLUSTERS))  # no KubeRay: Jobs only


# --- what an informer keeps of each object --------------------------------------------------------------------------
# The fields the read_* functions above (and PodEvidence) use, and every metadata field but managedFields: an
# informer holds every object of its kind for as long as the controller runs, and a Workload's pod templates or a
# node's image list would be most of that memory. A reader that starts using another field adds it here
# (tests/test_fallback_watch.py reads slimmed and whole objects alike).


def _keeping(*, top: tuple[str, ...] = (), spec: tuple[str, ...] = (), status: tuple[str, ...] = ()
             ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def slim(obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: obj[k] for k in top if k in obj}
        out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        for part, keys in (("spec", spec), ("status", status)):
            found = obj.get(part) or {}
            if keys and found:
                out[part] = {k: found[k] for k in keys if k in found}
        return out

    return slim


SLIM: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "resourceflavors": _keeping(spec=("nodeLabels", "nodeTaints")),
    "workloads": _keeping(spec=("active",), status=("admission", "conditions", "admissionChecks")),
    "clusterqueues": _keeping(spec=("resourceGroups",), status=("flavorsReservation",)),
    "provisioningrequests": _keeping(status=("conditions",)),
    "nodes": _keeping(spec=("unschedulable",), status=("conditions",)),
    "pods": _keeping(spec=("nodeName",), status=("phase", "conditions")),
    "events": _keeping(top=("involvedObject", "reason", "message", "firstTimestamp", "eventTime")),
    "rayclusters": _keeping(),
}


# --- two ways to read the cluster -----------------------------------------------------------------------------------


class ClusterView(Protocol):
    def snapshot(self, config: d.Config, now: float) -> d.Snapshot:
        """What decide.py reads, as of now; raises when the cluster cannot be read."""
        ...

    def wait(self, stop: threading.Event, timeout: float) -> None:
        """Until the next pass is due: `timeout` seconds, or sooner if the view saw a change, or `stop`."""
        ...


class ListingView:
    """Every kind LISTed on every pass (the controller's first way; --once, tests, --list-every-pass)."""

    def __init__(self, kube: Kube, node_selector: str | None = None) -> None:
        self.kube = kube
        self.node_selector = node_selector

    def snapshot(self, config: d.Config, now: float) -> d.Snapshot:
        return snapshot(self.kube, config, now, self.node_selector)

    def wait(self, stop: threading.Event, timeout: float) -> None:
        stop.wait(timeout)


class NotSyncedError(Exception):
    """The view cannot tell what the cluster holds now: a kind never listed yet, or not followed for a while."""


STALE_AFTER = 60.0  # seconds an informer may fail to follow its kind before passes stop deciding on its store
DEBOUNCE = 0.3  # seconds from a change to the pass: a burst of changes (Kueue admitting a job) is one pass
MIN_PASS_GAP = 1.0  # seconds between change-driven passes at least (a busy cluster changes all the time)


class WatchingView:
    """The cluster as informers follow it (watch.py): a pass reads memory, and `wait` ends soon after a change.

    Collections: ResourceFlavors, Workloads, ClusterQueues, ProvisioningRequests (none when the API is not served),
    Nodes (plan A's pools when `node_selector` is given), pending Pods (a pod leaving Pending arrives as DELETED),
    GKE's FailedScaleUp and NotTriggerScaleUp Events on pods (two watches, filtered by the server) and RayClusters
    (none without KubeRay). `transport` makes each informer's connection (default: a fork of `kube` each)."""

    def __init__(self, kube: Kube | None, metrics: Metrics | None = None, node_selector: str | None = None, *,
                 transport: Callable[[], Transport] | None = None, stale_after: float = STALE_AFTER) -> None:
        if transport is None:
            if kube is None:
                raise ValueError("a WatchingView needs a Kube or a transport")
            transport = kube.fork
        self.metrics = metrics if metrics is not None else Metrics()
        self.stale_after = stale_after
        self.changed = threading.Event()  # set by every informer on every change
        self._last_pass = float("-inf")
        self._reported: dict[str, str | None] = {}  # informer -> the error last logged

        def informer(name: str, path: str, slim: str, optional: bool = False) -> Informer:
            return Informer(transport(), path, name=name, optional=optional, changed=self.changed,
                            count=functools.partial(self._count, name), transform=SLIM[slim])

        self.informers: dict[str, Informer] = {i.name: i for i in (
            informer("resourceflavors", FLAVORS, "resourceflavors"),
            informer("workloads", WORKLOADS, "workloads"),
            informer("clusterqueues", CLUSTER_QUEUES, "clusterqueues"),
            informer("provisioningrequests", PROVISIONING_REQUESTS, "provisioningrequests", optional=True),
            informer("nodes", nodes_path(node_selector), "nodes"),
            informer("pods", PENDING_PODS, "pods"),
            informer("events-failedscaleup", scale_up_events_path(SCALE_UP_FAILED), "events"),
            informer("events-nottriggerscaleup", scale_up_events_path(SCALE_UP_NOT_TRIGGERED), "events"),
            informer("rayclusters", RAY_CLUSTERS, "rayclusters", optional=True),
        )}

    def _count(self, informer: str, what: str) -> None:
        self.metrics.add(f"tpu_fallback_watch_{what}_total", resource=informer)

    def start(self, sync_timeout: float = 10.0) -> bool:
        """Start every informer; wait up to `sync_timeout` seconds for their first LISTs. Whether they all answered
        (passes before that are skipped, and counted as failed)."""
        for informer in self.informers.values():
            informer.start()
        deadline = time.monotonic() + sync_timeout
        while not all(i.synced for i in self.informers.values()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        for informer in self.informers.values():  # all told first, then waited for: they end side by side
            informer.stop(timeout=0)
        for informer in self.informers.values():
            informer.stop(timeout=2.0)

    def wake(self) -> None:
        """End a `wait` at once (the process is stopping)."""
        self.changed.set()

    def snapshot(self, config: d.Config, now: float) -> d.Snapshot:
        self.changed.clear()  # before reading: a change from here on makes the next pass
        self._last_pass = time.monotonic()
        self._report()
        behind = [i for i in self.informers.values() if not i.synced or i.failing_for() > self.stale_after]
        if behind:
            raise NotSyncedError("; ".join(
                (f"{i.name} not listed yet" if not i.synced else f"{i.name} not followed for {i.failing_for():.0f}s")
                + (f" ({i.error})" if i.error else "") for i in behind))
        inf = self.informers
        events = inf["events-failedscaleup"].items() + inf["events-nottriggerscaleup"].items()
        return build_snapshot(
            config, now, flavors=inf["resourceflavors"].items(), workloads=inf["workloads"].items(),
            nodes=inf["nodes"].items(), cluster_queues=inf["clusterqueues"].items(),
            provisioning_requests=inf["provisioningrequests"].items(),
            evidence=PodEvidence.read(inf["pods"].items(), events, inf["rayclusters"].items()))

    def _report(self) -> None:
        """Log each informer's failure once when it starts (or changes), and when it is over."""
        for informer in self.informers.values():
            error, before = informer.error, self._reported.get(informer.name)
            if error == before:
                continue
            if error:
                log.warning("reading %s failed (retrying): %s", informer.name, error)
            else:
                log.info("reading %s works again", informer.name)
            self._reported[informer.name] = error

    def wait(self, stop: threading.Event, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.changed.wait(min(left, 1.0)):  # in slices, so a stop without wake() is seen within a second
                gap = self._last_pass + min(MIN_PASS_GAP, timeout) - time.monotonic()
                stop.wait(max(DEBOUNCE, gap))
                return


# --- acting -------------------------------------------------------------------------------------------------------


class Metrics:
    """Prometheus text counters and gauges, served on /metrics. `values` is keyed by series: the name, and for a
    labelled family its labels too (`tpu_fallback_watch_events_total{resource="workloads"}`)."""

    # Series of these appear as they are first counted, one per label value.
    LABELLED = ("tpu_fallback_api_requests_total",  # {verb}: every request the controller sent
                "tpu_fallback_watch_lists_total", "tpu_fallback_watch_events_total",  # {resource}: per informer
                "tpu_fallback_watch_errors_total",
                # {rung}: a capacity ladder's, in place of the plan A series (use_rungs)
                "tpu_fallback_rung_closed", "tpu_fallback_rung_closes_total", "tpu_fallback_rung_reopens_total",
                "tpu_fallback_moves_up_total")
    PLAN_A = ("tpu_fallback_plan_a_closed", "tpu_fallback_plan_a_closes_total", "tpu_fallback_plan_a_reopens_total",
              "tpu_fallback_moves_to_plan_a_total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.values: dict[str, float] = {
            "tpu_fallback_plan_a_closed": 0, "tpu_fallback_plan_a_closes_total": 0,
            "tpu_fallback_plan_a_reopens_total": 0, "tpu_fallback_moves_to_plan_a_total": 0,
            "tpu_fallback_reconcile_passes_total": 0,
            "tpu_fallback_reconcile_errors_total": 0, "tpu_fallback_action_errors_total": 0,
            "tpu_fallback_evictions_total": 0, "tpu_fallback_last_reconcile_timestamp_seconds": 0,
            "tpu_fallback_loop_heartbeat_timestamp_seconds": 0,
        }

    def use_rungs(self, closable: Iterable[str], rungs: Iterable[str]) -> None:
        """A capacity ladder: per-rung series (`rung` label) instead of plan A's, at zero from the start."""
        with self._lock:
            for name in self.PLAN_A:
                self.values.pop(name, None)
            for rung in closable:
                for name in ("tpu_fallback_rung_closed", "tpu_fallback_rung_closes_total",
                             "tpu_fallback_rung_reopens_total"):
                    self.values.setdefault(self.key(name, rung=rung), 0)
            for rung in rungs:
                self.values.setdefault(self.key("tpu_fallback_moves_up_total", rung=rung), 0)

    @staticmethod
    def key(name: str, **labels: str) -> str:
        return name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")

    def add(self, name: str, amount: float = 1, **labels: str) -> None:
        key = self.key(name, **labels)
        with self._lock:
            if key not in self.values and not (labels and name in self.LABELLED):
                raise KeyError(f"no metric {key}")  # a typo, not a new series
            self.values[key] = self.values.get(key, 0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self.values[self.key(name, **labels)] = value

    def healthy(self, max_age: float, now: float | None = None) -> bool:
        """The loop went round within `max_age` seconds (or the process is younger than that). A heartbeat, not the
        API server's health: a control-plane upgrade makes passes fail, and restarting the pod would not help."""
        now = time.time() if now is None else now
        last = self.values["tpu_fallback_loop_heartbeat_timestamp_seconds"] or self.started
        return now - last <= max_age

    def text(self) -> str:
        with self._lock:
            families: dict[str, list[tuple[str, float]]] = {}
            for key, value in self.values.items():
                families.setdefault(key.split("{", 1)[0], []).append((key, value))
        lines = []
        for name, series in families.items():  # one TYPE line per family, as the text format requires
            lines.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
            # Whole numbers in full: ":g" would print a counter past a million as 1.23457e+06.
            lines += [f"{key} {int(value) if value == int(value) else repr(value)}" for key, value in series]
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: Metrics, port: int, max_age: float) -> ThreadingHTTPServer:
    """/metrics (Prometheus text) and /healthz (fails once no pass has finished for `max_age` seconds)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                status, body = 200, metrics.text().encode()
            elif self.path == "/healthz":
                status, body = (200, b"ok\n") if metrics.healthy(max_age) else (500, b"no reconcile pass lately\n")
            else:
                status, body = 404, b"not found\n"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Controller:
    def __init__(self, kube: Kube, settings: Settings, metrics: Metrics | None = None,
                 view: ClusterView | None = None) -> None:
        self.kube = kube  # the writes, and the reads of the sweep and the way out
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.view: ClusterView = view if view is not None else ListingView(kube, settings.node_selector)
        self._started_generation: int | None = None  # remember_deployment()
        config = settings.decide
        if not config.two_plans:
            self.metrics.use_rungs((r.name for r in config.ladder if not r.queued), (r.name for r in config.ladder))

    def reconcile(self, now: float | None = None) -> list[d.Action]:
        """One pass: snapshot, decide, act. Returns what it did."""
        now = time.time() if now is None else now
        config = self.settings.decide
        snap = self.view.snapshot(config, now)
        actions = d.decide(config, snap)
        done: list[d.Action] = []
        for action in actions:  # each on its own: one rejected patch does not hold up the rest (the taint first)
            try:
                self._act(action, snap)
                done.append(action)
            except (KubeError, OSError) as err:
                self.metrics.add("tpu_fallback_action_errors_total")
                log.warning("%s failed, retried next pass: %s", type(action).__name__, err)
        actions = done
        for rung in config.ladder:
            if rung.queued:
                continue
            was_closed = any(snap.flavors[n].closed_since is not None for n in rung.flavors if n in snap.flavors)
            reopened = any(isinstance(a, d.ReopenPlanA) and a.rung == rung.name for a in actions)
            closed = any(isinstance(a, d.ClosePlanA) and a.rung == rung.name for a in actions) or (
                was_closed and not reopened)
            self._set_closed(rung, closed)
        self.metrics.set("tpu_fallback_last_reconcile_timestamp_seconds", now)
        self.metrics.add("tpu_fallback_reconcile_passes_total")
        return actions

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.reconcile()
                failed = False
            except Exception as err:  # the loop outlives any one failed pass; the next pass starts from the cluster
                failed = True
                self.metrics.add("tpu_fallback_reconcile_errors_total")
                if isinstance(err, NotSyncedError) or (
                        isinstance(err, KubeError) and (err.status == 429 or err.status >= 500)):
                    log.warning("reconcile skipped (%s); retrying in %ss", err, self.settings.poll_seconds)
                else:
                    log.exception("reconcile failed; retrying in %ss", self.settings.poll_seconds)
                # Passes that keep failing (an API the controller cannot read) must not keep plan A closed
                # past its cool-down: the reopen needs only the flavors.
                self._sweep_quietly()
            self.metrics.set("tpu_fallback_loop_heartbeat_timestamp_seconds", time.time())
            if failed:  # not sooner on a change: a view that cannot be read would fail (and log) on every change
                stop.wait(self.settings.poll_seconds)
            else:
                self.view.wait(stop, self.settings.poll_seconds)

    def sweep(self, now: float | None = None) -> list[str]:
        """Remove our taint from every flavor (of every rung not queued: plan A's) whose cool-down has passed,
        reading nothing but the flavors: the reopen that holds whatever else fails. Returns the flavors reopened."""
        now = time.time() if now is None else now
        config = self.settings.decide
        flavors = self._closable_flavors()
        reopened: list[str] = []
        for rung in config.ladder:
            expired = [f.name for f in flavors if f.name in rung.flavors
                       and d.cool_down_over(config, f.closed_since, now)]
            reopened += self._reopen(expired, d.cool_down_reason(config, rung), rung)
        return reopened

    def _sweep_quietly(self) -> None:
        try:
            self.sweep()
        except Exception as err:  # noqa: BLE001 -- the loop's last resort: logged, and tried again next time round
            log.warning("could not reopen expired closes either: %s", err)

    def _deployment(self) -> Mapping[str, Any] | None:
        """Our own Deployment as it is now (None when it is gone or when running outside one)."""
        if not self.settings.deployment:
            return None
        namespace, name = self.settings.deployment.split("/", 1)
        found = _get_if_found(self.kube, f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        return found if isinstance(found, Mapping) else None

    def remember_deployment(self) -> None:
        """At start: the generation of our Deployment's spec, so that the way out can tell a restart (the same
        spec: a drained node, an evicted pod) from a rollout (a new spec, whose pod may never start)."""
        deployment = self._deployment()
        self._started_generation = None if deployment is None else deployment["metadata"].get("generation")

    def release_unless_restarted(self) -> str | None:
        """On the way out (SIGTERM): unless the same Deployment spec will run a new pod (a restart, which carries a
        real close on), leave nothing behind: reopen plan A and queue again the Workloads this controller had
        deactivated. That is when the Deployment is being deleted, is gone or is scaled to zero (the fallback
        turned off or removed), or its spec changed since this pod started (a rollout: the new pod may never
        start; if plan A is still stocked out it closes it again on GKE's next no-capacity Event, within
        seconds). Returns why it released, or None when it kept everything."""
        if not self.settings.deployment:
            return None
        deployment = self._deployment()
        started = self._started_generation
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            why = "its Deployment was deleted"
        elif (deployment.get("spec") or {}).get("replicas") == 0:
            why = "its Deployment was scaled to zero"
        elif started is not None and deployment["metadata"].get("generation") != started:
            why = "its Deployment's spec changed (a rollout; the new controller closes plan A again on new evidence)"
        else:
            return None
        flavors = self._closable_flavors()
        for rung in self.settings.decide.ladder:
            closed = [f.name for f in flavors if f.name in rung.flavors and f.closed_since is not None]
            self._reopen(closed, f"the fallback controller is leaving ({why}): "
                                 f"{self.settings.decide.label(rung)} is offered again", rung)
        self._requeue_deactivated(why)
        return why

    def _requeue_deactivated(self, why: str) -> None:
        """Activate again every Workload this controller deactivated (an eviction or a move in progress): with no
        controller to finish the move, it would stay inactive, its job never run."""
        for obj in self.kube.list(f"{KUEUE}/workloads"):
            meta = obj["metadata"]
            ours = [a for a in (d.EVICTING_ANNOTATION, d.MOVING_ANNOTATION) if a in (meta.get("annotations") or {})]
            if not ours or (obj.get("spec") or {}).get("active", True) is not False:
                continue
            try:
                self.kube.merge_patch(self._workload_path(meta["namespace"], meta["name"]), {
                    "metadata": {"annotations": dict.fromkeys(ours), "resourceVersion": meta.get("resourceVersion")},
                    "spec": {"active": True}})
                log.info("requeued %s/%s on the way out (%s)", meta["namespace"], meta["name"], why)
            except KubeError as err:  # the others still get theirs
                log.warning("could not requeue %s/%s on the way out: %s", meta["namespace"], meta["name"], err)

    def _closable_flavors(self) -> list[d.Flavor]:
        """Every flavor the controller may have tainted (plan A's; on a ladder, every rung's but the queued)."""
        found = (_get_if_found(self.kube, f"{KUEUE}/resourceflavors/{n}")
                 for n in self.settings.decide.closable_flavors)
        return [read_flavor(obj, self.settings.decide.taint_key) for obj in found if obj is not None]

    def _rung(self, name: str) -> d.Rung:
        return next(r for r in self.settings.decide.ladder if r.name == name)

    def _set_closed(self, rung: d.Rung, closed: bool) -> None:
        if self.settings.decide.two_plans:
            self.metrics.set("tpu_fallback_plan_a_closed", 1 if closed else 0)
        else:
            self.metrics.set("tpu_fallback_rung_closed", 1 if closed else 0, rung=rung.name)

    def _count(self, plan_a: str, ladder: str, rung: str) -> None:
        """One more of a plan A counter on two plans, of its per-rung counter on a ladder."""
        if self.settings.decide.two_plans:
            self.metrics.add(plan_a)
        else:
            self.metrics.add(ladder, rung=rung)

    def _reason(self, plan_a: str, ladder: str) -> str:
        """An Event's reason: plan A's words on two plans (unchanged), the ladder's otherwise."""
        return plan_a if self.settings.decide.two_plans else ladder

    def _reopen(self, flavors: list[str], why: str, rung: d.Rung | None = None) -> list[str]:
        """Remove our taint from these flavors (Events, a log line, the reopen counted); returns them."""
        rung = rung or self.settings.decide.ladder[0]
        if flavors:
            for name in flavors:
                self.set_taint(name, None)
                self._event_on_flavor(name, self._reason("PlanAReopened", "RungReopened"), why)
            self._count("tpu_fallback_plan_a_reopens_total", "tpu_fallback_rung_reopens_total", rung.name)
            self._set_closed(rung, False)
            log.info("reopen %s (%s): %s", self.settings.decide.label(rung), ", ".join(flavors), why)
        return flavors

    def _act(self, action: d.Action, snap: d.Snapshot) -> None:
        config = self.settings.decide
        if isinstance(action, d.ClosePlanA):
            label = config.label(self._rung(action.rung))
            reason = self._reason("PlanAStockOut", "RungStockOut")
            for name in action.flavors:
                self.set_taint(name, str(int(action.since)))
                self._event_on_flavor(name, reason, action.why)
            if action.cause:
                ns, name = action.cause.split("/", 1)
                self._event_on_workload(ns, name, reason, action.why)
                self._count("tpu_fallback_plan_a_closes_total", "tpu_fallback_rung_closes_total", action.rung)
            log.info("close %s (%s): %s", label, ", ".join(action.flavors), action.why)
        elif isinstance(action, d.ReopenPlanA):
            self._reopen(list(action.flavors), action.why, self._rung(action.rung))
        elif isinstance(action, d.Evict):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.EVICTING_ANNOTATION: stamp}}, "spec": {"active": False}})
            self._event_on_workload(action.namespace, action.name, self._reason("EvictedFromPlanA", "EvictedFromRung"),
                                    action.why)
            self.metrics.add("tpu_fallback_evictions_total")
            log.info("evict from %s (deactivate): %s", config.label(self._rung(action.rung)), action.why)
        elif isinstance(action, d.Deactivate):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.MOVING_ANNOTATION: f"{stamp} to {action.target}"}},
                "spec": {"active": False}})
            self._event_on_workload(action.namespace, action.name, self._reason("MovingToPlanA", "MovingUp"),
                                    action.why)
            log.info("move to %s, step 1 (deactivate): %s", config.label(self._rung(action.rung)), action.why)
        elif isinstance(action, d.Reactivate):
            if action.after_eviction:  # the end of an eviction: queued for plan B
                self._patch_workload(snap, action.namespace, action.name, {
                    "metadata": {"annotations": {d.EVICTING_ANNOTATION: None}}, "spec": {"active": True}})
                log.info("evicted, requeued (reactivate): %s", action.why)
                return
            workload = next(w for w in snap.workloads if (w.namespace, w.name) == (action.namespace, action.name))
            moving = workload.annotations[d.MOVING_ANNOTATION]
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.MOVING_ANNOTATION: None, d.MOVED_ANNOTATION: moving or "yes"}},
                "spec": {"active": True}})
            self._event_on_workload(action.namespace, action.name, self._reason("MovedToPlanA", "MovedUp"), action.why)
            self._count("tpu_fallback_moves_to_plan_a_total", "tpu_fallback_moves_up_total", action.rung)
            log.info("move up, step 2 (reactivate): %s", action.why)

    def _patch_workload(self, snap: d.Snapshot, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch that holds only on the Workload as read (its resourceVersion): a Workload that changed
        since (its DWS capacity arrived, say) answers 409 and is decided again next pass, not acted on blind."""
        workload = next((w for w in snap.workloads if (w.namespace, w.name) == (namespace, name)), None)
        if workload is not None and workload.resource_version:
            patch = {**patch, "metadata": {**patch.get("metadata", {}),
                                           "resourceVersion": workload.resource_version}}
        self.kube.merge_patch(self._workload_path(namespace, name), patch)

    def set_taint(self, flavor: str, value: str | None, attempts: int = 5) -> None:
        """Our taint on a ResourceFlavor, or none, keeping every other taint. `spec.nodeTaints` is an atomic list
        (server-side apply would own it whole and drop an admin's taints), so: read, change ours, write back with
        the resourceVersion read; on a conflict (someone wrote in between) read again."""
        path = f"{KUEUE}/resourceflavors/{flavor}"
        key = self.settings.decide.taint_key
        for attempt in range(1, attempts + 1):
            obj = self.kube.get(path)
            spec = obj.setdefault("spec", {})
            others = [t for t in spec.get("nodeTaints") or [] if t.get("key") != key]
            taints = others if value is None else [*others, {"key": key, "value": value, "effect": "NoSchedule"}]
            if taints == (spec.get("nodeTaints") or []):
                return
            spec["nodeTaints"] = taints
            try:
                self.kube.replace(path, obj)
                return
            except KubeError as err:
                if err.status != 409 or attempt == attempts:
                    raise

    @staticmethod
    def _workload_path(namespace: str, name: str) -> str:
        return f"{KUEUE}/namespaces/{namespace}/workloads/{name}"

    def _event_on_workload(self, namespace: str, name: str, reason: str, message: str) -> None:
        self._event(namespace, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                                "namespace": namespace}, reason, message)

    def _event_on_flavor(self, name: str, reason: str, message: str) -> None:
        # Events of cluster-scoped objects live in "default", as kubectl describe looks for them.
        self._event("default", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "name": name},
                    reason, message)

    def _event(self, namespace: str, involved: dict[str, str], reason: str, message: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.kube.create(f"/api/v1/namespaces/{namespace}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message[:1024], "type": "Normal",
                "source": {"component": COMPONENT}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": COMPONENT, "reportingInstance": COMPONENT})
        except KubeError as err:  # an Event is a courtesy; the decision stands
            log.warning("could not record event %s on %s: %s", reason, involved["name"], err)
