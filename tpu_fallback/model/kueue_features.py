"""Kueue's feature gates per chart version: a gate the pinned controller does not know makes it exit with
"unrecognized feature gate", and `pulumi up` would wait 10 minutes on the Helm release. Pure Python.

Taken from sigs.k8s.io/kueue@<version>/pkg/features/kube_features.go (every `featuregate.Feature` constant);
tests/e2e checks the list against that file in the Go module cache. Add a version when you pin it.

The versions listed are also the ones the project is verified with (VERIFIED_VERSIONS): the manager config it
renders (config.kueue.x-k8s.io/v1beta2), the Kueue API the fallback controller reads and writes
(kueue.x-k8s.io/v1beta2, its eviction reasons) and the e2e suite's Kueue build. Add a version only with the e2e
suite run against it (tests/e2e/build_components.sh KUEUE_VERSION).
"""

from __future__ import annotations

FEATURE_GATES: dict[str, frozenset[str]] = {
    "0.19.2": frozenset({
        "AdmissionFairSharing", "AdmissionGatedBy", "AssignQueueLabelsForPods", "CleanupProvisioningRequestsOnEviction",
        "ConcurrentAdmission", "CustomMetricLabels", "DeferRayServiceFinalizationForRedisCleanup",
        "DisableWaitForPodsReady", "ElasticJobsViaWorkloadSlices", "ElasticJobsViaWorkloadSlicesWithTAS",
        "FailureRecoveryPolicy", "FairSharingPreemptWithinNominal", "FairSharingPrioritizeNonBorrowing",
        "FastQuotaReleaseInPodIntegration", "FinishOrphanedWorkloads", "FlavorFungibility",
        "FlavorFungibilityPreserveScanProgress", "HierarchicalCohorts", "KueueDRAIntegration",
        "KueueDRAIntegrationConsumableCapacity", "KueueDRAIntegrationExtendedResource",
        "KueueDRAIntegrationPartitionableDevices", "KueueDRARejectWorkloadsWhenDRADisabled", "LWSImmutableGroupSize",
        "LocalQueueMetrics", "ManagedJobsNamespaceSelectorAlwaysRespected", "MetricForWorkloadCreationLatency",
        "MetricsForCohorts", "MultiKueue", "MultiKueueAdaptersForCustomJobs", "MultiKueueAllowInsecureKubeconfigs",
        "MultiKueueClusterProfile", "MultiKueueIncrementalDispatcherConfig",
        "MultiKueueIncrementalDispatcherRespectConfigOrder", "MultiKueueKubeConfigPathValidation",
        "MultiKueueManagerQuotaAutomation", "MultiKueueOrchestratedPreemption",
        "MultiKueueRedoAdmissionOnEvictionInWorker", "MultiKueueRemoteSpecSync", "MultiKueueWaitForWorkloadAdmitted",
        "ObjectRetentionPolicies", "PartialAdmission", "PodIntegrationValidateGroupOwner",
        "PrioritizePreemptorWorkloads", "PriorityBoost", "PrioritySortingWithinCohort",
        "PropagateBatchJobLabelsToWorkload", "QuotaCheckStrategy", "ReclaimablePods",
        "RecomputeAssignmentUponPreemptionTargetsOverlap", "RejectUpdatesToCQWithInvalidOnFlavors",
        "RemoveFinalizersWithStrictPatch", "SchedulerLibraryIntegration", "SchedulerLongRequeueInterval",
        "SchedulerTimestampPreemptionBuffer", "SchedulingEquivalenceHashing", "ShortWorkloadNames",
        "SkipAncestorCheckForDeletedWorkloads", "SkipFinalizersForPodsSuspendedByParent",
        "SkipReassignmentForPodOwnedWorkloads", "SparkApplicationIntegration", "TASAssignmentsEncodingByHostnamePrefix",
        "TASBalancedPlacement", "TASCacheNodeMatchResults", "TASCacheTopologyTree", "TASCachingRemainingResources",
        "TASFailedNodeReplacement", "TASFailedNodeReplacementFailFast", "TASHandleOverlappingFlavors",
        "TASMultiLayerTopology", "TASProfileMixed", "TASRecomputeAssignmentWithinSchedulingCycle",
        "TASReplaceNodeDueToNotReadyOverFixedTime", "TASReplaceNodeOnNodeTaints", "TASReplaceNodeOnPodTermination",
        "TASRespectNodeAffinityPreferred", "TASValidateWorkloadSliceSize", "TLSOptions", "TopologyAwareScheduling",
        "UnadmittedWorkloadsExplicitStatus", "UnadmittedWorkloadsObservability", "ValidateRayAndSparkJobUpdates",
        "VectorizedResourceRequests", "VisibilityOnDemand", "WorkloadIdentifierAnnotations",
        "WorkloadPriorityClassDefaulting", "WorkloadRequestUseMergePatch", "WorkloadValidateResourcesAreNonNegative",
        "WorkloadValidationForPodSetMetadata"
    }),
}

# The Kueue versions the project is verified with; others need kueue.allowUnverifiedVersion.
VERIFIED_VERSIONS: tuple[str, ...] = tuple(FEATURE_GATES)


# ElasticJobsViaWorkloadSlices: alpha (off) since 0.13, beta and on by default since 0.18 (sigs.k8s.io/kueue@v0.19.2
# pkg/features/kube_features.go: {Version: "0.13", Default: false, Alpha}, {Version: "0.18", Default: true, Beta}).
ELASTIC_JOBS_GATE = "ElasticJobsViaWorkloadSlices"
ELASTIC_JOBS_ON_BY_DEFAULT_SINCE = (0, 18)


def elastic_jobs_gate(version: str, gates: dict[str, bool]) -> bool:
    """Whether a Kueue of `version` with these feature gates set runs ElasticJobsViaWorkloadSlices: as set, else
    the version's default. With it off, Kueue's RayJob webhook refuses the autoscaling an elastic job turns on ("a
    kueue managed job should only use autoscaling when workload slicing is enabled": kueue v0.19.2
    pkg/controller/jobs/raycluster/common.go ValidateCreate, called by pkg/controller/jobs/rayjob/rayjob_webhook.go;
    pkg/workloadslicing/workloadslicing.go Enabled reads the gate and the kueue.x-k8s.io/elastic-job annotation)."""
    if ELASTIC_JOBS_GATE in gates:
        return bool(gates[ELASTIC_JOBS_GATE])
    major, minor, *_ = (int(part) for part in version.split("."))
    return (major, minor) >= ELASTIC_JOBS_ON_BY_DEFAULT_SINCE
