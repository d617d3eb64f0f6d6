"""GKE's cluster autoscaler Events read into verdicts (tpu_fallback/fallback/gke_reasons.py).

The messages here are written as the autoscaler writes them, from its format strings (GoogleCloudPlatform/
cluster-autoscaler pkg/visibility/events/failed_scale_up_event_logger.go, pkg/resizerequests/error_reporter.go;
kubernetes-sigs/cluster-autoscaler pkg/clusterstate/clusterstate.go, pkg/processors/status/
eventing_scale_up_processor.go), not from the module's table.
"""

from __future__ import annotations

import pytest

from tpu_fallback.fallback.gke_reasons import (
    REASONS,
    Form,
    Verdict,
    group_pool,
    group_zone,
    mig_name,
    read_failed_scale_up,
    read_not_triggered,
    read_triggered,
)

NO, RES, NOT, UNK = Verdict.NO_CAPACITY, Verdict.RESERVATION_NO_CAPACITY, Verdict.NOT_CAPACITY, Verdict.UNKNOWN
MIG = ("https://www.googleapis.com/compute/v1/projects/tpu-proj/zones/us-central2-b/instanceGroups/"
       "gke-train-v5p-res-5e1f9a2b-grp")
LIMIT = 250  # failed_scale_up_event_logger.go messageLengthLimit


def gke(reasons: str, zones: str = "us-central2-b") -> str:
    """A FailedScaleUp message as GKE writes it: zonalErrorMessageTemplate, then message[:messageLengthLimit]."""
    message = (f"Node scale up in zones {zones} associated with this pod failed: {reasons}. "
               "Pod is at risk of not being scheduled.")
    return message.encode()[:LIMIT].decode(errors="ignore")


# One case per row: (the reason as GKE writes it, the MessageId it is written for, verdict without / with a
# specific reservation). Texts from failed_scale_up_event_logger.go failureToMessage; parameters as
# pkg/visibility/types/messages.go gives them (mostly the failing node group's id, "" after a synchronous error).
GKE_CASES = [
    ("GCE out of resources", "ScaleUpErrorOutOfResources", NO, RES),
    ("GCE quota exceeded", "ScaleUpErrorQuotaExceeded", NO, NO),
    (f'Some nodes in node group ["{MIG}"] failed to appear in time', "ScaleUpErrorWaitingForInstancesTimeout",
     UNK, UNK),
    ("IP space exhausted", "ScaleUpErrorIPSpaceExhausted", NOT, NOT),
    ("Service Account was deleted", "ScaleUpErrorServiceAccountDeleted", NOT, NOT),
    ("Unsupported Compact Placement Config: unknown", "ScaleUpErrorUnsupportedCompactPlacementConfig", NOT, NOT),
    ('Node group "gke-train-nap-n2-standard-8-1a2b3c4d" already exists',
     "ScaleUpErrorCompactPlacementNodeGroupAlreadyExists", NOT, NOT),
    ("Invalid TPU topology: 4x4x5", "ScaleUpErrorTpuTopologyInvalid", NOT, NOT),
    ("Invalid TPU configuration", "ScaleUpErrorTpuConfigurationInvalid", NOT, NOT),
    ("Invalid Reservation: ", "ScaleUpErrorInvalidReservation", NO, NOT),
    ("Reservation not ready: ", "ScaleUpErrorReservationNotReady", UNK, RES),
    (f"Reservation capacity exceeded: {MIG}", "ScaleUpErrorReservationCapacityExceeded", UNK, RES),
    ("Reservation not found or incorrectly shared: ", "ScaleUpErrorReservationNotFound", NOT, NOT),
    ("Reservation incompatible with node group: ", "ScaleUpErrorReservationIncompatible", NOT, NOT),
    ("Any affinity reservations not available: There are no any affinity reservations matching the instance in "
     "your project", "ScaleUpErrorAnyAffinityReservationsNotAvailable", UNK, NOT),
    ("Any affinity reservations no capacity: All any affinity reservations in your project, or shared with your "
     "project, are fully consumed", "ScaleUpErrorAnyAffinityReservationsNoCapacity", UNK, RES),
    ("Internal error", "ScaleUpErrorOther", UNK, UNK),
]

