"""The config validation toolkit shared by both projects' parsers (infra settings and jobs). Pure Python.

Every reader takes the full key path (`queues.quotas.system.cpu`, `jobs[0].count`) and raises a
`ConfigError` whose one-line message names that key, the bad value and what is allowed:

    queues.clusterQueue "Bad_Name" is invalid: expected a lowercase DNS label
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from tpu_fallback.model.quantity import Resources, parse_quantity

DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


class ConfigError(ValueError):
    """Invalid stack configuration. The message names the key, the value and what is allowed."""


def show(value: Any) -> str:
    """A value as the error message quotes it: a string in double quotes, anything else as a stack file writes it
    (YAML: true, false, null, {key: value}, [a, b]), never as Python writes it (True, None, {'key': 'value'})."""
    return f'"{value}"' if isinstance(value, str) else yaml_text(value)


# Text that YAML reads as itself inside a flow collection: no indicator that starts or ends a value or an entry.
_PLAIN = re.compile(r"^[A-Za-z0-9_./@-](?:[A-Za-z0-9_./@:+ -]*[A-Za-z0-9_./@+-])?$")
_NOT_TEXT = re.compile(r"^(?:[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|true|false|null|~|yes|no|on|off|y|n)$",
                       re.IGNORECASE)


def yaml_text(value: Any) -> str:
    """A value in YAML's flow style, as a user would write it in a stack file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        plain = _PLAIN.match(value) and ": " not in value and not _NOT_TEXT.match(value)
        return value if plain else json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{yaml_text(k)}: {yaml_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    return str(value)


def fail(key: str, value: Any, allowed: str) -> ConfigError:
    """`key <value> is invalid: <allowed>`; a value of None (left out, or YAML's null) reads `key is not set`."""
    if value is None:
        return ConfigError(f"{key} is not set: {allowed}")
    return ConfigError(f"{key} {show(value)} is invalid: {allowed}")


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """' (did you mean maxSlices?)' for the nearest known word, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    if not close:  # also catch a case slip: maxslices for maxSlices
        close = [k for k in known if k.lower() == word.lower()]
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_key(key: str, unknown: str, allowed_keys: Sequence[str]) -> ConfigError:
    return ConfigError(f"{key}.{unknown} is not a known setting{did_you_mean(unknown, allowed_keys)}; "
                       f"{key} accepts: {', '.join(allowed_keys)}")


def check_config_namespaces(keys: Iterable[str], allowed: Mapping[str, frozenset[str] | None]) -> None:
    """Every `namespace:key` of a stack's config belongs to a namespace the program reads (and, where the set of
    keys is given, is one of them). A misspelled namespace (tpu-falback:clusterName) would otherwise be
    silently ignored. `pulumi:` keys (engine options) are left to the CLI."""
    for full in sorted(keys):
        namespace, _, name = full.partition(":")
        if namespace == "pulumi" or not name:
            continue
        if namespace not in allowed:
            raise ConfigError(
                f"{full} is not read by this program: namespace {namespace}{did_you_mean(namespace, allowed)} "
                f"is not one of {', '.join(sorted(allowed))} (and pulumi)")
        known = allowed[namespace]
        if known is not None and name not in known:
            raise ConfigError(f"{full} is not a {namespace} provider setting{did_you_mean(name, known)}")


def object_(key: str, value: Any, allowed_keys: Sequence[str]) -> Mapping[str, Any]:
    """An object whose keys are all known; None (left out) reads as {}."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        name = key.rsplit(".", 1)[-1]
        switch = ""
        if isinstance(value, bool) and "enabled" in allowed_keys:
            switch = (f" (to switch it on, write {name}: {{enabled: true, ...}})" if value else
                      f" (to switch it off, write {name}: {{enabled: false}})")
        raise fail(key, value, f"expected an object with keys {', '.join(allowed_keys)}{switch}")
    unknown = sorted(set(value) - set(allowed_keys))
    if unknown:
        raise unknown_key(key, unknown[0], allowed_keys)
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_as_number(key: str, value: float, allowed: str, fits_quoted: bool = True) -> ConfigError:
    """A text setting that YAML read as a number (unquoted in the stack file): say so, and to quote it. A float
    may have lost digits on the way (1.40 is 1.4), so the fix is the text as meant, not as shown. Where the
    quoted number would still be refused (`fits_quoted` false, e.g. 86400 for "86400s"), what is allowed."""
    if isinstance(value, float):
        return fail(key, value, f"YAML read the unquoted value as the number {value}, but this setting is text: quote "
                    f"it in the stack file exactly as you mean it (unquoted, a version such as 1.40 becomes 1.4); "
                    f"{allowed}")
    fix = f'quote it in the stack file ("{value}"); ' if fits_quoted else ""
    return fail(key, value, f"YAML read the unquoted value as a number, but this setting is text: {fix}{allowed}")


