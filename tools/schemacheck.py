"""Validate rendered Kubernetes objects against the CRD schemas of the versions this project installs.

    python -m tools.schemacheck build/plan/*/kubernetes.yaml

The CRDs are the ones tests/e2e/build_components.sh copies out of the Go modules (Kueue's, KubeRay's and the
ProvisioningRequest CRD, at the versions the e2e runs) into the e2e cache, named by its bin.env
(KUEUE_CRD_DIR, KUBERAY_CRD_DIR, PROVREQ_CRD_DIR); $TPU_FALLBACK_CRDS (directories separated by os.pathsep)
overrides them, as it does for the e2e harness. No `../shared` is needed.

Each custom resource is validated with `jsonschema` (a locked dev requirement) against its CRD version's
openAPIV3Schema, with the API server's own rules that JSON Schema lacks:
- structural pruning: a field the schema does not declare (and no x-kubernetes-preserve-unknown-fields covers)
  is an error, since the API server would silently drop it;
- defaults are applied before validation (a required field with a default is never missing), as on the server;
- nullable, x-kubernetes-int-or-string, x-kubernetes-embedded-resource, x-kubernetes-list-type map/set
  (duplicates), the int32/int64/date-time formats;
- x-kubernetes-validations (CEL) with `cel-python` (also locked): transition rules (oldSelf) are skipped, and a
  rule the evaluator cannot run is counted and reported as not evaluated, never passed silently;
- the metadata rules every kind has (name, namespace, label and annotation keys and values).
Core kinds (Namespace, ConfigMap, RBAC, Job, Deployment, ...) get those metadata rules and their apiVersion
only; kinds with no CRD here (PodMonitoring: Google Managed Prometheus) are set aside and listed, not passed.

Where ../shared/tools/crdcheck.py exists ($TPU_FALLBACK_SHARED/tools/crdcheck.py), it runs too, as an extra
(Kueue's webhook rules among others); it is never required.

Exit status: 0 every object valid; 1 an object is invalid (or the extra check failed); 3 the check could not run
(no CRDs: the reason is printed); 2 bad usage.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import yaml
from jsonschema import (  # type: ignore[import-untyped]  # no stubs in the lock; its own hints are partial
    Draft4Validator,
    FormatChecker,
    ValidationError,
    validators,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TPU_FALLBACK_SHARED", REPO_ROOT.parent / "shared"))
CRDCHECK = SHARED / "tools" / "crdcheck.py"
BUILD_SCRIPT = "tests/e2e/build_components.sh"
CRDS_ENV = "TPU_FALLBACK_CRDS"
# bin.env's CRD directories, and the version key that goes with each.
CRD_DIR_KEYS = {"KUEUE_CRD_DIR": "KUEUE_VERSION", "KUBERAY_CRD_DIR": "KUBERAY_VERSION",
                "PROVREQ_CRD_DIR": "PROVREQ_VERSION"}
EXIT_INVALID, EXIT_USAGE, EXIT_NOT_RUN = 1, 2, 3

_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CrdsUnavailableError(RuntimeError):
    """The CRD schemas are not on this machine: the check cannot run. The message says why and what builds them."""


def e2e_cache() -> Path:
    return Path(os.environ.get("TPU_FALLBACK_E2E_CACHE") or Path.home() / ".cache" / "tpu-fallback-e2e")


def crd_sources() -> tuple[list[Path], str]:
    """The CRD directories and where they come from (for the report); CrdsUnavailableError if there are none."""
    override = [Path(p) for p in os.environ.get(CRDS_ENV, "").split(os.pathsep) if p]
    if override:
        missing = [str(d) for d in override if not d.is_dir()]
        if missing:
            raise CrdsUnavailableError(f"${CRDS_ENV} names directories that do not exist: {', '.join(missing)}")
        return override, f"${CRDS_ENV}"
    env_file = e2e_cache() / "bin.env"
    if not env_file.exists():
        raise CrdsUnavailableError(
            f"no CRDs: {env_file} does not exist ({BUILD_SCRIPT} copies the CRDs out of the Go modules and writes "
            "it; ./scripts/test runs it unless TPU_FALLBACK_SKIP_E2E=1)")
    env: dict[str, str] = {}
    for line in env_file.read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            env[key.strip()] = value.strip()
    missing = [k for k in CRD_DIR_KEYS if not env.get(k)]
    if missing:
        raise CrdsUnavailableError(f"no CRDs: {env_file} lacks {', '.join(missing)} (it lists only what the last "
                                   f"run of {BUILD_SCRIPT} built: run it with no argument)")
    dirs = [Path(env[k]) for k in CRD_DIR_KEYS]
    gone = [str(d) for d in dirs if not d.is_dir()]
    if gone:
        raise CrdsUnavailableError(f"no CRDs: {env_file} names directories that do not exist: {', '.join(gone)} "
                              f"(run {BUILD_SCRIPT} again)")
    versions = ", ".join(f"{k.removesuffix('_CRD_DIR').lower()} {env.get(v, '?')}" for k, v in CRD_DIR_KEYS.items())
    return dirs, f"{versions}, from {env_file}"


# --------------------------------------------------------------------------------------------
# CRDs and their schemas as JSON Schema
# --------------------------------------------------------------------------------------------

# ObjectMeta as a client may send it on create; the server sets the rest (and drops unknown keys).
_OBJECT_META: dict[str, Any] = {
    "type": "object",
    "x-closed": True,
    "properties": {
        "name": {"type": "string"}, "generateName": {"type": "string"}, "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
        "uid": {"type": "string"}, "resourceVersion": {"type": "string"}, "generation": {"type": "integer"},
        "creationTimestamp": {"type": ["string", "null"]}, "deletionTimestamp": {"type": ["string", "null"]},
        "deletionGracePeriodSeconds": {"type": "integer"}, "managedFields": {"type": "array"},
        "selfLink": {"type": "string"},
    },
}
_DROPPED = frozenset({"description", "example", "externalDocs", "default", "nullable", "x-kubernetes-validations"})
_INLINE_FLAGS = re.compile(r"\(\?([imsU]+)\)")


def python_pattern(pattern: str) -> str | None:
    """A Go RE2 pattern in Python's syntax: RE2 takes inline flags anywhere (`^(?i)[a-z]...`), Python only first.
    None if Python cannot compile it (the rule is then reported as not checked)."""
    flags = "".join(_INLINE_FLAGS.findall(pattern))
    if flags:
        letters = "".join(sorted(set(flags) - {"U"}))
        pattern = (f"(?{letters})" if letters else "") + _INLINE_FLAGS.sub("", pattern)
    try:
        re.compile(pattern)
    except re.error:
        return None
    return pattern


def to_json_schema(node: Any, root: bool = False) -> Any:
    """A structural OpenAPI v3 schema node as JSON Schema (draft 4, which OpenAPI 3.0's schemas follow) with the
    keywords the validator below adds for Kubernetes (x-closed for pruning, x-kubernetes-*)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub) for sub in value]
        elif key == "pattern":
            pattern = python_pattern(value)
            out[key if pattern is not None else "x-unchecked-pattern"] = pattern if pattern is not None else value
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)  # [integer, string]: the keyword below says it more clearly
        out.pop("type", None)
    elif node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if node.get("x-kubernetes-embedded-resource") or root:
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        if root or "metadata" not in props or props["metadata"] == {"type": "object"}:
            props["metadata"] = copy.deepcopy(_OBJECT_META)
    is_object = node.get("type") == "object" or "properties" in node
    if is_object and not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
        out["x-closed"] = True  # structural pruning: the API server drops what the schema does not declare
    return out


