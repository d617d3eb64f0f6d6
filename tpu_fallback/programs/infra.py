"""The infrastructure program: config -> validated settings -> one platform (or MultiKueue) -> stack outputs."""

from __future__ import annotations

import pulumi

from tpu_fallback.components.apis import MONITORING_APIS, REQUIRED_APIS, ProjectApis, ProjectApisArgs
from tpu_fallback.components.egress import PrivateEgress, PrivateEgressArgs
from tpu_fallback.components.existing import ExistingClusterPlatform, ExistingClusterPlatformArgs
from tpu_fallback.components.monitoring import KueueDashboard, KueueDashboardArgs
from tpu_fallback.components.multikueue import MultiKueuePlatform, MultiKueuePlatformArgs
from tpu_fallback.components.platform import TpuPlatform, TpuPlatformArgs
from tpu_fallback.model.egress import stack_nat_gateways
from tpu_fallback.model.settings import PROJECT, Settings, decode_config, parse_settings
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
        settings = load_settings()  # validates every key before any resource is registered
    if settings.existing_cluster is not None:
        kubeconfig = pulumi.Config().require_secret("kubeconfig") if settings.existing_cluster.kubeconfig else None
        existing = ExistingClusterPlatform(settings.existing_cluster.name,
                                           ExistingClusterPlatformArgs(settings, kubeconfig))
        for name, value in existing.outputs.exports().items():
            pulumi.export(name, value)
        return
    services = (*REQUIRED_APIS, *(MONITORING_APIS if settings.kueue.pod_monitoring else ()))
    apis = (ProjectApis(f"{settings.cluster_name}-apis", ProjectApisArgs(settings.project, services)).services
            if settings.enable_apis else [])
    gateways = stack_nat_gateways(settings)  # private nodes' Cloud NAT, one per region (model/egress.py)
    egress = (PrivateEgress(f"{settings.cluster_name}-egress", PrivateEgressArgs(settings.project, gateways, apis))
              if gateways else None)
    platform: TpuPlatform | MultiKueuePlatform
    if settings.multikueue.enabled:
        platform = MultiKueuePlatform(settings.cluster_name, MultiKueuePlatformArgs(settings, apis, egress))
    else:
        platform = TpuPlatform(settings.cluster_name, TpuPlatformArgs(settings, apis, egress))
    if settings.kueue.pod_monitoring:
        KueueDashboard(f"{settings.cluster_name}-kueue", KueueDashboardArgs(
            settings.project, f"Kueue: {settings.cluster_name} (tpu-fallback)", apis, settings.multikueue.enabled,
            fallback=settings.fallback.enabled))
    for name, value in platform.outputs.exports().items():
        pulumi.export(name, value)
