"""Capacity and quota arithmetic: how TPU plans map onto GKE node pools and Kueue quotas. Pure Python.

The one home of every number derived from the TPU slice: pool sizes, chips per plan, the on-demand
cpu/memory quota, what one Ray job takes from the system quota, and the tutorial's "unlimited".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

from tpu_fallback.model.catalog import MachineType, TpuSlice
from tpu_fallback.model.quantity import Resources, canonical_quantity, parse_quantity

ON_DEMAND = "on-demand"
FLEX_START = "flex-start"
PLANS = (ON_DEMAND, FLEX_START)

# The tutorial's on-demand quota is 40 cpu / 75Gi for one 4-host slice: 10 cpu and 19200 MiB per TPU host.
ON_DEMAND_QUOTA_PER_HOST = (10, 19200)
# The tutorial writes "infinite" as 1e9 of each resource.
UNLIMITED_AMOUNT = 1000000000
# What KubeRay adds beside the Ray head on the CPU pool, as Kueue counts it (measured on Kueue 0.19.2 by the
# end-to-end test): the submitter Job's pod (500m / 200Mi) and, for elastic jobs, the autoscaler sidecar in the
# head pod (500m / 512Mi).
SUBMITTER_OVERHEAD = (Decimal("0.5"), Decimal(200 * 2**20))
AUTOSCALER_OVERHEAD = (Decimal("0.5"), Decimal(512 * 2**20))


@dataclass(frozen=True)
class PoolShape:
    name: str
    max_nodes: int


def pool_layout(base_name: str, tpu: TpuSlice, max_slices: int) -> tuple[PoolShape, ...]:
    """The node pools that give `max_slices` slices of `tpu`.

    GKE scales a multi-host slice pool atomically and its maximum size must be one slice, so each
    multi-host slice gets a pool of its own (the first keeps the base name, as in the tutorial).
    Single-host slices are single nodes, so one pool autoscaling to `max_slices` nodes holds them all.
    """
    if max_slices <= 0:
        return ()
    if not tpu.multi_host:
        return (PoolShape(base_name, max_slices),)
    names = [base_name] + [f"{base_name}-{i}" for i in range(2, max_slices + 1)]
    return tuple(PoolShape(name, tpu.hosts_per_slice) for name in names)


# Compute Engine resource names (pulumi-gcp 10.2.0 compute.ResourcePolicy `name`: "must be 1-63 characters long, and
# comply with RFC1035": a lowercase letter, then dashes, lowercase letters or digits, not ending with a dash).
MAX_RESOURCE_POLICY_NAME = 63


def workload_policy_name(cluster_name: str, base_name: str, topology: str) -> str:
    """The workload policy of one rung's pools: `<cluster>-<pool>-<topology>`. Resource policies are regional and
    project-wide, so the cluster's name keeps two clusters' pools of one name apart. The topology is in the name so
    that a new one is a new policy (and a new policyName, which replaces the pools) rather than a change to the policy
    the running pools use. Past 63 characters the name is cut and a hash of the whole keeps it unique."""
    name = f"{cluster_name}-{base_name}-{topology}"
    if len(name) <= MAX_RESOURCE_POLICY_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:MAX_RESOURCE_POLICY_NAME - 9].rstrip('-')}-{digest}"


def tpu_chips(tpu: TpuSlice, max_slices: int) -> int:
    """The TPU chips a plan can run at once: its quota in Kueue."""
    return tpu.chips_per_slice * max_slices


def pool_cpu(tpu: TpuSlice, max_slices: int) -> int:
    return tpu.machine.vcpus * tpu.hosts_per_slice * max_slices


def pool_memory_gib(tpu: TpuSlice, max_slices: int) -> int:
    return tpu.machine.memory_gib * tpu.hosts_per_slice * max_slices


def pool_resources(tpu: TpuSlice, max_slices: int) -> Resources:
    """The cpu and memory of every host of a plan's pools."""
    return Resources(pool_cpu(tpu, max_slices), f"{pool_memory_gib(tpu, max_slices)}Gi")