def apply_defaults(schema: Any, value: Any) -> Any:
    """The object as the API server stores it: every absent field with a default set to it (recursively)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and isinstance(sub, dict) and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for name in list(value):
            sub = props.get(name, extra if isinstance(extra, dict) else None)
            value[name] = apply_defaults(sub, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _closed(validator: Any, closed: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not closed or not isinstance(instance, dict):
        return
    known = sorted(schema.get("properties") or {})
    for name in instance:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            yield ValidationError(f"unknown field {name!r}: not in the schema, the API server would drop it{hint}",
                                  path=[name])


def _int_or_string(validator: Any, flag: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if flag and (isinstance(instance, bool) or not isinstance(instance, int | str)):
        yield ValidationError(f"{instance!r} is not an integer or a string (x-kubernetes-int-or-string)")


def _list_type(validator: Any, kind: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not isinstance(instance, list):
        return
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: dict[Any, int] = {}
    for i, item in enumerate(instance):
        if kind == "set":
            key: Any = yaml.safe_dump(item, sort_keys=True)
        elif kind == "map" and isinstance(item, dict):
            key = tuple(yaml.safe_dump(item.get(k)) for k in keys)
        else:
            continue
        if key in seen:
            what = f"key {', '.join(f'{k}={item.get(k)!r}' for k in keys)}" if kind == "map" else f"item {item!r}"
            yield ValidationError(f"duplicate {what} (also at [{seen[key]}]; x-kubernetes-list-type: {kind})",
                                  path=[i])
        seen.setdefault(key, i)


_FORMATS = FormatChecker(formats=())
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


for _name, _format in (("int32", _int32), ("int64", _int64), ("date-time", _date_time)):
    _FORMATS.checks(_name)(_format)


def _is_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


KubeValidator = validators.extend(
    Draft4Validator,
    validators={"x-closed": _closed, "x-kubernetes-int-or-string": _int_or_string,
                "x-kubernetes-list-type": _list_type},
    type_checker=Draft4Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@dataclass
class CrdVersion:
    group: str
    kind: str
    version: str
    scope: str
    served: bool
    deprecated: bool
    schema: dict[str, Any]  # the openAPIV3Schema as the CRD has it
    path: Path

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @cached_property
    def validator(self) -> Any:
        return KubeValidator(to_json_schema(self.schema, root=True), format_checker=_FORMATS)


@dataclass
class Schemas:
    crds: dict[tuple[str, str], CrdVersion]  # (apiVersion, kind)
    source: str

    def kinds(self) -> set[tuple[str, str]]:
        return {(crd.group, crd.kind) for crd in self.crds.values()}


def load_crds(dirs: Sequence[Path], source: str = "") -> Schemas:
    crds: dict[tuple[str, str], CrdVersion] = {}
    for directory in dirs:
        for path in sorted(directory.rglob("*.yaml")):
            for doc in yaml.load_all(path.read_text(), Loader=_YAML_LOADER):
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec.get("versions") or []:
                    crd = CrdVersion(
                        group=spec["group"], kind=spec["names"]["kind"], version=version["name"],
                        scope=spec.get("scope", "Namespaced"), served=bool(version.get("served")),
                        deprecated=bool(version.get("deprecated")),
                        schema=(version.get("schema") or {}).get("openAPIV3Schema") or {}, path=path)
                    crds[(crd.api_version, crd.kind)] = crd
    if not crds:
        raise CrdsUnavailableError(f"no CRDs: no CustomResourceDefinition under {', '.join(map(str, dirs))}")
    return Schemas(crds, source or ", ".join(map(str, dirs)))


@cache
def schemas() -> Schemas:
    """The CRDs of crd_sources(), loaded once; CrdsUnavailableError if they are not on this machine."""
    dirs, source = crd_sources()
    return load_crds(dirs, source)


# --------------------------------------------------------------------------------------------
# CEL rules (x-kubernetes-validations)
# --------------------------------------------------------------------------------------------


@dataclass
class CelTally:
    evaluated: int = 0
    unevaluated: set[str] = field(default_factory=set)  # rules the evaluator could not run


def _cel_rules(schema: Any, value: Any, path: list[Any]) -> Iterator[tuple[list[Any], dict[str, Any], Any]]:
    """(path, rule, value) for every x-kubernetes-validations rule that applies to a present value."""
    if not isinstance(schema, dict) or value is None:
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        yield path, rule, value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, sub_value in value.items():
            sub = props.get(name, extra if isinstance(extra, dict) else None)
            yield from _cel_rules(sub, sub_value, [*path, name])
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _cel_rules(schema.get("items"), item, [*path, i])


@cache
def _cel_environment() -> Any:
    import celpy  # cel-python: a locked dev requirement

    return celpy.Environment()


@cache
def _cel_program(rule: str) -> Any:
    env = _cel_environment()
    return env.program(env.compile(rule))


def cel_errors(schema: dict[str, Any], obj: dict[str, Any], tally: CelTally) -> list[str]:
    from celpy.adapter import json_to_cel

    errors = []
    for path, rule, value in _cel_rules(schema, obj, []):
        text = rule.get("rule", "")
        if "oldSelf" in text:
            continue  # a transition rule: only on update
        try:
            result = _cel_program(text).evaluate({"self": json_to_cel(value)})
        except Exception:  # noqa: BLE001  # the evaluator's limits (a Kubernetes CEL library function, ...)
            tally.unevaluated.add(text)
            continue
        if not isinstance(result, bool | int) or isinstance(result, Exception):
            tally.unevaluated.add(text)
            continue
        tally.evaluated += 1
        if not result:
            errors.append(f"{_path(path)}: {rule.get('message') or 'failed rule'} (x-kubernetes-validations: "
                          f"{' '.join(text.split())})")
    return errors


# --------------------------------------------------------------------------------------------
# Objects
# --------------------------------------------------------------------------------------------

# The built-in kinds this project renders (and their neighbours): apiVersion, namespaced.
CORE_KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("v1", False), "ConfigMap": ("v1", True), "Secret": ("v1", True), "ServiceAccount": ("v1", True),
    "Service": ("v1", True), "ResourceQuota": ("v1", True), "LimitRange": ("v1", True), "Pod": ("v1", True),
    "PersistentVolumeClaim": ("v1", True),
    "Deployment": ("apps/v1", True), "StatefulSet": ("apps/v1", True), "DaemonSet": ("apps/v1", True),
    "Job": ("batch/v1", True), "CronJob": ("batch/v1", True),
    "Role": ("rbac.authorization.k8s.io/v1", True), "RoleBinding": ("rbac.authorization.k8s.io/v1", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", False),
    "PriorityClass": ("scheduling.k8s.io/v1", False), "StorageClass": ("storage.k8s.io/v1", False),
    "NetworkPolicy": ("networking.k8s.io/v1", True), "PodDisruptionBudget": ("policy/v1", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", False),
    "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", False),
    "MutatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", False),
}
# Kinds whose CRD is not among the ones built here (Google Managed Prometheus'): set aside, and listed.
NO_CRD_HERE = {("monitoring.googleapis.com/v1", "PodMonitoring")}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _path(path: Iterable[Any]) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) or "." in str(step) or "/" in str(step) else f".{step}"
    return out.lstrip(".") or "<root>"


def _label_key_errors(where: str, key: Any) -> list[str]:
    if not isinstance(key, str):
        return [f"{where}: key {key!r} is not a string"]
    prefix, _, name = key.rpartition("/")
    bad = (not name or len(name) > 63 or not _QUALIFIED_NAME.match(name)
           or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))))
    return [f"{where}: key {key!r} is not a qualified name ([prefix/]name, name at most 63 characters)"] if bad else []


def metadata_errors(obj: Mapping[str, Any], namespaced: bool | None, types: bool = True) -> list[str]:
    """The API server's ObjectMeta rules: a valid name, label and annotation keys and values."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ["metadata: missing or not an object"]
    errors = []
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        errors.append("metadata.name: missing")
    elif name is not None:
        rule = _DNS_LABEL if obj.get("kind") == "Namespace" else _DNS_SUBDOMAIN
        limit = 63 if obj.get("kind") == "Namespace" else 253
        if not isinstance(name, str) or len(name) > limit or not rule.match(name):
            errors.append(f"metadata.name: {name!r} is not a valid {'DNS label' if limit == 63 else 'DNS subdomain'}")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not _DNS_LABEL.match(namespace)
                                  or len(namespace) > 63):
        errors.append(f"metadata.namespace: {namespace!r} is not a valid namespace name")
    if namespaced is False and namespace:
        errors.append(f"metadata.namespace: {obj.get('kind')} is cluster-scoped, it has no namespace")
    for field_name in ("labels", "annotations"):
        values = meta.get(field_name)
        if values is None:
            continue
        if not isinstance(values, dict):
            errors.append(f"metadata.{field_name}: not an object")
            continue
        for key, value in values.items():
            errors.extend(_label_key_errors(f"metadata.{field_name}", key))
            if not isinstance(value, str):
                if types:  # (a CRD's schema says it too)
                    errors.append(f"metadata.{field_name}[{key}]: {value!r} is not a string (quote it)")
            elif field_name == "labels" and value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
                errors.append(f"metadata.labels[{key}]: {value!r} is not a valid label value")
    return errors


