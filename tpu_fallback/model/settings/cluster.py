"""The cluster itself: its GKE version, maintenance policy and network, or a cluster made elsewhere that the
stack only installs Kueue and the fallback queues into (existingCluster)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_fallback.model import catalog
from tpu_fallback.model.egress import parse_cloud_nat
from tpu_fallback.model.settings.common import CLUSTER_NAME, REGION, ZONE, boolean_enabled
from tpu_fallback.model.validation import boolean, fail, object_, show, string

# The oldest minor GKE still offers for new clusters on CATALOG_DATE: 1.34 reached end of life on 2026-10-01
# (GKE release schedule; end of standard support 2026-08-30). Bump with the schedule. It is above what TPU
# flex-start needs (1.33.0-gke.1712000, GKE "About flex-start provisioning mode").
OLDEST_GKE_MINOR = (1, 35)
# The default gkeVersion: that oldest minor (GKE picks its newest patch).
GKE_VERSION = ".".join(map(str, OLDEST_GKE_MINOR))
# Maintenance exclusion scopes that may last until the minor version's end of support (pulumi-gcp 10.2.0
# ClusterMaintenancePolicyMaintenanceExclusionExclusionOptions: end_time_behavior "UNTIL_END_OF_SUPPORT").
EXCLUSION_SCOPES = ("NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES")

_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+)(?:-gke\.(\d+))?)?$")
_HOUR_MINUTE = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
_RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_SUBNET_LINK = re.compile(r"^projects/([^/]+)/regions/([^/]+)/subnetworks/[^/]+$")
_NETWORK_LINK = re.compile(r"^projects/([^/]+)/global/networks/[^/]+$")
_NETWORK_REF = re.compile(r"^(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/"
                          r"(?:global/networks|regions/[a-z]+-[a-z]+\d+/subnetworks)/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$")


@dataclass(frozen=True)
class MaintenanceSettings:
    # Daily window start, "HH:MM" UTC (GKE picks a 4-hour window from there).
    daily_window_start: str = "03:00"
    # Auto-upgrades recreate the nodes of a multi-host slice mid-training; cluster-toolkit's v6e DWS blueprint
    # excludes minor and node upgrades until end of support. None: no exclusion (GKE upgrades freely).
    exclusion: str | None = "NO_MINOR_OR_NODE_UPGRADES"
    exclusion_start: str = "2026-12-01T00:00:00Z"


@dataclass(frozen=True)
class NetworkSettings:
    network: str | None = None  # VPC name or self link; None: the project's "default" network
    subnetwork: str | None = None
    private_nodes: bool = False  # nodes without external IPs (needs Cloud NAT for image pulls from the internet)
    authorized_networks: tuple[str, ...] = ()  # CIDRs allowed to reach the control plane; () = no restriction
    cloud_nat: bool = False  # a Cloud Router and NAT per region for the private nodes (model/egress.py)


@dataclass(frozen=True)
class ExistingClusterSettings:
    """A cluster made elsewhere: the stack installs only Kueue, its readiness gate and the fallback queues."""

    name: str  # its GKE name (outputs, and the GKE exec kubeconfig)
    location: str  # its zone or region
    # True: the secret config value `kubeconfig` reaches it; False: a gke-gcloud-auth-plugin kubeconfig from
    # the cluster's endpoint and CA, looked up by name and location.
    kubeconfig: bool = False


def parse_gke_version(value: Any) -> str:
    gke_version = string("gkeVersion", value, _GKE_VERSION, "expected a GKE version such as 1.35 or 1.35.8-gke.1036000")
    if _gke_version_tuple(gke_version)[:2] < OLDEST_GKE_MINOR:
        oldest = ".".join(map(str, OLDEST_GKE_MINOR))
        # The CLI hands a top-level value over as text, but after YAML read it: an unquoted 1.30 arrives as "1.3".
        unquoted = (f'; if the stack file says {gke_version}0 without quotes, YAML read it as the number '
                    f'{gke_version}: quote it ("{gke_version}0")') if re.fullmatch(r"\d+\.\d", gke_version) else ""
        raise fail("gkeVersion", gke_version, f"GKE no longer offers this minor version for new clusters "
                   f"(as of {catalog.CATALOG_DATE}); use {oldest} or later{unquoted}")
    return gke_version


def _gke_version_tuple(version: str) -> tuple[int, int, float, float]:
    """Missing parts mean "the newest GKE picks", so 1.33 compares as the newest 1.33 patch."""
    match = _GKE_VERSION.match(version)
    assert match is not None
    major, minor, patch, build = match.groups()
    return (
        int(major),
        int(minor),
        int(patch) if patch is not None else float("inf"),
        int(build) if build is not None else float("inf"),
    )


def parse_maintenance(value: Any) -> MaintenanceSettings:
    d = MaintenanceSettings()
    obj = object_("maintenance", value, ("dailyWindowStart", "exclusion", "exclusionStart"))
    exclusion = obj.get("exclusion", d.exclusion)
    if exclusion is not None and exclusion is not False:
        string("maintenance.exclusion", exclusion, None)
        if exclusion not in EXCLUSION_SCOPES:
            raise fail("maintenance.exclusion", exclusion,
                       f"expected {' or '.join(EXCLUSION_SCOPES)}, or false for no exclusion")
    return MaintenanceSettings(
        daily_window_start=string("maintenance.dailyWindowStart", obj.get("dailyWindowStart", d.daily_window_start),
                                  _HOUR_MINUTE, 'expected a UTC time "HH:MM" such as "03:00"'),
        exclusion=exclusion or None,
        exclusion_start=string("maintenance.exclusionStart", obj.get("exclusionStart", d.exclusion_start),
                               _RFC3339_UTC, 'expected an RFC 3339 UTC time such as "2026-12-01T00:00:00Z"'),
    )


def parse_network(value: Any) -> NetworkSettings:
    d = NetworkSettings()
    obj = object_("network", value, ("network", "subnetwork", "privateNodes", "authorizedNetworks", "cloudNat"))
    refs = {}
    for key in ("network", "subnetwork"):
        if obj.get(key) is not None:
            refs[key] = string(f"network.{key}", obj[key], _NETWORK_REF,
                               "expected a name such as tpu-vpc or a self link projects/<p>/...")
    private_nodes = boolean("network.privateNodes", obj.get("privateNodes", d.private_nodes))
    cidrs_raw = obj.get("authorizedNetworks")
    cidrs = d.authorized_networks if cidrs_raw is None else _authorized_networks(cidrs_raw, private_nodes)
    return NetworkSettings(
        network=refs.get("network", d.network),
        subnetwork=refs.get("subnetwork", d.subnetwork),
        private_nodes=private_nodes,
        authorized_networks=cidrs,
        cloud_nat=parse_cloud_nat(obj.get("cloudNat"), private_nodes),
    )


def authorized_networks_limit(private_nodes: bool) -> int:
    """GKE "Add authorized networks for control plane access", Limitations
    (https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks): "Public clusters can have up to 50
    authorized network CIDR ranges; private clusters can have up to 100"."""
    return 100 if private_nodes else 50


