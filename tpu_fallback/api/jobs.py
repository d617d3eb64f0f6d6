"""The public jobs component: `TrainingJobs`, RayJobs submitted to the queues of an infrastructure stack, checked
against that stack's outputs (its TPU shape, queues and flavors) before any is submitted.

No `from __future__ import annotations` here: Pulumi's component analyzer reads these classes' annotations.
"""

from typing import Any

import pulumi

from tpu_fallback.api.args import TrainingJobsArgs
from tpu_fallback.api.convert import config_of
from tpu_fallback.api.platform import PACKAGE, PlatformConfigError
from tpu_fallback.components.jobs import JobSubmission, JobSubmissionArgs
from tpu_fallback.model import jobs as model
from tpu_fallback.model.jobs import InfraFacts, PlannedJob
from tpu_fallback.model.outputs import JOBS_READS, JOBS_READS_OPTIONAL
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.render.rayjob import follow_commands

# Read for the provider's cluster_identifier only.
CLUSTER_IDENTITY_OUTPUTS = ("clusterLocation", "clusterName")
# The engine creates a job's copies concurrently and Kueue breaks a creation-time tie by UID (seen on the real
# engine: copy 2 got on-demand in 4 of 25 runs), so no copy is promised plan A.
ADMISSION_ORDER = ("Copies are submitted together and Kueue admits them in creation order, ties broken by UID: "
                   "any one copy may take plan A (on-demand); see each job's `workload` command for its flavor.")


class TrainingJobs(pulumi.ComponentResource):
    """RayJobs (JAX with Ray Train) on the TPU slices of an infrastructure stack, each sent to its queue, where
    Kueue admits it to plan A first and falls back to plan B (or down the capacity ladder)."""

    namespace: pulumi.Output[Any]
    """The jobs' namespace (a list when they use several)."""
    queue: pulumi.Output[Any]
    """namespace/name of the local queue they are submitted to (a list when several)."""
    jobs: pulumi.Output[list[str]]
    """Every copy's name."""
    commands: pulumi.Output[dict[str, Any]]
    """Per copy: the commands that follow it (its workload, its pods, its logs)."""
    admission_order: pulumi.Output[str]
    """Which copy may take plan A."""

    def __init__(self, name: str, args: TrainingJobsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{PACKAGE}:index:TrainingJobs", name, None, opts)
        try:
            raw = config_of(args, TrainingJobsArgs)
            infra_stack = model.parse_infra_stack(raw.get("infraStack"))
            jobs = model.parse_jobs(raw.get("jobs"))
        except ConfigError as err:
            raise PlatformConfigError(str(err)) from None
        # The stack's former root-level resources: aliased, so a jobs stack made before keeps them.
        child = pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)])
        infra = pulumi.StackReference(infra_stack, opts=child)
        kubeconfig = infra.get_output("kubeconfig")  # stays a secret: only the provider sees it
        # Read the plain outputs one by one: the whole outputs map is a secret (it holds the kubeconfig), and
        # anything derived from it would make these outputs secret too. Only the kubeconfig's presence is taken out.
        names = [n for n in (*JOBS_READS, *JOBS_READS_OPTIONAL) if n != "kubeconfig"]
        present = pulumi.Output.unsecret(kubeconfig.apply(lambda value: bool(value)))
        identity: pulumi.Output[list[Any]] = pulumi.Output.all(*(infra.get_output(n) for n in CLUSTER_IDENTITY_OUTPUTS))

        def build(values: list[Any]) -> dict[str, Any]:
            # Runs once the infra stack's outputs are known; nothing else is registered before these checks.
            outputs = dict(zip(names, values[2:], strict=True))
            outputs["kubeconfig"] = "[present]" if values[0] else None
            try:
                facts = InfraFacts.from_outputs(infra_stack, outputs)
                planned = model.plan_jobs(jobs, facts)
            except ConfigError as err:
                raise PlatformConfigError(str(err)) from None
            for warning in (w for p in planned for w in p.warnings):
                pulumi.log.warn(warning)  # a job Kueue admits to fewer rungs than its config suggests
            JobSubmission("jobs", JobSubmissionArgs(facts, planned, kubeconfig,
                                                    cluster_identifier(infra_stack, values[1])), opts=child)
            return stack_outputs(planned)

        built = pulumi.Output.all(present, identity, *(infra.get_output(n) for n in names)).apply(build)
        self.namespace = built.apply(lambda v: v["namespace"])
        self.queue = built.apply(lambda v: v["queue"])
        self.jobs = built.apply(lambda v: v["jobs"])
        self.commands = built.apply(lambda v: v["commands"])
        self.admission_order = built.apply(lambda v: v["admissionOrder"])
        self._stack_outputs = {"namespace": self.namespace, "queue": self.queue, "jobs": self.jobs,
                               "commands": self.commands, "admissionOrder": self.admission_order}
        # Nothing here: registering outputs derived from `build` would wrap its configuration error in the SDK's
        # "While processing input" error; the program's exports (and a component host's state) carry them.
        self.register_outputs({})

    _stack_outputs: dict[str, pulumi.Output[Any]]

    def stack_outputs(self) -> dict[str, pulumi.Output[Any]]:
        """Stack output name -> value: what the jobs project exports."""
        return dict(self._stack_outputs)


def cluster_identifier(infra_stack: str, identity: list[Any]) -> str:
    """What names the infra stack's cluster for the jobs' provider: its location and name (the infra stack's name
    for a stack without those outputs). Not the endpoint or the CA, which GKE may change under a running cluster:
    with a cluster_identifier the provider is replaced only when the identifier changes, so a new endpoint updates
    the provider in place instead of replacing (deleting and re-submitting) every RayJob (pulumi-kubernetes
    Provider.clusterIdentifier; provider/pkg/provider/provider.go DiffConfig)."""
    location, name = identity
    return f"{location}/{name}" if location and name else infra_stack


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

