"""ProjectApis: the Google APIs a stack needs, enabled on the project and never disabled on destroy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

# container: GKE; compute: its VMs (terraform-google-kubernetes-engine "Enable APIs"); containerfilesystem: image
# streaming (GKE "Use Image streaming": "You must enable the Container File System API"). GKE TPU node pools
# need no tpu.googleapis.com (that API is for TPU VMs created outside GKE). The MultiKueue manager reaches its
# workers with service-account tokens, so it needs nothing more.
# iam: the nodes' service account (IAM API, projects.serviceAccounts.create); cloudresourcemanager: its project
# role bindings (projects.setIamPolicy), both off in a new project created with no default services.
REQUIRED_APIS = ("compute.googleapis.com", "container.googleapis.com", "containerfilesystem.googleapis.com",
                 "iam.googleapis.com", "cloudresourcemanager.googleapis.com")
# With kueue.podMonitoring: Cloud Monitoring for the dashboard (Managed Prometheus writes there too).
MONITORING_APIS = ("monitoring.googleapis.com",)


@dataclass(frozen=True)
class ProjectApisArgs:
    project: str
    services: Sequence[str] = REQUIRED_APIS


class ProjectApis(pulumi.ComponentResource):
    services: list[gcp.projects.Service]

    def __init__(self, name: str, args: ProjectApisArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:project:ProjectApis", name, None, opts)
        self.services = [
            gcp.projects.Service(
                f"{name}-{service.split('.')[0]}",
                project=args.project,
                service=service,
                # Other workloads of the project may use these APIs: destroying this stack leaves them on.
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for service in args.services
        ]
        self.register_outputs({"services": list(args.services)})