def _drop_nulls(schema: Any, value: Any, path: list[Any]) -> Iterator[str]:
    """A null where the schema does not allow one: reported, and dropped from `value` as the API server drops it
    (before defaulting, so the field is then absent, or its default)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {} if isinstance(schema, dict) else {}
        extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
        for name, sub_value in list(value.items()):
            sub = props.get(name, extra if isinstance(extra, dict) else None)
            if sub_value is None:
                if not (isinstance(sub, dict) and sub.get("nullable")) and name != "creationTimestamp":
                    del value[name]
                    yield f"{_path([*path, name])}: null, which the API server drops (leave the field out)"
            else:
                yield from _drop_nulls(sub, sub_value, [*path, name])
    elif isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        for i, item in enumerate(value):
            yield from _drop_nulls(items, item, [*path, i])


@dataclass
class Result:
    """One object's outcome: `how` is "crd", "core" (metadata and apiVersion only) or "set aside" (no CRD here)."""

    label: str
    how: str
    errors: list[str]
    warnings: list[str]


def check_object(obj: Mapping[str, Any], crds: Schemas, tally: CelTally | None = None) -> Result:
    api, kind = obj.get("apiVersion"), obj.get("kind")
    meta = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
    label = f"{kind} {meta.get('namespace') or ''}{'/' if meta.get('namespace') else ''}{meta.get('name')} ({api})"
    if not isinstance(api, str) or not isinstance(kind, str):
        return Result(label, "crd", ["apiVersion and kind must be strings"], [])
    if (api, kind) in NO_CRD_HERE:
        return Result(label, "set aside", [], [])
    crd = crds.crds.get((api, kind))
    if crd is None:
        group = api.rpartition("/")[0]
        if kind in CORE_KINDS:
            want, namespaced = CORE_KINDS[kind]
            errors = [] if api == want else [f"apiVersion {api!r} is not {kind}'s ({want})"]
            return Result(label, "core", errors + metadata_errors(obj, namespaced), [])
        served = sorted(c.api_version for c in crds.crds.values() if c.kind == kind and c.group == group)
        why = (f"the {kind} CRD defines {', '.join(served)}, not {api}" if served else
               f"no CRD for {kind} in {api} among {crds.source}, and not a built-in kind")
        return Result(label, "crd", [why], [])
    errors = metadata_errors(obj, crd.scope == "Namespaced", types=False)
    warnings = []
    if not crd.served:
        errors.append(f"{api} of {kind} is not served by its CRD")
    if crd.deprecated:
        warnings.append(f"{api} {kind} is deprecated")
    body = copy.deepcopy({k: v for k, v in obj.items() if k != "status"})
    errors.extend(_drop_nulls(crd.schema, body, []))
    body = apply_defaults(crd.schema, body)
    for error in sorted(crd.validator.iter_errors(body), key=lambda e: [str(p) for p in e.absolute_path]):
        line = f"{_path(error.absolute_path)}: {error.message}"
        if line not in errors:
            errors.append(line)
    if tally is not None:
        errors.extend(cel_errors(crd.schema, body, tally))
    return Result(label, "crd", errors, warnings)