# Go's time.Time.String(): how the Pulumi CLI hands over a timestamp that YAML read unquoted (2026-12-01T00:00:00Z).
GO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? [+-]\d{4} \S+$")


def _as_text(key: str, value: Any, fits: bool, allowed: str) -> None:
    """Refuse a number, or a timestamp the CLI reformatted, where a setting is text, saying why."""
    if is_number(value):
        raise read_as_number(key, value, allowed, fits)
    if isinstance(value, str) and GO_TIME.match(value) and not fits:
        raise fail(key, value, "YAML read the unquoted value as a timestamp, and the Pulumi CLI passes a timestamp on "
                   f"in Go's format, not as written: quote it in the stack file; {allowed}")


def string(key: str, value: Any, pattern: re.Pattern[str] | None = None, allowed: str = "") -> str:
    allowed = allowed or "expected a string"
    _as_text(key, value, pattern is None or bool(pattern.match(str(value))), allowed)
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
        raise fail(key, value, allowed)
    return value


def non_empty_string(key: str, value: Any, allowed: str = "expected a non-empty string") -> str:
    _as_text(key, value, True, allowed)
    if not isinstance(value, str) or not value.strip():
        raise fail(key, value, allowed)
    return value


def integer(key: str, value: Any, minimum: int = 0) -> int:
    # Pulumi hands integers over as floats in some paths; accept 2.0 but not 2.5, "2" or true.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(key, value, f"expected an integer >= {minimum}")
    return value


# YAML 1.1's booleans that YAML 1.2 (the Pulumi CLI's) reads as text.
YAML11_BOOLEANS = frozenset({"yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF",
                             "y", "Y", "n", "N"})


def boolean(key: str, value: Any) -> bool:
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"
    if isinstance(value, str) and value in YAML11_BOOLEANS:
        raise fail(key, value, f"expected true or false ({value} is a boolean only to YAML 1.1; the Pulumi CLI reads "
                   f'YAML 1.2, where it is the text "{value}")')
    if not isinstance(value, bool):
        raise fail(key, value, "expected true or false")
    return value


def quantity(key: str, value: Any, positive: bool = False) -> str | int:
    """A Kubernetes quantity (16, "500m", "20Gi"), kept as written; negative (or, if `positive`, zero) is refused."""
    if isinstance(value, float):  # YAML's 2.0 and 0.5; Kubernetes writes them 2 and "500m"
        value = int(value) if value.is_integer() else str(value)
    try:
        amount = parse_quantity(value)
    except ValueError:
        raise fail(key, value, _quantity_rule(value)) from None
    if amount < 0 or (positive and amount == 0):
        raise fail(key, value, "must be positive" if positive else "cannot be negative")
    if key.endswith(".memory") and 0 < amount < 2**20 and re.fullmatch(r"\d+", str(value).strip()):
        # Kubernetes reads memory without a unit as bytes: 16 is 16 bytes, which no container starts with.
        raise fail(key, value, f"memory without a unit is bytes to Kubernetes ({value} bytes): write the unit, "
                   f"e.g. {value}Gi")
    return value  # type: ignore[no-any-return]


# Units other tools write -> Kubernetes' (decimal, binary): 16GB is 16G or 16Gi, 16GiB is 16Gi.
_BYTE_UNITS = {"kb": ("k", "Ki"), "mb": ("M", "Mi"), "gb": ("G", "Gi"), "tb": ("T", "Ti"),
               "kib": (None, "Ki"), "mib": (None, "Mi"), "gib": (None, "Gi"), "tib": (None, "Ti")}


def _quantity_rule(value: Any) -> str:
    """What a Kubernetes quantity is, with the fix for a unit written the way other tools write it (16GB, 16GiB)."""
    rule = ("expected a Kubernetes quantity: a number with an optional suffix (m for thousandths; Ki, Mi, Gi, Ti for "
            "binary or k, M, G, T for decimal multiples), e.g. 8, 500m, 16Gi")
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*", value) if isinstance(value, str) else None
    unit = _BYTE_UNITS.get(found.group(2).lower()) if found else None
    if found and unit:
        number, (decimal, binary) = found.group(1), unit
        fix = f"{number}{binary}" if decimal is None else f"{number}{decimal} (powers of 10) or {number}{binary} (of 2)"
        return f"Kubernetes has no unit {found.group(2)}: write {fix}; {rule}"
    return rule


def resources(key: str, value: Any, default: Resources, positive: bool = False) -> Resources:
    """A {cpu, memory} object; a field left out keeps the default's."""
    obj = object_(key, value, ("cpu", "memory"))
    return Resources(
        cpu=quantity(f"{key}.cpu", obj.get("cpu", default.cpu), positive),
        memory=quantity(f"{key}.memory", obj.get("memory", default.memory), positive),
    )


def plain(number: Decimal) -> str:
    """A decimal without exponent or trailing zeros, for messages (12, 4.5)."""
    return format(number.normalize(), "f")
