"""TpuNodePool: the node pools of one rung of the capacity ladder (tpu_fallback.model.ladder): on-demand (plan A), DWS
flex-start (plan B), a specific reservation, or spot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from tpu_fallback.components.cluster import CLOUD_PLATFORM_SCOPE
from tpu_fallback.model.capacity import PoolShape, pool_layout, workload_policy_name
from tpu_fallback.model.catalog import TpuSlice, workload_policy
from tpu_fallback.model.labels import PLAN_LABEL, QUEUED_LABEL, SPOT_LABEL
from tpu_fallback.model.ladder import FLEX_START, KINDS, ON_DEMAND, RESERVATION, SPOT


@dataclass(frozen=True)
class TpuNodePoolArgs:
    project: str
    cluster_name: pulumi.Input[str]
    location: str
    plan: str  # the rung's kind: ON_DEMAND, FLEX_START, RESERVATION or SPOT
    base_name: str
    tpu: TpuSlice
    max_slices: int
    node_service_account: pulumi.Input[str]
    reservation: str | None = None  # a specific reservation to consume (a reservation rung; plan A's optional one)
    secure_boot: bool = True  # Shielded VM secure boot (changing it replaces the pools: GKE cannot update it)


class TpuNodePool(pulumi.ComponentResource):
    shapes: tuple[PoolShape, ...]
    pools: list[gcp.container.NodePool]

    def __init__(self, name: str, args: TpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:tpu:TpuNodePool", name, None, opts)
        if args.plan not in KINDS.values():
            raise ValueError(f"plan must be one of {', '.join(KINDS.values())}, not {args.plan!r}")
        if args.plan == RESERVATION and not args.reservation:
            raise ValueError("a reservation rung's pools need the reservation's name")
        self.shapes = pool_layout(args.base_name, args.tpu, args.max_slices)
        # The workload policy a multi-host slice of a WORKLOAD_POLICY family (TPU7x) is placed by; None otherwise.
        # Annotated here, not in the class body: Pulumi resolves a component's class annotations at registration,
        # and that would import pulumi_gcp.compute (≈1 CPU-second) in every program.
        self.policy: gcp.compute.ResourcePolicy | None = _workload_policy(name, args, self) if self.shapes else None
        self.pools = [
            gcp.container.NodePool(
                f"{name}-{shape.name}", **_pool_arguments(args, shape, self.policy),
                # initialNodeCount forces a new pool, and GKE reports a manually resized pool's count there:
                # never replace a running TPU pool over it. A new topology needs a new pool, but the provider neither
                # replaces the pool for placement_policy.tpu_topology (not ForceNew) nor sends it in an update
                # (resource_container_node_pool.go: no placement_policy branch; tpu_fallback/offline/inputs.py
                # NOT_UPDATED_IN_PLACE): replaceOnChanges asks for the new pool. The pool keeps its name, which GKE
                # holds until the old pool is gone, so a replacement deletes first (create-first would fail: 409).
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount"],
                                            replace_on_changes=["placementPolicy.tpuTopology"],
                                            delete_before_replace=True),
            )
            for shape in self.shapes
        ]
        self.register_outputs({"poolNames": [shape.name for shape in self.shapes]})

    @property
    def names(self) -> list[str]:
        return [shape.name for shape in self.shapes]


def _workload_policy(name: str, args: TpuNodePoolArgs, parent: pulumi.Resource) -> gcp.compute.ResourcePolicy | None:
    """A multi-host TPU7x slice is shaped by a workload policy, not by placementPolicy.tpuTopology: GKE "About Ironwood
    (TPU7x) in GKE" (https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood): "You create a workload
    policy and then apply it by using the --placement-policy flag. This policy replaces the --tpu-topology flag";
    "Ironwood (TPU7x) supports the High throughput workload policy". One policy serves every pool of the rung (they
    share the topology), as Google's xpk shares one per topology (src/xpk/core/nodepool.py,
    ensure_resource_policy_exists: `gcloud compute resource-policies create workload-policy --region=<the zone's
    region> --type=HIGH_THROUGHPUT --accelerator-topology=<topology>`) and cluster-toolkit one per node-pool module
    (modules/compute/resource-policy with `region`, examples/gke-tpu-7x)."""
    policy = workload_policy(args.tpu.family, args.tpu.topology)
    if policy is None:
        return None
    cluster = pulumi.Output.from_input(args.cluster_name)
    return gcp.compute.ResourcePolicy(
        f"{name}-workload-policy",
        name=cluster.apply(lambda cluster_name: workload_policy_name(cluster_name, args.base_name,
                                                                       args.tpu.topology)),
        project=args.project,
        # GKE's API (NodePool.PlacementPolicy.policy_name): "The resource policy must be in the same project and region
        # as the node pool"; the pools live in one zone of that region.
        region=args.location.rsplit("-", 1)[0],
        # pulumi-gcp 10.2.0 ResourcePolicyWorkloadPolicyArgs: type HIGH_THROUGHPUT or HIGH_AVAILABILITY;
        # accelerator_topology "can be set only when the workload policy type is HIGH_THROUGHPUT".
        workload_policy={"type": policy["type"], "accelerator_topology": policy["acceleratorTopology"]},
        opts=pulumi.ResourceOptions(parent=parent),
    )


def _pool_arguments(args: TpuNodePoolArgs, shape: PoolShape,
                    policy: gcp.compute.ResourcePolicy | None = None) -> dict[str, Any]:
    flex = args.plan == FLEX_START
    labels = {PLAN_LABEL: args.plan}
    if flex:
        labels[QUEUED_LABEL] = "true"
    if args.reservation and args.plan in (ON_DEMAND, RESERVATION):
        # pulumi-gcp NodePoolNodeConfigReservationAffinity: "To target a SPECIFIC_RESERVATION by name, specify
        # "compute.googleapis.com/reservation-name" as the key and specify the name of your reservation as its value";
        # SPECIFIC_RESERVATION "Must consume from a specific reservation" (no fall back to on-demand capacity, so the
        # next rung is what a full reservation falls back to). GKE Standard node pools consume a specific reservation
        # this way: https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations.
        reservation: dict[str, Any] = {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [args.reservation],
        }
    else:
        reservation = {"consume_reservation_type": "NO_RESERVATION"}

    node_config: dict[str, Any] = {
        "machine_type": args.tpu.machine_type,
        "service_account": args.node_service_account,
        "oauth_scopes": [CLOUD_PLATFORM_SCOPE],
        "workload_metadata_config": {"mode": "GKE_METADATA"},
        "gcfs_config": {"enabled": True},
        "labels": labels,
        "reservation_affinity": reservation,
        "shielded_instance_config": {"enable_secure_boot": args.secure_boot, "enable_integrity_monitoring": True},
    }
    autoscaling: dict[str, Any] = {"min_node_count": 0, "max_node_count": shape.max_nodes}
    arguments: dict[str, Any] = {
        "name": shape.name,
        "project": args.project,
        "cluster": args.cluster_name,
        "location": args.location,
        "initial_node_count": 0,
        "autoscaling": autoscaling,
        "node_config": node_config,
    }
    if policy is not None:
        # TPU7x: the node pool names its workload policy (gcloud --placement-policy = placementPolicy.policyName).
        # pulumi-gcp requires placement_policy.type, whose only value is COMPACT ("Supports a single value: COMPACT");
        # cluster-toolkit's TPU7x pools, on the same Terraform schema, pass type COMPACT, the policy's name and the
        # topology as tpu_topology (modules/compute/resource-policy/outputs.tf placement_policy,
        # modules/compute/gke-node-pool/main.tf). xpk's gcloud command passes the policy alone (no --placement-type,
        # no --tpu-topology); the schema leaves no such choice here.
        arguments["placement_policy"] = {"type": "COMPACT", "policy_name": policy.name,
                                         "tpu_topology": args.tpu.topology}
    elif args.tpu.multi_host:
        # COMPACT placement with the topology is what makes GKE build one ICI-connected slice.
        arguments["placement_policy"] = {"type": "COMPACT", "tpu_topology": args.tpu.topology}
    if args.plan == SPOT:
        # Spot VMs (pulumi-gcp NodePoolNodeConfig.spot: "Whether the nodes are created as spot VM instances"). GKE
        # labels the nodes cloud.google.com/gke-spot=true; the taint is the pool's own (a Standard pool gets none unless
        # it asks: https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms), so only pods that tolerate it (jobs
        # with `preemptible: true`) run here; the spot flavor declares the same taint for Kueue.
        node_config["spot"] = True
        node_config["taints"] = [{"key": SPOT_LABEL, "value": "true", "effect": "NO_SCHEDULE"}]
    if flex:
        node_config["flex_start"] = True
        # No node_config.max_run_duration: with queued provisioning GKE takes the run time from the
        # ProvisioningRequest's maxRunDurationSeconds (the dws-config parameters, render/kueue.py).
        autoscaling["location_policy"] = "ANY"
        arguments["queued_provisioning"] = {"enabled": True}
        # Queued nodes must not be repaired away mid-run; release channels require auto-upgrade.
        arguments["management"] = {"auto_repair": False, "auto_upgrade": True}
    else:
        arguments["management"] = {"auto_repair": True, "auto_upgrade": True}
    return arguments
