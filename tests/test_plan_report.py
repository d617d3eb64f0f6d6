"""The offline plan's reviewer report (issue 17): capacity and concurrency, list-price cost, the resource tree, the
diagram, compare mode, and the Kubernetes YAML's shape (per cluster, block scalars, masked Secrets).

Expected figures are computed here from the catalog, the stack files and prices.yaml, not taken from the report.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tpu_fallback.model import catalog
from tpu_fallback.offline import compare, prices, report, stacks, tree
from tpu_fallback.offline.mockrun import MOCK_CA, MOCK_ENDPOINT, REPO_ROOT, ProgramRun, run_program
from tpu_fallback.offline.plan import infra_review, kubernetes_yaml, kubernetes_yaml_by_cluster, pr_report, summary

PRICES = yaml.safe_load((REPO_ROOT / "tpu_fallback" / "offline" / "prices.yaml").read_text())
V6E_4X4 = catalog.resolve_slice("v6e", "4x4")
GIB = 2**30
# One Ray job on the system flavor: the head's request (2 CPU / 4Gi in every example) + KubeRay's submitter
# (500m / 200Mi, measured by the end-to-end test; no example job is elastic, so no autoscaler sidecar).
JOB_SYSTEM_CPU, JOB_SYSTEM_MEMORY = Decimal(2) + Decimal("0.5"), 4 * GIB + 200 * 2**20


def stack_file(stack: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    return config


def price(section: str, *path: str, region: str) -> Decimal | None:
    entry: Any = PRICES[section]
    for key in path:
        entry = entry[key]
    value = (entry.get("regions") or {}).get(region, entry.get("default"))
    return None if value is None else Decimal(str(value))


def stack_report(stack: str) -> report.StackReport:
    settings = stacks.infra_settings(REPO_ROOT, stack)
    return report.stack_report(settings, stacks.job_shapes(stack, settings)[0])


def system_jobs(cpu: int, memory_gib: int) -> int:
    return min(int(cpu // JOB_SYSTEM_CPU), memory_gib * GIB // JOB_SYSTEM_MEMORY)


# --------------------------------------------------------------------------------------------
# Capacity and concurrency
# --------------------------------------------------------------------------------------------


def test_dev_capacity_and_concurrency() -> None:
    config = stack_file("dev")
    chips = V6E_4X4.chips_per_slice  # 4x4 = 16 chips on 4 ct6e-standard-4t hosts of 4 chips
    assert (V6E_4X4.hosts_per_slice, V6E_4X4.chips_per_host) == (4, 4)
    (cluster,) = stack_report("dev").clusters
    plan_a, plan_b = config["tpu-fallback:onDemand"], config["tpu-fallback:flexStart"]
    assert [(p.name, p.plan, p.slices, p.chips) for p in cluster.pools] == [
        (plan_a["name"], "on-demand", 1, plan_a["maxSlices"] * chips),
        (plan_b["name"], "flex-start", 1, plan_b["maxSlices"] * chips),
    ]
    quotas = {f.flavor.name: f.flavor.quota for f in cluster.flavors}
    assert list(quotas) == ["default-cpu", "on-demand", "dws"]
    # The tutorial's on-demand quota: 10 cpu and 18.75Gi per host of plan A's one 4-host slice.
    assert quotas["on-demand"] == {"cpu": 40, "memory": "75Gi", "google.com/tpu": chips}
    assert quotas["dws"]["google.com/tpu"] == 10**9  # the tutorial's unlimited plan B
    assert [(p.plan, p.runs) for p in cluster.plans] == [("on-demand", 1), ("flex-start", 1)]
    assert cluster.system_quota_jobs == system_jobs(10, 20) == 4
    assert cluster.machine_jobs == min(16 // JOB_SYSTEM_CPU, 64 * GIB // JOB_SYSTEM_MEMORY) == 6  # n2-standard-16
    assert cluster.at_once == 2 and "TPU capacity" in cluster.limit


def test_prod_capacity_and_concurrency() -> None:
    config = stack_file("prod")
    on_demand, flex = config["tpu-fallback:onDemand"]["maxSlices"], config["tpu-fallback:flexStart"]["maxSlices"]
    (cluster,) = stack_report("prod").clusters
    chips = V6E_4X4.chips_per_slice
    assert [p.name for p in cluster.pools] == ["on-demand-pool", "on-demand-pool-2",
                                               "dws-pool", "dws-pool-2", "dws-pool-3", "dws-pool-4"]
    assert {p.plan: p.chips for p in cluster.plans} == {"on-demand": on_demand * chips, "flex-start": flex * chips}
    flavors = {f.flavor.name: f.flavor.quota for f in cluster.flavors}
    assert list(flavors) == ["default-cpu", "on-demand", "on-demand-2", "dws", "dws-2", "dws-3", "dws-4"]
    # queues.quotas.onDemand (80 / 150Gi) shared by plan A's two pools; capFlexStart: each dws flavor is its pool.
    as_text = {name: {k: str(v) for k, v in quota.items()} for name, quota in flavors.items()}
    assert as_text["on-demand-2"] == {"cpu": "40", "memory": "75Gi", "google.com/tpu": str(chips)}
    host = V6E_4X4.machine  # ct6e-standard-4t: 180 vCPU / 720 GiB, 4 hosts a slice
    assert as_text["dws-4"] == {"cpu": str(host.vcpus * 4), "memory": f"{host.memory_gib * 4}Gi",
                                "google.com/tpu": str(chips)}
    assert {p.plan: p.runs for p in cluster.plans} == {"on-demand": on_demand, "flex-start": flex}
    quota = config["tpu-fallback:queues"]["quotas"]["system"]
    assert cluster.system_quota_jobs == system_jobs(quota["cpu"], int(quota["memory"].removesuffix("Gi"))) == 8
    nodes = config["tpu-fallback:systemPool"]["nodeCount"]
    assert cluster.machine_jobs == nodes * min(16 // JOB_SYSTEM_CPU, 64 * GIB // JOB_SYSTEM_MEMORY) == 12
    assert cluster.at_once == min(on_demand + flex, 8, 12) == 6
    assert "TPU capacity" in cluster.limit and "CPU quota" not in cluster.limit  # TPUs bind first


def test_global_capacity_and_concurrency() -> None:
    config = stack_file("global")
    rep = stack_report("global")
    manager, *workers = rep.clusters
    assert manager.role == "manager" and manager.settings is None and manager.autopilot
    flex = config["tpu-fallback:flexStart"]["maxSlices"]
    expected = {}
    for w in config["tpu-fallback:multikueue"]["workers"]:
        has_b = (w.get("flexStart") or {}).get("enabled", True)
        tpu_jobs = 1 + (flex if has_b else 0)
        expected[f"tpu-global-{w['name']}"] = min(tpu_jobs, system_jobs(10, 20))
    assert {c.name: c.at_once for c in workers} == expected == {"tpu-global-europe": 1, "tpu-global-us": 3,
                                                                "tpu-global-asia": 3}
    assert rep.at_once == 7
    europe = workers[0]
    assert [f.flavor.name for f in europe.flavors] == ["default-cpu", "on-demand"]  # no v6e flex-start there
    us = workers[1]
    assert [f.flavor.name for f in us.flavors] == ["default-cpu", "on-demand", "dws", "dws-2"]
    assert [f.admits for f in us.flavors] == [4, 1, 1, None]  # the last dws flavor is unlimited


# --------------------------------------------------------------------------------------------
# Cost
# --------------------------------------------------------------------------------------------


def test_dev_cost_from_the_price_table() -> None:
    table = prices.load()
    (cluster,) = stack_report("dev").clusters
    cost = report.cluster_cost(cluster, table)
    region = "us-east5"  # us-east5-b
    fee = price("gke", "clusterFee", region=region)
    node = price("machines", "n2-standard-16", region=region)
    chip = price("tpu", "v6e", "onDemand", region=region)
    assert fee is not None and node is not None and chip is not None
    assert cost.idle.value == fee + node and not cost.idle.missing
    assert cost.plans["on-demand"].value == 16 * chip == Decimal("43.20")
    assert cost.job["on-demand"].value == 16 * chip
    assert price("tpu", "v6e", "flexStart", region=region) is None  # not verified: said so, no number
    assert cost.plans["flex-start"].missing and cost.full.value == fee + node + 16 * chip
    text = "\n".join(report.cost_markdown(stack_report("dev"), table))
    assert "list prices, not a bill" in text
    assert f"| `tpu-cluster` | us-east5 | {prices.money(fee + node)} | $43.20 | n/a | ≥ $44.08 |" in text


def test_prod_and_global_cost() -> None:
    table = prices.load()
    (prod,) = stack_report("prod").clusters
    cost = report.cluster_cost(prod, table)
    chip = price("tpu", "v6e", "onDemand", region="us-east5")
    node = price("machines", "n2-standard-16", region="us-east5")
    fee = price("gke", "clusterFee", region="us-east5")
    assert chip is not None and node is not None and fee is not None
    assert cost.idle.value == fee + 2 * node  # two system nodes
    assert cost.plans["on-demand"].value == 2 * 16 * chip
    costs = [report.cluster_cost(c, table) for c in stack_report("global").clusters]
    regions = {c.cluster.name: c.cluster.region for c in costs}
    assert regions == {"tpu-global-manager": "europe-west4", "tpu-global-europe": "europe-west4",
                       "tpu-global-us": "us-east5", "tpu-global-asia": "asia-northeast1"}
    idle = sum((c.idle.value for c in costs), Decimal(0))
    workers = ("europe-west4", "us-east5", "asia-northeast1")
    expected = 4 * fee + sum(price("machines", "n2-standard-16", region=r) or Decimal(0) for r in workers)
    assert idle == expected
    assert costs[0].idle.missing  # the Autopilot manager's pods have no verified price
    for worker in costs[1:]:  # v6e is priced per region: each worker's 16 on-demand chips at its region's price
        regional = price("tpu", "v6e", "onDemand", region=worker.cluster.region)
        assert regional is not None and worker.plans["on-demand"].value == 16 * regional


def test_a_price_file_overrides_the_table(tmp_path: Path) -> None:
    override = tmp_path / "prices.yaml"
    override.write_text("tpu:\n  v6e:\n    flexStart:\n      regions: {us-east5: 1.5}\n      source: my-quote\n")
    table = prices.load(override)
    (cluster,) = stack_report("dev").clusters
    cost = report.cluster_cost(cluster, table)
    assert cost.plans["flex-start"].value == 16 * Decimal("1.5") and not cost.full.missing
    assert table.tpu("v6e", "on-demand", "us-east5").value == Decimal("2.70")  # the rest of the table is kept
    bad = tmp_path / "bad.yaml"
    bad.write_text("tpu:\n  v6e:\n    onDemand: {default: cheap}\n")
    with pytest.raises(prices.PriceTableError, match="non-negative number"):
        prices.load(bad)


def test_every_price_names_a_source_and_unverified_ones_say_so() -> None:
    for section in ("tpu", "machines", "gke"):
        for entry in _entries(PRICES[section]):
            assert entry.get("source") in PRICES["sources"], entry
            if entry.get("default") is None and not entry.get("regions"):
                assert "not" in entry.get("note", ""), entry  # "not verified", "no flex-start"
    for source in PRICES["sources"].values():
        assert source.get("url", "").startswith("https://"), source
    assert PRICES["checked"] == "2026-12-01"


def _entries(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict) and ("default" in node or "regions" in node):
        return [node]
    return [e for v in node.values() for e in _entries(v)] if isinstance(node, dict) else []


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


def _parents(lines: list[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(type, name) -> its parent's (type, name), read back from the drawing."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    stack: list[tuple[str, str]] = []
    for line in lines:
        if line.startswith("pulumi:pulumi:Stack"):
            stack = [("pulumi:pulumi:Stack", line.split()[-1])]
            continue
        match = re.match(r"^((?:[│ ] {2})*)(?:├─|└─) (\S+)  (\S+)", line)
        if not match:
            continue
        depth = len(match.group(1)) // 3 + 1
        stack = stack[:depth]
        found[(match.group(2), match.group(3))] = stack[-1]
        stack.append((match.group(2), match.group(3)))
    return found


def test_the_tree_shows_every_resource_under_its_parent(dev: ProgramRun) -> None:
    drawn = _parents(tree.tree_lines(dev, "tpu-cluster"))
    by_urn = {r.urn: r for r in dev.resources}
    root = ("pulumi:pulumi:Stack", "tpu-fallback-dev")
    in_cluster = [r for r in dev.resources if r.type != "gcp:projects/service:Service" and r.name != "tpu-cluster-apis"]
    assert {(r.type, r.name) for r in in_cluster} == set(drawn)  # everything but the project's APIs
    for r in in_cluster:
        parent = by_urn.get(r.parent)
        assert drawn[(r.type, r.name)] == ((parent.type, parent.name) if parent else root), r.name
    assert drawn[("gcp:container/nodePool:NodePool", "tpu-cluster-plan-a-on-demand-pool")] == (
        "tpu-fallback:tpu:TpuNodePool", "tpu-cluster-plan-a")
    assert drawn[("tpu-fallback:tpu:TpuNodePool", "tpu-cluster-plan-a")] == (
        "tpu-fallback:platform:TpuPlatform", "tpu-cluster")
    assert drawn[("gcp:container/cluster:Cluster", "tpu-cluster")] == ("tpu-fallback:cluster:GkeCluster", "tpu-cluster")
    project = _parents(tree.tree_lines(dev, tree.PROJECT_WIDE))
    # The APIs, under the Platform component that holds them (drawn as their ancestor).
    assert {name for _, name in project} == {"tpu-cluster", "tpu-cluster-apis", "tpu-cluster-apis-compute",
                                             "tpu-cluster-apis-container", "tpu-cluster-apis-containerfilesystem",
                                             "tpu-cluster-apis-iam", "tpu-cluster-apis-cloudresourcemanager"}


def test_the_tree_shows_key_settings_and_computed_values_as_unknown(dev: ProgramRun) -> None:
    text = "\n".join(tree.tree_markdown(dev))
    assert "flavors in order: default-cpu → on-demand → dws" in text
    assert "check dws-prov on dws" in text
    assert 'nodeLabels={"cloud.google.com/gke-nodepool": "on-demand-pool"}' in text
    assert "quota: cpu=40, memory=75Gi, google.com/tpu=16" in text
    whole = summary(dev) + text
    for fake in (MOCK_ENDPOINT, MOCK_CA, "@my-gcp-project.iam.gserviceaccount.com", "clusters/tpu-cluster\"",
                 "tpu-cluster-k8s-id"):
        assert fake not in whole, fake
    assert "endpoint=(known after apply)" in text and "serviceAccount=(known after apply)" in text
    assert '- clusterEndpoint: "(known after apply)"' in summary(dev)


def test_global_tree_is_grouped_by_cluster() -> None:
    run = infra("global")
    where = tree.clusters_of(run)
    for r in run.resources:
        if r.type.startswith("kubernetes:"):
            provider = r.provider.split("::")[-2].removesuffix("-k8s")
            assert where[r.urn] == provider, r.name
    access = next(r for r in run.resources if r.name == "tpu-global-manager-us-access")
    assert where[access.urn] == tree.MANY  # its token lives on the worker, its kubeconfig Secret on the manager
    text = "\n".join(tree.tree_markdown(run))
    for cluster in ("tpu-global-manager", "tpu-global-europe", "tpu-global-us", "tpu-global-asia"):
        assert f"### Cluster `{cluster}`" in text


# --------------------------------------------------------------------------------------------
# The diagram
# --------------------------------------------------------------------------------------------


def _mermaid(text: str) -> tuple[dict[str, str], set[tuple[str, str, str]]]:
    nodes = dict(re.findall(r'^\s+(\w+)\["([^"]*)"\]$', text, re.M))
    edges = {(a, b, label or "") for a, label, b in re.findall(r'^\s+(\w+) -->(?:\|"([^"]*)"\|)? (\w+)$', text, re.M)}
    return nodes, edges


def test_dev_diagram_nodes_and_edges() -> None:
    text = report.diagram(stack_report("dev")).mermaid()
    assert text.startswith("```mermaid\nflowchart LR") and text.endswith("```")
    nodes, edges = _mermaid(text)
    c = "tpu_cluster"
    assert nodes[f"{c}_lq_default_user_queue"] == "LocalQueue default/user-queue"
    assert nodes[f"{c}_cq"] == "ClusterQueue cluster-queue"
    assert nodes[f"{c}_pool_on_demand_pool"].startswith("plan A: on-demand-pool")
    assert nodes[f"{c}_pool_dws_pool"].startswith("plan B: dws-pool<br/>DWS flex-start")
    assert {(f"{c}_lq_default_user_queue", f"{c}_cq", ""),
            (f"{c}_cq", f"{c}_flavor_default_cpu", "1"),
            (f"{c}_cq", f"{c}_flavor_on_demand", "2"),
            (f"{c}_cq", f"{c}_flavor_dws", "3 · dws-prov"),
            (f"{c}_flavor_default_cpu", f"{c}_pool_default_pool", ""),
            (f"{c}_flavor_on_demand", f"{c}_pool_on_demand_pool", ""),
            (f"{c}_flavor_dws", f"{c}_pool_dws_pool", ""),
            (f"{c}_kueue", f"{c}_pool_default_pool", "runs on")} == edges
    assert all(a in nodes and b in nodes for a, b, _ in edges)


def test_global_diagram_shows_the_manager_dispatching_to_the_workers() -> None:
    text = report.diagram(stack_report("global")).mermaid()
    nodes, edges = _mermaid(text)
    assert 'subgraph c_tpu_global_manager["manager tpu-global-manager (europe-west4, Autopilot)"]' in text
    dispatch = {(a, b, label) for a, b, label in edges if a == "tpu_global_manager_mkconfig"}
    assert dispatch == {("tpu_global_manager_mkconfig", f"tpu_global_{w}_lq_default_user_queue",
                         f"MultiKueueCluster {w}") for w in ("europe", "us", "asia")}
    assert "tpu_global_europe_flavor_dws" not in nodes and "tpu_global_us_flavor_dws_2" in nodes
    assert all(a in nodes and b in nodes for a, b, _ in edges)


# --------------------------------------------------------------------------------------------
# Compare mode
# --------------------------------------------------------------------------------------------


def test_a_topology_change_replaces_the_pools() -> None:
    changes = compare.diff(infra("dev"), infra("dev", {"tpu": {"type": "v6e", "topology": "2x4"}}))
    pools = {c.name: c for c in changes if c.type == "gcp:container/nodePool:NodePool"}
    assert set(pools) == {"tpu-cluster-plan-a-on-demand-pool", "tpu-cluster-plan-b-dws-pool"}
    for change in pools.values():
        assert change.op == "replace"
        topology = next(f for f in change.fields if f.key == "placementPolicy.tpuTopology")
        assert (topology.before, topology.after, topology.replaces) == ("4x4", "2x4", True)
        size = next(f for f in change.fields if f.key == "autoscaling.maxNodeCount")
        assert (size.before, size.after, size.replaces) == (4, 2, False)
    text = "\n".join(compare.markdown(changes, "before", "after"))
    assert "**2 to replace," in text
    assert "node pool `tpu-cluster-plan-a-on-demand-pool` (cluster `tpu-cluster`) is REPLACED" in text


def test_a_quota_change_is_an_update() -> None:
    changes = compare.diff(infra("dev"), infra("dev", {"queues": {"quotas": {"system": {"cpu": 20,
                                                                                         "memory": "40Gi"}}}}))
    assert [(c.op, c.name) for c in changes] == [("update", "tpu-cluster-queues-cluster-queue")]
    fields = {f.key: (f.before, f.after, f.replaces) for f in changes[0].fields}
    assert fields == {
        "spec.resourceGroups[0].flavors[default-cpu].resources[cpu].nominalQuota": ("10", "20", False),
        "spec.resourceGroups[0].flavors[default-cpu].resources[memory].nominalQuota": ("20Gi", "40Gi", False),
    }


def test_compare_against_a_git_revision_and_a_config_file(tmp_path: Path) -> None:
    changed = tmp_path / "dev.yaml"
    changed.write_text((REPO_ROOT / "Pulumi.dev.yaml").read_text().replace("topology: 4x4", "topology: 2x4"))
    out = tmp_path / "plan"
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "dev", "--stack-file", str(changed),
                             "--compare-rev", "HEAD", "--quiet", "--out", str(out)],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    text = (out / "compare.md").read_text()
    assert "## Changes from `dev` at `HEAD` to `dev`" in text
    assert "`placementPolicy.tpuTopology`: \"4x4\" → \"2x4\"  **forces replacement**" in text
    report_md = (out / "report.md").read_text()
    assert "## Capacity and concurrency" in report_md and "```mermaid" in report_md and "REPLACED" in report_md
    same = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "dev", "--compare-file",
                           str(REPO_ROOT / "Pulumi.dev.yaml"), "--quiet", "--out", str(tmp_path / "same")],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert same.returncode == 0, same.stderr
    assert "No differences." in (tmp_path / "same" / "compare.md").read_text()


# --------------------------------------------------------------------------------------------
# Kubernetes YAML and the report's size
# --------------------------------------------------------------------------------------------


def test_multi_cluster_yaml_is_split_per_cluster_and_secrets_stay_valid() -> None:
    run = infra("global")
    split = kubernetes_yaml_by_cluster(run)
    assert set(split) == {"tpu-global-manager", "tpu-global-europe", "tpu-global-us", "tpu-global-asia"}
    everything = list(yaml.safe_load_all(kubernetes_yaml(run)))
    per_cluster = {c: list(yaml.safe_load_all(text)) for c, text in split.items()}
    assert sum(len(v) for v in per_cluster.values()) == len(everything)
    manager_kinds = {o["kind"] for o in per_cluster["tpu-global-manager"]}
    assert {"MultiKueueConfig", "MultiKueueCluster"} <= manager_kinds
    assert "MultiKueueConfig" not in {o["kind"] for o in per_cluster["tpu-global-us"]}
    secrets = [o for o in everything if o["kind"] == "Secret" and ("data" in o or "stringData" in o)]
    assert secrets
    for secret in secrets:
        assert isinstance(secret.get("data", {}), dict) and isinstance(secret.get("stringData", {}), dict)
        assert set(secret.get("stringData", {}).values()) <= {"[secret]"}
        assert {base64.b64decode(v).decode() for v in secret.get("data", {}).values()} <= {"[secret]"}
    assert {s["metadata"]["name"] for s in secrets if "stringData" in s} == {
        "multikueue-europe", "multikueue-us", "multikueue-asia"}
    assert all(set(s["stringData"]) == {"kubeconfig"} for s in secrets if "stringData" in s)


def test_scripts_are_block_scalars() -> None:
    from tests.test_jobs_stack import jobs_run

    text = kubernetes_yaml(jobs_run())
    assert "  train.py: |" in text
    (config_map,) = [o for o in yaml.safe_load_all(text) if o["kind"] == "ConfigMap"]
    assert config_map["data"]["train.py"] == (REPO_ROOT / "tpu_fallback" / "training" / "train.py").read_text()


def test_the_pr_report_fits_a_comment() -> None:
    run = infra("global")
    review = infra_review(REPO_ROOT, "global", prices.load())
    text = pr_report(run, review)
    assert len(text) <= 65536
    assert text.index("## Capacity and concurrency") < text.index("## Cost per hour") < text.index("```mermaid")
    small = pr_report(run, review, limit=20000)
    assert len(small) <= 20000 and "did not fit" in small


def test_the_summary_keeps_the_reviewers_sections_first(tmp_path: Path) -> None:
    run = run_program(REPO_ROOT, "dev")
    text = summary(run, infra_review(REPO_ROOT, "dev", prices.load()))
    order = [text.index(s) for s in ("## Capacity and concurrency", "## Cost per hour", "## Diagram",
                                     "## Cloud resources", "## Stack outputs", "## Resource tree")]
    assert order == sorted(order)
    assert "**At once on this cluster: 2 jobs**" in text
