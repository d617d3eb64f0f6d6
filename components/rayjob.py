"""Job submission logic: the jobs config, the infra stack's facts, and the RayJobs built from both. Pure Python.

AI developers name a job and how many copies to submit; the TPU shape, host count, queue and system
pool come from the infrastructure stack's outputs, so nothing is hand-matched.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml

from components import catalog
from components.manifests import TPU_RESOURCE, load_manifest
from components.quantity import parse_quantity

JOBS_PROJECT = "tpu-fallback-jobs"
SCRIPT_CONFIGMAP = "jax-train-script"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
REQUIRED_INFRA_OUTPUTS = ("kubeconfig", "localQueues", "tpu", "systemPool", "flavors")
_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,40}[a-z0-9])?$")
_STACK = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+){0,2}$")
# RayJob names end up in Kueue workload and KubeRay object names; keep them short enough for a label value.
MAX_JOB_NAME = 42


class JobConfigError(ValueError):
    """Invalid jobs config, or a job the infrastructure stack cannot run. Names the setting and the value."""


@dataclass(frozen=True)
class Requests:
    cpu: str
    memory: str


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
    worker_request: Requests = Requests("8", "16Gi")
    head_request: Requests = Requests("2", "4Gi")
    workers: int | None = None  # TPU hosts in total; default one slice
    elastic: Elastic | None = None
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class InfraFacts:
    """What the jobs stack reads from the infrastructure stack's outputs."""

    stack: str
    local_queues: tuple[tuple[str, str], ...]
    tpu: Mapping[str, Any]
    system_pool: str
    flavors: Mapping[str, Any]
    multikueue: bool = False

    @classmethod
    def from_outputs(cls, stack: str, outputs: Mapping[str, Any]) -> InfraFacts:
        missing = [name for name in REQUIRED_INFRA_OUTPUTS if outputs.get(name) in (None, "", [], {})]
        if missing:
            raise JobConfigError(
                f"infra stack {stack!r} has no output {missing[0]!r} (needed: {', '.join(REQUIRED_INFRA_OUTPUTS)}); "
                "run `pulumi up` on that stack with a current version of tpu-fallback, or fix infraStack"
            )
        tpu = outputs["tpu"]
        for key in ("type", "machineType", "topology", "acceleratorLabel", "chipsPerHost", "hostsPerSlice"):
            if key not in tpu:
                raise JobConfigError(f"infra stack {stack!r} output 'tpu' has no {key!r}")
        return cls(
            stack=stack,
            local_queues=tuple((q["namespace"], q["name"]) for q in outputs["localQueues"]),
            tpu=tpu,
            system_pool=str(outputs["systemPool"]),
            flavors=outputs["flavors"],
            multikueue=bool(outputs.get("multikueue", False)),
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


def _fail(key: str, value: Any, allowed: str) -> JobConfigError:
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return JobConfigError(f"{key} {shown} is invalid: {allowed}")


def _int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, value, f"expected an integer >= {minimum}")
    return value


def _requests(key: str, value: Any, default: Requests) -> Requests:
    if value is None:
        return default
    if not isinstance(value, Mapping) or set(value) - {"cpu", "memory"}:
        raise _fail(key, value, "expected {cpu, memory}")
    out = Requests(str(value.get("cpu", default.cpu)), str(value.get("memory", default.memory)))
    for sub, quantity in (("cpu", out.cpu), ("memory", out.memory)):
        try:
            if parse_quantity(quantity) <= 0:
                raise ValueError("must be positive")
        except ValueError as err:
            raise _fail(f"{key}.{sub}", quantity, str(err)) from None
    return out


_JOB_KEYS = ("name", "count", "queue", "image", "entrypoint", "pip", "workerRequest", "headRequest", "workers",
             "elastic", "env")


def parse_infra_stack(value: Any) -> str:
    if not isinstance(value, str) or not _STACK.match(value):
        raise _fail("infraStack", value, "expected the infrastructure stack's name, e.g. organization/tpu-fallback/dev")
    return value


