"""What a first `pulumi up` on a real GCP project needs beyond the tutorial (issue 14), under the mock runtime.

Each test names the GKE or provider fact it checks; the sources are in the code's comments.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tpu_fallback.model import catalog
from tpu_fallback.model.settings import node_account_ids, parse_settings
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program
from tpu_fallback.render.fallback import NAME as FALLBACK_CONTROLLER

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
ACCOUNT = "gcp:serviceaccount/account:Account"
IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
SERVICE = "gcp:projects/service:Service"
ACCOUNT_ID_LIMIT = 30  # service account ids: 6-30 characters


def tpu_pools(run: ProgramRun) -> list[dict[str, Any]]:
    return [p.inputs for p in run.of_type(NODE_POOL) if p.inputs["nodeConfig"]["machineType"].startswith("ct")]


# 1. Node service accounts are unique per cluster --------------------------------------------------------------


def test_long_cluster_names_get_distinct_node_accounts_in_multi_region_mode() -> None:
    long_name = "tpu-platform-research-eu"  # 24 characters: manager and workers share the first 23
    run = infra("global", {"clusterName": long_name})
    ids = [a.inputs["accountId"] for a in run.of_type(ACCOUNT)]
    assert len(ids) == 4 and len(set(ids)) == 4, ids
    assert all(6 <= len(i) <= ACCOUNT_ID_LIMIT and i[0].isalpha() and not i.endswith("-") for i in ids), ids


def test_node_account_ids_stay_as_they_were_where_they_did_not_collide() -> None:
    assert node_account_ids(["tpu-cluster"]) == ["tpu-cluster-nodes"]
    assert node_account_ids(["tpu-global-manager", "tpu-global-us"]) == ["tpu-global-manager-nodes",
                                                                         "tpu-global-us-nodes"]
    assert infra("dev").one(ACCOUNT).inputs["accountId"] == "tpu-cluster-nodes"


# 2. Image streaming prerequisites and the project's APIs -----------------------------------------------------


def test_custom_node_account_can_use_image_streaming() -> None:
    roles = {m.inputs["role"] for m in infra("dev").of_type(IAM_MEMBER)}
    assert "roles/serviceusage.serviceUsageConsumer" in roles


def test_required_apis_are_enabled_and_left_enabled_on_destroy() -> None:
    run = infra("dev")
    services = {s.inputs["service"]: s.inputs for s in run.of_type(SERVICE)}
    assert set(services) == {"compute.googleapis.com", "container.googleapis.com",
                             "containerfilesystem.googleapis.com", "iam.googleapis.com",
                             "cloudresourcemanager.googleapis.com"}
    assert all(s["disableOnDestroy"] is False for s in services.values())
    cluster = run.one(CLUSTER)
    assert all(run.depends_on(cluster, s) for s in run.of_type(SERVICE))
    assert all(run.depends_on(a, s) for a in run.of_type(ACCOUNT) for s in run.of_type(SERVICE))


def test_enabling_apis_can_be_left_to_the_project_owner() -> None:
    assert infra("dev", {"enableApis": False}).of_type(SERVICE) == []


# 4. Pool names within GKE's 40 characters ------------------------------------------------------------------------


def test_a_base_pool_name_that_overflows_with_its_slice_suffix_is_refused() -> None:
    name = "on-demand-" + "x" * 29  # 39 characters: valid alone, "-2" makes 41
    with pytest.raises(ConfigError) as err:
        parse_settings({"onDemand": {"name": name, "maxSlices": 2}}, "my-project")
    assert "onDemand.name" in str(err.value) and f"{name}-2" in str(err.value) and "40" in str(err.value)
    assert parse_settings({"onDemand": {"name": name, "maxSlices": 1}}, "my-project").on_demand.name == name


# 5. Flex-start zones ----------------------------------------------------------------------------------------------


def test_single_cluster_location_must_offer_flex_start_for_plan_b() -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"location": "us-central1-b"}, "my-project")  # v6e on demand, no v6e flex-start
    message = str(err.value)
    assert message.startswith('location "us-central1-b" is invalid')
    assert all(zone in message for zone in sorted(catalog.FAMILIES["v6e"].flex_start_zones))
    assert parse_settings({"location": "us-central1-b", "flexStart": {"enabled": False}}, "my-project").location
    allowed = {"location": "us-central1-b", "allowUnlistedZone": True}
    assert parse_settings(allowed, "my-project").location


def test_single_cluster_location_must_offer_the_family() -> None:
    with pytest.raises(ConfigError, match='location "us-central2-b" is invalid: v6e TPUs are not offered there'):
        parse_settings({"location": "us-central2-b", "flexStart": {"enabled": False}}, "my-project")


@pytest.mark.parametrize("stack", ["dev", "prod", "global"])
def test_example_stacks_put_plan_b_only_where_gke_offers_flex_start(stack: str) -> None:
    run = infra(stack)
    flex_start = [pool for pool in run.of_type(NODE_POOL) if pool.inputs["nodeConfig"].get("flexStart")]
    assert flex_start, f"{stack} has no flex-start pool: nothing was checked"
    for pool in flex_start:
        assert pool.inputs["location"] in catalog.FAMILIES["v6e"].flex_start_zones, pool.name


# 6. Maintenance: no upgrade recreates a running slice ---------------------------------------------------------


def test_tpu_clusters_exclude_minor_and_node_upgrades_until_end_of_support() -> None:
    policy = infra("dev").one(CLUSTER).inputs["maintenancePolicy"]
    assert policy["dailyMaintenanceWindow"] == {"startTime": "03:00"}
    [exclusion] = policy["maintenanceExclusions"]
    assert exclusion["exclusionOptions"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES",
                                             "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}
    assert "endTime" not in exclusion  # exactly one of endTime and endTimeBehavior


def test_maintenance_is_configurable() -> None:
    run = infra("dev", {"maintenance": {"dailyWindowStart": "22:30", "exclusion": False}})
    policy = run.one(CLUSTER).inputs["maintenancePolicy"]
    assert policy == {"dailyMaintenanceWindow": {"startTime": "22:30"}}
    for bad, fragment in (({"exclusion": "NO_UPGRADES"}, "maintenance.exclusion"),
                          ({"dailyWindowStart": "25:00"}, "maintenance.dailyWindowStart"),
                          ({"window": "03:00"}, "maintenance.window is not a known setting")):
        with pytest.raises(ConfigError, match=fragment):
            parse_settings({"maintenance": bad}, "my-project")


def test_the_manager_gets_a_window_but_no_exclusion() -> None:
    run = infra("global")
    manager = next(c for c in run.of_type(CLUSTER) if c.inputs["name"] == "tpu-global-manager")
    assert "maintenanceExclusions" not in manager.inputs["maintenancePolicy"]


# 7. Replacement traps ------------------------------------------------------------------------------------------------


def test_tpu_pools_ignore_initial_node_count_changes() -> None:
    run = infra("prod")
    tpu = [pool for pool in run.of_type(NODE_POOL) if pool.inputs["nodeConfig"]["machineType"].startswith("ct")]
    assert tpu, "prod has no TPU pool: nothing was checked"
    for pool in tpu:
        assert pool.options["ignoreChanges"] == ["initialNodeCount"], pool.name


# 8. Hardening ---------------------------------------------------------------------------------------------------------


def test_tpu_pools_have_secure_boot_unless_turned_off() -> None:
    on = tpu_pools(infra("dev"))
    assert on and all(p["nodeConfig"]["shieldedInstanceConfig"] == {"enableSecureBoot": True,
                                                                    "enableIntegrityMonitoring": True} for p in on)
    off = tpu_pools(infra("dev", {"secureBoot": False}))
    assert off and all(p["nodeConfig"]["shieldedInstanceConfig"]["enableSecureBoot"] is False for p in off)


def test_network_private_nodes_and_authorized_networks() -> None:
    net = {"network": "tpu-vpc", "subnetwork": "projects/my-host-proj/regions/us-east5/subnetworks/tpu-subnet",
           "privateNodes": True, "authorizedNetworks": ["10.0.0.0/8", "192.168.1.0/24"],
           "cloudNat": False}  # a Shared VPC subnet: its host project's admins provide egress (tests/test_hardened.py)
    cluster = infra("dev", {"network": net}).one(CLUSTER).inputs
    assert cluster["network"] == "tpu-vpc" and cluster["subnetwork"] == net["subnetwork"]
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True}
    blocks = cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"]
    assert [b["cidrBlock"] for b in blocks] == net["authorizedNetworks"]
    default = infra("dev").one(CLUSTER).inputs
    assert not {"network", "subnetwork", "privateClusterConfig", "masterAuthorizedNetworksConfig"} & set(default)


@pytest.mark.parametrize(("network", "fragment"), [
    ({"authorizedNetworks": ["10.0.0.1/8"]}, "network.authorizedNetworks[0]"),
    ({"authorizedNetworks": "10.0.0.0/8"}, "network.authorizedNetworks"),
    ({"network": "Bad_VPC"}, "network.network"),
    ({"vpc": "x"}, "network.vpc is not a known setting"),
])
def test_bad_network_settings_are_refused(network: dict[str, Any], fragment: str) -> None:
    run = run_program(REPO_ROOT, "dev", {"network": network}, raise_errors=False)
    assert isinstance(run.error, ConfigError) and fragment in str(run.error)
    assert run.resources == []


# 11. The catalog ----------------------------------------------------------------------------------------------


def test_machine_sizes_used_for_quota_arithmetic() -> None:
    # GKE's autoscaler machine table: ct6e-standard-8t has 180 vCPU (one thread per core) and 1440 GB.
    v6e = catalog.FAMILIES["v6e"]
    assert [(m.name, m.vcpus, m.memory_gib) for m in v6e.machine_types] == [
        ("ct6e-standard-1t", 44, 176), ("ct6e-standard-4t", 180, 720), ("ct6e-standard-8t", 180, 1440)]


@pytest.mark.parametrize(("family", "topology", "valid"), [
    ("v5p", "4x4x12", True), ("v5p", "8x8x16", True), ("v5p", "16x16x24", True), ("v5p", "8x4x4", False),
    ("v5p", "16x20x28", True), ("v5p", "20x20x28", False),  # 4*5*7=140 cubes: the limit; 5*5*7=175: over
    ("v4", "8x4x4", True), ("v4", "16x16x16", True), ("v4", "16x16x20", False), ("v4", "4x4x5", False),
])
def test_three_d_topologies_follow_the_cube_rule(family: str, topology: str, valid: bool) -> None:
    assert (topology in catalog.FAMILIES[family].topologies) is valid


# 3. Kueue metrics that Managed Prometheus can actually collect, and a dashboard -------------------------------


def _metrics_stack() -> ProgramRun:
    return infra("global")  # kueue.podMonitoring: true


def test_pod_monitoring_sends_a_token_bound_to_kueues_metrics_reader_role() -> None:
    run = _metrics_stack()
    objects = run.kubernetes_objects()
    monitors = [o for o in objects if o["kind"] == "PodMonitoring"
                and o["spec"]["selector"]["matchLabels"].get("control-plane") == "controller-manager"]  # Kueue's
    assert len(monitors) == 4  # manager + 3 workers
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        secret_ref = endpoint["authorization"]["credentials"]["secret"]
        assert endpoint["authorization"]["type"] == "Bearer" and secret_ref["key"] == "token"
        assert "namespace" not in secret_ref  # GMP takes the PodMonitoring's own namespace, and only that
        tokens = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == secret_ref["name"]
                  and o["metadata"]["namespace"] == monitor["metadata"]["namespace"]]
        assert tokens and tokens[0]["type"] == "kubernetes.io/service-account-token"
        account = tokens[0]["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    bindings = [o for o in objects
                if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == "kueue-metrics-reader"]
    assert len(bindings) == 4 and all(b["subjects"][0]["name"] == account for b in bindings)
    readers = [o for o in objects if o["kind"] == "RoleBinding" and o["subjects"][0]["namespace"] == "gmp-system"]
    assert len(readers) == 4 and all(r["subjects"][0]["name"] == "collector" for r in readers)
    roles = [o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == "kueue-system"
             and o["metadata"]["name"] not in (FALLBACK_CONTROLLER, "tpu-fallback-sweeper")]  # theirs: the Lease
    assert all(r["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [account],
                               "verbs": ["get", "list", "watch"]}] for r in roles)


def test_metrics_turn_on_cluster_queue_resource_metrics_and_keep_the_integrations() -> None:
    release = _metrics_stack().of_type("kubernetes:helm.sh/v3:Release")[0]
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["metrics"] == {"bindAddress": ":8443", "enableClusterQueueResources": True}
    assert "ray.io/rayjob" in config["integrations"]["frameworks"]
    assert "featureGates" not in config  # gates stay on the command line
    plain = infra("dev", {"fallback": {"enabled": False}}).of_type("kubernetes:helm.sh/v3:Release")[0]
    assert "managerConfig" not in plain.inputs["values"]  # the tutorial without fallback: the chart's own config


def test_the_dashboard_charts_what_a_platform_team_watches() -> None:
    run = _metrics_stack()
    (dashboard,) = run.of_type("gcp:monitoring/dashboard:Dashboard")
    spec = json.loads(dashboard.inputs["dashboardJson"])
    queries = " ".join(t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
                       for t in spec["mosaicLayout"]["tiles"])
    for metric in ("kueue_pending_workloads", "kueue_admission_wait_time_seconds_bucket",
                   "kueue_cluster_queue_resource_usage", "kueue_evicted_workloads_total"):
        assert metric in queries
    tiles = spec["mosaicLayout"]["tiles"]
    # A coordinate left out is 0 (the API drops zeros; tests/test_hardened.py).
    assert all(t.get("xPos", 0) + t["width"] <= spec["mosaicLayout"]["columns"] for t in tiles)
    assert len({(t.get("xPos", 0), t.get("yPos", 0)) for t in tiles}) == len(tiles)  # no two charts on one spot
    assert "monitoring.googleapis.com" in {s.inputs["service"] for s in run.of_type(SERVICE)}
    assert not infra("dev").of_type("gcp:monitoring/dashboard:Dashboard")


# 9. The MultiKueue manager never runs TPU pods ------------------------------------------------------------------


def test_manager_job_namespaces_refuse_tpu_requests() -> None:
    run = _metrics_stack()
    quotas = run.of_type("kubernetes:core/v1:ResourceQuota")
    job_namespaces = {q["metadata"]["namespace"] for q in run.kubernetes_objects() if q["kind"] == "LocalQueue"}
    assert {q.inputs["metadata"]["namespace"] for q in quotas} == job_namespaces
    assert all(q.inputs["spec"]["hard"] == {"requests.google.com/tpu": "0"} for q in quotas)
    assert all(q.provider.split("::")[-2] == "tpu-global-manager-k8s" for q in quotas)  # the manager only
    assert not infra("dev").of_type("kubernetes:core/v1:ResourceQuota")  # single cluster: TPU pods belong there
