"""Kueue's side of the stacks as plain dicts: Helm values, queue objects, MultiKueue objects, metrics. Pure Python.

Dicts in, dicts out, so tests compare them with the tutorial's YAML and validate them against the
real CRD schemas; the components (tpu_fallback.components) register them.
"""

from __future__ import annotations

from typing import Any

import yaml

from tpu_fallback.model.capacity import FLEX_START
from tpu_fallback.model.labels import NODEPOOL_LABEL, QUEUED_LABEL, SPOT_LABEL, TPU_RESOURCE
from tpu_fallback.model.ladder import SPOT
from tpu_fallback.model.quantity import canonical_quantity
from tpu_fallback.model.queues import COVERED_RESOURCES, MULTIKUEUE_FLAVOR, Flavor, QueuePlan
from tpu_fallback.model.settings import FallbackSettings, KueueSettings
from tpu_fallback.render.files import load_template

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
DWS_CHECK, DWS_CONFIG = "dws-prov", "dws-config"


# --------------------------------------------------------------------------------------------
# Kueue installation
# --------------------------------------------------------------------------------------------


def kueue_helm_values(kueue: KueueSettings, system_pool: str | None, fallback: FallbackSettings | None = None
                      ) -> dict[str, Any]:
    """The chart's values; `fallback` (when enabled) adds Kueue's waitForPodsReady to the manager config."""
    values: dict[str, Any] = load_template("kueue-values.yaml")
    manager = values.setdefault("controllerManager", {})
    manager["featureGates"] = [{"name": name, "enabled": enabled} for name, enabled in kueue.feature_gates]
    manager["nodeSelector"] = {NODEPOOL_LABEL: system_pool} if system_pool else {}
    if kueue.pod_monitoring or (fallback is not None and fallback.enabled):
        values["managerConfig"] = {"controllerManagerConfigYaml": yaml.safe_dump(
            kueue_manager_config(kueue, fallback), sort_keys=False)}
    return values


def wait_for_pods_ready(fallback: FallbackSettings) -> dict[str, Any]:
    """Kueue's waitForPodsReady (config.kueue.x-k8s.io/v1beta2 WaitForPodsReady; present means on), a backstop:
    the fallback controller evicts a job stuck on a stocked-out plan A itself (tpu_fallback/fallback/decide.py),
    and Kueue's timeout applies to every admitted job, plan B included, so it is long.

    - timeout: Kueue's default 30 min, never less than stockoutAfter plus a margin
      (FallbackSettings.pods_ready_timeout);
    - blockAdmission false: other jobs keep being admitted while one waits for its pods;
    - requeuingStrategy.timestamp Creation: a requeued job keeps its place in the queue (BestEffortFIFO);
      backoffLimitCount left out: requeued without limit (a limit deactivates the job once reached);
      backoffBaseSeconds: the first requeue after ~requeueBackoff, doubling (Kueue's default is 60 s).
    """
    return {
        "timeout": f"{fallback.pods_ready_timeout}s",
        "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Creation", "backoffBaseSeconds": fallback.requeue_backoff,
                              "backoffMaxSeconds": 3600},
    }


def kueue_manager_config(kueue: KueueSettings, fallback: FallbackSettings | None = None) -> dict[str, Any]:
    """Kueue's whole manager configuration: the chart's default (templates/kueue-manager-config.yaml, with its
    integrations, RayJob included) plus what this project turns on. The chart replaces the whole file, so it is
    never set partially. With metrics on: ClusterQueue resource metrics (quota use per flavor), off by default."""
    config: dict[str, Any] = load_template("kueue-manager-config.yaml")
    if kueue.pod_monitoring:
        config["metrics"]["enableClusterQueueResources"] = True
    if fallback is not None and fallback.enabled:
        config["waitForPodsReady"] = wait_for_pods_ready(fallback)
    return config


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


# The taint of a spot rung's nodes (components/tpu_pool.py puts it on the pool) and its flavor.
SPOT_TAINT = {"key": SPOT_LABEL, "value": "true", "effect": "NoSchedule"}


