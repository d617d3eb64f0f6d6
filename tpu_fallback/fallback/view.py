"""Two ways to read the cluster for a pass: LISTs every pass (ListingView) or informers (WatchingView)."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback import evidence as ev
from tpu_fallback.fallback.kube import Kube
from tpu_fallback.fallback.metrics import Metrics
from tpu_fallback.fallback.read import (
    ACTIVE_PODS,
    CLUSTER_QUEUES,
    FLAVORS,
    PROVISIONING_REQUESTS,
    RAY_CLUSTERS,
    WORKLOADS,
    build_snapshot,
    nodes_path,
    scale_up_events_path,
    snapshot,
)
from tpu_fallback.fallback.watch import Informer, Transport

log = logging.getLogger("tpu-fallback")

# --- what an informer keeps of each object --------------------------------------------------------------------------
# The fields read.py and evidence.py use, and every metadata field but managedFields: an
# informer holds every object of its kind for as long as the controller runs, and a Workload's pod templates or a
# node's image list would be most of that memory. A reader that starts using another field adds it here
# (tests/test_fallback_watch.py reads slimmed and whole objects alike).


def _keeping(*, top: tuple[str, ...] = (), spec: tuple[str, ...] = (), status: tuple[str, ...] = ()
             ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def slim(obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: obj[k] for k in top if k in obj}
        out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        for part, keys in (("spec", spec), ("status", status)):
            found = obj.get(part) or {}
            if keys and found:
                out[part] = {k: found[k] for k in keys if k in found}
        return out

    return slim


def _resources_only(containers: Any) -> list[dict[str, Any]]:
    return [{"resources": c.get("resources") or {}} for c in containers or []]


def _slim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A pod: what places it (node, selector, affinity, gates), its containers' resources, its phase and conditions."""
    out = _keeping(spec=("nodeName", "nodeSelector", "affinity", "schedulingGates"),
                   status=("phase", "conditions"))(obj)
    out.setdefault("spec", {})["containers"] = _resources_only((obj.get("spec") or {}).get("containers"))
    return out


def _slim_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """A Workload: its PodSets' names, counts and containers' resources (not their whole pod templates)."""
    out = _keeping(spec=("active",), status=("admission", "conditions", "admissionChecks"))(obj)
    out.setdefault("spec", {})["podSets"] = [
        {"name": p.get("name"), "count": p.get("count"),
         "template": {"spec": {"containers": _resources_only(((p.get("template") or {}).get("spec") or {})
                                                              .get("containers"))}}}
        for p in (obj.get("spec") or {}).get("podSets") or []]
    return out


SLIM: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "resourceflavors": _keeping(spec=("nodeLabels", "nodeTaints")),
    "workloads": _slim_workload,
    "clusterqueues": _keeping(spec=("resourceGroups",), status=("flavorsReservation",)),
    "provisioningrequests": _keeping(status=("conditions",)),
    "nodes": _keeping(spec=("unschedulable", "taints"), status=("conditions", "allocatable")),
    "pods": _slim_pod,
    "events": _keeping(top=("involvedObject", "reason", "message", "firstTimestamp", "lastTimestamp", "eventTime")),
    "rayclusters": _keeping(),
}


# --- two ways to read the cluster -----------------------------------------------------------------------------------


class ClusterView(Protocol):
    def snapshot(self, config: d.Config, now: float) -> d.Snapshot:
        """What decide.py reads, as of now; raises when the cluster cannot be read."""
        ...

    def wait(self, stop: threading.Event, timeout: float) -> None:
        """Until the next pass is due: `timeout` seconds, or sooner if the view saw a change, or `stop`."""
        ...


class ListingView:
    """Every kind LISTed on every pass (the controller's first way; --once, tests, --list-every-pass)."""

    def __init__(self, kube: Kube, node_selector: str | None = None) -> None:
        self.kube = kube
        self.node_selector = node_selector
        self.memory = ev.Memory()  # what GKE said earlier (evidence.Memory)

    def snapshot(self, config: d.Config, now: float) -> d.Snapshot:
        return snapshot(self.kube, config, now, self.node_selector, self.memory)

    def wait(self, stop: threading.Event, timeout: float) -> None:
        stop.wait(timeout)


# Informers whose kinds only add evidence (GKE's Events, the RayClusters that name a RayJob's pods).
EVIDENCE_INFORMERS = frozenset({*(f"events-{reason.lower()}" for reason in ev.AUTOSCALER_REASONS), "rayclusters"})


class NotSyncedError(Exception):
    """The view cannot tell what the cluster holds now: a kind never listed yet, or not followed for a while."""


STALE_AFTER = 60.0  # seconds an informer may fail to follow its kind before passes stop deciding on its store
DEBOUNCE = 0.3  # seconds from a change to the pass: a burst of changes (Kueue admitting a job) is one pass
MIN_PASS_GAP = 1.0  # seconds between change-driven passes at least (a busy cluster changes all the time)


