"""The jobs program: the stack's config -> the public TrainingJobs component (tpu_fallback.api) -> stack outputs."""

from __future__ import annotations

import json
from typing import cast

import pulumi

from tpu_fallback.api import TrainingJobs, TrainingJobsArgs
from tpu_fallback.api.convert import args_of
from tpu_fallback.model import jobs as model
from tpu_fallback.model.validation import check_config_namespaces
from tpu_fallback.programs.config import all_config, reported_cleanly

OUTPUT_NAMES = ("namespace", "queue", "jobs", "commands", "admissionOrder")


def main() -> None:
    """Run the jobs program (jobs/__main__.py) and export its outputs."""
    values = all_config()
    with reported_cleanly():  # config errors before any registration, with the stack's own messages
        check_config_namespaces(values, {model.JOBS_PROJECT: None})
        model.check_jobs_config_keys([k.partition(":")[2] for k in values if k.startswith(f"{model.JOBS_PROJECT}:")])
        config = pulumi.Config(model.JOBS_PROJECT)
        infra_stack = model.parse_infra_stack(config.get("infraStack"))
        raw_jobs = config.get("jobs")
        raw = {"infraStack": infra_stack, "jobs": json.loads(raw_jobs) if raw_jobs else None}
        model.parse_jobs(raw["jobs"])
    args = args_of({k: v for k, v in raw.items() if v is not None}, TrainingJobsArgs)
    submitted = TrainingJobs("jobs", cast(TrainingJobsArgs, args))
    for name, value in submitted.stack_outputs().items():
        pulumi.export(name, value)