def resource_flavor(flavor: Flavor) -> dict[str, Any]:
    """A flavor selecting its pool (a reservation rung's pool is the one consuming the reservation). The queued
    (flex-start) flavors also declare the taint GKE puts on queued-provisioning nodes, so Kueue gives them only to
    jobs that tolerate it (every RayJob but an elastic one, which must stay on plan A); a spot rung's declare its
    pool's spot taint, so only jobs that opt in (`preemptible: true`, which adds the toleration) land there.

    Kueue skips a flavor whose nodeTaints (NoSchedule/NoExecute) the PodSet's tolerations do not tolerate ("untolerated
    taint ... in flavor", kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go) and tries the next one in the
    ClusterQueue's order; it adds no toleration to the pods (spec.tolerations is left empty on purpose)."""
    spec: dict[str, Any] = {"nodeLabels": dict(flavor.node_labels)}
    if flavor.plan == FLEX_START:
        spec["nodeTaints"] = [{"key": QUEUED_LABEL, "value": "true", "effect": "NoSchedule"}]
    elif flavor.plan == SPOT:
        spec["nodeTaints"] = [dict(SPOT_TAINT)]
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": flavor.name}, "spec": spec}


def flavor_taints_reset(flavor: Flavor) -> dict[str, Any]:
    """With the fallback off: the stack takes a closable flavor's `spec.nodeTaints` back to what `resource_flavor`
    declares for it (none for plan A, the spot taint for a spot rung), so a close left behind by a controller that
    was not running when the fallback was turned off (crash looping, unschedulable) goes away with the next
    `pulumi up`. A server-side apply patch forced over the controller's ownership of the (atomic) list; with the
    fallback on, the flavor resource ignores the field."""
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
            # pulumi-kubernetes Patch resources: "Conflicts will result in an error by default, but can be forced
            # using the "pulumi.com/patchForce" annotation" (CustomResourcePatch docstring, 4.25.0).
            "metadata": {"name": flavor.name, "annotations": {"pulumi.com/patchForce": "true"}},
            "spec": {"nodeTaints": resource_flavor(flavor)["spec"].get("nodeTaints", [])}}