# ScaleUpFailed, "Failed adding %v nodes to group %v due to %v; source errors: %v": the open-source clusterstate.go
# prints the code as "<class>.<code>" (errorCode.String; OutOfResource for the first three, Other for the rest,
# per cloudprovider/gce GetErrorInfo), GKE's error_reporter.go the bare code.
CODE_CASES = [
    ("OutOfResource.RESOURCE_POOL_EXHAUSTED", "RESOURCE_POOL_EXHAUSTED", NO, RES),
    ("OutOfResource.INSUFFICIENT_CAPACITY", "INSUFFICIENT_CAPACITY", NO, RES),
    ("QUOTA_EXCEEDED", "QUOTA_EXCEEDED", NO, NO),
    ("Other.IP_SPACE_EXHAUSTED", "IP_SPACE_EXHAUSTED", NOT, NOT),
    ("Other.PERMISSIONS_ERROR", "PERMISSIONS_ERROR", NOT, NOT),
    ("Other.VM_EXTERNAL_IP_ACCESS_POLICY_CONSTRAINT", "VM_EXTERNAL_IP_ACCESS_POLICY_CONSTRAINT", NOT, NOT),
    ("Other.INVALID_RESERVATION", "INVALID_RESERVATION", NO, NOT),
    ("RESERVATION_NOT_FOUND", "RESERVATION_NOT_FOUND", NOT, NOT),
    ("Other.RESERVATION_NOT_READY", "RESERVATION_NOT_READY", UNK, RES),
    ("Other.RESERVATION_CAPACITY_EXCEEDED", "RESERVATION_CAPACITY_EXCEEDED", UNK, RES),
    ("Other.RESERVATION_INCOMPATIBLE", "RESERVATION_INCOMPATIBLE", NOT, NOT),
    ("Other.AUTOMATIC_RESERVATIONS_NOT_AVAILABLE", "AUTOMATIC_RESERVATIONS_NOT_AVAILABLE", UNK, NOT),
    ("Other.AUTOMATIC_RESERVATIONS_NO_CAPACITY", "AUTOMATIC_RESERVATIONS_NO_CAPACITY", UNK, RES),
    ("UNSUPPORTED_TPU_CONFIGURATION", "UNSUPPORTED_TPU_CONFIGURATION", NOT, NOT),
    ("Other.OTHER", "OTHER", UNK, UNK),
]

# GKE's resize requests, 'Failed adding %v nodes to group %v via %s scale up due to %q: %s' (error_reporter.go;
# reasons from pkg/provisioningrequests/reconciler/reasons/reasons.go).
RESIZE_CASES = [
    ("ResourcePoolExhausted", NO, RES),
    ("QuotaExceeded", NO, NO),
    ("QueuingInfeasibleNoCapacity", NO, NO),
    ("IPSpaceExhausted", NOT, NOT),
    ("PermissionsError", NOT, NOT),
    ("VMExternalIPAccessPolicyConstraint", NOT, NOT),
    ("InvalidReservation", NO, NOT),
    ("ReservationNotFound", NOT, NOT),
    ("ReservationNotReady", UNK, RES),
    ("ReservationCapacityExceeded", UNK, RES),
    ("ReservationIncompatible", NOT, NOT),
    ("InternalError", UNK, UNK),
    ("WaitTimeExceeded", UNK, UNK),
    ("LimitExceeded", UNK, UNK),
]


@pytest.mark.parametrize("reservation", [False, True])
@pytest.mark.parametrize(("reason", "const", "without", "with_reservation"), GKE_CASES,
                         ids=[c[1] for c in GKE_CASES])
def test_each_failed_scale_up_reason(reason: str, const: str, without: Verdict, with_reservation: Verdict,
                                     reservation: bool) -> None:
    message = gke(reason)
    got = read_failed_scale_up(message, reservation=reservation)
    assert got.form is Form.FAILED_SCALE_UP
    assert [r.row.const for r in got.reasons] == [const]
    assert got.unrecognised == ()
    assert got.zones == ("us-central2-b",)
    assert got.cut == (len(message.encode()) == LIMIT and not message.endswith("scheduled."))
    assert got.verdict is (with_reservation if reservation else without)


def test_a_reason_names_its_node_group() -> None:
    got = read_failed_scale_up(gke(f'Some nodes in node group ["{MIG}"] failed to appear in time'),
                               reservation=False)
    assert got.groups == (MIG,)
    got = read_failed_scale_up(gke(f"Reservation capacity exceeded: {MIG}"), reservation=True)
    assert got.cut  # the node group's URL makes it longer than 250 bytes: cut inside ". Pod is at risk ..."
    assert got.groups == (MIG,)
    assert got.verdict is RES


