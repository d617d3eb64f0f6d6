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

    def build(outputs: dict[str, Any]) -> dict[str, Any]:
        # Runs once the infra stack's outputs are known; nothing else is registered before these checks.
        facts = InfraFacts.from_outputs(infra_stack, outputs)
        planned = rayjob.plan_jobs(jobs, facts)
        JobSubmission("jobs", JobSubmissionArgs(facts, planned, infra.get_output("kubeconfig")))
        return stack_outputs(planned)

    built = infra.outputs.apply(build)
    return {name: _pick(built, name) for name in OUTPUT_NAMES}


def _pick(values: pulumi.Output[dict[str, Any]], key: str) -> pulumi.Output[Any]:
    return values.apply(lambda v: v[key])
