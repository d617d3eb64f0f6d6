"""A resource's inputs as the offline plan shows them: secrets masked, nested values flattened to dotted keys, and
which keys the provider replaces the resource for. Shared by the plan's summary and its compare mode."""

from __future__ import annotations

from typing import Any

from tpu_fallback.offline.mockrun import SECRET_PLACEHOLDER, RecordedResource


def mask(value: Any, secret_paths: list[str], path: str = "") -> Any:
    if path in secret_paths or (not path and "." in secret_paths):
        return SECRET_PLACEHOLDER
    if isinstance(value, dict):
        return {k: mask(v, secret_paths, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, secret_paths, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        rows: list[tuple[str, Any]] = []
        for k, v in value.items():
            rows.extend(flatten(v, f"{prefix}.{k}" if prefix else k))
        return rows
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        rows = []
        for i, v in enumerate(value):
            rows.extend(flatten(v, f"{prefix}[{i}]"))
        return rows
    return [(prefix, value)]


# Inputs whose change makes the provider replace the resource (pulumi-gcp = terraform-provider-google:
# ForceNew in google/services/container/resource_container_node_pool.go, node_config.go and
# resource_container_cluster.go). A reviewer must not miss a change to these on a running TPU pool or cluster.
# placementPolicy is flagged whole: the block is ForceNew, and a new tpuTopology needs a new pool in any case.
FORCES_REPLACEMENT: dict[str, tuple[str, ...]] = {
    "gcp:container/nodePool:NodePool": (
        "name", "cluster", "location", "project", "initialNodeCount", "maxPodsPerNode", "placementPolicy",
        "queuedProvisioning", "nodeConfig.reservationAffinity", "nodeConfig.flexStart", "nodeConfig.maxRunDuration",
        "nodeConfig.shieldedInstanceConfig", "nodeConfig.serviceAccount", "nodeConfig.oauthScopes",
        "nodeConfig.spot", "nodeConfig.preemptible", "nodeConfig.guestAccelerators", "nodeConfig.metadata",
    ),
    "gcp:container/cluster:Cluster": (
        "name", "location", "project", "network", "subnetwork", "enableAutopilot", "privateClusterConfig",
        "initialNodeCount",
    ),
    "gcp:serviceaccount/account:Account": ("accountId", "project"),
}


def replacement_note(resource: RecordedResource, key: str) -> str:
    top = key.split("[")[0]
    if any(top == i or top.startswith(f"{i}.") for i in resource.options.get("ignoreChanges", [])):
        return "  # ignored after creation (ignore_changes)"
    forcing = FORCES_REPLACEMENT.get(resource.type, ()) + tuple(resource.options.get("replaceOnChanges", []))
    if any(top == f or top.startswith(f"{f}.") for f in forcing):
        return "  # changing it REPLACES the resource"
    return ""
