"""GKE's node pools as the offline plan renders them: machines (allocatable as GKE reserves it), labels, taints."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tests.e2e.gke_sim.messages import GCE_DOMAIN_URL
from tpu_fallback.model import catalog
from tpu_fallback.model.capacity import EVICTION_THRESHOLD, gke_reserved_cpu, gke_reserved_memory
from tpu_fallback.offline.mockrun import ProgramRun

NODE_POOL_TYPE = "gcp:container/nodePool:NodePool"
POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_RESOURCE = "google.com/tpu"
TPU_TAINT = {"key": TPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
QUEUED_LABEL = "cloud.google.com/gke-queued"
QUEUED_TAINT = {"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}
SPOT_LABEL = "cloud.google.com/gke-spot"
PODS_PER_NODE = 110  # GKE's default maximum pods per node

# CPU machine families: GiB of memory per vCPU (Compute Engine's standard/highmem/highcpu shapes).
_CPU_MACHINE = re.compile(r"^(?P<family>[a-z][a-z0-9]*)-(?P<shape>standard|highmem|highcpu)-(?P<vcpus>\d+)$")
_GIB_PER_VCPU = {"standard": 4, "highmem": 8, "highcpu": 1}
GIB = 2**30


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
        """Capacity minus GKE's reservations as GKE's cluster autoscaler predicts them (kubelet/system CPU; the
        kernel's memory, kube-reserved with image streaming's share, and the 100 MiB eviction threshold; the rule
        lives in tpu_fallback/model/capacity.py)."""
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
    project: str = "project"
    subnetwork: str = "default"  # the cluster's subnet unless the pool has its own (networkConfig.subnetwork)

    @property
    def mig_name(self) -> str:
        """The pool's managed instance group, named as GKE names them (gke-<cluster>-<pool>-<hash>-grp; GKE's exact
        truncation of long names is not public: the sim keeps 15 and 20 characters)."""
        digest = hashlib.sha1(f"{self.cluster}/{self.name}".encode()).hexdigest()[:8]
        return f"gke-{self.cluster[:15]}-{self.name[:20]}-{digest}-grp".lower()

    @property
    def node_group_id(self) -> str:
        """The autoscaler's id of the pool's node group: the MIG's URL (GoogleCloudPlatform/cluster-autoscaler@7d250507
        pkg/cloudprovider/gke/gke_cloud_provider_impl.go GkeMig.Id -> kubernetes/autoscaler@55c37cd5
        cluster-autoscaler/cloudprovider/gce/gce_url.go GenerateMigUrl)."""
        return f"{GCE_DOMAIN_URL}/projects/{self.project}/zones/{self.zone}/instanceGroups/{self.mig_name}"

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
            project=str(spec.get("project") or "project"),
            subnetwork=str((spec.get("networkConfig") or {}).get("subnetwork") or "default"),
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

