"""Kueue and the plan A -> plan B queues, in the same graph as the cluster (issue: infrastructure part 2)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra, schema_check
from tpu_fallback.model.kueue_features import VERIFIED_VERSIONS
from tpu_fallback.model.quantity import parse_quantity
from tpu_fallback.model.queues import queue_plan
from tpu_fallback.model.settings import KUEUE_PODS_READY_TIMEOUT, KUEUE_VERSION, KueueSettings, parse_settings
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program
from tpu_fallback.render import kueue as manifests
from tpu_fallback.render.files import load_template

FIXTURES = Path(__file__).parent / "fixtures"
RELEASE = "kubernetes:helm.sh/v3:Release"
KUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "AdmissionCheck", "ProvisioningRequestConfig")


def kueue_objects(run: ProgramRun) -> list[dict[str, Any]]:
    return [o for o in run.kubernetes_objects() if o["apiVersion"].startswith("kueue.x-k8s.io/")]


def normalise(obj: Any) -> Any:
    """Compare quantities by value and ignore the v1beta1/v1beta2 difference (the seed's objects are valid in both)."""
    if isinstance(obj, dict):
        return {k: (normalise(v) if k != "apiVersion" else v.rsplit("/", 1)[0]) for k, v in obj.items()}
    if isinstance(obj, list):
        return [normalise(v) for v in obj]
    if isinstance(obj, (int, str)) and not isinstance(obj, bool):
        try:
            return parse_quantity(obj)
        except ValueError:
            return obj
    return obj


def keyed(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects}


def test_dev_queue_objects_are_the_tutorials(dev: ProgramRun) -> None:
    tutorial = keyed(list(yaml.safe_load_all((FIXTURES / "dws-tpu-queue.yaml").read_text())))
    ours = keyed(kueue_objects(dev))
    assert set(ours) == set(tutorial)
    # The one addition: the dws flavor declares the taint of its (queued-provisioning) nodes, which keeps elastic
    # jobs (they do not tolerate it) on plan A; every other RayJob tolerates it, as in the tutorial.
    dws = copy.deepcopy(ours[("ResourceFlavor", "", "dws")])
    assert dws["spec"].pop("nodeTaints") == [{"key": "cloud.google.com/gke-queued", "value": "true",
                                              "effect": "NoSchedule"}]
    ours[("ResourceFlavor", "", "dws")] = dws
    # The other: a failed DWS request is retried without limit instead of Kueue's 3 (docs/dws-failures.md).
    config = copy.deepcopy(ours[("ProvisioningRequestConfig", "", "dws-config")])
    assert config["spec"].pop("retryStrategy") == manifests.dws_retry_strategy()
    ours[("ProvisioningRequestConfig", "", "dws-config")] = config
    for key, expected in tutorial.items():
        assert normalise(ours[key]) == normalise(expected), key
    assert all(o["apiVersion"] == "kueue.x-k8s.io/v1beta2" for o in ours.values())


@pytest.mark.parametrize("stack", ["dev", "prod", "global"])
def test_failed_dws_requests_are_retried_without_limit(stack: str) -> None:
    # Kueue v0.19.2 deactivates the Workload once a request's attempt number passes backoffLimitCount (Kueue's
    # default 3: a job lost after four failed requests); the stack sets all three fields, since the API server
    # fills a missing one with Kueue's default.
    configs = [o for o in kueue_objects(infra(stack)) if o["kind"] == "ProvisioningRequestConfig"]
    assert configs
    for config in configs:
        strategy = config["spec"]["retryStrategy"]
        assert strategy == {"backoffLimitCount": 2**31 - 1, "backoffBaseSeconds": 60, "backoffMaxSeconds": 600}
        # int32 fields in Kueue's CRD: integers (never floats or strings), within range
        assert all(type(v) is int and 0 < v <= 2**31 - 1 for v in strategy.values()), strategy
        assert strategy["backoffBaseSeconds"] <= strategy["backoffMaxSeconds"]


def test_dws_back_off_reaches_its_cap_within_five_retries() -> None:
    # Kueue's back-off before retry n is base * 2^(n-1), capped (pkg/workload/admissionchecks.go:230-242): a failure
    # that has cleared is retried within backoffMaxSeconds, never after Kueue's default 30 min.
    strategy = manifests.dws_retry_strategy()
    waits = [min(strategy["backoffBaseSeconds"] * 2 ** (n - 1), strategy["backoffMaxSeconds"]) for n in range(1, 7)]
    assert waits == [60, 120, 240, 480, 600, 600]


def test_flavor_order_and_covered_resources(dev: ProgramRun) -> None:
    cq = next(o for o in kueue_objects(dev) if o["kind"] == "ClusterQueue")
    group = cq["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "google.com/tpu"]
    assert [f["name"] for f in group["flavors"]] == ["default-cpu", "on-demand", "dws"]
    for flavor in group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    assert cq["spec"]["namespaceSelector"] == {}  # the empty map survives: an absent selector admits nothing


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_object_passes_the_crd_schemas(stack: str) -> None:
    report = schema_check(infra(stack).kubernetes_objects())
    assert report.ok, report.text()


def test_queue_objects_wait_for_kueue_but_not_for_tpu_pools(dev: ProgramRun) -> None:
    release = dev.one(RELEASE)
    gate = dev.one("kubernetes:batch/v1:Job")
    # The TPU pools: Kueue's release does wait for the system pool its pods run on (issue 28 item 4).
    pools = [p for p in dev.of_type("gcp:container/nodePool:NodePool") if p.inputs["name"] != "default-pool"]
    crs = [r for r in dev.resources if r.type.startswith("kubernetes:kueue.x-k8s.io/")]
    assert {r.type.split(":")[-1] for r in crs} == set(KUEUE_KINDS)
    assert dev.depends_on(gate, release)
    for cr in crs:
        assert dev.depends_on(cr, gate), cr.name
        assert dev.depends_on(cr, release), cr.name
        for p in pools:
            assert not dev.depends_on(cr, p), f"{cr.name} waits for node pool {p.name}"
    assert not any(dev.depends_on(release, p) for p in pools)


def test_kubernetes_resources_use_the_clusters_provider(dev: ProgramRun) -> None:
    provider = dev.one("pulumi:providers:kubernetes")
    kubernetes = [r for r in dev.resources if r.custom and r.type.startswith("kubernetes:")]
    assert len(kubernetes) >= 5, [r.type for r in kubernetes]  # the Kueue release and the queue objects at least
    for r in kubernetes:
        assert r.provider.startswith(provider.urn + "::"), r.name


def test_helm_release(dev: ProgramRun) -> None:
    release = dev.one(RELEASE).inputs
    assert release["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert release["version"] == KUEUE_VERSION
    assert release["name"] == "kueue" and release["namespace"] == "kueue-system"
    values = release["values"]
    assert values["controllerManager"]["featureGates"] == [{"name": "ElasticJobsViaWorkloadSlices", "enabled": True}]
    # The fallback's waitForPodsReady is the one change to the chart's manager config; the file is replaced as a
    # whole, so the chart's integrations (RayJob) must still be in it.
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    ready = config.pop("waitForPodsReady")
    assert config == load_template("kueue-manager-config.yaml")
    assert "ray.io/rayjob" in config["integrations"]["frameworks"]
    # A long backstop (the controller evicts stuck plan A jobs itself): Kueue's own default, so a plan B job
    # whose pods start slowly is not evicted.
    assert int(ready["timeout"].rstrip("s")) == KUEUE_PODS_READY_TIMEOUT > 600
    assert ready["blockAdmission"] is False and "backoffLimitCount" not in ready["requeuingStrategy"]
    assert values["controllerManager"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "default-pool"}
    assert release.get("skipAwait") is not True


def test_feature_gates_and_version_follow_config() -> None:
    run = infra("dev", {"kueue": {"version": "0.18.3", "allowUnverifiedVersion": True,
                                  "featureGates": {"TopologyAwareScheduling": False}}})
    release = run.one(RELEASE).inputs
    assert release["version"] == "0.18.3"
    assert release["values"]["controllerManager"]["featureGates"] == [
        {"name": "TopologyAwareScheduling", "enabled": False}]
    assert run.outputs["kueueVersion"] == "0.18.3"


def test_a_kueue_version_the_project_is_not_verified_with_is_refused_unless_opted_in() -> None:
    assert KueueSettings().version in VERIFIED_VERSIONS
    with pytest.raises(ConfigError, match=r"kueue.version.*0\.18\.3.*verified with Kueue 0\.19\.2.*allowUnverified"):
        parse_settings({"kueue": {"version": "0.18.3"}}, "my-project")
    opted_in = parse_settings({"kueue": {"version": "0.20.0", "allowUnverifiedVersion": True}}, "my-project")
    assert opted_in.kueue.version == "0.20.0"
    # Its gates are still checked, against the newest verified version's list.
    with pytest.raises(ConfigError, match="has no such feature gate"):
        parse_settings({"kueue": {"version": "0.20.0", "allowUnverifiedVersion": True,
                                  "featureGates": {"NoSuchGate": True}}}, "my-project")


def test_readiness_gate_probes_the_webhooks_and_reruns_on_upgrade(dev: ProgramRun) -> None:
    job = dev.one("kubernetes:batch/v1:Job").inputs
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["create", "--dry-run=server"]
    assert {"name": "KUEUE_VERSION", "value": KUEUE_VERSION} in container["env"]
    gate_probe = dev.one("kubernetes:core/v1:ConfigMap", "tpu-cluster-kueue-gate-probe")
    probe = yaml.safe_load(gate_probe.inputs["data"]["flavor.yaml"])
    assert probe["kind"] == "ResourceFlavor" and "generateName" in probe["metadata"]
    role = dev.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "tpu-cluster-kueue-gate-role").inputs
    assert role["rules"] == [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["create"]}]
    upgraded = infra("dev", {"kueue": {"version": "0.19.3", "allowUnverifiedVersion": True}}).one(
        "kubernetes:batch/v1:Job").inputs
    assert upgraded["spec"]["template"] != job["spec"]["template"]  # a new template replaces the Job


@pytest.mark.parametrize(("overrides", "chips"), [
    ({"onDemand": {"maxSlices": 2}}, 32),
    ({"tpu": {"type": "v6e", "topology": "2x4"}}, 8),
    ({"tpu": {"type": "v6e", "topology": "4x8"}, "queues": {"quotas": {"onDemand": {"cpu": 64, "memory": "128Gi"}}}},
     32),
])
def test_on_demand_tpu_quota_is_derived_from_the_pool(overrides: dict[str, Any], chips: int) -> None:
    run = infra("dev", overrides)
    cq = next(o for o in kueue_objects(run) if o["kind"] == "ClusterQueue")
    on_demand = [f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"].startswith("on-demand")]
    assert sum(parse_quantity(r["nominalQuota"]) for f in on_demand for r in f["resources"]
               if r["name"] == "google.com/tpu") == chips


def test_each_multi_host_pool_has_its_own_flavor() -> None:
    # A slice's pods must share one node pool (two pools are two ICI slices): one flavor per pool pins a job to one.
    run = infra("dev", {"onDemand": {"maxSlices": 2}})
    objects = keyed(kueue_objects(run))
    assert objects[("ResourceFlavor", "", "on-demand")]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-nodepool": "on-demand-pool"}
    assert objects[("ResourceFlavor", "", "on-demand-2")]["spec"]["nodeLabels"] == {
        "cloud.google.com/gke-nodepool": "on-demand-pool-2"}
    cq = objects[("ClusterQueue", "", "cluster-queue")]
    assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [
        "default-cpu", "on-demand", "on-demand-2", "dws"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
              for f in cq["spec"]["resourceGroups"][0]["flavors"]}
    assert quotas["on-demand"] == quotas["on-demand-2"] == {"cpu": "40", "memory": "75Gi", "google.com/tpu": "16"}
    pools = [r.inputs for r in run.of_type("gcp:container/nodePool:NodePool") if r.inputs["name"].startswith("on-")]
    assert len(pools) == 2 and all(p["nodeConfig"]["labels"]["tpu-fallback/plan"] == "on-demand" for p in pools)


def test_capped_flex_start_quota_is_plan_b_capacity() -> None:
    run = infra("prod")  # capFlexStart: true, 4 flex-start slices of v6e 4x4
    cq = next(o for o in kueue_objects(run) if o["kind"] == "ClusterQueue")
    dws = [f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"].startswith("dws")]
    assert [f["name"] for f in dws] == ["dws", "dws-2", "dws-3", "dws-4"]  # one per plan B pool
    for flavor in dws:  # each capped at its pool: one 4x4 slice of 4 ct6e-standard-4t hosts
        quota = {r["name"]: parse_quantity(r["nominalQuota"]) for r in flavor["resources"]}
        assert quota == {"cpu": 4 * 180, "memory": 4 * 720 * 2**30, "google.com/tpu": 16}
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": "dws-prov", "onFlavors": ["dws", "dws-2", "dws-3", "dws-4"]}]


@pytest.mark.parametrize("stack", ["dev", "prod", "global"])
def test_quotas_go_out_as_canonical_quantity_strings(stack: str) -> None:
    # Kueue's webhook stores quotas as Go's resource.Quantity prints them; anything else is updated on every up.
    from tpu_fallback.model.quantity import canonical_quantity

    queues = [o for o in kueue_objects(infra(stack)) if o["kind"] == "ClusterQueue"]
    quotas = [r["nominalQuota"] for cq in queues for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
              for r in f["resources"]]
    assert quotas and all(isinstance(q, str) and canonical_quantity(q) == q for q in quotas), quotas


def test_flex_start_disabled_leaves_a_working_queue() -> None:
    run = infra("dev", {"flexStart": {"enabled": False}})
    objects = kueue_objects(run)
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == [("ClusterQueue", "cluster-queue"), ("LocalQueue", "user-queue"),
                     ("ResourceFlavor", "default-cpu"), ("ResourceFlavor", "on-demand")]
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    assert "admissionChecksStrategy" not in cq["spec"]
    assert run.outputs["flavors"] == {"system": "default-cpu", "onDemand": "on-demand", "flexStart": None}


def test_local_queues_namespaces_and_selector() -> None:
    run = infra("prod")
    objects = run.kubernetes_objects()
    namespaces = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}
    assert set(namespaces) == {"kueue-system", "ml-research", "ml-prod"}
    assert namespaces["ml-research"]["metadata"]["labels"] == {"tpu-fallback/queue-access": "true"}
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"tpu-fallback/queue-access": "true"}}
    assert run.outputs["localQueues"] == [
        {"namespace": "ml-research", "name": "research-queue"}, {"namespace": "ml-prod", "name": "prod-queue"}]
    lq = next(r for r in run.resources if r.type.endswith(":LocalQueue") and "research" in r.name)
    ns = next(r for r in run.resources if r.type == "kubernetes:core/v1:Namespace" and "ml-research" in r.name)
    assert run.depends_on(lq, ns)


