"""The jobs project (jobs/) under the mock runtime, reading the infra stack's outputs through a StackReference."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra, schema_check
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

# What a jobs program registers before it refuses a job: the component and its StackReference, nothing else.
NOTHING_CREATED = ["tpu-fallback:index:TrainingJobs", "pulumi:pulumi:StackReference"]

JOBS = REPO_ROOT / "jobs"
INFRA_STACK = "organization/tpu-fallback/dev"
FIXTURES = Path(__file__).parent / "fixtures"
ENV_KEYS = ("TPU_FALLBACK_NUM_WORKERS", "TPU_FALLBACK_CHIPS_PER_WORKER", "TPU_FALLBACK_TOPOLOGY",
            "TPU_FALLBACK_ACCELERATOR_TYPE")


def infra_outputs(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    run = infra("dev", overrides)
    return {INFRA_STACK: {"outputs": copy.deepcopy(run.outputs), "secretOutputNames": sorted(run.secret_outputs)}}


def jobs_run(infra_overrides: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None,
             references: dict[str, Any] | None = None, raise_errors: bool = True) -> ProgramRun:
    return run_program(JOBS, "dev", overrides, stack_references=references or infra_outputs(infra_overrides),
                       raise_errors=raise_errors)


@pytest.fixture(scope="module")
def dev_jobs() -> ProgramRun:
    return jobs_run()


def rayjobs(run: ProgramRun) -> list[dict[str, Any]]:
    return [o for o in run.kubernetes_objects() if o["kind"] == "RayJob"]


def without_env(obj: Any) -> Any:
    """Drop the two additions to the tutorial: the containers' env (the script's ScalingConfig) and the submitter
    pod template (KubeRay's default one, pinned to the system pool; test_the_submitter_is_pinned...)."""
    obj = copy.deepcopy(obj)
    obj["spec"].pop("submitterPodTemplate", None)
    for template in [obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
                     *[g["template"] for g in obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]]]:
        for container in template["spec"]["containers"]:
            container.pop("env", None)
    obj["spec"]["runtimeEnvYAML"] = yaml.safe_load(obj["spec"]["runtimeEnvYAML"])
    obj["metadata"].pop("name")
    obj["metadata"].pop("namespace", None)
    return obj


def not_elastic(obj: Any) -> Any:
    """The tutorial's RayJob without its elasticity, which the dev stack leaves out on purpose: a v6e 4x4 slice
    spans 4 hosts, and a multi-host scale-up can never work here (jobs.py refuses it; docs/jobs.md, "Elastic jobs")."""
    obj = copy.deepcopy(obj)
    obj["metadata"].pop("annotations")
    cluster = obj["spec"]["rayClusterSpec"]
    cluster.pop("enableInTreeAutoscaling")
    for group in cluster["workerGroupSpecs"]:
        group.pop("minReplicas"), group.pop("maxReplicas")
    return obj


def test_dev_jobs_are_the_tutorials_rayjobs(dev_jobs: ProgramRun) -> None:
    tutorial = not_elastic(without_env(yaml.safe_load((FIXTURES / "rayjob-tpu-v6e-dws.yaml").read_text())))
    jobs = rayjobs(dev_jobs)
    assert [j["metadata"]["name"] for j in jobs] == ["rayjob-tpu-v6e-dws-1", "rayjob-tpu-v6e-dws-2"]
    for job in jobs:
        assert job["metadata"]["namespace"] == "default"
        assert without_env(job) == tutorial
        assert "suspend" not in job["spec"]


def test_the_submitter_is_kuberays_default_pinned_to_the_system_pool(dev_jobs: ProgramRun) -> None:
    for job in rayjobs(dev_jobs):
        template = job["spec"]["submitterPodTemplate"]["spec"]
        assert template["nodeSelector"] == {"cloud.google.com/gke-nodepool": "default-pool"}
        (container,) = template["containers"]
        # KubeRay v1.6.2 GetDefaultSubmitterContainer: the head's image, 500m/200Mi requested, 1/1Gi limits;
        # Kueue counts these requests against the system quota (capacity.RAY_JOB_OVERHEAD).
        assert container["name"] == "ray-job-submitter"
        assert container["image"] == job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"][
            "containers"][0]["image"]
        assert container["resources"]["requests"] == {"cpu": "500m", "memory": "200Mi"}
        assert "command" not in container  # KubeRay fills in `ray job submit`


def test_script_configmap_holds_train_py(dev_jobs: ProgramRun) -> None:
    configmap = next(o for o in dev_jobs.kubernetes_objects() if o["kind"] == "ConfigMap")
    assert configmap["metadata"] == {"name": "jax-train-script", "namespace": "default"}
    assert configmap["data"]["train.py"] == (REPO_ROOT / "tpu_fallback" / "training" / "train.py").read_text()
    configmap_resource = dev_jobs.one("kubernetes:core/v1:ConfigMap")
    for job in dev_jobs.of_type("kubernetes:ray.io/v1:RayJob"):
        assert dev_jobs.depends_on(job, configmap_resource)


