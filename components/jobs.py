"""JobSubmission: the training script's ConfigMap and the RayJobs, on the infra stack's cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import rayjob
from components.manifests import MANIFESTS
from components.rayjob import InfraFacts, PlannedJob


@dataclass(frozen=True)
class JobSubmissionArgs:
    infra: InfraFacts
    jobs: tuple[PlannedJob, ...]
    kubeconfig: pulumi.Input[str]  # a secret from the infra stack


class JobSubmission(pulumi.ComponentResource):
    rayjobs: list[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: JobSubmissionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:jobs:JobSubmission", name, None, opts)
        # The jobs stack's own provider: it never touches the infra stack's provider or state.
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=args.kubeconfig, opts=pulumi.ResourceOptions(parent=self))
        on_cluster = pulumi.ResourceOptions(parent=self, provider=provider)
        script = (MANIFESTS / "train.py").read_text()
        scripts: dict[str, k8s.core.v1.ConfigMap] = {}
        for namespace in dict.fromkeys(p.namespace for p in args.jobs):
            scripts[namespace] = k8s.core.v1.ConfigMap(
                f"{name}-script-{namespace}",
                metadata={"name": rayjob.SCRIPT_CONFIGMAP, "namespace": namespace},
                data={"train.py": script},
                opts=on_cluster,
            )
        self.rayjobs = []
        for planned in args.jobs:
            for copy_name in planned.names:
                obj = rayjob.rayjob(planned, copy_name, args.infra)
                self.rayjobs.append(k8s.apiextensions.CustomResource(
                    f"{name}-{planned.namespace}-{copy_name}",
                    api_version=obj["apiVersion"],
                    kind=obj["kind"],
                    metadata=obj["metadata"],
                    spec=obj["spec"],
                    opts=pulumi.ResourceOptions.merge(
                        on_cluster,
                        # A RayJob's spec is immutable once submitted; a changed job is a new submission.
                        pulumi.ResourceOptions(depends_on=[scripts[planned.namespace]], replace_on_changes=["spec"],
                                               delete_before_replace=True),
                    ),
                ))
        self.register_outputs({"jobs": [n for p in args.jobs for n in p.names]})


def stack_outputs(jobs: tuple[PlannedJob, ...]) -> dict[str, Any]:
    """The jobs stack's outputs: namespace, job names, queue, and how to follow each job."""
    namespaces = list(dict.fromkeys(p.namespace for p in jobs))
    queues = list(dict.fromkeys(f"{p.namespace}/{p.queue}" for p in jobs))
    return {
        "namespace": namespaces[0] if len(namespaces) == 1 else namespaces,
        "queue": queues[0] if len(queues) == 1 else queues,
        "jobs": [n for p in jobs for n in p.names],
        "commands": {n: rayjob.follow_commands(p.namespace, n) for p in jobs for n in p.names},
    }
