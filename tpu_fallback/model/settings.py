"""The infrastructure stack's settings: raw config values in, typed and validated frozen dataclasses out.

`parse_settings` is pure (a dict of config values in, `Settings` out) so every rule is testable
without Pulumi; the infra program (tpu_fallback.programs.infra) hands it the CLI's config. Each rule
raises one `ConfigError` naming the key, the bad value and what is allowed, before the program
registers any resource. The defaults are the GKE tutorial's values.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.kueue_features import FEATURE_GATES, VERIFIED_VERSIONS
from tpu_fallback.model.quantity import Resources, parse_quantity
from tpu_fallback.model.validation import (
    DNS_LABEL,
    ConfigError,
    boolean,
    did_you_mean,
    fail,
    integer,
    object_,
    plain,
    resources,
    show,
    string,
)

PROJECT = "tpu-fallback"

# The oldest minor GKE still offers for new clusters on CATALOG_DATE: 1.34 reached end of life on 2026-10-01
# (GKE release schedule; end of standard support 2026-08-30). Bump with the schedule. It is above what TPU
# flex-start needs (1.33.0-gke.1712000, GKE "About flex-start provisioning mode").
OLDEST_GKE_MINOR = (1, 35)
# GKE node pool names: a letter, then up to 39 lowercase letters, digits or hyphens, not ending in a hyphen.
MAX_POOL_NAME = 40
# A ClusterQueue resource group lists at most 64 flavors (kueue.x-k8s.io/v1beta2 ResourceGroup.flavors MaxItems).
MAX_FLAVORS = 64

_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
_CLUSTER_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
_POOL_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+)(?:-gke\.(\d+))?)?$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_FEATURE_GATE = re.compile(r"^[A-Z][A-Za-z0-9]+$")
_DURATION = re.compile(r"^\d+s$")
_DNS_LABEL_RULE = "expected a lowercase DNS label: letters, digits and hyphens, at most 63 characters"
_NAMESPACE_RULE = "expected a Kubernetes namespace name: lowercase letters, digits and hyphens, at most 63 characters"
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")  # GCP "Creating and managing projects": project IDs
_HOUR_MINUTE = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
_RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_NETWORK_REF = re.compile(r"^(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?|projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/"
                          r"(?:global/networks|regions/[a-z]+-[a-z]+\d+/subnetworks)/[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$")
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9-]+$")
_LABEL_KEY = re.compile(r"^(?:[a-z0-9.-]{1,253}/)?[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600
_GO_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
# Google's distroless Python on Debian 13 (trixie: Python 3.13, nonroot user; the debian12 images are no longer
# built), on gcr.io so private nodes reach it through Private Google Access. The controller needs only the
# standard library; its source comes from a ConfigMap. A tag, not a digest: no source for the digest is at hand
# here; pin one with fallback.image (…@sha256:…) where you mirror images. The e2e suite runs the ConfigMap's files
# with a plain Python of FALLBACK_IMAGE_PYTHON (tests/e2e/fallback_scenarios.py image_python).
DEFAULT_FALLBACK_IMAGE = "gcr.io/distroless/python3-debian13:nonroot"
FALLBACK_IMAGE_PYTHON = "3.13"
_IMAGE_REF = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::\d+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+"
                        r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemPoolSettings:
    name: str = "default-pool"
    machine_type: str = "n2-standard-16"
    node_count: int = 1


@dataclass(frozen=True)
class OnDemandSettings:
    name: str = "on-demand-pool"
    max_slices: int = 1
    reservation: str | None = None  # a named specific reservation; None = NO_RESERVATION


@dataclass(frozen=True)
class FlexStartSettings:
    enabled: bool = True
    name: str = "dws-pool"
    max_slices: int = 1
    max_run_duration: str | None = None  # e.g. "86400s", at most 7 days

    @property
    def active(self) -> bool:
        return self.enabled and self.max_slices > 0


@dataclass(frozen=True)
class KueueSettings:
    version: str = "0.19.2"
    feature_gates: tuple[tuple[str, bool], ...] = (("ElasticJobsViaWorkloadSlices", True),)
    pod_monitoring: bool = False  # a PodMonitoring for Kueue's metrics (Managed Service for Prometheus)
    install: bool = True  # False (existing clusters only): use the Kueue already running, after checking it

    @property
    def elastic_jobs(self) -> bool:
        return dict(self.feature_gates).get("ElasticJobsViaWorkloadSlices", False)


# Kueue's own default waitForPodsReady timeout, 30 min (on by default since Kueue 0.19.0;
# apis/config/v1beta2/defaults.go DefaultWaitForPodsReadyTimeout).
KUEUE_PODS_READY_TIMEOUT = 1800
# The shortest cool-down: a close must outlast the requeue of the jobs it evicts, and reopening a still-empty plan A
# more often than this only flaps (a 0 s cool-down closed plan A ~40 times in 200 s and no job reached plan B).
MIN_COOL_DOWN = 30


@dataclass(frozen=True)
class FallbackSettings:
    """Capacity-aware fallback (tpu_fallback/fallback): plan A -> plan B on a stock-out, and back. Seconds."""

    enabled: bool = True
    stockout_after: int = 600  # a job admitted to plan A whose pods have not started by then: plan A is stocked out
    cool_down: int = 1800  # how long plan A stays closed to new jobs (unless a plan A node appears sooner)
    requeue_backoff: int = 10  # Kueue's requeue delay after it evicts the stuck job (waitForPodsReady backoff base)
    poll_interval: int = 5  # how often the controller reads the cluster
    reverse_move: bool = True  # move a job waiting for DWS capacity to plan A when plan A has room and nodes
    image: str = DEFAULT_FALLBACK_IMAGE

    @property
    def pods_ready_timeout(self) -> int:
        """Kueue's waitForPodsReady timeout, a long backstop: the controller evicts a job stuck on a stocked-out
        plan A itself, at GKE's no-capacity Event or at stockoutAfter. Kueue's timeout applies to every admitted
        job, plan B included, so a short one evicted plan B jobs whose DWS nodes had arrived but whose pods took
        a while to start (large images, multi-host). Kueue's own default (30 min), and never less than
        stockoutAfter plus time for the controller to act first."""
        return max(KUEUE_PODS_READY_TIMEOUT, self.stockout_after + max(3 * self.poll_interval, 15))


@dataclass(frozen=True)
class LocalQueueSettings:
    namespace: str
    name: str


@dataclass(frozen=True)
class QueueSettings:
    cluster_queue: str = "cluster-queue"
    local_queues: tuple[LocalQueueSettings, ...] = (LocalQueueSettings("default", "user-queue"),)
    # None admits every namespace (namespaceSelector: {}); labels restrict the queue to labelled namespaces.
    namespace_labels: tuple[tuple[str, str], ...] | None = None
    system_quota: Resources = Resources(10, "20Gi")
    # None: derived from plan A's size, capacity.ON_DEMAND_QUOTA_PER_HOST per TPU host (the tutorial's
    # 40 cpu / 75Gi for 4 hosts).
    on_demand_quota: Resources | None = None
    # False: the tutorial's unlimited dws flavor; True: capped at the plan B pool's capacity.
    cap_flex_start: bool = False
    # The per-host request of one TPU worker and of one Ray head; quotas must admit a whole slice of them.
    worker_request: Resources = Resources(8, "16Gi")
    head_request: Resources = Resources(2, "4Gi")


# Maintenance exclusion scopes that may last until the minor version's end of support (pulumi-gcp 10.2.0
# ClusterMaintenancePolicyMaintenanceExclusionExclusionOptions: end_time_behavior "UNTIL_END_OF_SUPPORT").
EXCLUSION_SCOPES = ("NO_MINOR_OR_NODE_UPGRADES", "NO_MINOR_UPGRADES")


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


@dataclass(frozen=True)
class ExistingClusterSettings:
    """A cluster made elsewhere: the stack installs only Kueue, its readiness gate and the fallback queues."""

    name: str  # its GKE name (outputs, and the GKE exec kubeconfig)
    location: str  # its zone or region
    # True: the secret config value `kubeconfig` reaches it; False: a gke-gcloud-auth-plugin kubeconfig from
    # the cluster's endpoint and CA, looked up by name and location.
    kubeconfig: bool = False


@dataclass(frozen=True)
class ManagerSettings:
    cluster_name: str
    location: str  # a region for Autopilot, a zone for a Standard manager
    autopilot: bool = True
    node_account_id: str = ""  # set by the parser: unique among the stack's clusters


@dataclass(frozen=True)
class WorkerSettings:
    name: str
    settings: Settings  # a full plan A / plan B cluster of its own


MAX_WORKERS = 20  # MultiKueueConfig.spec.clusters allows 1..20


@dataclass(frozen=True)
class MultiKueueSettings:
    enabled: bool = False
    manager: ManagerSettings | None = None
    workers: tuple[WorkerSettings, ...] = ()


@dataclass(frozen=True)
class Settings:
    project: str
    cluster_name: str = "tpu-cluster"
    location: str = "us-east5-b"
    gke_version: str = "1.35"
    system_pool: SystemPoolSettings = SystemPoolSettings()
    tpu: catalog.TpuSlice = field(default_factory=lambda: catalog.resolve_slice("v6e", "4x4"))
    on_demand: OnDemandSettings = OnDemandSettings()
    flex_start: FlexStartSettings = FlexStartSettings()
    kueue: KueueSettings = KueueSettings()
    queues: QueueSettings = QueueSettings()
    fallback: FallbackSettings = FallbackSettings()
    deletion_protection: bool = True
    protect: bool = False
    enable_apis: bool = True  # enable the Google APIs the stack needs (never disabled on destroy)
    # The location must be a zone the catalog lists for the TPU family (and for its flex-start, with plan B);
    # true accepts a zone Google added after the catalog's date.
    allow_unlisted_zone: bool = False
    secure_boot: bool = True  # Shielded VM secure boot on the TPU pools (the system pool always has it)
    maintenance: MaintenanceSettings = MaintenanceSettings()
    network: NetworkSettings = NetworkSettings()
    multikueue: MultiKueueSettings = MultiKueueSettings()
    existing_cluster: ExistingClusterSettings | None = None
    node_account_id: str = ""  # the nodes' service account id; set by the parser, unique among the stack's clusters

    @property
    def region(self) -> str:
        return self.location.rsplit("-", 1)[0]

    @property
    def on_demand_quota(self) -> Resources:
        """The on-demand flavor's cpu/memory quota: configured, or derived from plan A's TPU hosts."""
        return capacity.on_demand_quota(self.queues.on_demand_quota, self.tpu, self.on_demand.max_slices)


# The project's config keys (Pulumi.yaml declares the same ones).
CONFIG_KEYS = (
    "clusterName", "location", "gkeVersion", "systemPool", "tpu", "onDemand", "flexStart", "kueue", "queues",
    "deletionProtection", "protect", "enableApis", "secureBoot", "maintenance", "network", "multikueue",
    "existingCluster", "kubeconfig", "allowUnlistedZone", "fallback",
)
# What only a cluster this stack creates uses (config key -> Settings field): refused in existing-cluster mode
# when set to anything but its default, rather than silently ignored. (The CLI hands over Pulumi.yaml's
# defaults too, so "set" means "differs from the default".)
_CREATED_CLUSTER_ONLY = {"gkeVersion": "gke_version", "deletionProtection": "deletion_protection",
                         "protect": "protect", "enableApis": "enable_apis", "secureBoot": "secure_boot",
                         "maintenance": "maintenance", "network": "network"}


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


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse_settings(raw: Mapping[str, Any], project: str | None, secret_keys: frozenset[str] = frozenset()
                   ) -> Settings:
    """Validate raw config values (keys without the project namespace, objects already decoded).

    `secret_keys` names the keys the stack holds as secrets (only `kubeconfig` must be one).
    """
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"{PROJECT}:{unknown[0]} is not a known setting{did_you_mean(unknown[0], CONFIG_KEYS)}; "
                          f"known: {', '.join(CONFIG_KEYS)}")
    if not project:
        raise ConfigError("gcp:project is not set; run `pulumi config set gcp:project <your-project-id>`")
    string("gcp:project", project, _PROJECT_ID, "a GCP project id has 6 to 30 lowercase letters, digits or hyphens, "
           "starts with a letter and does not end with a hyphen (the id, not the project's display name or number)")
    defaults = Settings(project=project)
    cluster_name = string(
        "clusterName", raw.get("clusterName", defaults.cluster_name), _CLUSTER_NAME,
        "GKE cluster names use lowercase letters, digits and hyphens, start with a letter, "
        "end with a letter or digit and have at most 40 characters",
    )
    location = raw.get("location", defaults.location)
    if isinstance(location, str) and _REGION.match(location):
        raise fail("location", location, f"a zone is required, not a region (e.g. {location}-b): "
                   "TPU slices and their COMPACT placement live in one zone")
    location = string("location", location, _ZONE, "expected a zone such as us-east5-b")
    gke_version = string(
        "gkeVersion", raw.get("gkeVersion", defaults.gke_version), _GKE_VERSION,
        "expected a GKE version such as 1.35 or 1.35.8-gke.1036000",
    )
    if _gke_version_tuple(gke_version)[:2] < OLDEST_GKE_MINOR:
        oldest = ".".join(map(str, OLDEST_GKE_MINOR))
        # The CLI hands a top-level value over as text, but after YAML read it: an unquoted 1.30 arrives as "1.3".
        unquoted = (f'; if the stack file says {gke_version}0 without quotes, YAML read it as the number '
                    f'{gke_version}: quote it ("{gke_version}0")') if re.fullmatch(r"\d+\.\d", gke_version) else ""
        raise fail("gkeVersion", gke_version, f"GKE no longer offers this minor version for new clusters "
                   f"(as of {catalog.CATALOG_DATE}); use {oldest} or later{unquoted}")

    tpu = _parse_tpu(raw.get("tpu"))
    system_pool = _parse_system_pool(raw.get("systemPool"))
    on_demand = _parse_on_demand(raw.get("onDemand"))
    flex_start = _parse_flex_start(raw.get("flexStart"))
    kueue = _parse_kueue(raw.get("kueue"))
    queues = _parse_queues(raw.get("queues"))
    fallback = _parse_fallback(raw.get("fallback"), kueue, on_demand.max_slices > 0 and flex_start.active)

    if on_demand.max_slices == 0 and not flex_start.active:
        why = "flexStart.maxSlices is 0 too" if flex_start.enabled else "flexStart.enabled is false"
        raise ConfigError(
            f"onDemand.maxSlices 0 is invalid because {why}: at least one plan needs TPU capacity "
            "(set onDemand.maxSlices >= 1, or flexStart.enabled true with flexStart.maxSlices >= 1)"
        )
    if flex_start.active and not tpu.family.supports_flex_start:
        raise ConfigError(
            f'flexStart.enabled true is invalid for tpu.type "{tpu.family.name}": flex-start is offered for '
            f"{', '.join(f.name for f in catalog.FAMILIES.values() if f.supports_flex_start)}"
        )
    allow_unlisted_zone = boolean("allowUnlistedZone", raw.get("allowUnlistedZone", False))
    if not allow_unlisted_zone:
        _check_zone(location, tpu.family, flex_start)

    names = [("systemPool.name", system_pool.name), ("onDemand.name", on_demand.name)]
    if flex_start.enabled:
        names.append(("flexStart.name", flex_start.name))
    seen: dict[str, str] = {}
    for key, name in names:
        if name in seen:
            raise fail(key, name, f"node pool names must be unique; {seen[name]} already uses it")
        seen[name] = key
    pool_count = sum(len(capacity.pool_layout(n, tpu, s)) for n, s in (
        (on_demand.name, on_demand.max_slices), (flex_start.name, flex_start.max_slices if flex_start.active else 0)))
    if pool_count + 1 > MAX_FLAVORS:
        raise fail("onDemand.maxSlices", on_demand.max_slices,
                   f"with flexStart.maxSlices {flex_start.max_slices} that is {pool_count} multi-host pools, each its "
                   f"own Kueue flavor; a ClusterQueue takes at most {MAX_FLAVORS} flavors (one is default-cpu)")
    for key, plan_name, slices in (("onDemand", on_demand.name, on_demand.max_slices),
                                   ("flexStart", flex_start.name, flex_start.max_slices if flex_start.enabled else 0)):
        pools = capacity.pool_layout(plan_name, tpu, slices)
        longest = max((p.name for p in pools), key=len, default="")
        if len(longest) > MAX_POOL_NAME:
            raise fail(f"{key}.name", plan_name, f"with {key}.maxSlices {slices} its last pool is named {longest} "
                       f"({len(longest)} characters); GKE allows {MAX_POOL_NAME}: shorten it to at most "
                       f"{MAX_POOL_NAME - (len(longest) - len(plan_name))} characters")

    settings = Settings(
        project=project,
        cluster_name=cluster_name,
        location=location,
        gke_version=gke_version,
        system_pool=system_pool,
        tpu=tpu,
        on_demand=on_demand,
        flex_start=flex_start,
        kueue=kueue,
        queues=queues,
        fallback=fallback,
        deletion_protection=boolean("deletionProtection", raw.get("deletionProtection", True)),
        protect=boolean("protect", raw.get("protect", False)),
        enable_apis=boolean("enableApis", raw.get("enableApis", True)),
        allow_unlisted_zone=allow_unlisted_zone,
        secure_boot=boolean("secureBoot", raw.get("secureBoot", True)),
        maintenance=_parse_maintenance(raw.get("maintenance")),
        network=_parse_network(raw.get("network")),
    )
    _check_quotas(settings)
    settings = replace(settings, node_account_id=node_account_ids([cluster_name])[0],
                       existing_cluster=_parse_existing_cluster(raw, settings, secret_keys))
    multikueue = _parse_multikueue(raw, settings)
    if multikueue.enabled:
        settings = replace(settings, multikueue=multikueue)
    return settings


def _parse_tpu(value: Any) -> catalog.TpuSlice:
    obj = object_("tpu", value, ("type", "topology", "machineType"))
    family_name = string("tpu.type", obj.get("type", "v6e"), None, f"expected one of {', '.join(catalog.FAMILIES)}")
    if family_name not in catalog.FAMILIES:
        raise fail("tpu.type", family_name, f"unknown TPU family; valid: {', '.join(catalog.FAMILIES)}")
    fam = catalog.FAMILIES[family_name]
    topology = string("tpu.topology", obj.get("topology", "4x4"), None, "expected a topology string such as 4x4")
    machine_type = obj.get("machineType")
    if machine_type is not None:
        string("tpu.machineType", machine_type)
        if fam.machine_type(machine_type) is None:
            raise fail("tpu.machineType", machine_type,
                       f"not a {fam.name} machine type; valid: {', '.join(m.name for m in fam.machine_types)}")
    if topology not in fam.topologies:
        raise fail("tpu.topology", topology, f"not a valid {fam.name} topology; valid: {fam.describe_topologies()}")
    try:
        return catalog.resolve_slice(family_name, topology, machine_type)
    except catalog.CatalogError as err:
        raise ConfigError(f"tpu.topology {show(topology)} is invalid: {err}") from None


def _pool_name(key: str, value: Any) -> str:
    return string(key, value, _POOL_NAME,
                  "node pool names use lowercase letters, digits and hyphens, start with a letter and have at "
                  "most 40 characters")


def _parse_system_pool(value: Any) -> SystemPoolSettings:
    d = SystemPoolSettings()
    obj = object_("systemPool", value, ("name", "machineType", "nodeCount"))
    return SystemPoolSettings(
        name=_pool_name("systemPool.name", obj.get("name", d.name)),
        machine_type=string("systemPool.machineType", obj.get("machineType", d.machine_type), _MACHINE_TYPE,
                            "expected a Compute Engine machine type such as n2-standard-16"),
        node_count=integer("systemPool.nodeCount", obj.get("nodeCount", d.node_count), minimum=1),
    )


def _parse_on_demand(value: Any) -> OnDemandSettings:
    d = OnDemandSettings()
    obj = object_("onDemand", value, ("name", "maxSlices", "reservation"))
    reservation = obj.get("reservation")
    if reservation is not None:
        reservation = string("onDemand.reservation", reservation, DNS_LABEL,
                             "expected the name of a specific Compute Engine reservation")
    return OnDemandSettings(
        name=_pool_name("onDemand.name", obj.get("name", d.name)),
        max_slices=integer("onDemand.maxSlices", obj.get("maxSlices", d.max_slices)),
        reservation=reservation,
    )


def _parse_flex_start(value: Any) -> FlexStartSettings:
    d = FlexStartSettings()
    obj = object_("flexStart", value, ("enabled", "name", "maxSlices", "maxRunDuration"))
    duration = obj.get("maxRunDuration")
    if duration is not None:
        string("flexStart.maxRunDuration", duration, _DURATION, 'expected seconds such as "86400s"')
        if not 0 < int(duration[:-1]) <= MAX_RUN_DURATION_SECONDS:
            raise fail("flexStart.maxRunDuration", duration, f"must be between 1s and {MAX_RUN_DURATION_SECONDS}s "
                       "(7 days, the flex-start limit)")
    return FlexStartSettings(
        enabled=boolean("flexStart.enabled", obj.get("enabled", d.enabled)),
        name=_pool_name("flexStart.name", obj.get("name", d.name)),
        max_slices=integer("flexStart.maxSlices", obj.get("maxSlices", d.max_slices)),
        max_run_duration=duration,
    )


def _parse_kueue(value: Any) -> KueueSettings:
    d = KueueSettings()
    obj = object_("kueue", value, ("version", "featureGates", "podMonitoring", "install", "allowUnverifiedVersion"))
    version = string("kueue.version", obj.get("version", d.version), _SEMVER,
                     "expected a Kueue chart version x.y.z such as 0.19.2")
    unverified = boolean("kueue.allowUnverifiedVersion", obj.get("allowUnverifiedVersion", False))
    if version not in VERIFIED_VERSIONS and not unverified:
        raise fail("kueue.version", version, f"this project is verified with Kueue {', '.join(VERIFIED_VERSIONS)} "
                   "(the manager config it writes and the fallback controller use Kueue's v1beta2 APIs); set "
                   "kueue.allowUnverifiedVersion: true to use another at your own risk")
    gates_raw = obj.get("featureGates", dict(d.feature_gates))
    if not isinstance(gates_raw, Mapping):
        raise fail("kueue.featureGates", gates_raw, "expected a map of gate name to true/false, "
                   "e.g. {ElasticJobsViaWorkloadSlices: true}")
    gates = []
    for name, enabled in gates_raw.items():
        if not isinstance(name, str) or not _FEATURE_GATE.match(name):
            raise fail("kueue.featureGates", name, "gate names are CamelCase such as ElasticJobsViaWorkloadSlices")
        enabled = boolean(f"kueue.featureGates.{name}", enabled)
        # An unverified version's gates are checked against the newest verified version's: unknown gates are
        # still refused (Kueue's controller would exit on one).
        checked = version if version in FEATURE_GATES else VERIFIED_VERSIONS[-1]
        known = FEATURE_GATES[checked]
        if name not in known:
            raise fail("kueue.featureGates", name, f"Kueue {checked} has no such feature gate"
                       f"{did_you_mean(name, known)} (its controller would exit with 'unrecognized feature gate')")
        gates.append((name, enabled))
    return KueueSettings(version=version, feature_gates=tuple(gates),
                         pod_monitoring=boolean("kueue.podMonitoring", obj.get("podMonitoring", False)),
                         install=boolean("kueue.install", obj.get("install", True)))


def duration(key: str, value: Any, minimum: int, maximum: int) -> int:
    """A Go-style duration ("10m", "90s", "1h30m") as whole seconds, within [minimum, maximum]."""
    match = _GO_DURATION.match(value) if isinstance(value, str) and value else None
    if match is None:
        raise fail(key, value, 'expected a duration such as "30s", "10m" or "1h30m"')
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not minimum <= total <= maximum:
        raise fail(key, value, f"must be between {minimum}s and {maximum}s")
    return total


def _parse_fallback(value: Any, kueue: KueueSettings, both_plans: bool) -> FallbackSettings:
    obj = object_("fallback", value, ("enabled", "stockoutAfter", "coolDown", "requeueBackoff", "pollInterval",
                                      "moveBack", "image"))
    d = FallbackSettings()
    # On by default where this stack installs Kueue (it must set Kueue's waitForPodsReady) and has both plans.
    enabled = boolean("fallback.enabled", obj.get("enabled", kueue.install and both_plans))
    if enabled and not kueue.install:
        raise fail("fallback.enabled", True, "needs Kueue's waitForPodsReady, which only a Kueue this stack installs "
                   "gets; with kueue.install false set fallback.enabled false (Kueue then falls back on quota only)")
    if enabled and not both_plans:
        raise fail("fallback.enabled", True, "needs both plans: onDemand.maxSlices >= 1 and flexStart enabled")
    day = 24 * 3600
    poll = duration("fallback.pollInterval", obj.get("pollInterval", f"{d.poll_interval}s"), 1, 60)
    stockout_after = duration("fallback.stockoutAfter", obj.get("stockoutAfter", f"{d.stockout_after}s"), 10, day)
    if stockout_after < 2 * poll:
        raise fail("fallback.stockoutAfter", obj.get("stockoutAfter"), f"must be at least twice fallback.pollInterval "
                   f"({poll}s)")
    image = string("fallback.image", obj.get("image", d.image), _IMAGE_REF,
                   "expected an image reference such as gcr.io/distroless/python3-debian13:nonroot (Python 3.11+)")
    return FallbackSettings(
        enabled=enabled,
        stockout_after=stockout_after,
        cool_down=_cool_down(obj.get("coolDown", f"{d.cool_down}s"), poll),
        requeue_backoff=duration("fallback.requeueBackoff", obj.get("requeueBackoff", f"{d.requeue_backoff}s"), 1,
                                 3600),
        poll_interval=poll,
        reverse_move=boolean("fallback.moveBack", obj.get("moveBack", d.reverse_move)),
        image=image,
    )


def _cool_down(value: Any, poll: int) -> int:
    cool_down = duration("fallback.coolDown", value, 0, 7 * 24 * 3600)
    least = max(MIN_COOL_DOWN, 5 * poll)
    if cool_down < least:
        raise fail("fallback.coolDown", value, f"must be at least {least}s ({MIN_COOL_DOWN}s, and 5 times "
                   f"fallback.pollInterval): a shorter close reopens plan A before the evicted jobs are requeued "
                   "past it, and plan A flaps")
    return cool_down


def _parse_queues(value: Any) -> QueueSettings:
    d = QueueSettings()
    obj = object_("queues", value, (
        "clusterQueue", "localQueues", "namespaceLabels", "quotas", "capFlexStart", "workerRequest", "headRequest",
    ))
    cluster_queue = string("queues.clusterQueue", obj.get("clusterQueue", d.cluster_queue), DNS_LABEL,
                           _DNS_LABEL_RULE)
    local_raw = obj.get("localQueues")
    local_queues = d.local_queues
    if local_raw is not None:
        if not isinstance(local_raw, list) or not local_raw:
            raise fail("queues.localQueues", local_raw, "expected a non-empty list of {namespace, name}")
        parsed: list[LocalQueueSettings] = []
        for i, entry in enumerate(local_raw):
            key = f"queues.localQueues[{i}]"
            item = object_(key, entry, ("namespace", "name"))
            queue = LocalQueueSettings(
                namespace=string(f"{key}.namespace", item.get("namespace", "default"), DNS_LABEL,
                                 _NAMESPACE_RULE),
                name=string(f"{key}.name", item.get("name"), DNS_LABEL, _DNS_LABEL_RULE),
            )
            if queue in parsed:
                raise fail(key, f"{queue.namespace}/{queue.name}", "local queues must be unique")
            parsed.append(queue)
        local_queues = tuple(parsed)
    labels_raw = obj.get("namespaceLabels")
    namespace_labels = None
    if labels_raw is not None:
        if not isinstance(labels_raw, Mapping) or not labels_raw:
            raise fail("queues.namespaceLabels", labels_raw,
                       "expected a non-empty map of label to value (leave it out to admit every namespace)")
        for k, v in labels_raw.items():
            string("queues.namespaceLabels", k, _LABEL_KEY, "expected a Kubernetes label key")
            string(f"queues.namespaceLabels.{k}", v, _LABEL_VALUE, "expected a Kubernetes label value (a string)")
        namespace_labels = tuple(sorted(labels_raw.items()))
    quotas = object_("queues.quotas", obj.get("quotas"), ("system", "onDemand"))
    return QueueSettings(
        cluster_queue=cluster_queue,
        local_queues=local_queues,
        namespace_labels=namespace_labels,
        system_quota=resources("queues.quotas.system", quotas.get("system"), d.system_quota),
        on_demand_quota=(resources("queues.quotas.onDemand", quotas["onDemand"], Resources(0, 0))
                         if quotas.get("onDemand") is not None else None),
        cap_flex_start=boolean("queues.capFlexStart", obj.get("capFlexStart", d.cap_flex_start)),
        worker_request=resources("queues.workerRequest", obj.get("workerRequest"), d.worker_request),
        head_request=resources("queues.headRequest", obj.get("headRequest"), d.head_request),
    )


_WORKER_OVERRIDES = ("tpu", "onDemand", "flexStart")


def _parse_multikueue(raw: Mapping[str, Any], stack: Settings) -> MultiKueueSettings:
    """Manager and workers; each worker is the stack's settings with its own name, zone and optional overrides."""
    obj = object_("multikueue", raw.get("multikueue"), ("enabled", "manager", "workers"))
    if not boolean("multikueue.enabled", obj.get("enabled", False)):
        return MultiKueueSettings()
    if stack.kueue.elastic_jobs:
        raise fail("kueue.featureGates.ElasticJobsViaWorkloadSlices", True,
                   "MultiKueue does not support elastic jobs; set it to false in a multikueue stack")

    manager_raw = object_("multikueue.manager", obj.get("manager"), ("clusterName", "location", "autopilot"))
    autopilot = boolean("multikueue.manager.autopilot", manager_raw.get("autopilot", True))
    manager_location = manager_raw.get("location", stack.region)
    pattern, allowed = ((_REGION, "an Autopilot manager needs a region such as europe-west4") if autopilot else
                        (_ZONE, "a Standard manager needs a zone such as europe-west4-a"))
    manager = ManagerSettings(
        cluster_name=string("multikueue.manager.clusterName",
                            manager_raw.get("clusterName", f"{stack.cluster_name[:32]}-manager"), _CLUSTER_NAME,
                            "a GKE cluster name (lowercase letters, digits, hyphens, at most 40 characters)"),
        location=string("multikueue.manager.location", manager_location, pattern, allowed),
        autopilot=autopilot,
    )

    workers_raw = obj.get("workers")
    if not isinstance(workers_raw, list) or not workers_raw:
        raise fail("multikueue.workers", workers_raw, "expected a list of {name, location} (1 to 20 workers)")
    if len(workers_raw) > MAX_WORKERS:
        raise fail("multikueue.workers", f"{len(workers_raw)} workers",
                   f"MultiKueueConfig accepts at most {MAX_WORKERS} clusters")
    workers: list[WorkerSettings] = []
    for i, entry in enumerate(workers_raw):
        key = f"multikueue.workers[{i}]"
        item = object_(key, entry, ("name", "location", *_WORKER_OVERRIDES))
        name = string(f"{key}.name", item.get("name"), DNS_LABEL, "expected a short lowercase name such as us")
        if any(w.name == name for w in workers):
            raise fail(f"{key}.name", name, "worker names must be unique")
        worker_raw = {k: v for k, v in raw.items() if k != "multikueue"}
        worker_raw.update({k: item[k] for k in _WORKER_OVERRIDES if k in item})
        worker_raw["clusterName"] = f"{stack.cluster_name}-{name}"
        worker_raw["location"] = item.get("location")
        try:
            worker = parse_settings(worker_raw, stack.project)
        except ConfigError as err:
            message = str(err)
            root = re.split(r"[ .\[]", message, maxsplit=1)[0]
            if root in ("location", *_WORKER_OVERRIDES):  # a key of the worker's entry: name its full path
                raise ConfigError(f"{key}.{message} (worker {name})") from None
            raise ConfigError(f"{key} ({name}): {message}") from None
        workers.append(WorkerSettings(name, worker))
    names = [manager.cluster_name, *(w.settings.cluster_name for w in workers)]
    if len(set(names)) != len(names):
        raise fail("multikueue.manager.clusterName", manager.cluster_name,
                   "must differ from every worker's cluster name")
    manager_id, *worker_ids = node_account_ids(names)
    return MultiKueueSettings(
        enabled=True,
        manager=replace(manager, node_account_id=manager_id),
        workers=tuple(WorkerSettings(w.name, replace(w.settings, node_account_id=account))
                      for w, account in zip(workers, worker_ids, strict=True)),
    )


