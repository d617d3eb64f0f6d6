"""The fallback controller's Kubernetes objects as plain dicts: config, source ConfigMap, RBAC, Deployment, its
PriorityClass, the sweeper CronJob (and its own RBAC) and the PodMonitoring of its metrics.

What the controller does is in tpu_fallback/fallback/decide.py; Kueue's half (waitForPodsReady) is
render/kueue.py's wait_for_pods_ready. Pure Python.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tpu_fallback.fallback.decide import TAINT_KEY
from tpu_fallback.fallback.lease import DURATION as LEASE_DURATION
from tpu_fallback.model.capacity import FLEX_START, ON_DEMAND
from tpu_fallback.model.labels import NODEPOOL_LABEL
from tpu_fallback.model.queues import QueuePlan
from tpu_fallback.model.settings import FallbackSettings
from tpu_fallback.render.files import controller_sources
from tpu_fallback.render.kueue import KUEUE_NAMESPACE

NAME = "tpu-fallback-controller"
NAMESPACE = KUEUE_NAMESPACE
METRICS_PORT = 9090
MOUNT = "/opt/tpu-fallback"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "tpu-fallback"}
SWEEPER = "tpu-fallback-sweeper"  # its CronJob, ServiceAccount, roles and bindings
SWEEPER_LABELS = {"app.kubernetes.io/name": SWEEPER, "app.kubernetes.io/part-of": "tpu-fallback"}
# The way out after SIGTERM: the loop's pass in progress, then reopening every closed flavor (a GET and a PUT each)
# and queueing again the Workloads it deactivated (a LIST and a PATCH each), each call bounded by the client's 30 s
# timeout. 60 s leaves room for that on a slow API server; the default 30 s did not.
TERMINATION_GRACE_SECONDS = 60
# Above every workload the stack or a user runs on the system pool (Ray heads, submitters: priority 0 unless
# they say otherwise), so the controller is scheduled first and may preempt one of them when the pool is full
# (preemptionPolicy PreemptLowerPriority), and is evicted last under node pressure. Below the 1e9 ceiling of
# user-defined classes (kubernetes pkg/apis/scheduling/types.go@v1.36.3 HighestUserDefinablePriority) with room for
# an admin's own infrastructure classes. Not `system-cluster-critical`: upstream allows it in any namespace, but
# GKE limits its use with a ResourceQuota that exists only in kube-system (gcp-critical-pods; the ResourceQuota
# admission plugin's limitedResources, https://kubernetes.io/docs/concepts/policy/resource-quotas/
# #limit-priority-class-consumption-by-default), so a pod using it in kueue-system is refused with "insufficient
# quota to match these scopes" (seen in openservicemesh/osm#4408, fluxcd/terraform-provider-flux#470).
PRIORITY_CLASS = NAME
PRIORITY = 100_000_000
# The sweeper: every minute, never two at once, a run that cannot start within a minute skipped (the next one
# comes), at most 50 s each, a short history (https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/:
# the CronJob controller stops creating Jobs after more than 100 missed schedules unless startingDeadlineSeconds
# bounds the count).
SWEEP_SCHEDULE = "* * * * *"
SWEEP_STARTING_DEADLINE = 60
SWEEP_ACTIVE_DEADLINE = 50


def controller_config(plan: QueuePlan, fallback: FallbackSettings) -> dict[str, Any]:
    """config.json (read by tpu_fallback/fallback/config.py Settings.from_file).

    Today's two plans keep their keys (planAFlavors, planBFlavors, planANodeSelector; planAReserved when plan A
    consumes a specific reservation), so their ConfigMap does not change; a `ladder` stack's rungs go out as
    "rungs", most preferred first, each with its flavors, whether it is the queued rung (never closed), whether it
    is a reservation's (`reserved`: moved to without a Ready node, since its pool may autoscale from zero while its
    capacity is held) and a selector of its pools' nodes."""
    if plan.ladder.explicit:
        rungs: dict[str, Any] = {"rungs": [rung_config(plan, rung.name, rung.queued, rung.reserved)
                                           for rung in plan.ladder.rungs]}
    else:
        # planAReserved only when plan A consumes a specific reservation (onDemand.reservation), so the other
        # stacks' ConfigMap stays as it was.
        reserved = any(r.reserved for r in plan.ladder.of_kind(ON_DEMAND))
        rungs = {"planAFlavors": plan.flavors_of(ON_DEMAND), "planBFlavors": plan.flavors_of(FLEX_START),
                 **({"planANodeSelector": selector} if (selector := plan_a_node_selector(plan)) else {}),
                 **({"planAReserved": True} if reserved else {})}
    return {
        **rungs,
        "stockoutAfterSeconds": fallback.stockout_after,
        "coolDownSeconds": fallback.cool_down,
        "pollIntervalSeconds": fallback.poll_interval,
        "taintKey": TAINT_KEY,
        "metricsPort": METRICS_PORT,
        "moveBack": fallback.move_back,
        "deployment": f"{NAMESPACE}/{NAME}",
        # One acting replica (fallback/lease.py); the sweeper reads it too: a live holder keeps it from acting.
        "lease": {"namespace": NAMESPACE, "name": NAME, "durationSeconds": LEASE_DURATION},
    }