def test_training_environment_comes_from_the_infra_outputs(dev_jobs: ProgramRun) -> None:
    job = rayjobs(dev_jobs)[0]
    head_env = {e["name"]: e["value"] for e in
                job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]}
    assert {k: head_env[k] for k in ENV_KEYS} == dict(zip(ENV_KEYS, ("4", "4", "4x4", "TPU-V6E"), strict=True))


def test_rayjobs_pass_the_crd_schemas(dev_jobs: ProgramRun) -> None:
    report = schema_check(dev_jobs.kubernetes_objects())
    assert report.ok, report.text()


def test_outputs(dev_jobs: ProgramRun) -> None:
    assert dev_jobs.outputs["namespace"] == "default"
    assert dev_jobs.outputs["queue"] == "default/user-queue"
    assert dev_jobs.outputs["jobs"] == ["rayjob-tpu-v6e-dws-1", "rayjob-tpu-v6e-dws-2"]
    commands = dev_jobs.outputs["commands"]["rayjob-tpu-v6e-dws-2"]
    assert commands["logs"] == "kubectl -n default logs -f job/rayjob-tpu-v6e-dws-2"
    assert commands["dashboard"] == "kubectl -n default port-forward service/rayjob-tpu-v6e-dws-2-head-svc 8265:8265"
    assert "workloads.kueue.x-k8s.io" in commands["workload"] and "rayjob-rayjob-tpu-v6e-dws-2-" in commands["workload"]
    # Which copy takes plan A is not promised (creation-time ties are broken by UID): the outputs say so.
    assert "any one copy may take plan A" in dev_jobs.outputs["admissionOrder"]


def test_own_provider_with_the_secret_kubeconfig(dev_jobs: ProgramRun) -> None:
    provider = dev_jobs.one("pulumi:providers:kubernetes")
    assert "kubeconfig" in provider.secret_inputs
    assert "gke-gcloud-auth-plugin" in provider.inputs["kubeconfig"]
    for job in dev_jobs.of_type("kubernetes:ray.io/v1:RayJob"):
        assert job.provider.startswith(provider.urn + "::")
    assert not dev_jobs.secret_outputs and "gke-gcloud-auth-plugin" not in str(dev_jobs.outputs)


@pytest.mark.parametrize(("tpu", "hosts", "chips", "accelerator", "ray_type"), [
    ({"type": "v6e", "topology": "4x8"}, 8, "4", "tpu-v6e-slice", "TPU-V6E"),
    ({"type": "v5e", "topology": "2x4"}, 2, "4", "tpu-v5-lite-podslice", "TPU-V5LITEPOD"),
    ({"type": "v5e", "topology": "2x4", "machineType": "ct5lp-hightpu-8t"}, 1, "8", "tpu-v5-lite-podslice",
     "TPU-V5LITEPOD"),
])
def test_jobs_follow_the_infra_tpu_without_a_jobs_config_change(tpu: dict[str, str], hosts: int, chips: str,
                                                                accelerator: str, ray_type: str) -> None:
    quotas = {"queues": {"quotas": {"onDemand": {"cpu": 200, "memory": "400Gi"}}}}
    run = jobs_run({"tpu": tpu, "location": "us-east5-a" if tpu["type"] == "v6e" else "us-west4-a", **quotas})
    job = rayjobs(run)[0]
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker = group["template"]["spec"]
    assert group["numOfHosts"] == hosts
    assert worker["containers"][0]["resources"]["requests"]["google.com/tpu"] == chips
    assert worker["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": accelerator,
                                      "cloud.google.com/gke-tpu-topology": tpu["topology"]}
    env = {e["name"]: e["value"] for e in worker["containers"][0]["env"]}
    assert [env[k] for k in ENV_KEYS] == [str(hosts), chips, tpu["topology"], ray_type]


def test_two_slices_per_job() -> None:
    """Two single-host slices in one pool of two nodes; two multi-host slices can never run (each slice is a node pool
    and a Kueue flavor of its own: tests/test_job_admission.py)."""
    run = jobs_run({"tpu": {"type": "v6e", "topology": "2x2"}, "onDemand": {"maxSlices": 2}},
                   {"jobs": [{"name": "big", "count": 1, "workers": 2}]})
    group = rayjobs(run)[0]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert (group["replicas"], group["numOfHosts"]) == (2, 1)
    assert "kueue.x-k8s.io/elastic-job" not in rayjobs(run)[0]["metadata"].get("annotations", {})
    assert "enableInTreeAutoscaling" not in rayjobs(run)[0]["spec"]["rayClusterSpec"]


