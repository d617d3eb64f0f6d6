"""Multi-region mode: a MultiKueue manager in front of regional worker clusters (the `global` example stack)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.conftest import infra, schema_check
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, RecordedResource, run_program

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
WORKERS = {"europe": "europe-west4-a", "us": "us-east5-b", "asia": "asia-northeast1-b"}
PLAN_B_WORKERS = ("us", "asia")  # GKE offers no v6e flex-start in europe-west4-a: that worker has plan A only


@pytest.fixture(scope="module")
def glob() -> ProgramRun:
    return infra("global")


def objects_of(run: ProgramRun, kind: str) -> list[tuple[RecordedResource, dict[str, Any]]]:
    from tpu_fallback.offline.mockrun import kubernetes_manifest

    return [(r, kubernetes_manifest(r)) for r in run.resources
            if r.type.startswith("kubernetes:") and r.type.endswith(f":{kind}")]


def cluster_of(run: ProgramRun, resource: RecordedResource) -> str:
    """The GKE cluster a Kubernetes resource is applied to (through its provider)."""
    provider = next(r for r in run.resources if resource.provider.startswith(r.urn + "::"))  # "<urn>::<id>"
    cluster_urn = next(d for d in provider.dependencies if "Cluster" in d)
    found = run.by_urn(cluster_urn)
    assert found is not None
    return str(found.inputs["name"])


def test_one_manager_and_three_workers(glob: ProgramRun) -> None:
    clusters = {r.inputs["name"]: r.inputs for r in glob.of_type(CLUSTER)}
    assert set(clusters) == {"tpu-global-manager", *(f"tpu-global-{w}" for w in WORKERS)}
    manager = clusters["tpu-global-manager"]
    assert manager["enableAutopilot"] is True and manager["location"] == "europe-west4"
    assert manager["addonsConfig"]["rayOperatorConfigs"] == [{"enabled": True}]  # RayJob CRDs on the manager
    for worker, zone in WORKERS.items():
        assert clusters[f"tpu-global-{worker}"]["location"] == zone
        pools = sorted(p.inputs["name"] for p in glob.of_type(NODE_POOL)
                       if p.inputs["cluster"] == f"tpu-global-{worker}")
        if worker in PLAN_B_WORKERS:
            assert pools == ["default-pool", "dws-pool", "dws-pool-2", "on-demand-pool"]  # flexStart.maxSlices: 2
        else:
            assert pools == ["default-pool", "on-demand-pool"]
    assert not [p for p in glob.of_type(NODE_POOL) if p.inputs["cluster"] == "tpu-global-manager"]
    releases = glob.of_type("kubernetes:helm.sh/v3:Release")
    assert len(releases) == 4
    assert {cluster_of(glob, r) for r in releases} == set(clusters)


def test_workers_are_full_fallback_clusters(glob: ProgramRun) -> None:
    queues = objects_of(glob, "ClusterQueue")
    by_cluster = {cluster_of(glob, r): obj for r, obj in queues}
    for worker in WORKERS:
        spec = by_cluster[f"tpu-global-{worker}"]["spec"]
        flavors = [f["name"] for f in spec["resourceGroups"][0]["flavors"]]
        if worker in PLAN_B_WORKERS:  # flexStart.maxSlices 2: a flavor per plan B pool
            assert flavors == ["default-cpu", "on-demand", "dws", "dws-2"]
            assert spec["admissionChecksStrategy"]["admissionChecks"] == [
                {"name": "dws-prov", "onFlavors": ["dws", "dws-2"]}]
        else:
            assert flavors == ["default-cpu", "on-demand"] and "admissionChecksStrategy" not in spec


def test_manager_multikueue_objects_reference_each_other(glob: ProgramRun) -> None:
    manager = "tpu-global-manager"
    on_manager = [(r, o) for r, o in (objects_of(glob, "MultiKueueCluster") + objects_of(glob, "MultiKueueConfig")
                                      + objects_of(glob, "AdmissionCheck") + objects_of(glob, "ClusterQueue")
                                      + objects_of(glob, "Secret"))
                  if cluster_of(glob, r) == manager]
    kinds: dict[str, list[dict[str, Any]]] = {}
    for _, obj in on_manager:
        kinds.setdefault(obj["kind"], []).append(obj)
    mk_clusters = {o["metadata"]["name"]: o for o in kinds["MultiKueueCluster"]}
    assert set(mk_clusters) == set(WORKERS)
    secrets = {o["metadata"]["name"]: o for o in kinds["Secret"]}
    for obj in mk_clusters.values():
        source = obj["spec"]["clusterSource"]["kubeConfig"]
        assert source["locationType"] == "Secret"
        secret = secrets[source["location"]]
        assert secret["metadata"]["namespace"] == "kueue-system" and "kubeconfig" in secret["stringData"]
    (config,) = kinds["MultiKueueConfig"]
    assert sorted(config["spec"]["clusters"]) == sorted(mk_clusters)
    (check,) = kinds["AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    assert check["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                           "name": config["metadata"]["name"]}
    (queue,) = kinds["ClusterQueue"]
    flavors = [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]]
    checks = queue["spec"]["admissionChecksStrategy"]["admissionChecks"]
    assert checks == [{"name": check["metadata"]["name"], "onFlavors": flavors}]  # every flavor, MultiKueue only
    manager_kinds = {obj["kind"] for r, obj in objects_of(glob, "AdmissionCheck") if cluster_of(glob, r) == manager}
    assert manager_kinds == {"AdmissionCheck"}
    assert not [r for r, _ in objects_of(glob, "ProvisioningRequestConfig") if cluster_of(glob, r) == manager]


def test_worker_kubeconfigs_use_a_token_and_stay_secret(glob: ProgramRun) -> None:
    kubeconfigs = [(r, o) for r, o in objects_of(glob, "Secret")
                   if cluster_of(glob, r) == "tpu-global-manager" and o["metadata"]["name"].startswith("multikueue-")]
    assert len(kubeconfigs) == len(WORKERS)
    for resource, obj in kubeconfigs:
        assert "stringData.kubeconfig" in resource.secret_inputs or "stringData" in resource.secret_inputs
        kubeconfig = yaml.safe_load(obj["stringData"]["kubeconfig"])
        user = kubeconfig["users"][0]["user"]
        assert set(user) == {"token"}  # no exec plugin
        cluster = kubeconfig["clusters"][0]["cluster"]
        assert cluster["server"].startswith("https://") and cluster["certificate-authority-data"]
        assert "insecure-skip-tls-verify" not in cluster
    assert "kubeconfig" in glob.secret_outputs
    plain = {k: v for k, v in glob.outputs.items() if k not in glob.secret_outputs}
    assert "token" not in yaml.safe_dump(plain) and "certificate-authority-data" not in yaml.safe_dump(plain)


def test_worker_service_account_is_least_privilege(glob: ProgramRun) -> None:
    def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {(g, res, v) for rule in role["rules"] for g in rule["apiGroups"] for res in rule["resources"]
                for v in rule["verbs"]}

    roles = {obj["metadata"]["name"]: obj for _, obj in objects_of(glob, "ClusterRole")}
    read, write = grants(roles["multikueue-sa-role"]), grants(roles["multikueue-sa-write"])
    granted = read | write
    for needed in [("ray.io", "rayjobs", "create"), ("ray.io", "rayclusters", "watch"),
                   ("kueue.x-k8s.io", "workloads", "create"), ("kueue.x-k8s.io", "workloads/status", "patch"),
                   ("batch", "jobs", "create"), ("ray.io", "rayjobs/status", "get"),
                   # What the manager needs to sync a changed Workload (e.g. its priority) to the worker, as Kueue
                   # 0.19.2's create-multikueue-kubeconfig.sh grants it:
                   ("kueue.x-k8s.io", "workloads", "update"), ("kueue.x-k8s.io", "workloads", "patch"),
                   ("kueue.x-k8s.io", "clusterqueues", "get"), ("kueue.x-k8s.io", "localqueues", "list"),
                   ("ray.io", "rayclusters", "update"), ("ray.io", "rayclusters", "patch")]:
        assert needed in granted, needed
    assert not [g for g in granted if g[2] in ("*", "escalate", "bind", "impersonate") or g[1] in ("secrets", "*")]
    # Issue 28 item 6: cluster-wide it only reads; it writes only where jobs run, never in kube-system.
    assert {v for _, _, v in read} == {"get", "list", "watch"} and {v for _, _, v in write}.isdisjoint(
        {"get", "list", "watch"})
    cluster_bindings = [obj for _, obj in objects_of(glob, "ClusterRoleBinding")
                        if obj["subjects"][0]["name"] == "multikueue-sa"]
    assert len(cluster_bindings) == 3 and {b["roleRef"]["name"] for b in cluster_bindings} == {"multikueue-sa-role"}
    write_bindings = [obj for _, obj in objects_of(glob, "RoleBinding")
                      if obj["roleRef"]["name"] == "multikueue-sa-write"]
    job_namespaces = {q["namespace"] for q in glob.outputs["localQueues"]}
    assert len(write_bindings) == 3 * len(job_namespaces)
    assert {b["metadata"]["namespace"] for b in write_bindings} == job_namespaces
    prod_like = infra("global", {"queues": {"localQueues": [{"namespace": "ml-a", "name": "a"},
                                                             {"namespace": "ml-b", "name": "b"}]}})
    namespaces = {obj["metadata"]["namespace"] for _, obj in objects_of(prod_like, "RoleBinding")
                  if obj["roleRef"]["name"] == "multikueue-sa-write"}
    assert namespaces == {"ml-a", "ml-b"}


def test_each_worker_depends_only_on_its_own_cluster(glob: ProgramRun) -> None:
    clusters = {r.inputs["name"]: r for r in glob.of_type(CLUSTER)}
    for worker in WORKERS:
        platform = next(r for r in glob.resources if r.type == "tpu-fallback:platform:TpuPlatform"
                        and r.name == f"tpu-global-{worker}")
        inside = glob.children(platform, recursive=True)
        assert len([r for r in inside if r.type == NODE_POOL]) == (4 if worker in PLAN_B_WORKERS else 2)
        for resource in inside:
            for name, cluster in clusters.items():
                if name != f"tpu-global-{worker}":
                    assert not glob.depends_on(resource, cluster), f"{resource.name} waits for {name}"


def test_workers_have_the_managers_namespaces_and_local_queues(glob: ProgramRun) -> None:
    local: dict[str, set[tuple[str, str]]] = {}
    for resource, obj in objects_of(glob, "LocalQueue"):
        local.setdefault(cluster_of(glob, resource), set()).add((obj["metadata"]["namespace"], obj["metadata"]["name"]))
    assert len(local) == 4 and len({frozenset(v) for v in local.values()}) == 1


def test_kueue_metrics_on_every_cluster(glob: ProgramRun) -> None:
    every = objects_of(glob, "PodMonitoring")
    monitors = [(r, o) for r, o in every if o["spec"]["selector"]["matchLabels"].get("control-plane")]
    assert {cluster_of(glob, r) for r, _ in monitors} == {r.inputs["name"] for r in glob.of_type(CLUSTER)}
    # The fallback controller's own metrics beside Kueue's, on the clusters that run it (plain HTTP, its pods only).
    controllers = [o for _r, o in every if o not in [m for _, m in monitors]]
    assert controllers and all(o["spec"]["endpoints"][0]["port"] == "metrics" and o["spec"]["selector"]
                               ["matchLabels"]["app.kubernetes.io/name"] == "tpu-fallback-controller"
                               for o in controllers), controllers
    for _, obj in monitors:
        assert obj["apiVersion"] == "monitoring.googleapis.com/v1"
        assert obj["metadata"]["namespace"] == "kueue-system"
        (endpoint,) = obj["spec"]["endpoints"]
        assert endpoint["port"] == 8443 and endpoint["scheme"] == "https"
        assert obj["spec"]["selector"]["matchLabels"]["control-plane"] == "controller-manager"
    off = infra("global", {"kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}, "podMonitoring": False}})
    assert not objects_of(off, "PodMonitoring")
    assert not objects_of(infra("dev"), "PodMonitoring")  # off by default: the dev stack stays the tutorial


def test_every_object_passes_the_crd_schemas(glob: ProgramRun) -> None:
    report = schema_check(glob.kubernetes_objects())
    assert report.ok, report.text()


def test_outputs(glob: ProgramRun) -> None:
    assert glob.outputs["workers"] == [
        {"name": w, "location": zone, "clusterName": f"tpu-global-{w}"} for w, zone in WORKERS.items()]
    assert glob.outputs["clusterName"] == "tpu-global-manager"
    assert glob.outputs["localQueues"] == [{"namespace": "default", "name": "user-queue"}]
    assert glob.outputs["multikueue"] is True
    assert glob.outputs["tpu"]["hostsPerSlice"] == 4


BASE = {"kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}}}


def multikueue(workers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {**BASE, "multikueue": {"enabled": True, "manager": {"location": "europe-west4"}, "workers": workers},
            **extra}


@pytest.mark.parametrize(("overrides", "fragments"), [
    ({"kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": True}}},
     ["ElasticJobsViaWorkloadSlices", "MultiKueue does not support elastic jobs"]),
    (multikueue([{"name": f"w{i}", "location": "us-east5-b"} for i in range(21)]),
     ["multikueue.workers", "21 workers", "at most 20"]),
    (multikueue([{"name": "eu", "location": "us-east5-a"}, {"name": "eu", "location": "us-east5-b"}]),
     ["multikueue.workers[1].name", '"eu"', "unique"]),
    (multikueue([{"name": "v4", "location": "us-central2-b"}]),
     ["multikueue.workers[0].location", '"us-central2-b"', "v6e TPUs are not offered there"]),
    (multikueue([{"name": "r", "location": "us-east5"}]),
     ["multikueue.workers[0].location", "(worker r)", "zone is required"]),
    ({**BASE, "multikueue": {"enabled": True, "manager": {"location": "europe-west4-a"},
                             "workers": [{"name": "eu", "location": "us-east5-a"}]}},
     ["multikueue.manager.location", "region"]),
])
def test_guard_rails(overrides: dict[str, Any], fragments: list[str]) -> None:
    run = run_program(REPO_ROOT, "global", overrides, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    for fragment in fragments:
        assert fragment in str(run.error)
    assert run.resources == []


def test_jobs_stack_submits_to_the_manager_and_refuses_elastic_jobs(glob: ProgramRun) -> None:
    refs = {"organization/tpu-fallback/dev": {"outputs": copy.deepcopy(glob.outputs),
                                              "secretOutputNames": sorted(glob.secret_outputs)}}
    plain = [{"name": "rayjob-tpu-v6e", "count": 2, "queue": "user-queue"}]
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": plain}, stack_references=refs)
    jobs = [o for o in run.kubernetes_objects() if o["kind"] == "RayJob"]
    assert len(jobs) == 2
    assert all(j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue" for j in jobs)
    provider = run.one("pulumi:providers:kubernetes")
    assert "tpu-global-manager" in provider.inputs["kubeconfig"]
    elastic = [{"name": "rayjob-tpu-v6e", "queue": "user-queue", "elastic": True}]
    refused = run_program(REPO_ROOT / "jobs", "dev", {"jobs": elastic}, stack_references=refs, raise_errors=False)
    assert isinstance(refused.error, ConfigError)
    assert "MultiKueue" in str(refused.error) and "jobs[0].elastic" in str(refused.error)


def test_every_worker_has_the_script_a_dispatched_rayjob_mounts(glob: ProgramRun) -> None:
    # MultiKueue copies only the RayJob to a worker (tests/e2e/test_multikueue_e2e.py saw it): its ConfigMap volume
    # must already be there, in every namespace the worker's LocalQueues serve.
    from tpu_fallback.render.files import training_script

    namespaces = {q["namespace"] for q in glob.outputs["localQueues"]}
    scripts = [(cluster_of(glob, r), obj) for r, obj in objects_of(glob, "ConfigMap")
               if obj["metadata"]["name"] == "jax-train-script"]
    assert sorted((c, o["metadata"]["namespace"]) for c, o in scripts) == sorted(
        (f"tpu-global-{w}", ns) for w in WORKERS for ns in namespaces)
    assert all(o["data"]["train.py"] == training_script() for _, o in scripts)


def test_the_fallback_controller_runs_on_the_workers_with_both_plans(glob: ProgramRun) -> None:
    deployments = {cluster_of(glob, r) for r, obj in objects_of(glob, "Deployment")
                   if obj["metadata"]["name"] == "tpu-fallback-controller"}
    assert deployments == {f"tpu-global-{w}" for w in PLAN_B_WORKERS}  # not the manager, not plan-A-only europe
