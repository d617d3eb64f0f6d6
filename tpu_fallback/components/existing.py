"""ExistingClusterPlatform: Kueue, its readiness gate and the fallback queues on a GKE cluster made elsewhere.

Many platform teams get their cluster from another stack or team. This component creates only what goes on
the cluster, with the same stack outputs as a cluster this project builds; the TPU node pools are expected
to exist with the names and labels the settings describe (the queues select them by node label).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import yaml

from tpu_fallback.components.kueue import Kueue
from tpu_fallback.components.platform import install_queues, queue_outputs
from tpu_fallback.components.queues import FallbackQueues
from tpu_fallback.model.outputs import InfraOutputs
from tpu_fallback.model.queues import QueuePlan, node_pool_names
from tpu_fallback.model.settings import ExistingClusterSettings, Settings
from tpu_fallback.render.kubeconfig import gke_exec_kubeconfig


@dataclass(frozen=True)
class ExistingClusterPlatformArgs:
    settings: Settings  # with existing_cluster set
    kubeconfig: pulumi.Output[str] | None = None  # the secret config value; None: GKE exec kubeconfig


class ExistingClusterPlatform(pulumi.ComponentResource):
    settings: Settings
    kubeconfig: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    provider: k8s.Provider
    kueue: Kueue
    queue_plan: QueuePlan
    queues: FallbackQueues
    outputs: InfraOutputs

    def __init__(self, name: str, args: ExistingClusterPlatformArgs, opts: pulumi.ResourceOptions | None = None
                 ) -> None:
        super().__init__("tpu-fallback:platform:ExistingClusterPlatform", name, None, opts)
        settings = self.settings = args.settings
        existing = settings.existing_cluster
        if existing is None:
            raise ValueError("ExistingClusterPlatform needs settings with existing_cluster")
        self.kubeconfig, self.endpoint = self._access(settings.project, existing, args.kubeconfig)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, cluster_identifier=existing.name,
                                     opts=pulumi.ResourceOptions(parent=self))
        on_cluster = pulumi.ResourceOptions(parent=self, providers=[self.provider])
        self.kueue, self.queue_plan, self.queues = install_queues(name, settings, on_cluster)
        self.outputs = self._outputs(existing)
        self.register_outputs(self.outputs.exports())

    def _access(self, project: str, existing: ExistingClusterSettings, kubeconfig: pulumi.Output[str] | None
                ) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
        """(kubeconfig, endpoint): the given kubeconfig and its server, or GKE's endpoint and CA by name."""
        if kubeconfig is not None:
            server = pulumi.Output.unsecret(kubeconfig.apply(_server))  # an address, not a credential
            return pulumi.Output.secret(kubeconfig), server
        # Read, not managed: the cluster stays the other stack's (pulumi destroy here never touches it).
        cluster = gcp.container.Cluster.get(
            f"{existing.name}-cluster", f"projects/{project}/locations/{existing.location}/clusters/{existing.name}",
            opts=pulumi.ResourceOptions(parent=self))
        context = f"gke_{project}_{existing.location}_{existing.name}"
        exec_config = pulumi.Output.all(cluster.endpoint, cluster.master_auth.cluster_ca_certificate).apply(
            lambda parts: gke_exec_kubeconfig(context, parts[0], parts[1] or ""))
        return pulumi.Output.secret(exec_config), cluster.endpoint

    def _outputs(self, existing: ExistingClusterSettings) -> InfraOutputs:
        settings = self.settings
        pools = node_pool_names(settings)  # the pools the settings describe (their rungs'), made elsewhere
        return InfraOutputs(
            cluster_name=existing.name,
            cluster_location=existing.location,
            cluster_endpoint=self.endpoint,
            kubeconfig=self.kubeconfig,
            system_pool=settings.system_pool.name,
            node_pools=pools,
            **queue_outputs(settings, self.queue_plan),
        )


def _server(kubeconfig: str) -> str:
    """The current context's API server address (without https://), as GKE's endpoint output reads."""
    doc = yaml.safe_load(kubeconfig)
    if not isinstance(doc, dict):  # the offline plan's "[secret]" placeholder (YAML: a list), or no kubeconfig
        return ""
    contexts = {c["name"]: c["context"] for c in doc.get("contexts", [])}
    cluster_name = contexts.get(doc.get("current-context", ""), {}).get("cluster")
    clusters = {c["name"]: c["cluster"] for c in doc.get("clusters", [])}
    server = str(clusters.get(cluster_name, {}).get("server", ""))
    return server.removeprefix("https://")
