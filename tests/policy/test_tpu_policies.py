"""Each guard rail of tpu_fallback/policy/checks.py on passing and failing resources, without the Pulumi CLI."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tpu_fallback.policy.checks import (
    CLUSTER,
    HELM_CHART_V4,
    HELM_RELEASE,
    NODE_POOL,
    POLICIES,
    STACK,
    UNKNOWN,
    Context,
    Resource,
    UnknownValueError,
    check_flex_start_pool,
    check_kubeconfig_is_secret,
    check_kueue_chart_pinned,
    check_on_demand_quota,
    check_production_cluster,
    check_tpu_pool_scales_to_zero,
    chips_per_vm,
    evaluate,
    is_production,
    on_demand_capacity,
    quantity,
)

CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
KUBECONFIG = "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    exec: {command: gke-gcloud-auth-plugin}"


def tpu_pool(plan: str = "on-demand", machine_type: str = "ct6e-standard-4t", max_nodes: float = 4.0,
             **extra: Any) -> dict[str, Any]:
    """A TPU pool as the mock runtime records it (camelCase, integers as floats)."""
    props: dict[str, Any] = {
        "name": f"{plan}-pool",
        "initialNodeCount": 0.0,
        "autoscaling": {"minNodeCount": 0.0, "maxNodeCount": max_nodes},
        "nodeConfig": {
            "machineType": machine_type,
            "labels": {"tpu-fallback/plan": plan},
            "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"},
        },
        "placementPolicy": {"type": "COMPACT", "tpuTopology": "4x4"},
        "management": {"autoRepair": True, "autoUpgrade": True},
    }
    if plan == "flex-start":
        props["nodeConfig"]["flexStart"] = True
        props["nodeConfig"]["labels"]["cloud.google.com/gke-queued"] = "true"
        props["autoscaling"]["locationPolicy"] = "ANY"
        props["queuedProvisioning"] = {"enabled": True}
        props["management"] = {"autoRepair": False, "autoUpgrade": True}
    props.update(extra)
    return props


def cluster_queue(on_demand_tpu: Any = 16, flavor: str = "on-demand") -> dict[str, Any]:
    def resources(cpu: Any, memory: str, tpu: Any) -> list[dict[str, Any]]:
        return [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory},
                {"name": "google.com/tpu", "nominalQuota": tpu}]

    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cluster-queue"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory", "google.com/tpu"],
                "flavors": [
                    {"name": "default-cpu", "resources": resources(10, "20Gi", 0)},
                    {"name": flavor, "resources": resources(40, "75Gi", on_demand_tpu)},
                    {"name": "dws", "resources": resources(1000000000, "1000000000Gi", 1000000000)},
                ],
            }],
        },
    }


# --------------------------------------------------------------------------------------------
# a. tpu-pools-scale-to-zero
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("props", [
    tpu_pool(),
    tpu_pool("flex-start"),
    tpu_pool(initialNodeCount=None),
    tpu_pool(autoscaling={"totalMinNodeCount": 0.0, "totalMaxNodeCount": 4.0}),
    tpu_pool(machine_type="ct5lp-hightpu-1t", placementPolicy=None),
])
def test_tpu_pools_that_scale_to_zero_pass(props: dict[str, Any]) -> None:
    assert check_tpu_pool_scales_to_zero(NODE_POOL, {k: v for k, v in props.items() if v is not None}) == []


def test_non_tpu_pools_and_other_types_are_not_checked() -> None:
    system = {"name": "default-pool", "nodeCount": 1.0, "nodeConfig": {"machineType": "n2-standard-16"}}
    assert check_tpu_pool_scales_to_zero(NODE_POOL, system) == []
    assert check_tpu_pool_scales_to_zero(NODE_POOL, {"name": "gke-default", "nodeCount": 3.0}) == []
    assert check_tpu_pool_scales_to_zero(CLUSTER, tpu_pool(initialNodeCount=4.0)) == []


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"autoscaling": {"minNodeCount": 1.0, "maxNodeCount": 4.0}}, "autoscaling.minNodeCount = 1"),
    ({"autoscaling": {"maxNodeCount": 4.0}}, "sets no autoscaling.minNodeCount"),
    ({"autoscaling": {"totalMinNodeCount": 4.0, "totalMaxNodeCount": 4.0}}, "totalMinNodeCount = 4"),
    ({"autoscaling": None}, "has no autoscaling"),
    ({"initialNodeCount": 4.0}, "initialNodeCount = 4"),
    ({"nodeCount": 2.0}, "nodeCount = 2"),
])
def test_tpu_pools_that_keep_nodes_fail(changes: dict[str, Any], fragment: str) -> None:
    props = {k: v for k, v in tpu_pool(**changes).items() if v is not None}
    problems = check_tpu_pool_scales_to_zero(NODE_POOL, props)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_an_unknown_machine_type_is_not_judged() -> None:
    props = tpu_pool()
    props["nodeConfig"]["machineType"] = UNKNOWN
    with pytest.raises(UnknownValueError, match=r"nodeConfig\.machineType"):
        check_tpu_pool_scales_to_zero(NODE_POOL, props)


# --------------------------------------------------------------------------------------------
# b. flex-start-pools-are-queued
# --------------------------------------------------------------------------------------------


def test_a_proper_flex_start_pool_passes() -> None:
    assert check_flex_start_pool(NODE_POOL, tpu_pool("flex-start")) == []


def test_pools_without_flex_start_are_not_checked() -> None:
    assert check_flex_start_pool(NODE_POOL, tpu_pool("on-demand")) == []  # auto-repair on, no queue: fine
    assert check_flex_start_pool(CLUSTER, {"nodeConfig": {"flexStart": True}}) == []


def _flex(mutate: str) -> dict[str, Any]:
    props = tpu_pool("flex-start")
    node_config = props["nodeConfig"]
    if mutate == "no-queue":
        del props["queuedProvisioning"]
    elif mutate == "queue-off":
        props["queuedProvisioning"] = {"enabled": False}
    elif mutate == "auto-repair":
        props["management"] = {"autoRepair": True, "autoUpgrade": True}
    elif mutate == "no-management":
        del props["management"]
    elif mutate == "reservation":
        node_config["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                              "key": "compute.googleapis.com/reservation-name", "values": ["r"]}
    elif mutate == "no-affinity":
        del node_config["reservationAffinity"]
    elif mutate == "spot":
        node_config["spot"] = True
    elif mutate == "preemptible":
        node_config["preemptible"] = True
    return props


@pytest.mark.parametrize(("mutate", "fragment"), [
    ("no-queue", "queuedProvisioning.enabled = true"),
    ("queue-off", "queuedProvisioning.enabled = true"),
    ("auto-repair", "management.autoRepair = false"),
    ("no-management", "management.autoRepair = false"),
    ("reservation", "not 'SPECIFIC_RESERVATION'"),
    ("no-affinity", "NO_RESERVATION, not None"),
    ("spot", "nodeConfig.spot"),
    ("preemptible", "nodeConfig.preemptible"),
])
def test_misconfigured_flex_start_pools_fail(mutate: str, fragment: str) -> None:
    problems = check_flex_start_pool(NODE_POOL, _flex(mutate))
    assert len(problems) == 1 and fragment in problems[0], problems


# --------------------------------------------------------------------------------------------
# c. on-demand-quota-within-capacity
# --------------------------------------------------------------------------------------------


def R(type_: str, props: dict[str, Any], name: str = "") -> Resource:  # noqa: N802 - reads like a constructor
    return Resource(type_, props, name=name, urn=f"urn:pulumi:dev::tpu-fallback::{type_}::{name or 'r'}")


def test_chips_and_quantities() -> None:
    assert chips_per_vm("ct6e-standard-4t") == 4
    assert chips_per_vm("ct5lp-hightpu-8t") == 8
    assert chips_per_vm("ct5p-hightpu-4t") == 4
    assert chips_per_vm("n2-standard-16") is None
    assert quantity(16) == 16 and quantity(16.0) == 16 and quantity("16") == 16
    assert quantity("1e9") == 1e9 and quantity("20Gi") == 20 * 2**30 and quantity("500m") == 0.5
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity("lots")


def test_quota_equal_to_one_slice_passes() -> None:
    resources = [R(NODE_POOL, tpu_pool(), "plan-a"), R(NODE_POOL, tpu_pool("flex-start"), "plan-b"),
                 R(CLUSTER_QUEUE, cluster_queue(16.0), "cq")]
    assert check_on_demand_quota(resources) == []


def test_capacity_sums_the_on_demand_pools_only() -> None:
    resources = [
        R(NODE_POOL, tpu_pool(), "a1"),
        R(NODE_POOL, tpu_pool(name="on-demand-pool-2"), "a2"),
        R(NODE_POOL, tpu_pool("flex-start", max_nodes=4.0), "b1"),  # never on-demand capacity
        R(NODE_POOL, {"name": "default-pool", "nodeCount": 1.0, "nodeConfig": {"machineType": "n2-standard-16"}}),
    ]
    assert on_demand_capacity(resources) == (32.0, [])
    assert check_on_demand_quota([*resources, R(CLUSTER_QUEUE, cluster_queue(32))]) == []
    assert len(check_on_demand_quota([*resources, R(CLUSTER_QUEUE, cluster_queue(33))])) == 1


def test_single_host_pools_count_nodes_times_chips() -> None:
    pool = tpu_pool(machine_type="ct5lp-hightpu-8t", max_nodes=2.0)
    assert on_demand_capacity([R(NODE_POOL, pool)]) == (16.0, [])


@pytest.mark.parametrize("quota", [32, 32.0, "32", "1e9", 1000000000])
def test_quota_above_capacity_fails(quota: Any) -> None:
    queue = R(CLUSTER_QUEUE, cluster_queue(quota), "cq")
    findings = check_on_demand_quota([R(NODE_POOL, tpu_pool(), "plan-a"), queue])
    assert len(findings) == 1
    assert findings[0].urn == queue.urn
    assert "ClusterQueue cluster-queue" in findings[0].message and "exceeds the 16 chips" in findings[0].message


def test_a_queue_without_on_demand_pools_has_no_on_demand_capacity() -> None:
    findings = check_on_demand_quota([R(NODE_POOL, tpu_pool("flex-start")), R(CLUSTER_QUEUE, cluster_queue(16))])
    assert len(findings) == 1 and "exceeds the 0 chips" in findings[0].message


def test_without_a_cluster_queue_there_is_nothing_to_check() -> None:
    assert check_on_demand_quota([R(NODE_POOL, tpu_pool(max_nodes=0.0))]) == []


def test_a_stack_without_node_pools_cannot_be_checked() -> None:
    # Existing-cluster mode: the pools are another stack's, so their capacity is unknown here.
    assert check_on_demand_quota([R(CLUSTER_QUEUE, cluster_queue(16))]) == []


def test_other_flavors_and_api_versions() -> None:
    pools = [R(NODE_POOL, tpu_pool())]
    assert check_on_demand_quota([*pools, R(CLUSTER_QUEUE, cluster_queue(64, flavor="spot"))]) == []
    v1beta1 = "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue"
    assert len(check_on_demand_quota([*pools, R(v1beta1, cluster_queue(64))])) == 1


def test_unreadable_quota_and_unknown_chips_are_reported() -> None:
    findings = check_on_demand_quota([R(NODE_POOL, tpu_pool()), R(CLUSTER_QUEUE, cluster_queue("lots"))])
    assert len(findings) == 1 and "unreadable" in findings[0].message
    odd = R(NODE_POOL, tpu_pool(machine_type="n2-standard-16"), "odd")
    findings = check_on_demand_quota([odd, R(CLUSTER_QUEUE, cluster_queue(0))])
    assert [f.urn for f in findings] == [odd.urn]
    assert "names no TPU chip count" in findings[0].message


# --------------------------------------------------------------------------------------------
# d. production-cluster-protected
# --------------------------------------------------------------------------------------------

GKE = {"name": "tpu-prod", "deletionProtection": True, "location": "us-east5-b"}


@pytest.mark.parametrize(("stack", "production"), [
    ("prod", True), ("production", True), ("prod-eu", True), ("prod_us", True), ("production.eu", True),
    ("dev", False), ("preprod", False), ("product-demo", False), ("", False),
])
def test_production_stack_names(stack: str, production: bool) -> None:
    assert is_production(stack, {}) is production


def test_a_protected_production_cluster_passes() -> None:
    assert check_production_cluster(CLUSTER, GKE, protect=True, stack="prod") == []
    without_flag = {k: v for k, v in GKE.items() if k != "deletionProtection"}  # pulumi-gcp defaults it to true
    assert check_production_cluster(CLUSTER, without_flag, protect=True, stack="prod") == []


def test_non_production_clusters_are_not_checked() -> None:
    assert check_production_cluster(CLUSTER, {**GKE, "deletionProtection": False}, protect=False, stack="dev") == []
    assert check_production_cluster(NODE_POOL, {}, protect=False, stack="prod") == []


@pytest.mark.parametrize(("props", "protect", "fragments"), [
    ({**GKE, "deletionProtection": False}, True, ["deletionProtection = true, not False"]),
    (GKE, False, ["protect=True"]),
    ({**GKE, "deletionProtection": False}, False, ["deletionProtection", "protect=True"]),
])
def test_unprotected_production_clusters_fail(props: dict[str, Any], protect: bool, fragments: list[str]) -> None:
    problems = check_production_cluster(CLUSTER, props, protect=protect, stack="prod")
    assert len(problems) == len(fragments)
    for problem, fragment in zip(problems, fragments, strict=True):
        assert fragment in problem


def test_a_production_label_makes_any_stack_production() -> None:
    labelled = {**GKE, "resourceLabels": {"environment": "production"}}
    assert len(check_production_cluster(CLUSTER, labelled, protect=False, stack="dev")) == 1
    staging = {**GKE, "resourceLabels": {"environment": "staging"}}
    assert check_production_cluster(CLUSTER, staging, protect=False, stack="dev") == []


def test_the_production_pattern_is_configurable() -> None:
    assert check_production_cluster(CLUSTER, GKE, protect=False, stack="live", production_stacks=r"^live$") != []
    assert check_production_cluster(CLUSTER, GKE, protect=False, stack="prod", production_stacks=r"^live$") == []


# --------------------------------------------------------------------------------------------
# e. kubeconfig-is-secret
# --------------------------------------------------------------------------------------------


def test_secret_kubeconfigs_pass() -> None:
    assert check_kubeconfig_is_secret(STACK, {"clusterName": "c", "kubeconfig": KUBECONFIG}, {"kubeconfig"}) == []
    provider = {"kubeconfig": KUBECONFIG, "clusterIdentifier": "projects/p/locations/z/clusters/c"}
    assert check_kubeconfig_is_secret("pulumi:providers:kubernetes", provider, ["kubeconfig"]) == []
    secret = {"metadata": {"name": "worker-1"}, "data": {"kubeconfig": "YXBpVmVyc2lvbjogdjEK\nLi4u"}}
    assert check_kubeconfig_is_secret("kubernetes:core/v1:Secret", secret, {"data"}) == []  # an enclosing secret
    assert check_kubeconfig_is_secret("kubernetes:core/v1:Secret", secret, {"."}) == []  # all props secret


def test_plain_kubeconfigs_fail() -> None:
    problems = check_kubeconfig_is_secret(STACK, {"clusterName": "c", "kubeconfig": KUBECONFIG}, set())
    assert len(problems) == 1 and problems[0].startswith("stack output kubeconfig holds a kubeconfig")
    config_map = {"metadata": {"name": "w"}, "data": {"workerKubeconfig": KUBECONFIG}}
    problems = check_kubeconfig_is_secret("kubernetes:core/v1:ConfigMap", config_map, set())
    assert len(problems) == 1 and "property data.workerKubeconfig" in problems[0]
    json_config = {"spec": {"clusters": [{"kube_config": '{"apiVersion": "v1", "kind": "Config"}'}]}}
    problems = check_kubeconfig_is_secret("x:y:Z", json_config, {"spec.clusters[1]"})
    assert len(problems) == 1 and "spec.clusters[0].kube_config" in problems[0]
    assert check_kubeconfig_is_secret(STACK, {"kubeconfig": UNKNOWN}, set()) != []  # its secrecy is known


def test_references_to_kubeconfigs_are_not_credentials() -> None:
    multikueue_cluster = {"spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "w1"}}}}
    assert check_kubeconfig_is_secret("kubernetes:kueue.x-k8s.io/v1beta2:MultiKueueCluster",
                                      multikueue_cluster, set()) == []
    assert check_kubeconfig_is_secret("pulumi:providers:kubernetes", {"kubeconfig": "~/.kube/config"}, set()) == []
    assert check_kubeconfig_is_secret(STACK, {"kubeconfig": ""}, set()) == []
    assert check_kubeconfig_is_secret(STACK, {"kubeconfigPath": KUBECONFIG}, set()) == []  # not named like one


# --------------------------------------------------------------------------------------------
# f. kueue-chart-pinned
# --------------------------------------------------------------------------------------------

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"


def test_a_pinned_kueue_chart_passes() -> None:
    assert check_kueue_chart_pinned(HELM_RELEASE, {"chart": KUEUE_CHART, "version": "0.19.2"}) == []
    assert check_kueue_chart_pinned(HELM_CHART_V4, {"chart": KUEUE_CHART, "version": "0.19.2"}) == []
    assert check_kueue_chart_pinned(HELM_RELEASE, {"chart": "kueue", "version": "0.19.2",
                                                   "repositoryOpts": {"repo": "https://example.invalid"}}) == []


def test_other_charts_are_not_checked() -> None:
    assert check_kueue_chart_pinned(HELM_RELEASE, {"chart": "oci://registry.k8s.io/jobset/charts/jobset"}) == []
    assert check_kueue_chart_pinned("kubernetes:core/v1:ConfigMap", {"chart": KUEUE_CHART}) == []


@pytest.mark.parametrize("version", [None, "", "latest", "0.19", "~0.19.2", "^0.19.0", ">=0.19.0", "0.19.x",
                                     "v0.19.2", "0.19.2 || 0.20.0", 0.19])
def test_unpinned_kueue_charts_fail(version: Any) -> None:
    props = {"chart": KUEUE_CHART} if version is None else {"chart": KUEUE_CHART, "version": version}
    problems = check_kueue_chart_pinned(HELM_RELEASE, props)
    assert len(problems) == 1 and "pin an exact x.y.z" in problems[0]


# --------------------------------------------------------------------------------------------
# The whole pack as data
# --------------------------------------------------------------------------------------------


def test_policy_names_are_unique_and_each_has_one_kind() -> None:
    names = [p.name for p in POLICIES]
    assert len(names) == len(set(names)) == 6
    for spec in POLICIES:
        assert (spec.resource_check is None) != (spec.stack_check is None), spec.name


def test_evaluate_names_the_policy_and_the_resource() -> None:
    bad_pool = R(NODE_POOL, tpu_pool(initialNodeCount=4.0), "plan-a")
    bad_cluster = Resource(CLUSTER, GKE, name="c", urn="urn:c", protect=False)
    stack = Resource(STACK, {"kubeconfig": KUBECONFIG}, urn="urn:stack")
    unpinned = R(HELM_RELEASE, {"chart": KUEUE_CHART, "version": "0.19"}, "kueue")
    flex = R(NODE_POOL, _flex("spot"), "plan-b")
    queue = R(CLUSTER_QUEUE, cluster_queue(64), "cq")
    violations = evaluate([bad_pool, flex, bad_cluster, stack, unpinned, queue], Context(stack="prod"))
    assert {(v.policy, v.urn) for v in violations} == {
        ("tpu-pools-scale-to-zero", bad_pool.urn),
        ("flex-start-pools-are-queued", flex.urn),
        ("on-demand-quota-within-capacity", queue.urn),
        ("production-cluster-protected", "urn:c"),
        ("kubeconfig-is-secret", "urn:stack"),
        ("kueue-chart-pinned", unpinned.urn),
    }
    assert evaluate([bad_cluster], Context(stack="dev")) == []


def test_checks_do_not_modify_their_input() -> None:
    props = tpu_pool("flex-start")
    before = copy.deepcopy(props)
    evaluate([R(NODE_POOL, props), R(CLUSTER_QUEUE, cluster_queue())], Context(stack="prod"))
    assert props == before
