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
  has the quota free, and that flavor's pool has a free host for each of its TPU pods (Ready, in service, its TPUs
  not requested by pods already there: capacity the cluster shows). The move deactivates the
  Workload and activates it again, so Kueue re-admits it from the first flavor; at most once per Workload.

**A capacity ladder** (`Config.rungs`: reservation, on-demand, spot, flex-start, ... most preferred first) is the
same on N rungs: plan A and plan B are its two-rung case. Every rung that is not queued is closed, evicted from and
reopened on its own evidence (a stock-out on on-demand closes on-demand only, never the reservation or spot); a
queued rung is never closed. A job waiting on rung k (DWS not provisioned on a queued rung; pods unschedulable,
waiting for a scale-up, on another) moves to the most preferred open rung above k with free quota and a Ready node,
and once moved only ever further up. A *reserved* rung (a specific reservation: its VMs are held for it) needs no
Ready node: its pool may autoscale from zero, and the capacity of its free quota is guaranteed, so a job waiting
on a rung that is not reserved moves there on the free quota alone (the pool then scales up for it).

All state lives in cluster objects (the taints' values, the Workloads' annotations), so a restarted controller
carries on where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

# Our NoSchedule taint on a closed rung's ResourceFlavors; its value: when the rung closed (unix seconds). One home
# for the controller and the renderer (render/fallback.py writes it into config.json's "taintKey").
TAINT_KEY = "tpu-fallback.dev/plan-a-stockout"
# The Workload annotations of a move back to plan A: "moving" while it is deactivated, "moved" once done.
MOVING_ANNOTATION = "tpu-fallback.dev/moving-to-plan-a"
MOVED_ANNOTATION = "tpu-fallback.dev/moved-to-plan-a"
# A Workload deactivated to leave a stocked-out plan A; removed when it is queued again.
EVICTING_ANNOTATION = "tpu-fallback.dev/evicted-from-plan-a"
# A Workload Kueue deactivated after its DWS admission check was rejected: told once (the value: when), then
# queued again after the cool-down, at most MAX_REVIVALS times (the value: "<count> <time>").
KUEUE_DEACTIVATION_TOLD = "tpu-fallback.dev/deactivation-told"
REVIVED_ANNOTATION = "tpu-fallback.dev/revived"
MAX_REVIVALS = 3
# MultiKueue's label on the copies a manager creates in a worker: the manager owns their spec.
MULTIKUEUE_ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"


@dataclass(frozen=True)
class Rung:
    """One rung of a capacity ladder: its Kueue flavors, and whether it is queued (DWS flex-start: never closed,
    since a queued ProvisioningRequest waits for capacity instead of failing)."""

    name: str
    flavors: tuple[str, ...]
    queued: bool = False
    # A specific reservation's rung: its free quota is capacity held for it, Ready node or not (its pool may sit at
    # zero nodes), so a move up to it needs no Ready node.
    reserved: bool = False


# A triggered scale-up is under way until GKE's autoscaler gives up on it: --max-node-provision-time, 15 min by
# default (kubernetes/autoscaler cluster-autoscaler/config/autoscaling_options.go MaxNodeProvisionTime), after which
# it writes a FailedScaleUp ("failed to appear in time").
MAX_NODE_PROVISION = 15 * 60.0

# The two rungs that planAFlavors/planBFlavors stand for.
PLAN_A_RUNG, PLAN_B_RUNG = "onDemand", "flexStart"


@dataclass(frozen=True)
class Words:
    """What users see of the controller's acts, one table per vocabulary: two plans keep plan A's Event reasons and
    unlabelled tpu_fallback_plan_a_* series (what their dashboards and alerts read); a ladder has its own, with a
    `rung` label. Inside, two plans are just a two-rung ladder."""

    stock_out: str
    reopened: str
    evicted: str
    moving: str
    moved: str
    closed: str  # gauge
    closes: str  # counters from here on
    reopens: str
    moves: str
    per_rung: bool  # the series carry a `rung` label


