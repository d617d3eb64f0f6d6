"""The stack-level settings and their entry point: `parse_settings` reads the top-level keys and hands each
object to the parser of its part (pools, kueue, queues, cluster, multikueue); `decode_config` turns the CLI's
config strings into the values it reads."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.egress import check_egress, check_multikueue_reachability
from tpu_fallback.model.ladder import Ladder, on_demand_quota_slices, parse_stack_ladder, two_rungs
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.settings.cluster import (
    GKE_VERSION,
    ExistingClusterSettings,
    MaintenanceSettings,
    NetworkSettings,
    check_subnetwork,
    parse_existing_cluster,
    parse_gke_version,
    parse_maintenance,
    parse_network,
)
from tpu_fallback.model.settings.common import CLUSTER_NAME, PROJECT, REGION, ZONE
from tpu_fallback.model.settings.kueue import FallbackSettings, KueueSettings, parse_fallback, parse_kueue
from tpu_fallback.model.settings.multikueue import MultiKueueSettings, node_account_ids, parse_multikueue
from tpu_fallback.model.settings.pools import (
    FlexStartSettings,
    OnDemandSettings,
    SystemPoolSettings,
    check_gke_version,
    check_plans,
    check_pool_names,
    check_zone,
    default_tpu,
    parse_flex_start,
    parse_on_demand,
    parse_system_pool,
    parse_tpu,
)
from tpu_fallback.model.settings.queues import QueueSettings, check_quotas, parse_queues
from tpu_fallback.model.validation import ConfigError, boolean, did_you_mean, fail, string

_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")  # GCP "Creating and managing projects": project IDs


@dataclass(frozen=True)
class Settings:
    project: str
    cluster_name: str = "tpu-cluster"
    location: str = "us-east5-b"
    gke_version: str = GKE_VERSION
    system_pool: SystemPoolSettings = field(default_factory=SystemPoolSettings)
    tpu: catalog.TpuSlice = field(default_factory=default_tpu)
    on_demand: OnDemandSettings = field(default_factory=OnDemandSettings)
    flex_start: FlexStartSettings = field(default_factory=FlexStartSettings)
    kueue: KueueSettings = field(default_factory=KueueSettings)
    queues: QueueSettings = field(default_factory=QueueSettings)
    fallback: FallbackSettings = field(default_factory=FallbackSettings)
    deletion_protection: bool = True
    protect: bool = False
    enable_apis: bool = True  # enable the Google APIs the stack needs (never disabled on destroy)
    # The location must be a zone the catalog lists for the TPU family (and for its flex-start, with plan B);
    # true accepts a zone Google added after the catalog's date.
    allow_unlisted_zone: bool = False
    secure_boot: bool = True  # Shielded VM secure boot on the TPU pools (the system pool always has it)
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    multikueue: MultiKueueSettings = field(default_factory=MultiKueueSettings)
    existing_cluster: ExistingClusterSettings | None = None
    node_account_id: str = ""  # the nodes' service account id; set by the parser, unique among the stack's clusters
    # The `ladder` key's rungs (tpu_fallback.model.ladder); None: onDemand -> flexStart. See capacity_ladder.
    ladder: Ladder | None = None

    @property
    def region(self) -> str:
        return self.location.rsplit("-", 1)[0]

    @property
    def on_demand_quota(self) -> Resources:
        """The on-demand flavor's cpu/memory quota: configured, or derived from plan A's TPU hosts."""
        return capacity.on_demand_quota(self.queues.on_demand_quota, self.tpu, self.on_demand.max_slices)

    @property
    def capacity_ladder(self) -> Ladder:
        """The cluster's rungs, most preferred first: its `ladder`, or today's plan A (onDemand) -> plan B
        (flexStart) as the two-rung default, whose pools, flavors and components keep their names."""
        if self.ladder is not None:
            return self.ladder
        od, flex = self.on_demand, self.flex_start
        return two_rungs(od.name, od.max_slices, od.reservation, flex.name, flex.max_slices, flex.active,
                         flex.max_run_duration)


# The project's config keys (Pulumi.yaml declares the same ones).
CONFIG_KEYS = (
    "clusterName", "location", "gkeVersion", "systemPool", "tpu", "onDemand", "flexStart", "kueue", "queues",
    "deletionProtection", "protect", "enableApis", "secureBoot", "maintenance", "network", "multikueue",
    "existingCluster", "kubeconfig", "allowUnlistedZone", "fallback", "ladder",
)
# What only a cluster this stack creates uses (config key -> Settings field): refused in existing-cluster mode
# when set to anything but its default, rather than silently ignored. (The CLI hands over Pulumi.yaml's
# defaults too, so "set" means "differs from the default".)
_CREATED_CLUSTER_ONLY = {"gkeVersion": "gke_version", "deletionProtection": "deletion_protection",
                         "protect": "protect", "enableApis": "enable_apis", "secureBoot": "secure_boot",
                         "maintenance": "maintenance", "network": "network"}
# The keys that must be secrets (Pulumi.yaml declares them `secret: true`).
SECRET_CONFIG_KEYS = frozenset({"kubeconfig"})
# The optional keys' "not set", as Pulumi.yaml declares their defaults (the CLI makes a declared key without a
# default required, takes no default of another type than the declared one, and refuses a plain default for a
# typed secret key): read as the key's absence.
UNSET = {"existingCluster": False, "kubeconfig": "", "ladder": False}


def parse_settings(raw: Mapping[str, Any], project: str | None, secret_keys: frozenset[str] = frozenset()
                   ) -> Settings:
    """Validate raw config values (keys without the project namespace, objects already decoded).

    `secret_keys` names the keys the stack holds as secrets (only `kubeconfig` must be one).
    """
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"{PROJECT}:{unknown[0]} is not a known setting{did_you_mean(unknown[0], CONFIG_KEYS)}; "
                          f"known: {', '.join(CONFIG_KEYS)}")
    raw = {key: value for key, value in raw.items() if not is_unset(key, value)}
    if not project:
        raise ConfigError("gcp:project is not set; run `pulumi config set gcp:project <your-project-id>`")
    string("gcp:project", project, _PROJECT_ID, "a GCP project id has 6 to 30 lowercase letters, digits or hyphens, "
           "starts with a letter and does not end with a hyphen (the id, not the project's display name or number)")
    defaults = Settings(project=project)
    cluster_name = string(
        "clusterName", raw.get("clusterName", defaults.cluster_name), CLUSTER_NAME,
        "GKE cluster names use lowercase letters, digits and hyphens, start with a letter, "
        "end with a letter or digit and have at most 40 characters",
    )
    location = raw.get("location", defaults.location)
    if isinstance(location, str) and REGION.match(location):
        raise fail("location", location, f"a zone is required, not a region (e.g. {location}-b): "
                   "TPU slices and their COMPACT placement live in one zone")
    location = string("location", location, ZONE, "expected a zone such as us-east5-b")
    gke_version = parse_gke_version(raw.get("gkeVersion", defaults.gke_version))

    tpu = parse_tpu(raw.get("tpu"))
    # Today's gkeVersion floor is above every family's minimum; the check keeps a lower floor from slipping through.
    check_gke_version(tpu, gke_version)
    system_pool = parse_system_pool(raw.get("systemPool"))
    on_demand = parse_on_demand(raw.get("onDemand"))
    flex_start = parse_flex_start(raw.get("flexStart"))
    kueue = parse_kueue(raw.get("kueue"))
    queues = parse_queues(raw.get("queues"))
    ladder = parse_stack_ladder(raw, tpu, location, system_pool.name, queues.cap_flex_start,
                                queues.on_demand_quota is not None, {"onDemand": on_demand, "flexStart": flex_start})
    if ladder is not None:  # its rungs replace plan A and plan B
        on_demand, flex_start = OnDemandSettings(max_slices=0), FlexStartSettings(enabled=False)
    fallback = parse_fallback(raw.get("fallback"), kueue, on_demand.max_slices > 0 and flex_start.active
                              if ladder is None else len(ladder.rungs) > 1)

    if ladder is None:
        check_plans(tpu, on_demand, flex_start)
    allow_unlisted_zone = boolean("allowUnlistedZone", raw.get("allowUnlistedZone", defaults.allow_unlisted_zone))
    if not allow_unlisted_zone:
        check_zone(location, tpu.family, flex_start)
    check_pool_names(tpu, system_pool, on_demand, flex_start)

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
        deletion_protection=boolean("deletionProtection",
                                    raw.get("deletionProtection", defaults.deletion_protection)),
        protect=boolean("protect", raw.get("protect", defaults.protect)),
        enable_apis=boolean("enableApis", raw.get("enableApis", defaults.enable_apis)),
        allow_unlisted_zone=allow_unlisted_zone,
        secure_boot=boolean("secureBoot", raw.get("secureBoot", defaults.secure_boot)),
        maintenance=parse_maintenance(raw.get("maintenance")),
        network=parse_network(raw.get("network")),
        ladder=ladder,
    )
    check_quotas(queues, tpu, on_demand_quota_slices(ladder, on_demand.max_slices, queues.on_demand_quota is not None))
    check_egress(project, settings.network)
    created_only = [k for k, attr in _CREATED_CLUSTER_ONLY.items()
                    if getattr(settings, attr) != getattr(defaults, attr)]
    settings = replace(settings, node_account_id=node_account_ids([cluster_name])[0],
                       existing_cluster=parse_existing_cluster(raw, cluster_name, location, kueue.install,
                                                               created_only, secret_keys))
    multikueue = parse_multikueue(raw, settings, lambda worker_raw: parse_settings(worker_raw, project))
    # Every cluster of the stack uses network.subnetwork: the one cluster, or the manager and each worker (whose own
    # parse checked theirs).
    if multikueue.enabled and multikueue.manager is not None:
        check_subnetwork(settings.network, multikueue.manager.location, project, "the MultiKueue manager")
    else:
        check_subnetwork(settings.network, location, project)
    if multikueue.enabled:
        check_multikueue_reachability(settings.network)
        settings = replace(settings, multikueue=multikueue)
    return settings


def is_unset(key: str, value: Any) -> bool:
    """An optional key at its Pulumi.yaml default, which stands for its absence (UNSET)."""
    return key in UNSET and type(value) is type(UNSET[key]) and value == UNSET[key]


# --------------------------------------------------------------------------------------------
# The CLI's config strings
# --------------------------------------------------------------------------------------------


# The keys whose values are objects (the CLI hands them over as JSON; Pulumi.yaml declares them `type: object`).
OBJECT_CONFIG_KEYS = frozenset({"systemPool", "tpu", "onDemand", "flexStart", "kueue", "queues", "maintenance",
                                "network", "multikueue", "existingCluster", "fallback", "ladder"})


def decode_config(values: Mapping[str, str]) -> dict[str, Any]:
    """Turn the CLI's `tpu-fallback:<key>` strings into Python values (objects and booleans are JSON)."""
    prefix = f"{PROJECT}:"
    raw: dict[str, Any] = {}
    for full_key, text in values.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix):]
        if key in OBJECT_CONFIG_KEYS or text in ("true", "false"):
            try:
                raw[key] = json.loads(text)
            except json.JSONDecodeError:
                raise fail(key, text, "expected a YAML/JSON object") from None
        else:
            raw[key] = text
    return raw