@dataclass
class Report:
    results: list[Result]
    cel: CelTally
    source: str
    extra: list[str] = field(default_factory=list)  # failures of ../shared's crdcheck, when it ran

    @property
    def ok(self) -> bool:
        return not self.extra and all(not r.errors for r in self.results)

    def failures(self) -> list[str]:
        return [f"{r.label}: {'; '.join(r.errors)}" for r in self.results if r.errors] + self.extra

    def summary(self) -> str:
        by = {how: [r for r in self.results if r.how == how] for how in ("crd", "core", "set aside")}
        lines = [f"{len(by['crd'])} custom resources against their CRD schemas ({self.source}), "
                 f"{len(by['core'])} built-in objects (metadata and apiVersion only)"]
        if by["set aside"]:
            aside = Counter(r.label.split(" ")[0] for r in by["set aside"])
            lines.append(f"set aside, no CRD here (their structure is checked by the tests): "
                         f"{', '.join(f'{n} {kind}' for kind, n in sorted(aside.items()))}")
        cel = f"CEL rules: {self.cel.evaluated} evaluated"
        if self.cel.unevaluated:
            cel += f", {len(self.cel.unevaluated)} distinct rules the evaluator cannot run (not checked)"
        lines.append(cel)
        return "\n".join(lines)

    def text(self) -> str:
        return "\n".join([*self.failures(), self.summary()])


