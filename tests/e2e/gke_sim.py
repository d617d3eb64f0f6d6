"""A simulated GKE for the end-to-end tests: node pools, cluster autoscaler, DWS queued provisioning, capacity.

The real control plane (tests/e2e/controlplane.py, `ControlPlane(gke=...)`) runs kube-scheduler, the KWOK
controller and the KubeRay operator next to Kueue. What GKE itself would do is played by this module, in the test
process, from the node pools the offline plan renders for a stack (`gcp:container/nodePool:NodePool` resources):

- **Node pools** (`pools_from_plan`): the nodes GKE would register, with GKE's labels
  (`cloud.google.com/gke-nodepool`, `node.kubernetes.io/instance-type`, `cloud.google.com/gke-tpu-accelerator`,
  `cloud.google.com/gke-tpu-topology`, `cloud.google.com/gke-queued` and `cloud.google.com/gke-flex-start` on
  plan B, the pool's `nodeConfig.labels`), GKE's taints (`google.com/tpu=present:NoSchedule` on TPU nodes,
  `cloud.google.com/gke-queued=true:NoSchedule` on queued pools) and the machine type's allocatable cpu, memory
  and `google.com/tpu` (vCPU, memory and chips from `tpu_fallback.model.catalog`, minus GKE's documented
  kubelet reservations). KWOK (annotation `kwok.x-k8s.io/node: fake`) makes them Ready and runs their pods.
- **Cluster autoscaler** (`GkeSim.step`): pods the scheduler marked Unschedulable that no existing or upcoming
  node can take make a matching, non-queued pool grow within `autoscaling.maxNodeCount` after `timings.scale_up`;
  a multi-host pool (one with `placementPolicy.tpuTopology` over several hosts) gets a whole slice at once.
  Nodes without running pods for `timings.scale_down_unneeded` go away (a multi-host slice only as a whole).
  Events on pods as GKE's autoscaler writes them: `TriggeredScaleUp`, `FailedScaleUp`, `NotTriggerScaleUp`.
- **DWS queued provisioning**: a ProvisioningRequest (autoscaling.x-k8s.io/v1) of class
  `queued-provisioning.gke.io` is Accepted at once; after `timings.dws_provision`, once a queued pool matching its
  PodTemplate has room and capacity, the slice's nodes appear in that pool and the request is Provisioned.
  Consuming pods are those with `autoscaling.x-k8s.io/consume-provisioning-request: <request>` (Kueue sets it
  through the admission check's podSetUpdates). Unconsumed for `timings.booking` (at least
  `TimeScale.min_real_wait` real seconds): BookingExpired.
  `spec.parameters.maxRunDurationSeconds` reached: CapacityRevoked (nodes and pods removed).
  `inject_condition` sets Failed, CapacityRevoked or BookingExpired by hand.
- **Capacity**: `set_capacity(pool, False)` is a stock-out (scale-ups of that pool fail after the delay, with
  `FailedScaleUp` on the pods and the pool in back-off for `timings.backoff`; ProvisioningRequests stay queued),
  `set_capacity(pool, True)` brings it back (one pool or several, each its own switch; a reservation pool, one
  with `reservationAffinity` SPECIFIC, has none: its VMs are held for it, within its size); `preempt(pool)` takes
  a pool's nodes away with their pods.
- **Spot preemption** (`preempt_spot(pool[, slices])`, Spot pools only: `nodeConfig.spot`, nodes labelled
  `cloud.google.com/gke-spot=true`): as GKE and the kubelet's graceful node shutdown do it, the node gets the
  kubelet's `Shutdown` Event and the not-ready taint, its pods turn Failed (reason `Terminated`, condition
  `DisruptionTarget`) at once, and after the 30 s grace period the node is gone. Their controllers (KubeRay)
  replace the pods; the autoscaler grows the pool again if it has capacity.
  `set_events(False[, pool])`: the autoscaler acts as before but its Events on pods are never written (a GKE whose
  autoscaler Events nobody sees); `suppressed_events` lists what it would have written.
- **Slow or broken pods**: `with_workers_ready_after(rayjob, seconds)` annotates a RayJob's workers so that, bound
  to a node, they stay Pending and not Ready (ContainerCreating, as while a large image is pulled) for that long,
  then run; `None`: never (ImagePullBackOff). Two stages of the sim's own next to KWOK's (`KWOK_STAGES`) do it.
- **Ray**: KubeRay polls each RayJob's Ray dashboard (`http://<head-svc>.<ns>.svc.cluster.local:8265`). The
  operator runs with `HTTP_PROXY` pointing at `RayDashboard`, a tiny HTTP server here that answers the job API:
  a Ray job is SUCCEEDED when its submitter Job completed (KWOK's `pod-complete` stage finishes the submitter pod
  after `timings.job_run`, or the pod's `pod-complete.stage.kwok.x-k8s.io/delay` annotation: see `with_run_time`).
- **Reading the cluster**: every `interval` (0.2 s) the loop reads nodes, pods and ProvisioningRequests from the
  cluster's informers (`cache`, tests/e2e/informer.py; the dashboard reads RayJobs and Jobs there too), not with
  LISTs. Its own node writes go into the store at once (`observe`, `forget`), so the next pass never counts a node
  it deleted or misses one it created (which would grow a pool twice for the same pods). The scale-down's "was a
  pod bound meanwhile" check stays a LIST: it must see the latest.

Time: every delay above is in simulated seconds and multiplied by `TimeScale.real_per_sim` (0.01: a simulated
minute takes 0.6 s). The controllers themselves run in real time (KubeRay requeues a RayJob every 3 s, for one),
so a simulated duration measured on the wall clock is an upper bound.

What it cannot model: real ICI (a slice here is just nodes with the same annotation `tpu-fallback.sim/slice`),
real DWS timing and its queueing policy, GCE stock-outs as they really happen, node auto-provisioning, the TPU
webhook of GKE's Ray add-on, kubelet behaviour (no images, no probes, no containers) and Ray itself.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import http.server
import itertools
import json
import math
import re
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.informer import ClusterCache, Informer
from tests.e2e.kube import KubeClient, KubeError
from tpu_fallback.model import catalog
from tpu_fallback.model.capacity import EVICTION_THRESHOLD, gke_reserved_cpu, gke_reserved_memory
from tpu_fallback.model.quantity import parse_quantity
from tpu_fallback.offline.mockrun import ProgramRun

NODE_POOL_TYPE = "gcp:container/nodePool:NodePool"
PROVREQ_API = "autoscaling.x-k8s.io/v1"
QUEUED_CLASS = "queued-provisioning.gke.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # value "fake": KWOK manages the node and its pods
KWOK_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"  # per-pod override of the run time (a Go duration)
SLICE_ANNOTATION = "tpu-fallback.sim/slice"  # nodes of one slice (the sim's stand-in for ICI)
REQUEST_ANNOTATION = "tpu-fallback.sim/provisioning-request"  # namespace/name of the request that made the node
POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_RESOURCE = "google.com/tpu"
TPU_TAINT = {"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
QUEUED_LABEL = "cloud.google.com/gke-queued"
QUEUED_TAINT = {"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}
SPOT_LABEL = "cloud.google.com/gke-spot"
# A Spot VM's preemption as GKE and the kubelet play it (GKE, "Spot VMs", termination and graceful shutdown:
# https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms; "Preemptible VMs":
# https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms): Compute Engine sends a preemption notice,
# then ACPI G2 Soft Off; the kubelet's graceful node shutdown gives pods 30 s by default (15 s for ordinary pods, 15 s
# for critical system pods) and marks each terminated pod phase Failed, reason Terminated; then the VM is gone. The
# kubelet's words (kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go): Event "Shutdown" on the Node,
# "Shutdown manager detected shutdown event"; the pods' message "Pod was terminated in response to imminent node
# shutdown." with condition DisruptionTarget (reason TerminationByKubelet); the node Ready False "node is shutting
# down", on which kube-controller-manager's node lifecycle taints it node.kubernetes.io/not-ready. The sim writes
# that taint itself: KWOK's node-initialize stage turns a node that is not Ready back to Ready at once.
SHUTDOWN_GRACE = 30.0  # simulated seconds from the notice to the VM gone (shutdownGracePeriod)
NODE_SHUTDOWN = ("Shutdown", "Shutdown manager detected shutdown event")
POD_SHUTDOWN = ("Terminated", "Pod was terminated in response to imminent node shutdown.")
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"  # cluster-autoscaler's taint on nodes it is removing
NOT_READY_TAINT = "node.kubernetes.io/not-ready"  # on every new node until the node lifecycle controller sees Ready
PODS_PER_NODE = 110  # GKE's default maximum pods per node
COMPONENT = "cluster-autoscaler"
ALL_POOLS = "*"  # GkeSim.set_events for every pool

# Condition reasons and messages as GKE's queued provisioning sets them.
ACCEPTED = ("SuccessfullyQueued", "Provisioning Request was successfully queued.")
NOT_PROVISIONED = ("NotProvisioned", "Provisioning Request wasn't provisioned.")
PROVISIONED = ("Provisioned", "Provisioning Request was successfully provisioned.")
BOOKING_EXPIRED = ("BookingExpired", "Capacity booking for the Provisioning Request has expired and the nodes are "
                   "now candidates for scale down when underutilized.")
CAPACITY_REVOKED = ("CapacityRevoked", "Capacity provisioned for the Provisioning Request was reclaimed and is no "
                    "longer available in the cluster.")
FAILED = ("Failed", "Provisioning Request has failed.")
INJECTABLE = {"Failed": FAILED, "CapacityRevoked": CAPACITY_REVOKED, "BookingExpired": BOOKING_EXPIRED}

# CPU machine families: GiB of memory per vCPU (Compute Engine's standard/highmem/highcpu shapes).
_CPU_MACHINE = re.compile(r"^(?P<family>[a-z][a-z0-9]*)-(?P<shape>standard|highmem|highcpu)-(?P<vcpus>\d+)$")
_GIB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}
GIB = 2**30


# --- time ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeScale:
    """Simulated seconds to real seconds: real = simulated * real_per_sim.

    Waits that exist for the controllers' sake (a provisioned request's booking, nodes added by hand waiting for
    their pods) are never shorter than `min_real_wait` real seconds: Kueue, KubeRay and the scheduler run in real
    time, and on a loaded machine KubeRay alone can take over 10 s to create a RayCluster's pods. Scaled down to
    6 s, GKE's 10-minute booking would expire before the pods exist, which on GKE it never would.
    """

    real_per_sim: float = 0.01
    min_real_wait: float = 30.0

    def real(self, sim_seconds: float) -> float:
        return sim_seconds * self.real_per_sim

    def patience(self, sim_seconds: float) -> float:
        """A wait for the controllers, in real seconds (at least min_real_wait)."""
        return max(self.real(sim_seconds), self.min_real_wait)

    def sim(self, real_seconds: float) -> float:
        return real_seconds / self.real_per_sim


@dataclass(frozen=True)
class Timings:
    """Delays of the simulated GKE, in simulated seconds (GKE-like defaults; scenarios shorten some)."""

    scale_up: float = 180.0  # a TPU slice's VMs created and registered
    cpu_scale_up: float = 60.0  # a CPU node
    dws_provision: float = 300.0  # from Accepted to the slice's nodes (DWS found capacity at once)
    job_run: float = 600.0  # the Ray job: the submitter pod runs this long (KWOK stage)
    scale_down_unneeded: float = 600.0  # cluster-autoscaler's --scale-down-unneeded-time (10 min)
    booking: float = 600.0  # a provisioned request's nodes wait this long for its pods (10 min)
    backoff: float = 300.0  # a node pool's back-off after a failed scale-up (cluster-autoscaler: 5 min at first)


# --- machines and pools ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    memory_gib: int
    tpu_chips: int = 0

    def capacity(self) -> dict[str, Decimal]:
        out = {"cpu": Decimal(self.vcpus), "memory": Decimal(self.memory_gib * GIB), "pods": Decimal(PODS_PER_NODE)}
        if self.tpu_chips:
            out[TPU_RESOURCE] = Decimal(self.tpu_chips)
        return out

    def allocatable(self) -> dict[str, Decimal]:
        """Capacity minus GKE's reservations (GKE "Plan node sizes": kubelet/system CPU and memory, and the
        100 MiB eviction threshold; the table lives in tpu_fallback/model/capacity.py)."""
        out = self.capacity()
        out["cpu"] -= gke_reserved_cpu(self.vcpus)
        out["memory"] -= gke_reserved_memory(self.memory_gib) + EVICTION_THRESHOLD
        return out


def machine(name: str) -> Machine:
    """A machine type: TPU ones from the project's catalog, CPU ones (n2-standard-16, ...) from their name."""
    for fam in catalog.FAMILIES.values():
        found = fam.machine_type(name)
        if found is not None:
            return Machine(found.name, found.vcpus, found.memory_gib, found.chips_per_vm)
    match = _CPU_MACHINE.match(name)
    if match is None:
        raise ValueError(f"unknown machine type {name!r}: not in tpu_fallback.model.catalog, not <family>-"
                         "standard|highmem|highcpu-<vCPUs>")
    vcpus = int(match["vcpus"])
    return Machine(name, vcpus, vcpus * _GIB_PER_VCPU[match["shape"]])