class WatchingView:
    """The cluster as informers follow it (watch.py): a pass reads memory, and `wait` ends soon after a change.

    Collections: ResourceFlavors, Workloads, ClusterQueues, ProvisioningRequests (none when the API is not served),
    Nodes (plan A's pools when `node_selector` is given), pending Pods (a pod leaving Pending arrives as DELETED),
    GKE's FailedScaleUp and NotTriggerScaleUp Events on pods (two watches, filtered by the server) and RayClusters
    (none without KubeRay). `transport` makes each informer's connection (default: a fork of `kube` each)."""

    def __init__(self, kube: Kube | None, metrics: Metrics | None = None, node_selector: str | None = None, *,
                 transport: Callable[[], Transport] | None = None, stale_after: float = STALE_AFTER) -> None:
        if transport is None:
            if kube is None:
                raise ValueError("a WatchingView needs a Kube or a transport")
            transport = kube.fork
        self.metrics = metrics if metrics is not None else Metrics()
        self.stale_after = stale_after
        self.memory = ev.Memory()  # what GKE said earlier (evidence.Memory)
        self.changed = threading.Event()  # set by every informer on every change
        self._last_pass = float("-inf")
        self._reported: dict[str, str | None] = {}  # informer -> the error last logged

        def informer(name: str, path: str, slim: str, optional: bool = False) -> Informer:
            return Informer(transport(), path, name=name, optional=optional, changed=self.changed,
                            count=functools.partial(self._count, name), transform=SLIM[slim])

        self.informers: dict[str, Informer] = {i.name: i for i in (
            informer("resourceflavors", FLAVORS, "resourceflavors"),
            informer("workloads", WORKLOADS, "workloads"),
            informer("clusterqueues", CLUSTER_QUEUES, "clusterqueues"),
            informer("provisioningrequests", PROVISIONING_REQUESTS, "provisioningrequests", optional=True),
            informer("nodes", nodes_path(node_selector), "nodes"),
            informer("pods", ACTIVE_PODS, "pods"),
            *(informer(f"events-{reason.lower()}", scale_up_events_path(reason), "events")
              for reason in ev.AUTOSCALER_REASONS),
            informer("rayclusters", RAY_CLUSTERS, "rayclusters", optional=True),
        )}

    def _count(self, informer: str, what: str) -> None:
        self.metrics.add(f"tpu_fallback_watch_{what}_total", resource=informer)

    def start(self, sync_timeout: float = 10.0) -> bool:
        """Start every informer; wait up to `sync_timeout` seconds for their first LISTs. Whether they all answered
        (passes before that are skipped, and counted as failed)."""
        for informer in self.informers.values():
            informer.start()
        deadline = time.monotonic() + sync_timeout
        while not all(i.synced for i in self.informers.values()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self) -> None:
        for informer in self.informers.values():  # all told first, then waited for: they end side by side
            informer.stop(timeout=0)
        for informer in self.informers.values():
            informer.stop(timeout=2.0)

    def wake(self) -> None:
        """End a `wait` at once (the process is stopping)."""
        self.changed.set()

    def snapshot(self, config: d.Config, now: float) -> d.Snapshot:
        self.changed.clear()  # before reading: a change from here on makes the next pass
        self._last_pass = time.monotonic()
        self._report()
        behind = [i for i in self.informers.values() if not i.synced or i.failing_for() > self.stale_after]
        core = [i for i in behind if i.name not in EVIDENCE_INFORMERS]
        if core:  # what a decision stands on (quotas, taints, Workloads, nodes, pods): no pass without it
            raise NotSyncedError("; ".join(
                (f"{i.name} not listed yet" if not i.synced else f"{i.name} not followed for {i.failing_for():.0f}s")
                + (f" ({i.error})" if i.error else "") for i in core))
        inf = self.informers
        # GKE's Events and the RayClusters only add evidence: one that cannot be read is "no Event seen" (the
        # stockoutAfter backstop still decides), not a reason to stop every decision.
        unread = {i.name for i in behind}
        self.metrics.set("tpu_fallback_evidence_unread", len(unread))

        def items(name: str) -> list[Any]:
            return [] if name in unread else inf[name].items()
        return build_snapshot(
            config, now, flavors=inf["resourceflavors"].items(), workloads=inf["workloads"].items(),
            nodes=inf["nodes"].items(), cluster_queues=inf["clusterqueues"].items(),
            provisioning_requests=inf["provisioningrequests"].items(), pods=inf["pods"].items(),
            events=[e for reason in ev.AUTOSCALER_REASONS for e in items(f"events-{reason.lower()}")],
            ray_clusters=items("rayclusters"), memory=self.memory)

    def _report(self) -> None:
        """Log each informer's failure once when it starts (or changes), and when it is over."""
        for informer in self.informers.values():
            error, before = informer.error, self._reported.get(informer.name)
            if error == before:
                continue
            if error:
                log.warning("reading %s failed (retrying): %s", informer.name, error)
            else:
                log.info("reading %s works again", informer.name)
            self._reported[informer.name] = error

    def wait(self, stop: threading.Event, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.changed.wait(min(left, 1.0)):  # in slices, so a stop without wake() is seen within a second
                gap = self._last_pass + min(MIN_PASS_GAP, timeout) - time.monotonic()
                stop.wait(max(DEBOUNCE, gap))
                return

