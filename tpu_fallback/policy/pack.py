"""pulumi-policy wrappers around the plain checks of tpu_fallback/policy/checks.py.

Two things the SDK (pulumi-policy 1.21.0) does not give a policy, and how this module gets them:

- **Secrets.** The engine sends secret values to the analyzer wrapped in Pulumi's secret signature, but
  the SDK's `Analyze`/`AnalyzeStack` deserialize them with `proxy_secrets=False`, which drops the wrapper:
  a policy cannot tell a secret kubeconfig from a plain one. `install_secret_markers()` swaps the SDK's
  deserializer for one that keeps each secret as a `pulumi_policy.Secret`; `to_resource` then unwraps
  them into plain values plus the paths that were secret. Without it, kubeconfig-is-secret reports
  itself not applicable instead of guessing.
- **The stack name.** The CLI starts a Python policy pack with PULUMI_STACK (and PULUMI_PROJECT,
  PULUMI_CONFIG) in its environment; production-cluster-protected reads it from there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import pulumi_policy.policy as _sdk_policy
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, _deserialize_property
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
    _DictProxy,
    _ListProxy,
)

from tpu_fallback.policy.checks import (
    DEFAULT_PRODUCTION_STACKS,
    POLICIES,
    Context,
    PolicySpec,
    Resource,
    Unknown,
)
from tpu_fallback.policy.checks import UnknownValueError as PlainUnknownValueError

PACK_NAME = "tpu-fallback"
PRODUCTION_STACKS_KEY = "productionStacks"
_UNKNOWN_SENTINELS = frozenset({
    UNKNOWN_BOOLEAN_VALUE, UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE, UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE, UNKNOWN_ARCHIVE_VALUE, UNKNOWN_OBJECT_VALUE,
})

# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------

# The name Analyze/AnalyzeStack look up at call time (pulumi_policy/policy.py: `from .deserialize import ...`).
_SDK_DESERIALIZE = "deserialize_properties"
_ORIGINAL_DESERIALIZE: Callable[..., dict[str, Any]] = getattr(_sdk_policy, _SDK_DESERIALIZE)


def _keep_secrets(prop: Any) -> Any:
    if isinstance(prop, list):
        return [_keep_secrets(item) for item in prop]
    if isinstance(prop, dict):
        signature = prop.get(SPECIAL_SIG_KEY)
        if signature == SPECIAL_SECRET_SIG:
            return Secret(_keep_secrets(prop.get("value")))
        if signature is not None:  # assets and archives: the SDK's own handling
            return _deserialize_property(prop)
        return {key: _keep_secrets(value) for key, value in prop.items()}
    return prop


def _deserialize_keeping_secrets(props: dict[str, Any], proxy_secrets: bool = False) -> dict[str, Any]:
    if proxy_secrets:  # Remediate: unchanged (this pack has no remediations)
        return _ORIGINAL_DESERIALIZE(props, proxy_secrets)
    return {key: _keep_secrets(value) for key, value in props.items()}


def install_secret_markers() -> bool:
    """Make the SDK hand policies secrets as `Secret` markers instead of bare values (see module doc)."""
    if not callable(getattr(_sdk_policy, _SDK_DESERIALIZE, None)):
        return False
    setattr(_sdk_policy, _SDK_DESERIALIZE, _deserialize_keeping_secrets)
    return True


def secret_markers_installed() -> bool:
    return getattr(_sdk_policy, _SDK_DESERIALIZE, None) is _deserialize_keeping_secrets


def plain(value: Any, path: str = "", secrets: set[str] | None = None) -> Any:
    """The SDK's props (unknown-checking proxies, Secret markers, unknown sentinels) as plain values.

    Secret paths are added to `secrets`; unknown values become `checks.Unknown`, so a plain check
    raises only when it reads one.
    """
    found = secrets if secrets is not None else set()
    if isinstance(value, Secret):
        found.add(path or ".")
        return plain(value.value, path, found)
    if isinstance(value, _DictProxy | _ListProxy):
        value = value["__target"]  # the raw container: reading through the proxy raises on unknowns
    if isinstance(value, Mapping):
        return {str(k): plain(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    if isinstance(value, str) and value in _UNKNOWN_SENTINELS:
        return Unknown(value)
    return value


def to_resource(resource_type: str, props: Mapping[str, Any], urn: str = "", name: str = "",
                protect: bool = False) -> Resource:
    secrets: set[str] = set()
    values = plain(props, "", secrets)
    return Resource(resource_type, values, name=name, urn=urn, protect=protect, secret_paths=frozenset(secrets))


# --------------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------------


def _context(config: Mapping[str, Any]) -> Context:
    return Context(
        stack=os.environ.get("PULUMI_STACK", ""),
        production_stacks=str(config.get(PRODUCTION_STACKS_KEY) or DEFAULT_PRODUCTION_STACKS),
    )


def _as_sdk_unknown(err: PlainUnknownValueError) -> UnknownValueError:
    sentinel = err.token if err.token in _UNKNOWN_SENTINELS else UNKNOWN_STRING_VALUE
    return UnknownValueError(sentinel, [p for p in err.path.split(".") if p])


def _resource_validator(spec: PolicySpec) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    check = spec.resource_check
    assert check is not None

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        resource = to_resource(args.resource_type, args.props, args.urn, args.name, bool(args.opts.protect))
        try:
            messages = check(resource, _context(args.get_config()))
        except PlainUnknownValueError as err:
            raise _as_sdk_unknown(err) from err
        for message in messages:
            report_violation(message, None)

    return validate


def _stack_validator(spec: PolicySpec) -> Callable[[StackValidationArgs, ReportViolation], None]:
    check = spec.stack_check
    assert check is not None
    needs_secrets = spec.name == "kubeconfig-is-secret"

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        if needs_secrets and not secret_markers_installed():
            args.not_applicable("secret markers are not installed: secrets are indistinguishable from plain values")
        resources = [to_resource(r.resource_type, r.props, r.urn, r.name, bool(r.opts.protect))
                     for r in args.resources]
        try:
            findings = check(resources, _context(args.get_config()))
        except PlainUnknownValueError as err:
            raise _as_sdk_unknown(err) from err
        for finding in findings:
            report_violation(finding.message, finding.urn or None)

    return validate


def _config_schema(spec: PolicySpec) -> PolicyConfigSchema | None:
    if spec.name != "production-cluster-protected":
        return None
    return PolicyConfigSchema(properties={
        PRODUCTION_STACKS_KEY: {
            "type": "string",
            "default": DEFAULT_PRODUCTION_STACKS,
            "description": "Regular expression of production stack names (re.match).",
        },
    })


def build_policies() -> list[Policy]:
    """One pulumi-policy Policy per entry of checks.POLICIES."""
    policies: list[Policy] = []
    for spec in POLICIES:
        if spec.resource_check is not None:
            policies.append(ResourceValidationPolicy(
                name=spec.name, description=spec.description, validate=_resource_validator(spec),
                config_schema=_config_schema(spec),
            ))
        if spec.stack_check is not None:
            policies.append(StackValidationPolicy(
                name=spec.name, description=spec.description, validate=_stack_validator(spec),
                config_schema=_config_schema(spec),
            ))
    return policies


ENFORCEMENT_LEVEL = EnforcementLevel.MANDATORY