def share(total: Resources, parts: int) -> Resources:
    """One of `parts` equal shares of a cpu/memory amount, in the canonical form Kueue stores."""
    if parts == 1:
        return total
    return Resources(_part(total.cpu, parts), _part(total.memory, parts))


def _part(amount: str | int, parts: int) -> str:
    value = parse_quantity(amount) / parts
    if str(amount).endswith("i") and value == value.to_integral_value() and value % 1024 == 0:
        return canonical_quantity(f"{int(value) // 1024}Ki")  # keep binary units: 150Gi / 2 = 75Gi
    return canonical_quantity(format(value.quantize(Decimal("0.001")).normalize(), "f"))


def on_demand_quota(configured: Resources | None, tpu: TpuSlice, max_slices: int) -> Resources:
    """The on-demand flavor's cpu/memory quota: configured, or ON_DEMAND_QUOTA_PER_HOST per plan A host."""
    if configured is not None:
        return configured
    hosts = max_slices * tpu.hosts_per_slice
    cpu_per_host, mib_per_host = ON_DEMAND_QUOTA_PER_HOST
    mib = mib_per_host * hosts
    return Resources(cpu=cpu_per_host * hosts, memory=f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi")


def system_pods_per_job(head_request: Resources, elastic: bool = False) -> tuple[Decimal, Decimal]:
    """cpu and memory (bytes) one Ray job takes from the default-cpu flavor; its quota caps concurrent jobs."""
    extra = [SUBMITTER_OVERHEAD, *([AUTOSCALER_OVERHEAD] if elastic else [])]
    return (parse_quantity(head_request.cpu) + sum(cpu for cpu, _ in extra),
            parse_quantity(head_request.memory) + sum(memory for _, memory in extra))


def slice_requests(worker_request: Resources, tpu: TpuSlice) -> tuple[Decimal, Decimal]:
    """cpu and memory (bytes) the TPU workers of one slice request together."""
    return (parse_quantity(worker_request.cpu) * tpu.hosts_per_slice,
            parse_quantity(worker_request.memory) * tpu.hosts_per_slice)


# GKE's node allocatable resources: GKE "Plan GKE Standard node sizes" / "About GKE node sizing", "Memory and CPU
# reservations" (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations).
# "Allocatable = Capacity - Reserved - Eviction threshold"; GKE reserves memory: "255 MiB of memory for machines with
# less than 1 GiB of memory, 25% of the first 4 GiB of memory, 20% of the next 4 GiB of memory (up to 8 GiB), 10% of
# the next 8 GiB of memory (up to 16 GiB), 6% of the next 112 GiB of memory (up to 128 GiB), 2% of any memory above
# 128 GiB"; CPU: "6% of the first core, 1% of the next core (up to 2 cores), 0.5% of the next 2 cores (up to 4 cores),
# 0.25% of any cores above 4 cores"; and "100 MiB of memory on each node for the eviction threshold". The search corpus
# holds only that page's opening, so the table's wording is as quoted from it by learnk8s.io/allocatable-resources,
# awslabs/amazon-eks-ami PR #367 and kURL's kube-reserved docs (all three agree). No separate rule for TPU hosts or for
# large machines was found: the 2% tier covers them. (One third-party source says node pools on GKE 1.37+ reserve
# min(this, 15 MiB x max pods + a base) memory; GKE's page was not seen saying so. If so, this table over-reserves
# there, which refuses a request GKE could have placed rather than one that would stay Pending.)
_CPU_TIERS: tuple[tuple[Decimal | None, Decimal], ...] = (  # (cores in the tier, None for the rest; share reserved)
    (Decimal(1), Decimal("0.06")), (Decimal(1), Decimal("0.01")), (Decimal(2), Decimal("0.005")),
    (None, Decimal("0.0025")))
_MEMORY_TIERS_GIB: tuple[tuple[Decimal | None, Decimal], ...] = (  # (GiB in the tier, None for the rest; share)
    (Decimal(4), Decimal("0.25")), (Decimal(4), Decimal("0.20")), (Decimal(8), Decimal("0.10")),
    (Decimal(112), Decimal("0.06")), (None, Decimal("0.02")))
_SMALL_MACHINE_RESERVED = 255 * 2**20  # "255 MiB ... for machines with less than 1 GiB of memory"
EVICTION_THRESHOLD = 100 * 2**20  # bytes: the kubelet's memory.available<100Mi
_GIB = 2**30
_MILLICORE = Decimal("0.001")


@dataclass(frozen=True)
class Allocatable:
    """What pods can request on one node: cpu in cores (to the millicore), memory in bytes."""

    cpu: Decimal
    memory: int


def _tiered(total: Decimal, tiers: tuple[tuple[Decimal | None, Decimal], ...]) -> Decimal:
    """The reserved amount: each tier's share of the part of `total` that falls in it."""
    reserved, left = Decimal(0), total
    for size, rate in tiers:
        part = left if size is None else min(left, size)
        if part <= 0:
            break
        reserved += part * rate
        left -= part
    return reserved


def gke_reserved_cpu(vcpus: int) -> Decimal:
    """The cores GKE reserves for system components on a node of `vcpus` (the table above), unrounded."""
    return _tiered(Decimal(vcpus), _CPU_TIERS)


def gke_reserved_memory(memory_gib: int | Decimal) -> Decimal:
    """The bytes GKE reserves for system components on a node of `memory_gib` (the table above; the eviction
    threshold not included), unrounded."""
    if Decimal(memory_gib) < 1:
        return Decimal(_SMALL_MACHINE_RESERVED)
    return _tiered(Decimal(memory_gib), _MEMORY_TIERS_GIB) * _GIB


def gke_allocatable(vcpus: int, memory_gib: int | Decimal) -> Allocatable:
    """A GKE Standard node's allocatable cpu and memory for a VM of `vcpus` and `memory_gib` (see the table above).
    Both are rounded down (cpu to a millicore, Kubernetes' smallest cpu unit; memory to a byte), so a request equal to
    what this returns fits."""
    if vcpus <= 0 or memory_gib <= 0:
        raise ValueError(f"a VM size needs vCPUs and memory above 0, not {vcpus} vCPU / {memory_gib} GiB")
    cpu = (Decimal(vcpus) - gke_reserved_cpu(vcpus)).quantize(_MILLICORE, rounding=ROUND_FLOOR)
    memory = Decimal(memory_gib) * _GIB - gke_reserved_memory(memory_gib) - EVICTION_THRESHOLD
    return Allocatable(cpu=cpu, memory=max(int(memory.to_integral_value(rounding=ROUND_FLOOR)), 0))


def fits_host(request: Resources, machine: MachineType) -> bool:
    """Whether one TPU worker with this request fits on one host of this machine type: within what GKE leaves pods
    (gke_allocatable), not the VM's size, since a request between the two stays Pending forever. A size the catalog
    lacks (MachineType.size_known) cannot be checked here: the infra stack's config gives it, and Kueue's quota
    holds. (A size from the config, tpu.hostVcpus/hostMemoryGib, is known and checked the same way.)"""
    if not machine.size_known:
        return True
    room = gke_allocatable(machine.vcpus, machine.memory_gib)
    return parse_quantity(request.cpu) <= room.cpu and parse_quantity(request.memory) <= room.memory


def describe_host(machine: MachineType) -> str:
    """A host's size and what GKE leaves pods, for error messages: "180 vCPU / 720 GiB, of which GKE leaves pods
    179.48 CPU / 698.74 GiB allocatable". Both figures are rounded down, so each can be requested as written."""
    room = gke_allocatable(machine.vcpus, machine.memory_gib)
    gib = (Decimal(room.memory) / _GIB).quantize(Decimal("0.01"), rounding=ROUND_FLOOR)
    return (f"{machine.vcpus} vCPU / {machine.memory_gib} GiB, of which GKE leaves pods "
            f"{format(room.cpu.normalize(), 'f')} CPU / {format(gib.normalize(), 'f')} GiB allocatable")
