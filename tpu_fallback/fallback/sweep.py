"""The sweeper: what the controller leaves in the cluster is undone without it (`python -m tpu_fallback.fallback
--config config.json --sweep`, a CronJob every minute; render/fallback.py).

A close (our taint on a flavor) is removed by a running controller after its cool-down, and a Workload it
deactivated (an eviction or a move, annotated) is reactivated by it once Kueue released it. A controller that
crash-loops, or was killed and cannot start again (its node gone, no room on the system pool), does neither: the
close outlived the cool-down and the job stayed suspended until a working controller came back (issue 37). The
sweep needs no running controller, only Kubernetes' CronJob controller:

1. The Lease (lease.py): a controller renewed within its duration is live and does all this itself: the sweep
   touches nothing.
2. Otherwise every close whose cool-down has passed is reopened (`Controller.sweep()`: it reads only the flavors,
   writes with the resourceVersion read and keeps every other taint), and
3. every Workload still inactive with our annotation (an eviction or a move cut short) is queued again once its
   stamp is older than the grace (GRACE_POLLS passes of the controller, at least MIN_GRACE seconds), our annotation
   removed, on the Workload as read (a 409: it changed meanwhile, looked at again next minute). A stamp that cannot
   be read counts as old: no job may wait on a controller that is not coming back.

What it does is logged (one line per flavor or Workload) with an Event on each Workload queued again; an error exits
non-zero, so the CronJob's Job shows it failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.config import Settings
from tpu_fallback.fallback.controller import Controller
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.fallback.lease import LeaseRef, live
from tpu_fallback.fallback.read import KUEUE

log = logging.getLogger("tpu-fallback")

COMPONENT = "tpu-fallback-sweeper"  # its Events' source
GRACE_POLLS = 2  # a deactivated Workload younger than this many of the controller's passes is left alone
MIN_GRACE = 10.0  # seconds, whatever pollIntervalSeconds says
OURS = (d.EVICTING_ANNOTATION, d.MOVING_ANNOTATION)


@dataclass
class Swept:
    """What one sweep did."""

    holder: str | None = None  # the live controller that kept the sweep from acting
    reopened: list[str] = field(default_factory=list)  # flavors
    requeued: list[str] = field(default_factory=list)  # namespace/name of Workloads
    kept: list[str] = field(default_factory=list)  # ours, deactivated, younger than the grace
    errors: list[str] = field(default_factory=list)


def grace(settings: Settings) -> float:
    return max(MIN_GRACE, GRACE_POLLS * settings.poll_interval)


def stamp_of(value: str) -> float | None:
    """The time at the head of our annotation's value ("2026-12-01T10:00:00Z", or "... to <rung>" for a move)."""
    head = value.split(" ", 1)[0] if value else ""
    try:
        return datetime.strptime(head, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def lease_holder(kube: Kube, ref: LeaseRef | None, now: float) -> str | None:
    """The live controller's identity, or None when no controller renewed the Lease within its duration."""
    if ref is None:
        return None
    try:
        lease = kube.get(ref.path)
    except KubeError as err:
        if err.status == 404:
            return None  # no controller ever held it
        raise
    spec = lease.get("spec") or {}
    return str(spec["holderIdentity"]) if live(spec, now) else None


def requeue_abandoned(kube: Kube, settings: Settings, now: float, swept: Swept) -> None:
    """Reactivate the Workloads our controller deactivated and left so for longer than the grace."""
    wait = grace(settings)
    for obj in kube.list(f"{KUEUE}/workloads"):
        meta = obj["metadata"]
        annotations: Mapping[str, str] = meta.get("annotations") or {}
        ours = [a for a in OURS if a in annotations]
        if not ours or (obj.get("spec") or {}).get("active", True) is not False:
            continue  # not deactivated by our controller (a user's, Kueue's own), or active already
        key = f"{meta['namespace']}/{meta['name']}"
        stamps = [stamp_of(annotations[a]) for a in ours]
        since = min((s for s in stamps if s is not None), default=None)
        if since is not None and now - since < wait:
            swept.kept.append(key)
            continue
        try:
            kube.merge_patch(f"{KUEUE}/namespaces/{meta['namespace']}/workloads/{meta['name']}", {
                "metadata": {"annotations": dict.fromkeys(ours), "resourceVersion": meta.get("resourceVersion")},
                "spec": {"active": True}})
        except KubeError as err:
            swept.errors.append(f"{key}: {err}")
            log.warning("could not queue %s again: %s", key, err)
            continue
        swept.requeued.append(key)
        what = "an eviction" if d.EVICTING_ANNOTATION in ours else "a move"
        age = "an unreadable time" if since is None else f"{now - since:.0f}s ago"
        why = (f"the fallback controller deactivated it for {what} ({age}) and is not running (its lease expired): "
               "queued again by the sweeper")
        log.info("queued %s again: %s", key, why)
        _event(kube, meta["namespace"], meta["name"], why)


def _event(kube: Kube, namespace: str, name: str, message: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        kube.create(f"/api/v1/namespaces/{namespace}/events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                               "namespace": namespace},
            "reason": "RequeuedBySweeper", "message": message[:1024], "type": "Normal",
            "source": {"component": COMPONENT}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": COMPONENT, "reportingInstance": COMPONENT})
    except KubeError as err:  # a courtesy; the requeue stands
        log.warning("could not record an event on %s/%s: %s", namespace, name, err)


def sweep(kube: Kube, settings: Settings, ref: LeaseRef | None, now: float | None = None) -> Swept:
    """One sweep (see the module docstring)."""
    now = time.time() if now is None else now
    swept = Swept(holder=lease_holder(kube, ref, now))
    if swept.holder is not None:
        return swept
    try:
        swept.reopened = Controller(kube, settings).sweep(now)
    except (KubeError, OSError) as err:
        swept.errors.append(f"reopening: {err}")
        log.warning("could not reopen expired closes: %s", err)
    requeue_abandoned(kube, settings, now, swept)
    return swept


def main(kube: Kube, settings: Settings) -> int:
    swept = sweep(kube, settings, settings.lease)
    if swept.holder is not None:
        log.info("sweep: the controller %s holds the lease; nothing to do", swept.holder)
        return 0
    log.info("sweep: no live controller; reopened %s, queued again %s, kept (younger than %.0fs) %s%s",
             swept.reopened or "nothing", swept.requeued or "nothing", grace(settings), swept.kept or "nothing",
             f"; errors: {swept.errors}" if swept.errors else "")
    return 1 if swept.errors else 0
