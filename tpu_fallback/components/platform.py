"""TpuPlatform: one cluster with its plan A and plan B TPU pools, Kueue and the fallback queues."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tpu_fallback.components.cluster import GkeCluster, GkeClusterArgs
from tpu_fallback.components.custom_resource import custom_resource, kubernetes_object
from tpu_fallback.components.egress import PrivateEgress
from tpu_fallback.components.fallback import FallbackController, FallbackControllerArgs
from tpu_fallback.components.kueue import Kueue, KueueArgs
from tpu_fallback.components.queues import FallbackQueues, FallbackQueuesArgs
from tpu_fallback.components.tpu_pool import TpuNodePool, TpuNodePoolArgs
from tpu_fallback.model.capacity import FLEX_START, ON_DEMAND
from tpu_fallback.model.outputs import InfraOutputs, system_quota_output, tpu_output
from tpu_fallback.model.queues import FLEX_FLAVOR, ON_DEMAND_FLAVOR, SYSTEM_FLAVOR, QueuePlan, queue_plan
from tpu_fallback.model.settings import Settings
from tpu_fallback.render.kueue import KUEUE_NAMESPACE, kueue_metrics_access, kueue_pod_monitoring


@dataclass(frozen=True)
class TpuPlatformArgs:
    settings: Settings  # validated settings of this cluster (the stack's, or one MultiKueue worker's)
    apis: Sequence[pulumi.Resource] = ()  # the enabled Google APIs the cluster waits for
    egress: PrivateEgress | None = None  # the private nodes' Cloud NAT: Kueue's images come through it
    # A MultiKueue worker's: the manager's static egress CIDRs, added to this cluster's authorized networks.
    manager_egress: pulumi.Input[Sequence[str]] | None = None


class TpuPlatform(pulumi.ComponentResource):
    """Everything one regional cluster needs to run TPU jobs with the plan A -> plan B fallback."""

    settings: Settings
    cluster: GkeCluster
    on_demand: TpuNodePool | None
    flex_start: TpuNodePool | None
    kueue: Kueue
    queue_plan: QueuePlan
    queues: FallbackQueues
    outputs: InfraOutputs

    def __init__(self, name: str, args: TpuPlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:platform:TpuPlatform", name, None, opts)
        settings = self.settings = args.settings
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
                node_account_id=settings.node_account_id,
                protect=settings.protect,
                maintenance=settings.maintenance,
                network=settings.network,
                apis=args.apis,
                extra_authorized_networks=args.manager_egress,
                managed_prometheus=settings.kueue.pod_monitoring,
            ),
            opts=child,
        )
        # Both plans depend on the cluster only, never on each other, so GKE creates them in parallel.
        def plan_args(plan: str, base_name: str, max_slices: int, **extra: Any) -> TpuNodePoolArgs:
            return TpuNodePoolArgs(
                project=settings.project,
                cluster_name=self.cluster.cluster.name,
                location=settings.location,
                plan=plan,
                base_name=base_name,
                tpu=settings.tpu,
                max_slices=max_slices,
                node_service_account=self.cluster.node_service_account.email,
                secure_boot=settings.secure_boot,
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
            plan_args(FLEX_START, flex.name, flex.max_slices),
            opts=child,
        ) if flex.active else None

        # Kueue and the queues need only the cluster's API server, not the TPU pools (they refer to pools
        # by label), so they are installed while GKE is still creating the pools.
        on_cluster = pulumi.ResourceOptions(parent=self, providers=[self.cluster.provider])
        after = [*([self.cluster.system_pool] if self.cluster.system_pool else []),
                 *(args.egress.nats if args.egress else [])]
        self.kueue, self.queue_plan, self.queues = install_queues(name, settings, on_cluster, after=after)
        self.outputs = self._outputs()
        self.register_outputs(self.outputs.exports())

    def _outputs(self) -> InfraOutputs:
        """The stack outputs contract (tpu_fallback.model.outputs), answered by this cluster."""
        cluster = self.cluster.cluster
        return InfraOutputs(
            cluster_name=cluster.name,
            cluster_location=cluster.location,
            cluster_endpoint=cluster.endpoint,
            kubeconfig=self.cluster.kubeconfig,
            system_pool=self.cluster.system_pool.name if self.cluster.system_pool else None,
            node_pools={
                "onDemand": self.on_demand.names if self.on_demand else [],
                "flexStart": self.flex_start.names if self.flex_start else [],
            },
            **queue_outputs(self.settings, self.queue_plan),
        )


def install_queues(name: str, settings: Settings, on_cluster: pulumi.ResourceOptions,
                   after: Sequence[pulumi.Resource] = ()) -> tuple[Kueue, QueuePlan, FallbackQueues]:
    """Kueue, its readiness gate, the fallback queues, the fallback controller (with fallback.enabled) and (with
    kueue.podMonitoring) Kueue's metrics on one cluster. `after`: what Kueue's release waits for (the system pool
    its pods run on)."""
    fallback = settings.fallback if settings.fallback.enabled else None
    kueue = Kueue(f"{name}-kueue", KueueArgs(settings.kueue, settings.system_pool.name, fallback=fallback,
                                             after=after), opts=on_cluster)
    plan = queue_plan(settings)
    queues = FallbackQueues(f"{name}-queues", FallbackQueuesArgs(plan=plan, ready=kueue.ready,
                                                                 fallback=fallback is not None), opts=on_cluster)
    if fallback is not None:
        FallbackController(f"{name}-fallback", FallbackControllerArgs(plan, fallback, settings.system_pool.name,
                                                                      kueue.ready, kueue.namespace), opts=on_cluster)
    if settings.kueue.pod_monitoring:
        kueue_metrics(f"{name}-kueue-metrics", kueue, opts=on_cluster)
    return kueue, plan, queues


def queue_outputs(settings: Settings, plan: QueuePlan) -> dict[str, Any]:
    """The outputs a cluster's Kueue answers (InfraOutputs fields), whoever made the cluster."""
    return {
        "tpu": tpu_output(settings.tpu),
        "kueue_namespace": KUEUE_NAMESPACE,
        "kueue_version": settings.kueue.version,
        "cluster_queue": plan.cluster_queue,
        "local_queues": [{"namespace": ns, "name": q} for ns, q in plan.local_queues],
        "system_quota": system_quota_output(settings.queues.system_quota),
        "flavors": {
            "system": SYSTEM_FLAVOR,
            "onDemand": ON_DEMAND_FLAVOR if plan.flavor(ON_DEMAND_FLAVOR) else None,
            "flexStart": FLEX_FLAVOR if plan.flavor(FLEX_FLAVOR) else None,
        },
    }


def kueue_metrics(name: str, kueue: Kueue, opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
    """A PodMonitoring so Managed Service for Prometheus scrapes Kueue's controller metrics, with the token it
    needs (kueue_metrics_access). The PodMonitoring's legacy name is kept, so existing stacks only add the rest."""
    after_release = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[kueue.ready]))
    access = [kubernetes_object(f"{name}-{obj['kind'].lower()}", obj, after_release) for obj in kueue_metrics_access()]
    return custom_resource(
        name, kueue_pod_monitoring(), pulumi.ResourceOptions.merge(after_release, pulumi.ResourceOptions(
            depends_on=access)),
    )