PLAN_WORDS = Words("PlanAStockOut", "PlanAReopened", "EvictedFromPlanA", "MovingToPlanA", "MovedToPlanA",
                   "tpu_fallback_plan_a_closed", "tpu_fallback_plan_a_closes_total",
                   "tpu_fallback_plan_a_reopens_total", "tpu_fallback_moves_to_plan_a_total", per_rung=False)
LADDER_WORDS = Words("RungStockOut", "RungReopened", "EvictedFromRung", "MovingUp", "MovedUp",
                     "tpu_fallback_rung_closed", "tpu_fallback_rung_closes_total", "tpu_fallback_rung_reopens_total",
                     "tpu_fallback_moves_up_total", per_rung=True)


@dataclass(frozen=True)
class Config:
    plan_a_flavors: tuple[str, ...]
    plan_b_flavors: tuple[str, ...]
    stockout_after: float  # seconds
    cool_down: float  # seconds
    taint_key: str = TAINT_KEY
    move_back: bool = True  # fallback.moveBack
    # A capacity ladder, most preferred first; empty: the two rungs plan A (not queued) and plan B (queued).
    rungs: tuple[Rung, ...] = ()
    # Two plans: plan A's pools consume a specific reservation (onDemand.reservation), so plan A is a reserved rung.
    plan_a_reserved: bool = False

    @property
    def ladder(self) -> tuple[Rung, ...]:
        return self.rungs or (Rung(PLAN_A_RUNG, self.plan_a_flavors, reserved=self.plan_a_reserved),
                              Rung(PLAN_B_RUNG, self.plan_b_flavors, True))

    @property
    def words(self) -> Words:
        return PLAN_WORDS if self.two_plans else LADDER_WORDS

    @property
    def two_plans(self) -> bool:
        """Today's two plans (no "rungs"): the messages, Event reasons and metrics speak of plan A and plan B."""
        return not self.rungs

    @property
    def closable_flavors(self) -> tuple[str, ...]:
        """Every flavor the controller may taint: those of the rungs that are not queued."""
        return tuple(f for r in self.ladder if not r.queued for f in r.flavors)

    def rung_of(self, flavor: str | None) -> Rung | None:
        return next((r for r in self.ladder if flavor in r.flavors), None)

    def label(self, rung: Rung) -> str:
        """How a message names a rung."""
        if self.two_plans:
            return "plan B" if rung.queued else "plan A"
        return f"the {rung.name} rung"


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: dict[str, str]
    closed_since: float | None  # the value of the controller's taint (unix seconds), None when untainted


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
    # When GKE's autoscaler first said it has no capacity for one of its TPU pods (evidence.py: a no-capacity
    # FailedScaleUp, or a back-off it corroborates).
    stockout_event: float | None = None
    scale_up_since: float | None = None  # a scale-up triggered for one of its TPU pods, not failed since
    resource_version: str = ""  # the Workload's, as read: a patch carries it as a precondition
    tpu_pods: int = 0  # the pods of its TPU PodSet
    tpu_per_pod: Decimal = Decimal(0)  # google.com/tpu each of them requests
    # Kueue deactivated it because an admission check (DWS's) was rejected: Kueue's words, and since when
    # (Evicted reason DeactivatedDueToAdmissionCheck; Kueue v0.19.2 workload_controller.go).
    kueue_deactivated: str | None = None
    kueue_deactivated_since: float | None = None
    # Active again, yet Kueue will never queue it: its Requeued condition still False with the reason of Kueue's own
    # deactivation (Kueue v0.19.2 workload_controller.go flips Requeued back only for reason "Deactivated").
    stuck_unqueued: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Node:
    labels: dict[str, str]
    created: float
    ready: bool  # Ready and in service (not cordoned, not being removed)
    name: str = ""
    tpu_free: Decimal = Decimal(0)  # allocatable google.com/tpu minus what its pods request
    out_of_service: bool = False  # cordoned or being removed: not capacity, nor capacity on its way


