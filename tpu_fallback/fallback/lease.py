"""One acting controller at a time: a coordination.k8s.io/v1 Lease, as client-go's leader election holds it.

Two replicas of the controller (or an old pod that has not quite gone beside a new one) would both close, evict and
move: the same Workload deactivated twice, or two jobs moved onto one free slice. So a controller acts only while it
holds the Lease `<namespace>/<name>` (config.json "lease"; by default the controller's Deployment's name, in its
namespace):

- `acquire()` blocks until the Lease is free, expired or already ours; `keep()` (a thread) renews it every
  RENEW_EVERY seconds and calls `on_lost` when another holder took it or renewals kept failing for RENEW_DEADLINE
  (shorter than the lease's duration, so a replica cut off from the API server stops before another may start);
  `release()` on a clean exit empties holderIdentity, so a successor need not wait for the expiry.
- Expiry is judged as client-go's `leaderelection.go` does (tryAcquireOrRenew, isLeaseValid; kubernetes
  staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go @ v0.36.3): the record must stay unchanged
  for leaseDurationSeconds *on this process's monotonic clock* since it first saw it, so the holder's and this
  node's wall clocks need not agree. A new process therefore waits one full duration before taking a Lease whose
  holder vanished; one that finds its own identity in it (the same pod's container restarted: holderIdentity is
  the pod's name, env POD_NAME) takes it at once.
- Every write carries the resourceVersion read: a 409 means another replica wrote first (it won the race).

The sweeper (sweep.py), a short process that cannot watch a record for a duration, judges the Lease by its
renewTime against the wall clock instead (`live()`), which tolerates the few seconds of skew between nodes.

Timings: client-go's defaults (LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s; leaderelection.go and
k8s.io/component-base/config/v1alpha1/defaults.go RecommendedDefaultLeaderElectionConfiguration).
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from tpu_fallback.fallback.kube import KubeError

log = logging.getLogger("tpu-fallback")

DURATION = 15  # seconds: leaseDurationSeconds written
RENEW_EVERY = 2.0  # seconds between renewals (and between tries while another replica holds it)
RENEW_DEADLINE = 10.0  # seconds of failed renewals after which the holder stops acting
API = "/apis/coordination.k8s.io/v1"
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"  # metav1.MicroTime, as the API server writes it (RFC 3339, microseconds)


class LeaseApi(Protocol):
    """What the Lease needs of the API (kube.Kube has it; the tests fake it)."""

    def get(self, path: str) -> Any: ...

    def create(self, path: str, obj: Mapping[str, Any]) -> Any: ...

    def replace(self, path: str, obj: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class LeaseRef:
    namespace: str
    name: str
    duration: int = DURATION

    @property
    def path(self) -> str:
        return f"{API}/namespaces/{self.namespace}/leases/{self.name}"

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], deployment: str | None) -> LeaseRef | None:
        """config.json's "lease": {"namespace", "name", "durationSeconds"?}; without it, the controller's Deployment
        ("deployment": "namespace/name") names it; None (no lease: a run outside a Deployment, tests) without
        either."""
        lease = raw.get("lease")
        if isinstance(lease, Mapping):
            duration = lease.get("durationSeconds", DURATION)
            if not isinstance(duration, int) or isinstance(duration, bool) or duration < 3:
                raise ValueError(f"lease.durationSeconds {duration!r} is invalid: expected a whole number >= 3")
            return cls(str(lease["namespace"]), str(lease["name"]), duration)
        if deployment:
            namespace, name = deployment.split("/", 1)
            return cls(namespace, name)
        return None


def identity() -> str:
    """This replica's name in the Lease: its pod's name (env POD_NAME, the downward API), else host and pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def parse_micro_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    for form in (MICRO_TIME, "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(value, form).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime(MICRO_TIME)


def live(spec: Mapping[str, Any], now: float) -> bool:
    """A holder renewed it within its duration, by the wall clock (the sweeper's test: see the module docstring)."""
    renewed = parse_micro_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    return bool(spec.get("holderIdentity")) and renewed is not None and isinstance(duration, int) \
        and renewed + duration > now


class Lease:
    """This replica's hold on the Lease; see the module docstring. `clock` (wall, for the stamps written) and
    `monotonic` (for expiry) are injectable for tests."""

    def __init__(self, api: LeaseApi, ref: LeaseRef, holder: str | None = None, *,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 renew_every: float = RENEW_EVERY, renew_deadline: float = RENEW_DEADLINE) -> None:
        if renew_deadline >= ref.duration:
            raise ValueError(f"renew deadline {renew_deadline}s must be shorter than the lease ({ref.duration}s)")
        self.api = api
        self.ref = ref
        self.holder = holder or identity()
        self._clock = clock
        self._monotonic = monotonic
        self.renew_every = renew_every
        self.renew_deadline = renew_deadline
        self.held = False
        self.observed: dict[str, Any] = {}  # the Lease's spec as last read or written
        self._observed_at = float("-inf")  # monotonic time the spec was first seen as it is
        self._renewed_at = float("-inf")  # monotonic time of our last successful write

    @property
    def other_holder(self) -> str | None:
        """Who else holds it, as last read (None: nobody, or us)."""
        holder = self.observed.get("holderIdentity")
        return str(holder) if holder and holder != self.holder else None

    def _observe(self, spec: Mapping[str, Any]) -> None:
        if dict(spec) != self.observed:
            self.observed, self._observed_at = dict(spec), self._monotonic()

    def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew): True when this replica holds the Lease afterwards. Raises
        KubeError (but 404 and 409, which are answers) and connection errors for the caller to retry."""
        now = self._clock()
        try:
            current = self.api.get(self.ref.path)
        except KubeError as err:
            if err.status != 404:
                raise
            return self._create(now)
        spec: dict[str, Any] = dict(current.get("spec") or {})
        self._observe(spec)
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds")
        duration = duration if isinstance(duration, int) and duration > 0 else self.ref.duration  # the holder's
        if holder and holder != self.holder and self._observed_at + duration > self._monotonic():
            self.held = False
            return False  # held by another replica and renewed within its duration, as far as we have watched
        ours = holder == self.holder
        new = {"holderIdentity": self.holder, "leaseDurationSeconds": self.ref.duration,
               "renewTime": micro_time(now),
               "acquireTime": spec.get("acquireTime") if ours and spec.get("acquireTime") else micro_time(now),
               "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours else 1)}
        current["spec"] = new  # metadata (and its resourceVersion) as read: a concurrent writer gets a 409
        try:
            self.api.replace(self.ref.path, current)
        except KubeError as err:
            if err.status == 409:
                self.held = False
                return False  # another replica wrote between our read and our write
            raise
        self._took(new)
        return True

    def _create(self, now: float) -> bool:
        spec = {"holderIdentity": self.holder, "leaseDurationSeconds": self.ref.duration,
                "acquireTime": micro_time(now), "renewTime": micro_time(now), "leaseTransitions": 0}
        try:
            self.api.create(f"{API}/namespaces/{self.ref.namespace}/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.ref.name, "namespace": self.ref.namespace}, "spec": spec})
        except KubeError as err:
            if err.status == 409:  # AlreadyExists: another replica created it first
                self.held = False
                return False
            raise
        self._took(spec)
        return True

    def _took(self, spec: Mapping[str, Any]) -> None:
        self._observe(spec)
        self.held = True
        self._renewed_at = self._monotonic()

    def acquire(self, stop: threading.Event, waiting: Callable[[], None] | None = None) -> bool:
        """Until this replica holds the Lease (True) or `stop` is set (False). `waiting` is called between tries
        (the standby's heartbeat, so its liveness probe passes while it waits)."""
        said: str | None = None
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    return True
                news = f"held by {self.other_holder}" if self.other_holder else "taken by another replica"
            except (KubeError, OSError, http.client.HTTPException) as err:
                news = f"could not be read or written: {err}"
            if news != said:
                log.info("waiting for the lease %s/%s (%s)", self.ref.namespace, self.ref.name, news)
                said = news
            if waiting is not None:
                waiting()
            stop.wait(self.renew_every)
        return False

    def renew(self) -> str | None:
        """One renewal: None while this replica still holds the Lease, else why it lost it."""
        try:
            if self.try_acquire_or_renew():
                return None
            if self.other_holder:
                return f"{self.other_holder} holds it now"
            failure = "another replica wrote it first"
        except (KubeError, OSError, http.client.HTTPException) as err:
            failure = str(err)
        if self._monotonic() - self._renewed_at >= self.renew_deadline:
            self.held = False
            return f"not renewed for {self.renew_deadline:g}s (last: {failure})"
        return None  # retried next time, within the deadline

    def keep(self, done: threading.Event, on_lost: Callable[[str], None]) -> None:
        """Renew every renew_every seconds until `done`; `on_lost(why)` once, when the Lease is lost."""
        while not done.wait(self.renew_every):
            why = self.renew()
            if why is not None:
                self.held = False
                on_lost(why)
                return

    def start_keeping(self, done: threading.Event, on_lost: Callable[[str], None]) -> threading.Thread:
        thread = threading.Thread(target=self.keep, args=(done, on_lost), name="lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> bool:
        """On a clean exit: hand the Lease back (holderIdentity emptied, as client-go's ReleaseOnCancel does), so a
        successor takes it at once. False when it was not ours (any more) or the write failed."""
        if not self.held:
            return False
        self.held = False
        try:
            current = self.api.get(self.ref.path)
            spec = dict(current.get("spec") or {})
            if spec.get("holderIdentity") != self.holder:
                return False
            now = micro_time(self._clock())
            current["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now}
            self.api.replace(self.ref.path, current)
        except (KubeError, OSError, http.client.HTTPException) as err:
            log.warning("could not release the lease %s/%s (it expires on its own): %s",
                        self.ref.namespace, self.ref.name, err)
            return False
        return True
