"""RayJobs as plain dicts, from the tutorial's template and the jobs planned against the infra stack. Pure Python."""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from tpu_fallback.model import catalog
from tpu_fallback.model.jobs import InfraFacts, PlannedJob
from tpu_fallback.model.labels import (
    ACCELERATOR_LABEL,
    ELASTIC_ANNOTATION,
    NODEPOOL_LABEL,
    QUEUE_LABEL,
    QUEUED_LABEL,
    SPOT_LABEL,
    TOPOLOGY_LABEL,
    TPU_RESOURCE,
)
from tpu_fallback.model.quantity import Resources
from tpu_fallback.render.files import load_template, training_script

SCRIPT_CONFIGMAP = "jax-train-script"  # the template mounts it at /app


def script_config_map(namespace: str) -> dict[str, Any]:
    """The ConfigMap the RayJobs mount at /app: the training script. The jobs stack creates it beside its RayJobs;
    in multi-region mode the infra stack also creates it on every worker, since MultiKueue copies only the
    RayJob to the worker that runs it."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SCRIPT_CONFIGMAP, "namespace": namespace},
            "data": {"train.py": training_script()}}


def training_env(planned: PlannedJob, infra: InfraFacts) -> dict[str, str]:
    """The environment the training script (tpu_fallback/training/train.py) reads its ScalingConfig from."""
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
    obj: dict[str, Any] = load_template("rayjob-template.yaml")
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
    spec["submitterPodTemplate"] = _submitter(job.image, infra.system_pool)

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

    if job.preemptible:
        # Tolerating the spot taint that a capacity ladder's spot flavor declares (render/kueue.py SPOT_TAINT) is what
        # lets Kueue give this job that flavor; a job without it skips the spot rung.
        worker["tolerations"].append({"key": SPOT_LABEL, "operator": "Equal", "value": "true",
                                      "effect": "NoSchedule"})
    if job.elastic is not None:
        # Plan A only: without a toleration of the queued-provisioning taint, which the DWS flavors declare, Kueue
        # never gives an elastic job plan B (a DWS slice cannot grow: a scale-up would replace its request).
        worker["tolerations"] = [t for t in worker["tolerations"] if t["key"] != QUEUED_LABEL]
        # Kueue rejects enableInTreeAutoscaling on a queued RayJob unless it is marked elastic.
        obj["metadata"]["annotations"] = {ELASTIC_ANNOTATION: "true"}
        spec["rayClusterSpec"]["enableInTreeAutoscaling"] = True
        group["minReplicas"] = job.elastic.min_replicas
        group["maxReplicas"] = job.elastic.max_replicas
    return obj


# KubeRay's default submitter container (ray-operator v1.6.2 controllers/ray/common/job.go,
# GetDefaultSubmitterContainer): same name and resources; KubeRay fills in the `ray job submit` command.
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}


def _submitter(image: str, system_pool: str) -> dict[str, Any]:
    """The submitter Job's pod, pinned to the system pool like the head. Left to KubeRay's default (no
    nodeSelector), Kueue gives its PodSet any flavor with cpu left, a TPU plan's included, once the system
    quota is nearly full: the pod then waits for nodes it never gets (seen on the simulated GKE)."""
    container = {"name": SUBMITTER_CONTAINER, "image": image,
                 "resources": {k: dict(v) for k, v in SUBMITTER_RESOURCES.items()}}
    return {"spec": {"nodeSelector": {NODEPOOL_LABEL: system_pool}, "restartPolicy": "Never",
                     "containers": [container]}}


def _resources(requests: Resources, tpu: int | None = None) -> dict[str, Any]:
    amounts: dict[str, str] = {"cpu": str(requests.cpu)}
    if tpu is not None:
        amounts[TPU_RESOURCE] = str(tpu)
    amounts["memory"] = str(requests.memory)
    return {"limits": dict(amounts), "requests": dict(amounts)}


# The status command (tpu_fallback/status/, console script `tpu-fallback`, kubectl plugin `kubectl tpu-fallback`):
# every job's commands lead with it. The Pulumi CLI prints an object's keys sorted (`pulumi stack output commands`
# is Go's encoding/json of a map), so its key sorts before the others to come first there too.
STATUS_KEY = "check"
# One shell word each: the printer specs hold `[*]`, `(`, `?` and `"`, which bash (a syntax error) and zsh (no
# matches found) would otherwise take for syntax and globs. Kept single-quoted, so kubectl receives them as written.
WORKLOAD_COLUMNS = ("NAME:.metadata.name,"
                    "ADMITTED:.status.conditions[?(@.type==\"Admitted\")].status,"
                    "FLAVORS:.status.admission.podSetAssignments[*].flavors")


def status_command(namespace: str, name: str) -> str:
    """The status command asked about one job (tpu_fallback/status/cli.py: a job's name, or its Workload's)."""
    return f"tpu-fallback status {shlex.quote(name)} --namespace {shlex.quote(namespace)}"


def follow_commands(namespace: str, name: str) -> dict[str, str]:
    """Commands to follow one job, the status command first: its Kueue workload (and flavor), its logs, its
    dashboard. Each runs as written in bash and zsh (tests/test_shell_commands.py)."""
    ns, job = shlex.quote(namespace), shlex.quote(name)
    return {
        STATUS_KEY: status_command(namespace, name),
        "workload": (
            f"kubectl -n {ns} get workloads.kueue.x-k8s.io -o {shlex.quote('custom-columns=' + WORKLOAD_COLUMNS)} "
            f"| grep -E {shlex.quote(f'^(NAME|rayjob-{name}-)')}"
        ),
        "logs": f"kubectl -n {ns} logs -f job/{job}",
        "dashboard": f"kubectl -n {ns} port-forward service/{shlex.quote(name + '-head-svc')} 8265:8265",
    }