def _authorized_networks(value: Any, private_nodes: bool) -> tuple[str, ...]:
    key = "network.authorizedNetworks"
    if not isinstance(value, list):
        raise fail(key, value, 'expected a list of CIDR blocks such as ["10.0.0.0/8"]')
    if not value:
        raise fail(key, value, "an empty list restricts nothing (GKE then admits every address); list the CIDR blocks "
                   "allowed to reach the control plane, or leave authorizedNetworks out")
    cidrs: list[str] = []
    for i, cidr in enumerate(value):
        entry = f"{key}[{i}]"
        if isinstance(cidr, Mapping) and "cidrBlock" in cidr:
            raise fail(entry, cidr, f"write the CIDR block alone ({show(cidr['cidrBlock'])}): the stack names each "
                       "block itself")
        text = string(entry, cidr, None, "expected a CIDR block such as 10.0.0.0/8")
        if "/" not in text:
            raise fail(entry, cidr, f"GKE takes CIDR notation: {text}/32 for that one address, or the network's "
                       "prefix length (10.0.0.0/8)")
        try:
            network = ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            raise fail(entry, cidr, "expected a CIDR block such as 10.0.0.0/8") from None
        if str(network) != text:
            raise fail(entry, cidr, f"host bits are set: the block is {network}; write that")
        if str(network) in cidrs:
            raise fail(entry, cidr, f"listed twice (also {key}[{cidrs.index(str(network))}])")
        cidrs.append(str(network))
    limit = authorized_networks_limit(private_nodes)
    if len(cidrs) > limit:
        raise fail(key, f"{len(cidrs)} CIDR blocks", f"GKE takes at most {limit} on a cluster with"
                   f"{'' if private_nodes else 'out'} private nodes (100 with network.privateNodes true, 50 without)")
    return tuple(cidrs)


