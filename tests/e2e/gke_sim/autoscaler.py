"""The cluster autoscaler: scale-ups for the pods the scheduler marked Unschedulable, scale-downs of idle nodes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tests.e2e.gke_sim.base import _Upcoming
from tests.e2e.gke_sim.dws import CONSUME_ANNOTATION
from tests.e2e.gke_sim.nodes import NOT_READY_TAINT, SLICE_ANNOTATION, NodesMixin, node_pool
from tests.e2e.gke_sim.scheduling import (
    Resources,
    fits,
    is_terminal,
    is_unschedulable,
    pod_key,
    pod_requests,
    selector_matches,
    subtract,
    untolerated,
    why_not,
)
from tpu_fallback.model.quantity import parse_quantity


class AutoscalerMixin(NodesMixin):
    """GKE's cluster autoscaler for the pools (a stock-out per pool: `set_capacity`)."""

    def set_capacity(self, pool: str | Iterable[str], available: bool) -> None:
        """A stock-out (False) or capacity back (True) for one pool or several, each on its own switch; a return
        also ends its back-off. A reservation pool has no switch: its VMs are held for it (ValueError)."""
        names = [pool] if isinstance(pool, str) else list(pool)
        with self._lock:
            for name in names:
                found = self._pool(name)
                if found.reservation is not None:
                    raise ValueError(f"node pool {name!r} consumes reservation {found.reservation!r}: its capacity "
                                     "is held for it, it does not stock out (fill it with jobs instead)")
            for name in names:
                self.capacity[name] = available
                if available:
                    self._backoff_until.pop(name, None)
                self._note(f"capacity of {name}: {'available' if available else 'stock-out'}")

    def _finish_upcoming(self, now: float) -> None:
        due = [u for u in self._upcoming if u.ready_at <= now]
        self._upcoming = [u for u in self._upcoming if u.ready_at > now]
        for up in due:
            if not self.capacity[up.pool.name] and up.pool.reservation is None:
                self._backoff_until[up.pool.name] = now + self.scale.real(self.timings.backoff)
                zone = up.pool.zone
                self._note(f"scale-up of {up.pool.name} by {up.count} failed: stock-out")
                for pod in up.pods:
                    self._event(pod, "FailedScaleUp", "Warning", [up.pool.name],
                                f"Node scale up in zones {zone} associated with this pod failed: GCE out of "
                                "resources. Pod is at risk of not being scheduled.")
                continue
            self._create_nodes(up.pool, up.count, reason="scale-up")

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
            # 2. A node on its way can take it.
            for up in self._upcoming:
                if why_not(up.pool, pod, request) is None:
                    spot: Resources | None = next((r for r in up.free if fits(request, r)), None)
                    if spot is not None:
                        subtract(spot, request)
                        if all(p["metadata"].get("uid") != pod["metadata"].get("uid") for p in up.pods):
                            up.pods.append(pod)
                        placed = True
                        break
            if placed or annotations.get(CONSUME_ANNOTATION):
                continue  # pods of a ProvisioningRequest wait for its nodes; they never trigger a scale-up
            # 3. Grow a pool: the first matching one with room, fewest nodes first.
            reasons: list[str] = []
            candidates = []
            for pool in self.pools.values():
                why = why_not(pool, pod, request)
                if why is None and not pool.autoscaled:
                    why = "node group without autoscaling"
                if why is None and pool.queued:
                    why = "queued provisioning node pool: scaled up only by a ProvisioningRequest"
                if why is None and self._backoff_until.get(pool.name, 0) > now:
                    why = "in backoff after failed scale-up"
                step = pool.hosts_per_slice
                if why is None and pool_size.get(pool.name, 0) + step > pool.max_nodes:
                    why = "max node group size reached"
                if why is None:
                    candidates.append(pool)
                else:
                    reasons.append(why)
            if not candidates:
                summary = ", ".join(f"{reasons.count(r)} {r}" for r in dict.fromkeys(reasons))
                # About the pools that would take the pod but for their state (back-off, size, queued).
                about = [p.name for p in self.pools.values() if why_not(p, pod, request) is None]
                self._event(pod, "NotTriggerScaleUp", "Normal", about, f"pod didn't trigger scale-up: {summary}")
                continue
            pool = min(candidates, key=lambda p: (pool_size.get(p.name, 0), list(self.pools).index(p.name)))
            count = pool.hosts_per_slice
            delay = self.scale_up_delays.get(pool.name,
                                             self.timings.scale_up if pool.tpu else self.timings.cpu_scale_up)
            up = _Upcoming(pool, count, now + self.scale.real(delay), now,
                           [dict(pool.machine.allocatable()) for _ in range(count)], [pod])
            subtract(up.free[0], request)
            self._upcoming.append(up)
            before = pool_size.get(pool.name, 0)
            pool_size[pool.name] = before + count
            self._note(f"scale-up of {pool.name} {before}->{before + count} for {pod_key(pod)}")
            self._event(pod, "TriggeredScaleUp", "Normal", [pool.name],
                        f"pod triggered scale-up: [{{{pool.name} {before}->{before + count} (max: {pool.max_nodes})}}]")

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
