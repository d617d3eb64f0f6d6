"""The public components: `Platform` (one cluster, created or existing) and `MultiRegionPlatform` (a MultiKueue
manager in front of regional workers). Their args are the infrastructure stack's config keys (args.py); their
outputs are the stack's outputs (tpu_fallback.model.outputs), so a program that builds one exports what a stack of
this project exports, and the jobs project can submit to it.

No `from __future__ import annotations` here: Pulumi's component analyzer reads these classes' annotations.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi

from tpu_fallback.api.args import ClusterArgs, MultiRegionPlatformArgs, PlatformArgs
from tpu_fallback.api.convert import camel, config_of
from tpu_fallback.components.apis import MONITORING_APIS, REQUIRED_APIS, ProjectApis, ProjectApisArgs
from tpu_fallback.components.egress import PrivateEgress, PrivateEgressArgs
from tpu_fallback.components.existing import ExistingClusterPlatform, ExistingClusterPlatformArgs
from tpu_fallback.components.monitoring import KueueDashboard, KueueDashboardArgs
from tpu_fallback.components.multikueue import MultiKueuePlatform, MultiKueuePlatformArgs
from tpu_fallback.components.platform import TpuPlatform, TpuPlatformArgs
from tpu_fallback.model.egress import stack_nat_gateways
from tpu_fallback.model.outputs import InfraOutputs
from tpu_fallback.model.settings import SECRET_CONFIG_KEYS, Settings, parse_settings
from tpu_fallback.model.validation import ConfigError

PACKAGE = "tpu-fallback"  # the package name other languages add (provider/PulumiPlugin.yaml, provider/__main__.py)


class PlatformConfigError(ConfigError, pulumi.RunError):
    """Invalid component args. The message names the setting, the value and what is allowed; the Pulumi CLI shows
    it as one line, without a Python traceback (a pulumi.RunError)."""


class _PlatformOutputs(pulumi.ComponentResource):
    """The outputs every platform has: the infrastructure stack's outputs (docs/outputs.md)."""

    cluster_name: pulumi.Output[str]
    """GKE cluster name (the manager's in multi-region mode)."""
    cluster_location: pulumi.Output[str]
    """Its zone (or region)."""
    cluster_endpoint: pulumi.Output[str]
    """API server address."""
    kubeconfig: pulumi.Output[str]
    """Secret: a kubeconfig using gke-gcloud-auth-plugin (no credential inside), or the one given."""
    system_pool: pulumi.Output[str]
    """CPU pool name."""
    node_pools: pulumi.Output[dict[str, Any]]
    """TPU pool names per plan or rung."""
    tpu: pulumi.Output[dict[str, Any]]
    """The slice every job must match: type, machineType, topology, acceleratorLabel, chipsPerHost, hostsPerSlice,
    chipsPerSlice."""
    kueue_namespace: pulumi.Output[str]
    """Where Kueue runs."""
    kueue_version: pulumi.Output[str]
    """The Kueue chart version."""
    cluster_queue: pulumi.Output[str]
    """The ClusterQueue's name."""
    local_queues: pulumi.Output[list[dict[str, str]]]
    """Where jobs are submitted: [{namespace, name}]."""
    flavors: pulumi.Output[dict[str, Any]]
    """Flavor names: system, onDemand, flexStart (and rungs with a ladder)."""
    system_quota: pulumi.Output[dict[str, Any]]
    """The default-cpu quota every job's Ray head shares."""
    tpu_flavors: pulumi.Output[list[dict[str, Any]]]
    """Every TPU flavor in the order Kueue tries them, with its rung, kind, hosts and quota."""
    elastic_jobs: pulumi.Output[bool] | None
    """Whether the Kueue installed admits elastic jobs (absent when the platform does not install Kueue)."""
    _stack_outputs: dict[str, Any]

    def _export(self, outputs: InfraOutputs) -> None:
        """Set the outputs (as Outputs: the analyzer's types, and what other languages read) and register them."""
        exports = outputs.exports()
        for attr in _output_attributes(type(self)):
            value = exports.get(camel(attr))
            setattr(self, attr, None if value is None else pulumi.Output.from_input(value))
        self.register_outputs(exports)
        self._stack_outputs = exports

    def stack_outputs(self) -> dict[str, Any]:
        """Stack output name -> value: what a stack of this project exports (its program exports them so)."""
        return dict(self._stack_outputs)