def node_account_ids(cluster_names: list[str]) -> list[str]:
    """The node service account id of each cluster of a stack (ids: 6-30 characters, unique per project).

    `<clusterName[:23]>-nodes` as before, so existing stacks keep their accounts; where that collides between
    two clusters of the stack (names sharing their first 23 characters, which no stack could deploy), the
    colliding ones get a short hash of the whole cluster name instead.
    """
    legacy = [f"{name[:23].rstrip('-')}-nodes" for name in cluster_names]
    out = []
    for name, account in zip(cluster_names, legacy, strict=True):
        if legacy.count(account) > 1:
            digest = hashlib.sha256(name.encode()).hexdigest()[:5]
            account = f"{name[:17].rstrip('-')}-{digest}-nodes"
        out.append(account)
    return out


def _parse_existing_cluster(raw: Mapping[str, Any], settings: Settings, secret_keys: frozenset[str]
                            ) -> ExistingClusterSettings | None:
    has_kubeconfig = raw.get("kubeconfig") is not None
    if raw.get("existingCluster") is None:
        if has_kubeconfig:
            raise fail("kubeconfig", "[secret]", "a kubeconfig is only used with existingCluster {name, location}")
        if not settings.kueue.install:
            raise fail("kueue.install", False, "only an existing cluster can bring its own Kueue; set existingCluster")
        return None
    obj = object_("existingCluster", raw["existingCluster"], ("name", "location"))
    if has_kubeconfig and "kubeconfig" not in secret_keys:
        raise fail("kubeconfig", "[not shown]", "must be a secret: pulumi config set --secret kubeconfig < FILE")
    if has_kubeconfig and not isinstance(raw["kubeconfig"], str):
        raise fail("kubeconfig", "[not shown]", "expected the kubeconfig file's text")
    if _boolean_enabled(raw.get("multikueue")):
        raise fail("existingCluster", dict(obj), "multikueue builds its own clusters; use one or the other")
    defaults = Settings(project=settings.project)
    given = [k for k, attr in _CREATED_CLUSTER_ONLY.items() if getattr(settings, attr) != getattr(defaults, attr)]
    if given:
        raise fail(given[0], raw.get(given[0]), "applies only to a cluster this stack creates; an existingCluster "
                   "stack installs Kueue and the fallback queues only")
    location = obj.get("location", settings.location)
    if not isinstance(location, str) or not (_ZONE.match(location) or _REGION.match(location)):
        raise fail("existingCluster.location", location, "expected the cluster's zone or region")
    return ExistingClusterSettings(
        name=string("existingCluster.name", obj.get("name", settings.cluster_name), _CLUSTER_NAME,
                    "expected a GKE cluster name"),
        location=location,
        kubeconfig=has_kubeconfig,
    )


