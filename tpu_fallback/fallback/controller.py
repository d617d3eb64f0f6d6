"""The fallback controller's loop: read the cluster, decide (decide.py), act, tell (Events, log lines, metrics).

It polls instead of watching: a handful of list calls every few seconds is cheap at the scale of TPU jobs, and a
poll loop has no watch state to lose on a restart. One replica runs (a Recreate Deployment of 1).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.model.quantity import parse_quantity

log = logging.getLogger("tpu-fallback")

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
PROVISIONING_REQUESTS = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
TPU_RESOURCE = "google.com/tpu"
COMPONENT = "tpu-fallback-controller"  # the Events' source


@dataclass(frozen=True)
class Settings:
    decide: d.Config
    poll_seconds: float = 5.0
    metrics_port: int = 9090  # 0: no metrics endpoint

    @classmethod
    def from_file(cls, path: Path) -> Settings:
        """The config.json the infra stack renders (tpu_fallback/render/fallback.py writes the same keys)."""
        raw = json.loads(path.read_text())
        return cls(
            decide=d.Config(
                plan_a_flavors=tuple(raw["planAFlavors"]), plan_b_flavors=tuple(raw["planBFlavors"]),
                stockout_after=float(raw["stockoutAfterSeconds"]), cool_down=float(raw["coolDownSeconds"]),
                taint_key=str(raw["taintKey"]), reverse_move=bool(raw["reverseMove"]),
            ),
            poll_seconds=float(raw["pollSeconds"]), metrics_port=int(raw["metricsPort"]),
        )


# --- reading the cluster ------------------------------------------------------------------------------------------


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    cond = _condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def read_flavor(obj: Mapping[str, Any], taint_key: str) -> d.Flavor:
    spec = obj.get("spec") or {}
    taint = next((t for t in spec.get("nodeTaints") or [] if t.get("key") == taint_key), None)
    since = None
    if taint is not None:
        try:
            since = float(taint.get("value") or 0)
        except ValueError:
            since = 0.0  # a hand-made taint: treat as closed long ago, so the cool-down reopens it
    return d.Flavor(obj["metadata"]["name"], dict(spec.get("nodeLabels") or {}), since)


def read_workload(obj: Mapping[str, Any], provisioned: set[tuple[str, str]]) -> d.Workload:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    admission = status.get("admission") or {}
    tpu_flavor: str | None = None
    usage: dict[str, Decimal] = {}
    for assignment in admission.get("podSetAssignments") or []:
        flavor = (assignment.get("flavors") or {}).get(TPU_RESOURCE)
        if flavor is None:
            continue
        tpu_flavor = flavor
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            if (assignment.get("flavors") or {}).get(resource) == flavor:
                usage[resource] = usage.get(resource, Decimal(0)) + parse_quantity(amount)
    admitted = _condition(obj, "Admitted")
    pods_ready = _condition(obj, "PodsReady")
    # Kueue's own test for "never started" (pkg/controller/core/workload_controller.go, admittedNotReadyWorkload).
    never_started = pods_ready is None or (pods_ready.get("status") != "True" and pods_ready.get("reason") in (
        "WaitForStart", "PodsReady"))
    checks = status.get("admissionChecks") or []
    key = (meta["namespace"], meta["name"])
    return d.Workload(
        namespace=meta["namespace"], name=meta["name"], created=parse_time(meta.get("creationTimestamp")) or 0.0,
        cluster_queue=admission.get("clusterQueue"), tpu_flavor=tpu_flavor, usage=usage,
        quota_reserved=_true(obj, "QuotaReserved"),
        admitted_since=parse_time(admitted.get("lastTransitionTime"))
        if admitted is not None and admitted.get("status") == "True" else None,
        pods_started=not never_started,
        capacity_arrived=(bool(checks) and all(c.get("state") == "Ready" for c in checks)) or key in provisioned,
        active=spec.get("active", True) is not False,
        finished=_true(obj, "Finished"),
        multikueue_copy=d.MULTIKUEUE_ORIGIN_LABEL in (meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
    )


def provisioned_owners(requests: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(namespace, Workload name) of every ProvisioningRequest that is Provisioned."""
    out = set()
    for req in requests:
        if _true(req, "Provisioned"):
            for owner in req["metadata"].get("ownerReferences") or []:
                if owner.get("kind") == "Workload":
                    out.add((req["metadata"]["namespace"], owner["name"]))
    return out


