"""Kubernetes resource quantities ("20Gi", "500m", 16, "1e9") as exact decimals. Pure Python."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


def parse_quantity(value: object) -> Decimal:
    """Return the quantity's value in base units; raise ValueError for anything Kubernetes would refuse."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (use an integer or a string like '20Gi')")
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 16, '500m', '20Gi', '1e9')")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        return Decimal(number) * _SUFFIXES[suffix]
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None


@dataclass(frozen=True)
class Resources:
    """A cpu and memory amount (a request or a quota), each a quantity as written in config."""

    cpu: str | int
    memory: str | int