def rung_config(plan: QueuePlan, rung: str, queued: bool, reserved: bool = False) -> dict[str, Any]:
    """One rung of config.json's "rungs" (the interface controller.parse_rungs reads); `reserved` only when true,
    so the other rungs' entries stay as they were."""
    flavors = [f for f in plan.flavors if f.rung == rung]
    selector = node_selector([f.node_labels for f in flavors])
    return {"name": rung, "flavors": [f.name for f in flavors], "queued": queued,
            **({"reserved": True} if reserved else {}), **({"nodeSelector": selector} if selector else {})}


def plan_a_node_selector(plan: QueuePlan) -> str | None:
    """A label selector for the nodes of plan A's pools, the only nodes the controller decides from (a Ready node
    there reopens plan A, or lets a job move back)."""
    return node_selector([f.node_labels for f in plan.flavors if f.plan == ON_DEMAND])


def node_selector(labels: list[dict[str, str]]) -> str | None:
    """`<key> in (<value>, ...)` when every flavor selects its pool by one label of the same key, as queue plans do;
    None (every node read) otherwise."""
    keys = {key for one in labels for key in one}
    if not labels or len(keys) != 1 or any(len(one) != 1 for one in labels):
        return None
    (key,) = keys
    return f"{key} in ({','.join(sorted({one[key] for one in labels}))})"


def _key(path: str) -> str:
    """A ConfigMap key for a source path (keys allow no "/")."""
    return "src." + path.replace("/", ".")


def config_map(plan: QueuePlan, fallback: FallbackSettings) -> dict[str, Any]:
    data = {"config.json": json.dumps(controller_config(plan, fallback), indent=2, sort_keys=True) + "\n"}
    data.update({_key(path): text for path, text in controller_sources().items()})
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)}, "data": data}


def cluster_role(plan: QueuePlan) -> dict[str, Any]:
    """Least privilege: read (list and watch: the controller's informers) what it decides from; patch only the
    closable rungs' flavors (plan A's; their taint) and Workloads (spec.active and two annotations for a move);
    create Events. No create or delete of any Kueue object."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": NAME, "labels": dict(LABELS)},
        "rules": [
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors", "clusterqueues"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"],
             "resourceNames": plan.closable_flavors, "verbs": ["get", "update"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "watch", "patch"]},
            # Requeued True on a Workload Kueue deactivated and the controller reactivated (decide.MarkRequeued).
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "patch"]},
            {"apiGroups": ["autoscaling.x-k8s.io"], "resources": ["provisioningrequests"],
             "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
            # A RayJob's pods name their RayCluster, owned by the RayJob: how a pod's job is found.
            {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list", "watch"]},
            # Pending pods and GKE's autoscaler Events on them: the evidence of a stock-out (controller.PodEvidence).
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list", "watch"]},
        ],
    }


def deployment_role() -> dict[str, Any]:
    """Read its own Deployment: on SIGTERM the controller reopens plan A if the Deployment is being deleted or
    scaled to zero (controller.Controller.release_unless_restarted); and hold its Lease (get and update it by name;
    create cannot be limited to a name, RBAC checks no resourceName on create:
    https://kubernetes.io/docs/reference/access-authn-authz/rbac/#referring-to-resources). Nothing else in the
    namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [NAME], "verbs": ["get"]},
                  {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [NAME],
                   "verbs": ["get", "update"]},
                  {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}],
    }


def deployment_role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }


def service_account() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)}}


def cluster_role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME, "labels": dict(LABELS)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }


def _checksum(plan: QueuePlan, fallback: FallbackSettings) -> str:
    """Of the ConfigMap's data: a new config or source changes the pod template, so the pod restarts with it (a
    ConfigMap alone does not)."""
    return hashlib.sha256(json.dumps(config_map(plan, fallback)["data"], sort_keys=True).encode()).hexdigest()[:16]


def _mounted() -> dict[str, Any]:
    """The ConfigMap as the controller's and the sweeper's pods mount it: config.json and the sources."""
    items = [{"key": "config.json", "path": "config.json"}] + [
        {"key": _key(path), "path": f"tpu_fallback/{path}"} for path in sorted(controller_sources())]
    return {"name": "controller", "configMap": {"name": NAME, "items": items}}


_ENV = [{"name": "PYTHONPATH", "value": MOUNT}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"}]
_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                       "capabilities": {"drop": ["ALL"]}}
_POD_SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                 "seccompProfile": {"type": "RuntimeDefault"}}


