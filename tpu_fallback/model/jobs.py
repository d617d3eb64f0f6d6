"""The jobs project's model: its config, the infra stack's facts, and the jobs planned against both. Pure Python.

AI developers name a job and how many copies to submit; the TPU shape, host count, queue and system
pool come from the infrastructure stack's outputs, so nothing is hand-matched. Every check runs
before the jobs program registers anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.outputs import JOBS_READS, TPU_FIELDS
from tpu_fallback.model.quantity import Resources, parse_quantity
from tpu_fallback.model.validation import (
    ConfigError,
    boolean,
    did_you_mean,
    fail,
    integer,
    non_empty_string,
    object_,
    plain,
    resources,
    string,
)

JOBS_PROJECT = "tpu-fallback-jobs"
JOBS_CONFIG_KEYS = ("infraStack", "jobs")
MAX_COPIES = 100  # copies of one job: each is a RayJob in the stack; more belongs in a job queue, not in config
# Set by the program from the infra stack's outputs (training_env): a job's env must not override them.
DERIVED_ENV_PREFIX = "TPU_FALLBACK_"
# A container image reference (the distribution/reference grammar, simplified): [host[:port]/]path[:tag][@digest].
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::\d+)?/)?"  # registry host
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"  # repository path
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"  # tag, digest
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,40}[a-z0-9])?$")
_STACK = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,2}$")
# RayJob names end up in Kueue workload and KubeRay object names; keep them short enough for a label value.
MAX_JOB_NAME = 42
_NAME_RULE = f"lowercase letters, digits and hyphens, at most {MAX_JOB_NAME} characters"


@dataclass(frozen=True)
class Elastic:
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class JobSpec:
    name: str = "rayjob-tpu-v6e-dws"
    count: int = 2
    queue: str | None = None  # a local queue name (namespace/name or name); default: the infra stack's first
    image: str = "rayproject/ray:2.53.0-py311"
    entrypoint: str = "python /app/train.py"
    pip: tuple[str, ...] = ("jax[tpu]==0.8.2", "pandas==2.3.3")
    worker_request: Resources = Resources("8", "16Gi")
    head_request: Resources = Resources("2", "4Gi")
    workers: int | None = None  # TPU hosts in total; default one slice
    elastic: Elastic | None = None
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # Opts into a capacity ladder's spot rung (its workers tolerate the spot taint): for jobs that checkpoint, since
    # a preempted spot job is requeued and starts again from its last checkpoint.
    preemptible: bool = False


@dataclass(frozen=True)
class InfraFacts:
    """What the jobs stack reads from the infrastructure stack's outputs."""

    stack: str
    local_queues: tuple[tuple[str, str], ...]
    tpu: Mapping[str, Any]
    system_pool: str
    flavors: Mapping[str, Any]
    multikueue: bool = False
    system_quota: Resources | None = None  # absent from stacks deployed before 2026-12

    @classmethod
    def from_outputs(cls, stack: str, outputs: Mapping[str, Any]) -> InfraFacts:
        missing = [name for name in JOBS_READS if outputs.get(name) in (None, "", [], {})]
        if missing:
            raise ConfigError(
                f"infra stack {stack!r} has no output {missing[0]!r} (needed: {', '.join(JOBS_READS)}); "
                "run `pulumi up` on that stack with a current version of tpu-fallback, or fix infraStack"
            )
        tpu = outputs["tpu"]
        for key in TPU_FIELDS:
            if key not in tpu:
                raise ConfigError(f"infra stack {stack!r} output 'tpu' has no {key!r}")
        return cls(
            stack=stack,
            local_queues=tuple((q["namespace"], q["name"]) for q in outputs["localQueues"]),
            tpu=tpu,
            system_pool=str(outputs["systemPool"]),
            flavors=outputs["flavors"],
            multikueue=bool(outputs.get("multikueue", False)),
            system_quota=Resources(**outputs["systemQuota"]) if outputs.get("systemQuota") else None,
        )

    @property
    def hosts_per_slice(self) -> int:
        return int(self.tpu["hostsPerSlice"])

    @property
    def chips_per_host(self) -> int:
        return int(self.tpu["chipsPerHost"])


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


_JOB_KEYS = ("name", "count", "queue", "image", "entrypoint", "pip", "workerRequest", "headRequest", "workers",
             "elastic", "env", "preemptible")


def check_jobs_config_keys(keys: list[str]) -> None:
    """The jobs project's own keys (without namespace): a misspelled `jobs` would submit the default jobs."""
    for key in sorted(keys):
        if key not in JOBS_CONFIG_KEYS:
            raise ConfigError(f"{JOBS_PROJECT}:{key} is not a known setting{did_you_mean(key, JOBS_CONFIG_KEYS)}; "
                              f"known: {', '.join(JOBS_CONFIG_KEYS)}")


def parse_infra_stack(value: Any) -> str:
    if not isinstance(value, str) or not _STACK.match(value):
        raise fail("infraStack", value, "expected the infrastructure stack's name, e.g. organization/tpu-fallback/dev")
    return value


