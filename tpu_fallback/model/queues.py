"""The fallback queues as data: flavors in the order Kueue tries them, with their node labels and quotas.

Pure Python. `queue_plan` is the single-cluster plan A -> plan B queue; `manager_queue_plan` is a
MultiKueue manager's. The renderers (tpu_fallback.render.kueue) turn a plan into Kueue objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_fallback.model import capacity
from tpu_fallback.model.catalog import TpuSlice
from tpu_fallback.model.labels import NODEPOOL_LABEL, TPU_RESOURCE
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.settings import Settings

# The resources every flavor quotas, in this order (Kueue requires one order per resource group).
COVERED_RESOURCES = ("cpu", "memory", TPU_RESOURCE)
SYSTEM_FLAVOR, ON_DEMAND_FLAVOR, FLEX_FLAVOR = "default-cpu", "on-demand", "dws"
MULTIKUEUE_FLAVOR = "multikueue"
# The tutorial writes "infinite" as 1e9 of each resource.
_UNLIMITED = capacity.UNLIMITED_AMOUNT
UNLIMITED: dict[str, int | str] = {"cpu": _UNLIMITED, "memory": f"{_UNLIMITED}Gi", TPU_RESOURCE: _UNLIMITED}


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: dict[str, str]
    quota: dict[str, int | str]  # resource -> nominalQuota, in COVERED_RESOURCES order
    plan: str = ""  # capacity.ON_DEMAND or capacity.FLEX_START for TPU flavors


@dataclass(frozen=True)
class QueuePlan:
    cluster_queue: str
    flavors: tuple[Flavor, ...]  # in the order Kueue tries them
    provisioning_check: bool  # dws-prov on the dws flavor
    namespace_labels: dict[str, str] | None
    local_queues: tuple[tuple[str, str], ...]  # (namespace, name)
    # ProvisioningRequest parameters for plan B (maxRunDurationSeconds: GKE's cap on a queued node's run time).
    provisioning_parameters: tuple[tuple[str, str], ...] = ()

    def flavor(self, name: str) -> Flavor | None:
        return next((f for f in self.flavors if f.name == name), None)

    def flavors_of(self, plan: str) -> list[str]:
        """The names of a plan's flavors (one per node pool), in the order Kueue tries them."""
        return [f.name for f in self.flavors if f.plan == plan]


def _quota(amounts: Resources, tpu_chips: int) -> dict[str, int | str]:
    return {"cpu": amounts.cpu, "memory": amounts.memory, TPU_RESOURCE: tpu_chips}


def plan_flavors(plan: str, base: str, pools: tuple[capacity.PoolShape, ...], tpu: TpuSlice,
                 total: Resources | None) -> list[Flavor]:
    """The flavors of one plan: one per node pool, each selecting its pool by name.

    A multi-host slice must run in one pool (on GKE two pools are two separate ICI slices), and the scheduler
    alone spreads a slice's pods over every pool with free nodes. A flavor per pool makes Kueue pin each job
    to one pool by construction: flavors `<base>`, `<base>-2`, ... in pool order, each with its pool's chips
    and its share of the plan's cpu/memory quota. `total` None is the tutorial's unlimited plan B: the last
    pool's flavor takes every job beyond the other pools (each capped at its own size), so those jobs queue
    for DWS capacity instead of waiting in Kueue.
    """
    names = [base] + [f"{base}-{i}" for i in range(2, len(pools) + 1)]
    flavors = []
    for i, (name, pool) in enumerate(zip(names, pools, strict=True)):
        slices = pool.max_nodes // tpu.hosts_per_slice if tpu.multi_host else pool.max_nodes
        if total is None:
            quota = dict(UNLIMITED) if i == len(pools) - 1 else \
                _quota(capacity.pool_resources(tpu, slices), capacity.tpu_chips(tpu, slices))
        else:
            quota = _quota(capacity.share(total, len(pools)), capacity.tpu_chips(tpu, slices))
        flavors.append(Flavor(name, {NODEPOOL_LABEL: pool.name}, quota, plan))
    return flavors


def queue_plan(settings: Settings) -> QueuePlan:
    """Flavors in fallback order with quotas derived from the pools' real capacity."""
    tpu, q = settings.tpu, settings.queues
    flavors = [Flavor(SYSTEM_FLAVOR, {NODEPOOL_LABEL: settings.system_pool.name}, _quota(q.system_quota, 0))]
    if settings.on_demand.max_slices > 0:
        pools = capacity.pool_layout(settings.on_demand.name, tpu, settings.on_demand.max_slices)
        flavors += plan_flavors(capacity.ON_DEMAND, ON_DEMAND_FLAVOR, pools, tpu, settings.on_demand_quota)
    flex = settings.flex_start
    if flex.active:
        pools = capacity.pool_layout(flex.name, tpu, flex.max_slices)
        capped = capacity.pool_resources(tpu, flex.max_slices) if q.cap_flex_start else None
        flavors += plan_flavors(capacity.FLEX_START, FLEX_FLAVOR, pools, tpu, capped)
    return QueuePlan(
        cluster_queue=q.cluster_queue,
        flavors=tuple(flavors),
        provisioning_check=flex.active,
        namespace_labels=dict(q.namespace_labels) if q.namespace_labels else None,
        local_queues=tuple((lq.namespace, lq.name) for lq in q.local_queues),
        provisioning_parameters=(("maxRunDurationSeconds", flex.max_run_duration[:-1]),) if flex.max_run_duration
        else (),
    )


def manager_queue_plan(settings: Settings) -> QueuePlan:
    """A MultiKueue manager admits on an unlimited flavor without node labels: the workers hold the real quotas."""
    q = settings.queues
    return QueuePlan(
        cluster_queue=q.cluster_queue,
        flavors=(Flavor(MULTIKUEUE_FLAVOR, {}, dict(UNLIMITED)),),
        provisioning_check=False,  # Kueue refuses MultiKueue and ProvisioningRequest checks on one queue
        namespace_labels=dict(q.namespace_labels) if q.namespace_labels else None,
        local_queues=tuple((lq.namespace, lq.name) for lq in q.local_queues),
    )
