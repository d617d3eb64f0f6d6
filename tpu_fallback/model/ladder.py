"""The capacity ladder: the kinds of TPU capacity a cluster tries, most preferred first. Pure Python.

A rung is one kind of capacity with its own node pool(s) and size: a `reservation` (already paid for: used first),
`onDemand`, `spot` (cheapest, preemptible: only jobs that opt in land there) and `flexStart` (DWS queued
provisioning, up to 7 days). Kueue gets one flavor per rung's pool, in ladder order (tpu_fallback.model.queues).

Two ways to write one:

- today's `onDemand` / `flexStart` keys are the two-rung default (`two_rungs`): its rungs keep the names of
  everything they make (pool components `plan-a` / `plan-b`, flavors `on-demand` / `dws`), so existing stacks keep
  their URNs and objects;
- the `ladder` key is an ordered list of rungs (`parse_ladder`): each rung's name is its flavor's name and its pool
  component is `rung-<name>`.

Every rung of a cluster runs the cluster's one TPU slice shape (`tpu`): a job moves between rungs, so it must fit
each of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.validation import DNS_LABEL, boolean, fail, integer, object_, string

RESERVATION, ON_DEMAND, SPOT, FLEX_START = "reservation", capacity.ON_DEMAND, "spot", capacity.FLEX_START
# The `kind` a stack file writes -> the kind's internal name (the plan names of the two-rung default, so today's
# objects and reports do not change).
KINDS: dict[str, str] = {"reservation": RESERVATION, "onDemand": ON_DEMAND, "spot": SPOT, "flexStart": FLEX_START}
CONFIG_KIND = {kind: word for word, kind in KINDS.items()}
KIND_TEXT = {RESERVATION: "reservation", ON_DEMAND: "on-demand", SPOT: "spot", FLEX_START: "DWS flex-start"}

RUNG_KEYS = ("name", "kind", "pool", "maxSlices", "reservation", "maxRunDuration")
RESERVATION_KEYS = ("name", "size", "project")
# A GCP project id (as settings' gcp:project): Resource Manager, "Creating and managing projects": 6 to 30 lowercase
# letters, digits or hyphens, starting with a letter and not ending with a hyphen.
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
# The flavor of the system pool (tpu_fallback.model.queues.SYSTEM_FLAVOR): no rung may take its name.
SYSTEM_FLAVOR = "default-cpu"
MAX_POOL_NAME = 40  # GKE node pool names
# A ClusterQueue resource group lists at most 64 flavors (kueue.x-k8s.io/v1beta2 ResourceGroup.flavors MaxItems).
MAX_FLAVORS = 64
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600  # flex-start's limit
_POOL_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
# Compute Engine resource names (RFC 1035): a lowercase letter first, then lowercase letters, digits or hyphens, at most
# 63 characters, not ending with a hyphen.
RESERVATION_NAME_RULE = ("expected the name of a specific Compute Engine reservation in the cluster's zone: lowercase "
                         "letters, digits and hyphens, at most 63 characters")
_DURATION = re.compile(r"^\d+s$")


@dataclass(frozen=True)
class Reservation:
    """A specific Compute Engine reservation the rung's pools consume (reservation_affinity SPECIFIC)."""

    name: str
    size: int  # slices of the cluster's TPU shape it holds (hostsPerSlice VMs each)
    project: str | None = None  # its owner project when shared from another project; None: the cluster's own

    @property
    def affinity_value(self) -> str:
        """The node pools' reservation_affinity value: the name of a reservation in the cluster's own project, or
        `projects/<owner project>/reservations/<name>` for one shared from another project.

        GKE "Consuming reserved zonal resources"
        (https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations#specific_shared): a Standard
        node pool consumes a specific reservation shared from another project by its resource path; as Google's xpk
        PR #823 sums that section up, "Node pool can be created with reservations shared from projects different
        from cluster project (by supplying resource path)", and xpk passes GKE TPU node pools exactly this value
        (AI-Hypercomputer/xpk 367c838253bea41e7d7716145ad6513f44c1a21e, src/xpk/core/reservation.py
        to_reservation_path: the name in the cluster's project, else
        `projects/{reservation.project}/reservations/{reservation.name}`, to `--reservation-affinity=specific
        --reservation=...`, src/xpk/core/capacity.py). (Cloud TPU's "Consume a reservation" is the TPU API's
        queued-resources form, not a GKE node pool's.)
        Compute Engine's ReservationAffinity.values (REST v1) agrees: "either a name to a reservation in the same
        project or "projects/different-project/reservations/some-reservation-name" to target a shared reservation in
        the same zone but in a different project". pulumi-gcp NodePoolNodeConfigReservationAffinity.values: "The
        list of label values of reservation resources" (with key compute.googleapis.com/reservation-name)."""
        return self.name if self.project is None else f"projects/{self.project}/reservations/{self.name}"


