"""The fallback controller's loop: read the cluster, decide (decide.py), act, tell (Events, log lines, metrics).

It reads the cluster from informers (watch.py, `WatchingView`): each kind is listed once and then watched, so a
pass reads memory and costs the API server nothing, and the loop runs a pass soon after something changed (a burst
of changes is one pass) and at least every pollIntervalSeconds (its decisions depend on the time: stockoutAfter, the
cool-down). `ListingView` is the former way, every kind LISTed on every pass: for `--once`, the tests and
`--list-every-pass` (to compare). Either way all state is in the cluster, so a restart loses nothing; writes go
straight to the API with the resourceVersion read as a precondition. Only the holder of its Lease acts (lease.py).

Two plans (planAFlavors/planBFlavors) keep their Events (PlanAStockOut, PlanAReopened, EvictedFromPlanA,
MovingToPlanA, MovedToPlanA) and metrics (tpu_fallback_plan_a_*); a ladder ("rungs") writes RungStockOut,
RungReopened, EvictedFromRung, MovingUp and MovedUp, and per-rung series with a `rung` label
(tpu_fallback_rung_closed, _rung_closes_total, _rung_reopens_total, tpu_fallback_moves_up_total by target rung).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.config import Settings
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.fallback.metrics import Metrics
from tpu_fallback.fallback.read import KUEUE, get_if_found, read_flavor
from tpu_fallback.fallback.view import ClusterView, ListingView, NotSyncedError

log = logging.getLogger("tpu-fallback")

COMPONENT = "tpu-fallback-controller"  # the Events' source


class Controller:
    def __init__(self, kube: Kube, settings: Settings, metrics: Metrics | None = None,
                 view: ClusterView | None = None) -> None:
        self.kube = kube  # the writes, and the reads of the sweep and the way out
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.view: ClusterView = view if view is not None else ListingView(kube, settings.node_selector)
        self._started_generation: int | None = None  # remember_deployment()
        self._told_unattributed: set[str] = set()
        config = settings.decide
        if config.words.per_rung:
            self.metrics.use_rungs((r.name for r in config.ladder if not r.queued), (r.name for r in config.ladder))

    def reconcile(self, now: float | None = None) -> list[d.Action]:
        """One pass: snapshot, decide, act. Returns what it did."""
        now = time.time() if now is None else now
        config = self.settings.decide
        snap = self.view.snapshot(config, now)
        self._tell_unattributed(snap)
        actions = d.decide(config, snap)
        done: list[d.Action] = []
        for action in actions:  # each on its own: one rejected patch does not hold up the rest (the taint first)
            try:
                self._act(action, snap)
                done.append(action)
            except (KubeError, OSError) as err:
                if isinstance(err, KubeError) and err.status == 409:  # the object changed since it was read
                    self.metrics.add("tpu_fallback_action_conflicts_total")
                    log.info("%s met a newer object, decided again next pass: %s", type(action).__name__, err)
                else:
                    self.metrics.add("tpu_fallback_action_errors_total")
                    log.warning("%s failed, retried next pass: %s", type(action).__name__, err)
        actions = done
        for rung in config.ladder:
            if rung.queued:
                continue
            was_closed = any(snap.flavors[n].closed_since is not None for n in rung.flavors if n in snap.flavors)
            reopened = any(isinstance(a, d.ReopenPlanA) and a.rung == rung.name for a in actions)
            closed = any(isinstance(a, d.ClosePlanA) and a.rung == rung.name for a in actions) or (
                was_closed and not reopened)
            self._set_closed(rung, closed)
        self.metrics.set("tpu_fallback_last_reconcile_timestamp_seconds", now)
        self.metrics.add("tpu_fallback_reconcile_passes_total")
        return actions

    def _tell_unattributed(self, snap: d.Snapshot) -> None:
        """Unschedulable TPU pods that belong to no Workload seen: still evidence about their rung, but no job can be
        evicted for them. Counted (a gauge) and logged once per pod."""
        pods = {p for e in snap.evidence.values() for p in e.unattributed}
        self.metrics.set("tpu_fallback_unattributed_tpu_pods", len(pods))
        for pod in sorted(pods - self._told_unattributed):
            log.warning("TPU pod %s is unschedulable and belongs to no Kueue Workload the controller can find (see "
                        "docs/fallback-evidence.md): it counts as evidence about its rung, but nothing is evicted for "
                        "it", pod)
        self._told_unattributed = pods

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.reconcile()
                failed = False
            except Exception as err:  # the loop outlives any one failed pass; the next pass starts from the cluster
                failed = True
                self.metrics.add("tpu_fallback_reconcile_errors_total")
                if isinstance(err, NotSyncedError) or (
                        isinstance(err, KubeError) and (err.status == 429 or err.status >= 500)):
                    log.warning("reconcile skipped (%s); retrying in %ss", err, self.settings.poll_interval)
                else:
                    log.exception("reconcile failed; retrying in %ss", self.settings.poll_interval)
                # Passes that keep failing (an API the controller cannot read) must not keep plan A closed
                # past its cool-down: the reopen needs only the flavors.
                self._sweep_quietly()
            self.metrics.beat()
            if failed:  # not sooner on a change: a view that cannot be read would fail (and log) on every change
                stop.wait(self.settings.poll_interval)
            else:
                self.view.wait(stop, self.settings.poll_interval)

    def sweep(self, now: float | None = None) -> list[str]:
        """Remove our taint from every flavor (of every rung not queued: plan A's) whose cool-down has passed,
        reading nothing but the flavors: the reopen that holds whatever else fails. Returns the flavors reopened."""
        now = time.time() if now is None else now
        config = self.settings.decide
        flavors = self._closable_flavors()
        reopened: list[str] = []
        for rung in config.ladder:
            expired = [f.name for f in flavors if f.name in rung.flavors
                       and d.cool_down_over(config, f.closed_since, now)]
            reopened += self._reopen(expired, d.cool_down_reason(config, rung), rung)
        return reopened

    def _sweep_quietly(self) -> None:
        try:
            self.sweep()
        except Exception as err:  # noqa: BLE001 -- the loop's last resort: logged, and tried again next time round
            log.warning("could not reopen expired closes either: %s", err)

    def _deployment(self) -> Mapping[str, Any] | None:
        """Our own Deployment as it is now (None when it is gone or when running outside one)."""
        if not self.settings.deployment:
            return None
        namespace, name = self.settings.deployment.split("/", 1)
        found = get_if_found(self.kube, f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        return found if isinstance(found, Mapping) else None

    def remember_deployment(self) -> None:
        """At start: the generation of our Deployment's spec, so that the way out can tell a restart (the same
        spec: a drained node, an evicted pod) from a rollout (a new spec, whose pod may never start)."""
        deployment = self._deployment()
        self._started_generation = None if deployment is None else deployment["metadata"].get("generation")

    def release_unless_restarted(self) -> str | None:
        """On the way out (SIGTERM): unless the same Deployment spec will run a new pod (a restart, which carries a
        real close on), leave nothing behind: reopen plan A and queue again the Workloads this controller had
        deactivated. That is when the Deployment is being deleted, is gone or is scaled to zero (the fallback
        turned off or removed), or its spec changed since this pod started (a rollout: the new pod may never
        start; if plan A is still stocked out it closes it again on GKE's next no-capacity Event, within
        seconds). Returns why it released, or None when it kept everything."""
        if not self.settings.deployment:
            return None
        deployment = self._deployment()
        started = self._started_generation
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            why = "its Deployment was deleted"
        elif (deployment.get("spec") or {}).get("replicas") == 0:
            why = "its Deployment was scaled to zero"
        elif started is not None and deployment["metadata"].get("generation") != started:
            why = "its Deployment's spec changed (a rollout; the new controller closes plan A again on new evidence)"
        else:
            return None
        flavors = self._closable_flavors()
        for rung in self.settings.decide.ladder:
            closed = [f.name for f in flavors if f.name in rung.flavors and f.closed_since is not None]
            self._reopen(closed, f"the fallback controller is leaving ({why}): "
                                 f"{self.settings.decide.label(rung)} is offered again", rung)
        self._requeue_deactivated(why)
        return why

    def _requeue_deactivated(self, why: str) -> None:
        """Activate again every Workload this controller deactivated (an eviction or a move in progress): with no
        controller to finish the move, it would stay inactive, its job never run."""
        for obj in self.kube.list(f"{KUEUE}/workloads"):
            meta = obj["metadata"]
            ours = [a for a in (d.EVICTING_ANNOTATION, d.MOVING_ANNOTATION) if a in (meta.get("annotations") or {})]
            if not ours or (obj.get("spec") or {}).get("active", True) is not False:
                continue
            try:
                self.kube.merge_patch(self._workload_path(meta["namespace"], meta["name"]), {
                    "metadata": {"annotations": dict.fromkeys(ours), "resourceVersion": meta.get("resourceVersion")},
                    "spec": {"active": True}})
                log.info("requeued %s/%s on the way out (%s)", meta["namespace"], meta["name"], why)
            except KubeError as err:  # the others still get theirs
                log.warning("could not requeue %s/%s on the way out: %s", meta["namespace"], meta["name"], err)

    def _closable_flavors(self) -> list[d.Flavor]:
        """Every flavor the controller may have tainted (plan A's; on a ladder, every rung's but the queued)."""
        found = (get_if_found(self.kube, f"{KUEUE}/resourceflavors/{n}")
                 for n in self.settings.decide.closable_flavors)
        return [read_flavor(obj, self.settings.decide.taint_key) for obj in found if obj is not None]

    def _rung(self, name: str) -> d.Rung:
        return next(r for r in self.settings.decide.ladder if r.name == name)

    def _set_closed(self, rung: d.Rung, closed: bool) -> None:
        words = self.settings.decide.words
        self.metrics.set(words.closed, 1 if closed else 0, **({"rung": rung.name} if words.per_rung else {}))

    def _count(self, counter: str, rung: str) -> None:
        """One more of a counter of the words in force (labelled by rung on a ladder)."""
        if self.settings.decide.words.per_rung:
            self.metrics.add(counter, rung=rung)
        else:
            self.metrics.add(counter)

    def _reopen(self, flavors: list[str], why: str, rung: d.Rung | None = None) -> list[str]:
        """Remove our taint from these flavors (Events, a log line, the reopen counted); returns them."""
        rung = rung or self.settings.decide.ladder[0]
        if flavors:
            for name in flavors:
                self.set_taint(name, None)
                self._event_on_flavor(name, self.settings.decide.words.reopened, why)
            self._count(self.settings.decide.words.reopens, rung.name)
            self._set_closed(rung, False)
            log.info("reopen %s (%s): %s", self.settings.decide.label(rung), ", ".join(flavors), why)
        return flavors

    def _act(self, action: d.Action, snap: d.Snapshot) -> None:
        config = self.settings.decide
        if isinstance(action, d.ClosePlanA):
            label = config.label(self._rung(action.rung))
            reason = config.words.stock_out
            for name in action.flavors:
                self.set_taint(name, str(int(action.since)))
                self._event_on_flavor(name, reason, action.why)
            if action.cause:
                ns, name = action.cause.split("/", 1)
                self._event_on_workload(ns, name, reason, action.why)
            if action.new:
                self._count(config.words.closes, action.rung)
            log.info("close %s (%s): %s", label, ", ".join(action.flavors), action.why)
        elif isinstance(action, d.ReopenPlanA):
            self._reopen(list(action.flavors), action.why, self._rung(action.rung))
        elif isinstance(action, d.Evict):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.EVICTING_ANNOTATION: stamp}}, "spec": {"active": False}})
            self._event_on_workload(action.namespace, action.name, config.words.evicted,
                                    action.why)
            self.metrics.add("tpu_fallback_evictions_total")
            log.info("evict from %s (deactivate): %s", config.label(self._rung(action.rung)), action.why)
        elif isinstance(action, d.Deactivate):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.MOVING_ANNOTATION: f"{stamp} to {action.target}"}},
                "spec": {"active": False}})
            self._event_on_workload(action.namespace, action.name, config.words.moving,
                                    action.why)
            log.info("move to %s, step 1 (deactivate): %s", config.label(self._rung(action.rung)), action.why)
        elif isinstance(action, d.TellDeactivation):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.KUEUE_DEACTIVATION_TOLD: stamp}}})
            self._event_on_workload(action.namespace, action.name, "DeactivatedByKueue", action.why, "Warning")
            log.warning("%s", action.why)
        elif isinstance(action, d.Revive):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.REVIVED_ANNOTATION: f"{action.count} {stamp}",
                                             d.KUEUE_DEACTIVATION_TOLD: None}},
                "spec": {"active": True}})
            self._event_on_workload(action.namespace, action.name, "Revived", action.why)
            log.info("revive: %s", action.why)
        elif isinstance(action, d.MarkRequeued):
            self.mark_requeued(action.namespace, action.name, snap.now)
            log.info("requeue: %s", action.why)
        elif isinstance(action, d.Reactivate):
            if action.after_eviction:  # the end of an eviction: queued for plan B
                self._patch_workload(snap, action.namespace, action.name, {
                    "metadata": {"annotations": {d.EVICTING_ANNOTATION: None}}, "spec": {"active": True}})
                log.info("evicted, requeued (reactivate): %s", action.why)
                return
            workload = next(w for w in snap.workloads if (w.namespace, w.name) == (action.namespace, action.name))
            moving = workload.annotations[d.MOVING_ANNOTATION]
            self._patch_workload(snap, action.namespace, action.name, {
                "metadata": {"annotations": {d.MOVING_ANNOTATION: None, d.MOVED_ANNOTATION: moving or "yes"}},
                "spec": {"active": True}})
            self._event_on_workload(action.namespace, action.name, config.words.moved, action.why)
            self._count(config.words.moves, action.rung)
            log.info("move up, step 2 (reactivate): %s", action.why)

    def mark_requeued(self, namespace: str, name: str, now: float) -> None:
        """Requeued True on the Workload's status, read fresh and written with its resourceVersion (the conditions
        are one list: a merge patch replaces it whole)."""
        path = self._workload_path(namespace, name)
        obj = self.kube.get(f"{path}/status")
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") != "Requeued"]
        conditions.append({"type": "Requeued", "status": "True", "reason": "Reactivated",
                           "message": "The workload was reactivated (Requeued set by tpu-fallback)",
                           "lastTransitionTime": stamp,
                           "observedGeneration": obj["metadata"].get("generation", 0)})
        self.kube.merge_patch(f"{path}/status", {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                                                 "status": {"conditions": conditions}})

    def _patch_workload(self, snap: d.Snapshot, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch that holds only on the Workload as read (its resourceVersion): a Workload that changed
        since (its DWS capacity arrived, say) answers 409 and is decided again next pass, not acted on blind."""
        workload = next((w for w in snap.workloads if (w.namespace, w.name) == (namespace, name)), None)
        if workload is not None and workload.resource_version:
            patch = {**patch, "metadata": {**patch.get("metadata", {}),
                                           "resourceVersion": workload.resource_version}}
        self.kube.merge_patch(self._workload_path(namespace, name), patch)

    def set_taint(self, flavor: str, value: str | None, attempts: int = 5) -> None:
        """Our taint on a ResourceFlavor, or none, keeping every other taint. `spec.nodeTaints` is an atomic list
        (server-side apply would own it whole and drop an admin's taints), so: read, change ours, write back with
        the resourceVersion read; on a conflict (someone wrote in between) read again."""
        path = f"{KUEUE}/resourceflavors/{flavor}"
        key = self.settings.decide.taint_key
        for attempt in range(1, attempts + 1):
            obj = self.kube.get(path)
            spec = obj.setdefault("spec", {})
            others = [t for t in spec.get("nodeTaints") or [] if t.get("key") != key]
            taints = others if value is None else [*others, {"key": key, "value": value, "effect": "NoSchedule"}]
            if taints == (spec.get("nodeTaints") or []):
                return
            spec["nodeTaints"] = taints
            try:
                self.kube.replace(path, obj)
                return
            except KubeError as err:
                if err.status != 409 or attempt == attempts:
                    raise

    @staticmethod
    def _workload_path(namespace: str, name: str) -> str:
        return f"{KUEUE}/namespaces/{namespace}/workloads/{name}"

    def _event_on_workload(self, namespace: str, name: str, reason: str, message: str, kind: str = "Normal") -> None:
        self._event(namespace, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                                "namespace": namespace}, reason, message, kind)

    def _event_on_flavor(self, name: str, reason: str, message: str) -> None:
        # Events of cluster-scoped objects live in "default", as kubectl describe looks for them.
        self._event("default", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "name": name},
                    reason, message)

    def _event(self, namespace: str, involved: dict[str, str], reason: str, message: str, kind: str = "Normal"
               ) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.kube.create(f"/api/v1/namespaces/{namespace}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message[:1024], "type": kind,
                "source": {"component": COMPONENT}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": COMPONENT, "reportingInstance": COMPONENT})
        except KubeError as err:  # an Event is a courtesy; the decision stands
            log.warning("could not record event %s on %s: %s", reason, involved["name"], err)
