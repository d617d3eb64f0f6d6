"""The one way a rendered Kubernetes object (a dict from tpu_fallback.render) becomes a Pulumi resource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

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


# The built-in kinds the renderers produce, registered as typed resources (so the provider knows their schema;
# Secret data, for one, stays a Pulumi secret).
_TYPED: dict[tuple[str, str], Any] = {
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ResourceQuota"): k8s.core.v1.ResourceQuota,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
}
_ARGUMENT = {"roleRef": "role_ref", "stringData": "string_data"}


def kubernetes_object(name: str, obj: Mapping[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """A rendered object of a built-in kind as its typed resource; anything else as a CustomResource."""
    kind = _TYPED.get((obj["apiVersion"], obj["kind"]))
    if kind is None:
        return cast(pulumi.CustomResource, custom_resource(name, obj, opts))
    fields = {_ARGUMENT.get(k, k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return cast(pulumi.CustomResource, kind(name, opts=opts, **fields))