@dataclass(frozen=True)
class Rung:
    name: str  # the rung's name; in a `ladder`, also its first flavor's name
    kind: str  # RESERVATION, ON_DEMAND, SPOT or FLEX_START
    pool: str  # the base name of its node pools (`<pool>`, `<pool>-2`, ... for multi-host slices)
    max_slices: int
    flavor: str  # the base name of its flavors (`<flavor>`, `<flavor>-2`, ... one per pool)
    component: str  # the suffix of its TpuNodePool component's name (`<cluster>-<component>`)
    key: str  # where it is configured, for messages: `onDemand`, `ladder[2]`
    reservation: Reservation | None = None
    max_run_duration: str | None = None  # flexStart only: "86400s"

    @property
    def queued(self) -> bool:
        """Queued provisioning (DWS): never closed by the fallback; jobs wait there for capacity."""
        return self.kind == FLEX_START

    @property
    def preemptible(self) -> bool:
        return self.kind == SPOT

    @property
    def reserved(self) -> bool:
        """Its pools consume a specific reservation (a reservation rung, or today's onDemand with its `reservation`):
        capacity held for it, so the fallback controller moves a job up to it without a Ready node."""
        return self.reservation is not None

    @property
    def closable(self) -> bool:
        """The fallback controller closes (taints) this rung's flavors on its own stock-out evidence."""
        return not self.queued

    def pools(self, tpu: catalog.TpuSlice) -> tuple[capacity.PoolShape, ...]:
        return capacity.pool_layout(self.pool, tpu, self.max_slices)

    def flavors(self, tpu: catalog.TpuSlice) -> list[str]:
        """One flavor per pool, in pool order."""
        count = len(self.pools(tpu))
        return [self.flavor] + [f"{self.flavor}-{i}" for i in range(2, count + 1)]


@dataclass(frozen=True)
class Ladder:
    rungs: tuple[Rung, ...]  # most preferred first; only rungs with capacity
    explicit: bool = False  # written as `ladder`; False: today's onDemand/flexStart keys

    def of_kind(self, kind: str) -> tuple[Rung, ...]:
        return tuple(r for r in self.rungs if r.kind == kind)

    @property
    def queued(self) -> Rung | None:
        return next((r for r in self.rungs if r.queued), None)

    def rung(self, name: str) -> Rung | None:
        return next((r for r in self.rungs if r.name == name), None)


def two_rungs(on_demand_pool: str, on_demand_slices: int, reservation: str | None, flex_pool: str,
              flex_slices: int, flex_active: bool, max_run_duration: str | None) -> Ladder:
    """Today's plan A (onDemand) -> plan B (flexStart) as a ladder, with the names of everything they make kept."""
    rungs = []
    if on_demand_slices > 0:
        rungs.append(Rung(ON_DEMAND, ON_DEMAND, on_demand_pool, on_demand_slices, "on-demand", "plan-a", "onDemand",
                          Reservation(reservation, on_demand_slices) if reservation else None))
    if flex_active and flex_slices > 0:
        rungs.append(Rung(FLEX_START, FLEX_START, flex_pool, flex_slices, "dws", "plan-b", "flexStart",
                          max_run_duration=max_run_duration))
    return Ladder(tuple(rungs))


