"""The jobs program: config -> StackReference(infra) -> validated jobs -> JobSubmission -> outputs."""

from __future__ import annotations

import json
from typing import Any

import pulumi

from tpu_fallback.components.jobs import JobSubmission, JobSubmissionArgs
from tpu_fallback.model import jobs as model
from tpu_fallback.model.jobs import InfraFacts, PlannedJob
from tpu_fallback.model.outputs import JOBS_READS, JOBS_READS_OPTIONAL
from tpu_fallback.model.validation import check_config_namespaces
from tpu_fallback.programs.config import all_config, reported_cleanly
from tpu_fallback.render.rayjob import follow_commands

# Read for the provider's cluster_identifier only.
CLUSTER_IDENTITY_OUTPUTS = ("clusterLocation", "clusterName")
OUTPUT_NAMES = ("namespace", "queue", "jobs", "commands", "admissionOrder")
# The engine creates a job's copies concurrently and Kueue breaks a creation-time tie by UID (seen on the real
# engine: copy 2 got on-demand in 4 of 25 runs), so no copy is promised plan A.
ADMISSION_ORDER = ("Copies are submitted together and Kueue admits them in creation order, ties broken by UID: "
                   "any one copy may take plan A (on-demand); see each job's `workload` command for its flavor.")


def main() -> None:
    """Run the jobs program (jobs/__main__.py) and export its outputs."""
    for name, value in submit_jobs().items():
        pulumi.export(name, value)


def submit_jobs() -> dict[str, pulumi.Output[Any]]:
    values = all_config()
    with reported_cleanly():  # config errors before any registration
        check_config_namespaces(values, {model.JOBS_PROJECT: None})
        model.check_jobs_config_keys([k.partition(":")[2] for k in values if k.startswith(f"{model.JOBS_PROJECT}:")])
        config = pulumi.Config(model.JOBS_PROJECT)
        infra_stack = model.parse_infra_stack(config.get("infraStack"))
        raw_jobs = config.get("jobs")
        jobs = model.parse_jobs(json.loads(raw_jobs) if raw_jobs else None)

    infra = pulumi.StackReference(infra_stack)
    kubeconfig = infra.get_output("kubeconfig")  # stays a secret: only the provider sees it
    # Read the plain outputs one by one: the whole outputs map is a secret (it holds the kubeconfig), and
    # anything derived from it would make this stack's outputs secret too. Only the kubeconfig's presence
    # is taken out of the secret.
    names = [n for n in (*JOBS_READS, *JOBS_READS_OPTIONAL) if n != "kubeconfig"]
    present = pulumi.Output.unsecret(kubeconfig.apply(lambda value: bool(value)))
    identity: pulumi.Output[list[Any]] = pulumi.Output.all(
        *(infra.get_output(n) for n in CLUSTER_IDENTITY_OUTPUTS))

    def build(values: list[Any]) -> dict[str, Any]:
        # Runs once the infra stack's outputs are known; nothing else is registered before these checks.
        outputs = dict(zip(names, values[2:], strict=True))
        outputs["kubeconfig"] = "[present]" if values[0] else None
        with reported_cleanly():
            facts = InfraFacts.from_outputs(infra_stack, outputs)
            planned = model.plan_jobs(jobs, facts)
        for warning in (w for p in planned for w in p.warnings):
            pulumi.log.warn(warning)  # a job Kueue admits to fewer rungs than its config suggests
        JobSubmission("jobs", JobSubmissionArgs(facts, planned, kubeconfig,
                                                cluster_identifier(infra_stack, values[1])))
        return stack_outputs(planned)

    built = pulumi.Output.all(present, identity, *(infra.get_output(n) for n in names)).apply(build)
    return {name: _pick(built, name) for name in OUTPUT_NAMES}


def cluster_identifier(infra_stack: str, identity: list[Any]) -> str:
    """What names the infra stack's cluster for the jobs stack's provider: its location and name (the infra
    stack's name for a stack without those outputs). Not the endpoint or the CA, which GKE may change under a
    running cluster: with a cluster_identifier the provider is replaced only when the identifier changes, so a
    new endpoint updates the provider in place instead of replacing (deleting and re-submitting) every RayJob
    (pulumi-kubernetes Provider.clusterIdentifier; provider/pkg/provider/provider.go DiffConfig)."""
    location, name = identity
    return f"{location}/{name}" if location and name else infra_stack


def _pick(values: pulumi.Output[dict[str, Any]], key: str) -> pulumi.Output[Any]:
    return values.apply(lambda v: v[key])


def stack_outputs(jobs: tuple[PlannedJob, ...]) -> dict[str, Any]:
    """The jobs stack's outputs: namespace, job names, queue, and how to follow each job."""
    namespaces = list(dict.fromkeys(p.namespace for p in jobs))
    queues = list(dict.fromkeys(f"{p.namespace}/{p.queue}" for p in jobs))
    return {
        "namespace": namespaces[0] if len(namespaces) == 1 else namespaces,
        "queue": queues[0] if len(queues) == 1 else queues,
        "jobs": [n for p in jobs for n in p.names],
        "commands": {n: follow_commands(p.namespace, n) for p in jobs for n in p.names},
        "admissionOrder": ADMISSION_ORDER,
    }
