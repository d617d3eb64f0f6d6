"""The jobs project's model: its config, the infra stack's facts, and the jobs planned against both. Pure Python.

AI developers name a job and how many copies to submit; the TPU shape, host count, queue and system
pool come from the infrastructure stack's outputs, so nothing is hand-matched. Every check runs
before the jobs program registers anything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.labels import QUEUED_LABEL, SPOT_LABEL, TPU_RESOURCE
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
    # The entry as the stack file wrote it, so that an error quotes the value as written (and says when a default
    # applies); not part of the job's identity.
    written: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


# The kinds of rung (as a stack file writes them, the infra stack's `tpuFlavors` output) whose flavors declare a node
# taint that a job's workers must tolerate for Kueue to give them the flavor (tpu_fallback/render/kueue.py
# resource_flavor; Kueue skips a flavor with an untolerated NoSchedule taint).
SPOT_KIND, QUEUED_KIND = "spot", "flexStart"


@dataclass(frozen=True)
class TpuFlavor:
    """One TPU flavor of the infra stack's ClusterQueue (its `tpuFlavors` output): what Kueue can admit there."""

    name: str
    rung: str
    kind: str  # as a stack file writes it: reservation, onDemand, spot, flexStart
    hosts: int  # the TPU hosts its node pool holds: a flavor selects exactly one pool
    quota: Mapping[str, Decimal]  # cpu (cores), memory (bytes), google.com/tpu (chips)
    worker: str = ""  # multi-region mode: the worker cluster whose flavor it is

    @property
    def where(self) -> str:
        return self.name + (f" (worker {self.worker})" if self.worker else "")

    def unlimited(self, resource: str) -> bool:
        return self.quota[resource] >= capacity.UNLIMITED_AMOUNT

    @classmethod
    def from_output(cls, stack: str, value: Any) -> TpuFlavor:
        try:
            quota = {r: parse_quantity(value["quota"][r]) for r in ("cpu", "memory", TPU_RESOURCE)}
            return cls(name=str(value["name"]), rung=str(value["rung"]), kind=str(value["kind"]),
                       hosts=int(value["hosts"]), quota=quota, worker=str(value.get("worker") or ""))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(f"infra stack {stack!r} output 'tpuFlavors' has an entry this version of tpu-fallback "
                              f"cannot read ({value!r}: {err}); update tpu-fallback in the jobs project") from None


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
    # Absent from stacks deployed before issue 38: the jobs are then checked against the TPU host only.
    tpu_flavors: tuple[TpuFlavor, ...] | None = None
    elastic_jobs: bool | None = None  # Kueue's ElasticJobsViaWorkloadSlices; None: not known

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
            tpu_flavors=(tuple(TpuFlavor.from_output(stack, f) for f in outputs["tpuFlavors"])
                         if isinstance(outputs.get("tpuFlavors"), list) and outputs["tpuFlavors"] else None),
            elastic_jobs=outputs["elasticJobs"] if isinstance(outputs.get("elasticJobs"), bool) else None,
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
            elastic_raw = object_(f"{key}.elastic", elastic_raw, ("minReplicas", "maxReplicas"))
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
            written=dict(raw),
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
    # The TPU flavors Kueue can admit it to, in the order it tries them (None: the infra stack does not say).
    flavors: tuple[TpuFlavor, ...] | None = None
    warnings: tuple[str, ...] = ()  # what the job cannot use that the user may expect it to (one line each)


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
    """Check every job against the infrastructure before anything is registered: a job Kueue could never admit, or
    whose pods could never run, is refused here with one line naming the setting, its value and what is allowed."""
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
        if job.elastic is not None and infra.elastic_jobs is False:
            # kueue v0.19.2 pkg/controller/jobs/raycluster/common.go ValidateCreate (run by the RayJob webhook):
            # enableInTreeAutoscaling without workload slicing, which needs the gate (pkg/workloadslicing Enabled).
            raise fail(f"{key}.elastic", _written(job, "elastic", True),
                       f"infra stack {infra.stack!r} runs Kueue with its ElasticJobsViaWorkloadSlices feature gate off "
                       "(kueue.featureGates), and Kueue's RayJob webhook then refuses the autoscaling an elastic job "
                       "turns on (\"a kueue managed job should only use autoscaling when workload slicing is "
                       "enabled\"); remove elastic, or turn the gate on in the infra stack")
        if job.elastic is not None and hosts > 1:
            # Seen on the real Kueue 0.19.2: a scale-up must stay on its first flavor, and a multi-host slice's
            # flavor holds exactly one slice, so on plan A it is never admitted; on plan B (DWS) it ends the running
            # slice and asks for a new, bigger ProvisioningRequest.
            raise fail(f"{key}.elastic", True, f"a {infra.tpu['topology']} slice spans {hosts} hosts, each slice its "
                       "own node pool and Kueue flavor, so a scale-up can never be admitted on plan A and would end "
                       "the running slice on plan B; elastic jobs need a single-host slice (e.g. v6e 2x2); remove "
                       "elastic")
        replicas = workers // hosts
        if job.elastic is not None and not job.elastic.min_replicas <= replicas <= job.elastic.max_replicas:
            raise fail(f"{key}.elastic", f"{job.elastic.min_replicas}..{job.elastic.max_replicas}",
                       f"must include the starting size of {replicas} slice(s)")
        flavors: tuple[TpuFlavor, ...] | None = None
        warnings: tuple[str, ...] = ()
        if infra.tpu_flavors is not None:
            flavors, warnings = _admission(job, key, infra, infra.tpu_flavors, workers)
        elif job.elastic is not None and not infra.flavors.get("onDemand"):  # an infra stack without tpuFlavors
            raise fail(f"{key}.elastic", True, f"infra stack {infra.stack!r} has no plan A (on-demand) flavor: "
                       "elastic jobs run on plan A only (DWS cannot grow a running slice); remove elastic")
        names = tuple(f"{job.name}-{n}" for n in range(1, job.count + 1))
        planned.append(PlannedJob(job, namespace, queue, replicas, names, flavors, warnings))
    seen: set[tuple[str, str]] = set()
    for p in planned:
        for name in p.names:
            if (p.namespace, name) in seen:
                raise fail("jobs", name, f"two jobs would create {p.namespace}/{name}; rename one")
            seen.add((p.namespace, name))
    return tuple(planned)


