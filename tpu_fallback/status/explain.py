"""Where a job is and why it waits, from the objects Kubernetes holds (pure: plain dicts in, JobStatus out).

Read from Kueue's Workload (its conditions, admission, admission checks, requeue state; Kueue v0.19.2
apis/kueue/v1beta2/workload_types.go), the ProvisioningRequest Kueue made for it (autoscaling.x-k8s.io/v1: Accepted,
Provisioned, Failed, BookingExpired, CapacityRevoked; Kueue's pkg/controller/admissionchecks/provisioning/
controller.go names it `<workload>-<check>-<attempt>` and retries a failed one while attempt <= backoffLimitCount),
the fallback controller's Events on the Workload and the taints it puts on ResourceFlavors (a closed rung), and
Kueue's visibility API for the place in the queue (estimated from the Workloads where that API is not served).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from tpu_fallback.model.quantity import parse_quantity

# The fallback controller's taint on a closed rung's flavors and its Event reasons (tpu_fallback/fallback/decide.py:
# TAINT_KEY, PLAN_WORDS, LADDER_WORDS); status must not import the controller's package (layers), so they are
# repeated here and tests/test_status.py checks that the two agree.
TAINT_KEY = "tpu-fallback.dev/plan-a-stockout"
FALLBACK_REASONS = frozenset({
    "PlanAStockOut", "PlanAReopened", "EvictedFromPlanA", "MovingToPlanA", "MovedToPlanA",
    "RungStockOut", "RungReopened", "EvictedFromRung", "MovingUp", "MovedUp",
    "DeactivatedByKueue", "Revived"})
PLAN_A_RUNG = "onDemand"
UNLIMITED_RETRIES = 2**31 - 1  # the stack's backoffLimitCount (int32 max): retried for as long as the job waits


class State(StrEnum):
    WAITING = "waiting"  # no quota reserved yet
    PROVISIONING = "provisioning"  # quota reserved; an admission check (DWS) still works on it
    ADMITTED = "admitted"  # admitted; its pods are not all ready yet
    RUNNING = "running"
    EVICTED = "evicted"  # evicted and about to be requeued
    DEACTIVATED = "deactivated"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Provisioning:
    """The ProvisioningRequest of an admission check: what GKE's DWS said of it."""

    name: str
    check: str
    attempt: int
    state: str  # "accepted", "provisioned", "failed", "booking expired", "capacity revoked", "created"
    message: str
    retries_left: int | None  # None: unlimited, or unknown


@dataclass(frozen=True)
class Rung:
    """A flavor the fallback closed: since when, until when."""

    flavor: str
    closed_since: float
    reopens_at: float | None


@dataclass(frozen=True)
class FallbackEvent:
    at: float
    reason: str
    message: str


@dataclass(frozen=True)
class JobStatus:
    namespace: str
    workload: str
    job_kind: str
    job_name: str
    queue: str
    cluster_queue: str
    state: State
    since: float | None
    flavor: str | None = None
    pool: str | None = None
    rung: str | None = None
    worker_cluster: str | None = None
    why: tuple[str, ...] = ()
    next: str = ""
    position: int | None = None
    position_source: str | None = None  # "visibility API" or "estimated"
    provisioning: Provisioning | None = None
    fallback: tuple[FallbackEvent, ...] = ()
    closed_rungs: tuple[Rung, ...] = ()
    evictions: int = 0


@dataclass(frozen=True)
class Cluster:
    """What status reads, as the API server returned it (lists of objects as dicts)."""

    now: float
    workloads: Sequence[Mapping[str, Any]]
    flavors: Sequence[Mapping[str, Any]] = ()
    local_queues: Sequence[Mapping[str, Any]] = ()
    cluster_queues: Sequence[Mapping[str, Any]] = ()
    provisioning_requests: Sequence[Mapping[str, Any]] = ()
    provisioning_configs: Sequence[Mapping[str, Any]] = ()
    admission_checks: Sequence[Mapping[str, Any]] = ()
    events: Sequence[Mapping[str, Any]] = ()
    controller: Mapping[str, Any] | None = None  # the fallback controller's config.json, when readable
    # (namespace, workload) -> its place in its ClusterQueue from Kueue's visibility API (1 = next); None: not served
    positions: Mapping[tuple[str, str], int] | None = None
    notes: tuple[str, ...] = ()  # what could not be read (said once, above the jobs)


