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


# Which input changes make the provider replace a resource, field by field, as the provider decides it. pulumi-gcp is
# terraform-provider-google-beta bridged (no container overrides in pulumi-gcp's provider/resources.go), and the bridge
# replaces a resource when the Terraform plan marks an attribute RequiresNew, i.e. for a ForceNew field (or a
# CustomizeDiff ForceNewIfChange; none applies to a field set here). Read in hashicorp/terraform-provider-google-beta at
# 93c65b2 (main after the 8.0.0 merge, 2026-08-21; pulumi-gcp 10.2.0's SDK has docstrings first seen there, so it wraps
# >= 8.0.0; the newest pulumi-gcp in the mirror, v9.35.0, wraps v7.45.0, and these fields are the same in both).
# Listed: the fields this project sets that force a new resource, and a few it may set next (issue 28 item 8). A field
# not listed here is updated in place. A ForceNew block (a Terraform list of one object) forces a new resource only when
# it appears or disappears (helper/schema diffList gives the block's ForceNew to its "#" count only); its fields go by
# their own ForceNew: those blocks are in FORCED_WHEN_ADDED_OR_REMOVED.
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
RESOURCE_POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
FORCES_REPLACEMENT: dict[str, tuple[str, ...]] = {
    # google-beta/services/container/resource_container_node_pool.go (schemaNodePool) and node_config.go
    # (schemaNodeConfig) @93c65b2. Updated in place there: autoscaling.*, management.*, nodeCount, upgradeSettings.*,
    # networkConfig.enablePrivateNodes, nodeConfig.{machineType, diskSizeGb, diskType, bootDisk, gvnic, labels, taints,
    # gcfsConfig, workloadMetadataConfig, imageType}.
    NODE_POOL: (
        "name", "cluster", "location", "project", "initialNodeCount", "maxPodsPerNode", "placementPolicy.policyName",
        "queuedProvisioning.enabled", "nodeConfig.serviceAccount", "nodeConfig.oauthScopes", "nodeConfig.spot",
        "nodeConfig.preemptible", "nodeConfig.flexStart", "nodeConfig.maxRunDuration", "nodeConfig.metadata",
        "nodeConfig.guestAccelerators", "nodeConfig.reservationAffinity.consumeReservationType",
        "nodeConfig.reservationAffinity.key", "nodeConfig.reservationAffinity.values",
        "nodeConfig.shieldedInstanceConfig.enableSecureBoot",
        "nodeConfig.shieldedInstanceConfig.enableIntegrityMonitoring",
    ),
    # google-beta/services/container/resource_container_cluster.go @93c65b2. privateClusterConfig.enablePrivateNodes
    # is no longer ForceNew since v7.13.0 (b7ffcce "Remove ForceNew for enablePrivateNodes"): it is sent as
    # desiredDefaultEnablePrivateNodes; enablePrivateEndpoint and masterGlobalAccessConfig go in place through
    # desiredControlPlaneEndpointsConfig, as do masterAuthorizedNetworksConfig.*. Also in place: minMasterVersion,
    # releaseChannel, addonsConfig, maintenancePolicy, monitoringConfig, workloadIdentityConfig, enableShieldedNodes,
    # nodePoolDefaults, removeDefaultNodePool, clusterAutoscaling (bar its bootDiskKmsKey), deletionProtection.
    CLUSTER: (
        "name", "location", "project", "network", "subnetwork", "enableAutopilot", "initialNodeCount",
        "privateClusterConfig.masterIpv4CidrBlock", "privateClusterConfig.privateEndpointSubnetwork",
        "nodeConfig.serviceAccount", "nodeConfig.oauthScopes", "nodeConfig.spot", "nodeConfig.preemptible",
        "nodeConfig.shieldedInstanceConfig.enableSecureBoot",
        "nodeConfig.shieldedInstanceConfig.enableIntegrityMonitoring",
        "clusterAutoscaling.autoProvisioningDefaults.bootDiskKmsKey",
    ),
    # google-beta/services/resourcemanager/resource_google_service_account.go @93c65b2 (displayName in place)
    "gcp:serviceaccount/account:Account": ("accountId", "project"),
    # google-beta/tpgiamresource/resource_iam_member.go and services/resourcemanager/iam_project.go @93c65b2
    "gcp:projects/iAMMember:IAMMember": ("project", "role", "member", "condition"),
    # google-beta/services/resourcemanager/resource_google_project_service.go @93c65b2 (disable* in place)
    "gcp:projects/service:Service": ("project", "service"),
    # google-beta/services/compute/resource_compute_router.go @93c65b2
    "gcp:compute/router:Router": ("name", "region", "project", "network"),
    # google-beta/services/compute/resource_compute_address.go @93c65b2
    "gcp:compute/address:Address": ("name", "region", "project", "addressType", "network"),
    # google-beta/services/compute/resource_compute_router_nat.go @93c65b2 (natIps, natIpAllocateOption,
    # sourceSubnetworkIpRangesToNat and logConfig in place)
    "gcp:compute/routerNat:RouterNat": ("name", "router", "region", "project"),
    # google-beta/services/monitoring/resource_monitoring_dashboard.go @93c65b2 (dashboardJson in place)
    "gcp:monitoring/dashboard:Dashboard": ("project",),
    # google-beta/services/compute/resource_compute_resource_policy.go @93c65b2: TPU7x's workload policy. Every field
    # of workload_policy is ForceNew (the block itself is not), as are region and project; name is not.
    RESOURCE_POLICY: ("project", "region", "workloadPolicy.type", "workloadPolicy.acceleratorTopology",
                      "workloadPolicy.acceleratorTopologyMode", "workloadPolicy.maxTopologyDistance"),
}

