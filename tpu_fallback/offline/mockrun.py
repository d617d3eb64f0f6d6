"""Run a Pulumi program of this repository under Pulumi's mock runtime and record its whole graph.

This is what the offline plan and the test suite share. It emulates what the Pulumi CLI hands a
program (the project's `config:` defaults from Pulumi.yaml plus Pulumi.<stack>.yaml, keys namespaced
`<project>:<key>`, objects as JSON strings), runs the real `__main__.py` with `runpy`, and records
every resource registration with its parent, dependencies, provider, options and inputs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import runpy
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks, rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from tpu_fallback.offline import stackfile

REPO_ROOT = Path(__file__).resolve().parents[2]  # the repository: Pulumi.yaml, jobs/, the stack files
SECRET_PLACEHOLDER = "[secret]"
# Secure values the programs only hand on (never parse), so a placeholder renders faithfully offline.
OFFLINE_SECRETS = frozenset({"tpu-fallback:kubeconfig"})
MOCK_ENDPOINT = "203.0.113.10"  # TEST-NET-3: never a real address
MOCK_CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nmock\n-----END CERTIFICATE-----\n").decode()


@dataclass
class RecordedResource:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    provider: str
    protect: bool
    custom: bool
    inputs: dict[str, Any]
    secret_inputs: list[str]  # dotted paths of inputs that arrived as Pulumi secrets
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProgramRun:
    project: str
    stack: str
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    secret_outputs: set[str]
    error: BaseException | None = None

    def of_type(self, type_: str) -> list[RecordedResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> RecordedResource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]

    def by_urn(self, urn: str) -> RecordedResource | None:
        return next((r for r in self.resources if r.urn == urn), None)

    def depends_on(self, resource: RecordedResource, other: RecordedResource) -> bool:
        """True if `resource` waits for `other`, directly or transitively.

        A dependency on a component is a dependency on everything inside it, as in the engine.
        """
        seen: set[str] = set()
        pending = list(resource.dependencies)
        while pending:
            urn = pending.pop()
            if urn in seen:
                continue
            seen.add(urn)
            if urn == other.urn:
                return True
            found = self.by_urn(urn)
            if found is None:
                continue
            pending.extend(found.dependencies)
            if not found.custom:
                pending.extend(child.urn for child in self.children(found, recursive=True))
        return False

    def children(self, resource: RecordedResource, recursive: bool = False) -> list[RecordedResource]:
        direct = [r for r in self.resources if r.parent == resource.urn]
        if not recursive:
            return direct
        out = list(direct)
        for child in direct:
            out.extend(self.children(child, recursive=True))
        return out

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object the program creates (Helm releases excluded), in a stable order that
        can be applied as is: by kind as dependencies require, then namespace, then name (numbers counted).
        Patch resources (`...Patch` types: a server-side apply of a few fields of an object made elsewhere) are
        not objects of their own and are left out: applied as objects they would replace what they patch."""
        objects = [kubernetes_manifest(r) for r in self.resources
                   if r.type.startswith("kubernetes:") and not r.type.startswith("kubernetes:helm.sh/")
                   and not r.type.endswith("Patch")]
        return sorted(objects, key=apply_order)

    def kubernetes_patches(self) -> list[dict[str, Any]]:
        """The Patch resources' partial objects (server-side apply patches of objects made elsewhere)."""
        return [kubernetes_manifest(r) for r in self.resources
                if r.type.startswith("kubernetes:") and r.type.endswith("Patch")]


_KIND_ORDER = {kind: rank for rank, kinds in enumerate([
    ("Namespace",),
    ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Secret",
     "ResourceQuota"),
    ("Job",),
    ("ResourceFlavor", "ProvisioningRequestConfig", "MultiKueueCluster"),
    ("MultiKueueConfig",),
    ("AdmissionCheck",),
    ("ClusterQueue",),
    ("LocalQueue", "PodMonitoring"),
    ("RayJob",),
]) for kind in kinds}