def parse_jobs(value: Any) -> tuple[JobSpec, ...]:
    """Validate the `jobs` config: a list of job entries (fields left out keep the tutorial's values)."""
    if value is None:
        return (JobSpec(),)
    if not isinstance(value, list) or not value:
        raise fail("jobs", value, "expected a non-empty list of jobs")
    jobs: list[JobSpec] = []
    d = JobSpec()
    for i, raw in enumerate(value):
        key = f"jobs[{i}]"
        if not isinstance(raw, Mapping):
            raise fail(key, raw, "expected an object")
        raw = object_(key, raw, _JOB_KEYS)
        name = string(f"{key}.name", raw.get("name", d.name), _NAME, _NAME_RULE)
        if len(name) > MAX_JOB_NAME:
            raise fail(f"{key}.name", name, _NAME_RULE)
        pip = raw.get("pip", list(d.pip))
        if not isinstance(pip, list) or not all(isinstance(p, str) and p for p in pip):
            raise fail(f"{key}.pip", pip, "expected a list of pip requirement strings")
        elastic_raw = raw.get("elastic")
        elastic = None
        if elastic_raw is True:
            elastic = Elastic(1, 2)  # the tutorial's minReplicas/maxReplicas
        elif isinstance(elastic_raw, Mapping):
            elastic = Elastic(integer(f"{key}.elastic.minReplicas", elastic_raw.get("minReplicas", 1), 1),
                              integer(f"{key}.elastic.maxReplicas", elastic_raw.get("maxReplicas", 2), 1))
            if elastic.max_replicas < elastic.min_replicas:
                raise fail(f"{key}.elastic.maxReplicas", elastic.max_replicas, "must be >= minReplicas")
        elif elastic_raw not in (None, False):
            raise fail(f"{key}.elastic", elastic_raw, "expected true, false or {minReplicas, maxReplicas}")
        env = raw.get("env", {})
        if not isinstance(env, Mapping):
            raise fail(f"{key}.env", env, "expected a map of variable name to string value")
        for variable, text in env.items():
            if not isinstance(variable, str) or not _ENV_NAME.match(variable):
                raise fail(f"{key}.env", variable, "expected an environment variable name such as MY_FLAG")
            if isinstance(text, bool):  # YAML's true where the text "true" was meant
                raise fail(f"{key}.env.{variable}", text, "an environment variable's value is text: quote it in the "
                           f'stack file ("{str(text).lower()}")')
            string(f"{key}.env.{variable}", text, None, "an environment variable's value is text")
            if variable.startswith(DERIVED_ENV_PREFIX):
                raise fail(f"{key}.env.{variable}", env[variable], f"{DERIVED_ENV_PREFIX}* variables are set from the "
                           "infra stack's TPU outputs (workers, chips, topology); change the infra stack instead")
        queue = raw.get("queue")
        if queue is not None:
            queue = non_empty_string(f"{key}.queue", queue,
                                     "expected a local queue name such as user-queue or default/user-queue")
        job = JobSpec(
            name=name,
            count=_count(f"{key}.count", raw.get("count", d.count)),
            queue=queue,
            image=string(f"{key}.image", raw.get("image", d.image), _IMAGE,
                         "expected a container image reference such as rayproject/ray:2.53.0-py311 or "
                         "us-docker.pkg.dev/my-project/ray/ray:2.53.0@sha256:<digest>"),
            entrypoint=non_empty_string(f"{key}.entrypoint", raw.get("entrypoint", d.entrypoint)),
            pip=tuple(pip),
            worker_request=resources(f"{key}.workerRequest", raw.get("workerRequest"), d.worker_request, positive=True),
            head_request=resources(f"{key}.headRequest", raw.get("headRequest"), d.head_request, positive=True),
            workers=integer(f"{key}.workers", raw["workers"], 1) if raw.get("workers") is not None else None,
            elastic=elastic,
            env=tuple(sorted(env.items())),
            preemptible=boolean(f"{key}.preemptible", raw.get("preemptible", False)),
        )
        if any(j.name == job.name for j in jobs):
            raise fail(f"{key}.name", job.name, "job names must be unique")
        jobs.append(job)
    return tuple(jobs)


def _count(key: str, value: Any) -> int:
    count = integer(key, value, 1)
    if count > MAX_COPIES:
        raise fail(key, count, f"at most {MAX_COPIES} copies per job (each copy is one RayJob in this stack); how "
                   "many run at once is set by the infra stack's quotas, the rest wait in Kueue's queue")
    return count


# --------------------------------------------------------------------------------------------
# Planning against the infrastructure stack
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedJob:
    spec: JobSpec
    namespace: str
    queue: str
    replicas: int  # slices
    names: tuple[str, ...]  # one per copy: <name>-1 .. <name>-<count>


