"""The reviewer's view of an infra stack: capacity and concurrency per cluster and plan (each rung of a capacity
ladder), list-price cost, a diagram.

Everything is derived from the stack's Settings with the model's own arithmetic (tpu_fallback.model.capacity,
.queues.queue_plan, .catalog), so it states what the rendered program builds:

- capacity: pools x slices x hosts x chips per host = chips, per plan; the Kueue quota of every flavor;
- concurrency: how many jobs of the jobs stack's shape run at once on each plan, and what limits it (a flavor's
  TPU/cpu/memory quota, the pool's size, the system pool's CPU quota, the system pool's machine);
- cost: per hour idle (GKE fee + system pool) and at full scale, per plan and per job, from the dated list-price
  table (tpu_fallback/offline/prices.yaml) with the cluster's region applied;
- a Mermaid diagram of clusters, pools per plan, Kueue, queues and, for MultiKueue, the manager -> workers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

from tpu_fallback.model import capacity, queues
from tpu_fallback.model import jobs as jobs_model
from tpu_fallback.model.jobs import JobSpec, TpuFlavor
from tpu_fallback.model.labels import TPU_RESOURCE
from tpu_fallback.model.ladder import CONFIG_KIND, KIND_TEXT, KINDS, RESERVATION, SPOT, Ladder
from tpu_fallback.model.quantity import parse_quantity
from tpu_fallback.model.settings import Settings
from tpu_fallback.offline.prices import Price, PriceTable, money
from tpu_fallback.offline.stacks import JobShape

PLAN_NAMES = {capacity.ON_DEMAND: "plan A (on-demand)", capacity.FLEX_START: "plan B (DWS flex-start)"}


def plan_name(ladder: Ladder, plan: str) -> str:
    """"plan A (on-demand)" for today's two plans; "rung 3 spot (spot)" for a rung of a `ladder`."""
    if not ladder.explicit and plan in PLAN_NAMES:
        return PLAN_NAMES[plan]
    for i, rung in enumerate(ladder.rungs, 1):
        if rung.name == plan:
            return f"rung {i} {rung.name} ({KIND_TEXT[rung.kind]})"
    return plan


def _short(name: str) -> str:
    """"plan A" of "plan A (on-demand)", "rung 3 spot" of "rung 3 spot (spot)"."""
    return name.split(" (")[0]
MIB = Decimal(2**20)
GIB = Decimal(2**30)

# Memory per vCPU of Compute Engine's predefined shapes (Compute Engine "General-purpose machine family": standard,
# highmem and highcpu shapes; N1 has its own ratios). Used to size the system pool's machine.
_GIB_PER_VCPU = {"standard": Decimal(4), "highmem": Decimal(8), "highcpu": Decimal(1)}
_N1_GIB_PER_VCPU = {"standard": Decimal("3.75"), "highmem": Decimal("6.5"), "highcpu": Decimal("0.9")}
_MACHINE = re.compile(r"^(n1|n2|n2d|n4|e2|c3|c3d|c4|c4d)-(standard|highmem|highcpu)-(\d+)$")


def machine_shape(machine_type: str) -> tuple[int, Decimal] | None:
    """vCPUs and GiB of a predefined CPU machine type (n2-standard-16: 16, 64); None for one it cannot size."""
    match = _MACHINE.match(machine_type)
    if not match:
        return None
    series, kind, vcpus = match.group(1), match.group(2), int(match.group(3))
    ratio = (_N1_GIB_PER_VCPU if series == "n1" else _GIB_PER_VCPU)[kind]
    return vcpus, ratio * vcpus


def _floor(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_FLOOR))


def _gib(amount: Decimal) -> str:
    value = amount / GIB
    if value == value.to_integral_value():
        return f"{value.normalize():f}Gi"
    return f"{value.quantize(Decimal('0.01')).normalize():f}Gi ({(amount / MIB).normalize():f}Mi)"


def _quantity(value: Decimal) -> str:
    return f"{value.normalize():f}"


# --------------------------------------------------------------------------------------------
# Capacity and concurrency
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    name: str
    plan: str  # its rung's name (today's plans: on-demand, flex-start)
    slices: int
    hosts_per_slice: int
    chips_per_host: int
    machine_type: str
    kind: str = ""  # its rung's kind (model.ladder): on-demand, flex-start, reservation, spot

    @property
    def chips(self) -> int:
        return self.slices * self.hosts_per_slice * self.chips_per_host


@dataclass(frozen=True)
class FlavorFit:
    flavor: queues.Flavor
    check: str | None  # the admission check on this flavor (dws-prov)
    pool: Pool | None
    admits: int | None  # jobs the flavor's quota admits at once; None: unlimited
    admits_limit: str  # which quota decides it
    runs: int | None  # jobs its pool runs at once (None for the system flavor)


@dataclass(frozen=True)
class PlanRun:
    plan: str
    chips: int
    admits: int | None
    runs: int
    limit: str


@dataclass(frozen=True)
class Job:
    """A job of a shape on one cluster: its TPU slices and what it takes from the quotas."""

    shape: JobShape
    hosts: int
    slices: int | None  # None: `hosts` is not a whole number of this cluster's slices
    chips: int
    cpu: Decimal
    memory: Decimal
    system_cpu: Decimal
    system_memory: Decimal