def check_subnetwork(network: NetworkSettings, location: str, project: str, whose: str = "the cluster") -> None:
    """A subnetwork self link must be in the cluster's region (subnets are regional and GKE places the nodes in the
    cluster's), and in the project of the network's self link when both are self links."""
    found = _SUBNET_LINK.match(network.subnetwork or "")
    if found is None:
        return
    region = location if REGION.match(location) else location.rsplit("-", 1)[0]
    if found.group(2) != region:
        raise fail("network.subnetwork", network.subnetwork, f"that subnetwork is in {found.group(2)}, but {whose} "
                   f"is in {region} (location {location}): a subnetwork of {region}, the region of every cluster that "
                   "uses it")
    net = _NETWORK_LINK.match(network.network or "")
    if net is not None and net.group(1) != found.group(1):
        raise fail("network.subnetwork", network.subnetwork, f"that subnetwork belongs to project {found.group(1)} "
                   f"but network.network to project {net.group(1)}: a subnetwork of the network's own project")


def parse_existing_cluster(raw: Mapping[str, Any], cluster_name: str, location: str, kueue_install: bool,
                           created_cluster_only: Sequence[str], secret_keys: frozenset[str]
                           ) -> ExistingClusterSettings | None:
    """`created_cluster_only` names the keys set (to other than their defaults) that only a created cluster uses."""
    has_kubeconfig = raw.get("kubeconfig") is not None
    if raw.get("existingCluster") is None:
        if has_kubeconfig:
            raise fail("kubeconfig", "[secret]", "a kubeconfig is only used with existingCluster {name, location}")
        if not kueue_install:
            raise fail("kueue.install", False, "only an existing cluster can bring its own Kueue; set existingCluster")
        return None
    obj = object_("existingCluster", raw["existingCluster"], ("name", "location"))
    if has_kubeconfig and "kubeconfig" not in secret_keys:
        raise fail("kubeconfig", "[not shown]", "must be a secret: pulumi config set --secret kubeconfig < FILE")
    if has_kubeconfig and not isinstance(raw["kubeconfig"], str):
        raise fail("kubeconfig", "[not shown]", "expected the kubeconfig file's text")
    if boolean_enabled(raw.get("multikueue")):
        raise fail("existingCluster", dict(obj), "multikueue builds its own clusters; use one or the other")
    if created_cluster_only:
        key = created_cluster_only[0]
        raise fail(key, raw.get(key), "applies only to a cluster this stack creates; an existingCluster "
                   "stack installs Kueue and the fallback queues only")
    existing_location = obj.get("location", location)
    if not isinstance(existing_location, str) or not (ZONE.match(existing_location) or REGION.match(existing_location)):
        raise fail("existingCluster.location", existing_location, "expected the cluster's zone or region")
    return ExistingClusterSettings(
        name=string("existingCluster.name", obj.get("name", cluster_name), CLUSTER_NAME, "expected a GKE cluster name"),
        location=existing_location,
        kubeconfig=has_kubeconfig,
    )
