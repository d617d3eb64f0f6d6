"""The jobs program: config -> StackReference(infra) -> validated jobs -> JobSubmission -> outputs."""

from __future__ import annotations

import json
from typing import Any

import pulumi

from components import rayjob
from components.jobs import JobSubmission, JobSubmissionArgs, stack_outputs
from components.rayjob import InfraFacts

OUTPUT_NAMES = ("namespace", "queue", "jobs", "commands")


def submit_jobs() -> dict[str, pulumi.Output[Any]]:
    config = pulumi.Config(rayjob.JOBS_PROJECT)
    infra_stack = rayjob.parse_infra_stack(config.get("infraStack"))
    raw_jobs = config.get("jobs")
    jobs = rayjob.parse_jobs(json.loads(raw_jobs) if raw_jobs else None)  # config errors before any registration

    infra = pulumi.StackReference(infra_stack)
    kubeconfig = infra.get_output("kubeconfig")  # stays a secret: only the provider sees it
    # Read the plain outputs one by one: the whole outputs map is a secret (it holds the kubeconfig), and
    # anything derived from it would make this stack's outputs secret too. Only the kubeconfig's presence
    # is taken out of the secret.
    names = [n for n in rayjob.REQUIRED_INFRA_OUTPUTS if n != "kubeconfig"] + ["multikueue"]
    present = pulumi.Output.unsecret(kubeconfig.apply(lambda value: bool(value)))
    facts_in: pulumi.Output[list[Any]] = pulumi.Output.all(present, *(infra.get_output(n) for n in names))

    def build(values: list[Any]) -> dict[str, Any]:
        # Runs once the infra stack's outputs are known; nothing else is registered before these checks.
        outputs = dict(zip(names, values[1:], strict=True))
        outputs["kubeconfig"] = "[present]" if values[0] else None
        facts = InfraFacts.from_outputs(infra_stack, outputs)
        planned = rayjob.plan_jobs(jobs, facts)
        JobSubmission("jobs", JobSubmissionArgs(facts, planned, kubeconfig))
        return stack_outputs(planned)

    built = facts_in.apply(build)
    return {name: _pick(built, name) for name in OUTPUT_NAMES}


def _pick(values: pulumi.Output[dict[str, Any]], key: str) -> pulumi.Output[Any]:
    return values.apply(lambda v: v[key])
