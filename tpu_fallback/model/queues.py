"""The fallback queues as data: flavors in the order Kueue tries them, with their node labels and quotas.

Pure Python. `queue_plan` is the single-cluster queue down the capacity ladder (tpu_fallback.model.ladder: today's
plan A -> plan B, or a `ladder` of rungs); `manager_queue_plan` is a MultiKueue manager's. The renderers
(tpu_fallback.render.kueue) turn a plan into Kueue objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpu_fallback.model import capacity
from tpu_fallback.model.catalog import TpuSlice
from tpu_fallback.model.labels import NODEPOOL_LABEL, TPU_RESOURCE
from tpu_fallback.model.ladder import FLEX_START, ON_DEMAND, Ladder
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
    plan: str = ""  # the TPU flavors' rung kind (model.ladder: on-demand, flex-start, reservation, spot); "" system
    rung: str = ""  # the TPU flavors' rung (model.ladder.Rung.name)

    @property
    def closable(self) -> bool:
        """A TPU flavor the fallback controller closes on its rung's stock-out: every rung's but the queued one."""
        return bool(self.plan) and self.plan != FLEX_START


@dataclass(frozen=True)
class QueuePlan:
    cluster_queue: str
    flavors: tuple[Flavor, ...]  # in the order Kueue tries them
    provisioning_check: bool  # dws-prov on the dws flavor
    namespace_labels: dict[str, str] | None
    local_queues: tuple[tuple[str, str], ...]  # (namespace, name)
    # ProvisioningRequest parameters for plan B (maxRunDurationSeconds: GKE's cap on a queued node's run time).
    provisioning_parameters: tuple[tuple[str, str], ...] = ()
    # The rungs the TPU flavors belong to, most preferred first.
    ladder: Ladder = field(default_factory=lambda: Ladder(()))

    def flavor(self, name: str) -> Flavor | None:
        return next((f for f in self.flavors if f.name == name), None)

    def flavors_of(self, plan: str) -> list[str]:
        """The names of a plan's flavors (one per node pool), in the order Kueue tries them."""
        return [f.name for f in self.flavors if f.plan == plan]

    def flavors_of_rung(self, rung: str) -> list[str]:
        return [f.name for f in self.flavors if f.rung == rung]

    @property
    def closable_flavors(self) -> list[str]:
        """The flavors of every rung the fallback controller may close, in ladder order."""
        return [f.name for f in self.flavors if f.closable]


def _quota(amounts: Resources, tpu_chips: int) -> dict[str, int | str]:
    return {"cpu": amounts.cpu, "memory": amounts.memory, TPU_RESOURCE: tpu_chips}


def plan_flavors(plan: str, base: str, pools: tuple[capacity.PoolShape, ...], tpu: TpuSlice,
                 total: Resources | None, rung: str = "") -> list[Flavor]:
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
        flavors.append(Flavor(name, {NODEPOOL_LABEL: pool.name}, quota, plan, rung))
    return flavors


def queue_plan(settings: Settings) -> QueuePlan:
    """Flavors in ladder order with quotas derived from each rung's pools' real capacity.

    Every rung's TPU quota is its pools' chips. Its cpu/memory: the queued (flex-start) rung's is the tutorial's
    unlimited, or its pools' size with queues.capFlexStart; the onDemand rung's is queues.quotas.onDemand when set.
    Otherwise today's plan A keeps the tutorial's ON_DEMAND_QUOTA_PER_HOST per TPU host, and a `ladder`'s rungs
    get their pools' size (every host's vCPUs and memory), so a quota never admits less than its pool runs.
    """
    tpu, q = settings.tpu, settings.queues
    ladder = settings.capacity_ladder
    flavors = [Flavor(SYSTEM_FLAVOR, {NODEPOOL_LABEL: settings.system_pool.name}, _quota(q.system_quota, 0))]
    for rung in ladder.rungs:
        total: Resources | None
        if rung.queued:
            total = capacity.pool_resources(tpu, rung.max_slices) if q.cap_flex_start else None
        elif rung.kind == ON_DEMAND and q.on_demand_quota is not None:
            total = q.on_demand_quota
        elif ladder.explicit:
            total = capacity.pool_resources(tpu, rung.max_slices)
        else:
            total = capacity.on_demand_quota(None, tpu, rung.max_slices)
        flavors += plan_flavors(rung.kind, rung.flavor, rung.pools(tpu), tpu, total, rung.name)
    queued = ladder.queued
    duration = queued.max_run_duration if queued is not None else None
    return QueuePlan(
        cluster_queue=q.cluster_queue,
        flavors=tuple(flavors),
        provisioning_check=queued is not None,
        namespace_labels=dict(q.namespace_labels) if q.namespace_labels else None,
        local_queues=tuple((lq.namespace, lq.name) for lq in q.local_queues),
        provisioning_parameters=(("maxRunDurationSeconds", duration[:-1]),) if duration else (),
        ladder=ladder,
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


def node_pool_names(settings: Settings) -> dict[str, list[str]]:
    """The `nodePools` output: today's plans as {onDemand, flexStart}; a `ladder`'s pools by rung name, in order."""
    ladder = settings.capacity_ladder
    names = {rung.name: [p.name for p in rung.pools(settings.tpu)] for rung in ladder.rungs}
    if ladder.explicit:
        return names
    by_kind = {rung.kind: names[rung.name] for rung in ladder.rungs}
    return {"onDemand": by_kind.get(ON_DEMAND, []), "flexStart": by_kind.get(FLEX_START, [])}


def flavor_names(plan: QueuePlan) -> dict[str, str | None]:
    """The `flavors` output: the system flavor, and the first flavor of the onDemand and of the flex-start rung
    (None without one; a ladder's other rungs are in `nodePools` and the ClusterQueue)."""
    def first(kind: str) -> str | None:
        return next((f.name for f in plan.flavors if f.plan == kind), None)

    return {"system": SYSTEM_FLAVOR, "onDemand": first(ON_DEMAND), "flexStart": first(FLEX_START)}