def apply_order(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    natural = tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name))
    return (_KIND_ORDER.get(str(obj.get("kind")), len(_KIND_ORDER)), str(meta.get("namespace", "")), natural)


def whole_numbers(value: Any) -> Any:
    """The mock runtime hands every number over as a float; the provider turns them back by schema."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


def kubernetes_manifest(resource: RecordedResource) -> dict[str, Any]:
    manifest = {k: whole_numbers(v) for k, v in resource.inputs.items() if not k.startswith("__")}
    if "apiVersion" not in manifest:  # typed resources carry apiVersion/kind in their type token
        _, group_version, kind = resource.type.split(":")
        group, version = group_version.rsplit("/", 1)
        manifest = {"apiVersion": version if group == "core" else f"{group}/{version}", "kind": kind, **manifest}
    # apiVersion, kind, metadata first, as kubectl writes them.
    head: dict[str, Any] = {k: manifest[k] for k in ("apiVersion", "kind", "metadata") if k in manifest}
    return {**head, **{k: v for k, v in manifest.items() if k not in head}}


# --------------------------------------------------------------------------------------------
# Config, as the CLI would hand it over
# --------------------------------------------------------------------------------------------


def stack_config(project_dir: Path, stack: str) -> tuple[str, dict[str, str], list[str]]:
    """Return (project name, config map, secret keys) for a stack of the project in `project_dir`."""
    project_file = stackfile.read(project_dir / "Pulumi.yaml")
    project = project_file["name"]
    stack_path = project_dir / f"Pulumi.{stack}.yaml"
    if not stack_path.exists():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))
        raise FileNotFoundError(f"no stack {stack!r} in {project_dir} (stack files: {', '.join(known) or 'none'})")
    stack_file = stackfile.read(stack_path)

    values: dict[str, Any] = {}
    for key, spec in (project_file.get("config") or {}).items():
        full = key if ":" in key else f"{project}:{key}"
        if isinstance(spec, Mapping):
            if "value" in spec:
                values[full] = spec["value"]
            elif "default" in spec:
                values[full] = spec["default"]
        else:
            values[full] = spec
    secret_keys: list[str] = []
    for key, value in (stack_file.get("config") or {}).items():
        full = key if ":" in key else f"{project}:{key}"
        if isinstance(value, Mapping) and set(value) == {"secure"}:
            if full not in OFFLINE_SECRETS:
                raise stackfile.StackFileError(
                    f"{stack_path.name}: {full} is a secure value, which the offline plan cannot decrypt (only the "
                    "Pulumi CLI with the stack's secrets provider can); render with a plain placeholder in a copy of "
                    "the stack file, or use `pulumi preview`")
            value = SECRET_PLACEHOLDER  # ciphertext cannot be decrypted without the CLI
            secret_keys.append(full)
        values[full] = value
    return project, {k: encode_config_value(v) for k, v in values.items()}, secret_keys


def encode_config_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


# --------------------------------------------------------------------------------------------
# Mocks
# --------------------------------------------------------------------------------------------


class _Mocks(mocks.Mocks):
    def __init__(self, stack_references: Mapping[str, Mapping[str, Any]]) -> None:
        self.stack_references = stack_references

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        state = dict(args.inputs)
        state.setdefault("name", args.name)  # without a name, inputs that depend on it silently vanish
        if args.typ == "pulumi:pulumi:StackReference":
            ref_name = str(args.inputs.get("name") or args.name)
            if ref_name not in self.stack_references:
                raise KeyError(f"no mocked outputs for stack reference {ref_name!r}")
            ref = self.stack_references[ref_name]
            secret_names = list(ref.get("secretOutputNames", []))
            # As the engine does: secret outputs arrive wrapped as secrets inside the outputs map.
            outputs = {k: rpc.wrap_rpc_secret(v) if k in secret_names else v
                       for k, v in dict(ref.get("outputs", {})).items()}
            return ref_name, {"name": ref_name, "outputs": outputs, "secretOutputNames": secret_names}
        if args.typ == "gcp:container/cluster:Cluster":
            state.update(endpoint=MOCK_ENDPOINT, masterAuth={"clusterCaCertificate": MOCK_CA})
            return f"projects/{state.get('project')}/locations/{state.get('location')}/clusters/{state['name']}", state
        if args.typ == "gcp:serviceaccount/account:Account":
            state["email"] = f"{state.get('accountId')}@{state.get('project')}.iam.gserviceaccount.com"
        if args.typ == "gcp:compute/address:Address":  # a reserved address: TEST-NET-2, never a real one
            state.setdefault("address", f"198.51.100.{sum(args.name.encode()) % 254 + 1}")
            state["selfLink"] = f"projects/{state.get('project')}/regions/{state.get('region')}/addresses/{args.name}"
        if args.typ == "kubernetes:core/v1:Secret" and "data" not in state:
            state["data"] = {}
        return f"{args.name}-id", state

    def call(self, args: mocks.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, []


class _RecordingMonitor(mocks.MockMonitor):
    def __init__(self, mock: mocks.Mocks) -> None:
        super().__init__(mock)
        self.recorded: list[RecordedResource] = []
        self._lock = threading.Lock()

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            self._record(request, response.urn)
        return response

    def ReadResource(self, request: Any) -> Any:  # noqa: N802
        response = super().ReadResource(request)  # type: ignore[no-untyped-call]
        inputs, secrets = _unwrap(rpc.deserialize_properties(request.properties))
        with self._lock:
            self.recorded.append(RecordedResource(
                type=request.type, name=request.name, urn=response.urn, parent=request.parent,
                dependencies=list(request.dependencies), provider=request.provider, protect=False,
                custom=True, inputs=inputs, secret_inputs=secrets, options={"read": True},
            ))
        return response

    def _record(self, request: Any, urn: str) -> None:
        inputs, secrets = _unwrap(rpc.deserialize_properties(request.object))
        options = {
            "ignoreChanges": list(request.ignoreChanges),
            "replaceOnChanges": list(request.replaceOnChanges),
            "retainOnDelete": request.retainOnDelete,
            "deleteBeforeReplace": request.deleteBeforeReplace,
            "additionalSecretOutputs": list(request.additionalSecretOutputs),
            "aliases": [_alias(a) for a in request.aliases],
            "customTimeouts": {
                "create": request.customTimeouts.create,
                "update": request.customTimeouts.update,
                "delete": request.customTimeouts.delete,
            },
        }
        with self._lock:
            self.recorded.append(RecordedResource(
                type=request.type, name=request.name, urn=urn, parent=request.parent,
                dependencies=list(request.dependencies), provider=request.provider, protect=request.protect,
                custom=request.custom, inputs=inputs, secret_inputs=secrets, options=options,
            ))


def _alias(spec: Any) -> dict[str, Any]:
    """An alias the program declared, as {name, type, parentUrn, noParent} (empty fields: "same as now")."""
    if spec.HasField("urn"):
        return {"urn": spec.urn}
    s = spec.spec
    return {"name": s.name, "type": s.type, "parentUrn": s.parentUrn, "noParent": s.noParent}


def _unwrap(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """Strip Pulumi's secret wrappers, remembering where they were."""
    if rpc.is_rpc_secret(value):
        inner, paths = _unwrap(value["value"], path)
        return inner, [path or ".", *paths]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        found: list[str] = []
        for k, v in value.items():
            out[k], sub = _unwrap(v, f"{path}.{k}" if path else k)
            found.extend(sub)
        return out, found
    if isinstance(value, list):
        items: list[Any] = []
        found = []
        for i, v in enumerate(value):
            item, sub = _unwrap(v, f"{path}[{i}]")
            items.append(item)
            found.extend(sub)
        return items, found
    return value, []


