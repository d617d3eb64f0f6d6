"""What the pods and GKE's autoscaler Events say about each rung and each Workload. Pure Python, standard library.

**Evidence is per rung, from the pods that would run on it.** A pod is evidence about a flavor (and so its rung)
only when its scheduling constraints target that flavor's pool and it requests TPUs: Kueue copies the admitted
flavor's `nodeLabels` into each PodSet's `nodeSelector` when it starts a job (Kueue v0.19.2,
pkg/controller/jobframework/reconciler.go getPodSetsInfoFromStatus -> podset.FromAssignment), so a TPU worker of a
job admitted to `on-demand` selects `cloud.google.com/gke-nodepool=on-demand-pool`. A Ray head, KubeRay's submitter
or any CPU pod requests no TPU and is never evidence about a TPU rung, whatever GKE says about it.

**GKE's words, read from GKE's source** (gke_reasons.py): a `FailedScaleUp` goes only to the pods whose scale-up
targeted the failed node group, so a no-capacity reason on a pod of the rung is evidence about that rung. A
`NotTriggerScaleUp` "... in backoff after failed scale-up" is never evidence on its own: the autoscaler backs a
node group off after every failed scale-up whatever its cause and lists every backed-off node group of the cluster
on every pending pod. It only corroborates a no-capacity `FailedScaleUp` seen on the same rung within the
autoscaler's longest back-off (a second job's pods on a stocked-out pool get only back-off messages). A
`TriggeredScaleUp` later than any failure on the pod is a scale-up under way: the stockoutAfter backstop waits.

**Which Workload a pod belongs to**, for every job kind Kueue admits, from what Kueue and the job controllers
write on pods (first match wins):
1. `kueue.x-k8s.io/prebuilt-workload-name`, annotation or label: names the Workload (Kueue v0.19.2 writes it as an
   annotation on LeaderWorkerSet pods, its WorkloadIdentifierAnnotations gate being on by default since 0.18:
   pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go, pkg/features/kube_features.go; users may
   label prebuilt Workloads' pods; Kueue's own readers take the annotation first, then the label);
2. `kueue.x-k8s.io/pod-group-name`, annotation or label: a plain Pod group's Workload has the group's name
   (pkg/controller/jobs/pod/pod_controller.go workloadName, GetPodGroupName);
3. the pod's own UID or its owners' UIDs among the Workloads' owners: a single plain Pod, a batch Job, a
   RayCluster, an MPIJob (each owns its pods and is its Workload's owner);
4. a RayCluster owned by a RayJob: the pod's RayCluster (owner, or label `ray.io/cluster`) and its owners
   (KubeRay ray-operator/controllers/ray/rayjob_controller.go constructRayClusterForRayJob);
5. label `jobset.sigs.k8s.io/jobset-name` (sigs.k8s.io/jobset v0.12.0 api/jobset/v1alpha2 JobSetNameKey, on every
   pod of a JobSet): the JobSet, or the TrainJob whose JobSet has its name (Kubeflow Trainer v2);
   label `batch.kubernetes.io/job-name`: the Job.
A TPU pod none of these attribute is still evidence about its rung (a close) but no job can be evicted for it: it
is counted (`unattributed`), and the controller logs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from tpu_fallback.fallback import gke_reasons as gke
from tpu_fallback.fallback.decide import FlavorEvidence
from tpu_fallback.model.quantity import parse_quantity

TPU_RESOURCE = "google.com/tpu"
SCALE_UP_FAILED, SCALE_UP_NOT_TRIGGERED, SCALE_UP_TRIGGERED = "FailedScaleUp", "NotTriggerScaleUp", "TriggeredScaleUp"
AUTOSCALER_REASONS = (SCALE_UP_FAILED, SCALE_UP_NOT_TRIGGERED, SCALE_UP_TRIGGERED)

PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
RAY_CLUSTER_LABEL = "ray.io/cluster"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

# A no-capacity FailedScaleUp stays evidence this long after it was last written: while a pod stays pending, the
# autoscaler tries its node group again each time the back-off ends (at most gke.BACKOFF_MAX later) and writes the
# failure again; one that is older says nothing about now. The slack covers the autoscaler's scan period.
FRESH_FOR = gke.BACKOFF_MAX + 60.0


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending and refused by the scheduler (PodScheduled False/Unschedulable). A scheduled pod never counts, nor
    one held by a scheduling gate (Kueue's `kueue.x-k8s.io/admission` before admission: PodScheduled False with
    reason SchedulingGated; the autoscaler ignores gated pods too)."""
    if (pod.get("status") or {}).get("phase") != "Pending" or (pod.get("spec") or {}).get("nodeName"):
        return False
    if (pod.get("spec") or {}).get("schedulingGates"):
        return False
    cond = condition(pod, "PodScheduled")
    return cond is not None and cond.get("status") == "False" and cond.get("reason") == "Unschedulable"