@pytest.mark.parametrize("reservation", [False, True])
@pytest.mark.parametrize(("code", "expected", "without", "with_reservation"), CODE_CASES,
                         ids=[c[1] for c in CODE_CASES])
def test_each_scale_up_failed_code(code: str, expected: str, without: Verdict, with_reservation: Verdict,
                                   reservation: bool) -> None:
    message = (f"Failed adding 4 nodes to group {MIG} due to {code}; source errors: Instance "
               "'gke-train-v5p-res-5e1f9a2b-x7k2' creation failed: error")
    got = read_failed_scale_up(message, reservation=reservation)
    assert got.form is Form.ERROR_CODE
    assert [r.row.code for r in got.reasons] == [expected]
    assert got.groups == (MIG,)
    assert got.zones == ("us-central2-b",)
    assert got.verdict is (with_reservation if reservation else without)


@pytest.mark.parametrize("reservation", [False, True])
@pytest.mark.parametrize("mode", ["", "Flex"])
@pytest.mark.parametrize(("reason", "without", "with_reservation"), RESIZE_CASES, ids=[c[0] for c in RESIZE_CASES])
def test_each_resize_request_reason(reason: str, without: Verdict, with_reservation: Verdict, mode: str,
                                    reservation: bool) -> None:
    message = f'Failed adding 16 nodes to group {MIG} via {mode} scale up due to "{reason}": a GCE message'
    got = read_failed_scale_up(message, reservation=reservation)
    assert got.form is Form.RESIZE_REQUEST
    assert [r.row.text for r in got.reasons] == [reason]
    assert got.verdict is (with_reservation if reservation else without)


def test_the_table_has_a_case_here_for_every_row() -> None:
    rows = {(r.form, r.const if r.form is Form.FAILED_SCALE_UP else r.text) for r in REASONS}
    cases = ({(Form.FAILED_SCALE_UP, c[1]) for c in GKE_CASES} | {(Form.ERROR_CODE, c[1]) for c in CODE_CASES}
             | {(Form.RESIZE_REQUEST, c[0]) for c in RESIZE_CASES})
    assert rows == cases
    assert len(REASONS) == len(GKE_CASES) + len(CODE_CASES) + len(RESIZE_CASES)
    assert all(r.source.count("@") == 1 and len(r.source.split("@")[1]) == 40 for r in REASONS)


# --- several reasons ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("reasons", "reservation", "verdict"), [
    ("GCE quota exceeded, GCE out of resources", False, NO),  # failed_scale_up_event_logger_test.go's own example
    ("IP space exhausted, GCE out of resources", False, NO),  # any no-capacity wins
    ("Internal error, GCE out of resources", True, RES),
    (f"Reservation capacity exceeded: {MIG}", True, RES),
    ("IP space exhausted, Service Account was deleted", False, NOT),  # all say: not capacity
    ("IP space exhausted, Internal error", False, UNK),  # one says nothing
    ("Invalid TPU configuration, Reservation not ready: ", False, UNK),
    ("Invalid TPU configuration, Reservation not ready: ", True, RES),
    ("IP space exhausted, A reason this module has never seen", False, UNK),
])
def test_several_reasons(reasons: str, reservation: bool, verdict: Verdict) -> None:
    assert read_failed_scale_up(gke(reasons), reservation=reservation).verdict is verdict


def test_several_zones_and_a_reason_that_holds_commas() -> None:
    got = read_failed_scale_up(gke(
        "Any affinity reservations no capacity: All any affinity reservations in your project, or shared with your "
        "project, are fully consumed, IP space exhausted", zones="us-central2-b, us-central2-a"), reservation=True)
    assert got.zones == ("us-central2-b", "us-central2-a")
    assert [r.row.const for r in got.reasons] == ["ScaleUpErrorAnyAffinityReservationsNoCapacity",
                                                   "ScaleUpErrorIPSpaceExhausted"]
    assert got.reasons[0].text.endswith("are fully consumed")
    assert got.unrecognised == ()
    assert got.verdict is RES


# --- cut at 250 bytes ---------------------------------------------------------------------------------------------