def free_quota(cluster_queue: Mapping[str, Any]) -> dict[str, dict[str, Decimal]]:
    """flavor -> resource -> nominal quota minus the reservation Kueue reports (borrowing is not counted)."""
    free: dict[str, dict[str, Decimal]] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            free[flavor["name"]] = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor.get("resources") or []}
    for flavor in (cluster_queue.get("status") or {}).get("flavorsReservation") or []:
        for r in flavor.get("resources") or []:
            if flavor["name"] in free and r["name"] in free[flavor["name"]]:
                free[flavor["name"]][r["name"]] -= parse_quantity(r.get("total") or 0)
    return free


def read_node(obj: Mapping[str, Any]) -> d.Node:
    meta = obj["metadata"]
    ready = _true(obj, "Ready") and not (obj.get("spec") or {}).get("unschedulable", False)
    return d.Node(dict(meta.get("labels") or {}), parse_time(meta.get("creationTimestamp")) or 0.0, ready)


def snapshot(kube: Kube, config: d.Config, now: float) -> d.Snapshot:
    try:
        requests = kube.list(PROVISIONING_REQUESTS)
    except KubeError as err:
        if err.status != 404:  # no ProvisioningRequest API: no DWS, nothing provisioned
            raise
        requests = []
    provisioned = provisioned_owners(requests)
    return d.Snapshot(
        now=now,
        flavors={f.name: f for f in (read_flavor(o, config.taint_key) for o in kube.list(f"{KUEUE}/resourceflavors"))},
        workloads=tuple(read_workload(o, provisioned) for o in kube.list(f"{KUEUE}/workloads")),
        nodes=tuple(read_node(o) for o in kube.list("/api/v1/nodes")),
        free={o["metadata"]["name"]: free_quota(o) for o in kube.list(f"{KUEUE}/clusterqueues")},
    )


# --- acting -------------------------------------------------------------------------------------------------------


