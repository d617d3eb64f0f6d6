"""Nothing moves in state: every example stack keeps the URNs it had before the package move, or aliases them.

tests/fixtures/urns-before-layout.json was recorded from the flat `components/` layout (commit "URN fixture of
every example stack, recorded before the package move"). Every URN in it must still be registered, or be the
alias of a resource that is; otherwise an existing stack would delete and recreate that resource. New
resources (added since) are allowed: `pulumi preview` shows them as creates.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, RecordedResource, infra_references, run_program

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "urns-before-layout.json"
# The renames this layout made on purpose: IAM members are named after the whole role (two roles ending in the
# same word, e.g. ".../reader", collided before), each with an alias to its old name.
RENAMED_TYPES = {"gcp:projects/iAMMember:IAMMember"}
GLOBAL_MULTIKUEUE = {"enabled": True, "manager": {"location": "europe-west4", "autopilot": True}}


@cache
def _runs() -> dict[str, ProgramRun]:
    jobs = REPO_ROOT / "jobs"
    return {
        **{f"infra/{stack}": infra(stack) for stack in ("dev", "prod")},
        # As the stack file was when the fixture was recorded: the europe worker had a plan B, which GKE does not
        # offer there (the example now leaves it out); allowUnlistedZone renders it anyway.
        "infra/global": infra("global", {"allowUnlistedZone": True, "multikueue": {**GLOBAL_MULTIKUEUE, "workers": [
            {"name": "europe", "location": "europe-west4-a", "flexStart": {"maxSlices": 2}},
            {"name": "us", "location": "us-east5-b"}, {"name": "asia", "location": "asia-northeast1-b"}]}}),
        "jobs/dev": run_program(jobs, "dev", stack_references=infra_references(jobs, "dev")),
    }


def alias_urn(resource: RecordedResource, alias: dict[str, Any]) -> str:
    """The URN an alias stands for (this program only declares aliases that change the name)."""
    if "urn" in alias:
        return str(alias["urn"])
    assert not alias["parentUrn"] and not alias["noParent"], alias
    return f"{resource.urn.rsplit('::', 1)[0]}::{alias['name']}"


def declared_aliases(resource: RecordedResource) -> list[dict[str, Any]]:
    """The program's own aliases; pulumi-kubernetes adds type aliases to older API versions of each kind."""
    return [a for a in resource.options.get("aliases", []) if "urn" in a or not a["type"]]


@pytest.mark.parametrize("label", ["infra/dev", "infra/prod", "infra/global", "jobs/dev"])
def test_every_urn_is_kept_or_aliased(label: str) -> None:
    before = set(json.loads(FIXTURE.read_text())[label])
    run = _runs()[label]
    now = {r.urn: r for r in run.resources}
    assert len(now) == len(run.resources), "two resources share a URN"
    gone = before - set(now)
    new = [r for urn, r in now.items() if urn not in before]
    aliased = {alias_urn(r, a): r.urn for r in new for a in declared_aliases(r)}
    assert not gone - set(aliased), f"URNs that would be deleted: {sorted(gone - set(aliased))}"
    assert set(aliased) <= gone, "an alias points at a URN the program still registers"
    assert {now[urn].type for urn in aliased.values()} <= RENAMED_TYPES


def test_the_iam_rename_is_aliased_one_to_one() -> None:
    dev = _runs()["infra/dev"]
    members = [m for m in dev.of_type("gcp:projects/iAMMember:IAMMember") if m.options["aliases"]]
    assert sorted(m.name for m in members) == [
        "tpu-cluster-nodes-artifactregistry-reader", "tpu-cluster-nodes-container-defaultNodeServiceAccount"]
    assert sorted(a["name"] for m in members for a in m.options["aliases"]) == [
        "tpu-cluster-nodes-defaultNodeServiceAccount", "tpu-cluster-nodes-reader"]


LADDER_FIXTURE = REPO_ROOT / "tests" / "fixtures" / "urns-ladder.json"


def test_the_ladder_stack_keeps_its_urns() -> None:
    """tests/fixtures/urns-ladder.json was recorded from the first version of the capacity ladder (the example
    Pulumi.ladder.yaml at commit 9f0361c): a ladder stack is an existing stack too. Its rungs' pools and flavors are
    named after the rungs (`<cluster>-rung-<rung>-<pool>`, `<cluster>-queues-flavor-<flavor>`), so renaming a rung is
    a replacement, but nothing else may move them."""
    before = set(json.loads(LADDER_FIXTURE.read_text())["infra/ladder"])
    now = {r.urn for r in infra("ladder").resources}
    assert not before - now, f"URNs that would be deleted: {sorted(before - now)}"
    assert any(urn.endswith("::tpu-ladder-rung-spot-spot-pool-2") for urn in before)  # the fixture is the ladder's
