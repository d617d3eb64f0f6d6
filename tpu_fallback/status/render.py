"""`tpu-fallback status` output: a block of plain lines per job, or JSON for scripts (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tpu_fallback.status.explain import JobStatus, Rung, State, age

HEADLINE = {
    State.WAITING: "waiting for quota",
    State.PROVISIONING: "waiting for capacity",
    State.ADMITTED: "admitted, starting",
    State.RUNNING: "running",
    State.EVICTED: "evicted, being requeued",
    State.DEACTIVATED: "deactivated",
    State.FINISHED: "finished",
    State.FAILED: "failed",
}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def text(statuses: Sequence[JobStatus], now: float, notes: Sequence[str] = (), scope: str = "",
         closed: Sequence[Rung] = (), rung_names: Mapping[str, str] | None = None) -> str:
    lines = [f"note: {n}" for n in notes]
    for rung in closed:
        name = (rung_names or {}).get(rung.flavor, rung.flavor)
        until = f", reopens at {_clock(rung.reopens_at)}" if rung.reopens_at else ""
        lines.append(f"closed: {name}, flavor {rung.flavor}, since {_clock(rung.closed_since)}{until}: "
                     "GKE reported no capacity; new jobs go to the next rung")
    if not statuses:
        lines.append(f"no jobs in Kueue's queues{(' in ' + scope) if scope else ''}")
        return "\n".join(lines) + "\n"
    for s in statuses:
        if lines:
            lines.append("")
        head = f"{s.namespace}/{s.job_name} ({s.job_kind}): {HEADLINE[s.state]}"
        if s.since is not None:
            head += f" for {age(now - s.since)}"
        if s.position is not None:
            head += f", {_ordinal(s.position)} in line{' (estimated)' if s.position_source == 'estimated' else ''}"
        lines.append(head)
        lines.append(f"  workload  {s.workload}, queue {s.queue or '?'}"
                     + (f" -> {s.cluster_queue}" if s.cluster_queue else ""))
        where = [part for part in (s.rung, f"flavor {s.flavor}" if s.flavor else None,
                                   f"pool {s.pool}" if s.pool else None,
                                   f"worker cluster {s.worker_cluster}" if s.worker_cluster else None) if part]
        if where:
            lines.append(f"  where     {', '.join(where)}")
        for i, why in enumerate(s.why):
            lines.append(f"  {'why' if i == 0 else '':<8}  {why}")
        if s.evictions:
            lines.append(f"  evicted   {s.evictions} time{'s' if s.evictions != 1 else ''} so far")
        for event in s.fallback[-3:]:
            lines.append(f"  fallback  {_clock(event.at)} {event.reason}: {event.message}")
        lines.append(f"  next      {s.next}")
    return "\n".join(lines) + "\n"


def as_json(statuses: Sequence[JobStatus], now: float, notes: Sequence[str] = (), closed: Sequence[Rung] = ()
            ) -> str:
    return json.dumps({"now": _iso(now), "notes": list(notes),
                       "closedRungs": [_rung(r) for r in closed],
                       "jobs": [_job(s, now) for s in statuses]}, indent=2) + "\n"


def _rung(r: Rung) -> dict[str, Any]:
    return {"flavor": r.flavor, "since": _iso(r.closed_since), "reopensAt": _iso(r.reopens_at)}


def _job(s: JobStatus, now: float) -> dict[str, Any]:
    return {
        "namespace": s.namespace, "job": {"kind": s.job_kind, "name": s.job_name}, "workload": s.workload,
        "queue": s.queue, "clusterQueue": s.cluster_queue, "state": s.state.value,
        "since": _iso(s.since), "seconds": None if s.since is None else max(0, int(now - s.since)),
        "where": {"rung": s.rung, "flavor": s.flavor, "pool": s.pool, "workerCluster": s.worker_cluster},
        "why": list(s.why), "next": s.next,
        "position": None if s.position is None else {"inClusterQueue": s.position, "source": s.position_source},
        "provisioningRequest": None if s.provisioning is None else {
            "name": s.provisioning.name, "check": s.provisioning.check, "attempt": s.provisioning.attempt,
            "state": s.provisioning.state, "message": s.provisioning.message,
            "retriesLeft": s.provisioning.retries_left},
        "fallback": [{"at": _iso(e.at), "reason": e.reason, "message": e.message} for e in s.fallback],
        "closedRungs": [_rung(r) for r in s.closed_rungs],
        "evictions": s.evictions,
    }


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clock(at: float | None) -> str:
    if at is None:
        return "?"
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%SZ")
