"""The cluster autoscaler's Events on pods, as the sim writes them (or keeps them unwritten: `set_events`), and the
kubelet's Events on nodes."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from tests.e2e.gke_sim.base import SimBase, SuppressedEvent, now_rfc3339
from tests.e2e.gke_sim.scheduling import pod_key
from tests.e2e.kube import KubeError

COMPONENT = "cluster-autoscaler"
ALL_POOLS = "*"  # GkeSim.set_events for every pool


class EventsMixin(SimBase):
    """Events: the autoscaler's on pods, the kubelet's on nodes."""

    def set_events(self, seen: bool, pool: str | None = None) -> None:
        """Whether the autoscaler's Events on pods (TriggeredScaleUp, FailedScaleUp, NotTriggerScaleUp) are written
        for one pool, or for every pool (None): False is a GKE whose autoscaler Events are never seen (lost,
        filtered, or a cluster where nothing reads them). The autoscaler itself acts as before; what it would have
        written is kept in `suppressed_events`."""
        with self._lock:
            name = ALL_POOLS if pool is None else pool
            if pool is not None:
                self._pool(pool)  # a known pool
            if seen:
                self.unseen_events.discard(name)
            else:
                self.unseen_events.add(name)
            self._note(f"autoscaler Events of {'every pool' if pool is None else pool}: "
                       f"{'written' if seen else 'not seen'}")

    def _event(self, pod: Mapping[str, Any], reason: str, kind: str, pools: Sequence[str], message: str) -> None:
        """A core/v1 Event on the pod from "cluster-autoscaler", once per pod, reason and message; not written (kept
        in suppressed_events) when the Events of one of `pools` (those it is about) are not seen."""
        meta = pod["metadata"]
        key = (meta.get("uid", ""), reason, message)
        if key in self._events_sent:
            return
        self._events_sent.add(key)
        if self.unseen_events & {ALL_POOLS, *pools}:
            self.suppressed_events.append(SuppressedEvent(self.elapsed(), reason, pod_key(pod), message))
            return
        stamp = now_rfc3339()
        with contextlib.suppress(KubeError):
            self.client.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta.get("uid", "")},
                "reason": reason, "message": message, "type": kind, "count": 1,
                "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
                "firstTimestamp": stamp, "lastTimestamp": stamp,
            })

    def _node_event(self, node: str, reason: str, message: str) -> None:
        """An Event on a Node from the kubelet (Events of cluster-scoped objects live in "default")."""
        stamp = now_rfc3339()
        with contextlib.suppress(KubeError):
            self.client.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{node}.", "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
                "reason": reason, "message": message, "type": "Normal", "count": 1,
                "source": {"component": "kubelet", "host": node}, "reportingComponent": "kubelet",
                "firstTimestamp": stamp, "lastTimestamp": stamp})
