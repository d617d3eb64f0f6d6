"""The cluster autoscaler's Events on pods, as its event recorder lets them through (or the sim keeps them unwritten:
`set_events`), and the kubelet's Events on nodes.

The autoscaler writes its Events through client-go's record.EventRecorder with its own correlator options
(kubernetes-sigs/cluster-autoscaler@33c3f97b pkg/utils/kubernetes/factory.go, CreateEventRecorder without
--record-duplicated-events, the default): a token bucket of burst 1 refilled at 1 per 5 minutes per reason, source
and pod (getCustomSpamKeyFunc), so at most one Event of a reason per pod every 5 minutes, whatever its message; and
client-go's aggregation defaults (staging/src/k8s.io/client-go/tools/record/events_cache.go@425859b7: a 10th distinct
message of one reason on one pod within 10 minutes becomes "(combined from similar events): <message>"). The same
message again is an update of the same Event on GKE (count + 1); the sim writes it once. Neither client-go's recorder
nor the API server cuts a core/v1 Event's message (pkg/apis/core/validation/events.go checks the 1024-character
NoteLengthLimit only for Events with an eventTime, which this recorder never sets): the only cut is GKE's 250 bytes on
FailedScaleUp (messages.failed_scale_up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from tests.e2e.gke_sim.base import SimBase, SuppressedEvent, now_rfc3339
from tests.e2e.gke_sim.scheduling import pod_key
from tests.e2e.kube import KubeError

COMPONENT = "cluster-autoscaler"
ALL_POOLS = "*"  # GkeSim.set_events for every pool
SPAM_BURST = 1  # factory.go defaultBurstSize
SPAM_QPS = 1.0 / 300.0  # factory.go defaultQPS: 1 per event key per 5 minutes (per simulated second here)
AGGREGATE_MAX_EVENTS = 10  # events_cache.go defaultAggregateMaxEvents
AGGREGATE_INTERVAL = 600.0  # events_cache.go defaultAggregateIntervalInSeconds (simulated seconds here)
AGGREGATED_PREFIX = "(combined from similar events): "  # events_cache.go EventAggregatorByReasonMessageFunc


class Recorder:
    """The autoscaler's event correlator for Events on pods, in simulated seconds: which Events reach the API."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, str], tuple[float, float]] = {}  # (pod uid, reason) -> (tokens, at)
        self.similar: dict[tuple[str, str], tuple[set[str], float]] = {}  # -> (distinct messages, last seen)
        self.written: set[tuple[str, str, str]] = set()  # (pod uid, reason, message) already an Event

    def admit(self, uid: str, reason: str, message: str, now: float) -> str | None:
        """The message to write for this Event now, or None: dropped by the spam filter, or already written."""
        key = (uid, reason)
        # EventAggregate first: count the distinct messages of this reason on this pod.
        seen, last = self.similar.get(key, (set(), now))
        if now - last > AGGREGATE_INTERVAL:
            seen = set()
        seen.add(message)
        self.similar[key] = (seen, now)
        if len(seen) >= AGGREGATE_MAX_EVENTS:
            seen.discard(next(iter(seen)))
            message = AGGREGATED_PREFIX + message
        # Then the spam filter, which every Event passes through, a repeat too (an update of count on GKE).
        tokens, at = self.tokens.get(key, (float(SPAM_BURST), now))
        tokens = min(float(SPAM_BURST), tokens + (now - at) * SPAM_QPS)
        if tokens < 1.0:
            self.tokens[key] = (tokens, now)
            return None
        self.tokens[key] = (tokens - 1.0, now)
        if (uid, reason, message) in self.written:
            return None
        self.written.add((uid, reason, message))
        return message


class EventsMixin(SimBase):
    """Events: the autoscaler's on pods, the kubelet's on nodes."""

    _recorder: Recorder

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
        """A core/v1 Event on the pod from "cluster-autoscaler", as its recorder lets it through (`Recorder`); not
        written (kept in suppressed_events) when the Events of one of `pools` (those it is about) are not seen."""
        meta = pod["metadata"]
        admitted = self._recorder.admit(meta.get("uid", ""), reason, message, self.scale.sim(self.elapsed()))
        if admitted is None:
            return
        message = admitted
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
