"""Builders of the Kubernetes objects and Helm values the stacks create. Pure Python (no Pulumi).

Every builder returns plain dicts, so tests compare them with the tutorial's YAML and validate them
against the real CRD schemas.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components import capacity
from components.settings import UNLIMITED_QUOTA, KueueSettings, ResourceQuota, Settings, on_demand_quota

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
TPU_RESOURCE = "google.com/tpu"
COVERED_RESOURCES = ("cpu", "memory", TPU_RESOURCE)
SYSTEM_FLAVOR, ON_DEMAND_FLAVOR, FLEX_FLAVOR = "default-cpu", "on-demand", "dws"
DWS_CHECK, DWS_CONFIG = "dws-prov", "dws-config"
# The tutorial writes "infinite" as 1e9 of each resource.
UNLIMITED: dict[str, int | str] = {"cpu": 1000000000, "memory": "1000000000Gi", TPU_RESOURCE: 1000000000}
assert float(UNLIMITED_QUOTA) == UNLIMITED["cpu"]


def load_manifest(name: str) -> Any:
    return yaml.safe_load((MANIFESTS / name).read_text())


# --------------------------------------------------------------------------------------------
# Kueue installation
# --------------------------------------------------------------------------------------------


def kueue_helm_values(kueue: KueueSettings, system_pool: str | None) -> dict[str, Any]:
    values: dict[str, Any] = copy.deepcopy(load_manifest("kueue-values.yaml"))
    manager = values.setdefault("controllerManager", {})
    manager["featureGates"] = [{"name": name, "enabled": enabled} for name, enabled in kueue.feature_gates]
    manager["nodeSelector"] = {capacity.NODEPOOL_LABEL: system_pool} if system_pool else {}
    return values


def readiness_probe_flavor() -> dict[str, Any]:
    """The object the readiness gate submits with a server-side dry run: it passes only through Kueue's webhooks."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"generateName": "tpu-fallback-readiness-probe-"},
        "spec": {"nodeLabels": {"tpu-fallback/probe": "true"}},
    }


# --------------------------------------------------------------------------------------------
# The fallback queues
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flavor:
    name: str
    node_labels: dict[str, str]
    quota: dict[str, int | str]  # resource -> nominalQuota, in COVERED_RESOURCES order


@dataclass(frozen=True)
class QueuePlan:
    cluster_queue: str
    flavors: tuple[Flavor, ...]  # in the order Kueue tries them
    provisioning_check: bool  # dws-prov on the dws flavor
    namespace_labels: dict[str, str] | None
    local_queues: tuple[tuple[str, str], ...]  # (namespace, name)

    def flavor(self, name: str) -> Flavor | None:
        return next((f for f in self.flavors if f.name == name), None)


def _quota(q: ResourceQuota, tpu: int) -> dict[str, int | str]:
    return {"cpu": q.cpu, "memory": q.memory, TPU_RESOURCE: tpu}


def queue_plan(settings: Settings) -> QueuePlan:
    """Flavors in fallback order with quotas derived from the pools' real capacity."""
    tpu, q = settings.tpu, settings.queues
    flavors = [Flavor(SYSTEM_FLAVOR, {capacity.NODEPOOL_LABEL: settings.system_pool.name}, _quota(q.system_quota, 0))]
    if settings.on_demand.max_slices > 0:
        pools = capacity.pool_layout(settings.on_demand.name, tpu, settings.on_demand.max_slices)
        flavors.append(Flavor(
            ON_DEMAND_FLAVOR,
            capacity.flavor_node_labels(capacity.ON_DEMAND, pools),
            _quota(on_demand_quota(settings), capacity.tpu_chips(tpu, settings.on_demand.max_slices)),
        ))
    flex = settings.flex_start
    if flex.active:
        pools = capacity.pool_layout(flex.name, tpu, flex.max_slices)
        if q.cap_flex_start:
            pool_size = ResourceQuota(
                capacity.pool_cpu(tpu, flex.max_slices), f"{capacity.pool_memory_gib(tpu, flex.max_slices)}Gi"
            )
            quota = _quota(pool_size, capacity.tpu_chips(tpu, flex.max_slices))
        else:
            quota = dict(UNLIMITED)
        flavors.append(Flavor(FLEX_FLAVOR, capacity.flavor_node_labels(capacity.FLEX_START, pools), quota))
    return QueuePlan(
        cluster_queue=q.cluster_queue,
        flavors=tuple(flavors),
        provisioning_check=flex.active,
        namespace_labels=dict(q.namespace_labels) if q.namespace_labels else None,
        local_queues=tuple((lq.namespace, lq.name) for lq in q.local_queues),
    )


def resource_flavor(flavor: Flavor) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name},
        "spec": {"nodeLabels": dict(flavor.node_labels)},
    }


