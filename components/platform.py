"""TpuPlatform: one cluster with its plan A and plan B TPU pools, Kueue and the fallback queues."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.capacity import FLEX_START, ON_DEMAND
from components.cluster import GkeCluster, GkeClusterArgs
from components.kueue import Kueue, KueueArgs
from components.manifests import (
    FLEX_FLAVOR,
    KUEUE_NAMESPACE,
    ON_DEMAND_FLAVOR,
    SYSTEM_FLAVOR,
    kueue_pod_monitoring,
    queue_plan,
)
from components.queues import FallbackQueues, FallbackQueuesArgs
from components.settings import Settings
from components.tpu_pool import TpuNodePool, TpuNodePoolArgs


class TpuPlatform(pulumi.ComponentResource):
    """Everything one regional cluster needs to run TPU jobs with the plan A -> plan B fallback."""

    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:platform:TpuPlatform", name, None, opts)
        self.settings = settings
        child = pulumi.ResourceOptions(parent=self)
        self.cluster = GkeCluster(
            name,
            GkeClusterArgs(
                project=settings.project,
                cluster_name=settings.cluster_name,
                location=settings.location,
                gke_version=settings.gke_version,
                system_pool=settings.system_pool,
                deletion_protection=settings.deletion_protection,
                protect=settings.protect,
            ),
            opts=child,
        )
        # Both plans depend on the cluster only, never on each other, so GKE creates them in parallel.
        def plan_args(plan: str, base_name: str, max_slices: int, **extra: str | None) -> TpuNodePoolArgs:
            return TpuNodePoolArgs(
                project=settings.project,
                cluster_name=self.cluster.cluster.name,
                location=settings.location,
                plan=plan,
                base_name=base_name,
                tpu=settings.tpu,
                max_slices=max_slices,
                node_service_account=self.cluster.node_service_account.email,
                **extra,
            )

        on_demand, flex = settings.on_demand, settings.flex_start
        self.on_demand = TpuNodePool(
            f"{name}-plan-a",
            plan_args(ON_DEMAND, on_demand.name, on_demand.max_slices, reservation=on_demand.reservation),
            opts=child,
        ) if on_demand.max_slices > 0 else None
        self.flex_start = TpuNodePool(
            f"{name}-plan-b",
            plan_args(FLEX_START, flex.name, flex.max_slices, max_run_duration=flex.max_run_duration),
            opts=child,
        ) if flex.active else None

        # Kueue and the queues need only the cluster's API server, not the TPU pools (they refer to pools
        # by label), so they are installed while GKE is still creating the pools.
        on_cluster = pulumi.ResourceOptions(parent=self, providers=[self.cluster.provider])
        self.kueue = Kueue(f"{name}-kueue", KueueArgs(settings.kueue, settings.system_pool.name), opts=on_cluster)
        self.queue_plan = queue_plan(settings)
        self.queues = FallbackQueues(
            f"{name}-queues", FallbackQueuesArgs(plan=self.queue_plan, ready=self.kueue.ready), opts=on_cluster
        )
        if settings.kueue.pod_monitoring:
            kueue_metrics(f"{name}-kueue-metrics", self.kueue, opts=on_cluster)
        self.register_outputs({})

    def stack_outputs(self) -> dict[str, Any]:
        """The stack outputs contract (README, "Outputs")."""
        tpu = self.settings.tpu
        return {
            "clusterName": self.cluster.cluster.name,
            "clusterLocation": self.cluster.cluster.location,
            "clusterEndpoint": self.cluster.cluster.endpoint,
            "kubeconfig": self.cluster.kubeconfig,
            "systemPool": self.cluster.system_pool.name if self.cluster.system_pool else None,
            "nodePools": {
                "onDemand": self.on_demand.names if self.on_demand else [],
                "flexStart": self.flex_start.names if self.flex_start else [],
            },
            "tpu": {
                "type": tpu.family.name,
                "machineType": tpu.machine_type,
                "topology": tpu.topology,
                "acceleratorLabel": tpu.accelerator_label,
                "chipsPerHost": tpu.chips_per_host,
                "hostsPerSlice": tpu.hosts_per_slice,
                "chipsPerSlice": tpu.chips_per_slice,
            },
            "kueueNamespace": KUEUE_NAMESPACE,
            "kueueVersion": self.settings.kueue.version,
            "clusterQueue": self.queue_plan.cluster_queue,
            "localQueues": [{"namespace": ns, "name": q} for ns, q in self.queue_plan.local_queues],
            "flavors": {
                "system": SYSTEM_FLAVOR,
                "onDemand": ON_DEMAND_FLAVOR if self.queue_plan.flavor(ON_DEMAND_FLAVOR) else None,
                "flexStart": FLEX_FLAVOR if self.queue_plan.flavor(FLEX_FLAVOR) else None,
            },
        }


def kueue_metrics(name: str, kueue: Kueue, opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A PodMonitoring so Managed Service for Prometheus scrapes Kueue's controller metrics."""
    obj = kueue_pod_monitoring()
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=obj["kind"], metadata=obj["metadata"], spec=obj["spec"],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[kueue.release])),
    )
