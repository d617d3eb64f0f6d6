"""GkeSim, the simulated GKE of one cluster (its parts: autoscaler.py, dws.py, events.py, nodes.py), and a control
plane running with it (`simulated_gke`)."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.e2e.gke_sim.autoscaler import AutoscalerMixin
from tests.e2e.gke_sim.backoff import KeyedBackoff, NodeGroupBackoff
from tests.e2e.gke_sim.dashboard import RayDashboard
from tests.e2e.gke_sim.dws import DwsMixin
from tests.e2e.gke_sim.events import Recorder
from tests.e2e.gke_sim.kwok import kwok_stages
from tests.e2e.gke_sim.nodes import is_registering
from tests.e2e.gke_sim.pools import NodePool
from tests.e2e.gke_sim.timing import DEFAULT_SCALE, DEFAULT_TIMINGS, TimeScale, Timings
from tests.e2e.informer import ClusterCache
from tests.e2e.kube import KubeClient, KubeError


class GkeSim(AutoscalerMixin, DwsMixin):
    """The simulated GKE of one cluster. `start(server, ca_file, token)` runs it in a thread; `stop()` ends it.

    Use `simulated_gke()` (below) to get a control plane and a running sim together.
    """

    def __init__(
        self,
        pools: Sequence[NodePool],
        *,
        scale: TimeScale = DEFAULT_SCALE,
        timings: Timings = DEFAULT_TIMINGS,
        interval: float = 0.2,
    ) -> None:
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node pool names: {names}")
        self.pools = {p.name: p for p in pools}
        self.scale = scale
        self.timings = timings
        self.interval = interval
        self.capacity = {p.name: True for p in pools}  # False while the pool's scale-ups fail (set_failure)
        self.failures = dict.fromkeys(self.pools)  # pool -> the kind its scale-ups fail for (messages.FAILURES)
        # Play --scaleup-simulation-for-skipped-node-groups-enabled (autoscaler.py): off, upstream's default.
        self.skipped_simulation = False
        # Per pool: simulated seconds a scale-up takes instead of timings.scale_up / cpu_scale_up.
        self.scale_up_delays = {}
        # Pools whose autoscaler Events nobody sees (ALL_POOLS: every pool), and the Events not written for them.
        self.unseen_events = set()
        self.suppressed_events = []
        self.log = []
        self.errors = []
        self._lapsed = set()  # nodes whose heartbeat lapsed (reported once each)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = None
        self._client = None
        self._cache = None
        self._t0 = time.monotonic()
        self._upcoming = []
        self._node_group_backoff = NodeGroupBackoff()
        self._keyed_backoff = KeyedBackoff()
        self._idle_since = {}
        self._held = {}  # node -> real time until which a scale-down leaves it (add_nodes)
        self._shutdowns = {}  # preempted Spot node -> real time its VM is gone (preempt_spot)
        self._requests = {}
        self._recorder = Recorder()
        self._names = itertools.count(1)
        self._slices = itertools.count(1)
        self.dashboard = RayDashboard()

    def gke_options(self) -> dict[str, Any]:
        """What `ControlPlane(gke=...)` needs from the sim: KWOK's stages and the Ray dashboard proxy."""
        return {"kwok_stages": kwok_stages(self.scale.real(self.timings.job_run)),
                "ray_dashboard_proxy": self.dashboard.url}

    def start(self, server: str, ca_file: Path, token: str) -> None:
        """Register the fixed pools' nodes (the system pool), then run the autoscaler loop in a thread."""
        self._client = KubeClient(server, ca_file, token)
        self._cache = ClusterCache(self._client)
        self.dashboard.connect(self._cache)
        self._t0 = time.monotonic()
        with self._lock:
            for pool in self.pools.values():
                if pool.fixed_nodes:
                    self._create_nodes(pool, pool.fixed_nodes, reason="fixed-size pool")
        self._thread = threading.Thread(target=self._run, name="gke-sim", daemon=True)
        self._thread.start()

    def reconfigure(self, pools: Sequence[NodePool]) -> None:
        """Another stack on the same cluster: every node goes (with its pods), all state is forgotten (capacity,
        back-offs, requests, delays, log, errors), the new pools' fixed nodes come up and the clock restarts."""
        names = [p.name for p in pools]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate node pool names: {names}")
        with self._lock:
            self._delete_nodes([n["metadata"]["name"] for n in self._nodes()], reason="reconfigure")
            self.pools = {p.name: p for p in pools}
            self.capacity = {p.name: True for p in pools}
            self.failures = dict.fromkeys(self.pools)
            self.skipped_simulation = False
            self.scale_up_delays.clear()
            self.unseen_events.clear()
            self.suppressed_events.clear()
            self._upcoming.clear()
            self._node_group_backoff = NodeGroupBackoff()
            self._keyed_backoff = KeyedBackoff()
            self._idle_since.clear()
            self._held.clear()
            self._shutdowns.clear()
            self._requests.clear()
            self._recorder = Recorder()
            self.log.clear()
            self.errors.clear()
            self._lapsed.clear()
            self._t0 = time.monotonic()
            for pool in self.pools.values():
                if pool.fixed_nodes:
                    self._create_nodes(pool, pool.fixed_nodes, reason="fixed-size pool")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._cache is not None:
            self._cache.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self._lock:
                    self.step()
            except KubeError as err:
                if self._stop.is_set():
                    return
                self.errors.append(f"{self.elapsed():.1f}s: {err}")
            except Exception:  # noqa: BLE001 - a bug in the sim: keep it for check()
                self.errors.append(f"{self.elapsed():.1f}s: {traceback.format_exc()}")

    def check(self) -> None:
        """Raise if the sim's loop hit an error (call it at the end of a scenario)."""
        if self.errors:
            raise AssertionError("the simulated GKE hit errors:\n" + "\n".join(self.errors[-10:]))

    def step(self) -> None:
        """One pass of the autoscaler and of DWS: finish due scale-ups, handle requests, scale up, scale down.
        Nodes of a slice still coming up are not nodes yet for either: they are their scale-up's."""
        now = self.elapsed()
        self._forget_stale_backoffs(now)
        self._finish_upcoming(now)
        self._finish_shutdowns(now)
        nodes = self._nodes()
        self._check_heartbeats(now, nodes)
        registered = [n for n in nodes if not is_registering(n)]
        pods = self._informer("v1", "Pod").items()
        self._provisioning(now, registered, pods)
        self._scale_up(now, registered, pods)
        self._scale_down(now, registered, pods)


