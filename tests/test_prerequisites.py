"""tools/prerequisites.py: what the preview workflow checks before previewing a stack (issue 39 item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import prerequisites
from tools.prerequisites import Prerequisite, check
from tpu_fallback.offline.mockrun import REPO_ROOT
from tpu_fallback.offline.stacks import infra_settings


def found(stack: str) -> list[Prerequisite]:
    return prerequisites.prerequisites(infra_settings(REPO_ROOT, stack))


@pytest.mark.parametrize("stack", ["dev", "prod", "global"])
def test_stacks_that_create_everything_need_nothing(stack: str) -> None:
    assert found(stack) == []


def test_the_existing_stack_reads_its_cluster_and_cannot_preview_without_it() -> None:
    (cluster,) = found("existing")
    assert (cluster.kind, cluster.name, cluster.where, cluster.project, cluster.blocking) == \
        ("cluster", "platform-gke", "us-east5-b", "my-gcp-project", True)
    assert cluster.command() == ["gcloud", "container", "clusters", "describe", "platform-gke", "--location",
                                 "us-east5-b", "--project", "my-gcp-project", "--format", "value(name)"]
    can_preview, lines = check("existing", [cluster], run=lambda command: False)
    assert not can_preview and lines[0].startswith("::notice::existing: not previewed")
    assert check("existing", [cluster], run=lambda command: True) == \
        (True, ["existing: cluster platform-gke in us-east5-b (project my-gcp-project, from existingCluster) exists"])


def test_the_hardened_network_and_the_ladder_reservation_only_warn() -> None:
    network, subnetwork = found("hardened")
    assert (network.kind, network.name, network.blocking) == ("network", "tpu-vpc", False)
    assert (subnetwork.kind, subnetwork.name, subnetwork.where) == ("subnetwork", "tpu-us-east5", "us-east5")
    assert subnetwork.command()[:7] == ["gcloud", "compute", "networks", "subnets", "describe", "tpu-us-east5",
                                        "--region"]
    (reservation,) = found("ladder")
    assert (reservation.kind, reservation.name, reservation.where, reservation.key) == \
        ("reservation", "tpu-v6e-reservation", "us-east5-b", "ladder[0].reservation")
    can_preview, lines = check("ladder", [reservation], run=lambda command: False)
    assert can_preview and lines[0].startswith("::warning::ladder: the reservation tpu-v6e-reservation")


def test_the_command_line_writes_the_decision_for_the_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prerequisites, "_gcloud", lambda command: False)
    output = tmp_path / "github_output"
    assert prerequisites.main(["existing", "--check", "--github-output", str(output)]) == 0
    assert output.read_text() == "preview=false\n"
    assert prerequisites.main(["dev", "--check", "--github-output", str(output)]) == 0
    assert output.read_text() == "preview=false\npreview=true\n"
    assert "dev: nothing outside the stack" in capsys.readouterr().out
    assert prerequisites.main(["no-such-stack"]) == 2


def test_every_example_infra_stack_is_readable() -> None:
    for path in REPO_ROOT.glob("Pulumi.*.yaml"):
        assert isinstance(found(path.name[len("Pulumi."):-len(".yaml")]), list)