def _boolean_enabled(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("enabled") in (True, "true")


def _check_zone(location: str, family: catalog.TpuFamily, flex_start: FlexStartSettings) -> None:
    """The zone must offer the TPU family, and flex-start for it when plan B is on (catalog, dated). A typo
    (us-east5-x) fails here too, since every zone must be listed."""
    offered = family.known_zones | family.flex_start_zones
    if location not in offered:
        why = "are not offered there" if location in catalog.ALL_KNOWN_ZONES else "are not known to be offered there"
        raise fail("location", location, f"{family.name} TPUs {why} (as listed on {catalog.CATALOG_DATE}); known "
                   f"{family.name} zones: {', '.join(sorted(offered))}; set allowUnlistedZone true if Google has "
                   "added this zone since")
    if flex_start.active and location not in family.flex_start_zones:
        raise fail("location", location,
                   f"GKE offers {family.name} flex-start (plan B) only in {', '.join(sorted(family.flex_start_zones))} "
                   f"(as listed on {catalog.CATALOG_DATE}); pick one of them, disable plan B with "
                   "flexStart.enabled false, or set allowUnlistedZone true if GKE now offers it there")


def _parse_maintenance(value: Any) -> MaintenanceSettings:
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


def _parse_network(value: Any) -> NetworkSettings:
    obj = object_("network", value, ("network", "subnetwork", "privateNodes", "authorizedNetworks"))
    refs = {}
    for key in ("network", "subnetwork"):
        if obj.get(key) is not None:
            refs[key] = string(f"network.{key}", obj[key], _NETWORK_REF,
                               "expected a name such as tpu-vpc or a self link projects/<p>/...")
    cidrs_raw = obj.get("authorizedNetworks", [])
    if not isinstance(cidrs_raw, list):
        raise fail("network.authorizedNetworks", cidrs_raw, 'expected a list of CIDR blocks such as ["10.0.0.0/8"]')
    cidrs = []
    for i, cidr in enumerate(cidrs_raw):
        try:
            cidrs.append(str(ipaddress.ip_network(string(f"network.authorizedNetworks[{i}]", cidr))))
        except ValueError:
            raise fail(f"network.authorizedNetworks[{i}]", cidr, "expected a CIDR block such as 10.0.0.0/8") from None
    return NetworkSettings(
        network=refs.get("network"),
        subnetwork=refs.get("subnetwork"),
        private_nodes=boolean("network.privateNodes", obj.get("privateNodes", False)),
        authorized_networks=tuple(cidrs),
    )


def _check_quotas(settings: Settings) -> None:
    """Every quota must admit at least one slice of the configured per-host requests."""
    q = settings.queues
    tpu = settings.tpu
    machine = tpu.machine
    if not capacity.fits_host(q.worker_request, machine):
        raise fail("queues.workerRequest", f"cpu={q.worker_request.cpu}, memory={q.worker_request.memory}",
                   f"one TPU worker runs on one {machine.name} host ({machine.vcpus} vCPU, {machine.memory_gib} GiB)")
    head_cpu, head_mem = capacity.system_pods_per_job(q.head_request)
    sys_cpu, sys_mem = parse_quantity(q.system_quota.cpu), parse_quantity(q.system_quota.memory)
    if sys_cpu < head_cpu or sys_mem < head_mem:
        raise fail("queues.quotas.system", f"cpu={q.system_quota.cpu}, memory={q.system_quota.memory}",
                   f"must admit one Ray job's CPU pods: its head (cpu={q.head_request.cpu}, "
                   f"memory={q.head_request.memory}) plus KubeRay's submitter "
                   f"= cpu {plain(head_cpu)}, memory {plain(head_mem / 2**20)}Mi")
    if settings.on_demand.max_slices > 0:
        need_cpu, need_mem = capacity.slice_requests(q.worker_request, tpu)
        quota = settings.on_demand_quota
        od_cpu, od_mem = parse_quantity(quota.cpu), parse_quantity(quota.memory)
        if od_cpu < need_cpu or od_mem < need_mem:
            raise fail(
                "queues.quotas.onDemand", f"cpu={quota.cpu}, memory={quota.memory}",
                f"must admit one {tpu.topology} slice: {tpu.hosts_per_slice} workers x "
                f"(cpu={q.worker_request.cpu}, memory={q.worker_request.memory}) = cpu {plain(need_cpu)}, "
                f"memory {plain(need_mem / 2**30)}Gi",
            )


# --------------------------------------------------------------------------------------------
# The CLI's config strings
# --------------------------------------------------------------------------------------------


_OBJECT_KEYS = frozenset({"systemPool", "tpu", "onDemand", "flexStart", "kueue", "queues", "maintenance", "network",
                          "multikueue", "existingCluster", "fallback"})


def decode_config(values: Mapping[str, str]) -> dict[str, Any]:
    """Turn the CLI's `tpu-fallback:<key>` strings into Python values (objects and booleans are JSON)."""
    prefix = f"{PROJECT}:"
    raw: dict[str, Any] = {}
    for full_key, text in values.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix):]
        if key in _OBJECT_KEYS or text in ("true", "false"):
            try:
                raw[key] = json.loads(text)
            except json.JSONDecodeError:
                raise fail(key, text, "expected a YAML/JSON object") from None
        else:
            raw[key] = text
    return raw
