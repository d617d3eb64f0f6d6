"""The Cloud TPU catalog: families, machine types, topologies and what they imply.

Pure Python (no Pulumi) so that node counts, Kueue quotas and RayJob shapes can all be derived
from one description and tested directly. Facts: the GKE TPU documentation ("Plan TPUs in GKE", "About TPUs in GKE").
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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


@dataclass(frozen=True)
class TpuFamily:
    name: str
    accelerator_label: str  # value of the node label cloud.google.com/gke-tpu-accelerator
    ray_accelerator_type: str  # Ray Train's ScalingConfig.accelerator_type
    machine_types: tuple[MachineType, ...]
    supports_flex_start: bool
    # Zones where GKE offers the family (not exhaustive: used to reject zones known to lack it).
    known_zones: frozenset[str]

    @property
    def topologies(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for machine in self.machine_types:
            for topology in machine.topologies:
                seen.setdefault(topology)
        return tuple(seen)

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


_V6E_V5E_MULTI_HOST = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")


def _two_d_family_machines(prefix: str, sizes: dict[int, tuple[int, int]]) -> tuple[MachineType, ...]:
    """v6e and v5e share a shape: 1t (1x1), 4t (2x2 single-host, 2x4.. multi-host), 8t (2x4 single-host)."""
    return (
        MachineType(f"{prefix}-1t", 1, *sizes[1], ("1x1",), ()),
        MachineType(f"{prefix}-4t", 4, *sizes[4], ("2x2",), _V6E_V5E_MULTI_HOST),
        MachineType(f"{prefix}-8t", 8, *sizes[8], ("2x4",), ()),
    )


_V5P_TOPOLOGIES = (
    "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16", "16x16x16", "16x16x24",
)
_V4_TOPOLOGIES = (
    "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16", "4x16x16", "8x16x16",
)

FAMILIES: dict[str, TpuFamily] = {
    family.name: family
    for family in (
        TpuFamily(
            name="v6e",
            accelerator_label="tpu-v6e-slice",
            ray_accelerator_type="TPU-V6E",
            # ct6e-standard-1t: 44 vCPU / 176 GiB (Compute Engine machine types list).
            machine_types=_two_d_family_machines("ct6e-standard", {1: (44, 176), 4: (180, 720), 8: (180, 1440)}),
            supports_flex_start=True,
            known_zones=frozenset({
                "us-east5-a", "us-east5-b", "us-east1-d", "us-central1-b", "us-south1-a",
                "europe-west4-a", "asia-northeast1-b", "southamerica-east1-c", "asia-southeast1-b",
            }),
        ),
        TpuFamily(
            name="v5e",
            accelerator_label="tpu-v5-lite-podslice",
            ray_accelerator_type="TPU-V5LITEPOD",
            machine_types=_two_d_family_machines("ct5lp-hightpu", {1: (24, 48), 4: (112, 192), 8: (224, 384)}),
            supports_flex_start=True,
            known_zones=frozenset({
                "us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a", "us-east1-c", "us-east5-a",
                "europe-west4-b", "asia-southeast1-b",
            }),
        ),
        TpuFamily(
            name="v5p",
            accelerator_label="tpu-v5p-slice",
            ray_accelerator_type="TPU-V5P",
            machine_types=(MachineType("ct5p-hightpu-4t", 4, 208, 448, ("2x2x1",), _V5P_TOPOLOGIES),),
            supports_flex_start=True,
            known_zones=frozenset({"us-central1-a", "us-east5-a", "europe-west4-b"}),
        ),
        TpuFamily(
            name="v4",
            accelerator_label="tpu-v4-podslice",
            ray_accelerator_type="TPU-V4",
            machine_types=(MachineType("ct4p-hightpu-4t", 4, 240, 407, ("2x2x1",), _V4_TOPOLOGIES),),
            supports_flex_start=False,
            known_zones=frozenset({"us-central2-b"}),
        ),
    )
}

ALL_KNOWN_ZONES: frozenset[str] = frozenset().union(*(f.known_zones for f in FAMILIES.values()))


class CatalogError(ValueError):
    """A family, topology or machine type that the catalog does not allow."""


def family(name: str) -> TpuFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise CatalogError(f"unknown TPU family {name!r}; valid: {', '.join(FAMILIES)}") from None


def resolve_slice(family_name: str, topology: str, machine_type: str | None = None) -> TpuSlice:
    """Derive a slice from a family, a topology and optionally an explicit machine type.

    Without a machine type the first one of the family (in catalog order 1t, 4t, 8t) that supports
    the topology is chosen, so v6e 2x4 means two ct6e-standard-4t hosts; ask for -8t for one host.
    """
    fam = family(family_name)
    if topology not in fam.topologies:
        raise CatalogError(f"{topology!r} is not a valid {fam.name} topology; valid: {', '.join(fam.topologies)}")
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
            raise CatalogError(
                f"{topology!r} is not a valid topology for {found.name}; valid: {', '.join(found.topologies)}"
            )
        machine = found
    return TpuSlice(family=fam, topology=topology, machine=machine)