@dataclass(frozen=True)
class ClusterReport:
    name: str
    role: str  # "cluster", "worker <name>", "manager", "existing cluster"
    location: str
    settings: Settings | None  # None for a MultiKueue manager (it runs no TPU work)
    autopilot: bool = False
    pools: tuple[Pool, ...] = ()
    flavors: tuple[FlavorFit, ...] = ()
    plans: tuple[PlanRun, ...] = ()
    job: Job | None = None
    system_quota_jobs: int | None = None
    machine_jobs: int | None = None
    machine: str = ""  # the system pool, "1 × n2-standard-16 (16 vCPU / 64 GiB each)"
    system_pool: tuple[str, int] | None = None  # (machine type, nodes); None: Autopilot
    at_once: int = 0
    limit: str = ""

    @property
    def region(self) -> str:
        parts = self.location.split("-")
        return "-".join(parts[:2]) if len(parts) > 2 else self.location

    @property
    def ladder(self) -> Ladder:
        return self.settings.capacity_ladder if self.settings is not None else Ladder(())

    def plan_name(self, plan: str) -> str:
        return plan_name(self.ladder, plan)

    def kind_of(self, plan: str) -> str:
        rung = self.ladder.rung(plan)
        return rung.kind if rung is not None else plan


@dataclass(frozen=True)
class StackReport:
    clusters: tuple[ClusterReport, ...]
    shape: JobShape
    multikueue: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tpu_clusters(self) -> tuple[ClusterReport, ...]:
        return tuple(c for c in self.clusters if c.settings is not None and c.role != "manager")

    @property
    def at_once(self) -> int:
        return sum(c.at_once for c in self.tpu_clusters)


def plan_pools(settings: Settings) -> tuple[Pool, ...]:
    """Every TPU pool of the cluster in ladder order (plan A first), with its slices (the model's pool layout)."""
    tpu = settings.tpu
    pools: list[Pool] = []
    for rung in settings.capacity_ladder.rungs:
        for shape in rung.pools(tpu):
            slices = shape.max_nodes // tpu.hosts_per_slice if tpu.multi_host else shape.max_nodes
            pools.append(Pool(shape.name, rung.name, slices, tpu.hosts_per_slice, tpu.chips_per_host,
                              tpu.machine_type, rung.kind))
    return tuple(pools)


def job_on(settings: Settings, shape: JobShape) -> Job:
    tpu = settings.tpu
    hosts = shape.hosts if shape.hosts is not None else tpu.hosts_per_slice
    slices = hosts // tpu.hosts_per_slice if hosts % tpu.hosts_per_slice == 0 else None
    system_cpu, system_memory = capacity.system_pods_per_job(shape.head, shape.elastic)
    return Job(shape, hosts, slices, (slices or 0) * tpu.chips_per_slice,
               parse_quantity(shape.worker.cpu) * hosts, parse_quantity(shape.worker.memory) * hosts,
               system_cpu, system_memory)


def _quota_fit(quota: dict[str, int | str], needs: dict[str, Decimal]) -> tuple[int | None, str]:
    if quota == queues.UNLIMITED:
        return None, "unlimited quota (the tutorial's 1e9)"
    fits = [(_floor(parse_quantity(quota[r]) / need), r) for r, need in needs.items() if need > 0]
    jobs, resource = min(fits)
    return jobs, f"{resource} quota {quota[resource]}"