class Platform(_PlatformOutputs):
    """A GKE cluster for Cloud TPU training whose jobs fall back from on-demand TPUs (plan A) to DWS flex-start (plan
    B) or down a capacity ladder, with Kueue, the fallback controller and the Ray operator; or, with
    existing_cluster, Kueue, the fallback and the queues on a cluster made elsewhere."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PACKAGE}:index:Platform", name, None, opts)
        settings = settings_of(args, PlatformArgs)
        if settings.multikueue.enabled:  # only through a stack's config (PlatformArgs has no multikueue)
            raise PlatformConfigError("multikueue: use MultiRegionPlatform")
        child = _child_options(self)
        if settings.existing_cluster is not None:
            kubeconfig = args.get("kubeconfig")
            existing = ExistingClusterPlatform(settings.existing_cluster.name, ExistingClusterPlatformArgs(
                settings, None if kubeconfig is None else pulumi.Output.secret(kubeconfig)), opts=child)
            self._export(existing.outputs)
            return
        apis, egress = _project_services(settings, child)
        platform = TpuPlatform(settings.cluster_name, TpuPlatformArgs(settings, apis, egress), opts=child)
        _dashboard(settings, apis, child)
        self._export(platform.outputs)


class MultiRegionPlatform(_PlatformOutputs):
    """A MultiKueue manager cluster in front of regional worker clusters, each a Platform of its own: jobs are
    submitted to the manager, which dispatches each to a worker with room."""

    multikueue: pulumi.Output[bool]
    """True: jobs are dispatched to the workers."""
    workers: pulumi.Output[list[dict[str, Any]]]
    """The worker clusters: [{name, location, clusterName}]."""

    def __init__(self, name: str, args: MultiRegionPlatformArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PACKAGE}:index:MultiRegionPlatform", name, None, opts)
        settings = settings_of(args, MultiRegionPlatformArgs)
        child = _child_options(self)
        apis, egress = _project_services(settings, child)
        platform = MultiKueuePlatform(settings.cluster_name, MultiKueuePlatformArgs(settings, apis, egress),
                                      opts=child)
        _dashboard(settings, apis, child)
        self._export(platform.outputs)


def settings_of(args: ClusterArgs | Mapping[str, Any], typ: type) -> Settings:
    """Validated settings from a component's args, by the stack config's parser (same defaults, same errors)."""
    try:
        raw = config_of(args, typ)
        project = raw.pop("project", None) or pulumi.Config("gcp").get("project")
        if typ is MultiRegionPlatformArgs:
            raw["multikueue"] = {"enabled": True, **{k: raw.pop(k) for k in ("manager", "workers") if k in raw}}
        if "kubeconfig" in raw:  # its presence is what the parser checks; the value stays an Output, secret
            raw["kubeconfig"] = "[secret]"
        return parse_settings(raw, project, SECRET_CONFIG_KEYS)
    except PlatformConfigError:
        raise
    except ConfigError as err:
        raise PlatformConfigError(str(err)) from None


def _child_options(parent: pulumi.Resource) -> pulumi.ResourceOptions:
    """The top-level children's options. The alias keeps a stack made before the components existed: its
    `__main__.py` registered these children at the stack's root; the engine aliases their own children in turn."""
    return pulumi.ResourceOptions(parent=parent, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)])


def _project_services(settings: Settings, opts: pulumi.ResourceOptions
                      ) -> tuple[Sequence[pulumi.Resource], PrivateEgress | None]:
    """The Google APIs the clusters wait for, and the private nodes' Cloud NAT (one per region)."""
    services = (*REQUIRED_APIS, *(MONITORING_APIS if settings.kueue.pod_monitoring else ()))
    apis = (ProjectApis(f"{settings.cluster_name}-apis", ProjectApisArgs(settings.project, services), opts=opts
                        ).services if settings.enable_apis else [])
    gateways = stack_nat_gateways(settings)  # model/egress.py
    egress = (PrivateEgress(f"{settings.cluster_name}-egress", PrivateEgressArgs(settings.project, gateways, apis),
                            opts=opts) if gateways else None)
    return apis, egress


def _dashboard(settings: Settings, apis: Sequence[pulumi.Resource], opts: pulumi.ResourceOptions) -> None:
    if settings.kueue.pod_monitoring:
        KueueDashboard(f"{settings.cluster_name}-kueue", KueueDashboardArgs(
            settings.project, f"Kueue: {settings.cluster_name} (tpu-fallback)", apis, settings.multikueue.enabled,
            fallback=settings.fallback.enabled), opts=opts)


def _output_attributes(cls: type) -> list[str]:
    return [name for klass in reversed(cls.__mro__) for name in getattr(klass, "__annotations__", {})
            if not name.startswith("_") and klass not in (pulumi.Resource, pulumi.ComponentResource, object)]