def _tpu_family_of(machine_type: str) -> catalog.TpuFamily | None:
    return next((f for f in catalog.FAMILIES.values() if f.machine_type(machine_type) is not None), None)


@dataclass(frozen=True)
class NodePool:
    """One GKE node pool, as the offline plan renders it."""

    name: str
    cluster: str
    zone: str
    machine: Machine
    config_labels: Mapping[str, str]
    config_taints: tuple[Mapping[str, str], ...] = ()
    fixed_nodes: int | None = None  # nodeCount of a pool without autoscaling (the system pool)
    max_nodes: int = 0
    topology: str | None = None
    hosts_per_slice: int = 1  # nodes GKE adds or removes at once
    queued: bool = False
    flex_start: bool = False
    spot: bool = False  # Spot VMs (nodeConfig.spot): preemptible, `preempt_spot`
    reservation: str | None = None  # the specific reservation its VMs consume (nodeConfig.reservationAffinity)

    @property
    def autoscaled(self) -> bool:
        return self.fixed_nodes is None

    @property
    def tpu(self) -> bool:
        return self.machine.tpu_chips > 0

    @property
    def plan(self) -> str:
        return self.config_labels.get("tpu-fallback/plan", "system" if not self.tpu else "")

    def node_labels(self) -> dict[str, str]:
        region = self.zone.rsplit("-", 1)[0]
        labels = {
            POOL_LABEL: self.name,
            "cloud.google.com/machine-family": self.machine.name.split("-", 1)[0],
            "node.kubernetes.io/instance-type": self.machine.name,
            "topology.kubernetes.io/zone": self.zone,
            "topology.kubernetes.io/region": region,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        fam = _tpu_family_of(self.machine.name)
        if fam is not None:
            labels["cloud.google.com/gke-tpu-accelerator"] = fam.accelerator_label
            if self.topology:
                labels["cloud.google.com/gke-tpu-topology"] = self.topology
        if self.queued:
            labels[QUEUED_LABEL] = "true"
        if self.flex_start:
            labels["cloud.google.com/gke-flex-start"] = "true"
        if self.spot:
            # GKE labels Spot VM nodes (https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms: "GKE
            # automatically adds the cloud.google.com/gke-spot=true label"); the taint is the pool's own config.
            labels[SPOT_LABEL] = "true"
        labels.update(self.config_labels)
        return labels

    def node_taints(self) -> list[dict[str, str]]:
        taints: list[dict[str, str]] = []
        if self.tpu:
            taints.append(dict(TPU_TAINT))
        if self.queued:
            taints.append(dict(QUEUED_TAINT))
        taints.extend(dict(t) for t in self.config_taints)
        return taints


_TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


def pools_from_plan(run: ProgramRun) -> list[NodePool]:
    """The node pools of a stack's offline plan (`gcp:container/nodePool:NodePool` resources), in plan order."""
    pools: list[NodePool] = []
    for res in run.of_type(NODE_POOL_TYPE):
        spec = res.inputs
        config = spec.get("nodeConfig") or {}
        mach = machine(config["machineType"])
        autoscaling = spec.get("autoscaling") or None
        placement = spec.get("placementPolicy") or {}
        topology = placement.get("tpuTopology")
        hosts = 1
        fam = _tpu_family_of(mach.name)
        found = fam.machine_type(mach.name) if fam is not None else None
        if not topology and found is not None and found.single_host_topologies:
            # A single-host pool has no placementPolicy, yet GKE labels its nodes with the machine type's
            # topology too (ct6e-standard-4t: cloud.google.com/gke-tpu-topology=2x2).
            topology = found.single_host_topologies[0]
        if topology and fam is not None:
            chips = math.prod(int(d) for d in topology.split("x"))
            hosts = max(1, chips // mach.tpu_chips)
        taints = tuple({"key": t["key"], "value": t.get("value", ""), "effect": _TAINT_EFFECTS.get(t["effect"],
                                                                                                    t["effect"])}
                       for t in config.get("taints") or [])
        pools.append(NodePool(
            name=spec["name"],
            cluster=str(spec.get("cluster") or "cluster"),
            zone=str(spec.get("location") or "us-east5-b"),
            machine=mach,
            config_labels=dict(config.get("labels") or {}),
            config_taints=taints,
            fixed_nodes=None if autoscaling else int(spec.get("nodeCount") or spec.get("initialNodeCount") or 1),
            max_nodes=int(autoscaling.get("maxNodeCount") or 0) if autoscaling else 0,
            topology=topology,
            hosts_per_slice=hosts,
            queued=bool((spec.get("queuedProvisioning") or {}).get("enabled")),
            flex_start=bool(config.get("flexStart")),
            spot=bool(config.get("spot")),
            reservation=_specific_reservation(config.get("reservationAffinity") or {}),
        ))
    if not pools:
        raise ValueError(f"the plan of {run.project}/{run.stack} has no {NODE_POOL_TYPE}")
    return pools


def _specific_reservation(affinity: Mapping[str, Any]) -> str | None:
    """The reservation a pool consumes with reservation_affinity SPECIFIC_RESERVATION (its `values`), or None."""
    if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
        return None
    values = affinity.get("values") or []
    return str(values[0]) if values else None


# --- pods, nodes and matching ----------------------------------------------------------------------------------

Resources = dict[str, Decimal]


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler counts for a pod: the sum of its containers' requests (limits where a request is
    missing), at least each init container's, plus one pod."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> Resources:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_quantity(v) for k, v in merged.items()}

    total: Resources = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    total["pods"] = Decimal(1)
    return total


def fits(request: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> bool:
    return all(v <= free.get(k, Decimal(0)) for k, v in request.items() if v > 0)


def subtract(free: Resources, request: Mapping[str, Decimal]) -> None:
    for k, v in request.items():
        free[k] = free.get(k, Decimal(0)) - v


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, want = int(labels[key]), int(values[0])
        return have > want if op == "Gt" else have < want
    raise ValueError(f"unknown node selector operator {op!r}")


def selector_matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """nodeSelector and required node affinity against a node's labels."""
    spec = pod.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        return any(all(_expression_matches(e, labels) for e in term.get("matchExpressions") or []) for term in terms)
    return True


def untolerated(pod: Mapping[str, Any], taints: Iterable[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """The NoSchedule/NoExecute taints the pod does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []

    def tolerated(taint: Mapping[str, str]) -> bool:
        for tol in tolerations:
            if tol.get("effect") and tol["effect"] != taint["effect"]:
                continue
            if tol.get("operator") == "Exists":
                if not tol.get("key") or tol["key"] == taint["key"]:
                    return True
            elif tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
                return True
        return False

    return [t for t in taints if t["effect"] in ("NoSchedule", "NoExecute") and not tolerated(t)]


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending, not bound, and the scheduler said Unschedulable (what cluster-autoscaler acts on)."""
    if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- the simulation --------------------------------------------------------------------------------------------


@dataclass
class _Upcoming:
    """Nodes a scale-up will register: free resources per node, for bin-packing the pending pods."""

    pool: NodePool
    count: int
    ready_at: float
    started_at: float
    free: list[Resources]
    pods: list[Mapping[str, Any]] = field(default_factory=list)  # the pods that triggered it (for events)


@dataclass
class _Request:
    """What the sim knows of one ProvisioningRequest."""

    key: str  # namespace/name
    uid: str
    accepted_at: float
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)  # type -> condition
    provisioned_at: float | None = None
    nodes: list[str] = field(default_factory=list)
    pool: str | None = None
    consumed: bool = False
    max_run: float | None = None  # simulated seconds (spec.parameters.maxRunDurationSeconds)
    done: bool = False  # nothing more will happen to it


@dataclass
class SimEvent:
    """What the sim did, with the real time since the start, for reports."""

    at: float
    what: str


@dataclass(frozen=True)
class SuppressedEvent:
    """An autoscaler Event the sim did not write (`GkeSim.set_events`): real seconds since the start, reason, pod."""

    at: float
    reason: str
    pod: str  # namespace/name
    message: str


class GkeSim:
    """The simulated GKE of one cluster. `start(server, ca_file, token)` runs it in a thread; `stop()` ends it.

    Use `simulated_gke()` (below) to get a control plane and a running sim together.
    """

    def __init__(
        self,
        pools: Sequence[NodePool],
        *,
        scale: TimeScale = TimeScale(),
        timings: Timings = Timings(),
        interval: float = 0.2,
    ) -> None:
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node pool names: {names}")
        self.pools: dict[str, NodePool] = {p.name: p for p in pools}
        self.scale = scale
        self.timings = timings
        self.interval = interval
        self.capacity: dict[str, bool] = {p.name: True for p in pools}
        # Per pool: simulated seconds a scale-up takes instead of timings.scale_up / cpu_scale_up.
        self.scale_up_delays: dict[str, float] = {}
        # Pools whose autoscaler Events nobody sees (ALL_POOLS: every pool), and the Events not written for them.
        self.unseen_events: set[str] = set()
        self.suppressed_events: list[SuppressedEvent] = []
        self.log: list[SimEvent] = []
        self.errors: list[str] = []
        self._lapsed: set[str] = set()  # nodes whose heartbeat lapsed (reported once each)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: KubeClient | None = None
        self._cache: ClusterCache | None = None
        self._t0 = time.monotonic()
        self._upcoming: list[_Upcoming] = []
        self._backoff_until: dict[str, float] = {}
        self._idle_since: dict[str, float] = {}
        self._held: dict[str, float] = {}  # node -> real time until which a scale-down leaves it (add_nodes)
        self._shutdowns: dict[str, float] = {}  # preempted Spot node -> real time its VM is gone (preempt_spot)
        self._requests: dict[str, _Request] = {}
        self._events_sent: set[tuple[str, str, str]] = set()
        self._names = itertools.count(1)
        self._slices = itertools.count(1)
        self.dashboard = RayDashboard()

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def gke_options(self) -> dict[str, Any]:
        """What `ControlPlane(gke=...)` needs from the sim: KWOK's stages and the Ray dashboard proxy."""
        return {"kwok_stages": kwok_stages(self.scale.real(self.timings.job_run)),
                "ray_dashboard_proxy": self.dashboard.url}

    def start(self, server: str, ca_file: Path, token: str) -> None:
        """Register the fixed pools' nodes (the system pool), then run the autoscaler loop in a thread."""
        self._client = KubeClient(server, ca_file, token)
        self._cache = ClusterCache(self._client)
        self.dashboard.connect(self._cache)
        self._t0 = time.monotonic()
        with self._lock:
            for pool in self.pools.values():
                if pool.fixed_nodes:
                    self._create_nodes(pool, pool.fixed_nodes, reason="fixed-size pool")
        self._thread = threading.Thread(target=self._run, name="gke-sim", daemon=True)
        self._thread.start()

    def reconfigure(self, pools: Sequence[NodePool]) -> None:
        """Another stack on the same cluster: every node goes (with its pods), all state is forgotten (capacity,
        back-offs, requests, delays, log, errors), the new pools' fixed nodes come up and the clock restarts."""
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node pool names: {names}")
        with self._lock:
            self._delete_nodes([n["metadata"]["name"] for n in self._nodes()], reason="reconfigure")
            self.pools = {p.name: p for p in pools}
            self.capacity = {p.name: True for p in pools}
            self.scale_up_delays.clear()
            self.unseen_events.clear()
            self.suppressed_events.clear()
            self._upcoming.clear()
            self._backoff_until.clear()
            self._idle_since.clear()
            self._held.clear()
            self._shutdowns.clear()
            self._requests.clear()
            self._events_sent.clear()
            self.log.clear()
            self.errors.clear()
            self._lapsed.clear()
            self._t0 = time.monotonic()
            for pool in self.pools.values():
                if pool.fixed_nodes:
                    self._create_nodes(pool, pool.fixed_nodes, reason="fixed-size pool")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._cache is not None:
            self._cache.stop()

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            raise RuntimeError("the sim is not started")
        return self._client

    @property
    def cache(self) -> ClusterCache:
        """The cluster's informers (tests/e2e/informer.py), which the sim reads and the scenarios' watches share."""
        if self._cache is None:
            raise RuntimeError("the sim is not started")
        return self._cache

    def _informer(self, api_version: str, kind: str) -> Informer:
        return self.cache.informer(api_version, kind)

    def elapsed(self) -> float:
        """Real seconds since start."""
        return time.monotonic() - self._t0

    def _note(self, what: str) -> None:
        self.log.append(SimEvent(self.elapsed(), what))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self._lock:
                    self.step()
            except KubeError as err:
                if self._stop.is_set():
                    return
                self.errors.append(f"{self.elapsed():.1f}s: {err}")
            except Exception:  # noqa: BLE001 - a bug in the sim: keep it for check()
                self.errors.append(f"{self.elapsed():.1f}s: {traceback.format_exc()}")

    def check(self) -> None:
        """Raise if the sim's loop hit an error (call it at the end of a scenario)."""
        if self.errors:
            raise AssertionError("the simulated GKE hit errors:\n" + "\n".join(self.errors[-10:]))

    # --- switches (any thread) ---------------------------------------------------------------------------------

    def set_capacity(self, pool: str | Iterable[str], available: bool) -> None:
        """A stock-out (False) or capacity back (True) for one pool or several, each on its own switch; a return
        also ends its back-off. A reservation pool has no switch: its VMs are held for it (ValueError)."""
        names = [pool] if isinstance(pool, str) else list(pool)
        with self._lock:
            for name in names:
                found = self._pool(name)
                if found.reservation is not None:
                    raise ValueError(f"node pool {name!r} consumes reservation {found.reservation!r}: its capacity "
                                     "is held for it, it does not stock out (fill it with jobs instead)")
            for name in names:
                self.capacity[name] = available
                if available:
                    self._backoff_until.pop(name, None)
                self._note(f"capacity of {name}: {'available' if available else 'stock-out'}")

    def set_events(self, seen: bool, pool: str | None = None) -> None:
        """Whether the autoscaler's Events on pods (TriggeredScaleUp, FailedScaleUp, NotTriggerScaleUp) are written
        for one pool, or for every pool (None): False is a GKE whose autoscaler Events are never seen (lost,
        filtered, or a cluster where nothing reads them). The autoscaler itself acts as before; what it would have
        written is kept in `suppressed_events`."""
        with self._lock:
            name = ALL_POOLS if pool is None else pool
            if pool is not None:
                self._pool(pool)  # a known pool
            if seen:
                self.unseen_events.discard(name)
            else:
                self.unseen_events.add(name)
            self._note(f"autoscaler Events of {'every pool' if pool is None else pool}: "
                       f"{'written' if seen else 'not seen'}")

    def preempt(self, pool: str) -> list[str]:
        """GCE takes the pool's nodes away (preemption, maintenance): pods on them are deleted, then the nodes."""
        with self._lock:
            self._pool(pool)
            names = [n["metadata"]["name"] for n in self._nodes() if _node_pool(n) == pool]
            self._delete_nodes(names, reason="preempted")
            return names

    def preempt_spot(self, pool: str, count: int | None = None) -> list[str]:
        """Compute Engine reclaims Spot VMs of a Spot pool (all of them, or the first `count` slices' nodes), as
        GKE does it (SHUTDOWN_GRACE and the words above): at once the kubelet's "Shutdown" Event on each node, the
        not-ready taint, and every pod bound there Failed (Terminated, DisruptionTarget) so its controller replaces
        it; after the grace period the VMs are gone: the nodes are deleted with what is left on them. A
        multi-host slice is reclaimed whole (GKE recreates an interrupted slice as a unit). Returns the nodes."""
        with self._lock:
            p = self._pool(pool)
            if not p.spot:
                raise ValueError(f"node pool {pool!r} is not a Spot pool: only Spot VMs are preempted "
                                 "(use preempt() for a pool's nodes lost otherwise)")
            by_slice: dict[str, list[str]] = {}
            for n in self._nodes():
                if _node_pool(n) == pool and n["metadata"]["name"] not in self._shutdowns:
                    slice_id = (n["metadata"].get("annotations") or {}).get(SLICE_ANNOTATION, n["metadata"]["name"])
                    by_slice.setdefault(slice_id, []).append(n["metadata"]["name"])
            names = [n for ids in list(by_slice.values())[:count] for n in ids]
            due = self.elapsed() + self.scale.real(SHUTDOWN_GRACE)
            for name in names:
                self._shutdowns[name] = due
                self._node_event(name, *NODE_SHUTDOWN)
            self._taint(names, {"key": NOT_READY_TAINT, "effect": "NoSchedule"})
            for pod in self.client.list("v1", "Pod"):
                if (pod.get("spec") or {}).get("nodeName") in set(names) and not is_terminal(pod):
                    self._terminate_for_shutdown(pod)
            self._note(f"Spot VMs of {pool} preempted: {', '.join(sorted(names))}")
            return names

    def _terminate_for_shutdown(self, pod: Mapping[str, Any]) -> None:
        """The kubelet's graceful shutdown of one pod: phase Failed, reason Terminated, DisruptionTarget True."""
        stamp = _now_rfc3339()
        meta = pod["metadata"]
        status = {"phase": "Failed", "reason": POD_SHUTDOWN[0], "message": POD_SHUTDOWN[1], "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
             "message": POD_SHUTDOWN[1], "lastTransitionTime": stamp},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp}]}
        with contextlib.suppress(KubeError):  # gone meanwhile
            self.client.request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                                {"status": status}, content_type="application/merge-patch+json")

    def _node_event(self, node: str, reason: str, message: str) -> None:
        """An Event on a Node from the kubelet (Events of cluster-scoped objects live in "default")."""
        stamp = _now_rfc3339()
        with contextlib.suppress(KubeError):
            self.client.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{node}.", "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
                "reason": reason, "message": message, "type": "Normal", "count": 1,
                "source": {"component": "kubelet", "host": node}, "reportingComponent": "kubelet",
                "firstTimestamp": stamp, "lastTimestamp": stamp})

    def _finish_shutdowns(self, now: float) -> None:
        """Preempted Spot VMs whose grace period is over: gone (the cloud node lifecycle controller deletes a Node
        whose VM no longer exists; the pod garbage collector the pods bound to it)."""
        due = [n for n, at in self._shutdowns.items() if at <= now]
        for name in due:
            del self._shutdowns[name]
        self._delete_nodes(due, reason="Spot VM preempted")

    def add_nodes(self, pool: str, count: int | None = None) -> list[str]:
        """Resize a pool by hand, now (`gcloud container clusters resize`): a whole slice by default. The nodes are
        kept until a pod lands on them or the idle time (at least TimeScale.min_real_wait) has passed."""
        with self._lock:
            p = self._pool(pool)
            names = self._create_nodes(p, count or p.hosts_per_slice, reason="manual resize")
            until = self.elapsed() + self.scale.patience(self.timings.scale_down_unneeded)
            self._held.update((n, until) for n in names)
            return names

    def inject_condition(self, request: str, condition: str, message: str | None = None) -> None:
        """Set Failed, CapacityRevoked or BookingExpired on a ProvisioningRequest (namespace/name) as GKE would;
        CapacityRevoked also removes the request's nodes and their pods."""
        if condition not in INJECTABLE:
            raise ValueError(f"condition {condition!r} cannot be injected; use one of {', '.join(INJECTABLE)}")
        with self._lock:
            req = self._requests.get(request)
            if req is None:
                raise KeyError(f"no ProvisioningRequest {request} seen yet (known: {', '.join(self._requests)})")
            reason, default = INJECTABLE[condition]
            self._set_condition(req, condition, "True", reason, message or default)
            if condition == "CapacityRevoked":
                self._delete_nodes(req.nodes, reason=f"capacity of {request} revoked")
                req.done = True
            elif condition == "Failed":
                req.done = True
            self._write_request_status(req)

    def requests(self) -> dict[str, dict[str, dict[str, str]]]:
        """ProvisioningRequest namespace/name -> condition type -> condition, as the sim set them."""
        with self._lock:
            return {k: copy.deepcopy(r.conditions) for k, r in self._requests.items()}

    def _pool(self, name: str) -> NodePool:
        try:
            return self.pools[name]
        except KeyError:
            raise KeyError(f"no node pool {name!r}; pools: {', '.join(self.pools)}") from None

    # --- one pass -----------------------------------------------------------------------------------------------

    def step(self) -> None:
        """One pass of the autoscaler and of DWS: finish due scale-ups, handle requests, scale up, scale down."""
        now = self.elapsed()
        self._finish_upcoming(now)
        self._finish_shutdowns(now)
        nodes = self._nodes()
        self._check_heartbeats(now, nodes)
        pods = self._informer("v1", "Pod").items()
        self._provisioning(now, nodes, pods)
        self._scale_up(now, nodes, pods)
        self._scale_down(now, nodes, pods)

    def _check_heartbeats(self, now: float, nodes: Sequence[Mapping[str, Any]]) -> None:
        """A node whose heartbeat lapsed is a broken box, not GKE: kube-controller-manager's node lifecycle marks it
        Unknown (reason NodeStatusUnknown) and its pods Ready=False, which KWOK's stages never undo, so a RayCluster
        on it never turns Ready again. KWOK keeps the nodes alive by renewing their Leases
        (--node-lease-duration-seconds); record it once per node if that ever stops."""
        for node in nodes:
            name = node["metadata"]["name"]
            ready = next((c for c in (node.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"),
                         None)
            if ready and ready.get("reason") == "NodeStatusUnknown" and name not in self._lapsed:
                self._lapsed.add(name)
                self.errors.append(f"{now:.1f}s: node {name}'s heartbeat lapsed ({ready.get('message')}): "
                                   "KWOK is not renewing its Lease in kube-node-lease")

    def _nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._informer("v1", "Node").items()
                if (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"]

    def _finish_upcoming(self, now: float) -> None:
        due = [u for u in self._upcoming if u.ready_at <= now]
        self._upcoming = [u for u in self._upcoming if u.ready_at > now]
        for up in due:
            if not self.capacity[up.pool.name] and up.pool.reservation is None:
                self._backoff_until[up.pool.name] = now + self.scale.real(self.timings.backoff)
                zone = up.pool.zone
                self._note(f"scale-up of {up.pool.name} by {up.count} failed: stock-out")
                for pod in up.pods:
                    self._event(pod, "FailedScaleUp", "Warning", [up.pool.name],
                                f"Node scale up in zones {zone} associated with this pod failed: GCE out of "
                                "resources. Pod is at risk of not being scheduled.")
                continue
            self._create_nodes(up.pool, up.count, reason="scale-up")

    # --- nodes --------------------------------------------------------------------------------------------------

    def _node_name(self, pool: NodePool) -> str:
        digest = hashlib.sha1(f"{pool.cluster}/{pool.name}".encode()).hexdigest()[:8]
        name = f"gke-{pool.cluster[:15]}-{pool.name[:20]}-{digest}-{next(self._names):04d}"
        return name.lower()

    def _create_nodes(self, pool: NodePool, count: int, *, reason: str, request: str | None = None) -> list[str]:
        labels = pool.node_labels()
        names: list[str] = []
        # A multi-host pool's nodes come as slices; a single-host node is a slice of one.
        slice_size = pool.hosts_per_slice if pool.hosts_per_slice > 1 else 1
        slice_id = ""
        for i in range(count):
            if i % slice_size == 0:
                slice_id = f"{pool.name}/slice-{next(self._slices)}"
            name = self._node_name(pool)
            annotations = {KWOK_ANNOTATION: "fake", SLICE_ANNOTATION: slice_id}
            if request:
                annotations[REQUEST_ANNOTATION] = request
            allocatable = {k: _quantity(v) for k, v in pool.machine.allocatable().items()}
            capacity = {k: _quantity(v) for k, v in pool.machine.capacity().items()}
            node = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name},
                             "annotations": annotations},
                "spec": {"taints": pool.node_taints(), "providerID": f"gce://sim/{pool.zone}/{name}"},
                "status": {"allocatable": allocatable, "capacity": capacity},
            }
            self._informer("v1", "Node").observe(self.client.create(node))
            names.append(name)
        self._note(f"{pool.name}: {count} node(s) up ({reason}){f' for {request}' if request else ''}")
        return names

    def _taint(self, names: Iterable[str], taint: Mapping[str, str] | None, remove: str | None = None) -> None:
        """Add `taint` to the nodes' taints, or remove the taint with key `remove`."""
        for name in names:
            node = self.client.get("v1", "Node", name)
            if node is None:
                continue
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != (remove or "")]
            if taint is not None:
                taints.append(dict(taint))
            self._informer("v1", "Node").observe(
                self.client.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints}},
                                    content_type="application/merge-patch+json"))

    def _delete_nodes(self, names: Sequence[str], *, reason: str, only_if_idle: bool = False) -> bool:
        """Take nodes away: cordon them (nothing more gets bound there), delete the pods bound to them (as the pod
        garbage collector would once the VMs are gone), delete the nodes, then delete any pod still bound to them
        (one the scheduler bound just before the cordon). True if deleted.

        only_if_idle (a scale-down): like cluster-autoscaler, taint them ToBeDeletedByClusterAutoscaler first and
        look again; if a pod got bound meanwhile, untaint and keep them.
        """
        if not names:
            return False
        if only_if_idle:
            self._taint(names, {"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"})
            gone = set(names)
            if any(not is_terminal(p) for p in self.client.list("v1", "Pod")
                   if (p.get("spec") or {}).get("nodeName") in gone):
                self._taint(names, None, remove=TO_BE_DELETED)
                for name in names:
                    self._idle_since.pop(name, None)
                self._note(f"scale-down of {', '.join(sorted(names))} cancelled: a pod was bound meanwhile")
                return False
        else:
            for name in names:
                with contextlib.suppress(KubeError):
                    self._informer("v1", "Node").observe(
                        self.client.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}},
                                            content_type="application/merge-patch+json"))
        self._delete_pods_on(names)
        for name in names:
            self.client.delete("v1", "Node", name)
            self._informer("v1", "Node").forget({"metadata": {"name": name}})
            self._idle_since.pop(name, None)
            self._held.pop(name, None)
            self._shutdowns.pop(name, None)
        self._delete_pods_on(names)
        self._note(f"{len(names)} node(s) down ({reason}): {', '.join(sorted(names))}")
        return True

    def _delete_pods_on(self, names: Sequence[str]) -> None:
        gone = set(names)
        for pod in self.client.list("v1", "Pod"):
            if (pod.get("spec") or {}).get("nodeName") in gone:
                with contextlib.suppress(KubeError):
                    self.client.request("DELETE", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/"
                                        f"{pod['metadata']['name']}",
                                        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})

    # --- scale-up -----------------------------------------------------------------------------------------------

    def _free_on_nodes(self, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
                       ) -> dict[str, Resources]:
        free: dict[str, Resources] = {}
        for node in nodes:
            alloc = (node.get("status") or {}).get("allocatable") or {}
            free[node["metadata"]["name"]] = {k: parse_quantity(v) for k, v in alloc.items()}
        for pod in pods:
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound in free and not is_terminal(pod):
                subtract(free[bound], pod_requests(pod))
        return free

    def _why_not(self, pool: NodePool, pod: Mapping[str, Any], request: Mapping[str, Decimal]) -> str | None:
        """None if the pool's nodes could take the pod, else the autoscaler's reason."""
        if not selector_matches(pod, pool.node_labels()):
            return "node(s) didn't match Pod's node affinity/selector"
        bad = untolerated(pod, pool.node_taints())
        if bad:
            return "node(s) had untolerated taint " + ", ".join(f"{{{t['key']}: {t.get('value', '')}}}" for t in bad)
        if not fits(request, pool.machine.allocatable()):
            short = [k for k, v in request.items() if v > pool.machine.allocatable().get(k, Decimal(0))]
            return "Insufficient " + ", ".join(short)
        return None

    def _scale_up(self, now: float, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> None:
        pending = [p for p in pods if is_unschedulable(p)]
        if not pending:
            return
        pending.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        free = self._free_on_nodes(nodes, pods)
        node_by_name = {n["metadata"]["name"]: n for n in nodes}
        pool_size: dict[str, int] = {}
        for n in nodes:
            pool_size[_node_pool(n)] = pool_size.get(_node_pool(n), 0) + 1
        for up in self._upcoming:
            pool_size[up.pool.name] = pool_size.get(up.pool.name, 0) + up.count
            # Every pending pod is placed again below, the ones that triggered this scale-up included: start from
            # empty nodes (keeping what earlier passes subtracted made each pass grow the pool again for them).
            up.free = [dict(up.pool.machine.allocatable()) for _ in range(up.count)]
        for pod in pending:
            request = pod_requests(pod)
            annotations = pod["metadata"].get("annotations") or {}
            # 1. An existing node can take it: the scheduler will (it just has not retried yet).
            placed = False
            for name, room in free.items():
                if name in self._shutdowns:  # a preempted Spot VM about to go: no capacity
                    continue
                node = node_by_name[name]
                # A node still coming up (the API server's not-ready taint) is capacity on its way, as for
                # cluster-autoscaler: the pod waits for it rather than growing the pool again.
                taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != NOT_READY_TAINT]
                if selector_matches(pod, node["metadata"].get("labels") or {}) and not untolerated(pod, taints) \
                        and fits(request, room):
                    subtract(room, request)
                    placed = True
                    break
            if placed:
                continue
            # 2. A node on its way can take it.
            for up in self._upcoming:
                if self._why_not(up.pool, pod, request) is None:
                    spot: Resources | None = next((r for r in up.free if fits(request, r)), None)
                    if spot is not None:
                        subtract(spot, request)
                        if all(p["metadata"].get("uid") != pod["metadata"].get("uid") for p in up.pods):
                            up.pods.append(pod)
                        placed = True
                        break
            if placed or annotations.get(CONSUME_ANNOTATION):
                continue  # pods of a ProvisioningRequest wait for its nodes; they never trigger a scale-up
            # 3. Grow a pool: the first matching one with room, fewest nodes first.
            reasons: list[str] = []
            candidates = []
            for pool in self.pools.values():
                why = self._why_not(pool, pod, request)
                if why is None and not pool.autoscaled:
                    why = "node group without autoscaling"
                if why is None and pool.queued:
                    why = "queued provisioning node pool: scaled up only by a ProvisioningRequest"
                if why is None and self._backoff_until.get(pool.name, 0) > now:
                    why = "in backoff after failed scale-up"
                step = pool.hosts_per_slice
                if why is None and pool_size.get(pool.name, 0) + step > pool.max_nodes:
                    why = "max node group size reached"
                if why is None:
                    candidates.append(pool)
                else:
                    reasons.append(why)
            if not candidates:
                summary = ", ".join(f"{reasons.count(r)} {r}" for r in dict.fromkeys(reasons))
                # About the pools that would take the pod but for their state (back-off, size, queued).
                about = [p.name for p in self.pools.values() if self._why_not(p, pod, request) is None]
                self._event(pod, "NotTriggerScaleUp", "Normal", about, f"pod didn't trigger scale-up: {summary}")
                continue
            pool = min(candidates, key=lambda p: (pool_size.get(p.name, 0), list(self.pools).index(p.name)))
            count = pool.hosts_per_slice
            delay = self.scale_up_delays.get(pool.name,
                                             self.timings.scale_up if pool.tpu else self.timings.cpu_scale_up)
            up = _Upcoming(pool, count, now + self.scale.real(delay), now,
                           [dict(pool.machine.allocatable()) for _ in range(count)], [pod])
            subtract(up.free[0], request)
            self._upcoming.append(up)
            before = pool_size.get(pool.name, 0)
            pool_size[pool.name] = before + count
            self._note(f"scale-up of {pool.name} {before}->{before + count} for {pod_key(pod)}")
            self._event(pod, "TriggeredScaleUp", "Normal", [pool.name],
                        f"pod triggered scale-up: [{{{pool.name} {before}->{before + count} (max: {pool.max_nodes})}}]")

    # --- scale-down ---------------------------------------------------------------------------------------------

    def _scale_down(self, now: float, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> None:
        busy = {(p.get("spec") or {}).get("nodeName") for p in pods if not is_terminal(p)}
        for name in [n for n, until in self._held.items() if n in busy or until <= now]:
            del self._held[name]
        protected = {n for r in self._requests.values() if self._booked(r) for n in r.nodes} | set(self._held)
        by_slice: dict[str, list[str]] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            pool = self.pools.get(_node_pool(node))
            if pool is None or not pool.autoscaled:
                continue
            if name in busy or name in protected:
                self._idle_since.pop(name, None)
            else:
                self._idle_since.setdefault(name, now)
            by_slice.setdefault((node["metadata"].get("annotations") or {}).get(SLICE_ANNOTATION, name), []).append(
                name)
        unneeded = self.scale.real(self.timings.scale_down_unneeded)
        for slice_id, names in by_slice.items():
            if all(n in self._idle_since and now - self._idle_since[n] >= unneeded for n in names):
                self._delete_nodes(names, reason=f"scale-down of idle slice {slice_id}", only_if_idle=True)

    # --- DWS ----------------------------------------------------------------------------------------------------

    def _booked(self, req: _Request) -> bool:
        """The request's nodes wait for its pods: provisioned, not yet consumed, not expired or revoked."""
        return (req.provisioned_at is not None and not req.consumed and not req.done
                and "BookingExpired" not in req.conditions)

    def _provisioning(self, now: float, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> None:
        seen: set[str] = set()
        used: dict[str, int] = {}  # pool -> nodes there or on their way (updated as requests get nodes)
        for n in nodes:
            used[_node_pool(n)] = used.get(_node_pool(n), 0) + 1
        for up in self._upcoming:
            used[up.pool.name] = used.get(up.pool.name, 0) + up.count
        for pr in self._informer(PROVREQ_API, "ProvisioningRequest").items():
            if (pr.get("spec") or {}).get("provisioningClassName") != QUEUED_CLASS:
                continue  # check-capacity and others: no GKE controller answers here either
            meta = pr["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            seen.add(key)
            req = self._requests.get(key)
            if req is None or req.uid != meta["uid"]:
                req = self._accept(now, pr, key)
            if req.done:
                continue
            if req.provisioned_at is None:
                self._try_provision(now, pr, req, used)
                continue
            self._after_provisioned(now, req, pods)
        for key, req in self._requests.items():
            if key not in seen and not req.done:
                req.done = True  # deleted (its Workload finished or was evicted): the nodes are ordinary now
                self._note(f"ProvisioningRequest {key} deleted")

    def _accept(self, now: float, pr: Mapping[str, Any], key: str) -> _Request:
        params = (pr.get("spec") or {}).get("parameters") or {}
        max_run = float(params["maxRunDurationSeconds"]) if params.get("maxRunDurationSeconds") else None
        req = _Request(key, pr["metadata"]["uid"], now, max_run=max_run)
        self._requests[key] = req
        self._set_condition(req, "Accepted", "True", *ACCEPTED)
        self._set_condition(req, "Provisioned", "False", *NOT_PROVISIONED)
        self._write_request_status(req)
        self._note(f"ProvisioningRequest {key} accepted")
        return req

    def _request_pod_sets(self, pr: Mapping[str, Any]) -> list[tuple[dict[str, Any], int]] | None:
        """(pod template as a pod, count) per PodSet of the request; None when the request is gone already (the
        informer can still list a request whose PodTemplates Kueue has just deleted with it)."""
        out = []
        meta = pr["metadata"]
        for ps in (pr.get("spec") or {}).get("podSets") or []:
            template = self.client.get("v1", "PodTemplate", ps["podTemplateRef"]["name"], meta["namespace"])
            if template is None:
                live = self.client.get(PROVREQ_API, "ProvisioningRequest", meta["name"], meta["namespace"])
                if live is None or live["metadata"]["uid"] != meta["uid"] or live["metadata"].get("deletionTimestamp"):
                    return None
                raise KubeError(404, f"PodTemplate {ps['podTemplateRef']['name']} of ProvisioningRequest "
                                f"{meta['name']} not found")
            pod = {"metadata": template["template"].get("metadata") or {}, "spec": template["template"]["spec"]}
            out.append((pod, int(ps["count"])))
        return out

    def _try_provision(self, now: float, pr: Mapping[str, Any], req: _Request, used: dict[str, int]) -> None:
        """Provision the request if its delay is over and, for each PodSet, a queued pool matching its PodTemplate
        has room for its nodes (whole slices) and capacity; `used` (pool -> nodes) is updated."""
        if now < req.accepted_at + self.scale.real(self.timings.dws_provision):
            return
        planned = dict(used)
        plan: list[tuple[NodePool, int]] = []
        pod_sets = self._request_pod_sets(pr)
        if pod_sets is None:
            return  # deleted meanwhile: the next pass stops tracking it
        for pod, count in pod_sets:
            request = pod_requests(pod)
            pool = next((p for p in self.pools.values()
                         if p.queued and self.capacity[p.name] and self._why_not(p, pod, request) is None
                         and planned.get(p.name, 0) + _whole_slices(count, p.hosts_per_slice) <= p.max_nodes), None)
            if pool is None:
                return  # DWS keeps the request queued until capacity appears
            planned[pool.name] = planned.get(pool.name, 0) + _whole_slices(count, pool.hosts_per_slice)
            plan.append((pool, _whole_slices(count, pool.hosts_per_slice)))
        used.update(planned)
        for pool, count in plan:
            req.nodes += self._create_nodes(pool, count, reason="ProvisioningRequest", request=req.key)
            req.pool = pool.name
        req.provisioned_at = now
        self._set_condition(req, "Provisioned", "True", *PROVISIONED)
        self._write_request_status(req)

    def _after_provisioned(self, now: float, req: _Request, pods: Sequence[Mapping[str, Any]]) -> None:
        provisioned_at = req.provisioned_at if req.provisioned_at is not None else now
        if not req.consumed:
            name = req.key.split("/", 1)[1]
            consumers = [p for p in pods if (p["metadata"].get("annotations") or {}).get(CONSUME_ANNOTATION) == name
                         and (p.get("spec") or {}).get("nodeName") in set(req.nodes)]
            if req.nodes and len(consumers) >= len(req.nodes):
                req.consumed = True
                self._note(f"ProvisioningRequest {req.key} consumed by {len(consumers)} pod(s)")
            elif now >= provisioned_at + self.scale.patience(self.timings.booking) and "BookingExpired" not in \
                    req.conditions:
                self._set_condition(req, "BookingExpired", "True", *BOOKING_EXPIRED)
                self._write_request_status(req)
        if req.max_run is not None and now >= provisioned_at + self.scale.real(req.max_run):
            self._set_condition(req, "CapacityRevoked", "True", CAPACITY_REVOKED[0],
                                f"{CAPACITY_REVOKED[1]} (maxRunDurationSeconds reached)")
            self._delete_nodes(req.nodes, reason=f"maxRunDurationSeconds of {req.key}")
            req.done = True
            self._write_request_status(req)

    def _set_condition(self, req: _Request, kind: str, status: str, reason: str, message: str) -> None:
        old = req.conditions.get(kind)
        if old and old["status"] == status and old["reason"] == reason and old["message"] == message:
            return
        changed = old is None or old["status"] != status
        req.conditions[kind] = {"type": kind, "status": status, "reason": reason, "message": message,
                                "lastTransitionTime": _now_rfc3339() if changed or old is None
                                else old["lastTransitionTime"]}
        if status == "True":
            self._note(f"ProvisioningRequest {req.key}: {kind}")

    def _write_request_status(self, req: _Request) -> None:
        namespace, name = req.key.split("/", 1)
        self.client.apply_status({"apiVersion": PROVREQ_API, "kind": "ProvisioningRequest",
                                  "metadata": {"name": name, "namespace": namespace},
                                  "status": {"conditions": list(req.conditions.values())}})

    # --- events -------------------------------------------------------------------------------------------------

    def _event(self, pod: Mapping[str, Any], reason: str, kind: str, pools: Sequence[str], message: str) -> None:
        """A core/v1 Event on the pod from "cluster-autoscaler", once per pod, reason and message; not written (kept
        in suppressed_events) when the Events of one of `pools` (those it is about) are not seen."""
        meta = pod["metadata"]
        key = (meta.get("uid", ""), reason, message)
        if key in self._events_sent:
            return
        self._events_sent.add(key)
        if self.unseen_events & {ALL_POOLS, *pools}:
            self.suppressed_events.append(SuppressedEvent(self.elapsed(), reason, pod_key(pod), message))
            return
        stamp = _now_rfc3339()
        with contextlib.suppress(KubeError):
            self.client.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta.get("uid", "")},
                "reason": reason, "message": message, "type": kind, "count": 1,
                "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
            })