def tpu_request(pod: Mapping[str, Any]) -> Decimal:
    """The pod's google.com/tpu: its containers' requests (an extended resource's request defaults to its limit)."""
    total = Decimal(0)
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get(TPU_RESOURCE) or (resources.get("limits") or {}).get(
            TPU_RESOURCE)
        if amount is not None:
            total += parse_quantity(amount)
    return total


def _required_labels(pod: Mapping[str, Any]) -> list[dict[str, str]]:
    """The label sets the pod requires of its node: its nodeSelector, merged with each required node-affinity term's
    single-valued `In` expressions (the terms are ORed, so one set per term)."""
    spec = pod.get("spec") or {}
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    out = []
    for term in terms:
        required = dict(selector)
        for expr in term.get("matchExpressions") or []:
            values = expr.get("values") or []
            if expr.get("operator") == "In" and len(values) == 1:
                required[str(expr.get("key"))] = str(values[0])
        out.append(required)
    return out or [selector]


def targeted_flavor(pod: Mapping[str, Any], flavors: Mapping[str, Mapping[str, str]]) -> str | None:
    """The flavor whose pool the pod targets: every node label of the flavor is required by the pod (the most
    specific flavor when several match). None for a flavor without labels or a pod that targets none."""
    required = _required_labels(pod)
    matching = [(len(labels), name) for name, labels in flavors.items()
                if labels and any(all(r.get(k) == v for k, v in labels.items()) for r in required)]
    return max(matching)[1] if matching else None


@dataclass(frozen=True)
class Pod:
    """A TPU pod that targets a flavor, as evidence reads it."""

    namespace: str
    name: str
    uid: str
    flavor: str
    tpu: Decimal
    node: str | None
    unschedulable: bool
    workload: tuple[str, str] | None  # (namespace, Workload name), when attributed

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class WorkloadIndex:
    """Which Workload owns what: by its owners' UIDs, their (kind, namespace, name), and its own name."""

    def __init__(self, workloads: Iterable[Mapping[str, Any]]) -> None:
        self.by_uid: dict[str, tuple[str, str]] = {}
        self.by_owner: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.names: set[tuple[str, str]] = set()
        for obj in workloads:
            meta = obj["metadata"]
            key = (str(meta["namespace"]), str(meta["name"]))
            self.names.add(key)
            for owner in meta.get("ownerReferences") or []:
                if owner.get("uid"):
                    self.by_uid[str(owner["uid"])] = key
                self.by_owner[(str(owner.get("kind")), key[0], str(owner.get("name")))] = key


def attribute(pod: Mapping[str, Any], index: WorkloadIndex,
              ray_cluster_owners: Mapping[tuple[str, str], list[Mapping[str, Any]]]) -> tuple[str, str] | None:
    """The Workload a pod belongs to (the rules in the module's docstring), or None."""
    meta = pod["metadata"]
    namespace = str(meta["namespace"])
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for key in (PREBUILT_WORKLOAD_LABEL, POD_GROUP_LABEL):
        for named in (annotations.get(key), labels.get(key)):  # Kueue reads the annotation first
            if named and (namespace, named) in index.names:
                return (namespace, str(named))
    owners = list(meta.get("ownerReferences") or [])
    for uid in [meta.get("uid"), *(o.get("uid") for o in owners)]:
        if uid and str(uid) in index.by_uid:
            return index.by_uid[str(uid)]
    cluster = next((str(o.get("name")) for o in owners if o.get("kind") == "RayCluster"),
                   labels.get(RAY_CLUSTER_LABEL))
    candidates: list[tuple[str, str]] = []
    if cluster:
        candidates.append(("RayCluster", cluster))
        for owner in ray_cluster_owners.get((namespace, cluster), []):
            if owner.get("uid") and str(owner["uid"]) in index.by_uid:
                return index.by_uid[str(owner["uid"])]
            candidates.append((str(owner.get("kind")), str(owner.get("name"))))
    if labels.get(JOBSET_LABEL):
        candidates += [("JobSet", labels[JOBSET_LABEL]), ("TrainJob", labels[JOBSET_LABEL])]
    if labels.get(JOB_NAME_LABEL):
        candidates.append(("Job", labels[JOB_NAME_LABEL]))
    return next((index.by_owner[(kind, namespace, name)] for kind, name in candidates
                 if (kind, namespace, name) in index.by_owner), None)


