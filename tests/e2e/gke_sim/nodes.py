"""Nodes: created as GKE registers them, taken away as the autoscaler, GCE or a Spot preemption does it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from tests.e2e.gke_sim.base import now_rfc3339
from tests.e2e.gke_sim.events import EventsMixin
from tests.e2e.gke_sim.kwok import KWOK_ANNOTATION, REGISTERING_ANNOTATION
from tests.e2e.gke_sim.pools import POOL_LABEL, NodePool
from tests.e2e.gke_sim.scheduling import is_terminal
from tests.e2e.kube import KubeError

SLICE_ANNOTATION = "tpu-fallback.sim/slice"  # nodes of one slice (the sim's stand-in for ICI)
REQUEST_ANNOTATION = "tpu-fallback.sim/provisioning-request"  # namespace/name of the request that made the node
# A Spot VM's preemption as GKE and the kubelet play it (GKE, "Spot VMs", termination and graceful shutdown:
# https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms; "Preemptible VMs":
# https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms): Compute Engine sends a preemption notice,
# then ACPI G2 Soft Off; the kubelet's graceful node shutdown gives pods 30 s by default (15 s for ordinary pods, 15 s
# for critical system pods) and marks each terminated pod phase Failed, reason Terminated; then the VM is gone. The
# kubelet's words (kubernetes pkg/kubelet/nodeshutdown/nodeshutdown_manager_linux.go): Event "Shutdown" on the Node,
# "Shutdown manager detected shutdown event"; the pods' message "Pod was terminated in response to imminent node
# shutdown." with condition DisruptionTarget (reason TerminationByKubelet); the node Ready False "node is shutting
# down", on which kube-controller-manager's node lifecycle taints it node.kubernetes.io/not-ready. The sim writes
# that taint itself: KWOK's node-initialize stage turns a node that is not Ready back to Ready at once.
SHUTDOWN_GRACE = 30.0  # simulated seconds from the notice to the VM gone (shutdownGracePeriod)
NODE_SHUTDOWN = ("Shutdown", "Shutdown manager detected shutdown event")
POD_SHUTDOWN = ("Terminated", "Pod was terminated in response to imminent node shutdown.")
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"  # cluster-autoscaler's taint on nodes it is removing
NOT_READY_TAINT = "node.kubernetes.io/not-ready"  # on every new node until the node lifecycle controller sees Ready


def is_registering(node: Mapping[str, Any]) -> bool:
    return REGISTERING_ANNOTATION in (node["metadata"].get("annotations") or {})


class NodesMixin(EventsMixin):
    """The nodes of the pools: registration, taints, deletion, GCE's preemptions."""

    def preempt(self, pool: str) -> list[str]:
        """GCE takes the pool's nodes away (preemption, maintenance): pods on them are deleted, then the nodes."""
        with self._lock:
            self._pool(pool)
            names = [n["metadata"]["name"] for n in self._nodes() if node_pool(n) == pool]
            self._delete_nodes(names, reason="preempted")
            return names

    def preempt_spot(self, pool: str, count: int | None = None) -> list[str]:
        """Compute Engine reclaims Spot VMs of a Spot pool (all of them, or the first `count` slices' nodes), as
        GKE does it (SHUTDOWN_GRACE and the words above): at once the kubelet's "Shutdown" Event on each node, the
        not-ready taint, and every pod bound there Failed (Terminated, DisruptionTarget) so its controller replaces
        it; after the grace period the VMs are gone: the nodes are deleted with what is left on them. A
        multi-host slice is reclaimed whole (GKE recreates an interrupted slice as a unit). Returns the nodes."""
        with self._lock:
            p = self._pool(pool)
            if not p.spot:
                raise ValueError(f"node pool {pool!r} is not a Spot pool: only Spot VMs are preempted "
                                 "(use preempt() for a pool's nodes lost otherwise)")
            by_slice: dict[str, list[str]] = {}
            for n in self._nodes():
                if node_pool(n) == pool and n["metadata"]["name"] not in self._shutdowns:
                    slice_id = (n["metadata"].get("annotations") or {}).get(SLICE_ANNOTATION, n["metadata"]["name"])
                    by_slice.setdefault(slice_id, []).append(n["metadata"]["name"])
            names = [n for ids in list(by_slice.values())[:count] for n in ids]
            due = self.elapsed() + self.scale.real(SHUTDOWN_GRACE)
            for name in names:
                self._shutdowns[name] = due
                self._node_event(name, *NODE_SHUTDOWN)
            self._taint(names, {"key": NOT_READY_TAINT, "effect": "NoSchedule"})
            for pod in self.client.list("v1", "Pod"):
                if (pod.get("spec") or {}).get("nodeName") in set(names) and not is_terminal(pod):
                    self._terminate_for_shutdown(pod)
            self._note(f"Spot VMs of {pool} preempted: {', '.join(sorted(names))}")
            return names

    def _terminate_for_shutdown(self, pod: Mapping[str, Any]) -> None:
        """The kubelet's graceful shutdown of one pod: phase Failed, reason Terminated, DisruptionTarget True."""
        stamp = now_rfc3339()
        meta = pod["metadata"]
        status = {"phase": "Failed", "reason": POD_SHUTDOWN[0], "message": POD_SHUTDOWN[1], "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
             "message": POD_SHUTDOWN[1], "lastTransitionTime": stamp},
            {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp},
            {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": stamp}]}
        with contextlib.suppress(KubeError):  # gone meanwhile
            self.client.request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                                {"status": status}, content_type="application/merge-patch+json")

    def _finish_shutdowns(self, now: float) -> None:
        """Preempted Spot VMs whose grace period is over: gone (the cloud node lifecycle controller deletes a Node
        whose VM no longer exists; the pod garbage collector the pods bound to it)."""
        due = [n for n, at in self._shutdowns.items() if at <= now]
        for name in due:
            del self._shutdowns[name]
        self._delete_nodes(due, reason="Spot VM preempted")

    def add_nodes(self, pool: str, count: int | None = None) -> list[str]:
        """Resize a pool by hand, now (`gcloud container clusters resize`): a whole slice by default. The nodes are
        kept until a pod lands on them or the idle time (at least TimeScale.min_real_wait) has passed."""
        with self._lock:
            p = self._pool(pool)
            names = self._create_nodes(p, count or p.hosts_per_slice, reason="manual resize")
            until = self.elapsed() + self.scale.patience(self.timings.scale_down_unneeded)
            self._held.update((n, until) for n in names)
            return names

    def _check_heartbeats(self, now: float, nodes: Sequence[Mapping[str, Any]]) -> None:
        """A node whose heartbeat lapsed is a broken box, not GKE: kube-controller-manager's node lifecycle marks it
        Unknown (reason NodeStatusUnknown) and its pods Ready=False, which KWOK's stages never undo, so a RayCluster
        on it never turns Ready again. KWOK keeps the nodes alive by renewing their Leases
        (--node-lease-duration-seconds); record it once per node if that ever stops."""
        for node in nodes:
            name = node["metadata"]["name"]
            ready = next((c for c in (node.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"),
                         None)
            if ready and ready.get("reason") == "NodeStatusUnknown" and name not in self._lapsed:
                self._lapsed.add(name)
                self.errors.append(f"{now:.1f}s: node {name}'s heartbeat lapsed ({ready.get('message')}): "
                                   "KWOK is not renewing its Lease in kube-node-lease")

    def _nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._informer("v1", "Node").items()
                if (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"]

    def _node_name(self, pool: NodePool) -> str:
        """The MIG's name without "-grp", then a number (GKE: gke-<cluster>-<pool>-<hash>-<suffix>)."""
        return f"{pool.mig_name.removesuffix('-grp')}-{next(self._names):04d}"

    def _new_slice(self, pool: NodePool) -> str:
        return f"{pool.name}/slice-{next(self._slices)}"

    def _create_nodes(self, pool: NodePool, count: int, *, reason: str, request: str | None = None,
                      slice_id: str | None = None, registering: bool = False) -> list[str]:
        """Register `count` nodes of the pool (new slices, or all in `slice_id`); `registering`: KWOK leaves them
        NotReady (REGISTERING_ANNOTATION) until `_release` (a multi-host slice coming up host by host)."""
        labels = pool.node_labels()
        names: list[str] = []
        # A multi-host pool's nodes come as slices; a single-host node is a slice of one.
        slice_size = pool.hosts_per_slice if pool.hosts_per_slice > 1 else 1
        for i in range(count):
            if slice_id is None or (i > 0 and i % slice_size == 0):
                slice_id = self._new_slice(pool)
            name = self._node_name(pool)
            annotations = {KWOK_ANNOTATION: "fake", SLICE_ANNOTATION: slice_id}
            if request:
                annotations[REQUEST_ANNOTATION] = request
            if registering:
                annotations[REGISTERING_ANNOTATION] = "true"
            allocatable = {k: _quantity(v) for k, v in pool.machine.allocatable().items()}
            capacity = {k: _quantity(v) for k, v in pool.machine.capacity().items()}
            node = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name},
                             "annotations": annotations},
                "spec": {"taints": pool.node_taints(), "providerID": f"gce://sim/{pool.zone}/{name}"},
                "status": {"allocatable": allocatable, "capacity": capacity},
            }
            self._informer("v1", "Node").observe(self.client.create(node))
            names.append(name)
        self._note(f"{pool.name}: {count} node(s) {'registered, not Ready' if registering else 'up'} ({reason})"
                   f"{f' for {request}' if request else ''}")
        return names

    def _release(self, names: Sequence[str]) -> None:
        """The slice is complete: its registering nodes may turn Ready (KWOK's node-initialize takes them)."""
        for name in names:
            with contextlib.suppress(KubeError):  # gone meanwhile
                self._informer("v1", "Node").observe(self.client.request(
                    "PATCH", f"/api/v1/nodes/{name}", {"metadata": {"annotations": {REGISTERING_ANNOTATION: None}}},
                    content_type="application/merge-patch+json"))

    def _taint(self, names: Iterable[str], taint: Mapping[str, str] | None, remove: str | None = None) -> None:
        """Add `taint` to the nodes' taints, or remove the taint with key `remove`."""
        for name in names:
            node = self.client.get("v1", "Node", name)
            if node is None:
                continue
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != (remove or "")]
            if taint is not None:
                taints.append(dict(taint))
            self._informer("v1", "Node").observe(
                self.client.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": taints}},
                                    content_type="application/merge-patch+json"))

    def _delete_nodes(self, names: Sequence[str], *, reason: str, only_if_idle: bool = False) -> bool:
        """Take nodes away: cordon them (nothing more gets bound there), delete the pods bound to them (as the pod
        garbage collector would once the VMs are gone), delete the nodes, then delete any pod still bound to them
        (one the scheduler bound just before the cordon). True if deleted.

        only_if_idle (a scale-down): like cluster-autoscaler, taint them ToBeDeletedByClusterAutoscaler first and
        look again; if a pod got bound meanwhile, untaint and keep them.
        """
        if not names:
            return False
        if only_if_idle:
            self._taint(names, {"key": TO_BE_DELETED, "value": str(int(time.time())), "effect": "NoSchedule"})
            gone = set(names)
            if any(not is_terminal(p) for p in self.client.list("v1", "Pod")
                   if (p.get("spec") or {}).get("nodeName") in gone):
                self._taint(names, None, remove=TO_BE_DELETED)
                for name in names:
                    self._idle_since.pop(name, None)
                self._note(f"scale-down of {', '.join(sorted(names))} cancelled: a pod was bound meanwhile")
                return False
        else:
            for name in names:
                with contextlib.suppress(KubeError):
                    self._informer("v1", "Node").observe(
                        self.client.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}},
                                            content_type="application/merge-patch+json"))
        self._delete_pods_on(names)
        for name in names:
            self.client.delete("v1", "Node", name)
            self._informer("v1", "Node").forget({"metadata": {"name": name}})
            self._idle_since.pop(name, None)
            self._held.pop(name, None)
            self._shutdowns.pop(name, None)
        self._delete_pods_on(names)
        self._note(f"{len(names)} node(s) down ({reason}): {', '.join(sorted(names))}")
        return True

    def _delete_pods_on(self, names: Sequence[str]) -> None:
        gone = set(names)
        for pod in self.client.list("v1", "Pod"):
            if (pod.get("spec") or {}).get("nodeName") in gone:
                with contextlib.suppress(KubeError):
                    self.client.request("DELETE", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/"
                                        f"{pod['metadata']['name']}",
                                        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})


def node_pool(node: Mapping[str, Any]) -> str:
    return str((node["metadata"].get("labels") or {}).get(POOL_LABEL, ""))


def _quantity(value: Decimal) -> str:
    """A Decimal as a Kubernetes quantity string (cpu in millicores when fractional)."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"