# --------------------------------------------------------------------------------------------
# Which TPU flavors Kueue can admit a job to
# --------------------------------------------------------------------------------------------
#
# Kueue (v0.19.2, pkg/scheduler/flavorassigner/flavorassigner.go) gives each pod set one flavor for all the resources
# of a resource group (findFlavorForPodSets: "finds the flavor which can satisfy all the PodSet requests for all
# resources in the same group"; cpu, memory and google.com/tpu are one group here, tpu_fallback.model.queues
# COVERED_RESOURCES), trying the ClusterQueue's flavors in order. A RayJob's TPU worker group is one pod set of
# replicas x numOfHosts pods (pkg/controller/jobs/raycluster/common.go BuildPodSets, effectiveWorkerCount), so the
# whole group's request must fit one flavor's quota: fitsResourceQuota refuses a request above the flavor's maximum
# capacity as "insufficient quota for %s in flavor %s, ... > maximum capacity (%s)" with reason ExceedsMaxQuota,
# which no waiting or preemption changes (this project's ClusterQueue has no cohort to borrow from, so the maximum is
# the nominal quota). It skips a flavor whose NoSchedule taints the pod set does not tolerate (the spot and the
# queued-provisioning flavors declare theirs: tpu_fallback/render/kueue.py resource_flavor). And each flavor selects
# one node pool by name (cloud.google.com/gke-nodepool), so the group's pods must all fit that pool: a multi-host
# slice is a node pool of its own, holding exactly one slice.

_RESOURCES = ("cpu", "memory", TPU_RESOURCE)
_MIB = Decimal(2**20)
_GIB = Decimal(2**30)


def untolerated(job: JobSpec, flavor: TpuFlavor) -> str | None:
    """Why the job's workers do not tolerate the flavor's node taint, in a few words (None: they do)."""
    if flavor.kind == SPOT_KIND and not job.preemptible:
        return "not preemptible"
    if flavor.kind == QUEUED_KIND and job.elastic is not None:
        return "elastic: DWS cannot grow a slice"
    return None


