"""The fallback controller's Kubernetes objects as plain dicts: config, source ConfigMap, RBAC, Deployment.

What the controller does is in tpu_fallback/fallback/decide.py; Kueue's half (waitForPodsReady) is
render/kueue.py's wait_for_pods_ready. Pure Python.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tpu_fallback.model.capacity import FLEX_START, ON_DEMAND
from tpu_fallback.model.labels import NODEPOOL_LABEL
from tpu_fallback.model.queues import QueuePlan
from tpu_fallback.model.settings import FallbackSettings
from tpu_fallback.render.files import controller_sources
from tpu_fallback.render.kueue import KUEUE_NAMESPACE

NAME = "tpu-fallback-controller"
NAMESPACE = KUEUE_NAMESPACE
TAINT_KEY = "tpu-fallback.dev/plan-a-stockout"
METRICS_PORT = 9090
MOUNT = "/opt/tpu-fallback"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "tpu-fallback"}


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
        "pollSeconds": fallback.poll_interval,
        "taintKey": TAINT_KEY,
        "metricsPort": METRICS_PORT,
        "reverseMove": fallback.reverse_move,
        "deployment": f"{NAMESPACE}/{NAME}",
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
    """Read its own Deployment, and nothing else in the namespace: on SIGTERM the controller reopens plan A if the
    Deployment is being deleted or scaled to zero (controller.Controller.release_if_removed)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [NAME], "verbs": ["get"]}],
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


def deployment(plan: QueuePlan, fallback: FallbackSettings, system_pool: str | None) -> dict[str, Any]:
    """One replica, replaced with Recreate (never two at once), on the system pool, non-root, read-only."""
    configmap = config_map(plan, fallback)
    # A new config or source changes the pod template, so the pod restarts with it (a ConfigMap alone does not).
    checksum = hashlib.sha256(json.dumps(configmap["data"], sort_keys=True).encode()).hexdigest()[:16]
    items = [{"key": "config.json", "path": "config.json"}] + [
        {"key": _key(path), "path": f"tpu_fallback/{path}"} for path in sorted(controller_sources())]
    container = {
        "name": "controller",
        "image": fallback.image,
        "command": ["python3", "-m", "tpu_fallback.fallback", "--config", f"{MOUNT}/config.json"],
        "env": [{"name": "PYTHONPATH", "value": MOUNT}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        # /healthz fails when no reconcile pass has finished for a while (the loop is stuck).
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 30,
                          "periodSeconds": 30, "failureThreshold": 3},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
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
                "metadata": {"labels": dict(LABELS), "annotations": {"tpu-fallback.dev/config-checksum": checksum}},
                "spec": {
                    "serviceAccountName": NAME,
                    "nodeSelector": {NODEPOOL_LABEL: system_pool} if system_pool else {},
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "controller", "configMap": {"name": NAME, "items": items}}],
                },
            },
        },
    }