def cluster_queue(plan: QueuePlan, admission_checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ClusterQueue; `admission_checks` replaces the dws-prov strategy (MultiKueue managers).

    Quotas go out in the canonical form Kueue's webhook writes back ("10", "1G"): integers would be stored as
    strings and every later `pulumi up` would update the ClusterQueue.
    """
    for flavor in plan.flavors:
        if tuple(flavor.quota) != COVERED_RESOURCES:
            raise ValueError(f"flavor {flavor.name} must list {COVERED_RESOURCES} in order, not {tuple(flavor.quota)}")
    spec: dict[str, Any] = {
        # {} admits every namespace; an absent selector would admit none.
        "namespaceSelector": {"matchLabels": dict(plan.namespace_labels)} if plan.namespace_labels else {},
        "resourceGroups": [{
            "coveredResources": list(COVERED_RESOURCES),
            "flavors": [
                {"name": f.name,
                 "resources": [{"name": r, "nominalQuota": canonical_quantity(f.quota[r])} for r in COVERED_RESOURCES]}
                for f in plan.flavors
            ],
        }],
    }
    checks = admission_checks
    if checks is None and plan.provisioning_check:
        checks = [{"name": DWS_CHECK, "onFlavors": plan.flavors_of(FLEX_START)}]
    if checks:
        names = {f.name for f in plan.flavors}
        for check in checks:
            missing = [f for f in check.get("onFlavors", []) if f not in names]
            if missing:
                raise ValueError(f"admission check {check['name']} refers to missing flavor(s) {missing}")
        spec["admissionChecksStrategy"] = {"admissionChecks": checks}
    return {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": plan.cluster_queue}, "spec": spec}


# How Kueue retries a failed DWS ProvisioningRequest (ProvisioningRequestConfig spec.retryStrategy): without a limit
# in practice, at a capped back-off. docs/dws-failures.md has the whole reasoning; in short:
# - Kueue v0.19.2 (pkg/controller/admissionchecks/provisioning/controller.go:618-633) turns a Failed request into
#   check state Retry (the Workload is evicted, releases its quota and is requeued after the back-off) while the
#   request's attempt number is <= backoffLimitCount, and into Rejected after that, which deactivates the Workload
#   (pkg/controller/core/workload_controller.go:969-990: spec.active=false, Evicted reason
#   DeactivatedDueToAdmissionCheck): the job then stays suspended for good. BookingExpired before admission counts
#   against the same limit (controller.go:642-658). Kueue reads no reason from the Failed condition: every
#   failure, whatever GKE's reason, is retried or rejected alike.
# - Kueue's own default is backoffLimitCount 3, base 60 s, max 1800 s (apis/kueue/v1beta2/
#   provisioningrequestconfig_types.go:77, CRD default), i.e. a job is lost after four failed requests in ~7 min.
# - A queued request waiting for capacity does not fail: DWS keeps it until there is quota and capacity
#   (https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig, "If you lack quota ... or the
#   resources are temporarily unavailable, then the DWS persists the request"). So a Failed request means something
#   else (e.g. "Provisioning Request's pods cannot be scheduled in the nodepool", kubernetes-sigs/kueue#2389), some
#   of it transient. Retrying costs a new ProvisioningRequest per attempt (Kueue deletes the old one on eviction:
#   CleanupProvisioningRequestsOnEviction, beta and on since 0.19, pkg/features/kube_features.go:893) and each
#   requeue scans the flavors from the first again, so a retry may land the job on a rung that has room by then;
#   deactivation loses the job. Hence: retry without limit, and report what keeps failing (the fallback controller).
# - backoffLimitCount is an int32 with no maximum in Kueue v0.19.2's CRD (config/components/crd/bases/
#   kueue.x-k8s.io_provisioningrequestconfigs.yaml; "set retryStrategy.backoffLimitCount to 0" is the only special
#   value, and no value means "unlimited"): its largest value is the nearest to none. The back-off between attempts
#   is base*2^(n-1) capped at backoffMaxSeconds (pkg/workload/admissionchecks.go:230-242): 60, 120, 240, 480, then
#   every 600 s, so a job whose failure has cleared retries within 10 minutes.
# - A CapacityRevoked request still deactivates a running Workload whatever the strategy (controller.go:634-641).
DWS_RETRY_LIMIT = 2**31 - 1  # the CRD's int32 maximum: no limit in practice
DWS_BACKOFF_BASE = 60  # seconds, Kueue's default
DWS_BACKOFF_MAX = 600  # seconds (Kueue's default is 1800)


def dws_retry_strategy() -> dict[str, int]:
    """The ProvisioningRequestConfig's retryStrategy: retry a failed DWS request without limit, at a capped back-off
    (see the comment above DWS_RETRY_LIMIT). All three fields are set: the API server fills in a missing one with
    Kueue's default (a missing backoffLimitCount would be 3 again)."""
    return {"backoffLimitCount": DWS_RETRY_LIMIT, "backoffBaseSeconds": DWS_BACKOFF_BASE,
            "backoffMaxSeconds": DWS_BACKOFF_MAX}


def provisioning_request_config(plan: QueuePlan) -> dict[str, Any]:
    """Plan B's ProvisioningRequests: GKE's queued provisioning for the TPU chips, with the plan's parameters
    (Kueue passes spec.parameters on to each ProvisioningRequest) and a failed request retried without limit
    (dws_retry_strategy)."""
    spec: dict[str, Any] = {"provisioningClassName": "queued-provisioning.gke.io", "managedResources": [TPU_RESOURCE]}
    if plan.provisioning_parameters:
        spec["parameters"] = dict(plan.provisioning_parameters)
    spec["retryStrategy"] = dws_retry_strategy()
    return {"apiVersion": KUEUE_API, "kind": "ProvisioningRequestConfig", "metadata": {"name": DWS_CONFIG},
            "spec": spec}


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
MULTIKUEUE_ACCOUNT = "multikueue-sa"
KUEUE_METRICS_PORT = 8443  # Kueue 0.19's controller serves metrics over HTTPS on :8443

# What the manager's Kueue may do on a worker: the rules of Kueue v0.19.2's create-multikueue-kubeconfig.sh
# (site/static/examples/multikueue/) for the job kinds this project dispatches - batch Jobs and Ray - and for
# Kueue's own objects. Without update/patch on workloads the manager cannot sync a changed priority (seen on
# two real control planes: "cannot update resource workloads"); the script's other kinds (pods, StatefulSets,
# JobSets, LeaderWorkerSets, Kubeflow jobs, AppWrappers) are left out: nothing here submits them.
_CREATE_OBSERVE = ["create", "delete", "get", "list", "watch"]
MULTIKUEUE_WORKER_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _CREATE_OBSERVE},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": [*_CREATE_OBSERVE, "update", "patch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": _CREATE_OBSERVE},
    {"apiGroups": ["ray.io"], "resources": ["rayjobs/status"], "verbs": ["get"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": [*_CREATE_OBSERVE, "update", "patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters/status"], "verbs": ["get"]},
]


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


def no_tpu_quota(namespace: str) -> dict[str, Any]:
    """A ResourceQuota allowing no TPU requests: for the MultiKueue manager's job namespaces (Kubernetes quotas
    extended resources as requests.<name>)."""
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-tpu", "namespace": namespace},
            "spec": {"hard": {f"requests.{TPU_RESOURCE}": "0"}}}