def parse_jobs(value: Any) -> tuple[JobSpec, ...]:
    """Validate the `jobs` config: a list of job entries (fields left out keep the tutorial's values)."""
    if value is None:
        return (JobSpec(),)
    if not isinstance(value, list) or not value:
        raise _fail("jobs", value, "expected a non-empty list of jobs")
    jobs: list[JobSpec] = []
    d = JobSpec()
    for i, raw in enumerate(value):
        key = f"jobs[{i}]"
        if not isinstance(raw, Mapping):
            raise _fail(key, raw, "expected an object")
        unknown = sorted(set(raw) - set(_JOB_KEYS))
        if unknown:
            raise JobConfigError(f"{key}.{unknown[0]} is not a known setting; a job accepts: {', '.join(_JOB_KEYS)}")
        name = raw.get("name", d.name)
        if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_JOB_NAME:
            raise _fail(f"{key}.name", name,
                        f"lowercase letters, digits and hyphens, at most {MAX_JOB_NAME} characters")
        pip = raw.get("pip", list(d.pip))
        if not isinstance(pip, list) or not all(isinstance(p, str) and p for p in pip):
            raise _fail(f"{key}.pip", pip, "expected a list of pip requirement strings")
        elastic_raw = raw.get("elastic")
        elastic = None
        if elastic_raw is True:
            elastic = Elastic(1, 2)  # the tutorial's minReplicas/maxReplicas
        elif isinstance(elastic_raw, Mapping):
            elastic = Elastic(_int(f"{key}.elastic.minReplicas", elastic_raw.get("minReplicas", 1), 1),
                              _int(f"{key}.elastic.maxReplicas", elastic_raw.get("maxReplicas", 2), 1))
            if elastic.max_replicas < elastic.min_replicas:
                raise _fail(f"{key}.elastic.maxReplicas", elastic.max_replicas, "must be >= minReplicas")
        elif elastic_raw not in (None, False):
            raise _fail(f"{key}.elastic", elastic_raw, "expected true, false or {minReplicas, maxReplicas}")
        env = raw.get("env", {})
        if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise _fail(f"{key}.env", env, "expected a map of variable name to string value")
        queue = raw.get("queue")
        if queue is not None and (not isinstance(queue, str) or not queue):
            raise _fail(f"{key}.queue", queue, "expected a local queue name such as user-queue or default/user-queue")
        for text_key in ("image", "entrypoint"):
            text = raw.get(text_key, getattr(d, text_key))
            if not isinstance(text, str) or not text.strip():
                raise _fail(f"{key}.{text_key}", text, "expected a non-empty string")
        job = JobSpec(
            name=name,
            count=_int(f"{key}.count", raw.get("count", d.count), 1),
            queue=queue,
            image=raw.get("image", d.image),
            entrypoint=raw.get("entrypoint", d.entrypoint),
            pip=tuple(pip),
            worker_request=_requests(f"{key}.workerRequest", raw.get("workerRequest"), d.worker_request),
            head_request=_requests(f"{key}.headRequest", raw.get("headRequest"), d.head_request),
            workers=_int(f"{key}.workers", raw["workers"], 1) if raw.get("workers") is not None else None,
            elastic=elastic,
            env=tuple(sorted(env.items())),
        )
        if any(j.name == job.name for j in jobs):
            raise _fail(f"{key}.name", job.name, "job names must be unique")
        jobs.append(job)
    return tuple(jobs)


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
            raise _fail(f"{key}.queue", job.queue, f"ambiguous; write it as namespace/name: {allowed}")
    raise _fail(f"{key}.queue", job.queue, f"not a local queue of infra stack {infra.stack!r}; valid: {allowed}")


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
            raise _fail(f"{key}.workers", workers,
                        f"must be a whole number of {infra.tpu['topology']} slices: a multiple of {hosts} hosts")
        if machine is not None:
            cpu, memory = parse_quantity(job.worker_request.cpu), parse_quantity(job.worker_request.memory)
            if cpu > machine.vcpus or memory > Decimal(machine.memory_gib) * 2**30:
                raise _fail(f"{key}.workerRequest", f"cpu={job.worker_request.cpu}, memory={job.worker_request.memory}",
                            f"exceeds one {machine.name} host ({machine.vcpus} vCPU, {machine.memory_gib} GiB)")
        if job.elastic is not None and infra.multikueue:
            raise _fail(f"{key}.elastic", True, f"infra stack {infra.stack!r} dispatches through MultiKueue, "
                        "which does not support elastic jobs; remove elastic")
        replicas = workers // hosts
        if job.elastic is not None and not job.elastic.min_replicas <= replicas <= job.elastic.max_replicas:
            raise _fail(f"{key}.elastic", f"{job.elastic.min_replicas}..{job.elastic.max_replicas}",
                        f"must include the starting size of {replicas} slice(s)")
        names = tuple(f"{job.name}-{n}" for n in range(1, job.count + 1))
        planned.append(PlannedJob(job, namespace, queue, replicas, names))
    seen: set[tuple[str, str]] = set()
    for p in planned:
        for name in p.names:
            if (p.namespace, name) in seen:
                raise _fail("jobs", name, f"two jobs would create {p.namespace}/{name}; rename one")
            seen.add((p.namespace, name))
    return tuple(planned)


