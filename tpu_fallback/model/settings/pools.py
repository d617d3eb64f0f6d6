"""The node pools and the TPU slice: the system (CPU) pool, plan A's on-demand pools, plan B's flex-start pools,
and the checks that tie them to the TPU catalog (zones, flex-start support, unique names, GKE's and Kueue's
limits on names and flavors)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpu_fallback.model import catalog
from tpu_fallback.model.ladder import RESERVATION_NAME_RULE, two_rungs
from tpu_fallback.model.settings.common import pool_name
from tpu_fallback.model.validation import (
    DNS_LABEL,
    ConfigError,
    boolean,
    did_you_mean,
    fail,
    integer,
    object_,
    show,
    string,
)

# The tutorial's slice: TPU v6e, a 4x4 topology (one 16-chip slice on four ct6e-standard-4t hosts).
TPU_TYPE = "v6e"
TPU_TOPOLOGY = "4x4"
# GKE node pool names: a letter, then up to 39 lowercase letters, digits or hyphens, not ending in a hyphen.
MAX_POOL_NAME = 40
# A ClusterQueue resource group lists at most 64 flavors (kueue.x-k8s.io/v1beta2 ResourceGroup.flavors MaxItems).
MAX_FLAVORS = 64
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600

_DURATION = re.compile(r"^\d+s$")
_MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9-]+$")


def default_tpu() -> catalog.TpuSlice:
    return catalog.resolve_slice(TPU_TYPE, TPU_TOPOLOGY)


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


def parse_tpu(value: Any) -> catalog.TpuSlice:
    obj = object_("tpu", value, ("type", "topology", "machineType", "hostVcpus", "hostMemoryGib"))
    family_name = string("tpu.type", obj.get("type", TPU_TYPE), None, f"expected one of {', '.join(catalog.FAMILIES)}")
    if family_name not in catalog.FAMILIES:
        known = _FAMILY_NAMES.get(family_name.lower().replace(" ", ""))
        hint = (f" ({family_name} is tpu.type {known})" if known else did_you_mean(family_name, catalog.FAMILIES))
        raise fail("tpu.type", family_name, f"unknown TPU family{hint}; valid: {', '.join(catalog.FAMILIES)}")
    fam = catalog.FAMILIES[family_name]
    if obj.get("topology") is None and TPU_TOPOLOGY not in fam.topologies:
        raise fail("tpu.topology", None, f"{fam.name} has no {TPU_TOPOLOGY} slice (the default, the tutorial's v6e "
                   f"shape): give tpu.topology; valid for {fam.name}: {fam.describe_topologies()}")
    topology = string("tpu.topology", obj.get("topology", TPU_TOPOLOGY), None,
                      "expected a topology string such as 4x4")
    machine_type = obj.get("machineType")
    if machine_type is not None:
        string("tpu.machineType", machine_type)
        if fam.machine_type(machine_type) is None:
            raise fail("tpu.machineType", machine_type,
                       f"not a {fam.name} machine type; valid: {', '.join(m.name for m in fam.machine_types)}")
    if topology not in fam.topologies:
        raise fail("tpu.topology", topology, f"not a valid {fam.name} topology; valid: {fam.describe_topologies()}")
    try:
        tpu = catalog.resolve_slice(family_name, topology, machine_type)
    except catalog.CatalogError as err:
        raise fail("tpu.topology", topology, str(err)) from None
    host_size = _host_size(obj, tpu.machine)
    return tpu if host_size is None else catalog.resolve_slice(family_name, topology, tpu.machine_type, host_size)


# What people call a TPU generation -> its tpu.type (Google's product names; Cloud TPU "TPU versions").
_FAMILY_NAMES = {"ironwood": "tpu7x", "v7x": "tpu7x", "v7": "tpu7x", "tpuv7x": "tpu7x", "tpu7": "tpu7x",
                 "trillium": "v6e", "tpuv6e": "v6e", "v5litepod": "v5e", "v5lite": "v5e", "tpuv5e": "v5e",
                 "tpuv5p": "v5p", "tpuv4": "v4"}


def _host_size(obj: Mapping[str, Any], machine: catalog.MachineType) -> tuple[int, int] | None:
    """tpu.hostVcpus / tpu.hostMemoryGib: required where the catalog has no source for the VM's size (Kueue's cpu and
    memory quotas are sized from it), refused where it has one (the catalog's sourced figure stays the one used)."""
    given = {key: obj[key] for key in ("hostVcpus", "hostMemoryGib") if obj.get(key) is not None}
    if machine.size_known:
        if given:
            key = next(iter(given))
            raise fail(f"tpu.{key}", given[key], f"only for a machine type whose size the catalog lacks; "
                       f"{machine.name} has {machine.vcpus} vCPU and {machine.memory_gib} GiB in the catalog")
        return None
    for key in ("hostVcpus", "hostMemoryGib"):
        if key not in given:
            raise fail(f"tpu.{key}", None, f"required for {machine.name}: its vCPU and memory, from which Kueue's "
                       "cpu/memory quotas are sized, are not in the catalog (no Google source found as of "
                       f"{catalog.CATALOG_DATE}); give tpu.hostVcpus and tpu.hostMemoryGib as `gcloud compute "
                       f"machine-types describe {machine.name} --zone ZONE --format='value(guestCpus,memoryMb)'` "
                       "reports them (memoryMb / 1024, rounded down)")
    return (integer("tpu.hostVcpus", given["hostVcpus"], minimum=1),
            integer("tpu.hostMemoryGib", given["hostMemoryGib"], minimum=1))


def check_gke_version(tpu: catalog.TpuSlice, gke_version: str) -> None:
    """The cluster's minimum GKE version (gkeVersion) must be one GKE offers the TPU family on. Versions compare
    part by part; a part left out means the newest GKE picks, so 1.34 satisfies 1.34.0-gke.2201000."""
    needed = tpu.family.min_gke_version
    if needed is not None and _version_key(gke_version) < _version_key(needed):
        raise fail("gkeVersion", gke_version, f"{tpu.family.name} node pools need GKE {needed} or later "
                   f"(tpu.type {show(tpu.family.name)}); set gkeVersion to {needed} or a later minor")


def _version_key(version: str) -> tuple[float, ...]:
    parts = [float(p) for p in re.split(r"[.]|-gke[.]", version)]
    return tuple(parts + [float("inf")] * (4 - len(parts)))


def parse_system_pool(value: Any) -> SystemPoolSettings:
    d = SystemPoolSettings()
    obj = object_("systemPool", value, ("name", "machineType", "nodeCount"))
    return SystemPoolSettings(
        name=pool_name("systemPool.name", obj.get("name", d.name)),
        machine_type=string("systemPool.machineType", obj.get("machineType", d.machine_type), _MACHINE_TYPE,
                            "expected a Compute Engine machine type such as n2-standard-16"),
        node_count=integer("systemPool.nodeCount", obj.get("nodeCount", d.node_count), minimum=1),
    )


def parse_on_demand(value: Any) -> OnDemandSettings:
    d = OnDemandSettings()
    obj = object_("onDemand", value, ("name", "maxSlices", "reservation"))
    reservation = obj.get("reservation", d.reservation)
    if isinstance(reservation, str) and reservation.startswith("projects/"):
        raise fail("onDemand.reservation", reservation, "plan A consumes a reservation of the cluster's own project, "
                   "by name; for one shared from another project write a ladder with a reservation rung, "
                   "reservation: {name, size, project} (docs/capacity-ladder.md)")
    if reservation is not None:
        reservation = string("onDemand.reservation", reservation, DNS_LABEL, RESERVATION_NAME_RULE)
    return OnDemandSettings(
        name=pool_name("onDemand.name", obj.get("name", d.name)),
        max_slices=integer("onDemand.maxSlices", obj.get("maxSlices", d.max_slices)),
        reservation=reservation,
    )


def parse_flex_start(value: Any) -> FlexStartSettings:
    d = FlexStartSettings()
    obj = object_("flexStart", value, ("enabled", "name", "maxSlices", "maxRunDuration"))
    duration = obj.get("maxRunDuration", d.max_run_duration)
    if duration is not None:
        string("flexStart.maxRunDuration", duration, _DURATION, 'expected seconds such as "86400s"')
        if not 0 < int(duration[:-1]) <= MAX_RUN_DURATION_SECONDS:
            raise fail("flexStart.maxRunDuration", duration, f"must be between 1s and {MAX_RUN_DURATION_SECONDS}s "
                       "(7 days, the flex-start limit)")
    return FlexStartSettings(
        enabled=boolean("flexStart.enabled", obj.get("enabled", d.enabled)),
        name=pool_name("flexStart.name", obj.get("name", d.name)),
        max_slices=integer("flexStart.maxSlices", obj.get("maxSlices", d.max_slices)),
        max_run_duration=duration,
    )


def check_plans(tpu: catalog.TpuSlice, on_demand: OnDemandSettings, flex_start: FlexStartSettings) -> None:
    """At least one plan has TPU capacity, and plan B only for a family GKE offers flex-start for."""
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


def check_zone(location: str, family: catalog.TpuFamily, flex_start: FlexStartSettings) -> None:
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


def check_pool_names(tpu: catalog.TpuSlice, system_pool: SystemPoolSettings, on_demand: OnDemandSettings,
                     flex_start: FlexStartSettings) -> None:
    """Unique pool names, within GKE's name length once numbered per slice, and few enough pools for Kueue."""
    names = [("systemPool.name", system_pool.name), ("onDemand.name", on_demand.name)]
    if flex_start.enabled:
        names.append(("flexStart.name", flex_start.name))
    seen: dict[str, str] = {}
    for key, name in names:
        if name in seen:
            raise fail(key, name, f"node pool names must be unique; {seen[name]} already uses it")
        seen[name] = key
    # The pools each plan makes: its rung's (model/ladder.py, Rung.pools), the one home of that arithmetic.
    rungs = two_rungs(on_demand.name, on_demand.max_slices, on_demand.reservation, flex_start.name,
                      flex_start.max_slices, flex_start.active, flex_start.max_run_duration).rungs
    pool_count = sum(len(rung.pools(tpu)) for rung in rungs)
    if pool_count + 1 > MAX_FLAVORS:
        raise fail("onDemand.maxSlices", on_demand.max_slices,
                   f"with flexStart.maxSlices {flex_start.max_slices} that is {pool_count} multi-host pools, each its "
                   f"own Kueue flavor; a ClusterQueue takes at most {MAX_FLAVORS} flavors (one is default-cpu)")
    for rung in rungs:
        longest = max((p.name for p in rung.pools(tpu)), key=len, default="")
        if len(longest) > MAX_POOL_NAME:
            raise fail(f"{rung.key}.name", rung.pool, f"with {rung.key}.maxSlices {rung.max_slices} its last pool is "
                       f"named {longest} ({len(longest)} characters); GKE allows {MAX_POOL_NAME}: shorten it to at "
                       f"most {MAX_POOL_NAME - (len(longest) - len(rung.pool))} characters")