def cluster_queue(plan: QueuePlan, admission_checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ClusterQueue; `admission_checks` replaces the dws-prov strategy (MultiKueue managers)."""
    for flavor in plan.flavors:
        if tuple(flavor.quota) != COVERED_RESOURCES:
            raise ValueError(f"flavor {flavor.name} must list {COVERED_RESOURCES} in order, not {tuple(flavor.quota)}")
    spec: dict[str, Any] = {
        # {} admits every namespace; an absent selector would admit none.
        "namespaceSelector": {"matchLabels": dict(plan.namespace_labels)} if plan.namespace_labels else {},
        "resourceGroups": [{
            "coveredResources": list(COVERED_RESOURCES),
            "flavors": [
                {"name": f.name, "resources": [{"name": r, "nominalQuota": f.quota[r]} for r in COVERED_RESOURCES]}
                for f in plan.flavors
            ],
        }],
    }
    checks = admission_checks
    if checks is None and plan.provisioning_check:
        checks = [{"name": DWS_CHECK, "onFlavors": [FLEX_FLAVOR]}]
    if checks:
        names = {f.name for f in plan.flavors}
        for check in checks:
            missing = [f for f in check.get("onFlavors", []) if f not in names]
            if missing:
                raise ValueError(f"admission check {check['name']} refers to missing flavor(s) {missing}")
        spec["admissionChecksStrategy"] = {"admissionChecks": checks}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": plan.cluster_queue}, "spec": spec}


def provisioning_request_config() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ProvisioningRequestConfig",
        "metadata": {"name": DWS_CONFIG},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io", "managedResources": [TPU_RESOURCE]},
    }


def admission_check(name: str, controller: str, parameters_kind: str, parameters_name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {
            "controllerName": controller,
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": parameters_kind, "name": parameters_name},
        },
    }


def provisioning_admission_check() -> dict[str, Any]:
    return admission_check(DWS_CHECK, "kueue.x-k8s.io/provisioning-request", "ProvisioningRequestConfig", DWS_CONFIG)


def local_queue(namespace: str, name: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterQueue": cluster_queue_name},
    }


# --------------------------------------------------------------------------------------------
# MultiKueue (manager -> workers) and metrics
# --------------------------------------------------------------------------------------------

MULTIKUEUE_CHECK, MULTIKUEUE_CONFIG = "multikueue", "multikueue-config"
MULTIKUEUE_FLAVOR = "multikueue"
MULTIKUEUE_ACCOUNT = "multikueue-sa"
KUEUE_METRICS_PORT = 8443  # Kueue 0.19's controller serves metrics over HTTPS on :8443

# What the manager's Kueue may do on a worker (Kueue's create-multikueue-kubeconfig.sh, plus the RayJob and
# RayCluster rules of its KubeRay MultiKueue guide): create/observe the jobs it dispatches and their workloads.
MULTIKUEUE_WORKER_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {"apiGroups": ["ray.io"], "resources": ["rayjobs", "rayclusters"],
     "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayjobs/status", "rayclusters/status"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"],
     "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "patch", "update"]},
]


def manager_queue_plan(settings: Settings) -> QueuePlan:
    """The manager admits on an unlimited flavor without node labels: the workers hold the real quotas."""
    unlimited = Flavor(MULTIKUEUE_FLAVOR, {}, dict(UNLIMITED))
    q = settings.queues
    return QueuePlan(
        cluster_queue=q.cluster_queue,
        flavors=(unlimited,),
        provisioning_check=False,  # Kueue refuses MultiKueue and ProvisioningRequest checks on one queue
        namespace_labels=dict(q.namespace_labels) if q.namespace_labels else None,
        local_queues=tuple((lq.namespace, lq.name) for lq in q.local_queues),
    )


def multikueue_admission_checks() -> list[dict[str, Any]]:
    return [{"name": MULTIKUEUE_CHECK, "onFlavors": [MULTIKUEUE_FLAVOR]}]


def multikueue_cluster(worker: str, secret_name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "MultiKueueCluster",
        "metadata": {"name": worker},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret_name}}},
    }


def multikueue_config(workers: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "MultiKueueConfig",
        "metadata": {"name": MULTIKUEUE_CONFIG},
        "spec": {"clusters": list(workers)},
    }


def multikueue_admission_check() -> dict[str, Any]:
    return admission_check(MULTIKUEUE_CHECK, "kueue.x-k8s.io/multikueue", "MultiKueueConfig", MULTIKUEUE_CONFIG)


def kueue_pod_monitoring() -> dict[str, Any]:
    """Managed Service for Prometheus scrapes Kueue's controller (its metrics endpoint is HTTPS, self-signed)."""
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {"name": "kueue-controller-metrics", "namespace": KUEUE_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"control-plane": "controller-manager", "app.kubernetes.io/name": "kueue"}},
            "endpoints": [{"port": KUEUE_METRICS_PORT, "scheme": "https", "interval": "30s",
                           "tls": {"insecureSkipVerify": True}}],
        },
    }