def parse_ladder(value: Any, tpu: catalog.TpuSlice, location: str, allow_unlisted_zone: bool = False,
                 cap_flex_start: bool = False, system_pool: str = "default-pool") -> Ladder:
    """The `ladder` key: a non-empty list of rungs, most preferred first. Every rule raises a ConfigError naming the
    setting, the value and what is allowed."""
    allowed_kinds = ", ".join(KINDS)
    if not isinstance(value, list) or not value:
        raise fail("ladder", value, "expected a non-empty list of rungs, most preferred first, each {name, kind: "
                   f"{' | '.join(KINDS)}, maxSlices, ...}}; leave ladder out for the onDemand/flexStart plans")
    rungs: list[Rung] = []
    for i, entry in enumerate(value):
        key = f"ladder[{i}]"
        item = object_(key, entry, RUNG_KEYS)
        name = string(f"{key}.name", item.get("name"), DNS_LABEL,
                      "expected a short lowercase name such as reserved, on-demand, spot or flex (it names the "
                      "rung's Kueue flavor)")
        if len(name) > 60:
            raise fail(f"{key}.name", name, "at most 60 characters (it names the rung's Kueue flavors, `-2` ... "
                       "added per extra pool)")
        if name == SYSTEM_FLAVOR:
            raise fail(f"{key}.name", name, f"{SYSTEM_FLAVOR} is the system pool's flavor; pick another name")
        if any(r.name == name for r in rungs):
            raise fail(f"{key}.name", name, "rung names must be unique")
        word = item.get("kind")
        if not isinstance(word, str) or word not in KINDS:
            raise fail(f"{key}.kind", word, f"expected one of {allowed_kinds}")
        kind = KINDS[word]
        if kind != RESERVATION and "reservation" in item:
            raise fail(f"{key}.reservation", item["reservation"], f"only a rung of kind reservation consumes a "
                       f"reservation (this one is {word}); make it kind: reservation or leave reservation out")
        if kind != FLEX_START and "maxRunDuration" in item:
            raise fail(f"{key}.maxRunDuration", item["maxRunDuration"],
                       f"only a flexStart rung has a maximum run duration (this one is {word})")
        reservation = _reservation(f"{key}.reservation", item.get("reservation")) if kind == RESERVATION else None
        default_slices = reservation.size if reservation is not None else None
        if "maxSlices" not in item and default_slices is None:
            raise fail(f"{key}.maxSlices", None, "expected an integer >= 1: how many slices this rung can run")
        max_slices = integer(f"{key}.maxSlices", item.get("maxSlices", default_slices), minimum=1)
        if reservation is not None and max_slices > reservation.size:
            raise fail(f"{key}.maxSlices", max_slices, f"at most reservation.size ({reservation.size}): a pool that "
                       "consumes a specific reservation gets no node beyond it")
        pool = string(f"{key}.pool", item.get("pool", f"{name}-pool"), _POOL_NAME,
                      "node pool names use lowercase letters, digits and hyphens, start with a letter and have at "
                      f"most {MAX_POOL_NAME} characters")
        duration = item.get("maxRunDuration")
        if duration is not None:
            string(f"{key}.maxRunDuration", duration, _DURATION, 'expected seconds such as "86400s"')
            if not 0 < int(duration[:-1]) <= MAX_RUN_DURATION_SECONDS:
                raise fail(f"{key}.maxRunDuration", duration, f"must be between 1s and {MAX_RUN_DURATION_SECONDS}s "
                           "(7 days, the flex-start limit)")
        rungs.append(Rung(name, kind, pool, max_slices, name, f"rung-{name}", key, reservation, duration))

    _check_kinds(rungs, cap_flex_start)
    _check_flex_start(rungs, tpu.family, location, allow_unlisted_zone)
    ladder = Ladder(tuple(rungs), explicit=True)
    check_names(ladder, tpu, system_pool)
    return ladder


def _reservation(key: str, value: Any) -> Reservation:
    if value is None:
        raise fail(key, value, "a reservation rung needs {name, size}: the specific reservation's name and how many "
                   "slices it holds")
    obj = object_(key, value, RESERVATION_KEYS)
    project = obj.get("project")
    if project is not None:
        string(f"{key}.project", project, _PROJECT_ID,
               "the id of the project that owns a reservation shared with this cluster's project (6 to 30 lowercase "
               "letters, digits or hyphens, starting with a letter, not ending with a hyphen: the id, not its "
               "number or display name); leave project out for a reservation of the cluster's own project")
    name = obj.get("name")
    if isinstance(name, str) and name.startswith("projects/"):
        raise fail(f"{key}.name", name, "the reservation's name only: a reservation shared from another project is "
                   "{name: <name>, project: <its owner project id>}")
    return Reservation(
        name=string(f"{key}.name", name, DNS_LABEL, RESERVATION_NAME_RULE),
        size=integer(f"{key}.size", obj.get("size"), minimum=1),
        project=project,
    )


