"""The simulated GKE's state, shared by the parts of `GkeSim` (autoscaler.py, dws.py, events.py, nodes.py, sim.py):
what it remembers between passes, and the helpers every part uses."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.e2e.gke_sim.backoff import KeyedBackoff, NodeGroupBackoff
from tests.e2e.gke_sim.pools import NodePool
from tests.e2e.gke_sim.scheduling import Resources
from tests.e2e.gke_sim.timing import TimeScale, Timings
from tests.e2e.informer import ClusterCache, Informer
from tests.e2e.kube import KubeClient

if TYPE_CHECKING:
    from tests.e2e.gke_sim.dashboard import RayDashboard


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class _Upcoming:
    """Nodes a scale-up will register: free resources per node, for bin-packing the pending pods."""

    pool: NodePool
    count: int
    ready_at: float
    started_at: float
    free: list[Resources]
    pods: list[Mapping[str, Any]] = field(default_factory=list)  # the pods of the scale-up decision (its Events)
    slice_id: str = ""  # the slice its nodes form (a multi-host pool's: nodes.py SLICE_ANNOTATION)
    registered: list[str] = field(default_factory=list)  # its nodes registered so far, not Ready yet


@dataclass
class _Request:
    """What the sim knows of one ProvisioningRequest."""

    key: str  # namespace/name
    uid: str
    accepted_at: float
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)  # type -> condition
    provisioned_at: float | None = None
    nodes: list[str] = field(default_factory=list)
    pool: str | None = None
    consumed: bool = False
    max_run: float | None = None  # simulated seconds (spec.parameters.maxRunDurationSeconds)
    done: bool = False  # nothing more will happen to it

    def booked(self) -> bool:
        """The request's nodes wait for its pods: provisioned, not yet consumed, not expired or revoked."""
        return (self.provisioned_at is not None and not self.consumed and not self.done
                and "BookingExpired" not in self.conditions)


@dataclass
class SimEvent:
    """What the sim did, with the real time since the start, for reports."""

    at: float
    what: str


@dataclass(frozen=True)
class SuppressedEvent:
    """An autoscaler Event the sim did not write (`GkeSim.set_events`): real seconds since the start, reason, pod."""

    at: float
    reason: str
    pod: str  # namespace/name
    message: str


class SimBase:
    """What every part of the sim reads and writes (set up by `GkeSim.__init__`)."""

    pools: dict[str, NodePool]
    scale: TimeScale
    timings: Timings
    interval: float
    capacity: dict[str, bool]
    scale_up_delays: dict[str, float]
    unseen_events: set[str]
    suppressed_events: list[SuppressedEvent]
    log: list[SimEvent]
    errors: list[str]
    dashboard: RayDashboard
    _lapsed: set[str]
    _lock: threading.RLock
    _stop: threading.Event
    _thread: threading.Thread | None
    _client: KubeClient | None
    _cache: ClusterCache | None
    _t0: float
    _upcoming: list[_Upcoming]
    failures: dict[str, str | None]
    skipped_simulation: bool
    _node_group_backoff: NodeGroupBackoff
    _keyed_backoff: KeyedBackoff
    _idle_since: dict[str, float]
    _held: dict[str, float]
    _shutdowns: dict[str, float]
    _requests: dict[str, _Request]
    _names: itertools.count[int]
    _slices: itertools.count[int]

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            raise RuntimeError("the sim is not started")
        return self._client

    @property
    def cache(self) -> ClusterCache:
        """The cluster's informers (tests/e2e/informer.py), which the sim reads and the scenarios' watches share."""
        if self._cache is None:
            raise RuntimeError("the sim is not started")
        return self._cache

    def _informer(self, api_version: str, kind: str) -> Informer:
        return self.cache.informer(api_version, kind)

    def elapsed(self) -> float:
        """Real seconds since start."""
        return time.monotonic() - self._t0

    def _note(self, what: str) -> None:
        self.log.append(SimEvent(self.elapsed(), what))

    def _pool(self, name: str) -> NodePool:
        try:
            return self.pools[name]
        except KeyError:
            raise KeyError(f"no node pool {name!r}; pools: {', '.join(self.pools)}") from None
