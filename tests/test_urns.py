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


def stands_for(resource: RecordedResource, by_urn: dict[str, RecordedResource]) -> set[str]:
    """The URNs a resource answers to besides its own: each alias it declares (a new name or type, another parent or
    none) and its own name and type under each URN its parent answers to, as the engine inherits a parent's aliases
    (pulumi/pulumi pkg/v3 resource/deploy/step_generator.go generateAliases). URNs as the mock runtime makes them
    (pulumi/runtime/mocks.py make_urn: the parent's own type only, `pulumi:pulumi:Stack` for the stack's children,
    where the engine writes no parent); tests/e2e/test_component_e2e.py checks the engine's own."""
    parent = by_urn.get(resource.parent)
    parents = {resource.parent, *(stands_for(parent, by_urn) if parent else ())}
    found = {_mock_urn(resource.urn, p, resource.type, resource.name) for p in parents}
    for alias in declared_aliases(resource):
        if "urn" in alias:
            found.add(str(alias["urn"]))
            continue
        name, typ = alias["name"] or resource.name, alias["type"] or resource.type
        if alias["noParent"]:
            found.add(_mock_urn(resource.urn, "", typ, name))
        else:
            found.update(_mock_urn(resource.urn, p, typ, name)
                         for p in ([alias["parentUrn"]] if alias["parentUrn"] else parents))
    return found - {resource.urn}


def _mock_urn(like: str, parent: str, typ: str, name: str) -> str:
    stack, project = like.split("::", 2)[:2]
    parent_type = parent.split("::")[2].split("$")[-1] if parent else "pulumi:pulumi:Stack"
    return f"{stack}::{project}::{parent_type}${typ}::{name}"


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
    aliased = {old: r for r in new for old in stands_for(r, now)}
    # A StackReference is a read: moving it reads the other stack again under its new URN and deletes nothing.
    gone = {urn for urn in gone if "$pulumi:pulumi:StackReference::" not in urn}
    assert not gone - set(aliased), f"URNs that would be deleted: {sorted(gone - set(aliased))}"
    assert not set(aliased) & set(now), "an alias points at a URN the program still registers"
    # Renamed on purpose: the IAM members (their name); moved on purpose: everything under the public components
    # (tpu_fallback/api), which the stack's __main__.py registered at its root before.
    renamed = {r.type for old, r in aliased.items() if old in gone and old.rsplit("::", 1)[1] != r.name}
    assert renamed <= RENAMED_TYPES


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
    run = {r.urn: r for r in infra("ladder").resources}
    now = set(run) | {old for r in run.values() for old in stands_for(r, run)}
    assert not before - now, f"URNs that would be deleted: {sorted(before - now)}"
    assert any(urn.endswith("::tpu-ladder-rung-spot-spot-pool-2") for urn in before)  # the fixture is the ladder's
