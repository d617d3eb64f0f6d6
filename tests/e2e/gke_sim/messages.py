"""The cluster autoscaler's words on pods, copied from the upstream sources (never written from memory).

Sources (the commit read is named with each text):
- GKE's cluster autoscaler, GoogleCloudPlatform/cluster-autoscaler at 7d250507339b3a7583b380349f217ea191ff15ff
  (GKE_CA below): pkg/visibility/events/failed_scale_up_event_logger.go (FailedScaleUp), pkg/visibility/types/utils.go
  and messages.go (which GCE error becomes which text), pkg/processors/scaleup/internal_eventing_scale_up_processor.go
  (TriggeredScaleUp, NotTriggerScaleUp: GKE "always uses ProvReqs", pkg/config/options/cli/flags.go, so this processor
  replaces the open-source one and its texts start with "Pod").
- The open-source core, kubernetes-sigs/cluster-autoscaler at 33c3f97bf2749b1385d9223f1f8856fe345011f7 (OSS_CA):
  pkg/core/scaleup/orchestrator/skippedreasons.go and rejectedreasons.go, pkg/processors/status/
  eventing_scale_up_processor.go (ReasonsMessage), pkg/processors/nodegroupset/nodegroup_set_processor.go
  (ScaleUpInfo.String).
- GCE's error codes, kubernetes/autoscaler at 55c37cd5eb550756c5ccc5a89e9068d77797e575 (OSS_GCE):
  cluster-autoscaler/cloudprovider/gce/autoscaling_gce_client.go (GetErrorInfo), gce_url.go (GenerateMigUrl).
- The scheduler's predicate failures, which the autoscaler reports for node groups a pod does not fit
  (kubernetes/kubernetes): pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go@0f7becbc,
  nodeaffinity/node_affinity.go@5ae369a0 (ErrReasonPod), noderesources/fit.go@903b1f7e (fitsRequest).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

GKE_CA = "GoogleCloudPlatform/cluster-autoscaler@7d250507339b3a7583b380349f217ea191ff15ff"
OSS_CA = "kubernetes-sigs/cluster-autoscaler@33c3f97bf2749b1385d9223f1f8856fe345011f7"
OSS_GCE = "kubernetes/autoscaler@55c37cd5eb550756c5ccc5a89e9068d77797e575"

FAILED_SCALE_UP = "FailedScaleUp"
TRIGGERED_SCALE_UP = "TriggeredScaleUp"
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"

# GKE_CA pkg/visibility/events/failed_scale_up_event_logger.go: zonalErrorMessageTemplate (Go's %v of the zones and of
# the reasons, each list joined by ", " and without repeats), and messageLengthLimit: emitEventOnPods keeps the first
# 250 bytes of a longer message (message[:messageLengthLimit]).
ZONAL_ERROR = ("Node scale up in zones {zones} associated with this pod failed: {reasons}. Pod is at risk of not being "
               "scheduled.")
MESSAGE_LENGTH_LIMIT = 250
# Its failure texts (failureToMessage), by the GCE error each comes from (GKE_CA pkg/visibility/types/utils.go,
# ScaleUpFailureToVisMessage; the codes are OSS_GCE's GetErrorInfo's):
OUT_OF_RESOURCES = "GCE out of resources"  # RESOURCE_POOL_EXHAUSTED, ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]
QUOTA_EXCEEDED = "GCE quota exceeded"  # any code containing QUOTA
SERVICE_ACCOUNT_DELETED = "Service Account was deleted"  # gkeclient.ServiceAccountDeleted
IP_SPACE_EXHAUSTED = "IP space exhausted"  # IP_SPACE_EXHAUSTED
INVALID_TPU_TOPOLOGY = "Invalid TPU topology"  # + ": <topology>"; tpu.InvalidTpuTopologyError (a sync error)
INVALID_TPU_CONFIGURATION = "Invalid TPU configuration"  # CONDITION_NOT_MET "Unsupported TPU configuration"
INVALID_RESERVATION = "Invalid Reservation"  # + ": <node group id>"; INVALID_RESERVATION
TIMEOUT = "Some nodes in node group {ids} failed to appear in time"  # %q of []string{<node group id>}: ["<id>"]
RESERVATION_NOT_READY = "Reservation not ready"  # + ": <node group id>"
RESERVATION_CAPACITY_EXCEEDED = "Reservation capacity exceeded"  # + ": <node group id>"
RESERVATION_NOT_FOUND = "Reservation not found or incorrectly shared"  # + ": <node group id>"
INTERNAL_ERROR = "Internal error"  # OTHER, and any code without a text of its own

# GKE_CA internal_eventing_scale_up_processor.go: recordNotTriggeredScaleUpEvent ("%v didn't trigger scale-up: %s")
# and recordTriggeredScaleUpEvent ("%v triggered scale-up: %v"), the object type of a pod being "Pod".
NOT_TRIGGERED = "Pod didn't trigger scale-up: {reasons}"
TRIGGERED = "Pod triggered scale-up: {infos}"
# OSS_CA nodegroup_set_processor.go ScaleUpInfo.String: "{%v %v->%v (max: %v)}" of Group.Id(), CurrentSize, NewSize,
# MaxSize; Go prints the slice of them as "[a b]".
SCALE_UP_INFO = "{{{id} {current}->{new} (max: {max})}}"

# OSS_CA skippedreasons.go: why a node group is skipped for every pod of a loop.
BACKOFF_REASON = "in backoff after failed scale-up"
MAX_LIMIT_REACHED_REASON = "max node group size reached"
NOT_READY_REASON = "not ready for scale-up"
# OSS_CA rejectedreasons.go: ScaleUpExecutionErrorReason, a node group whose resize call itself failed.
SCALE_UP_EXECUTION_FAILED = "scale-up execution failed"
# The scheduler's filter plugins, in the default profile's order (pkg/scheduler/apis/config/v1/default_plugins.go
# @0d725d5d: TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, ...); the first one that fails gives the
# reasons (the framework stops at the first failing filter).
UNTOLERATED_TAINT = "node(s) had untolerated taint {{{key}: {value}}}"  # the first untolerated taint only
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
INSUFFICIENT = "Insufficient {resource}"  # one reason per resource: cpu, memory, ephemeral-storage, then extended
TOO_MANY_PODS = "Too many pods"

GCE_DOMAIN_URL = "https://www.googleapis.com/compute/v1"  # OSS_GCE gce_url.go defaultDomainUrl


def go_quote(text: str) -> str:
    """Go's %q of a plain string (strconv.Quote for the ASCII the ids here are made of)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def cut(message: str, limit: int = MESSAGE_LENGTH_LIMIT) -> str:
    """message[:limit] as Go slices a string: by bytes (a rune cut in two is dropped here)."""
    data = message.encode()
    return message if len(data) <= limit else data[:limit].decode(errors="ignore")


