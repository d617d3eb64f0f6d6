"""The controller's settings: the config.json the infra stack renders (tpu_fallback/render/fallback.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.lease import LeaseRef


@dataclass(frozen=True)
class Settings:
    decide: d.Config
    poll_interval: float = 5.0
    metrics_port: int = 9090  # 0: no metrics endpoint
    # The controller's own Deployment ("namespace/name"): when it is deleted or scaled to zero, the controller
    # reopens plan A on its way out, so no taint outlives it. None: run outside a Deployment (tests, --once).
    deployment: str | None = None
    # A label selector for the nodes of plan A's pools, the only nodes decide.py looks at (render/fallback.py
    # derives it from the plan A flavors' nodeLabels); None: every node is read.
    node_selector: str | None = None
    # The Lease only whose holder acts (lease.py; "lease", else named after the Deployment); None: no lease.
    lease: LeaseRef | None = None

    @classmethod
    def from_file(cls, path: Path) -> Settings:
        """The config.json the infra stack renders (tpu_fallback/render/fallback.py writes the same keys)."""
        raw = json.loads(path.read_text())
        rungs = parse_rungs(raw["rungs"]) if "rungs" in raw else ()
        if rungs:
            plan_a = tuple(f for r in rungs if not r.queued for f in r.flavors)
            plan_b = tuple(f for r in rungs if r.queued for f in r.flavors)
            selectors = [str(r["nodeSelector"]) for r in raw["rungs"] if not r.get("queued") and r.get("nodeSelector")]
            closable = sum(1 for r in rungs if not r.queued)
            node_selector = merge_selectors(selectors) if len(selectors) == closable else None
        else:
            plan_a, plan_b = tuple(raw["planAFlavors"]), tuple(raw["planBFlavors"])
            node_selector = raw.get("planANodeSelector") or None
        plan_a_reserved = raw.get("planAReserved", False)
        if not isinstance(plan_a_reserved, bool) or (plan_a_reserved and rungs):
            raise ValueError(f"planAReserved {plan_a_reserved!r} is invalid: expected true or false, and only without "
                             "\"rungs\" (a ladder marks its reserved rungs itself)")
        return cls(
            decide=d.Config(
                plan_a_flavors=plan_a, plan_b_flavors=plan_b,
                stockout_after=float(raw["stockoutAfterSeconds"]), cool_down=float(raw["coolDownSeconds"]),
                taint_key=str(raw["taintKey"]), move_back=bool(raw["moveBack"]), rungs=rungs,
                plan_a_reserved=plan_a_reserved,
            ),
            poll_interval=float(raw["pollIntervalSeconds"]), metrics_port=int(raw["metricsPort"]),
            deployment=raw.get("deployment"), node_selector=node_selector,
            lease=LeaseRef.from_config(raw, raw.get("deployment")),
        )


_RUNG_KEYS = {"name", "flavors", "queued", "reserved", "nodeSelector"}


def parse_rungs(raw: Any) -> tuple[d.Rung, ...]:
    """config.json's "rungs": [{"name", "flavors", "queued", "reserved"?, "nodeSelector"?}, ...], most preferred
    first ("reserved": a specific reservation's rung, moved to without a Ready node). The program renders it; a
    hand-edited file that does not fit is refused with what is wrong."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"rungs {raw!r} is invalid: expected a non-empty list of rungs")
    rungs: list[d.Rung] = []
    seen_flavors: set[str] = set()
    for i, one in enumerate(raw):
        where = f"rungs[{i}]"
        if not isinstance(one, dict):
            raise ValueError(f"{where} {one!r} is invalid: expected an object")
        unknown = sorted(set(one) - _RUNG_KEYS)
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}: allowed are {sorted(_RUNG_KEYS)}")
        name, flavors, queued = one.get("name"), one.get("flavors"), one.get("queued", False)
        reserved = one.get("reserved", False)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name {name!r} is invalid: expected a non-empty string")
        if any(r.name == name for r in rungs):
            raise ValueError(f"{where}.name {name!r} is invalid: another rung has that name")
        if not isinstance(flavors, list) or not flavors or not all(isinstance(f, str) and f for f in flavors):
            raise ValueError(f"{where}.flavors {flavors!r} is invalid: expected a non-empty list of flavor names")
        shared = sorted(seen_flavors & set(flavors))
        if shared:
            raise ValueError(f"{where}.flavors {flavors!r} is invalid: {shared} is on another rung already")
        if not isinstance(queued, bool):
            raise ValueError(f"{where}.queued {queued!r} is invalid: expected true or false")
        if not isinstance(reserved, bool):
            raise ValueError(f"{where}.reserved {reserved!r} is invalid: expected true or false")
        if reserved and queued:
            raise ValueError(f"{where}.reserved true is invalid with queued true: a queued (flex-start) rung holds "
                             "no reservation")
        seen_flavors.update(flavors)
        rungs.append(d.Rung(name, tuple(flavors), queued, reserved))
    return tuple(rungs)


_IN_SELECTOR = re.compile(r"^\s*(?P<key>[A-Za-z0-9./_-]+)\s+in\s+\((?P<values>[^()]*)\)\s*$")
_EQ_SELECTOR = re.compile(r"^\s*(?P<key>[A-Za-z0-9./_-]+)\s*==?\s*(?P<values>[A-Za-z0-9._-]+)\s*$")


def merge_selectors(selectors: Iterable[str]) -> str | None:
    """One label selector for the nodes of every rung: `<key> in (...)` when each rung's selector is `<key> in
    (...)` or `<key>=<value>` on the same key; None (every node read) otherwise, since a selector cannot say "or"."""
    key: str | None = None
    values: set[str] = set()
    for selector in selectors:
        found = _IN_SELECTOR.match(selector) or _EQ_SELECTOR.match(selector)
        if found is None or (key is not None and found["key"] != key):
            return None
        key = found["key"]
        values.update(v.strip() for v in found["values"].split(",") if v.strip())
    return None if key is None or not values else f"{key} in ({','.join(sorted(values))})"