@dataclass(frozen=True)
class FlavorEvidence:
    """What the pending TPU pods targeting one flavor say (evidence.py), attributed to a Workload or not."""

    flavor: str = ""
    no_capacity_since: float | None = None  # the earliest fresh no-capacity FailedScaleUp on one of them
    pod: str | None = None  # that pod ("namespace/name")
    workload: str | None = None  # its Workload ("namespace/name"), when attributed
    said: str | None = None  # GKE's words
    unattributed: tuple[str, ...] = ()  # unschedulable TPU pods here that belong to no Workload seen
    # The latest scale-up GKE triggered for one of them, not followed by a FailedScaleUp on this flavor: (when, how
    # many nodes it adds). Capacity on its way to the rung's pool, whichever pod the autoscaler meant it for.
    scale_up: tuple[float, int] | None = None


@dataclass(frozen=True)
class Snapshot:
    now: float
    flavors: dict[str, Flavor]
    workloads: tuple[Workload, ...]
    nodes: tuple[Node, ...]
    # ClusterQueue -> flavor -> resource -> nominal quota minus what is reserved.
    free: dict[str, dict[str, dict[str, Decimal]]]
    evidence: dict[str, FlavorEvidence] = field(default_factory=dict)  # flavor -> what its TPU pods say


# --- actions ----------------------------------------------------------------------------------------------------
# The class names are those of the two plans (ClosePlanA: close plan A); on a ladder they close or reopen `rung`.


@dataclass(frozen=True)
class ClosePlanA:
    flavors: tuple[str, ...]
    since: float
    cause: str | None  # the Workload ("ns/name") whose pods are the evidence, when known
    why: str
    rung: str = PLAN_A_RUNG
    new: bool = True  # False: completing a close cut short (a restart, a flavor added since)


@dataclass(frozen=True)
class ReopenPlanA:
    flavors: tuple[str, ...]
    why: str
    rung: str = PLAN_A_RUNG


@dataclass(frozen=True)
class Deactivate:
    """First half of a move up the ladder (plan B to plan A): Kueue releases the reservation (and its
    ProvisioningRequest)."""

    namespace: str
    name: str
    target: str  # the flavor with room for it, on a rung above its own
    why: str
    rung: str = PLAN_A_RUNG  # the target's rung


@dataclass(frozen=True)
class Reactivate:
    """Second half of a move (Kueue admits it to the rung above) or of an eviction (`after_eviction`: down the
    ladder): the Workload is queued again, with its place (creation time) kept."""

    namespace: str
    name: str
    why: str
    after_eviction: bool
    rung: str = PLAN_A_RUNG  # a move's target rung


@dataclass(frozen=True)
class Evict:
    """A job stuck on a stocked-out rung: deactivated so Kueue releases it, then reactivated (Reactivate)."""

    namespace: str
    name: str
    why: str
    rung: str = PLAN_A_RUNG  # the rung it leaves


@dataclass(frozen=True)
class TellDeactivation:
    """Kueue deactivated a Workload after its DWS admission check was rejected: say so once, in plain words."""

    namespace: str
    name: str
    why: str


@dataclass(frozen=True)
class Revive:
    """Queue again a Workload Kueue deactivated after its DWS check was rejected, once the cool-down has passed."""

    namespace: str
    name: str
    why: str
    count: int  # this revival's number


@dataclass(frozen=True)
class MarkRequeued:
    """Set a reactivated Workload's Requeued condition True, as Kueue does for any other reactivation."""

    namespace: str
    name: str
    why: str


Action = ClosePlanA | ReopenPlanA | Evict | Deactivate | Reactivate | TellDeactivation | Revive | MarkRequeued


