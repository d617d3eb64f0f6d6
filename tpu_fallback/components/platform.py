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
from tpu_fallback.model.outputs import (
    InfraOutputs,
    elastic_jobs_output,
    flavors_output,
    system_quota_output,
    tpu_flavors_output,
    tpu_output,
)
from tpu_fallback.model.queues import QueuePlan, node_pool_names, queue_plan
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
    rung_pools: dict[str, TpuNodePool]  # rung name -> its pools
    on_demand: TpuNodePool | None  # today's plan A and plan B (None with a `ladder`)
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

        # One TpuNodePool per rung of the capacity ladder (today's plans: `<name>-plan-a`, `<name>-plan-b`).
        ladder = settings.capacity_ladder
        self.rung_pools = {rung.name: TpuNodePool(
            f"{name}-{rung.component}",
            plan_args(rung.kind, rung.pool, rung.max_slices,
                      reservation=rung.reservation.affinity_value if rung.reservation is not None else None),
            opts=child,
        ) for rung in ladder.rungs}
        self.on_demand = None if ladder.explicit else self.rung_pools.get(ON_DEMAND)
        self.flex_start = None if ladder.explicit else self.rung_pools.get(FLEX_START)

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
            node_pools=node_pool_names(self.settings),
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
        FallbackController(f"{name}-fallback", FallbackControllerArgs(
            plan, fallback, settings.system_pool.name, kueue.ready, kueue.namespace,
            pod_monitoring=settings.kueue.pod_monitoring), opts=on_cluster)
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
        "flavors": flavors_output(plan),
        "tpu_flavors": tpu_flavors_output(plan, settings.tpu),
        "elastic_jobs": elastic_jobs_output(settings.kueue),
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