def _machine(infra: InfraFacts) -> catalog.MachineType | None:
    fam = catalog.FAMILIES.get(str(infra.tpu["type"]))
    return fam.machine_type(str(infra.tpu["machineType"])) if fam else None


def training_env(planned: PlannedJob, infra: InfraFacts) -> dict[str, str]:
    """The environment manifests/train.py reads its ScalingConfig from."""
    fam = catalog.FAMILIES.get(str(infra.tpu["type"]))
    return {
        "TPU_FALLBACK_NUM_WORKERS": str(planned.replicas * infra.hosts_per_slice),
        "TPU_FALLBACK_CHIPS_PER_WORKER": str(infra.chips_per_host),
        "TPU_FALLBACK_TOPOLOGY": str(infra.tpu["topology"]),
        "TPU_FALLBACK_ACCELERATOR_TYPE": fam.ray_accelerator_type if fam else f"TPU-{str(infra.tpu['type']).upper()}",
        **dict(planned.spec.env),
    }


def rayjob(planned: PlannedJob, copy_name: str, infra: InfraFacts) -> dict[str, Any]:
    """One RayJob (ray.io/v1) from the tutorial's template."""
    job = planned.spec
    obj: dict[str, Any] = copy.deepcopy(load_manifest("rayjob-template.yaml"))
    obj["metadata"] = {"name": copy_name, "namespace": planned.namespace, "labels": {QUEUE_LABEL: planned.queue}}
    spec = obj["spec"]
    spec["entrypoint"] = job.entrypoint
    spec["runtimeEnvYAML"] = yaml.safe_dump({"pip": list(job.pip)}, sort_keys=False, default_flow_style=False)
    env = [{"name": k, "value": v} for k, v in training_env(planned, infra).items()]

    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["nodeSelector"] = {NODEPOOL_LABEL: infra.system_pool}
    head_container = head["containers"][0]
    head_container["image"] = job.image
    head_container["resources"] = _resources(job.head_request)
    head_container["env"] = env  # the entrypoint (the Ray driver) runs on the head

    group = spec["rayClusterSpec"]["workerGroupSpecs"][0]
    group["replicas"] = planned.replicas
    group["numOfHosts"] = infra.hosts_per_slice
    worker = group["template"]["spec"]
    worker["nodeSelector"] = {ACCELERATOR_LABEL: str(infra.tpu["acceleratorLabel"]),
                              TOPOLOGY_LABEL: str(infra.tpu["topology"])}
    worker_container = worker["containers"][0]
    worker_container["image"] = job.image
    worker_container["resources"] = _resources(job.worker_request, tpu=infra.chips_per_host)
    worker_container["env"] = env

    if job.elastic is not None:
        # Kueue rejects enableInTreeAutoscaling on a queued RayJob unless it is marked elastic.
        obj["metadata"]["annotations"] = {ELASTIC_ANNOTATION: "true"}
        spec["rayClusterSpec"]["enableInTreeAutoscaling"] = True
        group["minReplicas"] = job.elastic.min_replicas
        group["maxReplicas"] = job.elastic.max_replicas
    return obj


def _resources(requests: Requests, tpu: int | None = None) -> dict[str, Any]:
    amounts: dict[str, str] = {"cpu": requests.cpu}
    if tpu is not None:
        amounts[TPU_RESOURCE] = str(tpu)
    amounts["memory"] = requests.memory
    return {"limits": dict(amounts), "requests": dict(amounts)}


def follow_commands(namespace: str, name: str) -> dict[str, str]:
    """kubectl commands to follow one job: its Kueue workload (and flavor), its logs, its dashboard."""
    return {
        "workload": (
            f"kubectl -n {namespace} get workloads.kueue.x-k8s.io -o custom-columns="
            "NAME:.metadata.name,ADMITTED:.status.conditions[?(@.type==\\\"Admitted\\\")].status,"
            "FLAVORS:.status.admission.podSetAssignments[*].flavors "
            f"| grep -E '^(NAME|rayjob-{name}-)'"
        ),
        "logs": f"kubectl -n {namespace} logs -f job/{name}",
        "dashboard": f"kubectl -n {namespace} port-forward service/{name}-head-svc 8265:8265",
    }