def _check_kinds(rungs: list[Rung], cap_flex_start: bool) -> None:
    """At most one rung of each kind but reservation (several reservations are several rungs); one queued rung,
    the last unless its quota is capped (an unlimited queued flavor takes every job that reaches it)."""
    seen: dict[str, Rung] = {}
    for rung in rungs:
        first = seen.get(rung.kind)
        if first is not None and rung.kind != RESERVATION:
            word = CONFIG_KIND[rung.kind]
            if rung.queued:
                raise fail(f"{rung.key}.kind", word, f"a ladder has at most one queued rung and {first.key} "
                           f"({first.name}) is already flexStart: Kueue's ProvisioningRequest check and the fallback "
                           "controller treat the queued rung as the ladder's last resort")
            raise fail(f"{rung.key}.kind", word, f"{first.key} ({first.name}) is already {word}: one {word} rung per "
                       "cluster (give it more maxSlices instead); only reservation rungs may repeat, one per "
                       "reservation")
        seen.setdefault(rung.kind, rung)
    queued = next((i for i, r in enumerate(rungs) if r.queued), None)
    if queued is not None and queued != len(rungs) - 1 and not cap_flex_start:
        rung = rungs[queued]
        raise fail(f"{rung.key}.kind", "flexStart", f"the flexStart rung must be the last: its flavor's quota is "
                   f"unlimited (jobs wait there for DWS capacity), so {rungs[queued + 1].key} "
                   f"({rungs[queued + 1].name}) would never be tried; move it last, or cap it at its pool's size "
                   "with queues.capFlexStart: true")
    # One reservation is its owner project and name: the same name in two projects is two reservations.
    names = [r.reservation.affinity_value for r in rungs if r.reservation is not None]
    for rung in rungs:
        if rung.reservation is not None and names.count(rung.reservation.affinity_value) > 1:
            raise fail(f"{rung.key}.reservation.name", rung.reservation.name,
                       "another rung consumes the same reservation; one rung per reservation (add its slices there)")


def _check_flex_start(rungs: list[Rung], family: catalog.TpuFamily, location: str, allow_unlisted_zone: bool) -> None:
    rung = next((r for r in rungs if r.queued), None)
    if rung is None:
        return
    if not family.supports_flex_start:
        offered = ", ".join(f.name for f in catalog.FAMILIES.values() if f.supports_flex_start)
        raise fail(f"{rung.key}.kind", "flexStart", f"GKE offers no flex-start for tpu.type {family.name}; flex-start "
                   f"is offered for {offered} (as listed on {catalog.CATALOG_DATE})")
    if location not in family.flex_start_zones and not allow_unlisted_zone:
        raise fail(f"{rung.key}.kind", "flexStart", f"GKE offers {family.name} flex-start only in "
                   f"{', '.join(sorted(family.flex_start_zones))} (as listed on {catalog.CATALOG_DATE}), not in "
                   f"location {location}; pick one of those zones, leave the flexStart rung out, or set "
                   "allowUnlistedZone true if GKE now offers it there")


