"""What every part of the stack's settings parser shares: the config namespace, name and location patterns, and
the readers of values several parts take (Go-style durations, node pool names, `{enabled: true}` objects)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tpu_fallback.model.validation import fail, string

PROJECT = "tpu-fallback"

# A zone: its region and a letter (us-east5-b), or an AI zone, the letter of its parent zone after `ai<N>`
# (us-central1-ai1a, where the Cloud TPU zones page lists TPU7x; Compute Engine "AI zones",
# https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones: "us-central1-a is the parent zone of
# us-central1-ai1a").
ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-(?:ai\d+)?[a-z]$")
REGION = re.compile(r"^[a-z]+-[a-z]+\d+$")
CLUSTER_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
POOL_NAME = re.compile(r"^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$")
_GO_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def duration(key: str, value: Any, minimum: int, maximum: int) -> int:
    """A Go-style duration ("10m", "90s", "1h30m") as whole seconds, within [minimum, maximum]."""
    match = _GO_DURATION.match(value) if isinstance(value, str) and value else None
    if match is None:
        rule = 'expected a duration in hours, minutes and seconds such as "30s", "10m" or "1h30m"'
        if isinstance(value, int | float) and not isinstance(value, bool):
            rule = f'a number has no unit: write "{value}s" for seconds ({rule})'
        elif isinstance(value, str) and re.fullmatch(r"\d+d", value.strip()):
            rule = f'there is no unit d: write "{int(value.strip()[:-1]) * 24}h" ({rule})'
        raise fail(key, value, rule)
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not minimum <= total <= maximum:
        raise fail(key, value, f"must be between {minimum}s and {maximum}s")
    return total


def pool_name(key: str, value: Any) -> str:
    return string(key, value, POOL_NAME,
                  "node pool names use lowercase letters, digits and hyphens, start with a letter and have at "
                  "most 40 characters")


def boolean_enabled(value: Any) -> bool:
    """Whether a raw `{enabled: ...}` object (multikueue, before it is parsed) is switched on."""
    return isinstance(value, Mapping) and value.get("enabled") in (True, "true")
