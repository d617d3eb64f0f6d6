"""Egress of private nodes, and the MultiKueue manager's way into its workers' control planes. Pure Python.

Private nodes have no external address. Google's registries and APIs they reach through Private Google Access,
which GKE turns on for the subnet of a cluster with private nodes, except in Shared VPC ("Private Google Access
is enabled by default in clusters with private nodes, except for Shared VPC clusters": GKE networking best
practices, https://cloud.google.com/kubernetes-engine/docs/best-practices/networking#private-cluster-type).
Everything else needs Cloud NAT: Kueue's image and the readiness gate's come from registry.k8s.io, the RayJobs'
Ray image from Docker Hub (GKE "Customize your network isolation": private nodes reach the internet through Cloud
NAT, https://cloud.google.com/kubernetes-engine/docs/how-to/latest/network-isolation). So with privateNodes the
stack creates a Cloud Router and a Cloud NAT per region of its clusters (network.cloudNat, on by default), or, with
cloudNat false, leaves egress to the project's network admins.

One NAT per network and region: a NAT for all subnetworks' ranges must be the only one in the region's network
(pulumi-gcp 10.2.0 compute.RouterNat source_subnetwork_ip_ranges_to_nat). A project that already has one sets
cloudNat false.

MultiKueue with authorizedNetworks: the manager's Kueue calls every worker's API server from the manager's nodes.
Only a known, stable source address can be authorized: the manager's NAT then gets a reserved static address
(MANUAL_ONLY), and the stack adds it to each worker's authorized networks. Public nodes' ephemeral addresses, or
an egress this stack does not manage, are refused with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpu_fallback.model.validation import ConfigError, boolean, fail

if TYPE_CHECKING:  # settings.cluster imports this module's parser
    from tpu_fallback.model.settings.cluster import NetworkSettings
    from tpu_fallback.model.settings.stack import Settings

# The manager's egress addresses: one static address gives its NAT 64,512 source ports, enough for a manager's
# few nodes (Cloud NAT's default 64 ports per VM).
MANAGER_STATIC_ADDRESSES = 1
_SELF_LINK_PROJECT = re.compile(r"^projects/([^/]+)/")
_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")


def parse_cloud_nat(value: Any, private_nodes: bool) -> bool:
    """network.cloudNat: a Cloud NAT for the private nodes' egress (default: on with privateNodes)."""
    if value is None:
        return private_nodes
    cloud_nat = boolean("network.cloudNat", value)
    if cloud_nat and not private_nodes:
        raise fail("network.cloudNat", True, "applies to private nodes only (nodes with external addresses do not "
                   "use Cloud NAT); set network.privateNodes true, or leave cloudNat out")
    return cloud_nat


def shared_vpc_host(project: str, network: str | None, subnetwork: str | None) -> str | None:
    """The host project when the network or subnetwork is a self link into another project (Shared VPC)."""
    for ref in (subnetwork, network):
        found = _SELF_LINK_PROJECT.match(ref or "")
        if found and found.group(1) != project:
            return found.group(1)
    return None


def check_egress(project: str, network: NetworkSettings) -> None:
    """Private nodes in Shared VPC: the host project owns the subnet (its Private Google Access) and the network's
    routers, so this stack can create neither; its admins must, and cloudNat false says they have."""
    host = shared_vpc_host(project, network.network, network.subnetwork)
    if network.private_nodes and network.cloud_nat and host:
        raise ConfigError(
            f"network.cloudNat true is invalid with a Shared VPC network of host project {host}: that project owns "
            "the network's Cloud Routers and the subnet, and GKE does not turn on Private Google Access in Shared VPC; "
            "have its network admins set up Cloud NAT and Private Google Access for the subnet, then set "
            "network.cloudNat false")


def check_multikueue_reachability(network: NetworkSettings) -> None:
    """MultiKueue with authorized networks: the manager must reach the workers from an address the stack knows."""
    if not network.authorized_networks:
        return
    if not network.private_nodes:
        raise ConfigError(
            "network.authorizedNetworks with multikueue enabled needs network.privateNodes true: the manager's Kueue "
            "calls every worker's control plane from its nodes, whose external addresses change with each node, so "
            "no authorized network can hold them and jobs would wait on the manager forever; with private nodes the "
            "manager leaves through a Cloud NAT with a static address the stack adds to each worker's authorized "
            "networks")
    from tpu_fallback.model.settings.cluster import authorized_networks_limit  # settings.cluster imports this module

    limit = authorized_networks_limit(network.private_nodes)
    if len(network.authorized_networks) + MANAGER_STATIC_ADDRESSES > limit:
        raise ConfigError(
            f"network.authorizedNetworks has {len(network.authorized_networks)} CIDR blocks, too many with multikueue: "
            f"the stack adds the manager's egress address to every worker's, and GKE takes at most {limit}; list at "
            f"most {limit - MANAGER_STATIC_ADDRESSES}")
    if not network.cloud_nat:
        raise ConfigError(
            "network.cloudNat false is invalid with multikueue and network.authorizedNetworks: the manager's egress "
            "addresses are then unknown to this stack and cannot be added to the workers' authorized networks; set "
            "network.cloudNat true (the stack then reserves the manager's egress address and authorizes it on every "
            "worker), or leave authorizedNetworks out")


def region_of(location: str) -> str:
    return location if _REGION.match(location) else location.rsplit("-", 1)[0]


@dataclass(frozen=True)
class NatGateway:
    """A Cloud Router with one Cloud NAT for one region of the stack's network."""

    name: str  # the router's and the NAT's name (unique per project and region)
    region: str
    network: str  # VPC name or self link
    clusters: tuple[str, ...]  # the stack's clusters in this region
    static_addresses: int = 0  # 0: addresses allocated by Google (AUTO_ONLY); else reserved ones (MANUAL_ONLY)


def nat_gateways(stack_cluster: str, network: NetworkSettings, clusters: list[tuple[str, str]],
                 manager: tuple[str, str] | None = None) -> tuple[NatGateway, ...]:
    """The NATs of a stack: one per region of its clusters ((name, location) pairs, the manager's among them),
    none without private nodes or with cloudNat false. The manager's region gets static addresses when the
    workers' control planes only admit authorized networks."""
    if not (network.private_nodes and network.cloud_nat):
        return ()
    regions: dict[str, list[str]] = {}
    for name, location in clusters:
        regions.setdefault(region_of(location), []).append(name)
    static_region = region_of(manager[1]) if manager and network.authorized_networks else None
    return tuple(
        NatGateway(name=f"{stack_cluster[:40]}-{region}"[:63].rstrip("-"), region=region,
                   network=network.network or "default", clusters=tuple(names),
                   static_addresses=MANAGER_STATIC_ADDRESSES if region == static_region else 0)
        for region, names in regions.items()
    )


def stack_nat_gateways(settings: Settings) -> tuple[NatGateway, ...]:
    """The NATs of a stack's clusters: the one cluster's, or the MultiKueue manager's and its workers'."""
    mk = settings.multikueue
    if mk.enabled and mk.manager is not None:
        manager = (mk.manager.cluster_name, mk.manager.location)
        clusters = [manager, *((w.settings.cluster_name, w.settings.location) for w in mk.workers)]
        return nat_gateways(settings.cluster_name, settings.network, clusters, manager)
    return nat_gateways(settings.cluster_name, settings.network, [(settings.cluster_name, settings.location)])