def _whole_slices(count: int, hosts_per_slice: int) -> int:
    return math.ceil(count / hosts_per_slice) * hosts_per_slice


def _node_pool(node: Mapping[str, Any]) -> str:
    return str((node["metadata"].get("labels") or {}).get(POOL_LABEL, ""))


def _quantity(value: Decimal) -> str:
    """A Decimal as a Kubernetes quantity string (cpu in millicores when fractional)."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"


# --- KWOK stages -----------------------------------------------------------------------------------------------


def kwok_stage_files(stages_dir: Path) -> dict[str, dict[str, Any]]:
    """KWOK's own Stage manifests (copied from sigs.k8s.io/kwok's kustomize/stage by build_components.sh)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(stages_dir.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out[doc["metadata"]["name"]] = doc
    return out


# The stages the sim runs with, from KWOK's "fast" set: nodes Ready at once (node-initialize, with leases kept by
# node-heartbeat-with-lease), pods Running and Ready as soon as they are bound (pod-ready), pods with a
# deletionTimestamp removed at once (pod-delete), and pods owned by a Job (the Ray submitter, the readiness
# gate) Succeeded after the job's run time (pod-complete, with its per-pod annotation override kept).
KWOK_STAGE_FILES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")
# Two more of the sim's own, for pods that carry READY_AFTER_ANNOTATION (which pod-ready then leaves alone): bound,
# they stay Pending and not Ready on their node, with their IPs, their containers waiting (pod-starting:
# ContainerCreating, as while a large image is pulled, or ImagePullBackOff for "never"; its template uses the
# functions of KWOK v0.8.0's pod-ready); after the annotation's duration they turn Running and Ready as pod-ready
# makes them (pod-ready-late). `with_workers_ready_after` puts the annotation on a RayJob's workers.
KWOK_STAGES = (*KWOK_STAGE_FILES, "pod-starting", "pod-ready-late")
READY_AFTER_ANNOTATION = "tpu-fallback.sim/ready-after"  # a Go duration from binding to Ready, or "never"
NEVER = "never"
_READY_AFTER = f'.metadata.annotations["{READY_AFTER_ANNOTATION}"]'
_POD_STARTING_STATUS = """\
{{ $now := Now }}
{{ $never := eq (index .metadata.annotations "<annotation>") "<never>" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      {{ if $never }}
      reason: ImagePullBackOff
      message: {{ printf "Back-off pulling image %q" .image | Quote }}
      {{ else }}
      reason: ContainerCreating
      {{ end }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Pending
startTime: {{ $now | Quote }}
""".replace("<annotation>", READY_AFTER_ANNOTATION).replace("<never>", NEVER)
# Running and Ready, as KWOK's pod-ready makes a pod, keeping the IPs pod-starting gave it (a second allocation
# would add a second IP of the family, which the API server refuses).
_POD_READY_LATE_STATUS = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Running
"""


def kwok_stages(job_run_real_seconds: float, stages_dir: Path | None = None) -> list[dict[str, Any]]:
    """KWOK_STAGES: KWOK's (KWOK_STAGE_FILES) with pod-complete delayed by the job's run time (real seconds) and
    pod-ready leaving the pods with READY_AFTER_ANNOTATION to the sim's two stages."""
    if stages_dir is None:
        from tests.e2e.controlplane import build_components

        comps = build_components()
        if comps.kwok_stages_dir is None:
            raise RuntimeError("bin.env has no KWOK_STAGES_DIR; run tests/e2e/build_components.sh")
        stages_dir = comps.kwok_stages_dir
    found = kwok_stage_files(stages_dir)
    missing = [s for s in KWOK_STAGE_FILES if s not in found]
    if missing:
        raise FileNotFoundError(f"KWOK stages {', '.join(missing)} not in {stages_dir}")
    stages = [copy.deepcopy(found[s]) for s in KWOK_STAGE_FILES]
    for stage in stages:
        if stage["metadata"]["name"] == "pod-complete":
            stage["spec"]["delay"] = {
                "durationMilliseconds": max(1, int(job_run_real_seconds * 1000)),
                "durationFrom": {"expressionFrom": f'.metadata.annotations["{KWOK_COMPLETE_DELAY}"]'},
            }
    ready = next(s for s in stages if s["metadata"]["name"] == "pod-ready")
    _match(ready).append({"key": _READY_AFTER, "operator": "DoesNotExist"})
    starting = {"apiVersion": ready.get("apiVersion", "kwok.x-k8s.io/v1alpha1"), "kind": "Stage",
                "metadata": {"name": "pod-starting"},
                "spec": {"resourceRef": copy.deepcopy(ready["spec"]["resourceRef"]), "selector": {"matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.podIP", "operator": "DoesNotExist"},
                    {"key": _READY_AFTER, "operator": "Exists"},
                ]}, "next": {"statusTemplate": _POD_STARTING_STATUS}}}
    late = {"apiVersion": starting["apiVersion"], "kind": "Stage", "metadata": {"name": "pod-ready-late"},
            "spec": {"resourceRef": copy.deepcopy(ready["spec"]["resourceRef"]), "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": ".status.podIP", "operator": "Exists"},
                {"key": _READY_AFTER, "operator": "Exists"},
                {"key": _READY_AFTER, "operator": "NotIn", "values": [NEVER]},
            ]}, "delay": {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": _READY_AFTER}},
                "next": {"statusTemplate": _POD_READY_LATE_STATUS}}}
    return [*stages, starting, late]