def worker_needs(job: JobSpec, workers: int, chips_per_host: int) -> dict[str, Decimal]:
    """What `workers` TPU workers of the job request together, as Kueue counts it against a flavor's quota."""
    return {"cpu": parse_quantity(job.worker_request.cpu) * workers,
            "memory": parse_quantity(job.worker_request.memory) * workers,
            TPU_RESOURCE: Decimal(chips_per_host * workers)}


def short_of(flavor: TpuFlavor, needs: Mapping[str, Decimal]) -> list[str]:
    """The resources whose need is above the flavor's quota."""
    return [r for r in _RESOURCES if needs[r] > flavor.quota[r]]


def flavor_fit(job: JobSpec, flavor: TpuFlavor, workers: int, chips_per_host: int) -> str | None:
    """Why Kueue can never admit `workers` workers of the job to `flavor`, in a few words; None when it can."""
    why = untolerated(job, flavor)
    if why is not None:
        return why
    if workers > flavor.hosts:
        return f"{workers} workers, its pool holds {flavor.hosts} hosts"
    needs = worker_needs(job, workers, chips_per_host)
    short = short_of(flavor, needs)
    if short:
        return ", ".join(f"{_name(r)} {_amount(r, needs[r])} > quota {_amount(r, flavor.quota[r])}" for r in short)
    return None


def admissible_flavors(job: JobSpec, flavors: tuple[TpuFlavor, ...], workers: int, chips_per_host: int
                       ) -> tuple[TpuFlavor, ...]:
    """The flavors Kueue can admit the job's workers to, in the order it tries them."""
    return tuple(f for f in flavors if flavor_fit(job, f, workers, chips_per_host) is None)


def _admission(job: JobSpec, key: str, infra: InfraFacts, flavors: tuple[TpuFlavor, ...], workers: int
               ) -> tuple[tuple[TpuFlavor, ...], tuple[str, ...]]:
    """The flavors Kueue can admit the job to, and warnings; a ConfigError where there is none."""
    stack = f"infra stack {infra.stack!r}"
    chips = infra.chips_per_host
    usable = [f for f in flavors if untolerated(job, f) is None]
    if not usable:
        _refuse_untolerated(job, key, stack, flavors)
    room = [f for f in usable if workers <= f.hosts]
    if not room:
        most = max(f.hosts for f in usable)
        hosts = infra.hosts_per_slice
        one_slice = (f", one {infra.tpu['topology']} slice ({hosts} hosts) each: a multi-host slice is a node pool of "
                     "its own" if hosts > 1 else "")
        largest = ", ".join(f.where for f in usable if f.hosts == most)
        raise fail(f"{key}.workers", _written(job, "workers", workers),
                   f"Kueue gives all of a job's TPU workers one flavor, and each flavor of {stack} selects one node "
                   f"pool{one_slice}; the largest{_usable_note(job, usable, flavors)} ({largest}) holds {most} hosts, "
                   f"so {workers} workers would never run: at most {most}")
    needs = worker_needs(job, workers, chips)
    fits = [f for f in room if not short_of(f, needs)]
    if not fits:
        _refuse_quota(job, key, stack, room, usable, flavors, workers, needs)
    if job.elastic is not None:
        _check_elastic_growth(job, key, stack, usable, flavors, chips)
    warnings = []
    if job.preemptible and not any(f.kind == SPOT_KIND for f in flavors):
        warnings.append(f"{key}.preemptible true: {stack} has no spot rung, so the job's toleration of spot nodes is "
                        "unused; it runs on the stack's other rungs as any job does")
    never = [f for f in usable if f not in fits]
    if never:
        reasons = "; ".join(f"{f.where} ({flavor_fit(job, f, workers, chips)})" for f in never)
        warnings.append(f"{key} ({job.name}): Kueue can never admit it to {reasons}; only to "
                        f"{', '.join(f.where for f in fits)}")
    return tuple(fits), tuple(warnings)