@contextlib.contextmanager
def simulated_gke(
    pools: Sequence[NodePool],
    *,
    scale: TimeScale = DEFAULT_SCALE,
    timings: Timings = DEFAULT_TIMINGS,
    **plane_options: Any,
) -> Iterator[tuple[Any, GkeSim]]:
    """A ControlPlane with the GKE components (scheduler, KWOK, KubeRay) and a running GkeSim for the pools.

    Yields (plane, sim). Everything stops on the way out, the sim first, also on failure.
    """
    from tests.e2e.controlplane import ControlPlane, GkeOptions

    sim = GkeSim(pools, scale=scale, timings=timings)
    try:
        options = sim.gke_options()
        with ControlPlane(gke=GkeOptions(**options), **plane_options) as plane:
            sim.start(plane.server, plane.ca_file, plane.token)
            try:
                yield plane, sim
            finally:
                sim.stop()
    finally:
        sim.dashboard.close()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, sim: GkeSim | None = None,
               interval: float = 0.1) -> Any:
    """Poll until `predicate` returns something truthy; on a timeout the message has the sim's last actions."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if sim is not None and sim.errors:
            sim.check()
        if time.monotonic() >= deadline:
            log = "\n".join(f"  {e.at:6.1f}s {e.what}" for e in (sim.log[-25:] if sim else []))
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}" + (f"\nsim log:\n{log}" if log
                                                                                   else ""))
        time.sleep(interval)