def _match(stage: dict[str, Any]) -> list[dict[str, Any]]:
    expressions: list[dict[str, Any]] = stage["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
    return expressions


def with_workers_ready_after(rayjob: Mapping[str, Any], real_seconds: float | None) -> dict[str, Any]:
    """The RayJob with worker pods that start slowly: bound to their node, they stay Pending and not Ready (their
    containers waiting: ContainerCreating, as while a large image is pulled) for `real_seconds`, then run; None:
    never (ImagePullBackOff, as for an image that cannot be pulled). The head and the submitter start as before.
    KWOK's stages honour READY_AFTER_ANNOTATION on the workers' pod templates (see KWOK_STAGES)."""
    out = copy.deepcopy(dict(rayjob))
    value = NEVER if real_seconds is None else f"{max(1, int(real_seconds * 1000))}ms"
    for group in out["spec"]["rayClusterSpec"].get("workerGroupSpecs") or []:
        group["template"].setdefault("metadata", {}).setdefault("annotations", {})[READY_AFTER_ANNOTATION] = value
    return out


def with_run_time(rayjob: Mapping[str, Any], real_seconds: float) -> dict[str, Any]:
    """The RayJob with its own run time: KWOK's pod-complete delay annotation on its submitter pod template (the
    project's one, or KubeRay's default, as Kueue copies it, when the RayJob has none). Other objects come back
    unchanged."""
    out = copy.deepcopy(dict(rayjob))
    if out.get("kind") != "RayJob":
        return out
    head = out["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    template = out["spec"].setdefault("submitterPodTemplate", {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": head["image"],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}},
    }]}})
    template.setdefault("metadata", {}).setdefault("annotations", {})[KWOK_COMPLETE_DELAY] = (
        f"{max(1, int(real_seconds * 1000))}ms")
    return out


