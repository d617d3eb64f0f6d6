"""FallbackController: the in-cluster controller that moves jobs from plan A to plan B on a stock-out.

It changes only what Pulumi leaves alone: its own taint on plan A's flavors (read-modify-write, every other taint
kept; the flavor resources ignore `spec.nodeTaints`) and Workloads (never Pulumi's). Turning the fallback off or
`pulumi destroy` deletes the Deployment, and the exiting controller reopens plan A first and requeues the Workloads
it had deactivated; with the fallback off the stack also resets plan A's flavor taints (FallbackQueues), for a
controller that was not running to do it.

Beside it: its PriorityClass, the sweeper CronJob (fallback/sweep.py: reopens an expired close and queues again a
job the controller deactivated when no controller holds the Lease) with its own narrower RBAC, and (with
kueue.podMonitoring) a PodMonitoring of its metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tpu_fallback.components.custom_resource import custom_resource, kubernetes_object
from tpu_fallback.model.queues import QueuePlan
from tpu_fallback.model.settings import FallbackSettings
from tpu_fallback.render import fallback as render


@dataclass(frozen=True)
class FallbackControllerArgs:
    plan: QueuePlan
    fallback: FallbackSettings
    system_pool: str | None
    ready: pulumi.Resource  # Kueue's readiness gate: the controller reads Kueue's objects from its first pass
    namespace: pulumi.Resource | None = None  # kueue-system, where its objects live, when this stack makes it
    # kueue.podMonitoring: Managed Service for Prometheus scrapes the controller too (its CRD exists only then).
    pod_monitoring: bool = False


class FallbackController(pulumi.ComponentResource):
    deployment: pulumi.CustomResource
    sweeper: k8s.batch.v1.CronJob

    def __init__(self, name: str, args: FallbackControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:fallback:FallbackController", name, None, opts)
        # Its namespaced objects go into kueue-system: on a first `pulumi up` they wait for the namespace.
        child = pulumi.ResourceOptions(parent=self, depends_on=[args.namespace] if args.namespace else [])

        def after(*others: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(others)))

        account = kubernetes_object(f"{name}-account", render.service_account(), child)
        role = kubernetes_object(f"{name}-role", render.cluster_role(args.plan), child)
        binding = kubernetes_object(f"{name}-binding", render.cluster_role_binding(),
                                    after(account, role))
        own = kubernetes_object(f"{name}-deployment-role", render.deployment_role(), child)
        own_binding = kubernetes_object(f"{name}-deployment-binding", render.deployment_role_binding(),
                                        after(account, own))
        config = kubernetes_object(f"{name}-config", render.config_map(args.plan, args.fallback), child)
        # Typed (PriorityClass's value and preemptionPolicy are top-level fields, not a spec); pods naming a class
        # that does not exist yet are refused, so the workloads wait for it.
        priority = _priority_class(f"{name}-priority", render.priority_class(), child)
        # The Deployment depends on its RBAC, so `pulumi destroy` or turning the fallback off deletes it first
        # (pulumi-kubernetes deletes with Foreground propagation: the object stays until its pod has exited), and
        # the pod's way out, which reopens plan A, still has its permissions.
        self.deployment = kubernetes_object(
            f"{name}-deployment", render.deployment(args.plan, args.fallback, args.system_pool),
            after(binding, own_binding, config, priority, args.ready))
        sweeper = [kubernetes_object(f"{name}-sweeper-{obj['kind'].lower()}", obj, child)
                   for obj in (render.sweeper_cluster_role(args.plan), render.sweeper_role(),
                               *render.sweeper_access())]
        cron = render.sweeper_cron_job(args.plan, args.fallback, args.system_pool)
        self.sweeper = k8s.batch.v1.CronJob(f"{name}-sweeper", metadata=cron["metadata"], spec=cron["spec"],
                                            opts=after(config, priority, *sweeper))
        if args.pod_monitoring:
            custom_resource(f"{name}-metrics", render.pod_monitoring(), after(self.deployment))
        self.register_outputs({"name": render.NAME, "namespace": render.NAMESPACE})


def _priority_class(name: str, obj: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.scheduling.v1.PriorityClass:
    return k8s.scheduling.v1.PriorityClass(
        name, metadata=obj["metadata"], value=obj["value"], preemption_policy=obj["preemptionPolicy"],
        global_default=obj["globalDefault"], description=obj["description"], opts=opts)