def priority_class() -> dict[str, Any]:
    """The controller's and the sweeper's priority (see PRIORITY)."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS, "labels": dict(LABELS)},
            "value": PRIORITY, "preemptionPolicy": "PreemptLowerPriority", "globalDefault": False,
            "description": "The TPU fallback controller and its sweeper: scheduled before the jobs' CPU pods on the "
                           "system pool, so a full pool never leaves plan A closed or a job deactivated."}


def deployment(plan: QueuePlan, fallback: FallbackSettings, system_pool: str | None) -> dict[str, Any]:
    """One replica, replaced with Recreate, on the system pool, non-root, read-only. Only the holder of the Lease
    acts, so `replicas: 2` (a standby that takes over within the lease's 15 s) is safe too; one is the default."""
    container = {
        "name": "controller",
        "image": fallback.image,
        "command": ["python3", "-m", "tpu_fallback.fallback", "--config", f"{MOUNT}/config.json"],
        # POD_NAME: the Lease's holderIdentity (the same pod's restarted container takes its lease back at once).
        "env": [*_ENV, {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        # /healthz fails when no reconcile pass has finished for a while (the loop is stuck).
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 30,
                          "periodSeconds": 30, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": dict(_CONTAINER_SECURITY),
        "volumeMounts": [{"name": "controller", "mountPath": MOUNT, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": dict(LABELS),
                             "annotations": {"tpu-fallback.dev/config-checksum": _checksum(plan, fallback)}},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": PRIORITY_CLASS,
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    "nodeSelector": {NODEPOOL_LABEL: system_pool} if system_pool else {},
                    "securityContext": dict(_POD_SECURITY),
                    "containers": [container],
                    "volumes": [_mounted()],
                },
            },
        },
    }


# --- the sweeper: what a controller that is not running left behind is undone on a schedule ---------------------


def sweeper_cluster_role(plan: QueuePlan) -> dict[str, Any]:
    """Less than the controller's: reopen the closable flavors (get and update by name), queue Workloads again
    (list and patch), write Events. It watches nothing and reads no pod, node or Event."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": SWEEPER, "labels": dict(SWEEPER_LABELS)},
        "rules": [
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"],
             "resourceNames": plan.closable_flavors, "verbs": ["get", "update"]},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["list", "patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        ],
    }


def sweeper_role() -> dict[str, Any]:
    """Read the controller's Lease (by name) in its namespace: a live holder means the controller does the work."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": SWEEPER, "namespace": NAMESPACE, "labels": dict(SWEEPER_LABELS)},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [NAME],
                   "verbs": ["get"]}],
    }


def sweeper_access() -> list[dict[str, Any]]:
    """The sweeper's ServiceAccount and the bindings of its two roles."""
    subject = [{"kind": "ServiceAccount", "name": SWEEPER, "namespace": NAMESPACE}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SWEEPER, "namespace": NAMESPACE, "labels": dict(SWEEPER_LABELS)}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": SWEEPER, "labels": dict(SWEEPER_LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SWEEPER},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": SWEEPER, "namespace": NAMESPACE, "labels": dict(SWEEPER_LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SWEEPER},
         "subjects": subject},
    ]


def sweeper_cron_job(plan: QueuePlan, fallback: FallbackSettings, system_pool: str | None) -> dict[str, Any]:
    """`python -m tpu_fallback.fallback --sweep` every minute (fallback/sweep.py), from the controller's image and
    ConfigMap: no close and no deactivated job outlives a controller that is not running (crash looping, killed
    and unable to start again), since this needs only Kubernetes' CronJob controller."""
    container = {
        "name": "sweeper",
        "image": fallback.image,
        "command": ["python3", "-m", "tpu_fallback.fallback", "--config", f"{MOUNT}/config.json", "--sweep"],
        "env": list(_ENV),
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": dict(_CONTAINER_SECURITY),
        "volumeMounts": [{"name": "controller", "mountPath": MOUNT, "readOnly": True}],
    }
    return {
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": SWEEPER, "namespace": NAMESPACE, "labels": dict(SWEEPER_LABELS)},
        "spec": {
            "schedule": SWEEP_SCHEDULE,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": SWEEP_STARTING_DEADLINE,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": dict(SWEEPER_LABELS)},
                "spec": {
                    "activeDeadlineSeconds": SWEEP_ACTIVE_DEADLINE,
                    "backoffLimit": 0,  # a failed sweep is not retried: the next minute's sweeps again
                    "template": {
                        "metadata": {"labels": dict(SWEEPER_LABELS),
                                     "annotations": {"tpu-fallback.dev/config-checksum": _checksum(plan, fallback)}},
                        "spec": {
                            "serviceAccountName": SWEEPER,
                            "restartPolicy": "Never",
                            "priorityClassName": PRIORITY_CLASS,
                            "nodeSelector": {NODEPOOL_LABEL: system_pool} if system_pool else {},
                            "securityContext": dict(_POD_SECURITY),
                            "containers": [container],
                            "volumes": [_mounted()],
                        },
                    },
                },
            },
        },
    }


def pod_monitoring() -> dict[str, Any]:
    """Managed Service for Prometheus scrapes the controller's /metrics (plain HTTP on the `metrics` port, no
    token: it serves nothing but the counters). Only the controller's pods, not the sweeper's (another name)."""
    return {
        "apiVersion": "monitoring.googleapis.com/v1", "kind": "PodMonitoring",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                 "endpoints": [{"port": "metrics", "interval": "30s"}]},
    }
