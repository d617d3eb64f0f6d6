"""The one way a rendered Kubernetes object (a dict from tpu_fallback.render) becomes a Pulumi resource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def custom_resource(
    name: str, obj: Mapping[str, Any], opts: pulumi.ResourceOptions
) -> k8s.apiextensions.CustomResource:
    """A CustomResource with the object's apiVersion, kind, metadata and spec (the CRs this project renders)."""
    unexpected = sorted(set(obj) - {"apiVersion", "kind", "metadata", "spec"})
    if unexpected:
        raise ValueError(f"{obj['kind']} {name}: only apiVersion, kind, metadata and spec are registered, "
                         f"not {unexpected}")
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], spec=obj["spec"], opts=opts
    )
