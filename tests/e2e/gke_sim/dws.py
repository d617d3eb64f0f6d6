"""DWS queued provisioning: ProvisioningRequests of class queued-provisioning.gke.io, as GKE answers them."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tests.e2e.gke_sim.base import _Request, now_rfc3339
from tests.e2e.gke_sim.nodes import NodesMixin, node_pool
from tests.e2e.gke_sim.pools import NodePool
from tests.e2e.gke_sim.scheduling import pod_requests, why_not
from tests.e2e.kube import KubeError

PROVREQ_API = "autoscaling.x-k8s.io/v1"
QUEUED_CLASS = "queued-provisioning.gke.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"

# Condition reasons and messages as GKE's queued provisioning sets them.
ACCEPTED = ("SuccessfullyQueued", "Provisioning Request was successfully queued.")
NOT_PROVISIONED = ("NotProvisioned", "Provisioning Request wasn't provisioned.")
PROVISIONED = ("Provisioned", "Provisioning Request was successfully provisioned.")
BOOKING_EXPIRED = ("BookingExpired", "Capacity booking for the Provisioning Request has expired and the nodes are "
                   "now candidates for scale down when underutilized.")
CAPACITY_REVOKED = ("CapacityRevoked", "Capacity provisioned for the Provisioning Request was reclaimed and is no "
                    "longer available in the cluster.")
FAILED = ("Failed", "Provisioning Request has failed.")
INJECTABLE = {"Failed": FAILED, "CapacityRevoked": CAPACITY_REVOKED, "BookingExpired": BOOKING_EXPIRED}


class DwsMixin(NodesMixin):
    """GKE's answers to queued ProvisioningRequests."""

    def inject_condition(self, request: str, condition: str, message: str | None = None) -> None:
        """Set Failed, CapacityRevoked or BookingExpired on a ProvisioningRequest (namespace/name) as GKE would;
        CapacityRevoked also removes the request's nodes and their pods."""
        if condition not in INJECTABLE:
            raise ValueError(f"condition {condition!r} cannot be injected; use one of {', '.join(INJECTABLE)}")
        with self._lock:
            req = self._requests.get(request)
            if req is None:
                raise KeyError(f"no ProvisioningRequest {request} seen yet (known: {', '.join(self._requests)})")
            reason, default = INJECTABLE[condition]
            self._set_condition(req, condition, "True", reason, message or default)
            if condition == "CapacityRevoked":
                self._delete_nodes(req.nodes, reason=f"capacity of {request} revoked")
                req.done = True
            elif condition == "Failed":
                req.done = True
            self._write_request_status(req)

    def requests(self) -> dict[str, dict[str, dict[str, str]]]:
        """ProvisioningRequest namespace/name -> condition type -> condition, as the sim set them."""
        with self._lock:
            return {k: copy.deepcopy(r.conditions) for k, r in self._requests.items()}

    def _provisioning(self, now: float, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> None:
        seen: set[str] = set()
        used: dict[str, int] = {}  # pool -> nodes there or on their way (updated as requests get nodes)
        for n in nodes:
            used[node_pool(n)] = used.get(node_pool(n), 0) + 1
        for up in self._upcoming:
            used[up.pool.name] = used.get(up.pool.name, 0) + up.count
        for pr in self._informer(PROVREQ_API, "ProvisioningRequest").items():
            if (pr.get("spec") or {}).get("provisioningClassName") != QUEUED_CLASS:
                continue  # check-capacity and others: no GKE controller answers here either
            meta = pr["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            seen.add(key)
            req = self._requests.get(key)
            if req is None or req.uid != meta["uid"]:
                req = self._accept(now, pr, key)
            if req.done:
                continue
            if req.provisioned_at is None:
                self._try_provision(now, pr, req, used)
                continue
            self._after_provisioned(now, req, pods)
        for key, req in self._requests.items():
            if key not in seen and not req.done:
                req.done = True  # deleted (its Workload finished or was evicted): the nodes are ordinary now
                self._note(f"ProvisioningRequest {key} deleted")

    def _accept(self, now: float, pr: Mapping[str, Any], key: str) -> _Request:
        params = (pr.get("spec") or {}).get("parameters") or {}
        max_run = float(params["maxRunDurationSeconds"]) if params.get("maxRunDurationSeconds") else None
        req = _Request(key, pr["metadata"]["uid"], now, max_run=max_run)
        self._requests[key] = req
        self._set_condition(req, "Accepted", "True", *ACCEPTED)
        self._set_condition(req, "Provisioned", "False", *NOT_PROVISIONED)
        self._write_request_status(req)
        self._note(f"ProvisioningRequest {key} accepted")
        return req

    def _request_pod_sets(self, pr: Mapping[str, Any]) -> list[tuple[dict[str, Any], int]] | None:
        """(pod template as a pod, count) per PodSet of the request; None when the request is gone already (the
        informer can still list a request whose PodTemplates Kueue has just deleted with it)."""
        out = []
        meta = pr["metadata"]
        for ps in (pr.get("spec") or {}).get("podSets") or []:
            template = self.client.get("v1", "PodTemplate", ps["podTemplateRef"]["name"], meta["namespace"])
            if template is None:
                live = self.client.get(PROVREQ_API, "ProvisioningRequest", meta["name"], meta["namespace"])
                if live is None or live["metadata"]["uid"] != meta["uid"] or live["metadata"].get("deletionTimestamp"):
                    return None
                raise KubeError(404, f"PodTemplate {ps['podTemplateRef']['name']} of ProvisioningRequest "
                                f"{meta['name']} not found")
            pod = {"metadata": template["template"].get("metadata") or {}, "spec": template["template"]["spec"]}
            out.append((pod, int(ps["count"])))
        return out

    def _try_provision(self, now: float, pr: Mapping[str, Any], req: _Request, used: dict[str, int]) -> None:
        """Provision the request if its delay is over and, for each PodSet, a queued pool matching its PodTemplate
        has room for its nodes (whole slices) and capacity; `used` (pool -> nodes) is updated."""
        if now < req.accepted_at + self.scale.real(self.timings.dws_provision):
            return
        planned = dict(used)
        plan: list[tuple[NodePool, int]] = []
        pod_sets = self._request_pod_sets(pr)
        if pod_sets is None:
            return  # deleted meanwhile: the next pass stops tracking it
        for pod, count in pod_sets:
            request = pod_requests(pod)
            pool = next((p for p in self.pools.values()
                         if p.queued and self.capacity[p.name] and why_not(p, pod, request) is None
                         and planned.get(p.name, 0) + _whole_slices(count, p.hosts_per_slice) <= p.max_nodes), None)
            if pool is None:
                return  # DWS keeps the request queued until capacity appears
            planned[pool.name] = planned.get(pool.name, 0) + _whole_slices(count, pool.hosts_per_slice)
            plan.append((pool, _whole_slices(count, pool.hosts_per_slice)))
        used.update(planned)
        for pool, count in plan:
            req.nodes += self._create_nodes(pool, count, reason="ProvisioningRequest", request=req.key)
            req.pool = pool.name
        req.provisioned_at = now
        self._set_condition(req, "Provisioned", "True", *PROVISIONED)
        self._write_request_status(req)

    def _after_provisioned(self, now: float, req: _Request, pods: Sequence[Mapping[str, Any]]) -> None:
        provisioned_at = req.provisioned_at if req.provisioned_at is not None else now
        if not req.consumed:
            name = req.key.split("/", 1)[1]
            consumers = [p for p in pods if (p["metadata"].get("annotations") or {}).get(CONSUME_ANNOTATION) == name
                         and (p.get("spec") or {}).get("nodeName") in set(req.nodes)]
            if req.nodes and len(consumers) >= len(req.nodes):
                req.consumed = True
                self._note(f"ProvisioningRequest {req.key} consumed by {len(consumers)} pod(s)")
            elif now >= provisioned_at + self.scale.patience(self.timings.booking) and "BookingExpired" not in \
                    req.conditions:
                self._set_condition(req, "BookingExpired", "True", *BOOKING_EXPIRED)
                self._write_request_status(req)
        if req.max_run is not None and now >= provisioned_at + self.scale.real(req.max_run):
            self._set_condition(req, "CapacityRevoked", "True", CAPACITY_REVOKED[0],
                                f"{CAPACITY_REVOKED[1]} (maxRunDurationSeconds reached)")
            self._delete_nodes(req.nodes, reason=f"maxRunDurationSeconds of {req.key}")
            req.done = True
            self._write_request_status(req)

    def _set_condition(self, req: _Request, kind: str, status: str, reason: str, message: str) -> None:
        old = req.conditions.get(kind)
        if old and old["status"] == status and old["reason"] == reason and old["message"] == message:
            return
        changed = old is None or old["status"] != status
        req.conditions[kind] = {"type": kind, "status": status, "reason": reason, "message": message,
                                "lastTransitionTime": now_rfc3339() if changed or old is None
                                else old["lastTransitionTime"]}
        if status == "True":
            self._note(f"ProvisioningRequest {req.key}: {kind}")

    def _write_request_status(self, req: _Request) -> None:
        namespace, name = req.key.split("/", 1)
        self.client.apply_status({"apiVersion": PROVREQ_API, "kind": "ProvisioningRequest",
                                  "metadata": {"name": name, "namespace": namespace},
                                  "status": {"conditions": list(req.conditions.values())}})


def _whole_slices(count: int, hosts_per_slice: int) -> int:
    return math.ceil(count / hosts_per_slice) * hosts_per_slice
