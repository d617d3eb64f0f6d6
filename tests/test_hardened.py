"""A first `pulumi up` on a hardened GCP project (issue 28), under the mock runtime: private nodes with their
egress, no Compute Engine default service account, the order of first creation, Managed Service for Prometheus,
MultiKueue reachability and credentials, and the jobs stack's provider. Sources are in the code's comments;
what needs the real engine or Kueue is in tests/e2e (test_engine_examples_e2e.py, test_multikueue_e2e.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, infra_references, run_program

JOBS = REPO_ROOT / "jobs"
K8S_PROVIDER = "pulumi:providers:kubernetes"


def jobs_run(references: dict[str, Any] | None = None) -> ProgramRun:
    return run_program(JOBS, "dev", stack_references=references or infra_references(JOBS, "dev"))


# 9. The jobs stack's provider is replaced only with its cluster -------------------------------------------------


def test_the_jobs_provider_names_the_infra_cluster_not_its_endpoint() -> None:
    references = infra_references(JOBS, "dev")
    provider = jobs_run(references).one(K8S_PROVIDER)
    assert provider.inputs["clusterIdentifier"] == "us-east5-b/tpu-cluster"
    # A new endpoint and CA (GKE rotates them) leave the identifier as it was; another cluster changes it.
    moved = copy.deepcopy(references)
    (outputs,) = [r["outputs"] for r in moved.values()]
    outputs["clusterEndpoint"] = "198.51.100.7"
    outputs["kubeconfig"] = outputs["kubeconfig"].replace("203.0.113.10", "198.51.100.7")
    moved_provider = jobs_run(moved).one(K8S_PROVIDER)
    assert moved_provider.inputs["kubeconfig"] != provider.inputs["kubeconfig"]
    assert moved_provider.inputs["clusterIdentifier"] == "us-east5-b/tpu-cluster"
    outputs["clusterName"] = "other-cluster"
    assert jobs_run(moved).one(K8S_PROVIDER).inputs["clusterIdentifier"] == "us-east5-b/other-cluster"


# 4. The order of a first `pulumi up` ------------------------------------------------------------------------------

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
NODE_POOL = "gcp:container/nodePool:NodePool"


def test_kueues_release_waits_for_the_system_pool_its_pods_are_pinned_to() -> None:
    for stack in ("dev", "prod"):
        run = infra(stack)
        release = run.one(RELEASE)
        (system_pool,) = [p for p in run.of_type(NODE_POOL) if p.inputs["name"] == "default-pool"]
        assert run.depends_on(release, system_pool), stack
        assert not any(run.depends_on(release, p) for p in run.of_type(NODE_POOL) if p is not system_pool)
    # The global stack's manager is Autopilot (no pool of its own); each worker's release waits for its own pool.
    run = infra("global")
    for release in run.of_type(RELEASE):
        pools = [p for p in run.of_type(NODE_POOL) if run.depends_on(release, p)]
        manager = release.provider.split("::")[-2] == "tpu-global-manager-k8s"
        assert [p.inputs["name"] for p in pools] == ([] if manager else ["default-pool"]), release.name


def test_objects_in_kueue_system_wait_for_the_namespace() -> None:
    for stack in ("dev", "global"):
        run = infra(stack)
        namespaces = {ns.provider: ns for ns in run.of_type(NAMESPACE)
                      if ns.inputs["metadata"]["name"] == "kueue-system"}
        inside = [r for r in run.resources if r.type.startswith("kubernetes:") and r.type != NAMESPACE
                  and (r.inputs.get("metadata") or {}).get("namespace") == "kueue-system"]
        assert {r.inputs["kind"] if "kind" in r.inputs else r.type.rsplit(":", 1)[-1] for r in inside} >= {
            "ServiceAccount", "ConfigMap"}
        for resource in inside:
            assert run.depends_on(resource, namespaces[resource.provider]), (stack, resource.type, resource.name)


# 3. No Compute Engine default service account ------------------------------------------------------------------

CLUSTER = "gcp:container/cluster:Cluster"
ACCOUNT = "gcp:serviceaccount/account:Account"


def test_the_default_pool_created_and_removed_runs_as_the_stacks_node_account() -> None:
    for stack in ("dev", "prod", "global"):
        run = infra(stack)
        accounts = {a.inputs["accountId"] for a in run.of_type(ACCOUNT)}
        for cluster in run.of_type(CLUSTER):
            if cluster.inputs.get("enableAutopilot"):
                defaults = cluster.inputs["clusterAutoscaling"]["autoProvisioningDefaults"]
                assert defaults["serviceAccount"].split("@")[0] in accounts, cluster.name
                continue
            assert cluster.inputs["removeDefaultNodePool"] is True
            node_config = cluster.inputs["nodeConfig"]
            # The mock runtime names an account's email after its id.
            assert node_config["serviceAccount"].split("@")[0] in accounts, (stack, cluster.name, node_config)
            assert node_config["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
            # Clusters made before this was set keep their (removed) pool's config rather than being replaced.
            assert cluster.options["ignoreChanges"] == ["nodeConfig"]


# 1. Private nodes with their egress ------------------------------------------------------------------------------

ROUTER = "gcp:compute/router:Router"
NAT = "gcp:compute/routerNat:RouterNat"
ADDRESS = "gcp:compute/address:Address"
PRIVATE = {"privateNodes": True}


def test_private_nodes_get_a_cloud_router_and_nat_in_their_region() -> None:
    run = infra("dev", {"network": PRIVATE})
    (router,) = run.of_type(ROUTER)
    (nat,) = run.of_type(NAT)
    assert (router.inputs["region"], router.inputs["network"]) == ("us-east5", "default")
    assert nat.inputs["router"] == router.inputs["name"] and nat.inputs["region"] == "us-east5"
    # Every range of every subnet (nodes and Pods), addresses allocated by Google.
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert nat.inputs["natIpAllocateOption"] == "AUTO_ONLY" and not run.of_type(ADDRESS)
    # Kueue's images come through it: its release waits for the NAT.
    assert run.depends_on(run.one(RELEASE), nat)
    assert run.one(CLUSTER).inputs["privateClusterConfig"] == {"enablePrivateNodes": True}


def test_no_nat_with_public_nodes_or_when_the_project_brings_its_own() -> None:
    for network in ({}, {"privateNodes": True, "cloudNat": False}, {"authorizedNetworks": ["10.0.0.0/8"]}):
        run = infra("dev", {"network": network})
        assert not run.of_type(ROUTER) and not run.of_type(NAT), network


def test_one_nat_per_region_of_a_multi_region_stack() -> None:
    run = infra("global", {"network": PRIVATE})
    # The manager (europe-west4) and the europe worker (europe-west4-a) share a region and so a NAT: a second NAT
    # for all ranges in one region's network is refused by Cloud NAT.
    assert sorted(n.inputs["region"] for n in run.of_type(NAT)) == ["asia-northeast1", "europe-west4", "us-east5"]
    assert not run.of_type(ADDRESS)  # no authorized networks: nothing to add to them


# 2. MultiKueue and authorized networks ---------------------------------------------------------------------------


def test_workers_authorize_the_managers_static_egress() -> None:
    authorized = ["10.0.0.0/8"]
    run = infra("global", {"network": {"privateNodes": True, "authorizedNetworks": authorized}})
    (address,) = run.of_type(ADDRESS)
    assert address.inputs["region"] == "europe-west4" and address.inputs["addressType"] == "EXTERNAL"
    nats = {n.inputs["region"]: n.inputs for n in run.of_type(NAT)}
    assert nats["europe-west4"]["natIpAllocateOption"] == "MANUAL_ONLY"
    assert [ip.rsplit("/", 1)[-1] for ip in nats["europe-west4"]["natIps"]] == [address.name]
    assert nats["us-east5"]["natIpAllocateOption"] == "AUTO_ONLY"
    blocks = {c.inputs["name"]: [b["cidrBlock"] for b in c.inputs["masterAuthorizedNetworksConfig"]["cidrBlocks"]]
              for c in run.of_type(CLUSTER)}
    assert blocks.pop("tpu-global-manager") == authorized
    egress = {tuple(b) for b in blocks.values()}
    assert len(blocks) == 3 and len(egress) == 1, blocks
    (worker_blocks,) = egress
    assert worker_blocks[:1] == tuple(authorized) and len(worker_blocks) == 2
    assert worker_blocks[1].endswith("/32") and worker_blocks[1] not in authorized


def refused(overrides: dict[str, Any], stack: str, fragments: list[str]) -> None:
    run = run_program(REPO_ROOT, stack, overrides, raise_errors=False)
    assert isinstance(run.error, ConfigError), repr(run.error)
    assert "\n" not in str(run.error)
    for fragment in fragments:
        assert fragment in str(run.error), str(run.error)
    assert run.resources == []


SHARED_SUBNET = "projects/my-host-proj/regions/us-east5/subnetworks/tpu-subnet"


@pytest.mark.parametrize(("stack", "network", "fragments"), [
    ("global", {"authorizedNetworks": ["10.0.0.0/8"]},
     ["network.authorizedNetworks with multikueue enabled needs network.privateNodes true", "change with each node"]),
    ("global", {"authorizedNetworks": ["10.0.0.0/8"], "privateNodes": True, "cloudNat": False},
     ["network.cloudNat false is invalid with multikueue and network.authorizedNetworks", "set network.cloudNat true"]),
    ("dev", {"cloudNat": True}, ["network.cloudNat", "applies to private nodes only"]),
    ("dev", {"cloudNat": "yes"}, ["network.cloudNat"]),
    ("dev", {"privateNodes": True, "subnetwork": SHARED_SUBNET},
     ["network.cloudNat true is invalid with a Shared VPC network of host project my-host-proj", "cloudNat false"]),
])
def test_egress_that_cannot_work_is_refused_with_the_reason(stack: str, network: dict[str, Any],
                                                             fragments: list[str]) -> None:
    refused({"network": network}, stack, fragments)


# 5. Managed Service for Prometheus, the dashboard, the APIs ---------------------------------------------------

DASHBOARD = "gcp:monitoring/dashboard:Dashboard"


def test_managed_prometheus_is_on_wherever_a_pod_monitoring_is_rendered() -> None:
    run = infra("global")  # kueue.podMonitoring: true
    monitored = {r.provider.split("::")[-2].removesuffix("-k8s") for r in run.resources
                 if r.type == "kubernetes:monitoring.googleapis.com/v1:PodMonitoring"}
    clusters = {c.name: c.inputs for c in run.of_type(CLUSTER)}
    assert monitored == set(clusters) and len(monitored) == 4
    assert all(c["monitoringConfig"] == {"managedPrometheus": {"enabled": True}} for c in clusters.values())
    assert "monitoringConfig" not in infra("dev").one(CLUSTER).inputs  # nothing to scrape: GKE's default kept


def test_no_dashboard_tile_sits_at_a_zero_coordinate_the_api_would_drop() -> None:
    (dashboard,) = infra("global").of_type(DASHBOARD)
    tiles = json.loads(dashboard.inputs["dashboardJson"])["mosaicLayout"]["tiles"]
    assert len(tiles) > 2
    assert all(t.get("xPos", None) != 0 and t.get("yPos", None) != 0 for t in tiles)
    assert {(t.get("xPos", 0), t.get("yPos", 0)) for t in tiles} >= {(0, 0), (24, 0), (0, 16)}


def test_the_multikueue_charts_group_by_the_worker_label_managed_prometheus_keeps() -> None:
    def queries(stack: str, overrides: dict[str, Any] | None = None) -> list[str]:
        (dashboard,) = infra(stack, overrides).of_type(DASHBOARD)
        return [t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
                for t in json.loads(dashboard.inputs["dashboardJson"])["mosaicLayout"]["tiles"]]

    multikueue = [q for q in queries("global") if "multikueue_" in q]
    assert len(multikueue) == 2 and all("by (exported_cluster," in q for q in multikueue)
    single = queries("dev", {"kueue": {"podMonitoring": True}})
    assert single and not [q for q in single if "multikueue_" in q]


def test_iam_and_resource_manager_apis_are_enabled_before_the_node_account_and_its_roles() -> None:
    run = infra("dev")
    services = {s.inputs["service"]: s for s in run.of_type("gcp:projects/service:Service")}
    for api in ("iam.googleapis.com", "cloudresourcemanager.googleapis.com"):
        assert run.depends_on(run.one(ACCOUNT), services[api])
        assert all(run.depends_on(m, services[api]) for m in run.of_type("gcp:projects/iAMMember:IAMMember"))


# 2. The stack waits for each worker's MultiKueueCluster to be Active -------------------------------------------


def test_up_waits_for_every_multikueue_cluster_to_be_active() -> None:
    run = infra("global")
    clusters = [o for o in run.kubernetes_objects() if o["kind"] == "MultiKueueCluster"]
    assert sorted(c["metadata"]["name"] for c in clusters) == ["asia", "europe", "us"]
    for cluster in clusters:
        # pulumi-kubernetes 4.25.0 pkg/metadata/annotations.go (AnnotationWaitFor, AnnotationTimeoutSeconds);
        # await/condition/custom.go reads "condition=Active" as kubectl wait does: condition Active, status True.
        annotations = cluster["metadata"]["annotations"]
        assert annotations["pulumi.com/waitFor"] == "condition=Active"
        assert 60 <= int(annotations["pulumi.com/timeoutSeconds"]) <= 1800
    # The AdmissionCheck and the queues come after the clusters, so a worker that cannot be reached stops `up` there.
    check = next(r for r in run.resources
                 if r.type.endswith(":AdmissionCheck") and r.name.endswith("multikueue-check"))
    for resource in (r for r in run.resources if r.type.endswith(":MultiKueueCluster")):
        assert run.depends_on(check, resource)


# 10. The hardened example stack ------------------------------------------------------------------------------------


def test_the_hardened_example_is_private_authorized_and_uses_no_default_service_account() -> None:
    run = infra("hardened")
    cluster = run.one(CLUSTER).inputs
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True}
    assert [b["cidrBlock"] for b in cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"]] == ["10.0.0.0/8"]
    assert (cluster["network"], cluster["subnetwork"]) == ("tpu-vpc", "tpu-us-east5")
    (nat,) = run.of_type(NAT)
    (router,) = run.of_type(ROUTER)
    assert (router.inputs["network"], nat.inputs["region"]) == ("tpu-vpc", "us-east5")
    # Every VM of the stack runs as the stack's node account: the removed default pool and every pool.
    (account,) = run.of_type(ACCOUNT)
    email = f"{account.inputs['accountId']}@my-gcp-hardened-project.iam.gserviceaccount.com"
    configs = [cluster["nodeConfig"], *(p.inputs["nodeConfig"] for p in run.of_type(NODE_POOL))]
    assert len(configs) == 4 and all(c["serviceAccount"] == email for c in configs)
    assert cluster["monitoringConfig"] == {"managedPrometheus": {"enabled": True}}
    assert run.one(CLUSTER).protect is True


def test_the_offline_plan_renders_the_hardened_example() -> None:
    plan = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "hardened", "--full"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=True).stdout
    assert "tpu-hardened" in plan and "RouterNat" in plan and "10.0.0.0/8" in plan


# 7. The Autopilot manager's Kueue writes nothing into kube-system -------------------------------------------------


def test_the_autopilot_managers_kueue_chart_leaves_kube_system_alone() -> None:
    run = infra("global")  # an Autopilot manager
    values = {r.provider.split("::")[-2].removesuffix("-k8s"): r.inputs["values"] for r in run.of_type(RELEASE)}
    manager = values.pop("tpu-global-manager")
    # Kueue 0.19.2's chart: templates/visibility/role_binding.yaml is its only object in kube-system.
    assert manager["enableVisibilityAuthReaderRoleBinding"] is False
    assert {"name": "VisibilityOnDemand", "enabled": False} in manager["controllerManager"]["featureGates"]
    # The Standard workers keep the chart's default (the binding, and the visibility API).
    assert len(values) == 3
    for worker in values.values():
        assert "enableVisibilityAuthReaderRoleBinding" not in worker
        assert "VisibilityOnDemand" not in {g["name"] for g in worker["controllerManager"]["featureGates"]}
    standard = infra("global", {"multikueue": {"enabled": True, "manager": {"location": "europe-west4-a",
                                                                            "autopilot": False},
                                               "workers": [{"name": "us", "location": "us-east5-b"}]}})
    assert all("enableVisibilityAuthReaderRoleBinding" not in r.inputs["values"]
               for r in standard.of_type(RELEASE))