@pytest.mark.parametrize(("jobs", "fragments"), [
    ([{"name": "j", "workerRequest": {"cpu": "200", "memory": "16Gi"}}],
     ["jobs[0].workerRequest", "cpu=200", "ct6e-standard-4t", "180 vCPU"]),
    ([{"name": "j", "workerRequest": {"cpu": "8", "memory": "800Gi"}}], ["jobs[0].workerRequest", "720 GiB"]),
    ([{"name": "j", "workers": 6}], ["jobs[0].workers", "6", "multiple of 4 hosts"]),
    ([{"name": "j", "queue": "other-queue"}], ["jobs[0].queue", '"other-queue"', "default/user-queue",
                                              INFRA_STACK]),
])
def test_jobs_the_infra_cannot_run_are_clear_errors(jobs: list[dict[str, Any]], fragments: list[str]) -> None:
    run = jobs_run(overrides={"jobs": jobs}, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    for fragment in fragments:
        assert fragment in str(run.error)
    assert [r.type for r in run.resources] == NOTHING_CREATED  # nothing created


@pytest.mark.parametrize(("jobs", "fragments"), [
    ([{"name": "j", "count": 0}], ["jobs[0].count", "0"]),
    ([{"name": "Bad_Name"}], ["jobs[0].name", '"Bad_Name"']),
    ([{"name": "j", "gpus": 1}], ["jobs[0].gpus", "not a known setting"]),
    ([{"name": "j"}, {"name": "j"}], ["jobs[1].name", "unique"]),
    ([{"name": "j", "elastic": {"minReplicas": 3, "maxReplicas": 2}}], ["jobs[0].elastic.maxReplicas"]),
])
def test_bad_jobs_config_fails_before_anything_is_registered(jobs: list[dict[str, Any]],
                                                              fragments: list[str]) -> None:
    run = jobs_run(overrides={"jobs": jobs}, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    for fragment in fragments:
        assert fragment in str(run.error)
    assert run.resources == []


@pytest.mark.parametrize("missing", ["kubeconfig", "localQueues", "tpu", "systemPool", "flavors"])
def test_missing_infra_output_names_the_output_and_the_stack(missing: str) -> None:
    refs = infra_outputs()
    del refs[INFRA_STACK]["outputs"][missing]
    run = jobs_run(references=refs, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    assert f"infra stack {INFRA_STACK!r} has no output {missing!r}" in str(run.error)
    assert [r.type for r in run.resources] == NOTHING_CREATED


def test_offline_plan_works_for_the_jobs_project(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    refs = tmp_path / "infra-outputs.json"
    refs.write_text(json.dumps(infra_outputs()))
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "dev", "--project", "jobs",
                             "--stack-outputs", str(refs), "--quiet", "--out", str(tmp_path / "out")],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all((tmp_path / "out" / "kubernetes.yaml").read_text()))
    assert [o["kind"] for o in objects] == ["ConfigMap", "RayJob", "RayJob"]


SINGLE_HOST = {"tpu": {"type": "v6e", "topology": "2x2"}, "onDemand": {"maxSlices": 2}}


def test_elastic_is_refused_for_multi_host_slices() -> None:
    run = jobs_run(overrides={"jobs": [{"name": "j", "elastic": True}]}, raise_errors=False)
    assert isinstance(run.error, ConfigError)
    assert "jobs[0].elastic" in str(run.error) and "4x4 slice spans 4 hosts" in str(run.error)
    assert [r.type for r in run.resources] == NOTHING_CREATED  # nothing created


def test_an_elastic_single_host_job_stays_on_plan_a() -> None:
    run = jobs_run(SINGLE_HOST, {"jobs": [{"name": "j", "count": 1, "elastic": {"minReplicas": 1,
                                                                                 "maxReplicas": 2}}]})
    (job,) = rayjobs(run)
    assert job["metadata"]["annotations"] == {"kueue.x-k8s.io/elastic-job": "true"}
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["maxReplicas"], group["numOfHosts"]) == (1, 2, 1)
    # It does not tolerate the queued-provisioning taint the dws flavors declare, so Kueue never gives it plan B.
    assert [t["key"] for t in group["template"]["spec"]["tolerations"]] == ["google.com/tpu"]
    dws = next(o for o in infra("dev", SINGLE_HOST).kubernetes_objects()
               if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == "dws")
    assert {t["key"] for t in dws["spec"]["nodeTaints"]} == {"cloud.google.com/gke-queued"}


def test_an_elastic_job_counts_the_autoscaler_against_the_system_quota() -> None:
    # 2 CPU head + 500m submitter fits a 2500m system quota; the elastic job's autoscaler sidecar (500m) does not.
    infra_overrides = {**SINGLE_HOST, "queues": {"quotas": {"system": {"cpu": "2500m", "memory": "8Gi"}}}}
    plain = jobs_run(infra_overrides, {"jobs": [{"name": "j", "count": 1}]})
    assert len(rayjobs(plain)) == 1
    run = jobs_run(infra_overrides, {"jobs": [{"name": "j", "count": 1, "elastic": True}]}, raise_errors=False)
    assert isinstance(run.error, ConfigError)
    assert "headRequest" in str(run.error) and "submitter and autoscaler" in str(run.error)


def test_an_elastic_job_needs_plan_a() -> None:
    run = jobs_run({**SINGLE_HOST, "onDemand": {"maxSlices": 0}}, {"jobs": [{"name": "j", "elastic": True}]},
                   raise_errors=False)
    assert isinstance(run.error, ConfigError) and "no plan A" in str(run.error)
