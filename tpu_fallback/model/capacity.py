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


# GKE's node allocatable resources, as GKE's own cluster autoscaler predicts them for a node it would add (a pool
# scaled to zero has no node to read): a pod that does not fit that prediction never triggers a scale-up, so the
# worker-request checks use the same rule. GoogleCloudPlatform/cluster-autoscaler at
# 7d250507339b3a7583b380349f217ea191ff15ff:
# - pkg/cloudprovider/gke/templates.go BuildNodeFromMigSpec: capacity from the upstream
#   GceTemplateBuilder.BuildCapacity (kubernetes/autoscaler cluster-autoscaler/cloudprovider/gce/templates.go:
#   `memTotal := mem - r.CalculateKernelReserved(m, mem)`), then CalculateAllocatable: capacity - kube-reserved, and
#   memory less the kubelet's eviction threshold (gce_reserved.go defaultKubeletEvictionHardMemory = 100 MiB).
# - the kernel's share, pkg/cloudprovider/gke/reserved.go GkeReserved.CalculateKernelReserved: read from the measured
#   table config/os-reserved.yaml (per OS, architecture and node version: physical bytes -> reserved bytes), linear
#   between its two nearest points (pkg/cloudprovider/gke/nodetemplate/system_reserved_config.go findOptions and
#   interpolate; above the largest point, the line through the last two). _KERNEL_RESERVED_COS is that table for COS
#   on amd64 (GKE's default node image), the largest value over every node version from 1.34 on (they differ by
#   under 5 MiB): a request that fits it fits every such version.
# - kube-reserved, reserved.go memoryReservedMiB and cpuReservedMillicores: GKE's published tiers ("Plan GKE Standard
#   node sizes", https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations),
#   but in MiB with the tiers' bounds at 4000, 8000, 16000 and 128000 MiB ("Duplicating an upstream bug treating GB as
#   1000*MiB (we need to predict the end result accurately)"), each truncated to a whole MiB / millicore; 255 MiB at or
#   below 1000 MiB. With image streaming, which this project turns on for every pool (gcfs_config), a further 4% of
#   each tier ("GCFS requires memory to cache the layers, hence reserving additional memory for GCFS enabled (Riptide)
#   nodes": gcfsReservedFactor = 0.04, memoryReservedForGCFSMiB).
# What the page's table alone gives (no kernel share, no image streaming share, tiers in GiB) is more than GKE leaves:
# 698.74 GiB on a ct6e-standard-4t where the autoscaler predicts 686.69 GiB, and a request between the two never
# scales the pool up. Not modelled (each would only refuse a request GKE could place, never accept one it cannot):
# node versions from 1.37 with GKE's "reserved resources v2" (min(the tiers, 15 MiB x max pods + 500 MiB)), and
# kubelet CPU for more than 110 pods per node (+400m; the project sets no max pods per node, GKE's default is 110).
_CPU_TIERS_MILLICORES: tuple[tuple[int, float], ...] = ((0, 0.06), (1000, 0.01), (2000, 0.005), (4000, 0.0025))
_MEMORY_TIERS_MIB: tuple[tuple[int, float], ...] = ((0, 0.25), (4000, 0.2), (8000, 0.1), (16000, 0.06), (128000, 0.02))
_IMAGE_STREAMING_FACTOR = 0.04
_SMALL_MACHINE_RESERVED_MIB = 255  # "The minimum reservation required for proper node operation is 255 MiB"
# (physical bytes, kernel-reserved bytes): config/os-reserved.yaml, cos / amd64 / not confidential, max over node
# versions 1.34.0-gke.1477000 .. 1.36.0-gke.3712000; the reader adds (0, 0) below the first point.
_KERNEL_RESERVED_COS: tuple[tuple[int, int], ...] = (
    (0, 0), (1073741824, 63029248), (1824522240, 76906496), (2147483648, 81379328), (3221225472, 101027840),
    (4026531840, 181510144), (4294967296, 185987072), (8589934592, 259383296), (17179869184, 406732800),
    (34359738368, 701448192), (68719476736, 1290866688), (137438953472, 2369077248), (274877906944, 4427137024),
    (2063731785728, 32385822720))