def failed_scale_up(zones: Iterable[str], reasons: Iterable[str]) -> str:
    """GKE's FailedScaleUp message: zones and reasons each without repeats, in order, then cut at 250 bytes."""
    return cut(ZONAL_ERROR.format(zones=", ".join(dict.fromkeys(zones)), reasons=", ".join(dict.fromkeys(reasons))))


def not_triggered(counts: Mapping[str, int]) -> str:
    """NotTriggerScaleUp: "<count> <reason>" per reason, joined by ", " (upstream's order is a Go map's: none)."""
    return NOT_TRIGGERED.format(reasons=", ".join(f"{n} {reason}" for reason, n in counts.items()))


def triggered(infos: Iterable[tuple[str, int, int, int]]) -> str:
    """TriggeredScaleUp for (node group id, current size, new size, max size) per node group scaled up."""
    return TRIGGERED.format(infos="[" + " ".join(SCALE_UP_INFO.format(id=i, current=c, new=n, max=m)
                                                 for i, c, n, m in infos) + "]")


@dataclass(frozen=True)
class Failure:
    """A reason a scale-up fails, as GCE reports it to GKE's autoscaler and as the autoscaler words it."""

    kind: str  # the sim's name for it (GkeSim.set_failure)
    code: str  # the error code the autoscaler gets (OSS_GCE GetErrorInfo, or the autoscaler's own)
    text: str  # failureToMessage's text
    param: str = ""  # "node-group": ": <node group id>" follows the text; "topology": ": <topology>"; "timeout"
    sync: bool = False  # the resize call itself fails (at once, no TriggeredScaleUp), not the instances later
    reservation: bool = False  # only for a pool that consumes a specific reservation
    scope: str = ""  # "subnet": every pool of the subnet backs off too; "reservation": every pool of the reservation

    def message_part(self, node_group_id: str, topology: str | None) -> str:
        if self.param == "node-group":
            return f"{self.text}: {node_group_id}"
        if self.param == "topology":
            return f"{self.text}: {topology or 'unknown topology'}"
        if self.param == "timeout":
            return TIMEOUT.format(ids="[" + go_quote(node_group_id) + "]")
        return self.text