def decide(config: Config, snap: Snapshot) -> list[Action]:
    """What to do, the taints first (every rung's close or reopen): a failing Workload patch must not hold them
    up. Then the evictions from closed rungs, the moves up the ladder, and the second halves of both."""
    taints: list[Action] = []
    evictions: list[Action] = []
    closed: set[str] = set()  # rungs closed after this pass, or reopened by it (Kueue sees the taint go first)
    for rung in config.ladder:
        if rung.queued:
            continue
        actions, is_closed = _decide_rung(config, snap, rung)
        taints += [a for a in actions if not isinstance(a, Evict)]
        evictions += [a for a in actions if isinstance(a, Evict)]
        if is_closed:
            closed.add(rung.name)
    moves: list[Action] = []
    if config.move_back:
        leaving = {(a.namespace, a.name) for a in evictions if isinstance(a, Evict)}
        moves = _moves_up(config, snap, closed, leaving)
    return taints + evictions + moves + _finish_moves(config, snap) + _deactivated_by_kueue(config, snap)


def revivals(w: Workload) -> int:
    """How often the controller queued the Workload again after Kueue deactivated it."""
    value = w.annotations.get(REVIVED_ANNOTATION, "")
    return int(value.split()[0]) if value[:1].isdigit() else 0


def _deactivated_by_kueue(config: Config, snap: Snapshot) -> list[Action]:
    """A Workload Kueue deactivated after its DWS admission check was rejected (GKE revoked its capacity, or retries
    ran out under a limited retryStrategy) would stay suspended for good. Tell it once; after the cool-down queue it
    again (Kueue resets the check and starts from the first flavor), at most MAX_REVIVALS times, then leave it to
    its owner with what to do."""
    out: list[Action] = []
    for w in snap.workloads:
        if w.stuck_unqueued and w.active and not w.finished and not w.quota_reserved and not w.multikueue_copy:
            out.append(MarkRequeued(w.namespace, w.name,
                                    f"{w.key} is active again but Kueue left it unqueued after deactivating it "
                                    "(Requeued False): marked requeued, as Kueue does for any other reactivation"))
            continue
        if w.active or w.finished or w.kueue_deactivated is None or w.multikueue_copy:
            continue
        done = revivals(w)
        since = w.kueue_deactivated_since or snap.now
        if KUEUE_DEACTIVATION_TOLD not in w.annotations:
            then = (f"the fallback queues it again in {config.cool_down:.0f}s (revival {done + 1} of {MAX_REVIVALS})"
                    if done < MAX_REVIVALS else
                    f"the fallback revived it {done} times already and leaves it: fix the cause, then reactivate it "
                    f"with kubectl patch workload -n {w.namespace} {w.name} --type=merge "
                    "-p '{\"spec\":{\"active\":true}}'")
            out.append(TellDeactivation(w.namespace, w.name,
                                        f"{w.key}: Kueue deactivated it: {w.kueue_deactivated}; {then}"))
        elif done < MAX_REVIVALS and snap.now - since >= config.cool_down:
            out.append(Revive(w.namespace, w.name,
                              f"{w.key}: deactivated by Kueue {snap.now - since:.0f}s ago ({w.kueue_deactivated}); "
                              f"queued again after the cool-down (revival {done + 1} of {MAX_REVIVALS})", done + 1))
    return out


