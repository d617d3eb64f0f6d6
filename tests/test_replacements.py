"""Which config changes replace the cluster or a TPU pool (issue 28 item 8), as the offline plan's compare mode reports
them, checked against the provider's schema.

The expectations below are read from the provider's source, not from tpu_fallback/offline/inputs.py: pulumi-gcp 10.2.0
bridges hashicorp/terraform-provider-google-beta >= 8.0.0, read at 93c65b2 (main after the 8.0.0 merge, 2026-08-21) in
google-beta/services/container/resource_container_cluster.go, resource_container_node_pool.go and node_config.go. A
field replaces when the schema marks it ForceNew; a ForceNew block only when it appears or disappears
(terraform-plugin-sdk helper/schema diffList gives a block's ForceNew to its "#" count only).
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

import pulumi_gcp as gcp
import yaml

from tests.conftest import infra
from tpu_fallback.offline import compare, inputs
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun

NODE_POOL, CLUSTER = "gcp:container/nodePool:NodePool", "gcp:container/cluster:Cluster"


def stack_config(stack: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {k.removeprefix("tpu-fallback:"): v for k, v in config.items()}


def changes_of(before: ProgramRun, after: ProgramRun, resource_type: str) -> dict[str, compare.Change]:
    return {c.name: c for c in compare.diff(before, after) if c.type == resource_type}


def fields_of(change: compare.Change) -> dict[str, compare.FieldChange]:
    return {f.key: f for f in change.fields}


HARDENED_NETWORK = stack_config("hardened")["network"]


def test_turning_private_nodes_on_or_off_updates_the_cluster_in_place() -> None:
    # private_cluster_config.enable_private_nodes: Optional, no ForceNew (dropped in v7.13.0, commit b7ffcce "Remove
    # ForceNew for enablePrivateNodes"); the update sends desiredDefaultEnablePrivateNodes.
    assert HARDENED_NETWORK["privateNodes"] is True
    public = infra("hardened", {"network": {**HARDENED_NETWORK, "privateNodes": False}})
    private = infra("hardened")
    for before, after in ((public, private), (private, public)):
        (cluster,) = changes_of(before, after, CLUSTER).values()
        assert cluster.op == "update"
        flag = fields_of(cluster)["privateClusterConfig.enablePrivateNodes"]
        assert flag.replaces is False
        assert {flag.before, flag.after} == {True, compare.MISSING}
        assert changes_of(before, after, NODE_POOL) == {}  # no pool is touched by it
    # The Cloud NAT that private nodes need comes and goes with them (cloudNat defaults to on with private nodes).
    created = {c.type for c in compare.diff(public, private) if c.op == "create"}
    assert {"gcp:compute/router:Router", "gcp:compute/routerNat:RouterNat"} <= created
    text = "\n".join(compare.markdown(compare.diff(public, private), "public", "private"))
    assert "**0 to replace," in text and "is REPLACED" not in text


def test_changing_authorized_networks_updates_the_cluster_in_place() -> None:
    # master_authorized_networks_config: Optional + Computed, no ForceNew; cidr_blocks is a TypeSet without ForceNew,
    # sent through desiredControlPlaneEndpointsConfig.
    wider = {**HARDENED_NETWORK, "authorizedNetworks": [*HARDENED_NETWORK["authorizedNetworks"], "192.168.0.0/16"]}
    (cluster,) = changes_of(infra("hardened"), infra("hardened", {"network": wider}), CLUSTER).values()
    assert cluster.op == "update"
    added = [f for f in cluster.fields if f.key.startswith("masterAuthorizedNetworksConfig.cidrBlocks")]
    assert [f.after for f in added if f.key.endswith("cidrBlock")] == ["192.168.0.0/16"]
    assert not any(f.replaces for f in cluster.fields)


def test_another_vpc_replaces_the_cluster() -> None:
    # network: Optional, Default "default", ForceNew.
    other = {**HARDENED_NETWORK, "network": "other-vpc"}
    changes = compare.diff(infra("hardened"), infra("hardened", {"network": other}))
    (cluster,) = [c for c in changes if c.type == CLUSTER]
    assert cluster.op == "replace"
    assert fields_of(cluster)["network"].replaces is True
    text = "\n".join(compare.markdown(changes, "before", "after"))
    assert f"cluster `{cluster.name}` is REPLACED** (network)" in text


def test_more_slices_add_pools_or_resize_one_in_place() -> None:
    dev = stack_config("dev")
    more = dev["onDemand"]["maxSlices"] + 1
    # A multi-host slice (4x4) gets a pool of its own: one more slice is one more pool, the running one is untouched.
    changes = [c for c in compare.diff(infra("dev"), infra("dev", {"onDemand": {**dev["onDemand"], "maxSlices": more}}))
               if c.type == NODE_POOL]
    assert [c.op for c in changes] == ["create"]
    assert changes[0].name.endswith(f"{dev['onDemand']['name']}-{more}")
    # Single-host slices (2x2) share one pool, which grows: autoscaling.max_node_count is Optional without ForceNew
    # (nodePoolUpdate's "autoscaling" branch).
    small = {"tpu": {"type": "v6e", "topology": "2x2"}}
    pools = changes_of(infra("dev", small),
                       infra("dev", {**small, "onDemand": {**dev["onDemand"], "maxSlices": more}}), NODE_POOL)
    (pool,) = pools.values()
    assert pool.op == "update"
    size = fields_of(pool)["autoscaling.maxNodeCount"]
    assert (size.before, size.after, size.replaces) == (dev["onDemand"]["maxSlices"], more, False)


def test_secure_boot_replaces_every_tpu_pool_and_only_them() -> None:
    # node_config.shielded_instance_config.enable_secure_boot: Optional, ForceNew (node_config.go).
    pools = changes_of(infra("dev"), infra("dev", {"secureBoot": False}), NODE_POOL)
    dev = stack_config("dev")
    assert sorted(pools) == sorted(name for name in (r.name for r in infra("dev").resources if r.type == NODE_POOL)
                                   if name.endswith((dev["onDemand"]["name"], dev["flexStart"]["name"])))
    assert len(pools) == 2  # plan A's and plan B's pools; the system pool keeps secure boot
    for pool in pools.values():
        assert pool.op == "replace"
        boot = fields_of(pool)["nodeConfig.shieldedInstanceConfig.enableSecureBoot"]
        assert (boot.before, boot.after, boot.replaces) == (True, False, True)


def test_a_reservation_replaces_plan_a() -> None:
    # node_config.reservation_affinity and its consume_reservation_type, key and values: all ForceNew.
    dev = stack_config("dev")
    pools = changes_of(infra("dev"), infra("dev", {"onDemand": {**dev["onDemand"], "reservation": "my-res"}}),
                       NODE_POOL)
    (pool,) = pools.values()
    assert pool.op == "replace"
    fields = fields_of(pool)
    kind = fields["nodeConfig.reservationAffinity.consumeReservationType"]
    assert (kind.before, kind.after, kind.replaces) == ("NO_RESERVATION", "SPECIFIC_RESERVATION", True)
    assert fields["nodeConfig.reservationAffinity.values"].replaces is True


def test_a_single_host_slice_becoming_multi_host_adds_the_placement_block_and_replaces_the_pools() -> None:
    # placement_policy: a ForceNew block, so adding it (a 2x2 slice has none, a 4x4 slice has one) replaces the pool
    # though its own type and tpu_topology are not ForceNew.
    pools = changes_of(infra("dev", {"tpu": {"type": "v6e", "topology": "2x2"}}), infra("dev"), NODE_POOL)
    assert len(pools) == 2
    for pool in pools.values():
        assert pool.op == "replace"
        topology = fields_of(pool)["placementPolicy.tpuTopology"]
        assert (topology.before, topology.after, topology.replaces) == (compare.MISSING, "4x4", True)
        kind = fields_of(pool)["placementPolicy.type"]  # not in the pool's replaceOnChanges: the block's own reason
        assert (kind.before, kind.after, kind.replaces) == (compare.MISSING, "COMPACT", True)
        assert kind.why == "the block `placementPolicy` is added"


def test_a_new_topology_needs_a_new_pool_which_only_replace_on_changes_makes() -> None:
    # placement_policy.tpu_topology: Optional, not ForceNew, and resourceContainerNodePoolUpdate has no
    # placement_policy branch: the provider plans an in-place update that never reaches GKE, unless the program asks
    # for the replacement with replaceOnChanges, which the TPU pools do (and delete first: the name is reused).
    before, after = infra("dev"), infra("dev", {"tpu": {"type": "v6e", "topology": "2x4"}})
    pools = changes_of(before, after, NODE_POOL)
    assert len(pools) == 2
    options = {r.name: r.options for r in after.resources if r.type == NODE_POOL}
    for pool in pools.values():
        assert "placementPolicy.tpuTopology" in options[pool.name].get("replaceOnChanges", [])
        assert options[pool.name].get("deleteBeforeReplace") is True
        assert pool.op == "replace"
        topology = fields_of(pool)["placementPolicy.tpuTopology"]
        assert (topology.before, topology.after, topology.replaces, topology.why) == ("4x4", "2x4", True, "")
    text = "\n".join(compare.markdown(compare.diff(before, after), "before", "after"))
    assert "only through replaceOnChanges" not in text
    assert "is REPLACED**" in text


def test_without_replace_on_changes_compare_says_the_topology_change_would_not_reach_gke() -> None:
    # The same change on a pool without the option (as the pools were before it): flagged on the line.
    # Copies: infra() caches its runs for the other tests.
    before = copy.deepcopy(infra("dev"))
    after = copy.deepcopy(infra("dev", {"tpu": {"type": "v6e", "topology": "2x4"}}))
    for run in (before, after):
        for r in run.resources:
            if r.type == NODE_POOL:
                r.options.pop("replaceOnChanges", None)
    pools = changes_of(before, after, NODE_POOL)
    for pool in pools.values():
        assert "without replaceOnChanges" in fields_of(pool)["placementPolicy.tpuTopology"].why
    text = "\n".join(compare.markdown(compare.diff(before, after), "before", "after"))
    assert "REPLACED only through replaceOnChanges, which it does not set" in text


def test_a_removed_block_is_told_apart_from_a_changed_field() -> None:
    removed = inputs.block_added_or_removed(NODE_POOL, "placementPolicy.type", {"placementPolicy.type", "name"},
                                            {"name"})
    assert removed == "placementPolicy"
    # Both sides have the block: a change inside it goes by the field alone.
    assert inputs.block_added_or_removed(NODE_POOL, "placementPolicy.tpuTopology",
                                         {"placementPolicy.tpuTopology"}, {"placementPolicy.tpuTopology"}) is None
    # privateClusterConfig is not a ForceNew block (Optional + Computed, DiffSuppressFunc only).
    assert inputs.block_added_or_removed(CLUSTER, "privateClusterConfig.enablePrivateNodes", set(),
                                         {"privateClusterConfig.enablePrivateNodes"}) is None


def _sdk_names(resource_type: str) -> set[str]:
    """Every argument name (snake_case) of the pulumi-gcp resource and of its nested Args classes."""
    module_name, class_name = resource_type.split(":")[1].split("/")[0], resource_type.split(":")[-1]
    module = getattr(gcp, module_name)
    names = set(inspect.signature(getattr(module, class_name)._internal_init).parameters)
    for attr in dir(module):
        if attr.startswith(class_name) and attr.endswith("Args") and not attr.endswith("ArgsDict"):
            names |= set(inspect.signature(getattr(module, attr).__init__).parameters)
    return names


def test_every_listed_field_is_an_argument_of_the_installed_pulumi_gcp() -> None:
    tables = (inputs.FORCES_REPLACEMENT, inputs.FORCED_WHEN_ADDED_OR_REMOVED, inputs.NOT_UPDATED_IN_PLACE)
    checked = 0
    for table in tables:
        for resource_type, paths in table.items():
            names = _sdk_names(resource_type)
            for path in paths:
                for step in path.split("."):
                    snake = re.sub(r"(?<!^)([A-Z])", r"_\1", step).lower()
                    assert snake in names, f"{resource_type}: {path} ({snake}) is no pulumi-gcp argument"
                    checked += 1
    assert checked > 50
