"""The MultiKueue manager's access to a worker, scoped, and the worker connection the stack waits for. Pure Python.

Kueue's documented worker RBAC (v0.19.2 site/static/examples/multikueue/create-multikueue-kubeconfig.sh, which
render/kueue.py's MULTIKUEUE_WORKER_RULES follow for the kinds this project dispatches) is one ClusterRole bound
cluster-wide: with it the worker token could create Jobs or RayClusters, and so pods, in any namespace, kube-system
included. Here only reading stays cluster-wide (the manager's Kueue LISTs and WATCHes Workloads and the job kinds
across the worker, before knowing any namespace); every write is granted by a RoleBinding in the job namespaces
only. tests/e2e/test_multikueue_e2e.py runs a RayJob through the manager with exactly these objects and reads the
worker's audit log for refusals.
"""

from __future__ import annotations

from typing import Any

from tpu_fallback.render.kueue import MULTIKUEUE_ACCOUNT, MULTIKUEUE_WORKER_RULES

READ_VERBS = ("get", "list", "watch")
READ_ROLE = f"{MULTIKUEUE_ACCOUNT}-role"  # the ClusterRole's name as before: cluster-wide, reads only
WRITE_ROLE = f"{MULTIKUEUE_ACCOUNT}-write"  # bound in the job namespaces only
RBAC_API = "rbac.authorization.k8s.io"
# What `pulumi up` waits for on each MultiKueueCluster: Kueue's Active condition True, i.e. the manager reached the
# worker's API server with the kubeconfig (pulumi-kubernetes 4.18+ "pulumi.com/waitFor", kubectl-wait syntax). A
# worker the manager cannot reach (authorized networks, a private endpoint, a wrong token) fails the update with
# the cluster's name after WAIT_SECONDS instead of leaving jobs waiting on the manager unnoticed.
WAIT_FOR = "condition=Active"
WAIT_SECONDS = 600


def _split(read: bool) -> list[dict[str, list[str]]]:
    rules = []
    for rule in MULTIKUEUE_WORKER_RULES:
        verbs = [v for v in rule["verbs"] if (v in READ_VERBS) is read]
        if verbs:
            rules.append({**rule, "verbs": verbs})
    return rules


def worker_read_rules() -> list[dict[str, list[str]]]:
    """Every verb of Kueue's worker rules that only reads, cluster-wide."""
    return _split(read=True)


def worker_write_rules() -> list[dict[str, list[str]]]:
    """Every verb of Kueue's worker rules that writes, for the job namespaces' RoleBindings."""
    return _split(read=False)


def write_role_binding(namespace: str, account_namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_API}/v1", "kind": "RoleBinding",
        "metadata": {"name": WRITE_ROLE, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": WRITE_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": MULTIKUEUE_ACCOUNT, "namespace": account_namespace}],
    }


def awaited(cluster: dict[str, Any]) -> dict[str, Any]:
    """A MultiKueueCluster that `pulumi up` waits for until it is Active."""
    meta = cluster["metadata"]
    return {**cluster, "metadata": {**meta, "annotations": {
        **meta.get("annotations", {}), "pulumi.com/waitFor": WAIT_FOR, "pulumi.com/timeoutSeconds": str(WAIT_SECONDS)}}}
