"""What the fallback controller does next, from one snapshot of the cluster. Pure Python, standard library only.

Kueue falls back from plan A to plan B on *quota*; a stock-out (plan A's pool cannot get VMs) leaves a job
admitted to plan A with pods that never start. Kueue's own `waitForPodsReady` evicts such a job and requeues it,
but it then scans the flavors from the first again and re-admits it to plan A (Kueue 0.19.2,
pkg/scheduler/flavorassigner starts at index 0 for a requeued workload). What Kueue lacks, this adds:

- **close plan A** on evidence of a stock-out: a Workload admitted to a plan A flavor whose pods have not started
  and are *unschedulable* (pending, PodScheduled False/Unschedulable), and either GKE's autoscaler said it has no
  capacity for them (a stock-out Event, `stockout_event`) or they are still unschedulable `stockout_after`
  seconds after admission (the backstop, for a cluster whose autoscaler Events are not seen). Pods that are
  scheduled (pulling, crash looping, not Ready) are the job's own problem and never close plan A. Every plan A
  ResourceFlavor gets a NoSchedule taint that no job tolerates; Kueue skips a flavor with an untolerated taint
  (flavorassigner: "untolerated taint ... in flavor"), so new jobs go to plan B.
- **evict the stuck job** at the same time (deactivate, then reactivate once Kueue released it, as a move back
  does): it is requeued past the tainted plan A at once. Kueue's own `waitForPodsReady` is only a long backstop,
  so it never evicts a plan B job whose pods start slowly.
- **reopen plan A** after `cool_down` seconds, or sooner when a plan A pool shows a Ready node created after
  the taint (a scale-up succeeded after all).
- **move back** (optional): a Workload holding plan B quota whose DWS capacity has not arrived (not Admitted,
  no ProvisioningRequest Provisioned) moves to plan A when plan A is open, a plan A flavor of its ClusterQueue
  has the quota free, and that flavor's pool has a Ready node (capacity we can see). The move deactivates the
  Workload and activates it again, so Kueue re-admits it from the first flavor; at most once per Workload.

All state lives in cluster objects (the taints' values, the Workloads' annotations), so a restarted controller
carries on where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

# The Workload annotations of a move back to plan A: "moving" while it is deactivated, "moved" once done.
MOVING_ANNOTATION = "tpu-fallback.dev/moving-to-plan-a"
MOVED_ANNOTATION = "tpu-fallback.dev/moved-to-plan-a"
# A Workload deactivated to leave a stocked-out plan A; removed when it is queued again.
EVICTING_ANNOTATION = "tpu-fallback.dev/evicted-from-plan-a"
# MultiKueue's label on the copies a manager creates in a worker: the manager owns their spec.
MULTIKUEUE_ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


@dataclass(frozen=True)
class Config:
    plan_a_flavors: tuple[str, ...]
    plan_b_flavors: tuple[str, ...]
    stockout_after: float  # seconds
    cool_down: float  # seconds
    taint_key: str = "tpu-fallback.dev/plan-a-stockout"
    reverse_move: bool = True


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: dict[str, str]
    closed_since: float | None  # the value of our taint (unix seconds), None when untainted


@dataclass(frozen=True)
class Workload:
    namespace: str
    name: str
    created: float
    cluster_queue: str | None  # from status.admission; None without a quota reservation
    tpu_flavor: str | None  # the flavor of the PodSet(s) using the TPU resource
    usage: dict[str, Decimal]  # what the Workload holds on `tpu_flavor`, per resource
    quota_reserved: bool = False
    admitted_since: float | None = None  # Admitted condition's lastTransitionTime, when Admitted is True
    pods_started: bool = False  # PodsReady was True at some point (reason other than WaitForStart)
    capacity_arrived: bool = False  # every admission check Ready, or its ProvisioningRequest Provisioned
    active: bool = True
    finished: bool = False
    multikueue_copy: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    pods_unschedulable: bool = False  # one of its pods is pending and unschedulable (PodScheduled False)
    stockout_event: float | None = None  # when GKE's autoscaler first said it has no capacity for such a pod
    resource_version: str = ""  # the Workload's, as read: a patch carries it as a precondition

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Node:
    labels: dict[str, str]
    created: float
    ready: bool


@dataclass(frozen=True)
class Snapshot:
    now: float
    flavors: dict[str, Flavor]
    workloads: tuple[Workload, ...]
    nodes: tuple[Node, ...]
    # ClusterQueue -> flavor -> resource -> nominal quota minus what is reserved.
    free: dict[str, dict[str, dict[str, Decimal]]]


# --- actions ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClosePlanA:
    flavors: tuple[str, ...]
    since: float
    cause: str | None  # the Workload ("ns/name") whose pods did not start; None when completing a partial close
    why: str


@dataclass(frozen=True)
class ReopenPlanA:
    flavors: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Deactivate:
    """First half of a move back to plan A: Kueue releases the plan B reservation (and its ProvisioningRequest)."""

    namespace: str
    name: str
    target: str  # the plan A flavor with room for it
    why: str


@dataclass(frozen=True)
class Reactivate:
    """Second half of a move (Kueue admits it to plan A) or of an eviction (`after_eviction`: to plan B): the
    Workload is queued again, with its place (creation time) kept."""

    namespace: str
    name: str
    why: str
    after_eviction: bool


@dataclass(frozen=True)
class Evict:
    """The job stuck on a stocked-out plan A: deactivated so Kueue releases it, then reactivated (Reactivate)."""

    namespace: str
    name: str
    why: str


Action = ClosePlanA | ReopenPlanA | Evict | Deactivate | Reactivate


def decide(config: Config, snap: Snapshot) -> list[Action]:
    """What to do, the taint first: a failing Workload patch must not hold up closing or reopening plan A."""
    actions = _decide_plan_a(config, snap)
    return actions + _finish_moves(snap)


def _decide_plan_a(config: Config, snap: Snapshot) -> list[Action]:
    actions: list[Action] = []
    plan_a = [snap.flavors[n] for n in config.plan_a_flavors if n in snap.flavors]
    closed = [f for f in plan_a if f.closed_since is not None]
    if closed:
        since = min(f.closed_since for f in closed if f.closed_since is not None)
        reopen = _reopen_reason(config, snap, plan_a, since)
        if reopen:
            actions.append(ReopenPlanA(tuple(f.name for f in closed), reopen))
        elif len(closed) < len(plan_a):  # a close cut short (a restart), or a flavor added since
            actions.append(ClosePlanA(tuple(f.name for f in plan_a if f.closed_since is None), since, None,
                                      "completing the close of plan A"))
        if not reopen:
            actions += _evictions(config, snap)
        return actions
    stuck = _stuck_on_plan_a(config, snap)
    if stuck is not None and plan_a:
        waited = snap.now - (stuck.admitted_since or snap.now)
        if stuck.stockout_event is not None:
            evidence = (f"GKE's autoscaler reported no capacity for its unschedulable pods "
                        f"{max(0.0, snap.now - stuck.stockout_event):.0f}s ago")
        else:
            evidence = (f"its pods are still unschedulable after stockoutAfter ({config.stockout_after:.0f}s) "
                        "without a scale-up")
        why = (f"{stuck.key} was admitted to {stuck.tpu_flavor} {waited:.0f}s ago and {evidence}: plan A has no "
               f"capacity; new and requeued jobs go to plan B for up to {config.cool_down:.0f}s")
        actions.append(ClosePlanA(tuple(f.name for f in plan_a), snap.now, stuck.key, why))
        return actions + _evictions(config, snap)
    if config.reverse_move:
        actions += _moves_back(config, snap, plan_a)
    return actions


def _finish_moves(snap: Snapshot) -> list[Action]:
    """Reactivate the Workloads deactivated for a move or an eviction once Kueue has released their reservation
    (also after a restart of the controller between the two halves)."""
    out: list[Action] = []
    for w in snap.workloads:
        if w.active or w.quota_reserved or w.finished:
            continue
        if MOVING_ANNOTATION in w.annotations:
            out.append(Reactivate(w.namespace, w.name, f"{w.key}: plan B reservation released; queued again for plan A",
                                  after_eviction=False))
        elif EVICTING_ANNOTATION in w.annotations:
            out.append(Reactivate(w.namespace, w.name, f"{w.key}: released from plan A; queued again for plan B",
                                  after_eviction=True))
    return out


def _waiting_on_plan_a(config: Config, snap: Snapshot) -> list[Workload]:
    """Workloads on plan A whose pods cannot be placed: once plan A is known to be stocked out, they wait in vain."""
    return [w for w in snap.workloads
            if w.tpu_flavor in config.plan_a_flavors and w.quota_reserved and w.active and not w.pods_started
            and w.pods_unschedulable and not w.finished]


def _all_stuck_on_plan_a(config: Config, snap: Snapshot) -> list[Workload]:
    """The evidence of a stock-out: admitted plan A jobs with unschedulable pods and GKE's no-capacity Event on
    them, or still unschedulable after `stockout_after`. Scheduled pods (pulling, crash looping) never count."""
    return sorted((w for w in _waiting_on_plan_a(config, snap) if w.admitted_since is not None
                   and (w.stockout_event is not None or snap.now - w.admitted_since >= config.stockout_after)),
                  key=lambda w: (w.admitted_since or 0, w.key))


def _stuck_on_plan_a(config: Config, snap: Snapshot) -> Workload | None:
    return next(iter(_all_stuck_on_plan_a(config, snap)), None)


def _evictions(config: Config, snap: Snapshot) -> list[Action]:
    """Evict every job stuck on a closed plan A (a MultiKueue copy is the manager's to move, not ours)."""
    return [Evict(w.namespace, w.name, f"{w.key} leaves plan A, which has no capacity: requeued for plan B")
            for w in _all_stuck_on_plan_a(config, snap)
            if not w.multikueue_copy and EVICTING_ANNOTATION not in w.annotations]


def _pool_nodes(flavor: Flavor, nodes: tuple[Node, ...]) -> list[Node]:
    """The nodes a flavor selects (all of its node labels match); none for a flavor without labels."""
    if not flavor.node_labels:
        return []
    return [n for n in nodes if all(n.labels.get(k) == v for k, v in flavor.node_labels.items())]


def cool_down_over(config: Config, closed_since: float | None, now: float) -> bool:
    """A close whose cool-down has passed: reopened whatever else is known (also by the controller's sweep)."""
    return closed_since is not None and now - closed_since >= config.cool_down


def cool_down_reason(config: Config) -> str:
    return f"the cool-down of {config.cool_down:.0f}s since plan A closed has passed; plan A is offered again"


def _reopen_reason(config: Config, snap: Snapshot, plan_a: list[Flavor], since: float) -> str | None:
    if cool_down_over(config, since, snap.now):
        return cool_down_reason(config)
    for flavor in plan_a:
        fresh = [n for n in _pool_nodes(flavor, snap.nodes) if n.ready and n.created > since]
        if fresh:
            return f"a Ready node appeared in {flavor.name}'s pool after plan A closed: capacity is back"
    return None


def _moves_back(config: Config, snap: Snapshot, plan_a: list[Flavor]) -> list[Action]:
    free = {cq: {f: dict(r) for f, r in flavors.items()} for cq, flavors in snap.free.items()}
    with_nodes = {f.name for f in plan_a if any(n.ready for n in _pool_nodes(f, snap.nodes))}
    waiting = sorted((w for w in snap.workloads
                      if w.tpu_flavor in config.plan_b_flavors and w.quota_reserved and w.active
                      and w.admitted_since is None and not w.capacity_arrived and not w.finished
                      and not w.multikueue_copy and w.cluster_queue is not None
                      and MOVED_ANNOTATION not in w.annotations and MOVING_ANNOTATION not in w.annotations),
                     key=lambda w: (w.created, w.key))
    actions: list[Action] = []
    for w in waiting:
        room = free.get(w.cluster_queue or "", {})
        target = next((f.name for f in plan_a if f.name in with_nodes and _fits(w.usage, room.get(f.name, {}))),
                      None)
        if target is None:
            continue
        for resource, amount in w.usage.items():
            room[target][resource] -= amount
        actions.append(Deactivate(w.namespace, w.name, target,
                                  f"{w.key} waits on {w.tpu_flavor} for DWS capacity while {target} has the quota "
                                  "free and Ready nodes: moving it to plan A"))
    return actions


def _fits(usage: dict[str, Decimal], room: dict[str, Decimal]) -> bool:
    return bool(usage) and all(room.get(resource, Decimal(0)) >= amount for resource, amount in usage.items())