def _decide_rung(config: Config, snap: Snapshot, rung: Rung) -> tuple[list[Action], bool]:
    """Close or reopen one rung that is not queued, on its own evidence, and evict the jobs stuck on it while it is
    closed. Also whether it is closed before or after these actions (no move goes to it this pass)."""
    actions: list[Action] = []
    flavors = [snap.flavors[n] for n in rung.flavors if n in snap.flavors]
    label = config.label(rung)
    closed = [f for f in flavors if f.closed_since is not None]
    if closed:
        since = min(f.closed_since for f in closed if f.closed_since is not None)
        reopen = _reopen_reason(config, snap, rung, flavors, since)
        if reopen:
            actions.append(ReopenPlanA(tuple(f.name for f in closed), reopen, rung.name))
            return actions, True
        if len(closed) < len(flavors):  # a close cut short (a restart), or a flavor added since
            actions.append(ClosePlanA(tuple(f.name for f in flavors if f.closed_since is None), since, None,
                                      f"completing the close of {label}", rung.name, new=False))
        return actions + _evictions(config, snap, rung), True
    seen = _rung_evidence(snap, rung)
    stuck = next(iter(_all_stuck_on(config, snap, rung)), None)
    if (stuck is None and seen is None) or not flavors:
        return actions, False
    below = "plan B" if config.two_plans else "the rungs below it"
    then = f"{label} has no capacity; new and requeued jobs go to {below} for up to {config.cool_down:.0f}s"
    if seen is not None and seen.no_capacity_since is not None:
        of = f" (of {seen.workload})" if seen.workload else " (of no Workload seen: not evicted)"
        why = (f"GKE's autoscaler reported no capacity for TPU pod {seen.pod}{of} on {seen.flavor} "
               f"{max(0.0, snap.now - seen.no_capacity_since):.0f}s ago ({_short(seen.said)}): {then}")
        actions.append(ClosePlanA(tuple(f.name for f in flavors), snap.now, seen.workload, why, rung.name))
        return actions + _evictions(config, snap, rung), True
    assert stuck is not None
    waited = snap.now - (stuck.admitted_since or snap.now)
    if stuck.pods_started and stuck.stockout_event is not None:
        evidence = (f"its pods ran, lost their nodes, and GKE's autoscaler reported no capacity for their "
                    f"replacements {max(0.0, snap.now - stuck.stockout_event):.0f}s ago")
    elif stuck.stockout_event is not None:
        evidence = (f"GKE's autoscaler reported no capacity for its unschedulable TPU pods "
                    f"{max(0.0, snap.now - stuck.stockout_event):.0f}s ago")
    else:
        evidence = (f"its TPU pods are still unschedulable after stockoutAfter ({config.stockout_after:.0f}s) "
                    "with no scale-up under way")
    why = f"{stuck.key} was admitted to {stuck.tpu_flavor} {waited:.0f}s ago and {evidence}: {then}"
    actions.append(ClosePlanA(tuple(f.name for f in flavors), snap.now, stuck.key, why, rung.name))
    return actions + _evictions(config, snap, rung), True


def _rung_evidence(snap: Snapshot, rung: Rung) -> FlavorEvidence | None:
    """The earliest no-capacity word of GKE on a pending TPU pod targeting one of the rung's flavors."""
    found = [e for f in rung.flavors if (e := snap.evidence.get(f)) is not None and e.no_capacity_since is not None]
    return min(found, key=lambda e: e.no_capacity_since or 0.0) if found else None


def _short(said: str | None, limit: int = 160) -> str:
    said = (said or "no message").strip()
    return said if len(said) <= limit else said[:limit - 1] + "…"


def _finish_moves(config: Config, snap: Snapshot) -> list[Action]:
    """Reactivate the Workloads deactivated for a move or an eviction once Kueue has released their reservation
    (also after a restart of the controller between the two halves)."""
    out: list[Action] = []
    for w in snap.workloads:
        if w.active or w.quota_reserved or w.finished:
            continue
        if MOVING_ANNOTATION in w.annotations:
            target = config.rung_of(_move_target(w.annotations[MOVING_ANNOTATION]))
            if config.two_plans or target is None:
                why = f"{w.key}: plan B reservation released; queued again for plan A"
            else:
                why = f"{w.key}: reservation released; queued again for {config.label(target)}"
            out.append(Reactivate(w.namespace, w.name, why, after_eviction=False,
                                  rung=target.name if target else PLAN_A_RUNG))
        elif EVICTING_ANNOTATION in w.annotations:
            why = (f"{w.key}: released from plan A; queued again for plan B" if config.two_plans
                   else f"{w.key}: released from a closed rung; queued again down the ladder")
            out.append(Reactivate(w.namespace, w.name, why, after_eviction=True, rung=""))
    return out


def _move_target(annotation: str) -> str | None:
    """The flavor in a move's annotation ("<time> to <flavor>")."""
    _, sep, flavor = annotation.partition(" to ")
    return flavor.strip() if sep else None


