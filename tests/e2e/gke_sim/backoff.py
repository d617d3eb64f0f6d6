"""Back-off after a failed scale-up, as GKE's autoscaler keeps it: per node group, per subnet, per reservation.

Every failed scale-up backs its node group off, whatever the cause (kubernetes-sigs/cluster-autoscaler@33c3f97b
pkg/clusterstate/clusterstate.go: RegisterFailedScaleUp -> backoffNodeGroup, for instance errors, timeouts and failed
resize calls alike; pkg/core/scaleup/orchestrator/executor.go for the last). GKE's back-off is a composite
(GoogleCloudPlatform/cluster-autoscaler@7d250507 pkg/backoff/gke_mig_backoff.go NewGkeBackoff): a node group is
backed off while any of its parts says so. The parts the sim plays:
- `NodeGroupBackoff`, per node group (pkg/backoff/single_mig_backoff.go over the open-source
  pkg/utils/backoff/exponential_backoff.go): the first failure backs off for the initial duration (5 min); a failure
  after the back-off ended doubles it, up to the max (30 min); a failure during the back-off keeps the duration and
  restarts it; the record is forgotten `reset` (3 h) after the last failure. A scale-up that succeeds, or capacity
  that comes back, does not end it (nothing in the core calls RemoveBackoff).
- `KeyedBackoff`, GKE's own exponentialBackoff (pkg/backoff/exponential_backoff.go), keyed by what failed:
  the subnet after "IP space exhausted" (pkg/backoff/cidr_ip_backoff.go: when GCE's message does not name the pool's
  pod range, "applying backoff for the entire subnet"; keyed by the pod range otherwise; reset 3 h), and the
  reservation after a reservation error (pkg/backoff/reservations_backoff.go: keyed by reservation, machine family
  and single/multi-host; reset 1 h after INVALID_RESERVATION, RESERVATION_NOT_FOUND, RESERVATION_NOT_READY, 10 min
  after RESERVATION_CAPACITY_EXCEEDED). A later failure doubles the duration up to the max (for the subnet only
  once the back-off is over: a failure during it changes nothing); the record is forgotten `reset` after its first
  failure.
Not played: the resource-based back-off (pkg/backoff/resource_backoff.go), which applies to auto-provisioned node
groups only, and the node auto-provisioning, compute class and future reservation back-offs.

Times are the sim's real seconds (`GkeSim.elapsed`); GkeSim scales the durations by its TimeScale.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

INVALID_RESERVATION_RESET = 3600.0  # reservations_backoff.go invalidReservationBackoffResetTime (1 h)
RESERVATION_OUT_OF_RESOURCES_RESET = 600.0  # reservationOutOfResourcesBackoffResetTime (10 min)


@dataclass
class BackoffEntry:
    duration: float
    until: float
    last_failed: float
    reset_at: float
    kind: str  # the failure that started or renewed it


class NodeGroupBackoff:
    """The open-source exponential back-off, one record per node group."""

    def __init__(self) -> None:
        self.entries: dict[str, BackoffEntry] = {}

    def backoff(self, key: str, kind: str, now: float, initial: float, maximum: float) -> float:
        duration = initial
        old = self.entries.get(key)
        if old is not None:
            duration = old.duration  # concurrent scale-ups failing do not grow it
            if old.until < now:  # not in back-off, but recently was: grow it
                duration = min(2 * old.duration, maximum)
        self.entries[key] = BackoffEntry(duration, now + duration, now, 0.0, kind)
        return now + duration

    def status(self, key: str, now: float) -> BackoffEntry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and entry.until >= now else None

    def remove_stale(self, now: float, reset: float) -> None:
        for key in [k for k, e in self.entries.items() if e.last_failed + reset < now]:
            del self.entries[key]


class KeyedBackoff:
    """GKE's exponentialBackoff, one record per key (a subnet, a reservation)."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, BackoffEntry] = {}

    def backoff(self, key: Hashable, kind: str, now: float, initial: float, maximum: float, reset: float, *,
                bump_during: bool = False) -> float:
        """bump_during: a failure during the back-off doubles it too (reservations_backoff.go backoffExponential
        has no such check; exponential_backoff.go, for the subnet, returns the current back-off)."""
        entry = self.entries.get(key)
        if entry is not None and entry.until > now and not bump_during:
            return entry.until  # parallel failed scale-ups do not bump it twice
        if entry is None:
            entry = BackoffEntry(initial, now + initial, now, now + reset, kind)
        else:
            entry.duration = min(2 * entry.duration, maximum)
            entry.until, entry.last_failed, entry.kind = now + entry.duration, now, kind
        self.entries[key] = entry
        return entry.until

    def status(self, key: Hashable, now: float) -> BackoffEntry | None:
        entry = self.entries.get(key)
        return entry if entry is not None and entry.until >= now else None

    def remove_stale(self, now: float) -> None:
        for key in [k for k, e in self.entries.items() if now > e.reset_at]:
            del self.entries[key]
