"""What both programs read from the CLI's config before anything else: every key, and the providers' own keys."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pulumi
import pulumi_gcp
from pulumi.runtime.config import CONFIG, get_config_env, is_config_secret

from tpu_fallback.model.validation import ConfigError


class StackConfigError(ConfigError, pulumi.RunError):
    """A configuration error as the Pulumi CLI should show it: its one-line message, no Python traceback."""


@contextmanager
def reported_cleanly() -> Iterator[None]:
    """Turn the model's ConfigError into a StackConfigError (a pulumi.RunError) for the CLI."""
    try:
        yield
    except StackConfigError:
        raise
    except ConfigError as err:
        raise StackConfigError(str(err)) from None


def all_config() -> dict[str, str]:
    """Every `namespace:key` the CLI handed the program, as strings (objects JSON-encoded)."""
    return {**get_config_env(), **CONFIG.get()}


def secret_keys(values: dict[str, str], namespace: str) -> frozenset[str]:
    """The keys of `namespace` the stack holds as secrets, without the namespace."""
    return frozenset(k.removeprefix(f"{namespace}:") for k in values if is_config_secret(k))


@cache
def gcp_provider_keys() -> frozenset[str]:
    """The `gcp:` keys the installed pulumi-gcp provider reads (pulumi_gcp/config/vars.py: one getter a key)."""
    source = (Path(pulumi_gcp.__file__).parent / "config" / "vars.py").read_text()
    keys = frozenset(re.findall(r"__config__\.get\w*\('(\w+)'\)", source))
    if "project" not in keys:  # the SDK changed shape: better no check than a wrong one
        raise RuntimeError("cannot read the gcp provider's config keys from pulumi_gcp/config/vars.py")
    return keys
