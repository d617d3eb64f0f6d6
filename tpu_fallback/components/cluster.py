"""GkeCluster: the zonal Standard cluster, its node service account, the CPU system pool and a provider."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from tpu_fallback.model.labels import ROLE_LABEL
from tpu_fallback.model.settings import MaintenanceSettings, NetworkSettings, SystemPoolSettings
from tpu_fallback.render.kubeconfig import gke_exec_kubeconfig

# The minimal roles of a node service account (GKE hardening guide), image pulls from Artifact Registry, and
# serviceusage.services.use, which image streaming needs with a custom node service account (GKE "Use Image
# streaming", requirements; terraform-google-kubernetes-engine #2251 / #2262).
NODE_SERVICE_ACCOUNT_ROLES = (
    "roles/container.defaultNodeServiceAccount",
    "roles/artifactregistry.reader",
    "roles/serviceusage.serviceUsageConsumer",
)
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True)
class GkeClusterArgs:
    project: str
    cluster_name: str
    location: str
    gke_version: str
    system_pool: SystemPoolSettings | None  # None: no CPU pool (Autopilot provisions nodes itself)
    deletion_protection: bool
    node_account_id: str  # unique among the stack's clusters (settings.node_account_ids)
    protect: bool = False
    autopilot: bool = False  # a MultiKueue manager runs no TPU work: Autopilot suits it
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    apis: Sequence[pulumi.Resource] = ()  # the enabled Google APIs everything here waits for
    # Managed Service for Prometheus, on where the stack renders PodMonitoring objects (kueue.podMonitoring): on by
    # default only for clusters created on GKE 1.27 or later and it can be turned off, and without it the
    # PodMonitoring CRD is absent and the stack's PodMonitoring fails (Managed Service for Prometheus "Get started
    # with managed collection", https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed).
    managed_prometheus: bool = False
    # Authorized besides network.authorizedNetworks: a MultiKueue worker admits the manager's static egress.
    extra_authorized_networks: pulumi.Input[Sequence[str]] | None = None


def iam_member_name(prefix: str, role: str) -> str:
    """A resource name from the whole role, so roles ending in the same word never collide."""
    return f"{prefix}-{role.removeprefix('roles/').replace('.', '-')}"


def _legacy_aliases(name: str, role: str) -> list[pulumi.Alias]:
    """Until 2026-12 the first two roles' members were named after the role's last word; keep their state."""
    if role not in NODE_SERVICE_ACCOUNT_ROLES[:2]:
        return []
    return [pulumi.Alias(name=f"{name}-nodes-{role.split('/')[-1].split('.')[-1]}")]


def maintenance_policy(maintenance: MaintenanceSettings) -> dict[str, Any]:
    """A daily window and, by default, no minor or node upgrades until the minor version's end of support
    (cluster-toolkit's gke-tpu-v6e blueprints): upgrades would recreate a multi-host slice mid-training.
    Control-plane patches still apply."""
    policy: dict[str, Any] = {"daily_maintenance_window": {"start_time": maintenance.daily_window_start}}
    if maintenance.exclusion:
        policy["maintenance_exclusions"] = [{
            "exclusion_name": "tpu-fallback-" + maintenance.exclusion.lower().replace("_", "-"),
            "start_time": maintenance.exclusion_start,
            "exclusion_options": {"scope": maintenance.exclusion, "end_time_behavior": "UNTIL_END_OF_SUPPORT"},
        }]
    return policy


def network_arguments(network: NetworkSettings, extra_authorized: pulumi.Input[Sequence[str]] | None = None
                      ) -> dict[str, Any]:
    """VPC, private nodes and control-plane authorized networks; nothing set keeps GKE's defaults."""
    arguments: dict[str, Any] = {}
    if network.network:
        arguments["network"] = network.network
    if network.subnetwork:
        arguments["subnetwork"] = network.subnetwork
    if network.private_nodes:
        arguments["private_cluster_config"] = {"enable_private_nodes": True}
    if network.authorized_networks:
        blocks = [{"cidr_block": cidr, "display_name": f"authorized-{i + 1}"}
                  for i, cidr in enumerate(network.authorized_networks)]
        arguments["master_authorized_networks_config"] = {"cidr_blocks": blocks if extra_authorized is None else (
            pulumi.Output.from_input(extra_authorized).apply(lambda cidrs: blocks + [
                {"cidr_block": cidr, "display_name": f"multikueue-manager-{i + 1}"} for i, cidr in enumerate(cidrs)]))}
    return arguments


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    system_pool: gcp.container.NodePool | None
    node_service_account: gcp.serviceaccount.Account
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:cluster:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.node_service_account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            project=args.project,
            account_id=args.node_account_id,
            display_name=f"GKE nodes of {args.cluster_name}",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.apis)),
        )
        member = self.node_service_account.email.apply(lambda email: f"serviceAccount:{email}")
        role_bindings = [
            gcp.projects.IAMMember(
                iam_member_name(f"{name}-nodes", role),
                project=args.project,
                role=role,
                member=member,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=list(args.apis), aliases=_legacy_aliases(name, role)),
            )
            for role in NODE_SERVICE_ACCOUNT_ROLES
        ]

        if args.autopilot:
            # Autopilot: image streaming, Workload Identity and shielded nodes are built in; its nodes use our account.
            mode: dict[str, object] = {
                "enable_autopilot": True,
                "cluster_autoscaling": {"auto_provisioning_defaults": {
                    "service_account": self.node_service_account.email, "oauth_scopes": [CLOUD_PLATFORM_SCOPE]}},
            }
        else:
            mode = {
                # GKE creates a default pool and the provider removes it at once (the system pool replaces it).
                # Even that pool needs a service account: without node_config it is the Compute Engine default
                # one, which hardened projects disable, and cluster creation fails (terraform-provider-google
                # #4435, #17511, #20230). So it runs as the stack's node account.
                "remove_default_node_pool": True,
                "initial_node_count": 1,
                "node_config": {"service_account": self.node_service_account.email,
                                "oauth_scopes": [CLOUD_PLATFORM_SCOPE]},
                "node_pool_defaults": {"node_config_defaults": {"gcfs_config": {"enabled": True}}},
                "workload_identity_config": {"workload_pool": f"{args.project}.svc.id.goog"},
                "enable_shielded_nodes": True,
            }
        self.cluster = gcp.container.Cluster(
            name,
            name=args.cluster_name,
            project=args.project,
            location=args.location,
            min_master_version=args.gke_version,
            release_channel={"channel": "REGULAR"},
            addons_config={"ray_operator_configs": [{"enabled": True}]},
            deletion_protection=args.deletion_protection,
            maintenance_policy=maintenance_policy(args.maintenance),
            **network_arguments(args.network, args.extra_authorized_networks),
            **({"monitoring_config": {"managed_prometheus": {"enabled": True}}} if args.managed_prometheus else {}),
            # Nodes must have their roles before any pool starts, or they come up unable to log or pull.
            # nodeConfig describes only that removed default pool: ignored after creation, so clusters made before
            # it was set are not replaced for it (node_config and its service_account are ForceNew: terraform-provider-
            # google google/services/container/node_config.go schemaNodeConfig).
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*role_bindings, *args.apis], protect=args.protect,
                                        ignore_changes=[] if args.autopilot else ["nodeConfig"]),
            **mode,
        )

        pool = args.system_pool
        self.system_pool = None if pool is None else gcp.container.NodePool(
            f"{name}-{pool.name}",
            name=pool.name,
            project=args.project,
            cluster=self.cluster.name,
            location=args.location,
            node_count=pool.node_count,
            management={"auto_repair": True, "auto_upgrade": True},
            node_config={
                "machine_type": pool.machine_type,
                "service_account": self.node_service_account.email,
                "oauth_scopes": [CLOUD_PLATFORM_SCOPE],
                "workload_metadata_config": {"mode": "GKE_METADATA"},
                "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
                "gcfs_config": {"enabled": True},
                "labels": {ROLE_LABEL: "system"},
            },
            opts=child,
        )

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate).apply(
                lambda parts: gke_exec_kubeconfig(
                    f"gke_{args.project}_{args.location}_{args.cluster_name}", parts[0], parts[1] or ""
                )
            )
        )
        # cluster_identifier: a refreshed kubeconfig (new CA, new endpoint) updates the provider in place
        # instead of replacing it and with it every Kubernetes resource.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            cluster_identifier=self.cluster.id,
            opts=child,
        )
        self.register_outputs({"clusterName": self.cluster.name, "endpoint": self.cluster.endpoint})
