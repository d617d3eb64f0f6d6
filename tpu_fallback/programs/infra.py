"""The infrastructure program: the stack's config -> one public component (tpu_fallback.api) -> stack outputs."""

from __future__ import annotations

from typing import cast

import pulumi

from tpu_fallback.api import MultiRegionPlatform, MultiRegionPlatformArgs, Platform, PlatformArgs
from tpu_fallback.api.convert import args_of
from tpu_fallback.model.settings import PROJECT, Settings, decode_config, parse_settings
from tpu_fallback.model.settings.stack import is_unset
from tpu_fallback.model.validation import check_config_namespaces
from tpu_fallback.programs.config import all_config, gcp_provider_keys, reported_cleanly, secret_keys


def load_settings() -> Settings:
    """Read this project's config keys from the running Pulumi program and validate them."""
    values = all_config()
    check_config_namespaces(values, {PROJECT: None, "gcp": gcp_provider_keys()})
    return parse_settings(decode_config(values), pulumi.Config("gcp").get("project"), secret_keys(values, PROJECT))


def main() -> None:
    """Run the infra program (__main__.py) and export its outputs."""
    with reported_cleanly():
        settings = load_settings()  # every key, with the stack's own messages, before any resource is registered
        raw = {k: v for k, v in decode_config(all_config()).items() if not is_unset(k, v)}
    platform: Platform | MultiRegionPlatform
    if settings.multikueue.enabled:
        multikueue = raw.pop("multikueue")
        args = args_of({**raw, "manager": multikueue.get("manager"), "workers": multikueue.get("workers")},
                       MultiRegionPlatformArgs)
        platform = MultiRegionPlatform(settings.cluster_name, cast(MultiRegionPlatformArgs, args))
    else:
        args = args_of(raw, PlatformArgs)
        if settings.existing_cluster is not None and settings.existing_cluster.kubeconfig:
            args["kubeconfig"] = pulumi.Config().require_secret("kubeconfig")
        platform = Platform(settings.cluster_name, cast(PlatformArgs, args))
    for name, value in platform.stack_outputs().items():
        pulumi.export(name, value)
