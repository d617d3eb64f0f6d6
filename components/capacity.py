"""Capacity arithmetic: how TPU plans map onto GKE node pools and Kueue quotas. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass

from components.catalog import TpuSlice

NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
PLAN_LABEL = "tpu-fallback/plan"  # on every TPU node, so one flavor can select several pools of a plan
QUEUED_LABEL = "cloud.google.com/gke-queued"
ON_DEMAND = "on-demand"
FLEX_START = "flex-start"


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


def flavor_node_labels(plan: str, pools: tuple[PoolShape, ...]) -> dict[str, str]:
    """Node labels a Kueue ResourceFlavor uses to select the pools of a plan."""
    if len(pools) == 1:
        return {NODEPOOL_LABEL: pools[0].name}
    return {PLAN_LABEL: plan}


def tpu_chips(tpu: TpuSlice, max_slices: int) -> int:
    """The TPU chips a plan can run at once: its quota in Kueue."""
    return tpu.chips_per_slice * max_slices


def pool_cpu(tpu: TpuSlice, max_slices: int) -> int:
    return tpu.machine.vcpus * tpu.hosts_per_slice * max_slices


def pool_memory_gib(tpu: TpuSlice, max_slices: int) -> int:
    return tpu.machine.memory_gib * tpu.hosts_per_slice * max_slices