def resolve_queue(job: JobSpec, key: str, infra: InfraFacts) -> tuple[str, str]:
    queues = infra.local_queues
    allowed = ", ".join(f"{ns}/{name}" for ns, name in queues)
    if job.queue is None:
        return queues[0]
    if "/" in job.queue:
        ns, _, name = job.queue.partition("/")
        if (ns, name) in queues:
            return ns, name
    else:
        found = [q for q in queues if q[1] == job.queue]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise fail(f"{key}.queue", job.queue, f"ambiguous; write it as namespace/name: {allowed}")
    raise fail(f"{key}.queue", job.queue, f"not a local queue of infra stack {infra.stack!r}; valid: {allowed}")


def plan_jobs(jobs: tuple[JobSpec, ...], infra: InfraFacts) -> tuple[PlannedJob, ...]:
    """Check every job against the infrastructure before anything is registered."""
    machine = _machine(infra)
    planned = []
    for i, job in enumerate(jobs):
        key = f"jobs[{i}]"
        namespace, queue = resolve_queue(job, key, infra)
        hosts = infra.hosts_per_slice
        workers = job.workers if job.workers is not None else hosts
        if workers % hosts:
            raise fail(f"{key}.workers", workers,
                       f"must be a whole number of {infra.tpu['topology']} slices: a multiple of {hosts} hosts")
        if machine is not None and not capacity.fits_host(job.worker_request, machine):
            raise fail(f"{key}.workerRequest", f"cpu={job.worker_request.cpu}, memory={job.worker_request.memory}",
                       f"exceeds one {machine.name} host: {capacity.describe_host(machine)}")
        if infra.system_quota is not None:
            need_cpu, need_memory = capacity.system_pods_per_job(job.head_request, elastic=job.elastic is not None)
            pods = "submitter and autoscaler" if job.elastic is not None else "submitter"
            quota = infra.system_quota
            if need_cpu > parse_quantity(quota.cpu) or need_memory > parse_quantity(quota.memory):
                raise fail(f"{key}.headRequest", f"cpu={job.head_request.cpu}, memory={job.head_request.memory}",
                           f"would never be admitted: with KubeRay's {pods} a job takes cpu "
                           f"{plain(need_cpu)}, memory {plain(need_memory / 2**20)}Mi of infra stack "
                           f"{infra.stack!r}'s system quota (cpu={quota.cpu}, memory={quota.memory})")
        if job.elastic is not None and infra.multikueue:
            raise fail(f"{key}.elastic", True, f"infra stack {infra.stack!r} dispatches through MultiKueue, "
                       "which does not support elastic jobs; remove elastic")
        if job.elastic is not None and hosts > 1:
            # Seen on the real Kueue 0.19.2: a scale-up must stay on its first flavor, and a multi-host slice's
            # flavor holds exactly one slice, so on plan A it is never admitted; on plan B (DWS) it ends the running
            # slice and asks for a new, bigger ProvisioningRequest.
            raise fail(f"{key}.elastic", True, f"a {infra.tpu['topology']} slice spans {hosts} hosts, each slice its "
                       "own node pool and Kueue flavor, so a scale-up can never be admitted on plan A and would end "
                       "the running slice on plan B; elastic jobs need a single-host slice (e.g. v6e 2x2); remove "
                       "elastic")
        if job.elastic is not None and not infra.flavors.get("onDemand"):
            raise fail(f"{key}.elastic", True, f"infra stack {infra.stack!r} has no plan A (on-demand) flavor: "
                       "elastic jobs run on plan A only (DWS cannot grow a running slice); remove elastic")
        replicas = workers // hosts
        if job.elastic is not None and not job.elastic.min_replicas <= replicas <= job.elastic.max_replicas:
            raise fail(f"{key}.elastic", f"{job.elastic.min_replicas}..{job.elastic.max_replicas}",
                       f"must include the starting size of {replicas} slice(s)")
        names = tuple(f"{job.name}-{n}" for n in range(1, job.count + 1))
        planned.append(PlannedJob(job, namespace, queue, replicas, names))
    seen: set[tuple[str, str]] = set()
    for p in planned:
        for name in p.names:
            if (p.namespace, name) in seen:
                raise fail("jobs", name, f"two jobs would create {p.namespace}/{name}; rename one")
            seen.add((p.namespace, name))
    return tuple(planned)


def _machine(infra: InfraFacts) -> catalog.MachineType | None:
    """The infra stack's TPU host: the catalog's, with the size the infra stack was given where the catalog has none
    (its `tpu` output's hostVcpus/hostMemoryGib: TPU7x)."""
    fam = catalog.FAMILIES.get(str(infra.tpu["type"]))
    machine = fam.machine_type(str(infra.tpu["machineType"])) if fam else None
    if machine is not None and not machine.size_known and infra.tpu.get("hostVcpus") and infra.tpu.get("hostMemoryGib"):
        machine = replace(machine, vcpus=int(infra.tpu["hostVcpus"]), memory_gib=int(infra.tpu["hostMemoryGib"]))
    return machine