def ray_cluster_owners(ray_clusters: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    return {(str(c["metadata"]["namespace"]), str(c["metadata"]["name"])): list(c["metadata"].get("ownerReferences")
                                                                                or [])
            for c in ray_clusters}


@dataclass(frozen=True)
class WorkloadEvidence:
    """What its TPU pods say: one of them is unschedulable; when GKE first said it has no capacity for one (a
    corroborated back-off included); the latest scale-up triggered for one and not failed since."""

    unschedulable: bool = False
    no_capacity_since: float | None = None
    scale_up_since: float | None = None
    said: str | None = None  # GKE's last words on its pods, for messages


@dataclass
class Memory:
    """What a pass remembers for the next: per flavor, the last time a no-capacity FailedScaleUp was seen on one of
    its pods (the pod may be gone since), so that a back-off message can be read against it."""

    no_capacity_seen: dict[str, float] = field(default_factory=dict)
    # The owners of the RayClusters seen, kept while pods of theirs exist: when Kueue suspends a RayJob, KubeRay
    # deletes its RayCluster before the cluster's pods are gone, and those pods would read as nobody's.
    ray_cluster_owners: dict[tuple[str, str], list[Mapping[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Evidence:
    pods: tuple[Pod, ...] = ()
    workloads: dict[tuple[str, str], WorkloadEvidence] = field(default_factory=dict)
    flavors: dict[str, FlavorEvidence] = field(default_factory=dict)
    tpu_in_use: dict[str, Decimal] = field(default_factory=dict)  # node name -> TPUs its pods request

    def of(self, namespace: str, name: str) -> WorkloadEvidence:
        return self.workloads.get((namespace, name), WorkloadEvidence())


def _nodes_added(message: str) -> int:
    """The nodes a TriggeredScaleUp adds (the sum over its node groups of new - current size); 1 when unread."""
    return max(1, sum(max(0, s.new - s.current) for s in gke.read_triggered(message)))


def _event_times(event: Mapping[str, Any]) -> tuple[float, float]:
    """(first, last) time of an Event; the autoscaler's core/v1 Events count repeats into lastTimestamp."""
    created = (event.get("metadata") or {}).get("creationTimestamp")
    first = parse_time(event.get("firstTimestamp") or event.get("eventTime") or created) or 0.0
    last = parse_time(event.get("lastTimestamp") or event.get("eventTime") or created) or first
    return first, max(first, last)


def read(*, now: float, pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]],
         workloads: Iterable[Mapping[str, Any]], ray_clusters: Iterable[Mapping[str, Any]],
         flavors: Mapping[str, Mapping[str, str]], reserved: Iterable[str] = (),
         memory: Memory | None = None) -> Evidence:
    """Evidence from one snapshot. `flavors`: flavor -> nodeLabels (those a TPU pod may target); `reserved`: the
    flavors whose pools consume a specific reservation (GKE's reservation errors are about them);
    `memory` is updated with this pass's no-capacity sightings."""
    memory = memory if memory is not None else Memory()
    reserved = set(reserved)
    index = WorkloadIndex(workloads)
    pods = list(pods)
    memory.ray_cluster_owners.update(ray_cluster_owners(ray_clusters))
    in_use_by_pods = {(str(p["metadata"]["namespace"]), str((p["metadata"].get("labels") or {}).get(RAY_CLUSTER_LABEL)))
                      for p in pods}
    memory.ray_cluster_owners = {k: v for k, v in memory.ray_cluster_owners.items() if k in in_use_by_pods}
    owners = memory.ray_cluster_owners
    read_pods: list[Pod] = []
    in_use: dict[str, Decimal] = {}
    for obj in pods:
        tpu = tpu_request(obj)
        phase = (obj.get("status") or {}).get("phase")
        node = (obj.get("spec") or {}).get("nodeName")
        if tpu <= 0 or phase in ("Succeeded", "Failed"):
            continue
        if node:
            in_use[str(node)] = in_use.get(str(node), Decimal(0)) + tpu
        flavor = targeted_flavor(obj, flavors)
        if flavor is None:
            continue
        meta = obj["metadata"]
        read_pods.append(Pod(str(meta["namespace"]), str(meta["name"]), str(meta.get("uid") or ""), flavor, tpu,
                             str(node) if node else None, unschedulable(obj), attribute(obj, index, owners)))
    pending = {(p.namespace, p.name): p for p in read_pods if p.unschedulable}

    # Per pending pod: GKE's words on it, in time order.
    failed_at: dict[tuple[str, str], float] = {}  # the last FailedScaleUp or NotTriggerScaleUp of any kind
    no_capacity: dict[tuple[str, str], tuple[float, str]] = {}  # the first fresh no-capacity one, and its words
    backoff_at: dict[tuple[str, str], float] = {}  # the last back-off message
    triggered_at: dict[tuple[str, str], float] = {}
    pool_trigger: dict[str, tuple[float, int]] = {}  # flavor -> its latest TriggeredScaleUp: (when, nodes added)
    pool_failed: dict[str, float] = {}  # flavor -> its latest FailedScaleUp
    said: dict[tuple[str, str], tuple[float, str]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        key = (str(involved.get("namespace", "")), str(involved.get("name", "")))
        pod = pending.get(key)
        if pod is None or involved.get("kind") != "Pod" or (involved.get("uid") and pod.uid
                                                            and involved.get("uid") != pod.uid):
            continue  # an Event of another pod, or of an earlier pod of the same name
        reason, message = str(event.get("reason", "")), str(event.get("message", ""))
        first, last = _event_times(event)
        if reason == SCALE_UP_FAILED:
            failed_at[key] = max(failed_at.get(key, 0.0), last)
            pool_failed[pod.flavor] = max(pool_failed.get(pod.flavor, 0.0), last)
            verdict = gke.read_failed_scale_up(message, reservation=pod.flavor in reserved).verdict
            if (verdict == gke.Verdict.NO_CAPACITY or (verdict == gke.Verdict.RESERVATION_NO_CAPACITY
                                                        and pod.flavor in reserved)) and now - last <= FRESH_FOR:
                if key not in no_capacity or first < no_capacity[key][0]:
                    no_capacity[key] = (first, message)
                memory.no_capacity_seen[pod.flavor] = max(memory.no_capacity_seen.get(pod.flavor, 0.0), last)
        elif reason == SCALE_UP_NOT_TRIGGERED:
            # Whatever its reasons, the pod is not waiting for a scale-up under way then: the autoscaler writes it
            # only for pods no upcoming node can take (kubernetes-sigs/cluster-autoscaler
            # pkg/processors/status/eventing_scale_up_processor.go).
            failed_at[key] = max(failed_at.get(key, 0.0), last)
            if gke.read_not_triggered(message).in_backoff > 0:
                backoff_at[key] = max(backoff_at.get(key, 0.0), last)
        elif reason == SCALE_UP_TRIGGERED:
            triggered_at[key] = max(triggered_at.get(key, 0.0), last)
            if pool_trigger.get(pod.flavor, (0.0, 0))[0] < last:
                pool_trigger[pod.flavor] = (last, _nodes_added(message))
        else:
            continue
        if key not in said or last >= said[key][0]:
            said[key] = (last, f"{reason}: {message}")

    # A back-off on a pod whose rung had a no-capacity FailedScaleUp shortly before: that stock-out, still.
    for key, at in backoff_at.items():
        seen = memory.no_capacity_seen.get(pending[key].flavor)
        if key not in no_capacity and seen is not None and 0 <= at - seen <= gke.BACKOFF_MAX and now - at <= FRESH_FOR:
            no_capacity[key] = (at, f"in back-off {at - seen:.0f}s after GKE reported no capacity on this rung")

    per_workload: dict[tuple[str, str], WorkloadEvidence] = {}
    for pod in read_pods:
        if pod.workload is None or not pod.unschedulable:
            continue
        key = (pod.namespace, pod.name)
        so_far = per_workload.get(pod.workload, WorkloadEvidence())
        since = no_capacity[key][0] if key in no_capacity else None
        trigger = triggered_at.get(key)
        scaling = trigger if trigger is not None and trigger > failed_at.get(key, 0.0) else None
        per_workload[pod.workload] = WorkloadEvidence(
            unschedulable=True,
            no_capacity_since=_earliest(so_far.no_capacity_since, since),
            scale_up_since=_latest(so_far.scale_up_since, scaling),
            said=said[key][1] if key in said else so_far.said)

    per_flavor: dict[str, FlavorEvidence] = {}
    for pod in sorted(pending.values(), key=lambda p: p.key):
        before = per_flavor.get(pod.flavor, FlavorEvidence())
        unattributed = before.unattributed + ((pod.key,) if pod.workload is None else ())
        found = no_capacity.get((pod.namespace, pod.name))
        if found is not None and (before.no_capacity_since is None or found[0] < before.no_capacity_since):
            workload = f"{pod.workload[0]}/{pod.workload[1]}" if pod.workload else None
            before = FlavorEvidence(pod.flavor, found[0], pod.key, workload, found[1], unattributed)
        growing = pool_trigger.get(pod.flavor)
        in_flight = growing if growing is not None and growing[0] > pool_failed.get(pod.flavor, 0.0) else None
        per_flavor[pod.flavor] = FlavorEvidence(pod.flavor, before.no_capacity_since, before.pod, before.workload,
                                                before.said, unattributed, in_flight)
    return Evidence(tuple(read_pods), per_workload, per_flavor, in_use)


def _earliest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)