def test_cut_mid_reason_is_still_recognised() -> None:
    message = gke(f"Invalid Reservation: {MIG}, GCE out of resources", zones="us-east5-a, us-east5-b, us-east5-c")
    assert message.endswith(", GCE out of reso") and len(message) == LIMIT
    got = read_failed_scale_up(message, reservation=True)
    assert got.cut
    assert [(r.row.const, r.cut) for r in got.reasons] == [("ScaleUpErrorInvalidReservation", False),
                                                           ("ScaleUpErrorOutOfResources", True)]
    assert got.groups == (MIG,)
    assert got.verdict is RES  # out of resources on a reservation pool; the invalid reservation alone says NOT
    assert read_failed_scale_up(message, reservation=False).verdict is NO


def test_cut_where_the_visible_prefix_is_ambiguous() -> None:
    message = gke(f"Reservation incompatible with node group: {MIG}, Reservation not ready: ")
    assert message.endswith(", Reservation not")
    got = read_failed_scale_up(message, reservation=True)
    assert [r.row.const for r in got.reasons] == ["ScaleUpErrorReservationIncompatible"]
    assert got.unrecognised == ("Reservation not",)  # not ready, or not found: cannot tell
    assert got.verdict is UNK


def test_cut_just_after_a_separator() -> None:
    message = gke(f"Reservation incompatible with node group: {MIG}, Reservation not ready: ",
                  zones="us-central2-b, us-central2-a")
    assert message.endswith("-grp, ")
    got = read_failed_scale_up(message, reservation=True)
    assert [r.row.const for r in got.reasons] == ["ScaleUpErrorReservationIncompatible"]
    assert got.unrecognised == ()
    assert got.verdict is UNK  # the visible reason says NOT, but the next one is gone


def test_cut_so_short_nothing_is_recognised() -> None:
    message = gke(f"Invalid Reservation: {MIG}, GCE quota exceeded",
                  zones="us-central2-b, us-central2-a, us-central2-c")
    assert message.endswith(", GCE qu")
    assert read_failed_scale_up(message, reservation=True).verdict is NO  # "GCE qu": only the quota row
    message = gke(f"Reservation not found or incorrectly shared: {MIG}, IP space exhausted",
                  zones="us-east5-a, us-east5-b")
    assert message.endswith(", IP ")
    got = read_failed_scale_up(message, reservation=True)
    assert got.unrecognised == ("IP ",)  # shorter than MIN_PREFIX
    assert got.verdict is UNK  # every visible reason says NOT, but a cut one might not


def test_cut_in_the_tail_keeps_every_reason() -> None:
    message = gke(f"Reservation not found or incorrectly shared: {MIG}")
    assert message.endswith(". Pod is at ri")
    got = read_failed_scale_up(message, reservation=True)
    assert got.cut and not got.reasons[0].cut
    assert got.verdict is NOT


def test_cut_in_the_zone_list() -> None:
    zones = ", ".join(f"{region}-{zone}" for region in (
        "us-central1", "us-east1", "us-west1", "europe-west4", "asia-east1", "us-east5", "us-south1", "us-west4",
        "europe-west1", "asia-northeast1", "southamerica-east1") for zone in "ab")
    message = gke("GCE out of resources", zones=zones)
    assert message.endswith(", europe-west1-a,")
    got = read_failed_scale_up(message, reservation=False)
    assert got.cut and got.reasons == ()
    assert got.zones[-1] == "europe-west1-a" and len(got.zones) == 17
    assert got.verdict is UNK
    message = gke("GCE out of resources", zones="x-a, " + zones)
    assert message.endswith(", us-west4-b, europe-wes")
    got = read_failed_scale_up(message, reservation=False)
    assert got.zones[-1] == "us-west4-b"  # the cut zone is left out
    assert got.verdict is UNK


def test_unknown_text_is_unknown() -> None:
    got = read_failed_scale_up(gke("Quantum flux exceeded"), reservation=False)
    assert (got.reasons, got.unrecognised, got.verdict) == ((), ("Quantum flux exceeded",), UNK)
    got = read_failed_scale_up("Scale-up failed for group x: boom", reservation=False)
    assert (got.form, got.verdict) == (None, UNK)
    got = read_failed_scale_up(f"Failed adding 1 nodes to group {MIG} due to Other.SOMETHING_NEW; source errors: ",
                               reservation=False)
    assert (got.unrecognised, got.verdict) == (("SOMETHING_NEW",), UNK)


def test_an_aggregated_event_is_read_too() -> None:
    # client-go tools/record/events_cache.go EventAggregatorByReasonMessageFunc
    got = read_failed_scale_up("(combined from similar events): " + gke("GCE out of resources"), reservation=False)
    assert got.verdict is NO and not got.cut