class Metrics:
    """Prometheus text counters and gauges, served on /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.values: dict[str, float] = {
            "tpu_fallback_plan_a_closed": 0, "tpu_fallback_plan_a_closes_total": 0,
            "tpu_fallback_plan_a_reopens_total": 0, "tpu_fallback_moves_to_plan_a_total": 0,
            "tpu_fallback_reconcile_errors_total": 0, "tpu_fallback_last_reconcile_timestamp_seconds": 0,
        }

    def add(self, name: str, amount: float = 1) -> None:
        with self._lock:
            self.values[name] += amount

    def set(self, name: str, value: float) -> None:
        with self._lock:
            self.values[name] = value

    def healthy(self, max_age: float, now: float | None = None) -> bool:
        """A reconcile pass finished within `max_age` seconds (or the process is younger than that)."""
        now = time.time() if now is None else now
        last = self.values["tpu_fallback_last_reconcile_timestamp_seconds"] or self.started
        return now - last <= max_age

    def text(self) -> str:
        with self._lock:
            lines = []
            for name, value in self.values.items():
                kind = "counter" if name.endswith("_total") else "gauge"
                lines += [f"# TYPE {name} {kind}", f"{name} {value:g}"]
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: Metrics, port: int, max_age: float) -> ThreadingHTTPServer:
    """/metrics (Prometheus text) and /healthz (fails once no pass has finished for `max_age` seconds)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                status, body = 200, metrics.text().encode()
            elif self.path == "/healthz":
                status, body = (200, b"ok\n") if metrics.healthy(max_age) else (500, b"no reconcile pass lately\n")
            else:
                status, body = 404, b"not found\n"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Controller:
    def __init__(self, kube: Kube, settings: Settings, metrics: Metrics | None = None) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics or Metrics()

    def reconcile(self, now: float | None = None) -> list[d.Action]:
        """One pass: snapshot, decide, act. Returns what it did."""
        now = time.time() if now is None else now
        config = self.settings.decide
        snap = snapshot(self.kube, config, now)
        actions = d.decide(config, snap)
        for action in actions:
            self._act(action, snap)
        was_closed = any(snap.flavors[n].closed_since is not None for n in config.plan_a_flavors if n in snap.flavors)
        reopened = any(isinstance(a, d.ReopenPlanA) for a in actions)
        closed = any(isinstance(a, d.ClosePlanA) for a in actions) or (was_closed and not reopened)
        self.metrics.set("tpu_fallback_plan_a_closed", 1 if closed else 0)
        self.metrics.set("tpu_fallback_last_reconcile_timestamp_seconds", now)
        return actions

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.reconcile()
            except KubeError as err:
                self.metrics.add("tpu_fallback_reconcile_errors_total")
                if err.status == 429 or err.status >= 500:  # the API server is busy or starting: one line will do
                    log.warning("reconcile skipped (%s); retrying in %ss", err, self.settings.poll_seconds)
                else:
                    log.exception("reconcile failed; retrying in %ss", self.settings.poll_seconds)
            except Exception:  # the loop outlives any one failed pass; the next pass starts from the cluster
                self.metrics.add("tpu_fallback_reconcile_errors_total")
                log.exception("reconcile failed; retrying in %ss", self.settings.poll_seconds)
            stop.wait(self.settings.poll_seconds)

    def _act(self, action: d.Action, snap: d.Snapshot) -> None:
        if isinstance(action, d.ClosePlanA):
            for name in action.flavors:
                self.set_taint(name, str(int(action.since)))
                self._event_on_flavor(name, "PlanAStockOut", action.why)
            if action.cause:
                ns, name = action.cause.split("/", 1)
                self._event_on_workload(ns, name, "PlanAStockOut", action.why)
                self.metrics.add("tpu_fallback_plan_a_closes_total")
            log.info("close plan A (%s): %s", ", ".join(action.flavors), action.why)
        elif isinstance(action, d.ReopenPlanA):
            for name in action.flavors:
                self.set_taint(name, None)
                self._event_on_flavor(name, "PlanAReopened", action.why)
            self.metrics.add("tpu_fallback_plan_a_reopens_total")
            log.info("reopen plan A (%s): %s", ", ".join(action.flavors), action.why)
        elif isinstance(action, d.Deactivate):
            stamp = datetime.fromtimestamp(snap.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.kube.merge_patch(self._workload_path(action.namespace, action.name), {
                "metadata": {"annotations": {d.MOVING_ANNOTATION: f"{stamp} to {action.target}"}},
                "spec": {"active": False}})
            self._event_on_workload(action.namespace, action.name, "MovingToPlanA", action.why)
            log.info("move to plan A, step 1 (deactivate): %s", action.why)
        elif isinstance(action, d.Reactivate):
            workload = next(w for w in snap.workloads if (w.namespace, w.name) == (action.namespace, action.name))
            moving = workload.annotations.get(d.MOVING_ANNOTATION, "")
            self.kube.merge_patch(self._workload_path(action.namespace, action.name), {
                "metadata": {"annotations": {d.MOVING_ANNOTATION: None, d.MOVED_ANNOTATION: moving or "yes"}},
                "spec": {"active": True}})
            self._event_on_workload(action.namespace, action.name, "MovedToPlanA", action.why)
            self.metrics.add("tpu_fallback_moves_to_plan_a_total")
            log.info("move to plan A, step 2 (reactivate): %s", action.why)

    def set_taint(self, flavor: str, value: str | None) -> None:
        """Our taint on a ResourceFlavor (server-side apply: the field manager owns only this taint), or none."""
        taints = [] if value is None else [{"key": self.settings.decide.taint_key, "value": value,
                                            "effect": "NoSchedule"}]
        self.kube.apply(f"{KUEUE}/resourceflavors/{flavor}", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor},
            "spec": {"nodeTaints": taints}})

    @staticmethod
    def _workload_path(namespace: str, name: str) -> str:
        return f"{KUEUE}/namespaces/{namespace}/workloads/{name}"

    def _event_on_workload(self, namespace: str, name: str, reason: str, message: str) -> None:
        self._event(namespace, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": name,
                                "namespace": namespace}, reason, message)

    def _event_on_flavor(self, name: str, reason: str, message: str) -> None:
        # Events of cluster-scoped objects live in "default", as kubectl describe looks for them.
        self._event("default", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "name": name},
                    reason, message)

    def _event(self, namespace: str, involved: dict[str, str], reason: str, message: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.kube.create(f"/api/v1/namespaces/{namespace}/events", {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message[:1024], "type": "Normal",
                "source": {"component": COMPONENT}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": COMPONENT, "reportingInstance": COMPONENT})
        except KubeError as err:  # an Event is a courtesy; the decision stands
            log.warning("could not record event %s on %s: %s", reason, involved["name"], err)
