"""MultiKueue: a manager cluster that dispatches jobs to regional worker clusters (each a TpuPlatform).

A job is admitted on the manager, copied to every worker, and runs on whichever worker admits it first;
each worker keeps its own plan A -> plan B fallback with DWS. The manager reaches a worker through a
kubeconfig holding a ServiceAccount token (Kueue refuses exec plugins), stored as a Secret in the
manager's kueue-system and kept a Pulumi secret end to end.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tpu_fallback.components.cluster import GkeCluster, GkeClusterArgs
from tpu_fallback.components.custom_resource import custom_resource, kubernetes_object
from tpu_fallback.components.egress import PrivateEgress
from tpu_fallback.components.kueue import Kueue, KueueArgs
from tpu_fallback.components.platform import TpuPlatform, TpuPlatformArgs, kueue_metrics
from tpu_fallback.components.queues import FallbackQueues, FallbackQueuesArgs
from tpu_fallback.model.outputs import InfraOutputs
from tpu_fallback.model.queues import QueuePlan, manager_queue_plan
from tpu_fallback.model.settings import Settings, WorkerSettings
from tpu_fallback.render import kueue as kueue_objects
from tpu_fallback.render import multikueue as scoped
from tpu_fallback.render import rayjob
from tpu_fallback.render.kubeconfig import token_kubeconfig


@dataclass(frozen=True)
class WorkerAccessArgs:
    worker: WorkerSettings
    platform: TpuPlatform  # the worker's cluster
    manager_provider: k8s.Provider
    manager_namespace: pulumi.Resource | None = None  # the manager's kueue-system, where the kubeconfig goes


class WorkerAccess(pulumi.ComponentResource):
    """The manager's way into one worker.

    On the worker: a least-privilege ServiceAccount and its token. On the manager: the kubeconfig Secret.
    """

    secret_name: str
    secret: k8s.core.v1.Secret

    def __init__(self, name: str, args: WorkerAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:multikueue:WorkerAccess", name, None, opts)
        worker, platform = args.worker, args.platform
        on_worker = pulumi.ResourceOptions(parent=self, provider=platform.cluster.provider)
        namespace = (platform.kueue.namespace.metadata["name"] if platform.kueue.namespace
                     else kueue_objects.KUEUE_NAMESPACE)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account", metadata={"name": kueue_objects.MULTIKUEUE_ACCOUNT, "namespace": namespace},
            opts=on_worker,
        )
        # Reads cluster-wide, writes in the job namespaces only (render/multikueue.py).
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-role", metadata={"name": scoped.READ_ROLE}, rules=scoped.worker_read_rules(), opts=on_worker,
        )
        write_role = k8s.rbac.v1.ClusterRole(
            f"{name}-write-role", metadata={"name": scoped.WRITE_ROLE}, rules=scoped.worker_write_rules(),
            opts=on_worker,
        )
        for job_namespace in dict.fromkeys(ns for ns, _ in platform.queue_plan.local_queues):
            kubernetes_object(f"{name}-write-{job_namespace}",
                              scoped.write_role_binding(job_namespace, kueue_objects.KUEUE_NAMESPACE),
                              pulumi.ResourceOptions.merge(on_worker, pulumi.ResourceOptions(
                                  depends_on=[write_role, account])))
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata={"name": f"{kueue_objects.MULTIKUEUE_ACCOUNT}-crb"},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.metadata["name"]},
            subjects=[{"kind": "ServiceAccount", "name": account.metadata["name"], "namespace": namespace}],
            opts=on_worker,
        )
        # A long-lived token: Kubernetes fills data.token in; pulumi-kubernetes keeps Secret data secret.
        token_secret = k8s.core.v1.Secret(
            f"{name}-token",
            metadata={"name": kueue_objects.MULTIKUEUE_ACCOUNT, "namespace": namespace,
                      "annotations": {"kubernetes.io/service-account.name": kueue_objects.MULTIKUEUE_ACCOUNT}},
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
            metadata={"name": self.secret_name, "namespace": kueue_objects.KUEUE_NAMESPACE},
            string_data={"kubeconfig": kubeconfig},
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.manager_provider, additional_secret_outputs=["stringData", "data"],
                depends_on=[args.manager_namespace] if args.manager_namespace else []),
        )
        self.register_outputs({"secretName": self.secret_name})


@dataclass(frozen=True)
class MultiKueuePlatformArgs:
    settings: Settings  # validated settings with multikueue enabled
    apis: Sequence[pulumi.Resource] = ()  # the enabled Google APIs every cluster waits for
    egress: PrivateEgress | None = None  # the private nodes' Cloud NATs (the manager's with static addresses)


class MultiKueuePlatform(pulumi.ComponentResource):
    """A MultiKueue manager cluster in front of regional worker clusters (each a TpuPlatform)."""

    settings: Settings
    workers: dict[str, TpuPlatform]
    manager: GkeCluster
    kueue: Kueue
    queue_plan: QueuePlan
    queues: FallbackQueues
    outputs: InfraOutputs

    def __init__(self, name: str, args: MultiKueuePlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:multikueue:MultiKueuePlatform", name, None, opts)
        settings = self.settings = args.settings
        mk = settings.multikueue
        if not mk.enabled or mk.manager is None:
            raise ValueError("MultiKueuePlatform needs settings with multikueue enabled and a manager")
        child = pulumi.ResourceOptions(parent=self)

        # Workers: full plan A / plan B clusters, each depending only on its own cluster.
        # With authorized networks each worker admits the manager's static egress (model/egress.py).
        manager_egress = (args.egress.static_cidrs if args.egress and settings.network.authorized_networks
                          else None)
        self.workers = {w.name: TpuPlatform(w.settings.cluster_name,
                                            TpuPlatformArgs(w.settings, args.apis, args.egress, manager_egress),
                                            opts=child)
                        for w in mk.workers}

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
                node_account_id=manager.node_account_id,
                protect=settings.protect,
                autopilot=manager.autopilot,
                # The manager runs no TPU slices: a maintenance window, but no upgrade exclusion.
                maintenance=dataclasses.replace(settings.maintenance, exclusion=None),
                network=settings.network,
                apis=args.apis,
                managed_prometheus=settings.kueue.pod_monitoring,
            ),
            opts=child,
        )
        on_manager = pulumi.ResourceOptions(parent=self, providers=[self.manager.provider])
        self.kueue = Kueue(
            f"{manager.cluster_name}-kueue",
            KueueArgs(settings.kueue, None if manager.autopilot else settings.system_pool.name,
                      after=[*([self.manager.system_pool] if self.manager.system_pool else []),
                             *(args.egress.nats if args.egress else [])],
                      autopilot=manager.autopilot),
            opts=on_manager,
        )
        provider_opts = pulumi.ResourceOptions(parent=self, provider=self.manager.provider)
        accesses = [
            WorkerAccess(f"{manager.cluster_name}-{w.name}-access",
                         WorkerAccessArgs(w, self.workers[w.name], self.manager.provider, self.kueue.namespace),
                         opts=child)
            for w in mk.workers
        ]

        def custom(
            logical: str, obj: dict[str, Any], depends_on: list[pulumi.Resource]
        ) -> k8s.apiextensions.CustomResource:
            return custom_resource(
                f"{manager.cluster_name}-{logical}", obj,
                pulumi.ResourceOptions.merge(
                    provider_opts, pulumi.ResourceOptions(depends_on=[self.kueue.ready, *depends_on])),
            )

        # `pulumi up` waits for each worker's MultiKueueCluster to be Active (render/multikueue.py WAIT_FOR).
        clusters = [custom(f"cluster-{w.name}", scoped.awaited(kueue_objects.multikueue_cluster(w.name, a.secret_name)),
                           [a.secret])
                    for w, a in zip(mk.workers, accesses, strict=True)]
        config = custom("multikueue-config", kueue_objects.multikueue_config([w.name for w in mk.workers]), clusters)
        check = custom("multikueue-check", kueue_objects.multikueue_admission_check(), [config])
        self.queue_plan = manager_queue_plan(settings)
        self.queues = FallbackQueues(
            f"{manager.cluster_name}-queues",
            FallbackQueuesArgs(plan=self.queue_plan, ready=check,
                               admission_checks=kueue_objects.multikueue_admission_checks()),
            opts=on_manager,
        )
        # MultiKueue copies only the RayJob to the worker that runs it: the script it mounts must be there already.
        for w in mk.workers:
            worker = self.workers[w.name]
            on_worker = pulumi.ResourceOptions(parent=worker, provider=worker.cluster.provider,
                                               depends_on=[worker.queues])
            for namespace in dict.fromkeys(ns for ns, _ in worker.queue_plan.local_queues):
                kubernetes_object(f"{w.settings.cluster_name}-script-{namespace}",
                                  rayjob.script_config_map(namespace), on_worker)
        # Jobs only pass through the manager: no pod there may request TPUs, so Autopilot never provisions a
        # TPU node on it even if a Ray operator started a RayCluster it should leave to MultiKueue.
        for namespace in dict.fromkeys(ns for ns, _ in self.queue_plan.local_queues):
            kubernetes_object(
                f"{manager.cluster_name}-no-tpu-{namespace}", kueue_objects.no_tpu_quota(namespace),
                pulumi.ResourceOptions.merge(provider_opts, pulumi.ResourceOptions(depends_on=[self.queues])),
            )
        if settings.kueue.pod_monitoring:
            kueue_metrics(f"{manager.cluster_name}-kueue-metrics", self.kueue, opts=on_manager)
        self.outputs = self._outputs()
        self.register_outputs(self.outputs.exports())

    def _outputs(self) -> InfraOutputs:
        """The single-cluster contract, answered by the manager (so the jobs stack submits unchanged), plus workers.

        tpu, systemPool, flavors and nodePools are the first worker's: what jobs on any worker match. tpuFlavors are
        every worker's, each marked with its worker: MultiKueue runs a job on whichever worker admits it, so a job
        the jobs stack submits must fit one of them.
        """
        cluster = self.manager.cluster
        first = next(iter(self.workers.values()))
        return dataclasses.replace(
            first.outputs,
            cluster_name=cluster.name,
            cluster_location=cluster.location,
            cluster_endpoint=cluster.endpoint,
            kubeconfig=self.manager.kubeconfig,
            cluster_queue=self.queue_plan.cluster_queue,
            local_queues=[{"namespace": ns, "name": q} for ns, q in self.queue_plan.local_queues],
            tpu_flavors=[{**flavor, "worker": name} for name, p in self.workers.items()
                         for flavor in p.outputs.tpu_flavors],
            multikueue=True,
            workers=[{"name": name, "location": p.settings.location, "clusterName": p.cluster.cluster.name}
                     for name, p in self.workers.items()],
        )