def check_names(ladder: Ladder, tpu: catalog.TpuSlice, system_pool: str) -> None:
    """Pool names unique (with the system pool's) and within GKE's 40 characters with their `-N` suffixes; flavor
    names unique (with default-cpu's)."""
    pools: dict[str, str] = {system_pool: "systemPool.name"}
    flavors: dict[str, str] = {SYSTEM_FLAVOR: "the system pool"}
    for rung in ladder.rungs:
        pool_key = f"{rung.key}.pool" if ladder.explicit else f"{rung.key}.name"
        shapes = rung.pools(tpu)
        longest = max((p.name for p in shapes), key=len, default=rung.pool)
        if len(longest) > MAX_POOL_NAME:
            raise fail(pool_key, rung.pool, f"with maxSlices {rung.max_slices} its last pool is named {longest} "
                       f"({len(longest)} characters); GKE allows {MAX_POOL_NAME}: shorten it to at most "
                       f"{MAX_POOL_NAME - (len(longest) - len(rung.pool))} characters")
        for shape in shapes:
            if shape.name in pools:
                raise fail(pool_key, rung.pool, f"its pool {shape.name} clashes with {pools[shape.name]}; node pool "
                           "names must be unique")
            pools[shape.name] = pool_key
        for flavor in rung.flavors(tpu):
            if flavor in flavors:
                raise fail(f"{rung.key}.name", rung.name, f"its flavor {flavor} clashes with {flavors[flavor]}'s; "
                           "rename one of them")
            flavors[flavor] = rung.key


def describe(rung: Rung) -> str:
    """`spot (spot, 2 slices)` for messages and reports."""
    return f"{rung.name} ({KIND_TEXT[rung.kind]}, {rung.max_slices} slice{'s' if rung.max_slices != 1 else ''})"


def parse_stack_ladder(raw: Mapping[str, Any], tpu: catalog.TpuSlice, location: str, system_pool: str,
                       cap_flex_start: bool, on_demand_quota_set: bool, plans: Mapping[str, object]) -> Ladder | None:
    """A stack's `ladder` key (None without one), checked against the rest of its config: the ladder replaces
    `onDemand` and `flexStart` (given `plans`, their parsed values, refused unless left at their defaults), a
    configured `queues.quotas.onDemand` needs an onDemand rung, and the fallback needs two rungs or more."""
    value = raw.get("ladder")
    if value is None:
        return None
    if isinstance(value, str):  # the CLI hands a structured value over as JSON text
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise fail("ladder", value, "expected a YAML list of rungs") from None
    for key, parsed in plans.items():
        if parsed != type(parsed)():
            raise fail(key, raw.get(key), "a stack with a ladder writes its capacity as rungs: make it a rung of the "
                       f"ladder (kind: {key}) and leave {key} out")
    ladder = parse_ladder(value, tpu, location, boolean("allowUnlistedZone", raw.get("allowUnlistedZone",
                                                                                                False)),
                          cap_flex_start, system_pool)
    if on_demand_quota_set and not ladder.of_kind(ON_DEMAND):
        raise fail("queues.quotas.onDemand", (raw.get("queues") or {}).get("quotas", {}).get("onDemand"),
                   "the ladder has no onDemand rung to apply it to; leave it out (every rung's quota is its pools' "
                   "size)")
    fallback = raw.get("fallback") or {}
    if isinstance(fallback, Mapping) and fallback.get("enabled") in (True, "true") and len(ladder.rungs) < 2:
        raise fail("fallback.enabled", True, "the fallback moves jobs between rungs: it needs a ladder of two rungs "
                   "or more")
    flavors = 1 + sum(len(r.pools(tpu)) for r in ladder.rungs)
    if flavors > MAX_FLAVORS:
        biggest = max(ladder.rungs, key=lambda r: len(r.pools(tpu)))
        raise fail(f"{biggest.key}.maxSlices", biggest.max_slices, f"the ladder's rungs make {flavors - 1} node pools "
                   f"(one per multi-host {tpu.topology} slice), each a Kueue flavor, and a ClusterQueue takes at most "
                   f"{MAX_FLAVORS} flavors (one is default-cpu): give the rungs {MAX_FLAVORS - 1} slices in all, or "
                   "fewer")
    return ladder


def on_demand_quota_slices(ladder: Ladder | None, on_demand_slices: int, on_demand_quota_set: bool) -> int:
    """The slices whose on-demand quota queues.quotas.onDemand must admit (settings' check_quotas): plan A's; in a
    ladder the onDemand rung's, and only when the quota is configured (every rung's own is its pools' size)."""
    if ladder is None:
        return on_demand_slices
    rung = next(iter(ladder.of_kind(ON_DEMAND)), None)
    return rung.max_slices if rung is not None and on_demand_quota_set else 0