# --- NotTriggerScaleUp --------------------------------------------------------------------------------------------


def test_not_triggered_counts_each_reason() -> None:
    got = read_not_triggered(
        "pod didn't trigger scale-up: 2 node(s) didn't match Pod's node affinity/selector, 1 in backoff after failed "
        "scale-up, 1 max node group size reached, 3 Insufficient google.com/tpu")
    assert got.subject == "pod"
    assert dict(got.counts) == {"node(s) didn't match Pod's node affinity/selector": 2,
                                "in backoff after failed scale-up": 1, "max node group size reached": 1,
                                "Insufficient google.com/tpu": 3}
    assert got.in_backoff == 1
    assert got.unrecognised == ()


def test_not_triggered_with_a_reason_that_holds_commas() -> None:
    # skippedreasons.go NewMaxResourceLimitReached: "exceeded quota: %q, resources: %s" (resources joined by ", ")
    got = read_not_triggered('(combined from similar events): Pod didn\'t trigger scale-up: 1 exceeded quota: '
                             '"cluster", resources: google.com/tpu, cpu, 4 in backoff after failed scale-up')
    assert got.subject == "Pod"
    assert dict(got.counts) == {'exceeded quota: "cluster", resources: google.com/tpu, cpu': 1,
                                "in backoff after failed scale-up": 4}
    assert got.in_backoff == 4


def test_not_triggered_other_forms() -> None:
    got = read_not_triggered("pod didn't trigger scale-up: max total nodes in cluster reached")
    assert got.max_total_nodes_reached and got.in_backoff == 0
    got = read_not_triggered("pod didn't trigger scale-up: ")
    assert dict(got.counts) == {} and got.unrecognised == ()
    got = read_not_triggered("0/3 nodes are available")
    assert got.unrecognised == ("0/3 nodes are available",) and got.in_backoff == 0


# --- TriggeredScaleUp and node groups -----------------------------------------------------------------------------


def test_triggered() -> None:
    other = MIG.replace("us-central2-b", "us-central2-a").replace("5e1f9a2b", "77aa0b1c")
    assert read_triggered(f"pod triggered scale-up: [{{{MIG} 0->4 (max: 4)}}]") == [(MIG, 0, 4, 4)]
    got = read_triggered(f"Pod triggered scale-up: [{{{MIG} 1->2 (max: 8)}} {{{other} 0->3 (max: 10)}}]")
    assert [tuple(s) for s in got] == [(MIG, 1, 2, 8), (other, 0, 3, 10)]
    assert got[1].new == 3
    assert read_triggered("pod triggered scale-up, group: x, sizes (current/new): 3/4") == []


def test_node_group_names() -> None:
    assert mig_name(MIG) == "gke-train-v5p-res-5e1f9a2b-grp"
    assert group_zone(MIG) == "us-central2-b"
    assert mig_name("gke-train-v5p-res-5e1f9a2b-grp") is None
    assert group_pool(MIG, cluster="train") == "v5p-res"
    assert group_pool(MIG, ["v5p", "v5p-res"], cluster="train") == "v5p-res"
    assert group_pool(MIG, ["v5p"], cluster="train") is None  # not one of ours
    assert group_pool(MIG, ["v5p", "v5p-res"]) == "v5p-res"
    assert group_pool(MIG, ["v5p-res", "res"]) is None  # both end the name: cannot tell
    assert group_pool("gke-train-v5p-res-5e1f9a2b-grp", ["v5p-res"]) == "v5p-res"
    assert group_pool(MIG, cluster="other") is None
    assert group_pool("https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/my-own-mig",
                      ["my-own"]) is None


def test_backoff_and_limit_facts() -> None:
    from tpu_fallback.fallback import gke_reasons as g
    # GKE pkg/backoff/gke_mig_backoff.go; the open-source flags' defaults (pkg/config/flags/flags.go)
    assert (g.BACKOFF_INITIAL, g.BACKOFF_MAX, g.BACKOFF_RESET) == (300, 1800, 10800)
    assert g.MESSAGE_LIMIT == LIMIT
    assert (g.FAILED_SCALE_UP, g.NOT_TRIGGER_SCALE_UP, g.TRIGGERED_SCALE_UP) == (
        "FailedScaleUp", "NotTriggerScaleUp", "TriggeredScaleUp")