# ForceNew blocks whose own fields are not all ForceNew: adding or removing the block replaces the resource, changing a
# field inside it does not (unless that field is in FORCES_REPLACEMENT). Same source lines as above.
FORCED_WHEN_ADDED_OR_REMOVED: dict[str, tuple[str, ...]] = {
    NODE_POOL: ("nodeConfig", "placementPolicy", "queuedProvisioning", "nodeConfig.reservationAffinity",
                "nodeConfig.shieldedInstanceConfig"),
    CLUSTER: ("nodeConfig", "nodeConfig.reservationAffinity", "nodeConfig.shieldedInstanceConfig"),
}

# Fields that are neither ForceNew nor sent by the provider's update: placement_policy.type and .tpu_topology are plain
# Optional/Required fields of a ForceNew block, and resourceContainerNodePoolUpdate (nodePoolUpdate) has no
# placement_policy branch (resource_container_node_pool.go @93c65b2). Changing one plans an in-place update that leaves
# the live pool as it was; only replaceOnChanges on the program's side turns it into the new pool it needs.
NOT_UPDATED_IN_PLACE: dict[str, tuple[str, ...]] = {
    NODE_POOL: ("placementPolicy.type", "placementPolicy.tpuTopology"),
}

REPLACES_NOTE = "  # changing it REPLACES the resource"
NEEDS_REPLACE_ON_CHANGES_NOTE = (
    "  # changing it REPLACES the resource only through replaceOnChanges, which is not set: the provider neither"
    " updates it in place nor replaces the resource for it")
IGNORED_NOTE = "  # ignored after creation (ignore_changes)"


def _under(key: str, fields: tuple[str, ...] | list[str]) -> bool:
    """`key` (a flattened input: dots and [i]) is one of `fields` or inside one of them."""
    return any(key == f or key.startswith((f"{f}.", f"{f}[")) for f in fields)


def has_block(keys: set[str], block: str) -> bool:
    """Some flattened input key lies in `block`: the resource has that block."""
    return any(_under(k, (block,)) for k in keys)


def block_added_or_removed(resource_type: str, key: str, before: set[str], after: set[str]) -> str | None:
    """The ForceNew block `key` lies in that one side has and the other has not (so the provider replaces the resource),
    given the flattened input keys before and after; None when there is none."""
    for block in FORCED_WHEN_ADDED_OR_REMOVED.get(resource_type, ()):
        if _under(key, (block,)) and has_block(before, block) != has_block(after, block):
            return block
    return None


def needs_replace_on_changes(resource: RecordedResource, key: str) -> bool:
    """A change of `key` can only take effect on a new resource, and the program does not ask for one."""
    top = key.split("[")[0]
    return (_under(top, NOT_UPDATED_IN_PLACE.get(resource.type, ()))
            and not _under(top, resource.options.get("replaceOnChanges", [])))


def replacement_note(resource: RecordedResource, key: str) -> str:
    top = key.split("[")[0]
    if _under(top, resource.options.get("ignoreChanges", [])):
        return IGNORED_NOTE
    forcing = FORCES_REPLACEMENT.get(resource.type, ()) + tuple(resource.options.get("replaceOnChanges", []))
    if _under(key, forcing) or _under(top, forcing):
        return REPLACES_NOTE
    if needs_replace_on_changes(resource, key):
        return NEEDS_REPLACE_ON_CHANGES_NOTE
    return ""
