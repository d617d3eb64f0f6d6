"""The dated list-price table of the offline plan's cost section (prices.yaml), with the region applied.

Read from the repository, never fetched: `load()` reads prices.yaml and merges an override file over it
(`--prices FILE`, same layout). A lookup answers a `Price`: the value for the region, or the table's
default for any region (said so), or None with the table's note on why there is no verified price.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).with_name("prices.yaml")
TPU_PLANS = {"on-demand": "onDemand", "flex-start": "flexStart", "spot": "spot"}
_TOP = ("checked", "currency", "sources", "tpu", "machines", "gke")


class PriceTableError(ValueError):
    """A price file that does not have the table's layout."""


@dataclass(frozen=True)
class Price:
    value: Decimal | None  # USD per hour (per chip for TPUs, per node for machines, per cluster for the GKE fee)
    basis: str  # "us-east5 list price", "any region (not verified per region)", or why there is none
    source: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None


@dataclass(frozen=True)
class PriceTable:
    data: Mapping[str, Any]
    origin: str  # the file(s) read, for the report

    @property
    def checked(self) -> str:
        return str(self.data.get("checked", "?"))

    def source(self, key: str) -> Mapping[str, Any]:
        found = (self.data.get("sources") or {}).get(key)
        return found if isinstance(found, Mapping) else {}

    def tpu(self, family: str, plan: str, region: str) -> Price:
        entry = ((self.data.get("tpu") or {}).get(family) or {}).get(TPU_PLANS[plan])
        return _lookup(entry, region, f"no {family} {plan} price in the table")

    def machine(self, machine_type: str, region: str) -> Price:
        entry = (self.data.get("machines") or {}).get(machine_type)
        return _lookup(entry, region, f"no {machine_type} price in the table")

    def gke(self, item: str, region: str) -> Price:
        entry = (self.data.get("gke") or {}).get(item)
        return _lookup(entry, region, f"no GKE {item} in the table")


def _lookup(entry: Any, region: str, missing: str) -> Price:
    if not isinstance(entry, Mapping):
        return Price(None, f"{missing} (add it with --prices FILE)")
    source = str(entry.get("source", ""))
    note = str(entry.get("note", "")).strip()
    regions = entry.get("regions") or {}
    if region in regions and regions[region] is not None:
        return Price(Decimal(str(regions[region])), f"{region} list price", source)
    if entry.get("default") is not None:
        return Price(Decimal(str(entry["default"])), note or "any region (not verified per region)", source)
    if regions:
        note = note or f"listed for {', '.join(sorted(regions))} only"
        return Price(None, f"no price for {region}: {note}", source)
    return Price(None, note or missing, source)


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base.get(key), value) if key in base else value
        return merged
    return override


def _check(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise PriceTableError(f"{where}: expected a mapping with {', '.join(_TOP)}")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        raise PriceTableError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(_TOP)}")

    def prices(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in ("default",) or path.endswith(".regions"):
                    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                              or value < 0):
                        raise PriceTableError(f"{where}: {path}.{key} must be a non-negative number or null, "
                                              f"not {value!r}")
                else:
                    prices(value, f"{path}.{key}" if path else str(key))

    for key in ("tpu", "machines", "gke"):
        prices(data.get(key) or {}, key)
    return dict(data)


def load(override: Path | None = None) -> PriceTable:
    """The repository's table, with `override` (a file of the same layout) merged over it."""
    data = _check(yaml.safe_load(TABLE.read_text()), TABLE.name)
    origin = f"tpu_fallback/offline/{TABLE.name} (checked {data.get('checked')})"
    if override is not None:
        try:
            extra = yaml.safe_load(override.read_text()) or {}
        except yaml.YAMLError as err:
            raise PriceTableError(f"{override}: {err}") from None
        data = _merge(data, _check(extra, str(override)))
        origin += f" + {override}"
    return PriceTable(data, origin)


def money(value: Decimal | None) -> str:
    """$1,234.56 (two decimals; three below a dollar so small fees stay visible)."""
    if value is None:
        return "n/a"
    places = Decimal("0.001") if abs(value) < 1 and value != 0 else Decimal("0.01")
    return f"${value.quantize(places):,}"
