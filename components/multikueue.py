"""MultiKueue: a manager cluster that dispatches jobs to regional worker clusters (each a TpuPlatform).

A job is admitted on the manager, copied to every worker, and runs on whichever worker admits it first;
each worker keeps its own plan A -> plan B fallback with DWS. The manager reaches a worker through a
kubeconfig holding a ServiceAccount token (Kueue refuses exec plugins), stored as a Secret in the
manager's kueue-system and kept a Pulumi secret end to end.
"""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import manifests
from components.cluster import GkeCluster, GkeClusterArgs
from components.kubeconfig import token_kubeconfig
from components.kueue import Kueue, KueueArgs
from components.platform import TpuPlatform, kueue_metrics
from components.queues import FallbackQueues, FallbackQueuesArgs
from components.settings import Settings, WorkerSettings


class WorkerAccess(pulumi.ComponentResource):
    """The manager's way into one worker.

    On the worker: a least-privilege ServiceAccount and its token. On the manager: the kubeconfig Secret.
    """

    def __init__(self, name: str, worker: WorkerSettings, platform: TpuPlatform, manager_provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:multikueue:WorkerAccess", name, None, opts)
        on_worker = pulumi.ResourceOptions(parent=self, provider=platform.cluster.provider)
        namespace = platform.kueue.namespace.metadata["name"]
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account", metadata={"name": manifests.MULTIKUEUE_ACCOUNT, "namespace": namespace}, opts=on_worker
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-role", metadata={"name": f"{manifests.MULTIKUEUE_ACCOUNT}-role"},
            rules=manifests.MULTIKUEUE_WORKER_RULES, opts=on_worker,
        )
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata={"name": f"{manifests.MULTIKUEUE_ACCOUNT}-crb"},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.metadata["name"]},
            subjects=[{"kind": "ServiceAccount", "name": account.metadata["name"], "namespace": namespace}],
            opts=on_worker,
        )
        # A long-lived token: Kubernetes fills data.token in; pulumi-kubernetes keeps Secret data secret.
        token_secret = k8s.core.v1.Secret(
            f"{name}-token",
            metadata={"name": manifests.MULTIKUEUE_ACCOUNT, "namespace": namespace,
                      "annotations": {"kubernetes.io/service-account.name": manifests.MULTIKUEUE_ACCOUNT}},
            type="kubernetes.io/service-account-token",
            opts=pulumi.ResourceOptions.merge(on_worker, pulumi.ResourceOptions(depends_on=[account])),
        )
        cluster = platform.cluster.cluster
        parts: pulumi.Output[list[Any]] = pulumi.Output.all(
            cluster.endpoint, cluster.master_auth.cluster_ca_certificate, token_secret.data
        )
        kubeconfig: pulumi.Output[str] = pulumi.Output.secret(parts.apply(
            lambda p: token_kubeconfig(
                worker.settings.cluster_name, p[0], p[1] or "", base64.b64decode((p[2] or {}).get("token", "")).decode()
            )
        ))
        self.secret_name = f"multikueue-{worker.name}"
        self.secret = k8s.core.v1.Secret(
            f"{name}-kubeconfig",
            metadata={"name": self.secret_name, "namespace": manifests.KUEUE_NAMESPACE},
            string_data={"kubeconfig": kubeconfig},
            opts=pulumi.ResourceOptions(parent=self, provider=manager_provider,
                                        additional_secret_outputs=["stringData", "data"]),
        )
        self.register_outputs({"secretName": self.secret_name})


class MultiKueuePlatform(pulumi.ComponentResource):
    def __init__(self, name: str, settings: Settings, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:multikueue:MultiKueuePlatform", name, None, opts)
        mk = settings.multikueue
        assert mk.enabled and mk.manager is not None
        self.settings = settings
        child = pulumi.ResourceOptions(parent=self)

        # Workers: full plan A / plan B clusters, each depending only on its own cluster.
        self.workers = {w.name: TpuPlatform(w.settings.cluster_name, w.settings, opts=child) for w in mk.workers}

        manager = mk.manager
        self.manager = GkeCluster(
            manager.cluster_name,
            GkeClusterArgs(
                project=settings.project,
                cluster_name=manager.cluster_name,
                location=manager.location,
                gke_version=settings.gke_version,
                system_pool=None if manager.autopilot else settings.system_pool,
                deletion_protection=settings.deletion_protection,
                protect=settings.protect,
                autopilot=manager.autopilot,
            ),
            opts=child,
        )
        on_manager = pulumi.ResourceOptions(parent=self, providers=[self.manager.provider])
        self.kueue = Kueue(
            f"{manager.cluster_name}-kueue",
            KueueArgs(settings.kueue, None if manager.autopilot else settings.system_pool.name),
            opts=on_manager,
        )
        provider_opts = pulumi.ResourceOptions(parent=self, provider=self.manager.provider)
        accesses = [
            WorkerAccess(f"{manager.cluster_name}-{w.name}-access", w, self.workers[w.name], self.manager.provider,
                         opts=child)
            for w in mk.workers
        ]

        def custom(logical: str, obj: dict[str, Any], depends_on: list[pulumi.Resource]) -> Any:
            return k8s.apiextensions.CustomResource(
                f"{manager.cluster_name}-{logical}", api_version=obj["apiVersion"], kind=obj["kind"],
                metadata=obj["metadata"], spec=obj["spec"],
                opts=pulumi.ResourceOptions.merge(
                    provider_opts, pulumi.ResourceOptions(depends_on=[self.kueue.ready, *depends_on])),
            )

        clusters = [custom(f"cluster-{w.name}", manifests.multikueue_cluster(w.name, a.secret_name), [a.secret])
                    for w, a in zip(mk.workers, accesses, strict=True)]
        config = custom("multikueue-config", manifests.multikueue_config([w.name for w in mk.workers]), clusters)
        check = custom("multikueue-check", manifests.multikueue_admission_check(), [config])
        self.queue_plan = manifests.manager_queue_plan(settings)
        self.queues = FallbackQueues(
            f"{manager.cluster_name}-queues",
            FallbackQueuesArgs(plan=self.queue_plan, ready=check,
                               admission_checks=manifests.multikueue_admission_checks()),
            opts=on_manager,
        )
        if settings.kueue.pod_monitoring:
            kueue_metrics(f"{manager.cluster_name}-kueue-metrics", self.kueue, opts=on_manager)
        self.register_outputs({})

    def stack_outputs(self) -> dict[str, Any]:
        """The single-cluster contract, answered by the manager (so the jobs stack submits unchanged), plus workers."""
        first = next(iter(self.workers.values()))
        outputs = first.stack_outputs()  # tpu, systemPool, flavors, nodePools: what jobs on any worker match
        cluster = self.manager.cluster
        outputs.update({
            "clusterName": cluster.name,
            "clusterLocation": cluster.location,
            "clusterEndpoint": cluster.endpoint,
            "kubeconfig": self.manager.kubeconfig,
            "clusterQueue": self.queue_plan.cluster_queue,
            "localQueues": [{"namespace": ns, "name": q} for ns, q in self.queue_plan.local_queues],
            "multikueue": True,
            "workers": [{"name": name, "location": p.settings.location, "clusterName": p.cluster.cluster.name}
                        for name, p in self.workers.items()],
        })
        return outputs