def _capacity_lost(config: Config, w: Workload) -> bool:
    """On a ladder: a job that ran, lost its nodes (a Spot preemption, a VM gone) and whose replacement pods GKE has
    no capacity for. (KubeRay keeps a RayCluster's state Ready once it was, so Kueue's PodsReady never tells.) On two
    plans such a job waits for its nodes, as it always did."""
    return not config.two_plans and w.pods_started and w.stockout_event is not None


def _waiting_on(config: Config, snap: Snapshot, rung: Rung) -> list[Workload]:
    """Workloads on a rung whose pods cannot be placed: once it is known to be stocked out, they wait in vain."""
    return [w for w in snap.workloads
            if w.tpu_flavor in rung.flavors and w.quota_reserved and w.active
            and (not w.pods_started or _capacity_lost(config, w)) and w.pods_unschedulable and not w.finished]


def _all_stuck_on(config: Config, snap: Snapshot, rung: Rung) -> list[Workload]:
    """The evidence of a stock-out on a rung: admitted jobs there with unschedulable TPU pods and GKE's no-capacity
    word on them, or still unschedulable after `stockout_after` (pods that never started only) with no scale-up
    under way for them. Scheduled pods (pulling, crash looping) never count."""
    return sorted((w for w in _waiting_on(config, snap, rung) if w.admitted_since is not None
                   and (w.stockout_event is not None
                        or (not w.pods_started and snap.now - w.admitted_since >= config.stockout_after
                            and not scaling_up(snap, w)))),
                  key=lambda w: (w.admitted_since or 0, w.key))


def scaling_up(snap: Snapshot, w: Workload) -> bool:
    """A scale-up is under way for the Workload's TPU pods: GKE's autoscaler triggered one that has neither failed
    nor run past its --max-node-provision-time, or nodes of its flavor's pool are being created (registered, not
    Ready yet) since it was admitted. A large multi-host slice can take longer than stockoutAfter to come up; the
    backstop must not give its VMs away mid-way."""
    if w.scale_up_since is not None and snap.now - w.scale_up_since < MAX_NODE_PROVISION:
        return True
    flavor = snap.flavors.get(w.tpu_flavor or "")
    if flavor is None:
        return False
    pool = _pool_nodes(flavor, snap.nodes)
    if any(not n.ready and not n.out_of_service and n.created >= (w.admitted_since or 0.0) for n in pool):
        return True
    return _pool_scale_up_in_flight(snap, flavor.name, pool, since=w.admitted_since or 0.0)


def _pool_scale_up_in_flight(snap: Snapshot, flavor: str, pool: list[Node], *, since: float) -> bool:
    """GKE triggered a scale-up of the flavor's pool (for any of its pending pods) since `since`, it has not failed,
    is within --max-node-provision-time, and not all of its nodes exist yet. The autoscaler may have meant those nodes
    for other pods (it writes NotTriggerScaleUp on the pods no upcoming node takes), but the scheduler decides who
    gets them: a pool that is growing is not stocked out, and its slice must not be given away mid-way. Once the nodes
    exist the registering-node rule above holds until they are Ready, and then the backstop may act."""
    evidence = snap.evidence.get(flavor)
    if evidence is None or evidence.scale_up is None:
        return False
    at, adds = evidence.scale_up
    if at < since or snap.now - at >= MAX_NODE_PROVISION:
        return False
    arrived = sum(1 for n in pool if n.created >= at - 1.0)  # whole-second times on both
    return arrived < adds


def _evictions(config: Config, snap: Snapshot, rung: Rung) -> list[Action]:
    """Evict every job stuck on a closed rung (a MultiKueue copy is the manager's to move, not ours)."""
    label = config.label(rung)
    then = "plan B" if config.two_plans else "the next open rung"
    return [Evict(w.namespace, w.name, f"{w.key} leaves {label}, which has no capacity: requeued for {then}",
                  rung.name)
            for w in _all_stuck_on(config, snap, rung)
            if not w.multikueue_copy and EVICTING_ANNOTATION not in w.annotations]


