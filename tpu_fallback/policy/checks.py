"""The guard rails of tpu-fallback as plain functions over (resource type, props).

No Pulumi and no pulumi-policy import here: the functions are tested directly (tests/policy), run over
the offline plan of every example stack (tools/policycheck.py), and wrapped for the Pulumi CLI by
policy/pack.py. Props are the camelCase property maps the engine hands a policy pack (resource inputs
for resource policies, resource outputs for stack policies); numbers may be floats.

A value the engine does not know yet (during `pulumi preview`) is the sentinel `UNKNOWN`; reading one
through `get` raises `UnknownValueError`, which the pack turns into pulumi-policy's "can't run during
preview" advisory instead of a verdict based on a placeholder.

| policy | kind | rule |
|---|---|---|
| tpu-pools-scale-to-zero | resource | TPU node pools (machine type `ct*`) autoscale from 0 and start empty |
| flex-start-pools-are-queued | resource | flex-start: queued provisioning, no auto-repair, NO_RESERVATION, no spot |
| on-demand-quota-within-capacity | stack | the ClusterQueue's on-demand TPU quota fits the on-demand pools |
| production-cluster-protected | resource | production clusters have deletion protection and Pulumi `protect` |
| kubeconfig-is-secret | stack | every kubeconfig (stack output or property) is a Pulumi secret |
| kueue-chart-pinned | resource | the Kueue Helm chart version is an exact x.y.z |
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tpu_fallback.model.capacity import ON_DEMAND as ON_DEMAND_PLAN
from tpu_fallback.model.labels import PLAN_LABEL, TPU_RESOURCE
from tpu_fallback.model.quantity import parse_quantity
from tpu_fallback.model.queues import ON_DEMAND_FLAVOR

NODE_POOL: Final = "gcp:container/nodePool:NodePool"
CLUSTER: Final = "gcp:container/cluster:Cluster"
HELM_RELEASE: Final = "kubernetes:helm.sh/v3:Release"
HELM_CHART_V4: Final = "kubernetes:helm.sh/v4:Chart"
STACK: Final = "pulumi:pulumi:Stack"
CLUSTER_QUEUE: Final = re.compile(r"^kubernetes:kueue\.x-k8s\.io/v1[a-z0-9]*:ClusterQueue$")


# Stack names treated as production: "prod", "production", "prod-eu", "production_us", ...
DEFAULT_PRODUCTION_STACKS: Final = r"^prod(uction)?([-_.].*)?$"
PRODUCTION_LABEL: Final = ("environment", "production")  # or a Cluster resourceLabels entry

_TPU_MACHINE: Final = re.compile(r"^ct")
_CHIPS_PER_VM: Final = re.compile(r"-(\d+)t$")  # ct6e-standard-4t -> 4
_EXACT_VERSION: Final = re.compile(r"^\d+\.\d+\.\d+$")
_KUBECONFIG_KEY: Final = re.compile(r"^.*kube_?config$", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unknown:
    """A value the engine does not know yet; `token` is whatever the caller needs to report it."""

    token: str = ""


UNKNOWN: Final = Unknown()


class UnknownValueError(Exception):
    def __init__(self, path: str, token: str = "") -> None:
        super().__init__(f"{path} can't be known during preview")
        self.path = path
        self.token = token


def get(props: Any, *keys: str) -> Any:
    """The value at `keys` in nested mappings; None when absent; raises UnknownValueError on an unknown."""
    current = props
    for depth, key in enumerate(keys):
        if isinstance(current, Unknown):
            raise UnknownValueError(".".join(keys[:depth]) or ".", current.token)
        if not isinstance(current, Mapping):
            return None
        current = current.get(key)
    if isinstance(current, Unknown):
        raise UnknownValueError(".".join(keys), current.token)
    return current


def number(value: Any) -> float | None:
    """A JSON number (the engine sends integers as floats) or a numeric string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def quantity(value: Any) -> float:
    """A Kubernetes quantity (16, "16", "1e9", "20Gi", "500m") as a number; ValueError if it is not one."""
    plain = number(value)
    if plain is not None:
        return plain
    return float(parse_quantity(value))  # ValueError for anything Kubernetes would refuse


def chips_per_vm(machine_type: str) -> int | None:
    """TPU chips of one VM of a Cloud TPU machine type: the number before the final "t"."""
    match = _CHIPS_PER_VM.search(machine_type)
    return int(match.group(1)) if match else None


def is_tpu_machine(machine_type: Any) -> bool:
    return isinstance(machine_type, str) and bool(_TPU_MACHINE.match(machine_type))


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


# --------------------------------------------------------------------------------------------
# a. TPU node pools scale to zero
# --------------------------------------------------------------------------------------------


