"""FallbackQueues: Kueue's flavors, ClusterQueue, checks and LocalQueues down the capacity ladder (plan A -> plan B).

The objects only refer to node pools by label, so they wait for Kueue's readiness gate and never for
the TPU pools: Kueue and the queues are installed while GKE is still creating the pools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tpu_fallback.components.custom_resource import custom_resource
from tpu_fallback.model.queues import QueuePlan
from tpu_fallback.render import kueue as render


@dataclass(frozen=True)
class FallbackQueuesArgs:
    plan: QueuePlan
    ready: pulumi.Resource  # Kueue's readiness gate
    # Used instead of dws-prov on every flavor (a MultiKueue manager); None for a normal cluster.
    admission_checks: list[dict[str, Any]] | None = None
    # False: no fallback controller runs here, and the stack resets plan A's flavor taints (render.flavor_taints_reset).
    fallback: bool = True


class FallbackQueues(pulumi.ComponentResource):
    cluster_queue: k8s.apiextensions.CustomResource
    local_queues: list[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: FallbackQueuesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:queues:FallbackQueues", name, None, opts)
        plan = args.plan

        def custom(
            logical: str, obj: dict[str, Any], depends_on: list[pulumi.Resource], immutable: list[str] | None = None
        ) -> k8s.apiextensions.CustomResource:
            # Fields the API server refuses to change (CRD rule "self == oldSelf") make Pulumi replace the
            # object instead of sending an update that fails; same name, so delete first.
            replace = pulumi.ResourceOptions(replace_on_changes=immutable, delete_before_replace=True) if immutable \
                else None
            return custom_resource(f"{name}-{logical}", obj, pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions(parent=self, depends_on=[args.ready, *depends_on]), replace))

        # The fallback controller taints a closable rung's flavors (plan A's) on a stock-out (read-modify-write of its
        # own taint, others kept); ignoring the field there keeps a `pulumi up` after a `pulumi refresh` from taking it
        # away.
        flavors = [custom_resource(f"{name}-flavor-{f.name}", render.resource_flavor(f), pulumi.ResourceOptions(
            parent=self, depends_on=[args.ready],
            ignore_changes=["spec.nodeTaints"] if f.closable else None)) for f in plan.flavors]
        if not args.fallback:
            for flavor, resource in zip(plan.flavors, flavors, strict=True):
                if flavor.closable:
                    patch = render.flavor_taints_reset(flavor)
                    k8s.apiextensions.CustomResourcePatch(
                        f"{name}-flavor-{flavor.name}-taints-reset", api_version=patch["apiVersion"],
                        kind=patch["kind"], metadata=patch["metadata"], spec=patch["spec"],
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[resource]))
        checks: list[pulumi.Resource] = []
        if plan.provisioning_check and args.admission_checks is None:
            config = custom("dws-config", render.provisioning_request_config(plan), [])
            checks.append(custom("dws-prov", render.provisioning_admission_check(), [config]))
        self.cluster_queue = custom(
            "cluster-queue", render.cluster_queue(plan, args.admission_checks), [*flavors, *checks]
        )

        namespaces = self._namespaces(name, plan)
        self.local_queues = [
            custom(
                f"local-queue-{namespace}-{queue}",
                render.local_queue(namespace, queue, plan.cluster_queue),
                [self.cluster_queue, *([namespaces[namespace]] if namespace in namespaces else [])],
                immutable=["spec.clusterQueue"],  # kueue.x-k8s.io/v1beta2 LocalQueueSpec: "field is immutable"
            )
            for namespace, queue in plan.local_queues
        ]
        self.register_outputs({"clusterQueue": plan.cluster_queue})

    def _namespaces(self, name: str, plan: QueuePlan) -> dict[str, pulumi.Resource]:
        """Create the local queues' namespaces (except `default`); label existing ones if the queue needs it."""
        out: dict[str, pulumi.Resource] = {}
        labels = plan.namespace_labels or {}
        for namespace in dict.fromkeys(ns for ns, _ in plan.local_queues):
            opts = pulumi.ResourceOptions(parent=self)
            if namespace == "default":
                if labels:  # the ClusterQueue only admits labelled namespaces
                    out[namespace] = k8s.core.v1.NamespacePatch(
                        f"{name}-namespace-{namespace}", metadata={"name": namespace, "labels": labels}, opts=opts
                    )
                continue
            out[namespace] = k8s.core.v1.Namespace(
                f"{name}-namespace-{namespace}", metadata={"name": namespace, "labels": labels}, opts=opts
            )
        return out