def _pool_nodes(flavor: Flavor, nodes: tuple[Node, ...]) -> list[Node]:
    """The nodes a flavor selects (all of its node labels match); none for a flavor without labels."""
    if not flavor.node_labels:
        return []
    return [n for n in nodes if all(n.labels.get(k) == v for k, v in flavor.node_labels.items())]


def cool_down_over(config: Config, closed_since: float | None, now: float) -> bool:
    """A close whose cool-down has passed: reopened whatever else is known (also by the controller's sweep)."""
    return closed_since is not None and now - closed_since >= config.cool_down


def cool_down_reason(config: Config, rung: Rung | None = None) -> str:
    label = config.label(rung or config.ladder[0])
    return f"the cool-down of {config.cool_down:.0f}s since {label} closed has passed; {label} is offered again"


def _reopen_reason(config: Config, snap: Snapshot, rung: Rung, flavors: list[Flavor], since: float) -> str | None:
    if cool_down_over(config, since, snap.now):
        return cool_down_reason(config, rung)
    for flavor in flavors:
        fresh = [n for n in _pool_nodes(flavor, snap.nodes) if n.ready and n.created > since]
        if fresh:
            return (f"a Ready node appeared in {flavor.name}'s pool after {config.label(rung)} closed: capacity is "
                    "back")
    return None


def _waiting_to_move(config: Config, snap: Snapshot, rung: Rung, leaving: set[tuple[str, str]]) -> list[Workload]:
    """Workloads holding quota on a rung whose capacity has not arrived: on a queued rung, DWS has not provisioned
    (not Admitted, no ProvisioningRequest Provisioned); on another, its pods never started and are unschedulable
    (waiting for a scale-up)."""
    if rung.queued:
        waiting = [w for w in snap.workloads if w.tpu_flavor in rung.flavors and w.admitted_since is None
                   and not w.capacity_arrived]
    else:
        waiting = [w for w in snap.workloads if w.tpu_flavor in rung.flavors and not w.pods_started
                   and w.pods_unschedulable]
    return [w for w in waiting
            if w.quota_reserved and w.active and not w.finished and not w.multikueue_copy
            and w.cluster_queue is not None and MOVING_ANNOTATION not in w.annotations
            and (w.namespace, w.name) not in leaving]