def multikueue_admission_check() -> dict[str, Any]:
    return admission_check(MULTIKUEUE_CHECK, "kueue.x-k8s.io/multikueue", "MultiKueueConfig", MULTIKUEUE_CONFIG)


# Who may read Kueue's metrics: the chart's ClusterRole "<fullname>-metrics-reader" (charts/kueue
# templates/rbac/metrics_reader_role.yaml: get on /metrics); fullname is the release name "kueue".
KUEUE_METRICS_READER_ROLE = "kueue-metrics-reader"
METRICS_SCRAPER = "kueue-metrics-scraper"
# Managed Service for Prometheus scrapes as the ServiceAccount gmp-system/collector, which may read only the
# Secrets a Role grants it (prometheus-engine examples/instrumentation/go-synthetic/go-synthetic-basic-auth.yaml).
GMP_COLLECTOR = {"kind": "ServiceAccount", "name": "collector", "namespace": "gmp-system"}


def kueue_metrics_access() -> list[dict[str, Any]]:
    """A ServiceAccount bound to Kueue's metrics-reader role, its token Secret, and read access to that Secret for
    the GMP collector: Kueue 0.19 serves :8443 behind Kubernetes authn/authz, and the collector has no token of
    its own for it. The PodMonitoring (kueue_pod_monitoring) sends this token."""
    meta = {"name": METRICS_SCRAPER, "namespace": KUEUE_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": METRICS_SCRAPER},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUEUE_METRICS_READER_ROLE},
         "subjects": [{"kind": "ServiceAccount", **meta}]},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {**meta, "annotations": {"kubernetes.io/service-account.name": METRICS_SCRAPER}}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [METRICS_SCRAPER],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": METRICS_SCRAPER},
         "subjects": [dict(GMP_COLLECTOR)]},
    ]


def kueue_pod_monitoring() -> dict[str, Any]:
    """Managed Service for Prometheus scrapes Kueue's controller over HTTPS (self-signed) with the scraper's token.

    PodMonitoring (monitoring.googleapis.com/v1) endpoints take `authorization.credentials.secret`, which must
    be in the PodMonitoring's own namespace (prometheus-engine pkg/operator/apis/monitoring/v1/http_types.go).
    """
    return {
        "apiVersion": "monitoring.googleapis.com/v1",
        "kind": "PodMonitoring",
        "metadata": {"name": "kueue-controller-metrics", "namespace": KUEUE_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"control-plane": "controller-manager", "app.kubernetes.io/name": "kueue"}},
            "endpoints": [{
                "port": KUEUE_METRICS_PORT, "scheme": "https", "interval": "30s",
                "tls": {"insecureSkipVerify": True},
                "authorization": {"type": "Bearer",
                                  "credentials": {"secret": {"name": METRICS_SCRAPER, "key": "token"}}},
            }],
        },
    }
