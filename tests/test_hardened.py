"""A first `pulumi up` on a hardened GCP project (issue 28), under the mock runtime: private nodes with their
egress, no Compute Engine default service account, the order of first creation, Managed Service for Prometheus,
MultiKueue reachability and credentials, and the jobs stack's provider. Sources are in the code's comments;
what needs the real engine or Kueue is in tests/e2e (test_engine_e2e.py, test_multikueue_e2e.py)."""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import infra
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