def _moves_up(config: Config, snap: Snapshot, closed: set[str], leaving: set[tuple[str, str]]) -> list[Action]:
    """A Workload waiting on rung k moves to the most preferred open rung above it (not queued) with a flavor whose
    quota is free in its ClusterQueue and whose pool has a free host for each of its TPU pods (Ready, in service, its
    TPUs not requested yet), or, on a reserved rung,
    no node yet (capacity held for it: the pool scales up from zero) when rung k is not reserved itself (a job
    waiting for a reservation's scale-up gains nothing from another one's). A Workload moved before moves again
    only to a rung above the one it was moved to (on two plans: at most once)."""
    free = {cq: {f: dict(r) for f, r in flavors.items()} for cq, flavors in snap.free.items()}
    ladder = config.ladder
    # Per flavor: the TPUs free on each Ready node of its pool (allocatable minus what its pods request).
    hosts = {f.name: [n.tpu_free for n in _pool_nodes(f, snap.nodes) if n.ready] for f in snap.flavors.values()}
    moving_to = _moving_to(snap)
    targets: list[list[Flavor]] = [  # per rung index: the open flavors a job may move to, no move under way there
        [] if r.queued or r.name in closed else [snap.flavors[n] for n in r.flavors
                                                 if n in snap.flavors and snap.flavors[n].closed_since is None
                                                 and n not in moving_to]
        for r in ladder]

    def capacity_seen(k: int, i: int, flavor: str, w: Workload) -> bool:
        """Free hosts for every TPU pod of the job in the target's pool, or a reserved target (capacity held for it)
        for a job not already on a reserved rung."""
        if ladder[i].reserved and not ladder[k].reserved:
            return True
        return _free_hosts(hosts.get(flavor, []), w) >= max(1, w.tpu_pods)

    waiting: list[tuple[int, Workload]] = []
    for k, rung in enumerate(ladder):
        waiting += [(k, w) for w in _waiting_to_move(config, snap, rung, leaving)]
    actions: list[Action] = []
    for k, w in sorted(waiting, key=lambda kw: (kw[1].created, kw[1].key)):
        above = k
        if MOVED_ANNOTATION in w.annotations:  # only higher than the rung it was last moved to
            moved_to = config.rung_of(_move_target(w.annotations[MOVED_ANNOTATION]))
            above = min(k, ladder.index(moved_to) if moved_to is not None else 0)
        room = free.get(w.cluster_queue or "", {})
        target = next(((i, f.name) for i in range(above) for f in targets[i]
                       if capacity_seen(k, i, f.name, w) and _fits(w.usage, room.get(f.name, {}))), None)
        if target is None:
            continue
        i, flavor = target
        for resource, amount in w.usage.items():
            room[flavor][resource] -= amount
        free_hosts = _free_hosts(hosts.get(flavor, []), w)
        _take_hosts(hosts.get(flavor, []), w)
        if config.two_plans:
            capacity = _capacity_words(ladder[i].reserved and not ladder[k].reserved, free_hosts)
            why = (f"{w.key} waits on {w.tpu_flavor} for DWS capacity while {flavor} has the quota free and "
                   f"{capacity}: moving it to plan A")
        else:
            wait = "DWS capacity" if ladder[k].queued else "a scale-up"
            capacity = _capacity_words(ladder[i].reserved and not ladder[k].reserved, free_hosts)
            why = (f"{w.key} waits on {w.tpu_flavor} ({ladder[k].name}) for {wait} while {flavor} has the quota "
                   f"free and {capacity}: moving it up to {config.label(ladder[i])}")
        actions.append(Deactivate(w.namespace, w.name, flavor, why, ladder[i].name))
    return actions


def _moving_to(snap: Snapshot) -> set[str]:
    """The flavors a move is under way to: its Workload deactivated (MOVING), or queued again (MOVED, no quota yet).
    Their room shows free until Kueue admits the moved Workload there, so no other move goes to them meanwhile."""
    out: set[str] = set()
    for w in snap.workloads:
        if w.finished:
            continue
        if MOVING_ANNOTATION in w.annotations:
            target = _move_target(w.annotations[MOVING_ANNOTATION])
        elif MOVED_ANNOTATION in w.annotations and w.active and not w.quota_reserved:
            target = _move_target(w.annotations[MOVED_ANNOTATION])
        else:
            continue
        if target:
            out.add(target)
    return out


def _capacity_words(held: bool, free_hosts: int) -> str:
    if not held:
        return f"{free_hosts} free Ready node{'s' if free_hosts != 1 else ''}"
    if free_hosts > 0:
        return f"its reservation's capacity held for it ({free_hosts} free Ready node{'s' if free_hosts != 1 else ''})"
    return "its reservation's capacity held for it (no node yet: its pool scales up from zero)"


def _free_hosts(free: list[Decimal], w: Workload) -> int:
    """How many of a pool's Ready nodes could each take one TPU pod of the job (all of its TPUs free, for a job
    whose per-pod request is not known)."""
    return sum(1 for tpus in free if tpus > 0 and tpus >= w.tpu_per_pod)


def _take_hosts(free: list[Decimal], w: Workload) -> None:
    """Count the hosts a move takes as busy, so that a second move in the same pass does not count them again."""
    need = max(1, w.tpu_pods)
    for i, tpus in enumerate(free):
        if need and tpus > 0 and tpus >= w.tpu_per_pod:
            free[i] = tpus - (w.tpu_per_pod or tpus)
            need -= 1


def _fits(usage: dict[str, Decimal], room: dict[str, Decimal]) -> bool:
    return bool(usage) and all(room.get(resource, Decimal(0)) >= amount for resource, amount in usage.items())