def test_outputs_added_to_the_contract(dev: ProgramRun) -> None:
    assert dev.outputs["kueueNamespace"] == "kueue-system"
    assert dev.outputs["kueueVersion"] == KUEUE_VERSION
    assert dev.outputs["clusterQueue"] == "cluster-queue"
    assert dev.outputs["localQueues"] == [{"namespace": "default", "name": "user-queue"}]
    assert dev.outputs["flavors"] == {"system": "default-cpu", "onDemand": "on-demand", "flexStart": "dws"}


@pytest.mark.parametrize(("overrides", "fragments"), [
    ({"kueue": {"featureGates": {"elastic-jobs": True}}}, ["kueue.featureGates", "elastic-jobs", "CamelCase"]),
    ({"kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": "yes"}}},
     ["kueue.featureGates.ElasticJobsViaWorkloadSlices", "true or false"]),
    ({"kueue": {"featureGates": [{"name": "X", "enabled": True}]}}, ["kueue.featureGates", "map of gate name"]),
    ({"queues": {"quotas": {"onDemand": {"cpu": 16, "memory": "75Gi"}}}}, ["queues.quotas.onDemand", "one 4x4 slice"]),
    ({"queues": {"quotas": {"system": {"cpu": 1, "memory": "1Gi"}}}},
     ["queues.quotas.system", "one Ray job's CPU pods", "cpu 2.5"]),
    ({"queues": {"quotas": {"system": {"cpu": "lots"}}}}, ["queues.quotas.system.cpu", '"lots"']),
    ({"queues": {"localQueues": [{"name": "q"}, {"namespace": "default", "name": "q"}]}},
     ["queues.localQueues[1]", "default/q", "unique"]),
    ({"queues": {"localQueues": []}}, ["queues.localQueues", "non-empty"]),
])
def test_bad_queue_config_is_a_clear_error_and_registers_nothing(overrides: dict[str, Any],
                                                                  fragments: list[str]) -> None:
    run = run_program(REPO_ROOT, "dev", overrides, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    for fragment in fragments:
        assert fragment in str(run.error)
    assert run.resources == []


def test_on_flavors_must_name_a_flavor_of_the_queue() -> None:
    plan = queue_plan(parse_settings({"flexStart": {"enabled": False}}, "my-project"))
    with pytest.raises(ValueError, match=r"dws-prov refers to missing flavor\(s\) \['dws'\]"):
        manifests.cluster_queue(plan, [{"name": "dws-prov", "onFlavors": ["dws"]}])


def test_offline_plan_yaml_of_prod_is_valid(tmp_path: Path) -> None:
    import subprocess
    import sys

    plan = [sys.executable, "-m", "tpu_fallback.offline.plan", "prod", "--quiet", "--out", str(tmp_path)]
    result = subprocess.run(plan, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all((tmp_path / "kubernetes.yaml").read_text()))
    assert {o["kind"] for o in objects} >= set(KUEUE_KINDS) | {"Namespace", "Job"}
    report = schema_check(objects)
    assert report.ok, report.text()


def test_local_queues_are_replaced_when_their_cluster_queue_changes() -> None:
    # LocalQueue.spec.clusterQueue is immutable (Kueue v0.19.2 localqueue_types.go: XValidation self == oldSelf):
    # renaming the ClusterQueue must replace the LocalQueues, not send an update the API server refuses.
    run = infra("prod")
    queues = [r for r in run.resources if r.inputs.get("kind") == "LocalQueue"]
    assert len(queues) == 2
    for queue in queues:
        assert queue.options["replaceOnChanges"] == ["spec.clusterQueue"]
        assert queue.options["deleteBeforeReplace"] is True
    others = [r for r in run.resources if r.inputs.get("kind") in ("ClusterQueue", "ResourceFlavor")]
    assert others and all(r.options["replaceOnChanges"] == [] for r in others)  # updated in place
