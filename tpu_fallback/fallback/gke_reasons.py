"""What GKE's cluster autoscaler writes when a scale-up fails, and what that says about a rung's capacity.

The fallback controller reads the Events the autoscaler writes. This module turns their messages into verdicts,
from a table taken from the autoscaler's source (`REASONS`). Standard library only; no Pulumi.

Who writes what (sources: the comment above `REASONS`):

* GKE's autoscaler (GoogleCloudPlatform/cluster-autoscaler, GKE's fork) writes **FailedScaleUp** on each pod that
  triggered a scale-up that then failed (pkg/visibility/events/failed_scale_up_event_logger.go):
  ``Node scale up in zones <zone>, <zone> associated with this pod failed: <reason>, <reason>. Pod is at risk of not
  being scheduled.`` Zones and reasons are de-duplicated and joined with ", ". The message is cut to its first
  `MESSAGE_LIMIT` (250) bytes, with no marker (Go ``message[:messageLengthLimit]``). The reason texts are GKE's
  own: the open-source autoscaler has no FailedScaleUp Event at all.
* GKE also writes **ScaleUpFailed** / **FlexScaleUpFailed** / **FlexScaleUpFailedOnTrigger** for resize-request
  failures of multi-host TPU and flex-start node pools (pkg/resizerequests/error_reporter.go):
  ``Failed adding <n> nodes to group <group> due to <CODE>; source errors: <...>`` or
  ``Failed adding <n> nodes to group <group> via <mode> scale up due to "<Reason>": <...>``.
* The open-source autoscaler (kubernetes-sigs/cluster-autoscaler; its core left kubernetes/autoscaler in July 2026)
  writes **ScaleUpFailed** when instances fail to be created (pkg/clusterstate/clusterstate.go):
  ``Failed adding <n> nodes to group <group> due to <Class>.<CODE>; source errors: <...>``.
  These three go through the autoscaler's LogRecorder onto its status ConfigMap (kube-system,
  cluster-autoscaler-status), not onto pods. Whether GKE writes that ConfigMap is not in the fork's source.
* Both write **NotTriggerScaleUp** and **TriggeredScaleUp** on pods. The open-source processor writes ``pod didn't
  trigger scale-up: 1 in backoff after failed scale-up, ...`` and ``pod triggered scale-up: [{<group> 0->4 (max:
  4)}]`` (pkg/processors/status/eventing_scale_up_processor.go). GKE always turns ProvisioningRequests on
  (pkg/config/options/cli/flags.go: "GKE clusterautoscaler always uses ProvReqs"), which swaps in its own processor
  (pkg/autoscaler/processors.go): it writes ``Pod didn't trigger scale-up: ...`` and ``Pod triggered scale-up: ...``
  with the same reasons, and also after a scale-up that failed (pkg/processors/scaleup/
  internal_eventing_scale_up_processor.go).

`read_failed_scale_up` reads the first three forms. `read_not_triggered` and `read_triggered` read the last two.
client-go may fold frequent Events that differ only in message into one whose message starts with
`AGGREGATED_PREFIX`; every reader strips it.

`reservation` (an argument below) means: the node pool consumes a specific reservation. GKE's autoscaler asks the
same question (``GkeMig.UsesReservation``: the pool's reservation affinity names a reservation), and answers some
errors differently for such pools (pkg/backoff/stockout_detection.go, reservations_backoff.go).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple


class Verdict(StrEnum):
    """What a reason says about the capacity of the rung whose pool failed to scale up."""

    NO_CAPACITY = "no-capacity"
    """The zone has no VMs for the pool now: out of resources, stock-out, quota exceeded, or "Invalid Reservation"
    on a pool that consumes no reservation (GKE's stockout_detection.go counts that as a stock-out)."""
    RESERVATION_NO_CAPACITY = "reservation-no-capacity"
    """The reservation the pool consumes is exhausted or not ready: on a reservation rung, that rung has no
    capacity."""
    NOT_CAPACITY = "not-capacity"
    """Something other than capacity is wrong (IP space, service account, TPU topology, placement, a missing or
    mismatched reservation, permissions): closing a capacity rung on it would be wrong."""
    UNKNOWN = "unknown"
    """Internal error, nodes that did not appear in time, anything unrecognised: the backstop timer decides."""


class Form(StrEnum):
    """Which message a row's text appears in."""

    FAILED_SCALE_UP = "FailedScaleUp"
    """GKE, on a pod: a reason in "... associated with this pod failed: <reasons>. Pod is at risk ..."."""
    ERROR_CODE = "ErrorCode"
    """ScaleUpFailed (open source, and GKE's resize requests): "... due to [<Class>.]<CODE>; source errors: ..."."""
    RESIZE_REQUEST = "ResizeRequest"
    """GKE's resize requests: '... via <mode> scale up due to "<Reason>": ...'."""


@dataclass(frozen=True)
class ReasonRow:
    """One reason the autoscaler can write, and its verdict on a pool without and with a specific reservation."""

    text: str
    """The text as the autoscaler writes it, or its stable prefix (what may follow is `tail`). For ERROR_CODE and
    RESIZE_REQUEST rows: the code or reason name itself."""
    no_reservation: Verdict
    reservation: Verdict
    code: str
    """The GCE/autoscaler error code the text stands for ("" when there is none)."""
    const: str
    """The Go constant that names it (GKE's visibility MessageId, or the autoscaler constant)."""
    source: str
    """Where the text is written: "<repo> <path>@<commit>"."""
    basis: str = ""
    """Why the verdict: the source that classifies the error, when it is not obvious from the text."""
    form: Form = Form.FAILED_SCALE_UP
    tail: str = ""
    """A regular expression for what follows `text` inside the same reason (FAILED_SCALE_UP rows). Named groups:
    `group` (one node group id), `groups` (Go's %q of a []string), `detail` (free text, may hold ", ")."""

    def verdict(self, *, reservation: bool) -> Verdict:
        return self.reservation if reservation else self.no_reservation


# --- the table ----------------------------------------------------------------------------------------------------
# Taken from, at these commits (fetched 2026-08):
#   GoogleCloudPlatform/cluster-autoscaler 7d250507339b3a7583b380349f217ea191ff15ff (GKE's fork):
#     pkg/visibility/events/failed_scale_up_event_logger.go  the FailedScaleUp template, reason texts, 250-byte cut
#     pkg/visibility/types/utils.go (ScaleUpFailureToVisMessage)  which error code becomes which text; any code not
#         listed there (INSUFFICIENT_CAPACITY, PERMISSIONS_ERROR, OTHER, ...) becomes "Internal error"
#     pkg/visibility/types/messages.go  the MessageIds and their parameters (mostly the failing node group's id)
#     pkg/backoff/stockout_detection.go, reservations_backoff.go  how GKE itself classifies each code
#     pkg/resizerequests/error_reporter.go, pkg/provisioningrequests/reconciler/reasons/reasons.go  resize requests
#   kubernetes/autoscaler 55c37cd5eb550756c5ccc5a89e9068d77797e575, cluster-autoscaler/cloudprovider/gce/
#     autoscaling_gce_client.go  the error codes (GetErrorInfo). GKE's fork pins
#     ce048aaf0fd3ac13318c63d5629c4e2b3645593c, whose copy of this file is identical.
#   kubernetes-sigs/cluster-autoscaler 33c3f97bf2749b1385d9223f1f8856fe345011f7 (the open-source core; GKE pins
#     991000421cbbf6becd2098e3671675a96bb780d0: the files below are the same there, but for a metric in
#     orchestrator.go and the --cloud-provider default in flags.go):
#     pkg/clusterstate/clusterstate.go  ScaleUpFailed; pkg/processors/status/eventing_scale_up_processor.go
#     NotTriggerScaleUp, TriggeredScaleUp; pkg/core/scaleup/orchestrator/{orchestrator,skippedreasons}.go the
#     skipped node groups; pkg/utils/backoff/exponential_backoff.go, pkg/config/flags/flags.go the back-off.
#   kubernetes/client-go tools/record/events_cache.go@928244b13ad2eb19a8a910669ec0bbb498cb74c1: AGGREGATED_PREFIX.

_GKE = "GoogleCloudPlatform/cluster-autoscaler"
_GKE_AT = "7d250507339b3a7583b380349f217ea191ff15ff"
_GCE = "kubernetes/autoscaler"
_GCE_AT = "55c37cd5eb550756c5ccc5a89e9068d77797e575"
_OSS = "kubernetes-sigs/cluster-autoscaler"
_OSS_AT = "33c3f97bf2749b1385d9223f1f8856fe345011f7"

_EVENT_LOGGER = f"{_GKE} pkg/visibility/events/failed_scale_up_event_logger.go@{_GKE_AT}"
_GCE_CODES = f"{_GCE} cluster-autoscaler/cloudprovider/gce/autoscaling_gce_client.go@{_GCE_AT}"
_DWS_REASONS = f"{_GKE} pkg/provisioningrequests/reconciler/reasons/reasons.go@{_GKE_AT}"
_STOCKOUT = f"{_GKE} pkg/backoff/stockout_detection.go@{_GKE_AT}"
_RESERVATIONS = f"{_GKE} pkg/backoff/reservations_backoff.go@{_GKE_AT}"
_TO_TEXT = f"{_GKE} pkg/visibility/types/utils.go@{_GKE_AT}"

_ONE_GROUP = r"(?:: (?P<group>[^\s,]*))?"  # ": " + the failing node group's id ("" after a synchronous error)
_DETAIL = r"(?:: (?P<detail>.*))?"

NO, RES, NOT, UNK = Verdict.NO_CAPACITY, Verdict.RESERVATION_NO_CAPACITY, Verdict.NOT_CAPACITY, Verdict.UNKNOWN

_OUT_OF_RESOURCES = (f"{_STOCKOUT}: out of resources on a pool without reservation is a stock-out; "
                     f"{_RESERVATIONS}: on a pool that uses a reservation it is the reservation out of resources")
_QUOTA = f"{_STOCKOUT}: quota errors count as a stock-out even on a pool that uses a reservation"
_INVALID_RESERVATION = (f"{_STOCKOUT}: on a pool without reservation, INVALID_RESERVATION (which GCE's 'Zone does not "
                        f"currently have sufficient capacity' also maps to) is a stock-out; {_RESERVATIONS}: on a "
                        f"reservation pool it is an invalid-reservation error")
_RESERVATION_FULL = f"{_RESERVATIONS}: an out-of-resources reservation error"
_RESERVATION_INVALID = f"{_RESERVATIONS}: an invalid-reservation error (like not found, incompatible)"
_ANY_AFFINITY = ("only a pool with ANY_RESERVATION_THEN_FAIL affinity gets it; a pool that consumes no reservation "
                 "cannot, so it says nothing about one")
_INTERNAL = (f"{_TO_TEXT}: every code without a text of its own, INSUFFICIENT_CAPACITY (a stock-out) included, "
             f"becomes 'Internal error'")

REASONS: tuple[ReasonRow, ...] = (
    # GKE's FailedScaleUp reason texts (failed_scale_up_event_logger.go failureToMessage), in the order of
    # messages.go's MessageIds.
    ReasonRow("GCE out of resources", NO, RES, "RESOURCE_POOL_EXHAUSTED", "ScaleUpErrorOutOfResources",
              _EVENT_LOGGER, _OUT_OF_RESOURCES),
    ReasonRow("GCE quota exceeded", NO, NO, "QUOTA_EXCEEDED", "ScaleUpErrorQuotaExceeded", _EVENT_LOGGER, _QUOTA),
    ReasonRow("Some nodes in node group ", UNK, UNK, "timeout", "ScaleUpErrorWaitingForInstancesTimeout",
              _EVENT_LOGGER, "nodes did not register in time: no reason given",
              tail=r'\[(?P<groups>[^\]]*)\] failed to appear in time'),
    ReasonRow("IP space exhausted", NOT, NOT, "IP_SPACE_EXHAUSTED", "ScaleUpErrorIPSpaceExhausted", _EVENT_LOGGER),
    ReasonRow("Service Account was deleted", NOT, NOT, "", "ScaleUpErrorServiceAccountDeleted", _EVENT_LOGGER),
    ReasonRow("Unsupported Compact Placement Config", NOT, NOT, "", "ScaleUpErrorUnsupportedCompactPlacementConfig",
              _EVENT_LOGGER, tail=_DETAIL),
    ReasonRow('Node group "', NOT, NOT, "", "ScaleUpErrorCompactPlacementNodeGroupAlreadyExists", _EVENT_LOGGER,
              tail=r'(?P<detail>[^"]*)" already exists'),
    ReasonRow("Invalid TPU topology", NOT, NOT, "", "ScaleUpErrorTpuTopologyInvalid", _EVENT_LOGGER, tail=_DETAIL),
    ReasonRow("Invalid TPU configuration", NOT, NOT, "UNSUPPORTED_TPU_CONFIGURATION",
              "ScaleUpErrorTpuConfigurationInvalid", _EVENT_LOGGER),
    ReasonRow("Invalid Reservation", NO, NOT, "INVALID_RESERVATION", "ScaleUpErrorInvalidReservation", _EVENT_LOGGER,
              _INVALID_RESERVATION, tail=_ONE_GROUP),
    ReasonRow("Reservation not ready", UNK, RES, "RESERVATION_NOT_READY", "ScaleUpErrorReservationNotReady",
              _EVENT_LOGGER, "the reservation exists but has no VMs to give yet (GKE backs it off like an invalid "
              "reservation, reservations_backoff.go)", tail=_ONE_GROUP),
    ReasonRow("Reservation capacity exceeded", UNK, RES, "RESERVATION_CAPACITY_EXCEEDED",
              "ScaleUpErrorReservationCapacityExceeded", _EVENT_LOGGER, _RESERVATION_FULL, tail=_ONE_GROUP),
    ReasonRow("Reservation not found or incorrectly shared", NOT, NOT, "RESERVATION_NOT_FOUND",
              "ScaleUpErrorReservationNotFound", _EVENT_LOGGER, _RESERVATION_INVALID, tail=_ONE_GROUP),
    ReasonRow("Reservation incompatible with node group", NOT, NOT, "RESERVATION_INCOMPATIBLE",
              "ScaleUpErrorReservationIncompatible", _EVENT_LOGGER, _RESERVATION_INVALID, tail=_ONE_GROUP),
    ReasonRow("Any affinity reservations not available", UNK, NOT, "AUTOMATIC_RESERVATIONS_NOT_AVAILABLE",
              "ScaleUpErrorAnyAffinityReservationsNotAvailable", _EVENT_LOGGER, _ANY_AFFINITY, tail=_DETAIL),
    ReasonRow("Any affinity reservations no capacity", UNK, RES, "AUTOMATIC_RESERVATIONS_NO_CAPACITY",
              "ScaleUpErrorAnyAffinityReservationsNoCapacity", _EVENT_LOGGER, _ANY_AFFINITY, tail=_DETAIL),
    ReasonRow("Internal error", UNK, UNK, "OTHER", "ScaleUpErrorOther", _EVENT_LOGGER, _INTERNAL),
    # ScaleUpFailed "... due to [<Class>.]<CODE>; ...": the codes GetErrorInfo gives (autoscaling_gce_client.go).
    ReasonRow("RESOURCE_POOL_EXHAUSTED", NO, RES, "RESOURCE_POOL_EXHAUSTED", "ErrorCodeResourcePoolExhausted",
              _GCE_CODES, _OUT_OF_RESOURCES, Form.ERROR_CODE),
    ReasonRow("INSUFFICIENT_CAPACITY", NO, RES, "INSUFFICIENT_CAPACITY", "ErrorCodeInsufficientCapacity", _GCE_CODES,
              _OUT_OF_RESOURCES, Form.ERROR_CODE),
    ReasonRow("QUOTA_EXCEEDED", NO, NO, "QUOTA_EXCEEDED", "ErrorCodeQuotaExceeded", _GCE_CODES, _QUOTA,
              Form.ERROR_CODE),
    ReasonRow("IP_SPACE_EXHAUSTED", NOT, NOT, "IP_SPACE_EXHAUSTED", "ErrorIPSpaceExhausted", _GCE_CODES,
              form=Form.ERROR_CODE),
    ReasonRow("PERMISSIONS_ERROR", NOT, NOT, "PERMISSIONS_ERROR", "ErrorCodePermissions", _GCE_CODES,
              form=Form.ERROR_CODE),
    ReasonRow("VM_EXTERNAL_IP_ACCESS_POLICY_CONSTRAINT", NOT, NOT, "VM_EXTERNAL_IP_ACCESS_POLICY_CONSTRAINT",
              "ErrorCodeVmExternalIpAccessPolicyConstraint", _GCE_CODES, form=Form.ERROR_CODE),
    ReasonRow("INVALID_RESERVATION", NO, NOT, "INVALID_RESERVATION", "ErrorInvalidReservation", _GCE_CODES,
              _INVALID_RESERVATION, Form.ERROR_CODE),
    ReasonRow("RESERVATION_NOT_FOUND", NOT, NOT, "RESERVATION_NOT_FOUND", "ErrorReservationNotFound", _GCE_CODES,
              _RESERVATION_INVALID, Form.ERROR_CODE),
    ReasonRow("RESERVATION_NOT_READY", UNK, RES, "RESERVATION_NOT_READY", "ErrorReservationNotReady", _GCE_CODES,
              form=Form.ERROR_CODE),
    ReasonRow("RESERVATION_CAPACITY_EXCEEDED", UNK, RES, "RESERVATION_CAPACITY_EXCEEDED",
              "ErrorReservationCapacityExceeded", _GCE_CODES, _RESERVATION_FULL, Form.ERROR_CODE),
    ReasonRow("RESERVATION_INCOMPATIBLE", NOT, NOT, "RESERVATION_INCOMPATIBLE", "ErrorReservationIncompatible",
              _GCE_CODES, _RESERVATION_INVALID, Form.ERROR_CODE),
    ReasonRow("AUTOMATIC_RESERVATIONS_NOT_AVAILABLE", UNK, NOT, "AUTOMATIC_RESERVATIONS_NOT_AVAILABLE",
              "ErrorAutomaticReservationsNotAvailable", _GCE_CODES, _ANY_AFFINITY, Form.ERROR_CODE),
    ReasonRow("AUTOMATIC_RESERVATIONS_NO_CAPACITY", UNK, RES, "AUTOMATIC_RESERVATIONS_NO_CAPACITY",
              "ErrorAutomaticReservationsNoCapacity", _GCE_CODES, _ANY_AFFINITY, Form.ERROR_CODE),
    ReasonRow("UNSUPPORTED_TPU_CONFIGURATION", NOT, NOT, "UNSUPPORTED_TPU_CONFIGURATION",
              "ErrorUnsupportedTpuConfiguration", _GCE_CODES, form=Form.ERROR_CODE),
    ReasonRow("OTHER", UNK, UNK, "OTHER", "ErrorCodeOther", _GCE_CODES, form=Form.ERROR_CODE),
    # GKE's resize-request reasons, '... due to "<Reason>": ...' (reasons.go errorCodeToReason, and the creation
    # error QUEUING_INFEASIBLE_NO_CAPACITY). Other creation reasons (InvalidArgument, PermissionDenied, ...) are
    # left unrecognised: UNKNOWN.
    ReasonRow("ResourcePoolExhausted", NO, RES, "RESOURCE_POOL_EXHAUSTED", "resourcePoolExhaustedReason",
              _DWS_REASONS, _OUT_OF_RESOURCES, Form.RESIZE_REQUEST),
    ReasonRow("QuotaExceeded", NO, NO, "QUOTA_EXCEEDED", "quotaExceededReason", _DWS_REASONS, _QUOTA,
              Form.RESIZE_REQUEST),
    ReasonRow("QueuingInfeasibleNoCapacity", NO, NO, "QUEUING_INFEASIBLE_NO_CAPACITY",
              "queuingInfeasibleNoCapacityReason", _DWS_REASONS,
              "'Could not enqueue the Provisioning Request due to insufficient capacity in zone'", Form.RESIZE_REQUEST),
    ReasonRow("IPSpaceExhausted", NOT, NOT, "IP_SPACE_EXHAUSTED", "ipSpaceExhaustedReason", _DWS_REASONS,
              form=Form.RESIZE_REQUEST),
    ReasonRow("PermissionsError", NOT, NOT, "PERMISSIONS_ERROR", "permissionsErrorReason", _DWS_REASONS,
              form=Form.RESIZE_REQUEST),
    ReasonRow("VMExternalIPAccessPolicyConstraint", NOT, NOT, "VM_EXTERNAL_IP_ACCESS_POLICY_CONSTRAINT",
              "vmExternalIpAccessPolicyConstraint", _DWS_REASONS, form=Form.RESIZE_REQUEST),
    ReasonRow("InvalidReservation", NO, NOT, "INVALID_RESERVATION", "invalidReservationReason", _DWS_REASONS,
              _INVALID_RESERVATION, Form.RESIZE_REQUEST),
    ReasonRow("ReservationNotFound", NOT, NOT, "RESERVATION_NOT_FOUND", "reservationNotFoundReason", _DWS_REASONS,
              _RESERVATION_INVALID, Form.RESIZE_REQUEST),
    ReasonRow("ReservationNotReady", UNK, RES, "RESERVATION_NOT_READY", "reservationNotReadyReason", _DWS_REASONS,
              form=Form.RESIZE_REQUEST),
    ReasonRow("ReservationCapacityExceeded", UNK, RES, "RESERVATION_CAPACITY_EXCEEDED",
              "reservationCapacityExceededReason", _DWS_REASONS, _RESERVATION_FULL, Form.RESIZE_REQUEST),
    ReasonRow("ReservationIncompatible", NOT, NOT, "RESERVATION_INCOMPATIBLE", "reservationIncompatibleReason",
              _DWS_REASONS, _RESERVATION_INVALID, Form.RESIZE_REQUEST),
    ReasonRow("InternalError", UNK, UNK, "OTHER", "internalErrorReason", _DWS_REASONS,
              "any other code, INSUFFICIENT_CAPACITY included", Form.RESIZE_REQUEST),
    ReasonRow("WaitTimeExceeded", UNK, UNK, "WAIT_TIME_EXCEEDED", "validUntilExceededFailedReason", _DWS_REASONS,
              "a queued request's time ran out: no reason given", Form.RESIZE_REQUEST),
    ReasonRow("LimitExceeded", UNK, UNK, "LIMIT_EXCEEDED", "limitExceededReason", _DWS_REASONS,
              form=Form.RESIZE_REQUEST),
)

# --- facts about the Events and the back-off ----------------------------------------------------------------------

FAILED_SCALE_UP = "FailedScaleUp"  # GKE, on a pod: failed_scale_up_event_logger.go failedScaleUpReason
NOT_TRIGGER_SCALE_UP = "NotTriggerScaleUp"  # on a pod: eventing_scale_up_processor.go (and GKE's own processor)
TRIGGERED_SCALE_UP = "TriggeredScaleUp"  # on a pod: same files
SCALE_UP_FAILED = "ScaleUpFailed"  # status ConfigMap: clusterstate.go; GKE error_reporter.go
FLEX_SCALE_UP_FAILED = "FlexScaleUpFailed"  # status ConfigMap: GKE error_reporter.go, "%sScaleUpFailed" with "Flex"
FLEX_SCALE_UP_FAILED_ON_TRIGGER = "FlexScaleUpFailedOnTrigger"  # status ConfigMap: GKE error_reporter.go

MESSAGE_LIMIT = 250
"""GKE cuts a FailedScaleUp message to its first 250 bytes, with no marker (failed_scale_up_event_logger.go
messageLengthLimit; ``message = message[:messageLengthLimit]``). NotTriggerScaleUp and TriggeredScaleUp are not
cut."""

BACKOFF_INITIAL = 5 * 60
BACKOFF_MAX = 30 * 60
BACKOFF_RESET = 3 * 60 * 60
"""A node group's back-off after a failed scale-up, in seconds: 5 min, doubled on each failure after the last
back-off ended, at most 30 min; forgotten 3 h after the last failure. GKE: pkg/backoff/gke_mig_backoff.go
(InitialNodeGroupBackoffDuration, MaxNodeGroupBackoffDuration, NodeGroupBackoffResetTimeout). Open source: the
same defaults of --initial-node-group-backoff-duration, --max-node-group-backoff-duration,
--node-group-backoff-reset-timeout (pkg/config/flags/flags.go); the doubling in pkg/utils/backoff/
exponential_backoff.go."""

# The Go format strings, verbatim, for reference (the readers below parse what they produce).
FAILED_SCALE_UP_FORMAT = ("Node scale up in zones %v associated with this pod failed: %v. "
                          "Pod is at risk of not being scheduled.")  # GKE zonalErrorMessageTemplate
NOT_TRIGGERED_FORMAT = "%v didn't trigger scale-up: %s"  # GKE's processor; open source: "pod didn't trigger ..."
TRIGGERED_FORMAT = "%v triggered scale-up: %v"  # GKE's processor; open source: "pod triggered scale-up: %v"
SCALE_UP_INFO_FORMAT = "{%v %v->%v (max: %v)}"  # nodegroupset ScaleUpInfo.String: group id, current, new, max
SCALE_UP_FAILED_FORMAT = "Failed adding %v nodes to group %v due to %v; source errors: %v"  # clusterstate.go
RESIZE_REQUEST_FAILED_FORMAT = "Failed adding %v nodes to group %v via %s scale up due to %q: %s"  # error_reporter

BACKOFF_REASON = "in backoff after failed scale-up"  # skippedreasons.go BackoffReason
AGGREGATED_PREFIX = "(combined from similar events): "  # client-go events_cache.go EventAggregatorByReasonMessageFunc

_FSU_HEAD = "Node scale up in zones "
_FSU_MIDDLE = " associated with this pod failed: "
_FSU_TAIL = ". Pod is at risk of not being scheduled."
MIN_PREFIX = 4
"""A reason cut at the end of a message is recognised from at least this many characters, when they begin exactly
one row's text."""

_ZONES = re.compile(r"[^\s,]*(?:, [^\s,]*)*")
_BY_CODE = re.compile(
    r"Failed adding (?P<count>\d+) nodes to group (?P<group>\S+) due to (?:(?P<cls>\w+)\.)?(?P<code>\w+); "
    r"source errors: (?P<detail>.*)", re.DOTALL)
_BY_REASON = re.compile(
    r'Failed adding (?P<count>\d+) nodes to group (?P<group>\S+) via (?P<mode>\S*) scale up due to '
    r'"(?P<reason>[^"]*)": (?P<detail>.*)', re.DOTALL)
_NOT_TRIGGERED = re.compile(r"(?P<subject>\S+) didn't trigger scale-up: (?P<reasons>.*)", re.DOTALL)
_COUNT = re.compile(r"(?:^|, )(?P<count>\d+) ")
_MAX_TOTAL = "max total nodes in cluster reached"  # eventing_scale_up_processor.go ReasonsMessage
_TRIGGERED = re.compile(r"(?P<subject>\S+) triggered scale-up: \[(?P<infos>.*)\]", re.DOTALL)
_SCALE_UP_INFO = re.compile(r"\{(?P<group>\S+) (?P<current>\d+)->(?P<new>\d+) \(max: (?P<max>\d+)\)\}")
_MIG_URL = re.compile(r"https://\S*?/projects/(?P<project>[^/\s]+)/zones/(?P<zone>[^/\s]+)/"
                      r"(?:instanceGroups|instanceGroupManagers)/(?P<name>[^/\s]+)")
_GKE_MIG = re.compile(r"gke-(?P<stem>.+)-(?P<hash>[0-9a-f]+)-grp")


# --- FailedScaleUp ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    """One reason read from a message."""

    row: ReasonRow
    text: str
    """The reason as it stands in the message."""
    groups: tuple[str, ...] = ()
    """The node groups (MIG URLs) it names, when it names them whole."""
    cut: bool = False
    """The message was cut inside this reason, or right at its end: it was recognised from its beginning, and
    the node groups it names are left out (they may be cut)."""

    def verdict(self, *, reservation: bool) -> Verdict:
        return self.row.verdict(reservation=reservation)


@dataclass(frozen=True)
class FailedScaleUp:
    """A failed scale-up, read from a FailedScaleUp (GKE) or ScaleUpFailed-style message."""

    message: str
    form: Form | None
    """Which form it was read as; None for a message this module does not know."""
    zones: tuple[str, ...]
    """The zones named in full (a zone cut at the end of the message is left out)."""
    groups: tuple[str, ...]
    """The node groups (MIG URLs) the message names."""
    reasons: tuple[Reason, ...]
    unrecognised: tuple[str, ...]
    """The fragments no row matched."""
    cut: bool
    """GKE cut the message at MESSAGE_LIMIT: later zones or reasons may be missing."""
    verdict: Verdict


def combine(verdicts: Iterable[Verdict], *, complete: bool = True) -> Verdict:
    """The verdict of a message with several reasons.

    Any NO_CAPACITY wins (the zone said so, whatever else failed); otherwise any RESERVATION_NO_CAPACITY; otherwise
    NOT_CAPACITY if there was at least one reason and every one is NOT_CAPACITY, and no reason can be missing
    (`complete`: nothing unrecognised, not cut before the end of the reasons); otherwise UNKNOWN.
    """
    seen = list(verdicts)
    if Verdict.NO_CAPACITY in seen:
        return Verdict.NO_CAPACITY
    if Verdict.RESERVATION_NO_CAPACITY in seen:
        return Verdict.RESERVATION_NO_CAPACITY
    if seen and complete and all(v is Verdict.NOT_CAPACITY for v in seen):
        return Verdict.NOT_CAPACITY
    return Verdict.UNKNOWN


def read_failed_scale_up(message: str, *, reservation: bool) -> FailedScaleUp:
    """Read a failed scale-up's message; `reservation`: the pool consumes a specific reservation.

    GKE's FailedScaleUp (on a pod): ``Node scale up in zones <zones> associated with this pod failed: <reasons>. Pod
    is at risk of not being scheduled.``, cut to 250 bytes. Each reason is matched against the FAILED_SCALE_UP rows
    by its text; several reasons are split at ", " (a reason whose detail holds ", " keeps it). A reason cut at the
    end is recognised when its visible part (at least MIN_PREFIX characters) begins exactly one row's text; else it
    is unrecognised. A message cut in the zone list has no reasons: UNKNOWN.

    ScaleUpFailed (open source: ``... due to OutOfResource.RESOURCE_POOL_EXHAUSTED; source errors: ...``; GKE's
    resize requests: ``... due to RESOURCE_POOL_EXHAUSTED; ...``) and GKE's resize-request form
    (``... via Flex scale up due to "ResourcePoolExhausted": ...``) name one node group and one code.

    The verdict combines the reasons' verdicts (`combine`); a cut message or an unrecognised fragment never gives
    NOT_CAPACITY, since a missing reason might have said more.
    """
    text = _strip_aggregated(message)
    if text.startswith(_FSU_HEAD):
        return _read_gke(message, text, reservation=reservation)
    for pattern, form in ((_BY_CODE, Form.ERROR_CODE), (_BY_REASON, Form.RESIZE_REQUEST)):
        m = pattern.fullmatch(text)
        if m is None:
            continue
        name = m["code"] if form is Form.ERROR_CODE else m["reason"]
        group = m["group"]
        zone = group_zone(group)
        row = next((r for r in REASONS if r.form is form and r.text == name), None)
        reasons = () if row is None else (Reason(row, name, (group,)),)
        unrecognised = (name,) if row is None else ()
        return FailedScaleUp(message, form, (zone,) if zone else (), (group,), reasons, unrecognised, False,
                             combine((r.verdict(reservation=reservation) for r in reasons),
                                     complete=not unrecognised))
    return FailedScaleUp(message, None, (), (), (), (text,), False, Verdict.UNKNOWN)


def _strip_aggregated(message: str) -> str:
    return message[len(AGGREGATED_PREFIX):] if message.startswith(AGGREGATED_PREFIX) else message


def _read_gke(message: str, text: str, *, reservation: bool) -> FailedScaleUp:
    cut = not text.endswith(_FSU_TAIL) and (len(text.encode()) >= MESSAGE_LIMIT or text.endswith("\ufffd"))
    rest = text[len(_FSU_HEAD):]
    zones_match = _ZONES.match(rest)
    assert zones_match is not None  # the pattern matches the empty string
    zones = zones_match.group().split(", ")
    after = rest[zones_match.end():]
    if after.startswith(_FSU_MIDDLE):
        body: str | None = after[len(_FSU_MIDDLE):]
    elif cut and (after in ("", ",") or _FSU_MIDDLE.startswith(after)):
        body = None  # cut in the zone list, or just after it
        if after == "":
            zones = zones[:-1]  # the last zone may be cut
    else:
        return FailedScaleUp(message, None, (), (), (), (rest,), cut, Verdict.UNKNOWN)
    zone_names = tuple(z for z in zones if z)
    if body is None:
        return FailedScaleUp(message, Form.FAILED_SCALE_UP, zone_names, (), (), (), cut, Verdict.UNKNOWN)

    # How the body ends: the full tail; a part of it (the message was cut inside it, so every reason is whole); or
    # nothing (the message was cut inside the reasons, or is not GKE's).
    end_seen = True
    if body.endswith(_FSU_TAIL):
        body = body[:-len(_FSU_TAIL)]
    else:
        end_seen = False
        if cut:
            for k in range(len(_FSU_TAIL) - 1, 0, -1):
                if body.endswith(_FSU_TAIL[:k]):
                    body, end_seen = body[:-k], True
                    break
    open_end = cut and not end_seen  # the last piece may be cut mid-word

    reasons: list[Reason] = []
    unrecognised: list[str] = []
    pieces = body.split(", ")
    if open_end and pieces and pieces[-1].endswith(","):
        pieces[-1] = pieces[-1][:-1]
    current: tuple[ReasonRow, str] | None = None  # the reason being read, which may go on over ", "

    def close(last: bool) -> None:
        nonlocal current
        if current is None:
            return
        row, seen = current
        current = None
        if last and open_end:
            reasons.append(Reason(row, seen, (), cut=True))
            return
        m = re.fullmatch(re.escape(row.text) + row.tail, seen, re.DOTALL)
        groups: tuple[str, ...] = ()
        if m is not None:
            found = m.groupdict()
            if found.get("group"):
                groups = (str(found["group"]),)
            elif found.get("groups"):
                groups = tuple(g for g in re.findall(r'"([^"]*)"', str(found["groups"])) if g)
        reasons.append(Reason(row, seen, groups))

    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        row = _row_at(piece)
        prefixed = _row_by_prefix(piece) if row is None and last and open_end else None
        if row is not None:
            close(False)
            current = (row, piece)
        elif prefixed is not None:
            close(False)
            reasons.append(Reason(prefixed, piece, (), cut=True))
        elif current is not None and "detail" in current[0].tail:
            current = (current[0], current[1] + ", " + piece)  # a detail that holds ", "
        else:
            close(False)
            if piece:
                unrecognised.append(piece)
        if last:
            close(True)

    groups = tuple(dict.fromkeys(g for r in reasons for g in r.groups))
    verdict = combine((r.verdict(reservation=reservation) for r in reasons),
                      complete=not unrecognised and not open_end)
    return FailedScaleUp(message, Form.FAILED_SCALE_UP, zone_names, groups, tuple(reasons), tuple(unrecognised),
                         cut, verdict)


def _row_at(piece: str) -> ReasonRow | None:
    """The FAILED_SCALE_UP row whose text `piece` begins with (the longest; the text must end at a word's end)."""
    best: ReasonRow | None = None
    for row in REASONS:
        if row.form is not Form.FAILED_SCALE_UP or not piece.startswith(row.text):
            continue
        n = len(row.text)
        if n < len(piece) and row.text[-1].isalnum() and piece[n].isalnum():
            continue
        if best is None or n > len(best.text):
            best = row
    return best


def _row_by_prefix(piece: str) -> ReasonRow | None:
    """The one FAILED_SCALE_UP row whose text begins with `piece` (a reason cut mid-word), if exactly one does."""
    if len(piece) < MIN_PREFIX:
        return None
    rows = [r for r in REASONS if r.form is Form.FAILED_SCALE_UP and r.text.startswith(piece)]
    return rows[0] if len(rows) == 1 else None


# --- NotTriggerScaleUp --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NotTriggered:
    """A NotTriggerScaleUp message, as counts of node groups per reason."""

    message: str
    subject: str
    """Who the Event is about, as written: "pod" (open source), "Pod", "ProvisioningRequest", "CapacityRequest"."""
    counts: Mapping[str, int]
    """Node groups per reason, e.g. {"in backoff after failed scale-up": 1, "max node group size reached": 2}."""
    in_backoff: int
    """Node groups in back-off after a failed scale-up. Never evidence about one pool on its own: see
    read_not_triggered."""
    max_total_nodes_reached: bool
    unrecognised: tuple[str, ...]


def read_not_triggered(message: str) -> NotTriggered:
    """Read ``Pod didn't trigger scale-up: 1 in backoff after failed scale-up, 2 node(s) didn't match ...``.

    Both processors build the reasons with eventing_scale_up_processor.go ReasonsMessage: "<count> <reason>" per
    reason, joined with ", ", in no set order (a Go map); or "max total nodes in cluster reached". The count is of
    node groups: those that rejected the pod (scheduler predicates) and those skipped (in back-off, at max size,
    not ready, ...). The subject is "pod" from the open-source processor, "Pod" from GKE's.

    A back-off count is never evidence about one pool on its own:

    * The autoscaler backs off a node group after **every** failed scale-up, whatever the cause: an IP range, a
      bad template, a timeout, a stock-out alike (kubernetes-sigs/cluster-autoscaler pkg/clusterstate/
      clusterstate.go RegisterFailedScaleUp -> backoffNodeGroup; GKE pkg/backoff/single_mig_backoff.go, keyed by
      the MIG whatever the error).
    * The skipped node groups are computed once per loop for the whole cluster, and the same map goes on every
      pending pod's message: a pod that could never run on a backed-off pool still counts it (pkg/core/scaleup/
      orchestrator/orchestrator.go filterValidScaleUpNodeGroups, GetRemainingPods). Only with
      ScaleUpSimulationForSkippedNodeGroupsEnabled (flag --scaleup-simulation-for-skipped-node-groups-enabled,
      default false, pkg/config/flags/flags.go) does a pod list only the skipped groups that pass its predicates.
      GKE sets that option from its experiments (pkg/config/options/tracking/
      field_scaleup_simulation_for_skipped_node_groups.go: a direct-launch flag, default true per its comment, and
      a minimum-version experiment rolled out region by region, failsafe false): whether a cluster has it is not
      visible. Even with it, the count says nothing of why the group is backed off.
    * GKE backs off more than the failed pool: after IP_SPACE_EXHAUSTED every pool on the same subnetwork, or
      every pool with the same pod IPv4 range when the error message names that range (pkg/backoff/
      cidr_ip_backoff.go, keyed by subnetwork or range); after a stock-out of an auto-provisioned pool, every node
      group that needs the same resources in that zone (resource_backoff.go); after a reservation error, every
      pool on that reservation with the same machine family and host shape (reservations_backoff.go).

    So "1 in backoff after failed scale-up" means: some node group in the cluster failed recently, for some
    reason. Read it only together with a FailedScaleUp whose verdict is about this pool.
    """
    text = _strip_aggregated(message)
    m = _NOT_TRIGGERED.fullmatch(text)
    if m is None:
        return NotTriggered(message, "", {}, 0, False, (text,))
    reasons = m["reasons"]
    if reasons == _MAX_TOTAL:
        return NotTriggered(message, m["subject"], {}, 0, True, ())
    counts: dict[str, int] = {}
    unrecognised: list[str] = []
    marks = list(_COUNT.finditer(reasons))
    head = reasons[:marks[0].start()] if marks else reasons
    if head:
        unrecognised.append(head)
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(reasons)
        reason = reasons[mark.end():end]
        counts[reason] = counts.get(reason, 0) + int(mark["count"])
    return NotTriggered(message, m["subject"], counts, counts.get(BACKOFF_REASON, 0), False, tuple(unrecognised))


# --- TriggeredScaleUp and node groups -----------------------------------------------------------------------------


class ScaleUp(NamedTuple):
    """One node group of a TriggeredScaleUp: ScaleUpInfo.String(), "{<group> <from>-><to> (max: <max>)}"."""

    group: str
    current: int
    new: int
    max: int


def read_triggered(message: str) -> list[ScaleUp]:
    """Read ``pod triggered scale-up: [{<group> 0->4 (max: 4)} {<group> 1->2 (max: 8)}]`` (Go's %v of the
    []ScaleUpInfo: eventing_scale_up_processor.go, nodegroup_set_processor.go ScaleUpInfo.String). GKE's own
    processor writes "Pod triggered scale-up: ..." with the same list. On GKE the group is the MIG's URL, one per zone,
    ``https://www.googleapis.com/compute/v1/projects/<p>/zones/<z>/instanceGroups/<name>`` (GKE
    pkg/cloudprovider/gke/gke_cloud_provider_impl.go GkeMig.Id -> gce.GenerateMigUrl). An unknown message: []."""
    m = _TRIGGERED.fullmatch(_strip_aggregated(message))
    if m is None:
        return []
    return [ScaleUp(s["group"], int(s["current"]), int(s["new"]), int(s["max"]))
            for s in _SCALE_UP_INFO.finditer(m["infos"])]


def mig_name(group: str) -> str | None:
    """The MIG's name in a node group id (a MIG URL, kubernetes/autoscaler cloudprovider/gce/gce_url.go
    GenerateMigUrl), or None."""
    m = _MIG_URL.fullmatch(group)
    return m["name"] if m else None


def group_zone(group: str) -> str | None:
    """The zone in a node group id (a MIG URL), or None."""
    m = _MIG_URL.fullmatch(group)
    return m["zone"] if m else None


def group_pool(group: str, pools: Iterable[str] = (), *, cluster: str | None = None) -> str | None:
    """The node pool a node group (a MIG URL, or a MIG name) belongs to, when that is certain; else None.

    GKE names a pool's MIGs ``gke-<cluster>-<pool>-<hash>-grp`` (the shape of the MIG names in GKE's autoscaler's
    tests, e.g. "gke-blah-default-pool-67b773a0-grp" in pkg/cloudprovider/gke/gke_manager_test.go). GKE does not
    document the rule, and long cluster or pool names are shortened in ways not known here: a name that does not
    match exactly gives None. With `cluster`, the pool is what follows "gke-<cluster>-" (and must be one of
    `pools`, if given). Without it, exactly one of `pools` must end the name. The certain way is the node pool's
    own list of MIGs (the GKE API's NodePool.instanceGroupUrls): compare `mig_name(group)` with those.
    """
    name = mig_name(group) or (group if "/" not in group else None)
    m = _GKE_MIG.fullmatch(name) if name else None
    if m is None:
        return None
    stem, known = m["stem"], list(pools)
    if cluster is not None:
        if not stem.startswith(cluster + "-"):
            return None
        pool = stem[len(cluster) + 1:]
        return pool if pool and (not known or pool in known) else None
    matches = [p for p in known if stem.endswith("-" + p)]
    return matches[0] if len(matches) == 1 else None
