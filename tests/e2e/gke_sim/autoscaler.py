"""The cluster autoscaler as GKE runs it: scale-ups for the pods the scheduler marked Unschedulable, their failures
and back-offs, its Events on pods, and scale-downs of idle nodes.

One loop per pass (GkeSim.interval), as cluster-autoscaler's RunOnce (kubernetes-sigs/cluster-autoscaler@33c3f97b
pkg/core/scaleup/orchestrator/orchestrator.go ScaleUp):
- The node groups are the autoscaled pools (GoogleCloudPlatform/cluster-autoscaler@7d250507
  pkg/cloudprovider/gke/gke_manager.go registers the MIGs of autoscaled node pools only), without the queued
  provisioning ones for pods that consume no ProvisioningRequest (pkg/provisioningrequests/processors/
  node_group_list_processor.go filterQueuedNodeGroupListProcessor); pods that do are DWS's (dws.py).
- filterValidScaleUpNodeGroups, once per loop: a node group in back-off is skipped ("in backoff after failed
  scale-up"), then one at its max size ("max node group size reached"; a multi-host pool grows by whole slices).
- A pod an existing node or a scale-up under way can take waits for it. Of the others, the oldest picks the valid
  node group its pod fits with the fewest nodes (the sim's expander), and the pods that fit the new slice join it:
  one scale-up per loop, written as TriggeredScaleUp on its pods (messages.triggered, with the MIG's URL as
  GKE's node group id). A loop without a scale-up writes NotTriggerScaleUp on each pod left (GKE's
  internal_eventing_scale_up_processor.go writes them whenever the loop's result is not a success), with upstream's
  counts (eventing_scale_up_processor.go ReasonsMessage): per valid node group the reasons the pod fails it
  (scheduling.predicate_reasons), and per skipped node group its skip reason. With
  --scaleup-simulation-for-skipped-node-groups-enabled off, upstream's default (pkg/config/flags/flags.go;
  GKE's own setting is not public), GetRemainingPods gives every pod the whole skipped list: a head pod that only
  the CPU pool could take also counts "1 in backoff after failed scale-up" for a TPU pool it could never use.
  `skipped_simulation = True` plays the flag on (a skipped node group the pod does not fit counts its predicate
  failure instead).
- A scale-up fails (`set_failure`, `set_capacity(pool, False)`) when its delay is over, or at once for a sync kind
  (the resize call refused: no TriggeredScaleUp, and the loop's NotTriggerScaleUp counts "scale-up execution
  failed", orchestrator.go markFailedGroupsAsUnschedulable), or times out when it takes longer than the node
  group's max node provision time (clusterstate.go updateScaleRequests). Each failure backs the node group off
  (backoff.py), the subnet too after "IP space exhausted" and the reservation after a reservation error, and writes
  FailedScaleUp on the pods of that scale-up only (GKE: AutoscalingStatusVisibilityProcessor.processScaleUpFailures
  -> the pods that triggered the failed node group's scale-up events), worded by messages.failed_scale_up.
- A multi-host slice comes up host by host: each host registers (NotReady: KWOK leaves it alone, kwok.py) at its
  share of the scale-up's delay, and the slice turns Ready as a whole when the last one is up. That GKE holds a
  slice's nodes NotReady until all are up is the sim's choice, not confirmed from GKE's sources; a failed or
  timed-out slice takes its registered hosts away (an atomic resize: all or none).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.e2e.gke_sim.backoff import INVALID_RESERVATION_RESET, RESERVATION_OUT_OF_RESOURCES_RESET, BackoffEntry
from tests.e2e.gke_sim.base import _Upcoming
from tests.e2e.gke_sim.dws import CONSUME_ANNOTATION
from tests.e2e.gke_sim.messages import (
    BACKOFF_REASON,
    FAILED_SCALE_UP,
    FAILURES,
    MAX_LIMIT_REACHED_REASON,
    NOT_TRIGGER_SCALE_UP,
    SCALE_UP_EXECUTION_FAILED,
    TRIGGERED_SCALE_UP,
    Failure,
    failed_scale_up,
    not_triggered,
    triggered,
)
from tests.e2e.gke_sim.nodes import NOT_READY_TAINT, SLICE_ANNOTATION, NodesMixin, node_pool
from tests.e2e.gke_sim.pools import NodePool
from tests.e2e.gke_sim.scheduling import (
    Resources,
    fits,
    is_terminal,
    is_unschedulable,
    pod_key,
    pod_requests,
    predicate_reasons,
    selector_matches,
    subtract,
    untolerated,
    why_not,
)
from tpu_fallback.model.quantity import parse_quantity

STOCK_OUT = "out-of-resources"


def _reservation_key(pool: NodePool) -> tuple[str, str | None, str, bool]:
    """reservations_backoff.go createReservationKey: reservation, machine family, multi-host or not."""
    return ("reservation", pool.reservation, pool.machine.name.split("-", 1)[0], pool.hosts_per_slice > 1)


class AutoscalerMixin(NodesMixin):
    """GKE's cluster autoscaler for the pools: failures per pool (`set_failure`, `set_capacity`), back-offs."""

    # --- switches (any thread) ---------------------------------------------------------------------------------

    def set_capacity(self, pool: str | Iterable[str], available: bool) -> None:
        """A stock-out (False: `set_failure(pool, "out-of-resources")`) or capacity back (True: no failure) for one
        pool or several, each on its own switch. Capacity back does not end a back-off under way: it runs out (as
        on GKE, where nothing removes a node group's back-off). A reservation pool has no switch: its VMs are held
        for it (ValueError)."""
        self.set_failure(pool, None if available else STOCK_OUT)

    def set_failure(self, pool: str | Iterable[str], kind: str | None) -> None:
        """From now on, scale-ups of the pool(s) fail for `kind` (messages.FAILURES: out-of-resources,
        quota-exceeded, ip-space-exhausted, service-account-deleted, invalid-reservation, reservation-not-ready,
        reservation-capacity-exceeded, reservation-not-found, invalid-tpu-configuration, invalid-tpu-topology,
        internal-error, instances-timeout), or succeed again (None). A scale-up under way fails at the end of its
        delay if its pool has a failure then (invalid-tpu-topology: the next resize call fails at once;
        instances-timeout: its nodes never appear, it fails after the max node provision time).

        Refused (ValueError, for all the pools given): out-of-resources for a pool consuming a reservation (GKE:
        "MIGs using reservation do not have stockouts", stockout_detection.go; fill it with jobs instead), the
        reservation-* kinds for a pool without one, and any kind but out-of-resources for a queued pool (DWS keeps
        its requests queued on a stock-out; its other answers: `inject_condition`)."""
        names = [pool] if isinstance(pool, str) else list(pool)
        failure = None if kind is None else FAILURES.get(kind)
        if kind is not None and failure is None:
            raise ValueError(f"unknown failure {kind!r}; known: {', '.join(FAILURES)}")
        with self._lock:
            for name in names:
                found = self._pool(name)
                if kind == STOCK_OUT and found.reservation is not None:
                    raise ValueError(f"node pool {name!r} consumes reservation {found.reservation!r}: its capacity "
                                     "is held for it, it does not stock out (fill it with jobs instead)")
                if failure is not None and failure.reservation and found.reservation is None:
                    raise ValueError(f"node pool {name!r} consumes no specific reservation: {kind} is a "
                                     "reservation pool's failure")
                if found.queued and kind not in (None, STOCK_OUT):
                    raise ValueError(f"node pool {name!r} is a queued provisioning pool: DWS answers for it "
                                     "(set_capacity, inject_condition)")
            for name in names:
                self.failures[name] = kind
                self.capacity[name] = kind is None
                self._note(f"capacity of {name}: {'available' if kind is None else kind}")

    def backed_off(self) -> dict[str, str]:
        """The pools in back-off now, each with the failure that put it (or its subnet, its reservation) there."""
        with self._lock:
            now = self.elapsed()
            return {name: entry.kind for name, pool in self.pools.items()
                    if (entry := self._backoff_of(pool, now)) is not None}

    # --- back-off ---------------------------------------------------------------------------------------------

    def _register_failure(self, pool: NodePool, failure: Failure, now: float) -> None:
        """RegisterFailedScaleUp: back the node group off, and its subnet or reservation for those failures."""
        initial, maximum = self.scale.real(self.timings.backoff), self.scale.real(self.timings.max_backoff)
        self._node_group_backoff.backoff(pool.name, failure.kind, now, initial, maximum)
        if failure.scope == "subnet":
            self._keyed_backoff.backoff(("subnet", pool.subnetwork), failure.kind, now, initial, maximum,
                                        self.scale.real(self.timings.backoff_reset))
        if failure.scope == "reservation" and pool.reservation is not None:
            reset = (RESERVATION_OUT_OF_RESOURCES_RESET if failure.kind == "reservation-capacity-exceeded"
                     else INVALID_RESERVATION_RESET)
            self._keyed_backoff.backoff(_reservation_key(pool), failure.kind, now, initial, maximum,
                                        self.scale.real(reset), bump_during=True)

    def _backoff_of(self, pool: NodePool, now: float) -> BackoffEntry | None:
        """The back-off the pool is in (its own, its subnet's, its reservation's), if any."""
        entry = self._node_group_backoff.status(pool.name, now) or self._keyed_backoff.status(
            ("subnet", pool.subnetwork), now)
        if entry is None and pool.reservation is not None:
            entry = self._keyed_backoff.status(_reservation_key(pool), now)
        return entry

    def _forget_stale_backoffs(self, now: float) -> None:
        self._node_group_backoff.remove_stale(now, self.scale.real(self.timings.backoff_reset))
        self._keyed_backoff.remove_stale(now)

    # --- scale-ups under way ----------------------------------------------------------------------------------

    def _max_provision(self, pool: NodePool) -> float:
        """Real seconds the autoscaler waits for a scale-up's nodes (timing.py)."""
        return self.scale.real(self.timings.tpu_max_node_provision if pool.tpu else self.timings.max_node_provision)

    def _finish_upcoming(self, now: float) -> None:
        for up in list(self._upcoming):
            kind = self.failures.get(up.pool.name)
            failure = FAILURES[kind] if kind is not None and not FAILURES[kind].sync else None
            deadline = up.started_at + self._max_provision(up.pool)
            if failure is not None and failure.kind != "instances-timeout":
                if now >= up.ready_at:
                    self._fail(up, failure, now)
                continue
            if failure is not None or up.ready_at > deadline:  # its nodes never appear in time
                if now >= deadline:
                    self._fail(up, FAILURES["instances-timeout"], now)
                continue
            if now < up.ready_at:
                self._register_hosts(up, now)
                continue
            self._upcoming.remove(up)
            self._create_nodes(up.pool, up.count - len(up.registered), reason="scale-up",
                               slice_id=up.slice_id or None)
            if up.registered:
                self._release(up.registered)
                self._note(f"{up.pool.name}: slice {up.slice_id} complete, its {up.count} nodes Ready")

    def _register_hosts(self, up: _Upcoming, now: float) -> None:
        """The hosts of a multi-host slice whose time has come register, NotReady: host i of n at i+1 n-ths of the
        delay (the last one at its end, with the slice)."""
        if up.pool.hosts_per_slice <= 1 or up.count != up.pool.hosts_per_slice:
            return
        delay = up.ready_at - up.started_at
        due = min(up.count - 1, math.floor((now - up.started_at) / delay * up.count)) if delay > 0 else 0
        if due > len(up.registered):
            up.registered += self._create_nodes(up.pool, due - len(up.registered), reason="slice coming up",
                                                slice_id=up.slice_id, registering=True)

    def _fail(self, up: _Upcoming, failure: Failure, now: float) -> None:
        """A failed scale-up: its hosts gone, its node group backed off, FailedScaleUp on its pods."""
        self._upcoming.remove(up)
        if up.registered:
            self._delete_nodes(up.registered, reason=f"failed scale-up of {up.pool.name}")
        self._register_failure(up.pool, failure, now)
        self._note(f"scale-up of {up.pool.name} by {up.count} failed: {failure.kind}")
        message = failed_scale_up([up.pool.zone], [failure.message_part(up.pool.node_group_id, up.pool.topology)])
        for pod in up.pods:
            self._event(pod, FAILED_SCALE_UP, "Warning", [up.pool.name], message)

    # --- one loop ---------------------------------------------------------------------------------------------

    def _free_on_nodes(self, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
                       ) -> dict[str, Resources]:
        free: dict[str, Resources] = {}
        for node in nodes:
            alloc = (node.get("status") or {}).get("allocatable") or {}
            free[node["metadata"]["name"]] = {k: parse_quantity(v) for k, v in alloc.items()}
        for pod in pods:
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound in free and not is_terminal(pod):
                subtract(free[bound], pod_requests(pod))
        return free

    def _node_groups(self) -> list[NodePool]:
        """The node groups for pods that consume no ProvisioningRequest: autoscaled pools, not queued ones."""
        return [p for p in self.pools.values() if p.autoscaled and not p.queued]

    def _scale_up(self, now: float, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> None:
        pending = [p for p in pods if is_unschedulable(p)]
        if not pending:
            return
        pending.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        free = self._free_on_nodes(nodes, pods)
        node_by_name = {n["metadata"]["name"]: n for n in nodes}
        pool_size: dict[str, int] = {}
        for n in nodes:
            pool_size[node_pool(n)] = pool_size.get(node_pool(n), 0) + 1
        for up in self._upcoming:
            pool_size[up.pool.name] = pool_size.get(up.pool.name, 0) + up.count
            # Every pending pod is placed again below, the ones that triggered this scale-up included: start from
            # empty nodes (keeping what earlier passes subtracted made each pass grow the pool again for them).
            up.free = [dict(up.pool.machine.allocatable()) for _ in range(up.count)]
        groups = self._node_groups()
        skipped: dict[str, str] = {}
        for group in groups:
            if self._backoff_of(group, now) is not None:
                skipped[group.name] = BACKOFF_REASON
            elif pool_size.get(group.name, 0) + group.hosts_per_slice > group.max_nodes:
                skipped[group.name] = MAX_LIMIT_REACHED_REASON
        valid = [g for g in groups if g.name not in skipped]
        decision: _Upcoming | None = None  # this loop's scale-up
        left: list[tuple[Mapping[str, Any], Resources]] = []  # pods nothing helps this loop
        for pod in pending:
            request = pod_requests(pod)
            annotations = pod["metadata"].get("annotations") or {}
            # 1. An existing node can take it: the scheduler will (it just has not retried yet).
            placed = False
            for name, room in free.items():
                if name in self._shutdowns:  # a preempted Spot VM about to go: no capacity
                    continue
                node = node_by_name[name]
                # A node still coming up (the API server's not-ready taint) is capacity on its way, as for
                # cluster-autoscaler: the pod waits for it rather than growing the pool again.
                taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != NOT_READY_TAINT]
                if selector_matches(pod, node["metadata"].get("labels") or {}) and not untolerated(pod, taints) \
                        and fits(request, room):
                    subtract(room, request)
                    placed = True
                    break
            if placed:
                continue
            # 2. A node on its way can take it (this loop's new one: the pod is one of its scale-up's).
            for up in [*self._upcoming, *([decision] if decision is not None else [])]:
                if why_not(up.pool, pod, request) is None:
                    spot: Resources | None = next((r for r in up.free if fits(request, r)), None)
                    if spot is not None:
                        subtract(spot, request)
                        if up is decision:
                            up.pods.append(pod)
                        placed = True
                        break
            if placed or annotations.get(CONSUME_ANNOTATION):
                continue  # pods of a ProvisioningRequest wait for its nodes; they never trigger a scale-up
            # 3. Grow a node group the pod fits, fewest nodes first: one scale-up per loop.
            candidates = [g for g in valid if why_not(g, pod, request) is None]
            if decision is None and candidates:
                pool = min(candidates, key=lambda p: (pool_size.get(p.name, 0), list(self.pools).index(p.name)))
                count = pool.hosts_per_slice
                delay = self.scale_up_delays.get(pool.name,
                                                 self.timings.scale_up if pool.tpu else self.timings.cpu_scale_up)
                decision = _Upcoming(pool, count, now + self.scale.real(delay), now,
                                     [dict(pool.machine.allocatable()) for _ in range(count)], [pod],
                                     slice_id=self._new_slice(pool) if count > 1 else "")
                subtract(decision.free[0], request)
                continue
            left.append((pod, request))
        failed_group = None
        if decision is not None:
            pool = decision.pool
            kind = self.failures.get(pool.name)
            if kind is None or not FAILURES[kind].sync:
                self._upcoming.append(decision)
                before = pool_size.get(pool.name, 0)
                self._note(f"scale-up of {pool.name} {before}->{before + decision.count} for "
                           f"{', '.join(pod_key(p) for p in decision.pods)}")
                message = triggered([(pool.node_group_id, before, before + decision.count, pool.max_nodes)])
                for pod in decision.pods:
                    self._event(pod, TRIGGERED_SCALE_UP, "Normal", [pool.name], message)
                return  # a loop with a scale-up writes no NotTriggerScaleUp
            # The resize call itself failed: FailedScaleUp on the decision's pods at once, which stay unschedulable.
            failure = FAILURES[kind]
            self._register_failure(pool, failure, now)
            self._note(f"scale-up of {pool.name} by {decision.count} failed at once: {kind}")
            message = failed_scale_up([pool.zone], [failure.message_part(pool.node_group_id, pool.topology)])
            for pod in decision.pods:
                self._event(pod, FAILED_SCALE_UP, "Warning", [pool.name], message)
            left = [(p, pod_requests(p)) for p in decision.pods] + left
            failed_group = pool.name
        for pod, request in left:
            self._not_triggered(pod, request, valid, skipped, failed_group)

    def _not_triggered(self, pod: Mapping[str, Any], request: Resources, valid: Sequence[NodePool],
                       skipped: Mapping[str, str], failed_group: str | None) -> None:
        """NotTriggerScaleUp on a pod this loop did not help, with the counts of ReasonsMessage (see above)."""
        counts: dict[str, int] = {}
        about: list[str] = []
        for group in valid:
            reasons = predicate_reasons(group, pod, request)
            if not reasons:
                if group.name != failed_group:
                    return  # schedulable on a node group: GetRemainingPods reports no such pod
                reasons = [SCALE_UP_EXECUTION_FAILED]
                about.append(group.name)
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
        for name, skip in skipped.items():
            reasons = predicate_reasons(self.pools[name], pod, request) if self.skipped_simulation else []
            if not reasons:
                reasons = [skip]
                about.append(name)
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
        self._event(pod, NOT_TRIGGER_SCALE_UP, "Normal", about, not_triggered(counts))

    def _scale_down(self, now: float, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> None:
        busy = {(p.get("spec") or {}).get("nodeName") for p in pods if not is_terminal(p)}
        for name in [n for n, until in self._held.items() if n in busy or until <= now]:
            del self._held[name]
        protected = {n for r in self._requests.values() if r.booked() for n in r.nodes} | set(self._held)
        by_slice: dict[str, list[str]] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            pool = self.pools.get(node_pool(node))
            if pool is None or not pool.autoscaled:
                continue
            if name in busy or name in protected:
                self._idle_since.pop(name, None)
            else:
                self._idle_since.setdefault(name, now)
            by_slice.setdefault((node["metadata"].get("annotations") or {}).get(SLICE_ANNOTATION, name), []).append(
                name)
        unneeded = self.scale.real(self.timings.scale_down_unneeded)
        for slice_id, names in by_slice.items():
            if all(n in self._idle_since and now - self._idle_since[n] >= unneeded for n in names):
                self._delete_nodes(names, reason=f"scale-down of idle slice {slice_id}", only_if_idle=True)