# The kinds GkeSim.set_failure takes. Codes: OSS_GCE autoscaling_gce_client.go (ErrorCode*, Error*), OSS_CA
# pkg/metrics ("timeout"), GKE_CA gkeclient (ServiceAccountDeleted) and tpu/error.go (invalidTpuTopology).
FAILURES: dict[str, Failure] = {f.kind: f for f in (
    Failure("out-of-resources", "RESOURCE_POOL_EXHAUSTED", OUT_OF_RESOURCES),
    Failure("quota-exceeded", "QUOTA_EXCEEDED", QUOTA_EXCEEDED),
    Failure("ip-space-exhausted", "IP_SPACE_EXHAUSTED", IP_SPACE_EXHAUSTED, scope="subnet"),
    Failure("service-account-deleted", "serviceAccountDeleted", SERVICE_ACCOUNT_DELETED),
    # Without a reservation: GCE's INSUFFICIENT_CAPACITY in a zone with no capacity at all comes out as
    # INVALID_RESERVATION (GKE_CA pkg/backoff/stockout_detection.go: "it sometimes happens in case there is no
    # capacity at all in a given zone"); with one, a reservation GCE refuses.
    Failure("invalid-reservation", "INVALID_RESERVATION", INVALID_RESERVATION, param="node-group", scope="reservation"),
    Failure("reservation-not-ready", "RESERVATION_NOT_READY", RESERVATION_NOT_READY, param="node-group",
            reservation=True, scope="reservation"),
    Failure("reservation-capacity-exceeded", "RESERVATION_CAPACITY_EXCEEDED", RESERVATION_CAPACITY_EXCEEDED,
            param="node-group", reservation=True, scope="reservation"),
    Failure("reservation-not-found", "RESERVATION_NOT_FOUND", RESERVATION_NOT_FOUND, param="node-group",
            reservation=True, scope="reservation"),
    Failure("invalid-tpu-configuration", "UNSUPPORTED_TPU_CONFIGURATION", INVALID_TPU_CONFIGURATION),
    # GKE raises it when the resize itself is refused: GKE_CA gkeclient/autoscaling_gke_client_v1beta1.go returns
    # tpu.NewInvalidTpuTopologyError for a compact placement with a TPU topology on HTTP 400, on the node pool
    # creation call of auto-provisioning; the sim lets any TPU pool's resize fail so.
    Failure("invalid-tpu-topology", "invalidTpuTopology", INVALID_TPU_TOPOLOGY, param="topology", sync=True),
    # OTHER: an unrecognised GCE error, and a multi-host TPU resize request that failed or was cancelled without
    # errors (GKE_CA pkg/resizerequests/error_reporter.go: defaultError, ErrorCodeOther).
    Failure("internal-error", "OTHER", INTERNAL_ERROR),
    # The instances never appear: after the node group's max node provision time (OSS_CA pkg/clusterstate/
    # clusterstate.go updateScaleRequests, metrics.Timeout).
    Failure("instances-timeout", "timeout", "", param="timeout"),
)}
