"""The public Python API: the components a Pulumi program builds the TPU platform with (docs/components.md).

    from tpu_fallback.api import Platform

    platform = Platform("tpu", {"cluster_name": "tpu-cluster", "tpu": {"type": "v6e", "topology": "4x4"}})
    pulumi.export("kubeconfig", platform.kubeconfig)

Other Pulumi languages get the same components from the package in provider/ (`pulumi package add`).
"""

from tpu_fallback.api.args import (
    ClusterArgs,
    ExistingCluster,
    FallbackOptions,
    FlexStart,
    Job,
    KueueOptions,
    LocalQueue,
    Maintenance,
    Manager,
    MultiRegionPlatformArgs,
    Network,
    OnDemand,
    PlatformArgs,
    Queues,
    Quotas,
    Requests,
    Rung,
    SystemPool,
    Tpu,
    TrainingJobsArgs,
    Worker,
)
from tpu_fallback.api.jobs import TrainingJobs
from tpu_fallback.api.platform import MultiRegionPlatform, Platform, PlatformConfigError

__all__ = [
    "ClusterArgs",
    "ExistingCluster",
    "FallbackOptions",
    "FlexStart",
    "Job",
    "KueueOptions",
    "LocalQueue",
    "Maintenance",
    "Manager",
    "MultiRegionPlatform",
    "MultiRegionPlatformArgs",
    "Network",
    "OnDemand",
    "Platform",
    "PlatformArgs",
    "PlatformConfigError",
    "Queues",
    "Quotas",
    "Requests",
    "Rung",
    "SystemPool",
    "Tpu",
    "TrainingJobs",
    "TrainingJobsArgs",
    "Worker",
]