# --- the Ray dashboard -----------------------------------------------------------------------------------------


class RayDashboard:
    """Answers KubeRay's Ray job API calls, reached as KubeRay's HTTP proxy (`HTTP_PROXY=<url>`).

    GET /api/jobs/<submission id> on any `<head-svc>.<namespace>.svc.cluster.local:8265`: the RayJob whose
    status.jobId is that id is looked up in the namespace; the job is SUCCEEDED once the submitter Job (named
    like the RayJob) has condition Complete, FAILED once it has Failed, else RUNNING. Unknown ids get 404, which
    KubeRay reads as "not submitted yet". POST /api/jobs/<id>/stop answers {"stopped": true}.
    """

    def __init__(self) -> None:
        self._cache: ClusterCache | None = None
        # job id -> (start, end) in ms, fixed once seen, as Ray's own job API reports them (KubeRay copies them into
        # the RayJob's status.rayJobInfo); each answer runs in a thread of its own, hence the lock
        self._times: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self.requests = 0
        dashboard = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._answer(*dashboard.answer("GET", self.path, self.headers.get("Host", "")))

            def do_POST(self) -> None:
                self._answer(*dashboard.answer("POST", self.path, self.headers.get("Host", "")))

            def do_DELETE(self) -> None:
                self._answer(*dashboard.answer("DELETE", self.path, self.headers.get("Host", "")))

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="ray-dashboard", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def connect(self, cache: ClusterCache) -> None:
        """Read the RayJobs and the submitter Jobs from the cluster's informers (no request per call: KubeRay asks
        every few seconds per RayJob, each call in a thread of its own)."""
        self._cache = cache

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, raw_path: str, host_header: str) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(raw_path)
        host = url.hostname or host_header.split(":", 1)[0]
        parts = host.split(".")
        path = url.path if url.scheme else raw_path.split("?", 1)[0]
        self.requests += 1
        if len(parts) < 3 or parts[2] != "svc" or self._cache is None:
            return 404, {"error": f"not a Ray head service: {host}"}
        namespace = parts[1]
        match = re.fullmatch(r"/api/jobs/([^/]+)(/stop)?/?", path)
        if path.rstrip("/") == "/api/jobs":
            return 200, []
        if match is None:
            return 404, {"error": f"not simulated: {method} {path}"}
        job_id, stop = match.group(1), match.group(2)
        if stop:
            return 200, {"stopped": True}
        try:  # the informers are thread-safe: no lock for reading them
            rayjobs = self._cache.items("ray.io/v1", "RayJob", namespace)
            rayjob = next((r for r in rayjobs if (r.get("status") or {}).get("jobId") == job_id), None)
            if rayjob is None:
                return 404, {"error": f"job {job_id} not found"}
            if method == "DELETE":
                return 200, {"deleted": True}
            submitter = self._cache.informer("batch/v1", "Job").get(rayjob["metadata"]["name"], namespace)
        except TimeoutError as err:  # an informer that could not list
            return 500, {"error": str(err)}
        status = "RUNNING"
        for cond in ((submitter or {}).get("status") or {}).get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                status = "SUCCEEDED" if cond["type"] == "Complete" else "FAILED"
        with self._lock:
            now = int(time.time() * 1000)
            start, end = self._times.get(job_id, (now, 0))
            if status != "RUNNING" and not end:
                end = now
            self._times[job_id] = (start, end)
        return 200, {"job_id": job_id, "submission_id": job_id, "status": status,
                     "entrypoint": rayjob["spec"].get("entrypoint", ""), "message": f"simulated: {status}",
                     "start_time": start, "end_time": end}