def _plan_flavors(settings: Settings, pools: tuple[Pool, ...], job: Job) -> tuple[FlavorFit, ...]:
    plan = queues.queue_plan(settings)
    by_plan = {r.name: [pool for pool in pools if pool.plan == r.name] for r in settings.capacity_ladder.rungs}
    check = "dws-prov" if plan.provisioning_check else None
    needs = {"cpu": job.cpu, "memory": job.memory, TPU_RESOURCE: Decimal(job.chips)}
    fits: list[FlavorFit] = []
    for flavor in plan.flavors:
        if not flavor.plan:  # the system flavor: Ray heads and KubeRay's pods
            admits, why = _quota_fit(flavor.quota, {"cpu": job.system_cpu, "memory": job.system_memory})
            fits.append(FlavorFit(flavor, None, None, admits, why, None))
            continue
        pool = by_plan[flavor.rung][plan.flavors_of_rung(flavor.rung).index(flavor.name)]  # one flavor per pool
        if job.slices is None:
            fits.append(FlavorFit(flavor, None, pool, 0, "the job is not a whole number of slices", 0))
            continue
        admits, why = _quota_fit(flavor.quota, needs)
        fits.append(FlavorFit(flavor, check if flavor.plan == capacity.FLEX_START else None, pool, admits, why,
                              pool.slices // job.slices))
    return tuple(fits)


def _plan_run(plan: str, flavors: tuple[FlavorFit, ...], pools: tuple[Pool, ...]) -> PlanRun:
    mine = [f for f in flavors if f.flavor.rung == plan]
    chips = sum(p.chips for p in pools if p.plan == plan)
    admits = None if any(f.admits is None for f in mine) else sum(f.admits or 0 for f in mine)
    runs = 0
    reasons: list[str] = []
    for fit in mine:
        pool_runs = fit.runs or 0
        if fit.admits is not None and fit.admits < pool_runs:
            runs += fit.admits
            reasons.append(f"{fit.flavor.name}: {fit.admits_limit}")
        else:
            runs += pool_runs
            assert fit.pool is not None
            reasons.append(f"{fit.flavor.name}: pool {fit.pool.name} ({fit.pool.slices} slice"
                           f"{'s' if fit.pool.slices != 1 else ''})")
    limit = "; ".join(reasons)
    if admits is None and mine:
        limit += "; Kueue admits every further job to the unlimited flavor, where it waits for DWS capacity"
    return PlanRun(plan, chips, admits, runs, limit)


def tpu_cluster_report(name: str, role: str, location: str, settings: Settings, shape: JobShape) -> ClusterReport:
    pools = plan_pools(settings)
    job = job_on(settings, shape)
    flavors = _plan_flavors(settings, pools, job)
    plans = tuple(_plan_run(r.name, flavors, pools) for r in settings.capacity_ladder.rungs
                  if any(f.flavor.rung == r.name for f in flavors))
    system_fit = next(f for f in flavors if not f.flavor.plan)
    system_jobs = system_fit.admits
    pool = settings.system_pool
    shape_of = machine_shape(pool.machine_type)
    machine_jobs = None
    machine = f"{pool.node_count} × {pool.machine_type}"
    if shape_of is not None:
        vcpus, gib = shape_of
        per_node = min(_floor(vcpus / job.system_cpu), _floor(gib * GIB / job.system_memory))
        machine_jobs = per_node * pool.node_count
        machine += f" ({vcpus} vCPU / {_quantity(gib)} GiB each)"
    tpu_jobs = sum(p.runs for p in plans)
    names = settings.capacity_ladder
    candidates = [(tpu_jobs, "TPU capacity (" + " + ".join(f"{plan_name(names, p.plan)} {p.runs}" for p in plans)
                   + ")")]
    if system_jobs is not None:
        candidates.append((system_jobs, f"the system pool's CPU quota (default-cpu {system_fit.admits_limit})"))
    if machine_jobs is not None:
        candidates.append((machine_jobs, f"the system pool's machines ({machine}, before GKE's reservations)"))
    at_once = min(c[0] for c in candidates)
    limit = " and ".join(why for jobs, why in candidates if jobs == at_once)
    return ClusterReport(name, role, location, settings, False, pools, flavors, plans, job, system_jobs,
                         machine_jobs, machine, (pool.machine_type, pool.node_count), at_once, limit)


def stack_report(settings: Settings, shape: JobShape) -> StackReport:
    mk = settings.multikueue
    if mk.enabled and mk.manager is not None:
        pool = settings.system_pool
        manager = ClusterReport(mk.manager.cluster_name, "manager", mk.manager.location, None, mk.manager.autopilot,
                                machine="" if mk.manager.autopilot else f"{pool.node_count} × {pool.machine_type}",
                                system_pool=None if mk.manager.autopilot else (pool.machine_type, pool.node_count))
        workers = tuple(tpu_cluster_report(w.settings.cluster_name, f"worker {w.name}", w.settings.location,
                                           w.settings, shape) for w in mk.workers)
        return StackReport((manager, *workers), shape, multikueue=True, notes=(
            "The manager admits on one unlimited flavor and dispatches each job to a worker (MultiKueue): the "
            "workers' quotas and pools decide, so the stack runs the sum of its workers' jobs at once.",))
    if settings.existing_cluster is not None:
        ec = settings.existing_cluster
        return StackReport((tpu_cluster_report(ec.name, "existing cluster", ec.location, settings, shape),), shape,
                           notes=("An existing cluster: its pools are not created by this stack; the figures are for "
                                  "the pools the settings describe (the flavors and quotas select them).",))
    return StackReport((tpu_cluster_report(settings.cluster_name, "cluster", settings.location, settings, shape),),
                       shape)


def _quota_text(quota: dict[str, int | str]) -> str:
    if quota == queues.UNLIMITED:
        return "unlimited (1e9 each)"
    return " / ".join(str(quota[r]) for r in queues.COVERED_RESOURCES)


def _count(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def capacity_markdown(report: StackReport) -> list[str]:
    shape = report.shape
    lines = ["## Capacity and concurrency", ""]
    who = f"`{shape.name}`" + (f" ×{shape.copies}" if shape.copies > 1 else "")
    hosts = "one slice" if shape.hosts is None else f"{shape.hosts} host{'s' if shape.hosts != 1 else ''}"
    lines.append(f"Job shape: {who} ({shape.source}): Ray head {shape.head.cpu} CPU / {shape.head.memory}; "
                 f"TPU workers {shape.worker.cpu} CPU / {shape.worker.memory} per host, {hosts}.")
    for note in report.notes:
        lines += ["", note]
    for cluster in report.clusters:
        lines += ["", f"### {cluster.role.capitalize()} `{cluster.name}` ({cluster.location})", ""]
        if cluster.settings is None:
            kind = "Autopilot" if cluster.autopilot else f"Standard, system pool {cluster.machine}"
            lines.append(f"{kind}; no TPU pools. ClusterQueue flavor `multikueue`: unlimited quota (1e9 each), "
                         "AdmissionCheck `multikueue` dispatching to "
                         + ", ".join(f"`{c.name}`" for c in report.tpu_clusters) + ".")
            continue
        tpu = cluster.settings.tpu
        lines.append(f"TPU {tpu.family.name} {tpu.topology}: {tpu.hosts_per_slice} host"
                     f"{'s' if tpu.hosts_per_slice != 1 else ''} × {tpu.chips_per_host} chips "
                     f"({tpu.machine_type}) = {tpu.chips_per_slice} chips per slice.")
        plan_column = "rung" if cluster.ladder.explicit else "plan"
        lines += ["", f"| {plan_column} | pools × slices × hosts × chips per host | chips |", "|---|---|---:|"]
        for plan in cluster.plans:
            pools = [p for p in cluster.pools if p.plan == plan.plan]
            slices = sorted({p.slices for p in pools})
            per_pool = f"{slices[0]}" if len(slices) == 1 else "/".join(map(str, slices))
            lines.append(f"| {cluster.plan_name(plan.plan)} | {len(pools)} pool{'s' if len(pools) != 1 else ''} "
                         f"({', '.join(p.name for p in pools)}) × {per_pool} slice{'s' if per_pool != '1' else ''} "
                         f"× {tpu.hosts_per_slice} × {tpu.chips_per_host} ({tpu.machine_type}) | {plan.chips} |")
        lines += ["", "Kueue flavors in the order the ClusterQueue tries them (one per node pool):", "",
                  f"| # | flavor | {plan_column} | node labels | quota cpu / memory / google.com/tpu | check "
                  "| jobs admitted | jobs its pool runs |", "|---:|---|---|---|---|---|---:|---:|"]
        for i, fit in enumerate(cluster.flavors, 1):
            labels = ", ".join(f"`{k}={v}`" for k, v in fit.flavor.node_labels.items())
            rung_name = cluster.plan_name(fit.flavor.rung) if fit.flavor.rung else "system (Ray heads)"
            lines.append(f"| {i} | `{fit.flavor.name}` | {rung_name} | {labels} | {_quota_text(fit.flavor.quota)} | "
                         f"{fit.check or '–'} | {_count(fit.admits)} | {'–' if fit.runs is None else fit.runs} |")
        job = cluster.job
        assert job is not None
        lines.append("")
        if job.slices is None:
            lines.append(f"- A job of {job.hosts} hosts is not a whole number of {tpu.topology} slices "
                         f"({tpu.hosts_per_slice} hosts): the jobs stack refuses it.")
        else:
            lines.append(f"- One job: {job.slices} slice{'s' if job.slices != 1 else ''} = {job.chips} chips, "
                         f"{job.hosts} workers × {shape.worker.cpu} CPU / {shape.worker.memory}; on `default-cpu` "
                         f"its Ray head + KubeRay's submitter{' and autoscaler' if shape.elastic else ''} = "
                         f"{_quantity(job.system_cpu)} CPU / "
                         f"{_gib(job.system_memory)}.")
        for plan in cluster.plans:
            lines.append(f"- {cluster.plan_name(plan.plan)}: **{plan.runs}** at once ({plan.limit}).")
        lines.append(f"- System pool CPU quota (`default-cpu`): {_count(cluster.system_quota_jobs)} jobs; "
                     f"system pool machines ({cluster.machine}): "
                     f"{'?' if cluster.machine_jobs is None else cluster.machine_jobs} jobs "
                     "(before GKE's node reservations and the system pods).")
        lines.append(f"- **At once on this cluster: {cluster.at_once} job{'s' if cluster.at_once != 1 else ''}**, "
                     f"limited by {cluster.limit}.")
        if any(p.admits is None for p in cluster.plans):
            queued = cluster.ladder.queued
            lines.append(f"- Jobs waiting in the unlimited `{queued.flavor if queued else 'dws'}` flavor for DWS "
                         "capacity already hold their `default-cpu` quota (Kueue reserves quota before the `dws-prov` "
                         "check passes).")
        _ladder_notes(cluster, lines)
    if report.multikueue:
        lines += ["", f"**Stack total: {report.at_once} jobs at once** across "
                  f"{len(report.tpu_clusters)} workers."]
    return lines


def _ladder_notes(cluster: ClusterReport, lines: list[str]) -> None:
    """What a `ladder` adds: which jobs reach which rung, and the reservations it consumes."""
    ladder = cluster.ladder
    if not ladder.explicit:
        return
    order = " → ".join(f"`{r.name}`" for r in ladder.rungs)
    lines.append(f"- Capacity ladder {order}: Kueue tries the rungs in this order and admits a job to the first with "
                 "free quota it tolerates; the fallback controller closes a rung on its own stock-out evidence and "
                 "moves waiting jobs up when a higher rung frees.")
    spot = [r.name for r in ladder.rungs if r.preemptible]
    if spot:
        lines.append(f"- Spot rung{'s' if len(spot) > 1 else ''} {', '.join(f'`{n}`' for n in spot)}: only jobs with "
                     "`preemptible: true` (their workers tolerate `cloud.google.com/gke-spot`) land there; every other "
                     "job skips it.")
    topology = cluster.settings.tpu.topology if cluster.settings is not None else "?"
    for rung in ladder.rungs:
        if rung.reservation is not None:
            size = rung.reservation.size
            shared = (f", shared from project `{rung.reservation.project}` (it must be shared with this cluster's "
                      "project)" if rung.reservation.project else "")
            lines.append(f"- `{rung.name}` consumes reservation `{rung.reservation.affinity_value}` ({size} "
                         f"{topology} slice{'s' if size != 1 else ''}, {rung.max_slices} used here{shared}); whether "
                         "the project's TPU quota covers it is yours to check.")


# --------------------------------------------------------------------------------------------
# Cost
# --------------------------------------------------------------------------------------------


@dataclass
class Amount:
    """A sum of prices, remembering which parts had no verified price."""

    value: Decimal = Decimal(0)
    missing: list[str] = field(default_factory=list)

    def add(self, price: Price, quantity: int | Decimal, what: str) -> Amount:
        if quantity == 0:
            return self
        if price.value is None:
            self.missing.append(what)
        else:
            self.value += price.value * Decimal(quantity)
        return self

    def plus(self, other: Amount) -> Amount:
        return Amount(self.value + other.value, self.missing + other.missing)

    def text(self) -> str:
        if not self.missing:
            return money(self.value)
        if self.value == 0:
            return "n/a"
        return f"≥ {money(self.value)}"


@dataclass(frozen=True)
class ClusterCost:
    cluster: ClusterReport
    idle: Amount
    plans: dict[str, Amount]
    job: dict[str, Amount]
    prices: list[tuple[str, str, Price]]  # every price used: what it is, the region, the price

    @property
    def full(self) -> Amount:
        total = Amount().plus(self.idle)
        for amount in self.plans.values():
            total = total.plus(amount)
        return total


def cluster_cost(cluster: ClusterReport, table: PriceTable) -> ClusterCost:
    region = cluster.region
    used: list[tuple[str, str, Price]] = []
    idle = Amount()
    external = cluster.role == "existing cluster"
    fee = table.gke("clusterFee", region)
    if not external:
        idle.add(fee, 1, "GKE cluster fee")
        used.append(("GKE cluster fee", region, fee))
    settings = cluster.settings
    if cluster.system_pool is None:
        cpu = table.gke("autopilotVcpu", region)
        if cpu.value is None:
            idle.missing.append("Autopilot pod requests (Kueue's controller)")
        used.append(("Autopilot vCPU-hour", region, cpu))
    elif not external:
        machine_type, count = cluster.system_pool
        price = table.machine(machine_type, region)
        idle.add(price, count, f"system pool {count} × {machine_type}")
        used.append((f"{machine_type} node-hour", region, price))
    plans: dict[str, Amount] = {}
    job: dict[str, Amount] = {}
    if settings is not None and cluster.job is not None:
        family = settings.tpu.family.name
        for plan in cluster.plans:
            kind = cluster.kind_of(plan.plan)
            price = rung_price(table, family, kind, region)
            used.append((f"TPU {family} {kind} chip-hour", region, price))
            name = cluster.plan_name(plan.plan)
            plans[plan.plan] = Amount().add(price, plan.chips, f"{name} TPUs")
            job[plan.plan] = Amount().add(price, cluster.job.chips, f"a job on {name}")
    return ClusterCost(cluster, idle, plans, job, used)


def rung_price(table: PriceTable, family: str, kind: str, region: str) -> Price:
    """A rung's chip-hour list price. A reservation's is the on-demand price of what it reserves, billed while the
    reservation exists whether a job runs there or not (before any committed-use discount)."""
    if kind != RESERVATION:
        return table.tpu(family, kind, region)
    on_demand = table.tpu(family, capacity.ON_DEMAND, region)
    return Price(on_demand.value, f"{on_demand.basis}; the on-demand price, billed while the reservation exists, "
                 "used or not (committed-use discounts not applied)", on_demand.source)


def cost_markdown(report: StackReport, table: PriceTable) -> list[str]:
    costs = [cluster_cost(c, table) for c in report.clusters]
    columns: dict[str, str] = {}  # plan -> its column's heading, in ladder order
    for cost in costs:
        for plan in cost.plans:
            columns.setdefault(plan, f"{_short(cost.cluster.plan_name(plan))} at full scale")
    lines = ["## Cost per hour (list prices, not a bill)", "",
             f"Published list prices from {table.origin}, with each cluster's region applied: no discounts, "
             "committed-use contracts, negotiated prices, taxes, disks, network or logging. **These are list prices, "
             "not a bill.** `n/a` or `≥` marks parts without a verified price (see the table below); override "
             "them with `--prices FILE`.", "",
             "| cluster | region | idle (GKE fee + system pool) | "
             + "".join(f"{heading} | " for heading in columns.values()) + "everything at full scale |",
             "|---|---|---:|" + "---:|" * len(columns) + "---:|"]
    total_idle, total_full = Amount(), Amount()
    for cost in costs:
        idle = "– (not this stack's)" if cost.cluster.role == "existing cluster" else cost.idle.text()
        cells = "".join(f"{cost.plans[plan].text() if plan in cost.plans else '–'} | " for plan in columns)
        lines.append(f"| `{cost.cluster.name}` | {cost.cluster.region} | {idle} | {cells}{cost.full.text()} |")
        total_idle, total_full = total_idle.plus(cost.idle), total_full.plus(cost.full)
    if len(costs) > 1:
        lines.append(f"| **stack** | | **{total_idle.text()}** | " + "| " * len(columns) + f"**{total_full.text()}** |")
    lines.append("")
    for cost in costs:
        if not cost.job or cost.cluster.job is None or cost.cluster.job.slices is None:
            continue
        parts = []
        on_demand = next((a for p, a in cost.job.items() if cost.cluster.kind_of(p) == capacity.ON_DEMAND), None)
        for plan, amount in cost.job.items():
            run = next((r for r in cost.cluster.plans if r.plan == plan), None)
            if run is not None and run.runs == 0:  # priced only where Kueue can admit it
                parts.append(f"{cost.cluster.plan_name(plan)} never: Kueue cannot admit it there ({run.limit})")
                continue
            text = amount.text()
            if (cost.cluster.kind_of(plan) == capacity.FLEX_START and amount.missing and on_demand is not None
                    and not on_demand.missing):
                text += f" (at most {on_demand.text()} if billed below on-demand)"
            if cost.cluster.kind_of(plan) == RESERVATION:
                text += " (billed whether it runs or not)"
            parts.append(f"{cost.cluster.plan_name(plan)} {text}")
        lines.append(f"- A job on `{cost.cluster.name}` ({cost.cluster.job.chips} chips) costs per hour: "
                     + "; ".join(parts) + " (its Ray head runs on the system pool, already counted as idle).")
    lines += ["", "| price used | regions | USD per hour | basis | source |", "|---|---|---:|---|---|"]
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for cost in costs:
        for what, region, price in cost.prices:
            regions = grouped.setdefault((what, money(price.value) if price.known else "no verified price",
                                          price.basis.removeprefix(f"{region} "), price.source), [])
            if region not in regions:
                regions.append(region)
    for (what, value, basis, source_id), regions in grouped.items():
        source = table.source(source_id)
        title = source.get("title", source_id)
        link = f"[{title}]({source['url']})" if source.get("url") else title
        lines.append(f"| {what} | {', '.join(regions)} | {value} | {basis} | {link} |")
    missing = sorted({m for c in costs for m in c.idle.missing + [x for a in c.plans.values() for x in a.missing]})
    if missing:
        lines += ["", "Not included for want of a verified price: " + "; ".join(missing) + "."]
    return lines


# --------------------------------------------------------------------------------------------
# Diagram
# --------------------------------------------------------------------------------------------


@dataclass
class Diagram:
    subgraphs: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (id, label, node ids)
    nodes: dict[str, str] = field(default_factory=dict)  # id -> label
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (from, to, label)

    def node(self, node_id: str, label: str, members: list[str]) -> str:
        self.nodes[node_id] = label
        members.append(node_id)
        return node_id

    def mermaid(self) -> str:
        out = ["```mermaid", "flowchart LR"]
        for sub_id, label, members in self.subgraphs:
            out.append(f'  subgraph {sub_id}["{_label(label)}"]')
            out += [f'    {m}["{_label(self.nodes[m])}"]' for m in members]
            out.append("  end")
        for src, dst, label in self.edges:
            out.append(f'  {src} -->|"{_label(label)}"| {dst}' if label else f"  {src} --> {dst}")
        out.append("```")
        return "\n".join(out)


def _label(text: str) -> str:
    return text.replace('"', "#quot;")


def node_id(*parts: str) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9]+", "_", p).strip("_") for p in parts)


def _tpu_cluster_diagram(diagram: Diagram, cluster: ClusterReport) -> None:
    settings = cluster.settings
    assert settings is not None
    c = cluster.name
    members: list[str] = []
    diagram.subgraphs.append((node_id("c", c), f"{cluster.role} {c} ({cluster.location})", members))
    kueue = diagram.node(node_id(c, "kueue"), f"Kueue {settings.kueue.version}", members)
    plan = queues.queue_plan(settings)
    cq = diagram.node(node_id(c, "cq"), f"ClusterQueue {plan.cluster_queue}", members)
    for ns, name in plan.local_queues:
        lq = diagram.node(node_id(c, "lq", ns, name), f"LocalQueue {ns}/{name}", members)
        diagram.edges.append((lq, cq, ""))
    system = diagram.node(node_id(c, "pool", settings.system_pool.name),
                          f"system pool {settings.system_pool.name}<br/>{cluster.machine.split(' (')[0]}", members)
    diagram.edges.append((kueue, system, "runs on"))
    for i, fit in enumerate(cluster.flavors, 1):
        quota = ("unlimited" if fit.flavor.quota == queues.UNLIMITED else
                 ", ".join(f"{r.removeprefix('google.com/')} {fit.flavor.quota[r]}" for r in queues.COVERED_RESOURCES))
        flavor = diagram.node(node_id(c, "flavor", fit.flavor.name), f"flavor {fit.flavor.name}<br/>{quota}", members)
        diagram.edges.append((cq, flavor, f"{i}" + (f" · {fit.check}" if fit.check else "")))
        if fit.pool is None:
            diagram.edges.append((flavor, system, ""))
            continue
        pool = fit.pool
        mode = KIND_TEXT.get(pool.kind, pool.kind)
        rung = cluster.ladder.rung(pool.plan)
        if rung is not None and rung.reservation is not None and cluster.ladder.explicit:
            mode += f" {rung.reservation.affinity_value}"
        if pool.kind == "spot":
            mode += ", preemptible jobs only"
        pool_node = diagram.node(node_id(c, "pool", pool.name),
                                 f"{_short(cluster.plan_name(pool.plan))}: {pool.name}<br/>{mode}, {pool.slices} × "
                                 f"{settings.tpu.family.name} {settings.tpu.topology} = {pool.chips} chips", members)
        diagram.edges.append((flavor, pool_node, ""))


def diagram(report: StackReport) -> Diagram:
    d = Diagram()  # subgraph ids are the cluster's node id prefixed "c_", so they never collide with a node
    manager = next((c for c in report.clusters if c.role == "manager"), None)
    for cluster in report.tpu_clusters:
        _tpu_cluster_diagram(d, cluster)
    if manager is not None:
        members: list[str] = []
        m = manager.name
        kind = "Autopilot" if manager.autopilot else "Standard"
        d.subgraphs.insert(0, (node_id("c", m), f"manager {m} ({manager.location}, {kind})", members))
        d.node(node_id(m, "kueue"), "Kueue (MultiKueue)", members)
        cq = d.node(node_id(m, "cq"), "ClusterQueue, flavor multikueue (unlimited)", members)
        config = d.node(node_id(m, "mkconfig"), "MultiKueueConfig<br/>AdmissionCheck multikueue", members)
        first = report.tpu_clusters[0].settings if report.tpu_clusters else None
        local_queues = queues.queue_plan(first).local_queues if first is not None else ()
        for ns, name in local_queues:
            lq = d.node(node_id(m, "lq", ns, name), f"LocalQueue {ns}/{name}", members)
            d.edges.append((lq, cq, ""))
        d.edges.append((cq, config, "admission check"))
        for worker in report.tpu_clusters:
            for ns, name in local_queues:
                d.edges.append((config, node_id(worker.name, "lq", ns, name),
                                f"MultiKueueCluster {worker.role.removeprefix('worker ')}"))
    return d


# --------------------------------------------------------------------------------------------
# The jobs project
# --------------------------------------------------------------------------------------------


def jobs_markdown(infra_stack: str, specs: tuple[JobSpec, ...], outputs: dict[str, object], table: PriceTable
                  ) -> tuple[list[str], Diagram]:
    """What the jobs stack submits, against the infra stack's outputs: slices and chips per copy, the list price of
    a copy per hour on each plan where Kueue can admit it (a rung none of whose flavors can take the job, by quota,
    pool size or an untolerated taint, says why instead of a price), what the jobs stack warns of, and a diagram of
    the jobs and the queue they go to."""
    tpu = outputs.get("tpu") if isinstance(outputs.get("tpu"), dict) else {}
    assert isinstance(tpu, dict)
    hosts_per_slice = int(tpu.get("hostsPerSlice", 0) or 0)
    chips_per_slice = int(tpu.get("chipsPerSlice", 0) or 0)
    family = str(tpu.get("type", "?"))
    location = str(outputs.get("clusterLocation", ""))
    parts = location.split("-")
    region = "-".join(parts[:2]) if len(parts) > 2 else location
    multikueue = bool(outputs.get("multikueue"))
    flavors = outputs.get("flavors") if isinstance(outputs.get("flavors"), dict) else {}
    assert isinstance(flavors, dict)
    queues_out = outputs.get("localQueues") or []
    assert isinstance(queues_out, list)
    default_queue = f"{queues_out[0]['namespace']}/{queues_out[0]['name']}" if queues_out else "?"
    # (heading, rung kind, flavor present, rung name): a ladder's rungs (flavors.rungs) in ladder order; else plan A /
    # plan B.
    rungs = _job_rungs(flavors)
    tpu_flavors = _tpu_flavors(infra_stack, outputs)
    chips_per_host = int(tpu.get("chipsPerHost", 0) or 0)
    lines = ["## Jobs", "", f"Against infra stack `{infra_stack}`: TPU {family} {tpu.get('topology', '?')} "
             f"({hosts_per_slice} hosts, {chips_per_slice} chips per slice)"
             + (", dispatched by MultiKueue to whichever worker admits the job first" if multikueue else
                f", cluster `{outputs.get('clusterName', '?')}` in {location}") + ". How many run at once is the "
             "infra stack's report (its quotas and pools); list prices, not a bill.", "",
             "| job | copies | queue | TPU hosts per copy | slices | chips | "
             + "".join(f"{heading} per copy-hour | " for heading, _k, _p, _r in rungs).rstrip(),
             "|---|---:|---|---:|---:|---:|" + "---:|" * len(rungs)]
    d = Diagram()
    members: list[str] = []
    d.subgraphs.append((node_id("c", "jobs"), f"jobs stack → infra {infra_stack}", members))
    for spec in specs:
        hosts = spec.workers if spec.workers is not None else hosts_per_slice
        slices = hosts // hosts_per_slice if hosts_per_slice else 0
        chips = slices * chips_per_slice
        cost = []
        for _heading, kind, present, rung in rungs:
            if not present:
                cost.append("–")
                continue
            never = _never_admitted(spec, kind, rung, tpu_flavors, hosts, chips_per_host)
            if never is not None:  # priced only where Kueue can admit it
                cost.append(f"– ({never})")
                continue
            price = rung_price(table, family, kind, region) if not multikueue else Price(None, "depends on the "
                                                                                               "worker")
            text = money(price.value * chips) if price.value is not None else "n/a"
            cost.append(text + (" (reserved: billed whether it runs or not)" if kind == RESERVATION
                                and price.value is not None else ""))
        queue = spec.queue or default_queue
        lines.append(f"| `{spec.name}` | {spec.count} | {queue} | {hosts} | {slices} | {chips} | "
                     + " | ".join(cost) + " |")
        job = d.node(node_id("job", spec.name), f"RayJob {spec.name} ×{spec.count}<br/>{chips} chips each", members)
        lq = node_id("lq", queue)
        if lq not in d.nodes:
            d.node(lq, f"LocalQueue {queue}<br/>(infra {infra_stack.split('/')[-1]})", members)
        d.edges.append((job, lq, "kueue.x-k8s.io/queue-name"))
    warnings = _job_warnings(infra_stack, specs, outputs)
    if warnings:
        lines += ["", "The jobs stack warns (`pulumi up` shows the same):", "", *(f"- {w}" for w in warnings)]
    if not multikueue and "rungs" in flavors:
        kinds = list(dict.fromkeys(kind for _h, kind, _p, _r in rungs))
        lines += ["", f"Prices: {family} chip-hour in {region}: " + "; ".join(
            f"{KIND_TEXT[kind]} {_price_text(rung_price(table, family, kind, region))}" for kind in kinds)
            + f" ({table.origin})."]
    elif not multikueue:
        lines += ["", f"Prices: {family} chip-hour in {region}: on-demand "
                  f"{_price_text(table.tpu(family, capacity.ON_DEMAND, region))}; flex-start "
                  f"{_price_text(table.tpu(family, capacity.FLEX_START, region))} ({table.origin})."]
    return lines, d


def _job_rungs(flavors: dict[object, object]) -> list[tuple[str, str, bool, str | None]]:
    """The jobs table's price columns: (heading, rung kind, whether the infra stack has it, the rung's name; None for
    today's two plans, whose flavors go by kind). A ladder stack's `flavors.rungs` (every rung in ladder order, with
    the kind its stack file writes); an older or two-plan stack's plan A (onDemand) and plan B (flexStart) as
    before."""
    rungs = flavors.get("rungs")
    if isinstance(rungs, list) and rungs:
        out: list[tuple[str, str, bool, str | None]] = []
        for rung in rungs:
            kind = KINDS.get(str(rung.get("kind"))) if isinstance(rung, dict) else None
            if kind is None:  # an infra stack newer than this plan: price what it knows
                continue
            out.append((f"`{rung['name']}` ({KIND_TEXT[kind]})", kind, bool(rung.get("flavors")), str(rung["name"])))
        if out:
            return out
    return [("plan A", capacity.ON_DEMAND, flavors.get("onDemand") is not None, None),
            ("plan B", capacity.FLEX_START, flavors.get("flexStart") is not None, None)]


def _tpu_flavors(infra_stack: str, outputs: dict[str, object]) -> tuple[TpuFlavor, ...] | None:
    """The infra stack's TPU flavors (its `tpuFlavors` output); None from a stack deployed before it had them."""
    value = outputs.get("tpuFlavors")
    if not isinstance(value, list) or not value:
        return None
    try:
        return tuple(TpuFlavor.from_output(infra_stack, f) for f in value)
    except ValueError:  # ConfigError: an entry this plan cannot read; the program says so
        return None


def _never_admitted(spec: JobSpec, kind: str, rung: str | None, flavors: tuple[TpuFlavor, ...] | None, hosts: int,
                    chips_per_host: int) -> str | None:
    """Why Kueue can never admit a copy of the job to any flavor of this rung (None: it can, or it is not known).
    Without the infra stack's `tpuFlavors`, only the spot taint is known: Kueue never gives a spot flavor to a job
    that does not tolerate it."""
    if flavors is None:
        return "not preemptible" if kind == SPOT and not spec.preemptible else None
    config_kind = CONFIG_KIND[kind]
    mine = [f for f in flavors if (f.rung == rung if rung is not None else f.kind == config_kind)]
    reasons = [jobs_model.flavor_fit(spec, f, hosts, chips_per_host) for f in mine]
    if not reasons or None in reasons:
        return None
    return reasons[0]


def _job_warnings(infra_stack: str, specs: tuple[JobSpec, ...], outputs: dict[str, object]) -> list[str]:
    """The warnings the jobs program logs for these jobs (tpu_fallback.model.jobs.plan_jobs), where the outputs are
    complete enough to plan them."""
    try:
        facts = jobs_model.InfraFacts.from_outputs(infra_stack, outputs)
        return [w for planned in jobs_model.plan_jobs(specs, facts) for w in planned.warnings]
    except (ValueError, KeyError, TypeError):  # ConfigError: the program refuses the jobs and says why
        return []


def _price_text(price: Price) -> str:
    return f"{money(price.value)} ({price.basis})" if price.known else f"no verified price ({price.basis})"
