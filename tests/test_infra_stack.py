"""The infrastructure program under Pulumi's mock runtime, running the real __main__.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.model.settings import GKE_VERSION
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, RecordedResource, run_program

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
ACCOUNT = "gcp:serviceaccount/account:Account"
IAM_MEMBER = "gcp:projects/iAMMember:IAMMember"
SERVICE = "gcp:projects/service:Service"


def pool(run: ProgramRun, name: str) -> dict[str, Any]:
    return next(r.inputs for r in run.of_type(NODE_POOL) if r.inputs["name"] == name)


def cloud_resources(run: ProgramRun) -> list[RecordedResource]:
    return [r for r in run.resources if r.custom and r.type.startswith("gcp:")]


def test_dev_graph_holds_exactly_the_tutorial_cloud_resources(dev: ProgramRun) -> None:
    kinds = sorted(
        (r.type, r.inputs.get("name") or r.inputs.get("role") or r.inputs.get("accountId", ""))
        for r in cloud_resources(dev)
    )
    assert kinds == sorted([
        (CLUSTER, "tpu-cluster"),
        (NODE_POOL, "default-pool"),
        (NODE_POOL, "on-demand-pool"),
        (NODE_POOL, "dws-pool"),
        (ACCOUNT, "tpu-cluster-nodes"),
        (IAM_MEMBER, "roles/container.defaultNodeServiceAccount"),
        (IAM_MEMBER, "roles/artifactregistry.reader"),
        # Beyond the tutorial's gcloud commands: what a fresh project needs for image streaming with a custom
        # node service account (GKE "Use Image streaming", requirements).
        (IAM_MEMBER, "roles/serviceusage.serviceUsageConsumer"),
        (SERVICE, ""), (SERVICE, ""), (SERVICE, ""), (SERVICE, ""), (SERVICE, ""),
    ])
    assert sorted(r.inputs["service"] for r in dev.of_type(SERVICE)) == [
        "cloudresourcemanager.googleapis.com", "compute.googleapis.com", "container.googleapis.com",
        "containerfilesystem.googleapis.com", "iam.googleapis.com"]


def test_cluster_flags(dev: ProgramRun) -> None:
    c = dev.one(CLUSTER).inputs
    # The tutorial's --cluster-version=1.34 reached end of life on 2026-10-01: the oldest minor GKE offers now.
    assert c["minMasterVersion"] == GKE_VERSION
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    assert c["location"] == "us-east5-b"  # --location=${ZONE}
    assert c["project"] == "my-gcp-project"
    assert c["addonsConfig"]["rayOperatorConfigs"] == [{"enabled": True}]  # --addons=RayOperator
    assert c["nodePoolDefaults"]["nodeConfigDefaults"]["gcfsConfig"] == {"enabled": True}  # --enable-image-streaming
    assert c["workloadIdentityConfig"] == {"workloadPool": "my-gcp-project.svc.id.goog"}
    assert c["enableShieldedNodes"] is True
    assert c["deletionProtection"] is False  # the dev stack
    assert c["removeDefaultNodePool"] is True
    assert "enableTpu" not in c  # legacy TPU Nodes


def test_system_pool_flags(dev: ProgramRun) -> None:
    p = pool(dev, "default-pool")
    assert p["nodeConfig"]["machineType"] == "n2-standard-16"  # --machine-type=n2-standard-16
    assert p["nodeConfig"]["gcfsConfig"] == {"enabled": True}
    assert p["nodeConfig"]["serviceAccount"] == "tpu-cluster-nodes@my-gcp-project.iam.gserviceaccount.com"
    assert p["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert p["nodeCount"] == 1


@pytest.mark.parametrize("name", ["on-demand-pool", "dws-pool"])
def test_tpu_pool_common_flags(dev: ProgramRun, name: str) -> None:
    p = pool(dev, name)
    assert p["nodeConfig"]["machineType"] == "ct6e-standard-4t"  # --machine-type=ct6e-standard-4t
    assert p["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}  # --tpu-topology=4x4
    assert p["initialNodeCount"] == 0  # --num-nodes=0
    assert p["autoscaling"]["minNodeCount"] == 0 and p["autoscaling"]["maxNodeCount"] == 4  # --min/max-nodes
    assert "totalMaxNodeCount" not in p["autoscaling"]
    assert p["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert p["nodeConfig"]["gcfsConfig"] == {"enabled": True}
    assert p["cluster"] == "tpu-cluster" and p["location"] == "us-east5-b"


def test_on_demand_pool_is_plain(dev: ProgramRun) -> None:
    p = pool(dev, "on-demand-pool")
    assert "queuedProvisioning" not in p
    assert "flexStart" not in p["nodeConfig"]
    assert "cloud.google.com/gke-queued" not in p["nodeConfig"]["labels"]


def test_flex_start_pool(dev: ProgramRun) -> None:
    p = pool(dev, "dws-pool")
    assert p["queuedProvisioning"] == {"enabled": True}  # --enable-queued-provisioning
    assert p["nodeConfig"]["flexStart"] is True  # --flex-start
    assert p["management"] == {"autoRepair": False, "autoUpgrade": True}
    assert p["autoscaling"]["locationPolicy"] == "ANY"
    assert p["nodeConfig"]["labels"]["cloud.google.com/gke-queued"] == "true"
    assert "spot" not in p["nodeConfig"] and "maxRunDuration" not in p["nodeConfig"]


def test_node_service_account_roles(dev: ProgramRun) -> None:
    members = {r.inputs["role"]: r.inputs["member"] for r in dev.of_type(IAM_MEMBER)}
    assert set(members.values()) == {"serviceAccount:tpu-cluster-nodes@my-gcp-project.iam.gserviceaccount.com"}


def test_pools_depend_on_the_cluster_and_never_on_each_other(dev: ProgramRun) -> None:
    cluster = dev.one(CLUSTER)
    pools = dev.of_type(NODE_POOL)
    assert len(pools) == 3
    for p in pools:
        assert dev.depends_on(p, cluster), p.name
        for other in pools:
            if other is not p:
                assert not dev.depends_on(p, other), f"{p.name} waits for {other.name}"


def test_outputs_contract(dev: ProgramRun) -> None:
    assert set(dev.outputs) == {
        "clusterName", "clusterLocation", "clusterEndpoint", "kubeconfig", "systemPool", "nodePools", "tpu",
        "kueueNamespace", "kueueVersion", "clusterQueue", "localQueues", "flavors", "systemQuota", "tpuFlavors",
        "elasticJobs",
    }
    assert dev.outputs["systemQuota"] == {"cpu": "10", "memory": "20Gi"}  # the tutorial's default-cpu quota
    assert dev.secret_outputs == {"kubeconfig"}
    assert dev.outputs["clusterName"] == "tpu-cluster"
    assert dev.outputs["clusterLocation"] == "us-east5-b"
    assert dev.outputs["systemPool"] == "default-pool"
    assert dev.outputs["nodePools"] == {"onDemand": ["on-demand-pool"], "flexStart": ["dws-pool"]}
    assert dev.outputs["tpu"] == {
        "type": "v6e", "machineType": "ct6e-standard-4t", "topology": "4x4", "acceleratorLabel": "tpu-v6e-slice",
        "chipsPerHost": 4, "hostsPerSlice": 4, "chipsPerSlice": 16,
    }


def test_kubeconfig_uses_the_auth_plugin(dev: ProgramRun) -> None:
    import yaml

    kubeconfig = yaml.safe_load(dev.outputs["kubeconfig"])
    user = kubeconfig["users"][0]["user"]
    assert user["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert user["exec"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert user["exec"]["provideClusterInfo"] is True
    assert "token" not in user
    cluster = kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"] == f"https://{dev.outputs['clusterEndpoint']}"
    assert cluster["certificate-authority-data"]


def test_provider_is_built_from_the_kubeconfig_with_a_cluster_identifier(dev: ProgramRun) -> None:
    provider = dev.one("pulumi:providers:kubernetes")
    assert provider.inputs["clusterIdentifier"].startswith("projects/my-gcp-project/locations/us-east5-b/clusters/")
    assert "kubeconfig" in provider.secret_inputs


def test_tpu_output_and_pool_size_follow_the_topology() -> None:
    run = infra("dev", {"tpu": {"type": "v6e", "topology": "4x8"}})
    assert run.outputs["tpu"]["hostsPerSlice"] == 8 and run.outputs["tpu"]["chipsPerSlice"] == 32
    for name in ("on-demand-pool", "dws-pool"):
        p = pool(run, name)
        assert p["autoscaling"]["maxNodeCount"] == 8
        assert p["placementPolicy"]["tpuTopology"] == "4x8"


def test_single_host_slices_have_no_placement_policy() -> None:
    run = infra("dev", {"tpu": {"type": "v5e", "topology": "2x2"}, "location": "us-west4-a"})
    for name in ("on-demand-pool", "dws-pool"):
        p = pool(run, name)
        assert "placementPolicy" not in p
        assert p["nodeConfig"]["machineType"] == "ct5lp-hightpu-4t"
        assert p["autoscaling"]["maxNodeCount"] == 1


def test_more_multi_host_slices_get_more_pools() -> None:
    run = infra("dev", {"onDemand": {"maxSlices": 2}})
    assert run.outputs["nodePools"]["onDemand"] == ["on-demand-pool", "on-demand-pool-2"]
    assert all(pool(run, n)["autoscaling"]["maxNodeCount"] == 4 for n in run.outputs["nodePools"]["onDemand"])


def test_named_reservation_and_run_duration() -> None:
    run = infra("dev", {"onDemand": {"reservation": "my-v6e-reservation"}, "flexStart": {"maxRunDuration": "86400s"}})
    assert pool(run, "on-demand-pool")["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["my-v6e-reservation"],
    }
    # Queued provisioning takes the run time from the ProvisioningRequest, not from the pool (GKE DWS docs).
    assert "maxRunDuration" not in pool(run, "dws-pool")["nodeConfig"]
    config = next(o for o in run.kubernetes_objects() if o["kind"] == "ProvisioningRequestConfig")
    assert config["spec"]["parameters"] == {"maxRunDurationSeconds": "86400"}
    assert pool(run, "dws-pool")["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == "NO_RESERVATION"


def test_flex_start_disabled_has_no_plan_b_pool() -> None:
    run = infra("dev", {"flexStart": {"enabled": False}})
    assert sorted(p.inputs["name"] for p in run.of_type(NODE_POOL)) == ["default-pool", "on-demand-pool"]
    assert not [r for r in run.resources if r.name.endswith("plan-b")]
    assert run.outputs["nodePools"]["flexStart"] == []


def test_prod_is_hardened() -> None:
    run = infra("prod")
    cluster = run.one(CLUSTER)
    assert cluster.protect is True
    assert cluster.inputs["deletionProtection"] is True
    assert run.outputs["nodePools"]["onDemand"] == ["on-demand-pool", "on-demand-pool-2"]
    config = next(o for o in run.kubernetes_objects() if o["kind"] == "ProvisioningRequestConfig")
    assert config["spec"]["parameters"] == {"maxRunDurationSeconds": "604800"}


@pytest.mark.parametrize(("overrides", "fragment"), [
    ({"tpu": {"type": "v7"}}, "tpu.type"),
    ({"tpu": {"topology": "3x3"}}, "tpu.topology"),
    ({"onDemand": {"maxSlices": -1}}, "onDemand.maxSlices"),
    ({"location": "us-east5"}, "location"),
    ({"clusterName": "Bad_Name"}, "clusterName"),
    ({"gkeVersion": "1.30"}, "gkeVersion"),
    ({"kueue": {"version": "latest"}}, "kueue.version"),
    ({"onDemand": {"name": "dws-pool"}}, "unique"),
    ({"gcp:project": None}, "gcp:project"),
])
def test_bad_config_registers_nothing(overrides: dict[str, Any], fragment: str) -> None:
    from tpu_fallback.model.validation import ConfigError

    run = run_program(REPO_ROOT, "dev", overrides, raise_errors=False)
    assert isinstance(run.error, ConfigError)
    assert fragment in str(run.error)
    assert run.resources == []


def test_offline_plan_renders_the_dev_stack(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "dev", "--out", str(out)],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "not a diff against live state" in result.stdout
    text = (out / "summary.md").read_text()
    assert "gcp:container/cluster:Cluster" in text and "dws-pool" in text
    assert "kubeconfig: [secret]" in text
    assert "gke-gcloud-auth-plugin" not in text  # the kubeconfig is masked everywhere


def test_offline_plan_reports_a_bad_stack(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (project / "__main__.py").write_text((REPO_ROOT / "__main__.py").read_text())
    (project / "Pulumi.bad.yaml").write_text(
        "config:\n  gcp:project: my-project\n  tpu-fallback:tpu:\n    type: v6e\n    topology: 3x3\n")
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "bad", "--project", str(project),
                             "--out", str(tmp_path / "out")],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert 'configuration error: tpu.topology "3x3" is invalid' in result.stderr
    assert "0 resources were registered" in result.stderr


def test_offline_plan_output_is_stable() -> None:
    """Registration order depends on threads; the rendered YAML and summary must not (reviewers diff them)."""
    from tpu_fallback.offline.plan import kubernetes_yaml, summary

    first, second = (run_program(REPO_ROOT, "global") for _ in range(2))
    assert kubernetes_yaml(first) == kubernetes_yaml(second)
    assert summary(first) == summary(second)


def test_the_plan_flags_what_would_replace_a_running_pool(dev: ProgramRun) -> None:
    from tpu_fallback.offline.plan import summary

    text = summary(dev)
    on_demand = text.split("tpu-cluster-plan-a-on-demand-pool", 1)[1].split("###", 1)[0]
    assert 'placementPolicy.tpuTopology = "4x4"  # changing it REPLACES the resource' in on_demand
    assert "initialNodeCount = 0  # ignored after creation (ignore_changes)" in on_demand
    assert 'nodeConfig.machineType = "ct6e-standard-4t"\n' in on_demand  # updated in place by GKE
