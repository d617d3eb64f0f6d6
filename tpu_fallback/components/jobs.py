"""JobSubmission: the training script's ConfigMap and the RayJobs, on the infra stack's cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from tpu_fallback.components.custom_resource import custom_resource, kubernetes_object
from tpu_fallback.model.jobs import InfraFacts, PlannedJob
from tpu_fallback.render import rayjob


@dataclass(frozen=True)
class JobSubmissionArgs:
    infra: InfraFacts
    jobs: tuple[PlannedJob, ...]
    kubeconfig: pulumi.Input[str]  # a secret from the infra stack
    cluster_identifier: str  # the infra stack's cluster (programs/jobs.py cluster_identifier), never its endpoint


class JobSubmission(pulumi.ComponentResource):
    rayjobs: list[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: JobSubmissionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:jobs:JobSubmission", name, None, opts)
        # The jobs stack's own provider: it never touches the infra stack's provider or state. With a
        # cluster_identifier a new endpoint or CA in the kubeconfig updates it in place; without one the provider,
        # and with it every running RayJob, would be replaced.
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=args.kubeconfig, cluster_identifier=args.cluster_identifier,
                                opts=pulumi.ResourceOptions(parent=self))
        on_cluster = pulumi.ResourceOptions(parent=self, provider=provider)
        scripts = {namespace: kubernetes_object(f"{name}-script-{namespace}", rayjob.script_config_map(namespace),
                                                on_cluster)
                   for namespace in dict.fromkeys(p.namespace for p in args.jobs)}
        self.rayjobs = []
        for planned in args.jobs:
            for copy_name in planned.names:
                self.rayjobs.append(custom_resource(
                    f"{name}-{planned.namespace}-{copy_name}",
                    rayjob.rayjob(planned, copy_name, args.infra),
                    pulumi.ResourceOptions.merge(
                        on_cluster,
                        # A RayJob's spec is immutable once submitted; a changed job is a new submission.
                        pulumi.ResourceOptions(depends_on=[scripts[planned.namespace]], replace_on_changes=["spec"],
                                               delete_before_replace=True),
                    ),
                ))
        self.register_outputs({"jobs": [n for p in args.jobs for n in p.names]})

