"""The Cloud TPU catalog: families, machine types, topologies, zones and what they imply.

Pure Python (no Pulumi) so that node counts, Kueue quotas and RayJob shapes can all be derived
from one description and tested directly. Every fact carries its source; the zone tables are dated
(as read on CATALOG_DATE) because Google adds zones: a zone missing here is refused with a message
saying how to proceed, never silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

CATALOG_DATE = "2026-12-01"


@dataclass(frozen=True)
class MachineType:
    name: str
    chips_per_vm: int
    vcpus: int
    memory_gib: int
    single_host_topologies: tuple[str, ...]
    multi_host_topologies: tuple[str, ...]

    @property
    def topologies(self) -> tuple[str, ...]:
        return self.single_host_topologies + self.multi_host_topologies

    @property
    def size_known(self) -> bool:
        """False where no source gave the VM's vCPU and memory (0 in the catalog): the stack config must (tpu.hostVcpus,
        tpu.hostMemoryGib), since Kueue's cpu/memory quotas are sized from them."""
        return self.vcpus > 0 and self.memory_gib > 0


@dataclass(frozen=True)
class TpuFamily:
    name: str
    accelerator_label: str  # value of the node label cloud.google.com/gke-tpu-accelerator
    ray_accelerator_type: str  # Ray Train's ScalingConfig.accelerator_type
    machine_types: tuple[MachineType, ...]
    # Zones where the family is offered on demand (Cloud TPU "TPU regions and zones"; not exhaustive: used to
    # reject zones known to lack it).
    known_zones: frozenset[str]
    # Zones where GKE offers the family with flex-start (GKE "About flex-start provisioning mode", TPU section:
    # "Flex-start supports the following version and zones"); empty: the family has no flex-start.
    flex_start_zones: frozenset[str]
    topology_rule: str = ""  # how the valid multi-host topologies are formed, for error messages
    # The same for the family's multi-host machine type alone, where the family has other machine types too.
    machine_rule: str = ""
    # How a multi-host slice's node pool gets its shape: TPU_TOPOLOGY (the node pool's placementPolicy.tpuTopology,
    # gcloud --tpu-topology) or WORKLOAD_POLICY (a Compute Engine resource policy, `workload_policy`, named in
    # placementPolicy.policyName, gcloud --placement-policy).
    multi_host_placement: str = "tpuTopology"
    min_gke_version: str | None = None  # the oldest GKE Standard version that offers the family, when GKE says
    # Why this project cannot make node pools of the family yet (None: it can); resolve_slice refuses with it.
    unsupported: str | None = None

    @property
    def supports_flex_start(self) -> bool:
        return bool(self.flex_start_zones)

    @property
    def topologies(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for machine in self.machine_types:
            for topology in machine.topologies:
                seen.setdefault(topology)
        return tuple(seen)

    def describe_topologies(self) -> str:
        """The valid topologies for a message: the list, or the rule where there are hundreds."""
        return self.topology_rule or ", ".join(self.topologies)

    def describe_machine_topologies(self, machine: MachineType) -> str:
        """A machine type's valid topologies for a message: the list, or the rule where there are hundreds."""
        if len(machine.topologies) <= 16:
            return ", ".join(machine.topologies)
        return self.machine_rule or self.topology_rule

    def machine_type(self, name: str) -> MachineType | None:
        return next((m for m in self.machine_types if m.name == name), None)


@dataclass(frozen=True)
class TpuSlice:
    """One slice of a family in a topology on a machine type: everything derived from it."""

    family: TpuFamily
    topology: str
    machine: MachineType

    @property
    def machine_type(self) -> str:
        return self.machine.name

    @property
    def accelerator_label(self) -> str:
        return self.family.accelerator_label

    @property
    def chips_per_slice(self) -> int:
        return math.prod(int(d) for d in self.topology.split("x"))

    @property
    def chips_per_host(self) -> int:
        return self.machine.chips_per_vm

    @property
    def hosts_per_slice(self) -> int:
        return self.chips_per_slice // self.chips_per_host

    @property
    def multi_host(self) -> bool:
        return self.topology in self.machine.multi_host_topologies


TPU_TOPOLOGY, WORKLOAD_POLICY = "tpuTopology", "workloadPolicy"

_V6E_V5E_MULTI_HOST = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")


def _two_d_family_machines(prefix: str, sizes: dict[int, tuple[int, int]]) -> tuple[MachineType, ...]:
    """v6e and v5e share a shape: 1t (1x1), 4t (2x2 single-host, 2x4.. multi-host), 8t (2x4 single-host)."""
    return (
        MachineType(f"{prefix}-1t", 1, *sizes[1], ("1x1",), ()),
        MachineType(f"{prefix}-4t", 4, *sizes[4], ("2x2",), _V6E_V5E_MULTI_HOST),
        MachineType(f"{prefix}-8t", 8, *sizes[8], ("2x4",), ()),
    )


def _three_d_topologies(max_cubes: int, non_decreasing: bool) -> tuple[str, ...]:
    """v5p and v4 slices: 2x2x2, 2x2x4, 2x4x4, then AxBxC of 4x4x4 cubes (each side a multiple of 4) up to
    `max_cubes` cubes - the rule of Google's xpk (src/xpk/core/system_characteristics.py,
    generate_tpu_topologies) and cluster-toolkit (pkg/config/hardware.go: ct5p maxCubes 140, ct4 64)."""
    most = 64  # cubes along one side (256 chips)
    # Enumerated in cubes with the product bound in the ranges (a few thousand shapes instead of 64^3 checks:
    # this runs at import, in every program and test process).
    big = [
        (4 * a, 4 * b, 4 * c)
        for a in range(1, min(most, max_cubes) + 1)
        for b in range(a if non_decreasing else 1, min(most, max_cubes // a) + 1)
        for c in range(b if non_decreasing else 1, min(most, max_cubes // (a * b)) + 1)
    ]
    return ("2x2x2", "2x2x4", "2x4x4", *(f"{a}x{b}x{c}" for a, b, c in sorted(big, key=lambda t: (math.prod(t), t))))


_V5P_TOPOLOGIES = _three_d_topologies(140, non_decreasing=True)
# TPU7x: a pod is 9,216 chips (Cloud TPU "TPU7x (Ironwood)", https://cloud.google.com/tpu/docs/tpu7x: "With a 9,216-chip
# footprint per Pod, TPU7x shares many similarities with TPU v5p"), so 144 4x4x4 cubes, in v5p's shapes; Google's
# xpk lists tpu7x-standard-4t with 2x2x1 (one host), 2x2x2, 2x2x4, 2x4x4 and AxBxC shapes of 4x4x4 cubes, sides in
# non-decreasing order (src/xpk/core/system_characteristics.py, gke_accelerator "tpu7x", 4 chips per VM,
# requires_placement_policy).
_TPU7X_TOPOLOGIES = _three_d_topologies(144, non_decreasing=True)
_V4_TOPOLOGIES = _three_d_topologies(64, non_decreasing=False)
_THREE_D_RULE = ("2x2x1 (one host), 2x2x2, 2x2x4, 2x4x4, or AxBxC with each side a multiple of 4 and at most {} "
                 "4x4x4 cubes{}")

FAMILIES: dict[str, TpuFamily] = {
    family.name: family
    for family in (
        TpuFamily(
            name="v6e",
            accelerator_label="tpu-v6e-slice",
            ray_accelerator_type="TPU-V6E",
            # vCPU / memory: GKE's cluster autoscaler machine table (k8s.io/gke-autoscaling cluster-autoscaler
            # machinetypes, family ct6e) gives ct6e-standard-1t 44/176 and -4t 180/720 as here, and -8t 180 / 1440
            # with withThreadsPerCoreOverride(1) (one thread per core; the 4t has two): the 8t's allocatable CPU is 180.
            # (The catalog said 360, an unsourced `gcloud compute machine-types list` reading.) Cloud TPU v6e page for
            # the topologies per machine type.
            machine_types=_two_d_family_machines("ct6e-standard", {1: (44, 176), 4: (180, 720), 8: (180, 1440)}),
            known_zones=frozenset({
                "us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b", "europe-west4-a", "asia-northeast1-b",
                "us-south1-a", "southamerica-east1-c", "asia-southeast1-b",
            }),
            # GKE's flex-start page (https://cloud.google.com/kubernetes-engine/docs/concepts/provisioning-model,
            # "Flex-start supports the following version and zones": v6e asia-northeast1-b, us-east5-a and us-east5-b;
            # TPUs from GKE 1.33.0-gke.1712000). Cloud TPU's own flex-start page (queued resources, not GKE) lists
            # only asia-northeast1-b and us-east5-a for v6e: the dev stack's us-east5-b is GKE's, as the tutorial's.
            flex_start_zones=frozenset({"asia-northeast1-b", "us-east5-a", "us-east5-b"}),
        ),
        TpuFamily(
            name="v5e",
            accelerator_label="tpu-v5-lite-podslice",
            ray_accelerator_type="TPU-V5LITEPOD",
            # Cloud TPU v5e page, VM types table: -1t 24/48, -4t 112/192, -8t 224/384.
            machine_types=_two_d_family_machines("ct5lp-hightpu", {1: (24, 48), 4: (112, 192), 8: (224, 384)}),
            known_zones=frozenset({
                "us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "us-east1-c", "us-east5-a",
                "europe-west4-b", "asia-southeast1-b",
            }),
            flex_start_zones=frozenset({"us-west4-a"}),
        ),
        TpuFamily(
            name="v5p",
            accelerator_label="tpu-v5p-slice",
            ray_accelerator_type="TPU-V5P",
            # 208 vCPU / 448 GiB: `gcloud compute machine-types list`.
            machine_types=(MachineType("ct5p-hightpu-4t", 4, 208, 448, ("2x2x1",), _V5P_TOPOLOGIES),),
            known_zones=frozenset({"us-central1-a", "us-east5-a", "europe-west4-b"}),
            flex_start_zones=frozenset({"us-east5-a"}),
            topology_rule=_THREE_D_RULE.format(140, ", sides in non-decreasing order (4x4x8, not 8x4x4)"),
        ),
        TpuFamily(
            name="v4",
            accelerator_label="tpu-v4-podslice",
            ray_accelerator_type="TPU-V4",
            # 240 vCPU / 407 GiB as GKE's TPU page gave it; not in the machine-types list we could read.
            machine_types=(MachineType("ct4p-hightpu-4t", 4, 240, 407, ("2x2x1",), _V4_TOPOLOGIES),),
            known_zones=frozenset({"us-central2-b"}),
            flex_start_zones=frozenset(),  # "TPU v3 and v4 are not supported"
            topology_rule=_THREE_D_RULE.format(64, ""),
        ),
        TpuFamily(
            # GKE, "About Ironwood (TPU7x) in GKE" (https://cloud.google.com/kubernetes-engine/docs/concepts/
            # tpu-ironwood): GKE Standard 1.34.0-gke.2201000 and later; multi-host slice node pools take a workload
            # policy (High throughput), applied with --placement-policy, which "replaces the --tpu-topology flag
            # used by other TPU versions"; each (4t) VM has 4 chips. The node label value and machine types as xpk uses
            # them (above). Ray's accelerator type as Ray names TPU generations (TPU-V<generation>).
            name="tpu7x",
            accelerator_label="tpu7x",
            ray_accelerator_type="TPU-V7X",
            # vCPU and memory: GKE's cluster autoscaler machine table (GoogleCloudPlatform/cluster-autoscaler
            # 7d250507339b3a7583b380349f217ea191ff15ff, pkg/cloudprovider/gke/machinetypes/
            # deprecated_machine_types_config.go, family tpu7x: NewMachineTypeInfo("tpu7x-standard-1t", 56, 248) and
            # ("tpu7x-standard-4t", 224, 992), memory in GiB: `math.Floor(memoryGb * units.GiB)`, machine_type.go).
            # Chips per VM and single-host topologies: the same repository's deprecated_tpu_config.go (fixedTpuCount
            # tpu7x-standard-1t 1, -4t 4; singleHostTopologyMap 1t "1x1x1", 4t "2x2x1"), as Google's xpk lists them
            # (src/xpk/core/system_characteristics.py: tpu7x-standard-1t supported_topologies ['1x1x1']).
            machine_types=(MachineType("tpu7x-standard-1t", 1, 56, 248, ("1x1x1",), ()),
                           MachineType("tpu7x-standard-4t", 4, 224, 992, ("2x2x1",), _TPU7X_TOPOLOGIES)),
            # Cloud TPU "TPU regions and zones" (https://cloud.google.com/tpu/docs/regions-zones): TPU7x in
            # us-central1-c and the AI zone us-central1-ai1a.
            known_zones=frozenset({"us-central1-c", "us-central1-ai1a"}),
            # Flex-start, queued and not: Google's cluster-toolkit ships TPU7x blueprints for both
            # (GoogleCloudPlatform/cluster-toolkit 1047080375afbb44da4b596be314634e7486af4a,
            # examples/gke-consumption-options/dws-flex-start/gke-tpu-7x/gke-tpu-7x.yaml `enable_flex_start: true` and
            # examples/gke-consumption-options/dws-flex-start-queued-provisioning/gke-tpu-7x/gke-tpu-7x.yaml
            # `enable_flex_start: true`, `enable_queued_provisioning: true`, machine_type tpu7x-standard-4t), each
            # deployment file giving "example: us-central1-c" as the zone. GKE's flex-start page ("About flex-start
            # provisioning mode", as read) lists no TPU7x zone yet: us-central1-c, the blueprints' zone, is the one
            # listed here; allowUnlistedZone takes another.
            flex_start_zones=frozenset({"us-central1-c"}),
            topology_rule="1x1x1 (tpu7x-standard-1t), " + _THREE_D_RULE.format(
                144, ", sides in non-decreasing order (4x4x8, not 8x4x4)"),
            machine_rule=_THREE_D_RULE.format(144, ", sides in non-decreasing order (4x4x8, not 8x4x4)"),
            multi_host_placement=WORKLOAD_POLICY,
            # GKE's Ironwood page (above). cluster-toolkit's examples/gke-tpu-7x/README.md asks for 1.34.3-gke.1318000
            # for its blueprint; GKE's own figure is the one checked here.
            min_gke_version="1.34.0-gke.2201000",
        ),
    )
}

ALL_KNOWN_ZONES: frozenset[str] = frozenset().union(*(f.known_zones | f.flex_start_zones for f in FAMILIES.values()))


class CatalogError(ValueError):
    """A family, topology or machine type that the catalog does not allow."""


def family(name: str) -> TpuFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise CatalogError(f"unknown TPU family {name!r}; valid: {', '.join(FAMILIES)}") from None


def resolve_slice(family_name: str, topology: str, machine_type: str | None = None,
                  host_size: tuple[int, int] | None = None) -> TpuSlice:
    """Derive a slice from a family, a topology and optionally an explicit machine type.

    Without a machine type the first one of the family (in catalog order 1t, 4t, 8t) that supports
    the topology is chosen, so v6e 2x4 means two ct6e-standard-4t hosts; ask for -8t for one host.
    `host_size` (vCPU, GiB) stands in for a machine size the catalog does not know (MachineType.size_known).
    """
    fam = family(family_name)
    if fam.unsupported:
        raise CatalogError(f"TPU family {fam.name!r}: {fam.unsupported}")
    if topology not in fam.topologies:
        raise CatalogError(f"{topology!r} is not a valid {fam.name} topology; valid: {fam.describe_topologies()}")
    if machine_type is None:
        machine = next(m for m in fam.machine_types if topology in m.topologies)
    else:
        found = fam.machine_type(machine_type)
        if found is None:
            raise CatalogError(
                f"machine type {machine_type!r} is not a {fam.name} machine type; "
                f"valid: {', '.join(m.name for m in fam.machine_types)}"
            )
        if topology not in found.topologies:
            other = next((m.name for m in fam.machine_types if topology in m.topologies), None)
            raise CatalogError(
                f"not a valid topology for machine type {found.name}; valid: {fam.describe_machine_topologies(found)}"
                + (f" ({topology} runs on {other}: set machineType to it or leave machineType out)" if other else "")
            )
        machine = found
    if host_size is not None:
        # The VM's vCPU and memory as the stack config gives them, where the catalog has no source for them.
        machine = replace(machine, vcpus=host_size[0], memory_gib=host_size[1])
    return TpuSlice(family=fam, topology=topology, machine=machine)


def workload_policy(fam: TpuFamily, topology: str) -> dict[str, str] | None:
    """The workload policy a multi-host slice of a WORKLOAD_POLICY family needs: a Compute Engine resource policy's
    `workloadPolicy` (pulumi-gcp compute.ResourcePolicy workload_policy: type HIGH_THROUGHPUT, accelerator_topology
    "can be set only when the workload policy type is HIGH_THROUGHPUT"), named by the node pool's
    placementPolicy.policyName. None for a single-host topology or a TPU_TOPOLOGY family."""
    machine = next((m for m in fam.machine_types if topology in m.topologies), None)
    if machine is None:
        raise CatalogError(f"{topology!r} is not a valid {fam.name} topology; valid: {fam.describe_topologies()}")
    if fam.multi_host_placement != WORKLOAD_POLICY or topology not in machine.multi_host_topologies:
        return None
    return {"type": "HIGH_THROUGHPUT", "acceleratorTopology": topology}