# --- a control plane with the sim ------------------------------------------------------------------------------


@contextlib.contextmanager
def simulated_gke(
    pools: Sequence[NodePool],
    *,
    scale: TimeScale = TimeScale(),
    timings: Timings = Timings(),
    **plane_options: Any,
) -> Iterator[tuple[Any, GkeSim]]:
    """A ControlPlane with the GKE components (scheduler, KWOK, KubeRay) and a running GkeSim for the pools.

    Yields (plane, sim). Everything stops on the way out, the sim first, also on failure.
    """
    from tests.e2e.controlplane import ControlPlane, GkeOptions

    sim = GkeSim(pools, scale=scale, timings=timings)
    try:
        options = sim.gke_options()
        with ControlPlane(gke=GkeOptions(**options), **plane_options) as plane:
            sim.start(plane.server, plane.ca_file, plane.token)
            try:
                yield plane, sim
            finally:
                sim.stop()
    finally:
        sim.dashboard.close()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, sim: GkeSim | None = None,
               interval: float = 0.1) -> Any:
    """Poll until `predicate` returns something truthy; on a timeout the message has the sim's last actions."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if sim is not None and sim.errors:
            sim.check()
        if time.monotonic() >= deadline:
            log = "\n".join(f"  {e.at:6.1f}s {e.what}" for e in (sim.log[-25:] if sim else []))
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}" + (f"\nsim log:\n{log}" if log
                                                                                   else ""))
        time.sleep(interval)
