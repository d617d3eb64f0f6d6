"""A reservation rung may consume a reservation shared from another project (`reservation.project`): its pools'
reservation_affinity value is then `projects/<project>/reservations/<name>` (the form GKE's consuming-reservations page
gives a node pool for a shared reservation); a bad project id is refused before any resource is registered."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.test_bad_input import refused as refused_by_the_program
from tests.test_ladder import ladder, refused
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

NODE_POOL = "gcp:container/nodePool:NodePool"
OWNER = "tpu-capacity-owner"  # a valid project id: 6-30 lowercase letters, digits, hyphens


def reservation_rung(**reservation: Any) -> list[dict[str, Any]]:
    return [{"name": "reserved", "kind": "reservation", "reservation": {"name": "tpu-res", "size": 1, **reservation}},
            {"name": "on-demand", "kind": "onDemand", "maxSlices": 1}]


def test_a_shared_reservation_is_named_by_its_owner_project() -> None:
    shared = ladder(reservation_rung(project=OWNER)).rungs[0].reservation
    assert shared is not None and shared.project == OWNER
    assert shared.affinity_value == f"projects/{OWNER}/reservations/tpu-res"
    own = ladder(reservation_rung()).rungs[0].reservation
    assert own is not None and own.project is None and own.affinity_value == "tpu-res"


def test_the_shared_form_cites_gkes_page_not_the_legacy_cloud_tpu_api() -> None:
    # Issue 39 item 6: the node pool's form is GKE's (a node pool, not a Cloud TPU API queued resource).
    from tpu_fallback.model.ladder import Reservation

    doc = Reservation.affinity_value.__doc__ or ""
    assert "kubernetes-engine/docs/how-to/consuming-reservations#specific_shared" in doc
    assert "tpu/docs/consume-reservation" not in doc
    assert "projects/{reservation.project}/reservations/{reservation.name}" in doc  # xpk's GKE node pools


@pytest.mark.parametrize("project", ["My-Project", "123456789012", "tpu", "owner-project-", "1owner", "a" * 31, 42,
                                     "projects/owner", ""])
def test_a_bad_project_id_names_the_setting_the_value_and_what_is_allowed(project: Any) -> None:
    refused(reservation_rung(project=project), "ladder[0].reservation.project", repr(project)[1:-1]
            if isinstance(project, str) and project else str(project), "6 to 30 lowercase letters")


def test_one_rung_per_reservation_and_the_same_name_in_two_projects_is_two_reservations() -> None:
    two: list[dict[str, Any]] = [
        {"name": "a", "kind": "reservation", "reservation": {"name": "tpu-res", "size": 1}},
        {"name": "b", "kind": "reservation", "reservation": {"name": "tpu-res", "size": 1, "project": OWNER}}]
    assert [r.reservation.affinity_value for r in ladder(two).rungs if r.reservation] == [
        "tpu-res", f"projects/{OWNER}/reservations/tpu-res"]
    same = copy.deepcopy(two)
    same[0]["reservation"]["project"] = OWNER
    refused(same, "ladder[0].reservation.name", "another rung consumes the same reservation")
    refused(reservation_rung(zone="us-east5-b"), "ladder[0].reservation", "zone")  # still no unknown keys


def ladder_run(project: Any) -> ProgramRun:
    rungs = copy.deepcopy(yaml.safe_load((REPO_ROOT / "Pulumi.ladder.yaml").read_text())["config"][
        "tpu-fallback:ladder"])
    rungs[0]["reservation"]["project"] = project
    return run_program(REPO_ROOT, "ladder", {"ladder": rungs}, raise_errors=False)


def test_the_reservation_pool_consumes_the_shared_reservation_and_keeps_its_urn() -> None:
    from tests.conftest import infra

    own, shared = infra("ladder"), ladder_run(OWNER)
    assert shared.error is None, shared.error
    pools = {r.inputs["name"]: r for r in shared.of_type(NODE_POOL)}
    assert pools["reserved-pool"].inputs["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
        "values": [f"projects/{OWNER}/reservations/tpu-v6e-reservation"]}
    # The same resources (an input changed, not a name): the other pools' inputs are untouched.
    assert sorted(r.urn for r in shared.resources) == sorted(r.urn for r in own.resources)
    before = {r.inputs["name"]: r.inputs for r in own.of_type(NODE_POOL)}
    assert {n: r.inputs for n, r in pools.items() if n != "reserved-pool"} == {
        n: i for n, i in before.items() if n != "reserved-pool"}


def test_a_bad_project_id_is_refused_by_the_program_before_any_resource() -> None:
    refused_by_the_program(ladder_run("Owner_Project"), ["ladder[0].reservation.project", "Owner_Project",
                                                         "6 to 30 lowercase letters"])