def _refuse_untolerated(job: JobSpec, key: str, stack: str, flavors: tuple[TpuFlavor, ...]) -> None:
    listing = ", ".join(f"{f.where} ({f.kind})" for f in flavors)
    if job.elastic is not None and any(f.kind == QUEUED_KIND for f in flavors) and any(
            f.kind != SPOT_KIND or job.preemptible for f in flavors):
        raise fail(f"{key}.elastic", _written(job, "elastic", True),
                   f"{stack} has no plan A (on-demand) or reservation flavor, only {listing}: an elastic job's "
                   f"workers do not tolerate the DWS flavors' {QUEUED_LABEL} taint (a DWS slice cannot grow), "
                   "so Kueue would never admit it; remove elastic")
    unset = "" if "preemptible" in job.written else f" ({key}.preemptible is not set: false is its default)"
    raise fail(f"{key}.preemptible", _written(job, "preemptible", False),
               f"every TPU flavor of {stack} is spot ({', '.join(f.where for f in flavors)}), and Kueue gives a spot "
               f"flavor only to a job whose workers tolerate its {SPOT_LABEL} taint, so it would never admit this "
               f"one{unset}: set preemptible: true (for a job that checkpoints: a preempted job starts again from its "
               "last checkpoint)")


def _usable_note(job: JobSpec, usable: list[TpuFlavor], flavors: tuple[TpuFlavor, ...]) -> str:
    """' that it can use' where the job skips some of the stack's flavors (their taints): the figures are the rest's."""
    return " that it can use" if len(usable) < len(flavors) else ""


def _refuse_quota(job: JobSpec, key: str, stack: str, room: list[TpuFlavor], usable: list[TpuFlavor],
                  flavors: tuple[TpuFlavor, ...], workers: int, needs: Mapping[str, Decimal]) -> None:
    """No flavor with room for the workers has the quota for them: name the request that is too big."""
    common = [r for r in _RESOURCES if all(r in short_of(f, needs) for f in room)]
    never = "so Kueue would never admit it"
    if common and common[0] != TPU_RESOURCE:
        resource = common[0]
        per = job.worker_request.cpu if resource == "cpu" else job.worker_request.memory
        quotas = "; ".join(f"{f.where}: {_amount(resource, f.quota[resource])} = "
                           f"{_amount(resource, _per_worker(resource, f.quota[resource], workers))} per worker"
                           for f in room)
        most = max(_per_worker(resource, f.quota[resource], workers) for f in room)
        also = ""
        if "memory" in common[1:]:  # say so now rather than at the next `pulumi up`
            memory = max(_per_worker("memory", f.quota["memory"], workers) for f in room)
            also = f"; {key}.workerRequest.memory is too, at most {_amount('memory', memory)} per worker"
        raise fail(f"{key}.workerRequest.{resource}", _written(job, "workerRequest", per, resource),
                   f"{workers} workers × {per} = {_amount(resource, needs[resource])} {_name(resource)}, above the "
                   f"{_name(resource)} quota of every TPU flavor of {stack}{_usable_note(job, usable, flavors)} "
                   f"({quotas}), {never}: at most {_amount(resource, most)} per worker"
                   + _default_note(job, key, "workerRequest", resource) + also)
    if common:  # TPU chips: the quota of a flavor is its pool's chips, so this is the pool's size in other words
        raise fail(f"{key}.workers", _written(job, "workers", workers),
                   f"{workers} workers request {needs[TPU_RESOURCE]} TPU chips, above the google.com/tpu quota of "
                   f"every TPU flavor of {stack}{_usable_note(job, usable, flavors)} ("
                   + "; ".join(f"{f.where}: {f.quota[TPU_RESOURCE]}" for f in room) + f"), {never}")
    reasons = "; ".join(f"{f.where}: {flavor_fit(job, f, workers, _chips(needs, workers))}" for f in room)
    raise fail(f"{key}.workerRequest", _written(job, "workerRequest", {"cpu": job.worker_request.cpu,
                                                                       "memory": job.worker_request.memory}),
               f"{workers} workers need more than the quota of every TPU flavor of {stack}"
               f"{_usable_note(job, usable, flavors)} ({reasons}), {never}")


def _chips(needs: Mapping[str, Decimal], workers: int) -> int:
    return int(needs[TPU_RESOURCE]) // workers