EVICTION_THRESHOLD = 100 * 2**20  # bytes: the kubelet's memory.available<100Mi
_GIB = 2**30
_MIB = 2**20


@dataclass(frozen=True)
class Allocatable:
    """What pods can request on one node: cpu in cores (to the millicore), memory in bytes."""

    cpu: Decimal
    memory: int


def _reserved(capacity: int, tiers: tuple[tuple[int, float], ...]) -> int:
    """reserved.go calculateReserved: each tier's rate on the part of `capacity` between its bound and the next one,
    summed as float64 and truncated."""
    reserved = 0.0
    for i, (bound, rate) in enumerate(tiers):
        top = tiers[i + 1][0] if i + 1 < len(tiers) and tiers[i + 1][0] < capacity else capacity
        part = float(top - bound) * rate
        if part > 0:
            reserved += part
    return int(reserved)


def kernel_reserved(memory_bytes: int) -> int:
    """The bytes the Linux kernel keeps of a COS node's memory, as GKE's autoscaler predicts them (see above)."""
    points = _KERNEL_RESERVED_COS
    above = next((i for i, (physical, _) in enumerate(points) if physical >= memory_bytes), len(points))
    if above < len(points) and points[above][0] == memory_bytes:
        return points[above][1]
    (x1, y1), (x2, y2) = (points[-2], points[-1]) if above == len(points) else (points[above - 1], points[above])
    return y1 + int((memory_bytes - x1) / (x2 - x1) * (y2 - y1))


def kube_reserved_memory(memory_bytes: int, image_streaming: bool = True) -> int:
    """The bytes GKE reserves for the kubelet and system daemons on a node of `memory_bytes` (see above)."""
    mib = memory_bytes // _MIB
    if mib <= 1000:
        return (_SMALL_MACHINE_RESERVED_MIB if mib > 0 else 0) * _MIB
    reserved = _reserved(mib, _MEMORY_TIERS_MIB)
    if image_streaming:
        reserved += _reserved(mib, tuple((bound, rate * _IMAGE_STREAMING_FACTOR) for bound, rate in _MEMORY_TIERS_MIB))
    return reserved * _MIB


def gke_reserved_cpu(vcpus: int) -> Decimal:
    """The cores GKE reserves for system components on a node of `vcpus` (whole millicores, as GKE counts them)."""
    return Decimal(_reserved(vcpus * 1000, _CPU_TIERS_MILLICORES)) / 1000


def gke_reserved_memory(memory_gib: int | Decimal, image_streaming: bool = True) -> int:
    """The bytes of a node of `memory_gib` that pods cannot request, but for the eviction threshold: the kernel's share
    and kube-reserved (see above)."""
    memory = int(Decimal(memory_gib) * _GIB)
    return kernel_reserved(memory) + kube_reserved_memory(memory, image_streaming)


def gke_allocatable(vcpus: int, memory_gib: int | Decimal, image_streaming: bool = True) -> Allocatable:
    """A GKE Standard node's allocatable cpu and memory for a VM of `vcpus` and `memory_gib`, as GKE's cluster
    autoscaler predicts it (see above): a request equal to what this returns fits, one above it never scales a pool
    up."""
    if vcpus <= 0 or memory_gib <= 0:
        raise ValueError(f"a VM size needs vCPUs and memory above 0, not {vcpus} vCPU / {memory_gib} GiB")
    memory = int(Decimal(memory_gib) * _GIB) - gke_reserved_memory(memory_gib, image_streaming) - EVICTION_THRESHOLD
    return Allocatable(cpu=vcpus - gke_reserved_cpu(vcpus), memory=max(memory, 0))


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
    179.48 CPU / 686.68 GiB allocatable". Both figures are rounded down, so each can be requested as written."""
    room = gke_allocatable(machine.vcpus, machine.memory_gib)
    gib = (Decimal(room.memory) / _GIB).quantize(Decimal("0.01"), rounding=ROUND_FLOOR)
    return (f"{machine.vcpus} vCPU / {machine.memory_gib} GiB, of which GKE leaves pods "
            f"{format(room.cpu.normalize(), 'f')} CPU / {format(gib.normalize(), 'f')} GiB allocatable")