def check_tpu_pool_scales_to_zero(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A TPU node pool autoscales with a minimum of 0 nodes and starts (and is never pinned) above 0."""
    if resource_type != NODE_POOL:
        return []
    machine_type = get(props, "nodeConfig", "machineType")
    if not is_tpu_machine(machine_type):
        return []
    problems: list[str] = []
    autoscaling = get(props, "autoscaling")
    if not isinstance(autoscaling, Mapping):
        problems.append(f"TPU node pool ({machine_type}) has no autoscaling: idle TPU VMs are billed; "
                        "set autoscaling.minNodeCount = 0")
    else:
        minimum = get(autoscaling, "minNodeCount")
        total_minimum = get(autoscaling, "totalMinNodeCount")
        if minimum is None and total_minimum is None:
            problems.append(f"TPU node pool ({machine_type}) sets no autoscaling.minNodeCount; set it to 0")
        for key, value in (("minNodeCount", minimum), ("totalMinNodeCount", total_minimum)):
            if value is not None and number(value) != 0:
                problems.append(f"TPU node pool ({machine_type}) has autoscaling.{key} = {_fmt(value)}; "
                                "it must be 0 so that idle TPU VMs are removed")
    for key in ("initialNodeCount", "nodeCount"):
        value = get(props, key)
        if value is not None and number(value) != 0:
            problems.append(f"TPU node pool ({machine_type}) has {key} = {_fmt(value)}; it must be 0 (or unset): "
                            "the autoscaler adds TPU VMs when a job needs them")
    return problems


# --------------------------------------------------------------------------------------------
# b. Flex-start pools
# --------------------------------------------------------------------------------------------


def check_flex_start_pool(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A DWS flex-start pool: queued provisioning on, auto-repair off, NO_RESERVATION, not spot/preemptible."""
    if resource_type != NODE_POOL or get(props, "nodeConfig", "flexStart") is not True:
        return []
    problems: list[str] = []
    if get(props, "queuedProvisioning", "enabled") is not True:
        problems.append("flex-start pool must set queuedProvisioning.enabled = true "
                        "(Kueue's ProvisioningRequest admission check needs it)")
    if get(props, "management", "autoRepair") is not False:
        problems.append("flex-start pool must set management.autoRepair = false "
                        "(a repair would delete a queued node in the middle of a run)")
    reservation = get(props, "nodeConfig", "reservationAffinity", "consumeReservationType")
    if reservation != "NO_RESERVATION":
        problems.append("flex-start pool must set nodeConfig.reservationAffinity.consumeReservationType = "
                        f"NO_RESERVATION, not {_fmt(reservation)}")
    for key in ("spot", "preemptible"):
        if get(props, "nodeConfig", key) is True:
            problems.append(f"flex-start pool must not set nodeConfig.{key} = true")
    return problems


# --------------------------------------------------------------------------------------------
# d. Production clusters are protected
# --------------------------------------------------------------------------------------------


def is_production(stack: str, cluster_props: Mapping[str, Any],
                  production_stacks: str = DEFAULT_PRODUCTION_STACKS) -> bool:
    """Production: the stack name matches `production_stacks`, or the cluster is labelled environment=production."""
    if stack and re.match(production_stacks, stack):
        return True
    key, value = PRODUCTION_LABEL
    return bool(get(cluster_props, "resourceLabels", key) == value)


def check_production_cluster(resource_type: str, props: Mapping[str, Any], protect: bool, stack: str,
                             production_stacks: str = DEFAULT_PRODUCTION_STACKS) -> list[str]:
    """A production GKE cluster has deletionProtection (absent = pulumi-gcp's default, true) and `protect`."""
    if resource_type != CLUSTER or not is_production(stack, props, production_stacks):
        return []
    problems: list[str] = []
    protection = get(props, "deletionProtection")
    if protection is not None and protection is not True:
        problems.append(f"production cluster must set deletionProtection = true, not {_fmt(protection)}")
    if not protect:
        problems.append("production cluster must have the resource option protect=True "
                        "(config tpu-fallback:protect: true)")
    return problems


# --------------------------------------------------------------------------------------------
# f. The Kueue chart is pinned
# --------------------------------------------------------------------------------------------


def check_kueue_chart_pinned(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A Helm release (or v4 Chart) of Kueue pins an exact chart version x.y.z."""
    if resource_type not in (HELM_RELEASE, HELM_CHART_V4):
        return []
    chart = get(props, "chart")
    if not isinstance(chart, str) or "kueue" not in chart.lower():
        return []
    version = get(props, "version")
    if not isinstance(version, str) or not _EXACT_VERSION.match(version):
        shown = "no version" if version in (None, "") else f"version {_fmt(version)}"
        return [f"Kueue chart {chart} has {shown}; pin an exact x.y.z such as 0.19.2 "
                "(a range or no version upgrades Kueue and its CRDs behind the stack's back)"]
    return []


# --------------------------------------------------------------------------------------------
# e. Kubeconfigs are secret
# --------------------------------------------------------------------------------------------


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every mapping entry at any depth; paths as the mock harness writes them ("a.b[0].c")."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            yield sub, str(key), item
            yield from _walk(item, sub)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")


def is_secret_path(path: str, secret_paths: Collection[str]) -> bool:
    """True if `path` or a value enclosing it is a secret ("." is the whole property map)."""
    if "." in secret_paths or path in secret_paths:
        return True
    return any(path.startswith(f"{s}.") or path.startswith(f"{s}[") for s in secret_paths)


def _holds_credentials(value: Any) -> bool:
    """Kubeconfig content (YAML or JSON text), or a value not known yet; a one-line file path is not."""
    if isinstance(value, Unknown):
        return True  # it will be a value, and whether it is a secret is already known
    if not isinstance(value, str) or not value.strip():
        return False
    text = value.strip()
    return "\n" in text or text.startswith("{") or "apiVersion" in text


def check_kubeconfig_is_secret(resource_type: str, props: Mapping[str, Any],
                               secret_paths: Collection[str]) -> list[str]:
    """Every property (or stack output) named like `kubeconfig` that holds kubeconfig content is a secret.

    Applies to all resources: the stack's outputs (type pulumi:pulumi:Stack), the Kubernetes provider's
    `kubeconfig`, Secret/ConfigMap data keys such as a MultiKueue worker's `kubeconfig`. A reference to a
    kubeconfig (a file path, MultiKueueCluster's `kubeConfig: {locationType, location}`) is not checked.
    """
    problems: list[str] = []
    for path, key, value in _walk(props):
        if not _KUBECONFIG_KEY.match(key) or not _holds_credentials(value):
            continue
        if not is_secret_path(path, secret_paths):
            where = f"stack output {path}" if resource_type == STACK else f"property {path}"
            problems.append(f"{where} holds a kubeconfig but is not a secret; wrap it in pulumi.Output.secret() "
                            "(or list it in additional_secret_outputs) so state and logs never show it")
    return problems


# --------------------------------------------------------------------------------------------
# c. The on-demand quota fits the on-demand pools
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """One resource as the policies see it: what the engine hands CrossGuard, or a mock-runtime record."""

    type: str
    props: Mapping[str, Any]
    name: str = ""
    urn: str = ""
    protect: bool = False
    secret_paths: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Finding:
    message: str
    urn: str = ""  # "" = the stack as a whole


def _pool_max_nodes(props: Mapping[str, Any]) -> float:
    for keys in (("autoscaling", "maxNodeCount"), ("autoscaling", "totalMaxNodeCount"), ("nodeCount",),
                 ("initialNodeCount",)):
        value = number(get(props, *keys))
        if value is not None:
            return value
    return 0.0


def on_demand_capacity(resources: Sequence[Resource]) -> tuple[float, list[Finding]]:
    """TPU chips the on-demand pools can hold at once: Σ maxNodeCount × chips per VM over pools
    labelled tpu-fallback/plan=on-demand; plus findings for pools whose chips cannot be derived."""
    chips = 0.0
    findings: list[Finding] = []
    for pool in resources:
        if pool.type != NODE_POOL or get(pool.props, "nodeConfig", "labels", PLAN_LABEL) != ON_DEMAND_PLAN:
            continue
        machine_type = get(pool.props, "nodeConfig", "machineType")
        per_vm = chips_per_vm(machine_type) if isinstance(machine_type, str) else None
        if per_vm is None:
            findings.append(Finding(f"node pool labelled {PLAN_LABEL}={ON_DEMAND_PLAN} has machine type "
                                    f"{_fmt(machine_type)}, which names no TPU chip count (…-<n>t)", pool.urn))
            continue
        chips += _pool_max_nodes(pool.props) * per_vm
    return chips, findings


def is_on_demand_flavor(name: Any) -> bool:
    """Plan A's flavors: "on-demand", and "on-demand-2", ... (one per node pool)."""
    return isinstance(name, str) and re.fullmatch(rf"{re.escape(ON_DEMAND_FLAVOR)}(-\d+)?", name) is not None


def on_demand_quota(cluster_queue_props: Mapping[str, Any]) -> float:
    """The nominal google.com/tpu quota of the ClusterQueue's on-demand flavors (0 if it has none)."""
    total = 0.0
    for group in get(cluster_queue_props, "spec", "resourceGroups") or []:
        for flavor in get(group, "flavors") or []:
            if not is_on_demand_flavor(get(flavor, "name")):
                continue
            for resource in get(flavor, "resources") or []:
                if get(resource, "name") == TPU_RESOURCE:
                    total += quantity(get(resource, "nominalQuota"))
    return total


def check_on_demand_quota(resources: Sequence[Resource]) -> list[Finding]:
    """No ClusterQueue promises more on-demand TPU chips than the on-demand pools can provide.

    Kueue falls back to the next flavor on *quota*, not on a cloud stock-out: a quota above the pools'
    capacity admits jobs to plan A that can never be scheduled there, and they never reach plan B.
    """
    queues = [r for r in resources if CLUSTER_QUEUE.match(r.type)]
    if not queues or not any(r.type == NODE_POOL for r in resources):
        return []  # no queue, or the pools belong to another stack (existing-cluster mode): nothing to compare
    capacity, findings = on_demand_capacity(resources)
    for queue in queues:
        name = get(queue.props, "metadata", "name") or queue.name
        try:
            quota = on_demand_quota(queue.props)
        except ValueError as err:
            findings.append(Finding(f"ClusterQueue {name}: on-demand {TPU_RESOURCE} quota unreadable: {err}",
                                    queue.urn))
            continue
        if quota > capacity:
            findings.append(Finding(
                f"ClusterQueue {name}: on-demand {TPU_RESOURCE} nominalQuota {_fmt(quota)} exceeds the "
                f"{_fmt(capacity)} chips of the node pools labelled {PLAN_LABEL}={ON_DEMAND_PLAN} "
                "(maxNodeCount × chips per VM); jobs admitted beyond that wait on plan A instead of falling "
                "back to plan B", queue.urn))
    return findings


# --------------------------------------------------------------------------------------------
# The pack, as data
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    stack: str = ""
    production_stacks: str = DEFAULT_PRODUCTION_STACKS


@dataclass(frozen=True)
class PolicySpec:
    name: str
    description: str
    resource_check: Callable[[Resource, Context], list[str]] | None = None
    stack_check: Callable[[Sequence[Resource], Context], list[Finding]] | None = None


@dataclass(frozen=True)
class Violation:
    policy: str
    message: str
    urn: str = ""


def _each(check: Callable[[Resource], list[str]]) -> Callable[[Sequence[Resource], Context], list[Finding]]:
    def run(resources: Sequence[Resource], _context: Context) -> list[Finding]:
        return [Finding(message, r.urn) for r in resources for message in check(r)]

    return run


POLICIES: Final[tuple[PolicySpec, ...]] = (
    PolicySpec(
        "tpu-pools-scale-to-zero",
        "TPU node pools autoscale from zero: autoscaling.minNodeCount = 0 and initialNodeCount 0.",
        resource_check=lambda r, _: check_tpu_pool_scales_to_zero(r.type, r.props),
    ),
    PolicySpec(
        "flex-start-pools-are-queued",
        "Flex-start pools use queued provisioning, no auto-repair, NO_RESERVATION and no spot VMs.",
        resource_check=lambda r, _: check_flex_start_pool(r.type, r.props),
    ),
    PolicySpec(
        "on-demand-quota-within-capacity",
        "The ClusterQueue's on-demand TPU quota does not exceed the on-demand node pools' capacity.",
        stack_check=lambda resources, _: check_on_demand_quota(resources),
    ),
    PolicySpec(
        "production-cluster-protected",
        "Clusters of production stacks have GKE deletion protection and Pulumi's protect option.",
        resource_check=lambda r, c: check_production_cluster(r.type, r.props, r.protect, c.stack,
                                                             c.production_stacks),
    ),
    PolicySpec(
        "kubeconfig-is-secret",
        "Kubeconfigs (stack outputs and resource properties) are Pulumi secrets.",
        stack_check=_each(lambda r: check_kubeconfig_is_secret(r.type, r.props, r.secret_paths)),
    ),
    PolicySpec(
        "kueue-chart-pinned",
        "The Kueue Helm chart is pinned to an exact version x.y.z.",
        resource_check=lambda r, _: check_kueue_chart_pinned(r.type, r.props),
    ),
)


def evaluate(resources: Sequence[Resource], context: Context = Context()) -> list[Violation]:
    """Every violation of every policy: resource policies per resource, then stack policies over all."""
    violations: list[Violation] = []
    for spec in POLICIES:
        if spec.resource_check is not None:
            check = spec.resource_check
            violations.extend(Violation(spec.name, m, r.urn) for r in resources for m in check(r, context))
        if spec.stack_check is not None:
            violations.extend(Violation(spec.name, f.message, f.urn) for f in spec.stack_check(resources, context))
    return violations