def _check_elastic_growth(job: JobSpec, key: str, stack: str, usable: list[TpuFlavor],
                          flavors: tuple[TpuFlavor, ...], chips: int) -> None:
    """An elastic job grows only on the flavor it started on: Kueue assigns a scale-up (a new workload slice) the
    original slice's flavor or none ("could not assign %s flavor since the original workload is assigned: %s",
    kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go findFlavorForPodSets). Its largest size must fit one
    flavor it can use, or the Ray autoscaler asks for workers Kueue never admits. Elastic jobs are single-host here
    (refused above otherwise), so a replica is one worker."""
    assert job.elastic is not None
    top = job.elastic.max_replicas

    def holds(size: int) -> bool:
        return any(flavor_fit(job, f, size, chips) is None for f in usable)

    if holds(top):
        return
    most = max((n for n in range(top, 0, -1) if holds(n)), default=0)
    reasons = "; ".join(f"{f.where}: {flavor_fit(job, f, top, chips)}" for f in usable)
    written = job.written.get("elastic")
    key_path, value = ((f"{key}.elastic.maxReplicas", top) if isinstance(written, Mapping) and "maxReplicas" in written
                       else (f"{key}.elastic", written if written is not None else True))
    note = "" if key_path.endswith("maxReplicas") else (
        f" (elastic: {'true' if value is True else 'an object without maxReplicas'} grows up to maxReplicas {top})")
    allowed = (f"maxReplicas at most {most}" if most > job.elastic.min_replicas else
               f"it could never grow past {most} worker{'s' if most != 1 else ''}: remove elastic, or ask less of "
               f"each worker (workerRequest)")
    raise fail(key_path, value,
               f"Kueue admits an elastic job's scale-up only on the flavor it started on, and no TPU flavor of "
               f"{stack}{_usable_note(job, usable, flavors)} holds {top} workers at once ({reasons}){note}: "
               f"{allowed}")


def _written(job: JobSpec, field_name: str, default: Any, sub: str | None = None) -> Any:
    """The value of a job's setting as its stack file wrote it (the default where it was left out)."""
    value = job.written.get(field_name, default if sub is None else {})
    if sub is not None:
        value = value.get(sub, default) if isinstance(value, Mapping) else default
    return value


def _default_note(job: JobSpec, key: str, field_name: str, sub: str) -> str:
    written = job.written.get(field_name)
    if isinstance(written, Mapping) and sub in written:
        return ""
    return f" ({key}.{field_name}.{sub} is not set: that is its default)"


def _name(resource: str) -> str:
    return {"cpu": "CPU", "memory": "memory", TPU_RESOURCE: "TPU chips"}[resource]


def _per_worker(resource: str, quota: Decimal, workers: int) -> Decimal:
    """The most one of `workers` workers may request of a quota, rounded down to what a request can say: a millicore
    of CPU, a MiB of memory."""
    unit = Decimal("0.001") if resource == "cpu" else _MIB if resource == "memory" else Decimal(1)
    return (quota / workers / unit).to_integral_value(rounding=ROUND_FLOOR) * unit


def _amount(resource: str, value: Decimal) -> str:
    """A quantity as a request or quota would write it: 10, 0.5, 75Gi, 19200Mi; 'unlimited' for the tutorial's 1e9."""
    if value >= capacity.UNLIMITED_AMOUNT * (_GIB if resource == "memory" else 1):
        return "unlimited"
    if resource != "memory":
        return plain(value)
    for unit, suffix in ((_GIB, "Gi"), (_MIB, "Mi"), (Decimal(1024), "Ki")):
        if value % unit == 0:
            return f"{plain(value / unit)}{suffix}"
    return plain(value)


def _machine(infra: InfraFacts) -> catalog.MachineType | None:
    """The infra stack's TPU host: the catalog's, with the size the infra stack was given where the catalog has none
    (its `tpu` output's hostVcpus/hostMemoryGib: TPU7x)."""
    fam = catalog.FAMILIES.get(str(infra.tpu["type"]))
    machine = fam.machine_type(str(infra.tpu["machineType"])) if fam else None
    if machine is not None and not machine.size_known and infra.tpu.get("hostVcpus") and infra.tpu.get("hostMemoryGib"):
        machine = replace(machine, vcpus=int(infra.tpu["hostVcpus"]), memory_gib=int(infra.tpu["hostMemoryGib"]))
    return machine