# --------------------------------------------------------------------------------------------
# Running a program
# --------------------------------------------------------------------------------------------

def infra_references(project_dir: Path | str, stack: str) -> dict[str, dict[str, Any]]:
    """Mocked StackReference outputs for a jobs stack: its `infraStack` evaluated offline from this repository."""
    project, config, _ = stack_config(Path(project_dir).resolve(), stack)
    infra_stack = config.get(f"{project}:infraStack")
    if not infra_stack:
        return {}
    infra_project = stackfile.read(REPO_ROOT / "Pulumi.yaml")["name"]
    parts = infra_stack.split("/")
    if len(parts) > 1 and parts[-2] != infra_project:
        raise ValueError(f"infraStack {infra_stack!r} is not a stack of project {infra_project!r}")
    run = run_program(REPO_ROOT, parts[-1])
    return {infra_stack: {"outputs": run.outputs, "secretOutputNames": sorted(run.secret_outputs)}}


_RUN_LOCK = threading.Lock()  # Pulumi's runtime settings are process-wide


def run_program(
    project_dir: Path | str,
    stack: str,
    overrides: Mapping[str, Any] | None = None,
    stack_references: Mapping[str, Mapping[str, Any]] | None = None,
    timeout: float = 120.0,
    raise_errors: bool = True,
    secret_overrides: Mapping[str, Any] | None = None,
) -> ProgramRun:
    """Evaluate the project's `__main__.py` for `stack` under mocks.

    A failing program raises its error, or with `raise_errors=False` returns a run whose `error` is
    set and whose `resources` are whatever was registered before the failure.

    `overrides` replaces config keys (`key` for the project's namespace, or `namespace:key`);
    a value of None removes the key. `secret_overrides` sets keys as `pulumi config set --secret` would.
    """
    project_dir = Path(project_dir).resolve()
    project, config, secret_keys = stack_config(project_dir, stack)
    for key, value in (overrides or {}).items():
        full = key if ":" in key else f"{project}:{key}"
        if value is None:
            config.pop(full, None)
        else:
            config[full] = encode_config_value(value)
    for key, value in (secret_overrides or {}).items():
        full = key if ":" in key else f"{project}:{key}"
        config[full] = encode_config_value(value)
        secret_keys.append(full)

    with _RUN_LOCK:
        monitor = _RecordingMonitor(_Mocks(stack_references or {}))
        runtime_settings.ROOT.set(None)
        # A run that failed in an apply leaves its pending Output tasks in this process-wide set; the next
        # run_pulumi_func would await them and raise that run's error again.
        with runtime_settings.SETTINGS.lock:
            runtime_settings.SETTINGS.outputs.clear()
        pulumi.runtime.set_all_config(config, secret_keys)
        mocks.set_mocks(monitor.mocks, project=project, stack=stack, preview=False, monitor=monitor)
        root = runtime_settings.get_root_resource()
        assert root is not None

        def program() -> None:
            runpy.run_path(str(project_dir / "__main__.py"), run_name="__main__")

        async def run_and_collect() -> tuple[dict[str, Any], set[str]]:
            await run_pulumi_func(program)
            outputs: dict[str, Any] = {}
            secret: set[str] = set()
            for name, value in getattr(root, "outputs", {}).items():
                out = pulumi.Output.from_input(value)
                outputs[name] = await out.future()
                if await out.is_secret():
                    secret.add(name)
            return outputs, secret

        error: BaseException | None = None
        outputs: dict[str, Any] = {}
        secret_outputs: set[str] = set()
        try:
            outputs, secret_outputs = _sync_await(asyncio.wait_for(run_and_collect(), timeout))
        except TimeoutError:
            error = TimeoutError(f"the {project} program did not finish within {timeout:.0f} s under the mock runtime "
                                 f"({len(monitor.recorded)} resources registered so far)")
        except Exception as err:  # noqa: BLE001 - handed to the caller below
            error = err
        finally:
            pulumi.runtime.set_all_config({}, [])
    if error is not None and raise_errors:
        raise error
    return ProgramRun(project, stack, list(monitor.recorded), outputs, secret_outputs, error)
