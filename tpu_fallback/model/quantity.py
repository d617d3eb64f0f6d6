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


_DECIMAL_SUFFIXES = {0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E", -3: "m", -6: "u", -9: "n"}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def canonical_quantity(value: object) -> str:
    """The quantity as Kubernetes writes it back (Go's resource.Quantity.String): 10 -> "10", 1000000000 -> "1G",
    "1000Mi" -> "1000Mi", "2048Mi" -> "2Gi", 0.5 -> "500m", "1e9" -> "1e9".

    Sending this form makes the stored object equal to what Pulumi sent, so a second `pulumi up` is a no-op.
    """
    amount = parse_quantity(value)
    if amount == 0:
        return "0"
    suffix = _QUANTITY.match(str(value).strip()).group(2) or ""  # type: ignore[union-attr]  # parsed above
    exponent_form = isinstance(value, str) and ("e" in value.lower()) and not suffix
    binary = suffix.endswith("i") and abs(amount) >= 1024 and amount == amount.to_integral_value()
    if binary:
        number, power = int(amount), 0
        while number % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
            number, power = number // 1024, power + 1
        return f"{number}{_BINARY_SUFFIXES[power]}"
    sign, digits, exp = amount.normalize().as_tuple()
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    exponent = int(exp)
    remainder = exponent % 3  # exponents are multiples of 3, the mantissa an integer
    mantissa, exponent = mantissa * 10**remainder, exponent - remainder
    if not exponent_form and exponent in _DECIMAL_SUFFIXES:
        return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
    return f"{mantissa}e{exponent}" if exponent else str(mantissa)
