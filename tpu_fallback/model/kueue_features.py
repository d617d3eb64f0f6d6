"""Kueue's feature gates per chart version: a gate the pinned controller does not know makes it exit with
"unrecognized feature gate", and `pulumi up` would wait 10 minutes on the Helm release. Pure Python.

Taken from sigs.k8s.io/kueue@<version>/pkg/features/kube_features.go (every `featuregate.Feature` constant);
tests/e2e checks the list against that file in the Go module cache. Add a version when you pin it.
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