def check(objects: Sequence[Mapping[str, Any]], crds: Schemas | None = None) -> Report:
    """Every object checked (CrdsUnavailableError if the CRDs are not on this machine and none are given)."""
    crds = crds or schemas()
    tally = CelTally()
    results = [check_object(obj, crds, tally) for obj in objects]
    return Report(results, tally, crds.source)


# --------------------------------------------------------------------------------------------
# ../shared's crdcheck, an extra where present
# --------------------------------------------------------------------------------------------


def shared_crdcheck(objects: Sequence[Mapping[str, Any]], *extra: str) -> subprocess.CompletedProcess[str] | None:
    """../shared/tools/crdcheck.py over the objects (its own vendored CRDs), or None where it is not present."""
    if not CRDCHECK.exists():
        return None
    checkable = [dict(o) for o in objects if (o.get("apiVersion"), o.get("kind")) not in NO_CRD_HERE]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump_all(checkable, handle, sort_keys=False)
    try:
        return subprocess.run([sys.executable, str(CRDCHECK), *extra, handle.name],
                              capture_output=True, text=True, check=False)
    finally:
        Path(handle.name).unlink()


def check_with_extra(objects: Sequence[Mapping[str, Any]], crds: Schemas | None = None) -> Report:
    """check(), plus ../shared's crdcheck where present (its failures join the report's)."""
    report = check(objects, crds)
    shared = shared_crdcheck(objects, "--quiet")
    if shared is not None and shared.returncode != 0:
        report.extra.append(f"{CRDCHECK}: {shared.stdout}{shared.stderr}".strip())
    return report


def read_objects(paths: Iterable[str]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for path in paths:
        objects.extend(o for o in yaml.load_all(Path(path).read_text(), Loader=_YAML_LOADER) if o)
    return objects


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.schemacheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("manifests", nargs="+", help="multi-document YAML files of Kubernetes objects")
    args = parser.parse_args(argv)
    objects = read_objects(args.manifests)
    status = 0
    try:
        report = check(objects)
    except CrdsUnavailableError as err:
        print(f"CRD schema check NOT RUN: {err}")
        status = EXIT_NOT_RUN
    else:
        for line in report.failures():
            print(f"FAIL {line}")
        print(report.summary())
        print(f"{len(objects)} objects: {'all valid' if report.ok else f'{len(report.failures())} INVALID'}")
        status = 0 if report.ok else EXIT_INVALID
    shared = shared_crdcheck(objects, "--quiet")
    if shared is not None:
        print(f"extra: {CRDCHECK}: {'passed' if shared.returncode == 0 else 'FAILED'}")
        print(shared.stdout, end="")
        print(shared.stderr, end="", file=sys.stderr)
        if shared.returncode != 0:
            status = EXIT_INVALID
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
