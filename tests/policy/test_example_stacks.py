"""Every example stack of the infra project passes every policy, checked on its offline plan
(tpu_fallback/offline/mockrun.py: the real __main__.py under Pulumi's mock runtime) with the plain functions."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tools.policycheck import main, policy_resources, stacks_of
from tpu_fallback.offline.mockrun import REPO_ROOT, run_program
from tpu_fallback.policy.checks import (
    CLUSTER,
    CLUSTER_QUEUE,
    NODE_POOL,
    STACK,
    Context,
    Resource,
    evaluate,
    is_on_demand_flavor,
    is_tpu_machine,
)

STACKS = stacks_of(REPO_ROOT)
JOBS = REPO_ROOT / "jobs"
JOB_STACKS = stacks_of(JOBS) if (JOBS / "Pulumi.yaml").exists() else []
QUEUE_TYPE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"


def test_the_example_stacks_are_found() -> None:
    assert {"dev", "prod"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_example_stack_has_no_violations(stack: str) -> None:
    resources = policy_resources(infra(stack))
    # Not vacuous: the resources the policies are about are there (an existing-cluster stack only reads its
    # cluster and manages no pools; its queues and Helm release are still checked).
    types = [r.type for r in resources]
    assert STACK in types and any(CLUSTER_QUEUE.match(t) for t in types)
    if stack != "existing":
        assert CLUSTER in types
        assert any(r.type == NODE_POOL and is_tpu_machine(r.props.get("nodeConfig", {}).get("machineType"))
                   for r in resources)
    assert evaluate(resources, Context(stack=stack)) == []


@pytest.mark.parametrize("stack", JOB_STACKS)
def test_job_stack_has_no_violations(stack: str) -> None:
    """The jobs project, its StackReference answered with the outputs of the infra stack it names."""
    config = yaml.safe_load((JOBS / f"Pulumi.{stack}.yaml").read_text())["config"]
    reference = config.get("tpu-fallback-jobs:infraStack")
    assert isinstance(reference, str), "a jobs stack names the infra stack it submits to"
    upstream = infra(reference.rsplit("/", 1)[-1])
    run = run_program(JOBS, stack, stack_references={
        reference: {"outputs": upstream.outputs, "secretOutputNames": sorted(upstream.secret_outputs)}})
    resources = policy_resources(run)
    assert any(r.type.startswith("kubernetes:") for r in resources)
    assert evaluate(resources, Context(stack=stack)) == []


def _with_on_demand_quota(resources: list[Resource], chips: int) -> list[Resource]:
    """The stack's ClusterQueue (or, while the program has none, a tutorial-shaped one) with `chips` on-demand."""
    queues = [r for r in resources if CLUSTER_QUEUE.match(r.type)]
    if not queues:
        spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": ["google.com/tpu"], "flavors": [
            {"name": "on-demand", "resources": [{"name": "google.com/tpu", "nominalQuota": chips}]}]}]}
        queue = Resource(QUEUE_TYPE, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                                      "metadata": {"name": "cluster-queue"}, "spec": spec}, urn="urn:cq")
        return [*resources, queue]
    out = []
    for r in resources:
        if r in queues:
            props = dict(r.props)
            groups = [
                {**group, "flavors": [
                    {**f, "resources": [
                        {**res, "nominalQuota": chips if f["name"] == "on-demand" else 0}
                        if res["name"] == "google.com/tpu" else res
                        for res in f["resources"]
                    ]} if is_on_demand_flavor(f["name"]) else f
                    for f in group["flavors"]
                ]}
                for group in props["spec"]["resourceGroups"]
            ]
            props["spec"] = {**props["spec"], "resourceGroups": groups}
            r = dataclasses.replace(r, props=props)
        out.append(r)
    return out


@pytest.mark.parametrize(("stack", "capacity"), [("dev", 16), ("prod", 32)])
def test_a_quota_above_the_example_pools_fails(stack: str, capacity: int) -> None:
    resources = policy_resources(infra(stack))
    assert evaluate(_with_on_demand_quota(resources, capacity), Context(stack=stack)) == []
    violations = evaluate(_with_on_demand_quota(resources, capacity + 4), Context(stack=stack))
    assert [v.policy for v in violations] == ["on-demand-quota-within-capacity"]
    assert f"exceeds the {capacity} chips" in violations[0].message


def test_an_unprotected_production_stack_fails() -> None:
    run = infra("prod", {"protect": False, "deletionProtection": False})
    violations = evaluate(policy_resources(run), Context(stack="prod"))
    assert [v.policy for v in violations] == ["production-cluster-protected"] * 2


def test_the_runner_reports_violations_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (project / "__main__.py").write_text((REPO_ROOT / "__main__.py").read_text())
    prod = (REPO_ROOT / "Pulumi.prod.yaml").read_text().replace('tpu-fallback:protect: "true"', "")
    (project / "Pulumi.prod-eu.yaml").write_text(prod)
    assert main(["prod-eu", "--project", str(project)]) == 1
    out = capsys.readouterr().out
    assert "[production-cluster-protected]" in out and "protect=True" in out
    assert main(["dev"]) == 0
    assert "no violations" in capsys.readouterr().out
    assert main(["nosuchstack"]) == 2
