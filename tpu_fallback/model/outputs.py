"""The infrastructure stack's outputs: the contract other stacks (the jobs project, other teams) read. Pure Python.

Defined once here. The infra program exports an `InfraOutputs` in both modes, the jobs program reads
the names marked `jobs_reads`, the tests check what is exported against it, and docs/outputs.md's
outputs table must list exactly these names with these descriptions (a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any, get_type_hints

from tpu_fallback.model.catalog import TpuSlice
from tpu_fallback.model.ladder import CONFIG_KIND
from tpu_fallback.model.quantity import Resources, canonical_quantity
from tpu_fallback.model.queues import QueuePlan, flavor_names


@dataclass(frozen=True)
class OutputSpec:
    name: str  # the stack output's name
    example: str  # what the dev stack exports, as docs/outputs.md shows it
    description: str
    secret: bool = False
    jobs_reads: bool = False  # the jobs program needs it
    multikueue_only: bool = False


@dataclass(frozen=True)
class InfraOutputs:
    """One value (usually a `pulumi.Output`) per stack output; `exports()` names them as the contract does."""

    cluster_name: Annotated[Any, OutputSpec(
        "clusterName", "`tpu-cluster`", "GKE cluster name (the manager's in multi-region mode)")]
    cluster_location: Annotated[Any, OutputSpec("clusterLocation", "`us-east5-b`", "its zone (or region)")]
    cluster_endpoint: Annotated[Any, OutputSpec("clusterEndpoint", "`34.1.2.3`", "API server address")]
    kubeconfig: Annotated[Any, OutputSpec(
        "kubeconfig", "*secret*", "kubeconfig using `gke-gcloud-auth-plugin` (no credential inside)",
        secret=True, jobs_reads=True)]
    system_pool: Annotated[Any, OutputSpec("systemPool", "`default-pool`", "CPU pool name", jobs_reads=True)]
    node_pools: Annotated[Any, OutputSpec(
        "nodePools", "`{onDemand: [on-demand-pool], flexStart: [dws-pool]}`", "TPU pool names per plan")]
    tpu: Annotated[Any, OutputSpec(
        "tpu", "`{type: v6e, machineType: ct6e-standard-4t, topology: 4x4, acceleratorLabel: tpu-v6e-slice, "
        "chipsPerHost: 4, hostsPerSlice: 4, chipsPerSlice: 16}`", "the slice every job must match (a TPU7x stack adds "
        "its `hostVcpus` and `hostMemoryGib`)", jobs_reads=True)]
    kueue_namespace: Annotated[Any, OutputSpec("kueueNamespace", "`kueue-system`", "where Kueue runs")]
    kueue_version: Annotated[Any, OutputSpec("kueueVersion", "`0.19.2`", "the pinned Kueue chart version")]
    cluster_queue: Annotated[Any, OutputSpec("clusterQueue", "`cluster-queue`", "the ClusterQueue's name")]
    local_queues: Annotated[Any, OutputSpec(
        "localQueues", "`[{namespace: default, name: user-queue}]`", "where jobs are submitted", jobs_reads=True)]
    flavors: Annotated[Any, OutputSpec(
        "flavors", "`{system: default-cpu, onDemand: on-demand, flexStart: dws}`",
        "flavor names (`null` for a disabled plan); a `ladder` stack adds `rungs`: `[{name, kind, flavors}, …]`, "
        "every rung in ladder order with its kind and flavors", jobs_reads=True)]
    system_quota: Annotated[Any, OutputSpec(
        "systemQuota", "`{cpu: \"10\", memory: 20Gi}`",
        "the default-cpu quota every job's Ray head shares (with KubeRay's pods: head + 1 CPU / 712Mi a job)")]
    multikueue: Annotated[Any, OutputSpec(
        "multikueue", "`true` (global)", "multi-region mode only: jobs are dispatched to the workers",
        multikueue_only=True)] = None
    workers: Annotated[Any, OutputSpec(
        "workers", "`[{name: us, location: us-east5-b, clusterName: tpu-global-us}, …]` (global)",
        "multi-region mode only: the worker clusters", multikueue_only=True)] = None

    def exports(self) -> dict[str, Any]:
        """Stack output name -> value; the multi-region outputs only where set."""
        return {spec.name: getattr(self, attr) for attr, spec in SPECS.items()
                if not (spec.multikueue_only and getattr(self, attr) is None)}


_HINTS = get_type_hints(InfraOutputs, include_extras=True)
SPECS: dict[str, OutputSpec] = {f.name: _HINTS[f.name].__metadata__[0] for f in fields(InfraOutputs)}
OUTPUTS: tuple[OutputSpec, ...] = tuple(SPECS.values())
OUTPUT_NAMES: tuple[str, ...] = tuple(spec.name for spec in OUTPUTS)
JOBS_READS: tuple[str, ...] = tuple(spec.name for spec in OUTPUTS if spec.jobs_reads)
# Read by the jobs program when present (multikueue only in multi-region mode; systemQuota since 2026-12).
JOBS_READS_OPTIONAL: tuple[str, ...] = ("multikueue", "systemQuota")
SECRET_OUTPUTS: tuple[str, ...] = tuple(spec.name for spec in OUTPUTS if spec.secret)
TPU_FIELDS = ("type", "machineType", "topology", "acceleratorLabel", "chipsPerHost", "hostsPerSlice", "chipsPerSlice")


def tpu_output(tpu: TpuSlice) -> dict[str, Any]:
    """The `tpu` output: the slice the jobs stack shapes its RayJobs after. A host size the catalog lacks, given as
    tpu.hostVcpus/hostMemoryGib (TPU7x), is added as `hostVcpus`/`hostMemoryGib`, so that the jobs stack checks its
    workers' requests against it too; for every other machine type the output stays as it was."""
    values = (tpu.family.name, tpu.machine_type, tpu.topology, tpu.accelerator_label, tpu.chips_per_host,
              tpu.hosts_per_slice, tpu.chips_per_slice)
    out: dict[str, Any] = dict(zip(TPU_FIELDS, values, strict=True))
    listed = tpu.family.machine_type(tpu.machine_type)
    if listed is not None and not listed.size_known and tpu.machine.size_known:
        out.update(hostVcpus=tpu.machine.vcpus, hostMemoryGib=tpu.machine.memory_gib)
    return out


def system_quota_output(quota: Resources) -> dict[str, str]:
    """The `systemQuota` output, in the canonical form Kueue stores."""
    return {"cpu": canonical_quantity(quota.cpu), "memory": canonical_quantity(quota.memory)}


def flavors_output(plan: QueuePlan) -> dict[str, Any]:
    """The `flavors` output. Its first keys are today's (`system`, `onDemand`, `flexStart`: other teams read them)
    and stay exactly as they were; a `ladder` stack adds `rungs`, every rung most preferred first with its kind as
    the stack file writes it (reservation, onDemand, spot, flexStart) and its flavors in the order Kueue tries them.
    Stacks on the onDemand/flexStart keys export no `rungs`, so their output does not change."""
    out: dict[str, Any] = dict(flavor_names(plan))
    if plan.ladder.explicit:
        out["rungs"] = [{"name": rung.name, "kind": CONFIG_KIND[rung.kind], "flavors": plan.flavors_of_rung(rung.name)}
                        for rung in plan.ladder.rungs]
    return out


def markdown_table() -> str:
    """The outputs table of docs/outputs.md."""
    rows = ["| output | example (dev) | meaning |", "|---|---|---|"]
    rows += [f"| `{spec.name}` | {spec.example} | {spec.description} |" for spec in OUTPUTS]
    return "\n".join(rows)