def parse_time(value: Any) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC).timestamp()


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _true(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    cond = _condition(obj, kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def _since(cond: Mapping[str, Any] | None) -> float | None:
    return parse_time(cond.get("lastTransitionTime")) if cond else None


def _owner(wl: Mapping[str, Any]) -> tuple[str, str]:
    owners = (wl.get("metadata") or {}).get("ownerReferences") or []
    chosen = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    if chosen is None:
        return "Workload", str(wl["metadata"]["name"])
    return str(chosen.get("kind", "")), str(chosen.get("name", ""))


def _flavor_of(wl: Mapping[str, Any]) -> str | None:
    """The flavor of its TPU resource (google.com/tpu) if any, else of its first assigned resource."""
    assignments = ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
    fallback: str | None = None
    for assignment in assignments:
        flavors = assignment.get("flavors") or {}
        if "google.com/tpu" in flavors:
            return str(flavors["google.com/tpu"])
        if fallback is None and flavors:
            fallback = str(next(iter(flavors.values())))
    return fallback


def _pool(flavor: Mapping[str, Any] | None) -> str | None:
    labels = ((flavor or {}).get("spec") or {}).get("nodeLabels") or {}
    return labels.get("cloud.google.com/gke-nodepool") or (", ".join(f"{k}={v}" for k, v in labels.items()) or None)


def closed_rungs(cluster: Cluster) -> dict[str, Rung]:
    """Flavors the fallback closed, by name: its taint's value is the close time (unix seconds)."""
    cool_down = float((cluster.controller or {}).get("coolDownSeconds") or 0) or None
    taint_key = str((cluster.controller or {}).get("taintKey") or TAINT_KEY)
    found: dict[str, Rung] = {}
    for flavor in cluster.flavors:
        for taint in (flavor.get("spec") or {}).get("nodeTaints") or []:
            if taint.get("key") == taint_key:
                try:
                    since = float(taint.get("value") or 0)
                except ValueError:
                    since = 0.0
                name = str(flavor["metadata"]["name"])
                found[name] = Rung(name, since, since + cool_down if cool_down and since else None)
    return found


def rung_names(controller: Mapping[str, Any] | None) -> dict[str, str]:
    """flavor -> its rung's name, from the controller's config (two plans: plan A and plan B)."""
    if not controller:
        return {}
    if controller.get("rungs"):
        return {str(f): str(r["name"]) for r in controller["rungs"] for f in r.get("flavors") or []}
    return {**{str(f): "plan A (on-demand)" for f in controller.get("planAFlavors") or []},
            **{str(f): "plan B (DWS flex-start)" for f in controller.get("planBFlavors") or []}}


def _provisioning(cluster: Cluster, wl: Mapping[str, Any]) -> Provisioning | None:
    """The latest ProvisioningRequest of the Workload's admission checks (owned by the Workload)."""
    meta = wl["metadata"]
    uid, name, namespace = meta.get("uid"), str(meta["name"]), meta.get("namespace")
    checks = [str(c.get("name")) for c in (wl.get("status") or {}).get("admissionChecks") or []]
    latest: tuple[int, str, Mapping[str, Any]] | None = None
    for pr in cluster.provisioning_requests:
        pmeta = pr["metadata"]
        if pmeta.get("namespace") != namespace:
            continue
        owned = any(o.get("uid") == uid for o in pmeta.get("ownerReferences") or []) if uid else False
        for check in checks:
            prefix = f"{name}-{check}-"
            if (owned or not uid) and str(pmeta["name"]).startswith(prefix):
                tail = str(pmeta["name"])[len(prefix):]
                attempt = int(tail) if tail.isdigit() else 0
                if latest is None or attempt > latest[0]:
                    latest = (attempt, check, pr)
    if latest is None:
        return None
    attempt, check, pr = latest
    state, message = "created", ""
    for kind, word in (("CapacityRevoked", "capacity revoked"), ("Failed", "failed"),
                       ("BookingExpired", "booking expired"), ("Provisioned", "provisioned"),
                       ("Accepted", "accepted")):
        cond = _true(pr, kind)
        if cond is not None:
            state, message = word, str(cond.get("message") or "")
            break
    if state == "accepted":  # Kueue passes the Provisioned=False message on (GKE's ETA, or why it waits)
        pending = _condition(pr, "Provisioned")
        message = str((pending or {}).get("message") or message)
    return Provisioning(str(pr["metadata"]["name"]), check, attempt, state, message, _retries_left(cluster, check,
                                                                                                    attempt))


def _retries_left(cluster: Cluster, check: str, attempt: int) -> int | None:
    """Kueue retries a failed request while its attempt <= backoffLimitCount (None: unlimited or unknown)."""
    ac = next((a for a in cluster.admission_checks if a["metadata"]["name"] == check), None)
    params = ((ac or {}).get("spec") or {}).get("parameters") or {}
    config = next((c for c in cluster.provisioning_configs if c["metadata"]["name"] == params.get("name")), None)
    if config is None:
        return None
    limit = ((config.get("spec") or {}).get("retryStrategy") or {}).get("backoffLimitCount")
    if limit is None or int(limit) >= UNLIMITED_RETRIES:
        return None
    return max(0, int(limit) - attempt + 1) if attempt else int(limit)


def _fallback_events(cluster: Cluster, wl: Mapping[str, Any]) -> tuple[FallbackEvent, ...]:
    meta = wl["metadata"]
    found = []
    for event in cluster.events:
        involved = event.get("involvedObject") or {}
        if (involved.get("kind") == "Workload" and involved.get("name") == meta["name"]
                and involved.get("namespace", event.get("metadata", {}).get("namespace")) == meta.get("namespace")
                and event.get("reason") in FALLBACK_REASONS):
            at = parse_time(event.get("lastTimestamp") or event.get("eventTime")
                            or (event.get("metadata") or {}).get("creationTimestamp")) or 0.0
            found.append(FallbackEvent(at, str(event["reason"]), str(event.get("message") or "")))
    return tuple(sorted(found, key=lambda e: e.at))


def _estimated_positions(workloads: Iterable[Mapping[str, Any]], queues: Mapping[tuple[str, str], str]
                         ) -> dict[tuple[str, str], int]:
    """Kueue's order within a ClusterQueue (pkg/queue: higher priority first, then the earlier queue time: the
    creation time, or the last requeue after an eviction), for the Workloads that wait for quota."""
    waiting: dict[str, list[tuple[int, float, tuple[str, str]]]] = {}
    for wl in workloads:
        key = (str(wl["metadata"].get("namespace")), str(wl["metadata"]["name"]))
        if not _is_waiting(wl) or key not in queues:
            continue
        requeued = _true(wl, "Requeued")
        at = _since(requeued) if _true(wl, "Evicted") is None and requeued and _condition(wl, "Evicted") else None
        at = at or parse_time(wl["metadata"].get("creationTimestamp")) or 0.0
        priority = int((wl.get("spec") or {}).get("priority") or 0)
        waiting.setdefault(queues[key], []).append((-priority, at, key))
    positions: dict[tuple[str, str], int] = {}
    for entries in waiting.values():
        for place, (_p, _at, key) in enumerate(sorted(entries), start=1):
            positions[key] = place
    return positions


def _is_waiting(wl: Mapping[str, Any]) -> bool:
    return ((wl.get("spec") or {}).get("active", True) is not False and _true(wl, "QuotaReserved") is None
            and _true(wl, "Finished") is None)


def explain(cluster: Cluster) -> list[JobStatus]:
    """One JobStatus per Workload, the oldest first."""
    rungs_of = rung_names(cluster.controller)
    closed = closed_rungs(cluster)
    flavors = {str(f["metadata"]["name"]): f for f in cluster.flavors}
    queue_of_lq: dict[tuple[str, str], str] = {}
    for wl in cluster.workloads:
        meta = wl["metadata"]
        admission = (wl.get("status") or {}).get("admission") or {}
        cq = admission.get("clusterQueue") or _cluster_queue_of(cluster, wl)
        queue_of_lq[(str(meta.get("namespace")), str(meta["name"]))] = str(cq or "")
    positions = cluster.positions
    position_source = "visibility API"
    if positions is None:
        positions, position_source = _estimated_positions(cluster.workloads, queue_of_lq), "estimated"
    out = [_one(cluster, wl, rungs_of, closed, flavors, queue_of_lq, positions, position_source)
           for wl in cluster.workloads]
    return sorted(out, key=lambda s: (s.namespace, s.since or 0.0, s.workload))


def _cluster_queue_of(cluster: Cluster, wl: Mapping[str, Any]) -> str | None:
    """A waiting Workload's ClusterQueue: its LocalQueue's."""
    namespace, queue = wl["metadata"].get("namespace"), (wl.get("spec") or {}).get("queueName")
    for lq in cluster.local_queues:
        if lq["metadata"].get("namespace") == namespace and lq["metadata"]["name"] == queue:
            return str((lq.get("spec") or {}).get("clusterQueue") or "") or None
    return None


def _one(cluster: Cluster, wl: Mapping[str, Any], rungs_of: Mapping[str, str], closed: Mapping[str, Rung],
         flavors: Mapping[str, Mapping[str, Any]], queue_of: Mapping[tuple[str, str], str],
         positions: Mapping[tuple[str, str], int], position_source: str) -> JobStatus:
    meta, spec, status = wl["metadata"], wl.get("spec") or {}, wl.get("status") or {}
    key = (str(meta.get("namespace")), str(meta["name"]))
    kind, job = _owner(wl)
    flavor = _flavor_of(wl)
    provisioning = _provisioning(cluster, wl)
    fallback = _fallback_events(cluster, wl)
    evictions = sum(int(e.get("count") or 0) for e in (status.get("schedulingStats") or {}).get("evictions") or [])
    state, since, why, nxt = _state(cluster, wl, provisioning, closed, rungs_of)
    # The rungs closed now that this job's path runs through (all of them while it waits, its own once admitted).
    relevant = tuple(sorted(closed.values(), key=lambda r: r.flavor)) if state in (
        State.WAITING, State.EVICTED) else tuple(r for r in closed.values() if r.flavor == flavor)
    placed = state not in (State.WAITING, State.DEACTIVATED)
    return JobStatus(
        namespace=key[0], workload=key[1], job_kind=kind, job_name=job, queue=str(spec.get("queueName") or ""),
        cluster_queue=queue_of.get(key, ""), state=state, since=since,
        flavor=flavor if placed else None,
        pool=_pool(flavors.get(flavor or "")) if placed and flavor else None,
        rung=rungs_of.get(flavor or "") if placed and flavor else None,
        worker_cluster=status.get("clusterName") or None, why=tuple(why), next=nxt,
        position=positions.get(key) if state == State.WAITING else None,
        position_source=position_source if state == State.WAITING and key in positions else None,
        provisioning=provisioning, fallback=fallback, closed_rungs=relevant, evictions=evictions)


def _state(cluster: Cluster, wl: Mapping[str, Any], provisioning: Provisioning | None,
           closed: Mapping[str, Rung], rungs_of: Mapping[str, str]) -> tuple[State, float | None, list[str], str]:
    """The state, since when, why (plain words) and what happens next."""
    spec = wl.get("spec") or {}
    created = parse_time(wl["metadata"].get("creationTimestamp"))

    finished = _true(wl, "Finished")
    if finished is not None:
        ok = str(finished.get("reason")) in ("Succeeded", "")
        return (State.FINISHED if ok else State.FAILED, _since(finished),
                [_words(finished) or ("it succeeded" if ok else "it failed")],
                "nothing: its quota is free again" + ("" if ok else "; see the job's logs for why it failed"))

    if spec.get("active") is False:
        evicted = _condition(wl, "Evicted")
        reason = str((evicted or {}).get("reason") or "")
        why = [f"deactivated: {_words(evicted) or 'spec.active is false'}"]
        since = _since(evicted) or created
        if reason.startswith("DeactivatedDueTo"):
            why.append("Kueue deactivated it" + (f" ({reason})" if reason else ""))
            cool_down = float((cluster.controller or {}).get("coolDownSeconds") or 0)
            at = f" (at {_clock(since + cool_down)})" if cool_down and since else ""
            nxt = (f"the fallback controller queues it again after its cool-down{at}, up to 3 times"
                   if cluster.controller else
                   "it stays suspended until someone sets spec.active to true on its Workload")
        else:
            nxt = "it stays suspended until someone sets spec.active to true on its Workload"
        return State.DEACTIVATED, since, why, nxt

    evicted = _true(wl, "Evicted")
    if evicted is not None and _true(wl, "QuotaReserved") is None:
        why = [f"evicted: {_words(evicted)}"]
        return State.EVICTED, _since(evicted), why, "Kueue requeues it: it waits for quota on the next open rung"

    admitted, reserved = _true(wl, "Admitted"), _true(wl, "QuotaReserved")
    flavor = _flavor_of(wl)
    rung = rungs_of.get(flavor or "", flavor or "")
    if admitted is not None:
        ready = _true(wl, "PodsReady")
        if ready is not None:
            return State.RUNNING, _since(ready), [f"running on {rung}"], "it runs until it finishes"
        why = [f"admitted to {rung}; its pods are not all ready yet"]
        pods_ready = _condition(wl, "PodsReady")
        if pods_ready is not None and pods_ready.get("message"):
            why.append(f"Kueue: {pods_ready['message']}")
        if provisioning is not None and provisioning.state == "provisioned":
            why.append(f"DWS provisioned its nodes ({provisioning.name})")
        if flavor is not None and flavor in closed:
            why.append(f"{rung} is closed since {_clock(closed[flavor].closed_since)}: GKE has no capacity there")
            return (State.ADMITTED, _since(admitted), why,
                    "the fallback controller evicts it so that Kueue requeues it on the next open rung")
        return (State.ADMITTED, _since(admitted), why,
                "its pods start once their nodes are up (a TPU slice's nodes come up together)")

    if reserved is not None:
        why = [f"quota reserved on {rung}; waiting for its admission check"]
        checks = (wl.get("status") or {}).get("admissionChecks") or []
        for check in checks:  # a check with a ProvisioningRequest is said below, from the request itself
            if check.get("state") != "Ready" and (provisioning is None or check.get("name") != provisioning.check):
                why.append(f"admission check {check.get('name')}: {check.get('state')}"
                           + (f": {check['message']}" if check.get("message") else ""))
        nxt = "Kueue admits it when its admission checks are ready"
        if provisioning is not None:
            why.append(_provisioning_words(provisioning))
            nxt = _provisioning_next(provisioning)
        return State.PROVISIONING, _since(reserved), why, nxt

    # Waiting for quota.
    why = []
    usage = _tpu_quota_use(cluster, wl)
    if usage:
        why.append(f"TPU quota in use: {usage}")
    pending = _condition(wl, "QuotaReserved")
    if pending is not None and pending.get("message"):
        why.append(f"Kueue: {pending['message']}")
    else:
        why.append("Kueue has not tried it yet: the jobs ahead of it in line go first")
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        if check.get("state") in ("Retry", "Rejected"):
            why.append(f"admission check {check.get('name')}: {check.get('state')}"
                       + (f": {check['message']}" if check.get("message") else ""))
    if provisioning is not None and provisioning.state in ("failed", "booking expired"):
        why.append(_provisioning_words(provisioning))
    for rung_state in sorted(closed.values(), key=lambda r: r.flavor):
        until = f", reopens at {_clock(rung_state.reopens_at)}" if rung_state.reopens_at else ""
        why.append(f"{rungs_of.get(rung_state.flavor, rung_state.flavor)} ({rung_state.flavor}) is closed since "
                   f"{_clock(rung_state.closed_since)}{until}: GKE reported no capacity")
    requeue_at = parse_time(((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt"))
    if requeue_at and requeue_at > cluster.now:
        why.append(f"Kueue requeues it at {_clock(requeue_at)} (back-off after an eviction)")
    requeued = _true(wl, "Requeued")
    since = max(t for t in (created, _since(requeued), _since(pending)) if t is not None) if any(
        t is not None for t in (created, _since(requeued), _since(pending))) else None
    return State.WAITING, since, why, "Kueue admits it when quota frees on a rung it may use"


def _tpu_quota_use(cluster: Cluster, wl: Mapping[str, Any]) -> str:
    """"on-demand 16 of 16 chips, dws 16 of 16" for the TPU flavors of the Workload's ClusterQueue, from its quota
    (spec.resourceGroups) and what Kueue reserved (status.flavorsReservation); "" when the queue is not read."""
    name = _cluster_queue_of(cluster, wl)
    queue = next((q for q in cluster.cluster_queues if q["metadata"]["name"] == name), None)
    if queue is None:
        return ""
    reserved = {str(f.get("name")): {str(r.get("name")): r.get("total") for r in f.get("resources") or []}
                for f in (queue.get("status") or {}).get("flavorsReservation") or []}
    parts = []
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            quota = {str(r.get("name")): r.get("nominalQuota") for r in flavor.get("resources") or []}
            if "google.com/tpu" not in quota:
                continue
            used = parse_quantity(str(reserved.get(str(flavor["name"]), {}).get("google.com/tpu") or "0"))
            total = parse_quantity(str(quota["google.com/tpu"] or "0"))
            if total == 0:
                continue  # a CPU flavor in the TPU resource group (the chips covered, none given)
            label = str(flavor["name"])  # the tutorial's unlimited quota is 1e9
            parts.append(f"{label} {used:f} of {total:f} chips" if total < 10**6 else f"{label} {used:f} of no limit")
    return ", ".join(parts)


def _provisioning_words(p: Provisioning) -> str:
    retries = "retried without limit" if p.retries_left is None else f"{p.retries_left} retries left"
    said = f": {p.message}" if p.message else ""
    return {
        "created": f"ProvisioningRequest {p.name} (attempt {p.attempt}) created; GKE's DWS has not answered yet",
        "accepted": f"ProvisioningRequest {p.name} (attempt {p.attempt}): DWS accepted it and looks for capacity"
                    f"{said}",
        "provisioned": f"ProvisioningRequest {p.name}: DWS provisioned the nodes{said}",
        "failed": f"ProvisioningRequest {p.name} (attempt {p.attempt}) failed{said}; {retries}",
        "booking expired": f"ProvisioningRequest {p.name}: its booking expired before the pods ran{said}; {retries}",
        "capacity revoked": f"ProvisioningRequest {p.name}: GKE revoked its capacity{said}",
    }.get(p.state, f"ProvisioningRequest {p.name}: {p.state}{said}")


def _provisioning_next(p: Provisioning) -> str:
    if p.state in ("created", "accepted"):
        return ("GKE creates the whole slice at once when DWS finds capacity, then Kueue admits the job "
                "(no partial slice is ever billed)")
    if p.state == "provisioned":
        return "Kueue admits it now and its pods start on the new nodes"
    if p.state in ("failed", "booking expired"):
        if p.retries_left == 0:
            return "no retries are left: Kueue rejects the check and deactivates the job"
        return "Kueue makes a new ProvisioningRequest after its back-off"
    return "Kueue deactivates it; the fallback controller revives it after its cool-down"


def _words(cond: Mapping[str, Any] | None) -> str:
    if not cond:
        return ""
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    return f"{message} ({reason})" if message and reason else message or reason


def _clock(at: float | None) -> str:
    if at is None:
        return "?"
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%SZ")


def age(seconds: float) -> str:
    """kubectl's short age: 45s, 3m12s, 2h5m, 3d4h."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"
