"""The infrastructure stack's outputs: the contract other stacks (the jobs project, other teams) read. Pure Python.

Defined once here. The infra program exports an `InfraOutputs` in both modes, the jobs program reads
the names marked `jobs_reads`, the tests check what is exported against it, and docs/outputs.md's
outputs table must list exactly these names with these descriptions (a test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Annotated, Any, get_type_hints

from tpu_fallback.model.catalog import TpuSlice
from tpu_fallback.model.kueue_features import elastic_jobs_gate
from tpu_fallback.model.ladder import CONFIG_KIND
from tpu_fallback.model.quantity import Resources, canonical_quantity
from tpu_fallback.model.queues import COVERED_RESOURCES, QueuePlan, flavor_names
from tpu_fallback.model.settings.kueue import KueueSettings


@dataclass(frozen=True)
class OutputSpec:
    name: str  # the stack output's name
    example: str  # what the dev stack exports, as docs/outputs.md shows it
    description: str
    secret: bool = False
    jobs_reads: bool = False  # the jobs program needs it
    multikueue_only: bool = False
    optional: bool = False  # exported only where the stack knows it (not null: the engine would drop a null)


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
        "chipsPerHost: 4, hostsPerSlice: 4, chipsPerSlice: 16}`", "the slice every job must match (`hostVcpus` and "
        "`hostMemoryGib` only for a host size the catalog lacks: none today)", jobs_reads=True)]
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
    tpu_flavors: Annotated[Any, OutputSpec(
        "tpuFlavors", "`[{name: on-demand, rung: on-demand, kind: onDemand, hosts: 4, quota: {cpu: \"40\", "
        "memory: 75Gi, google.com/tpu: \"16\"}}, {name: dws, rung: flex-start, kind: flexStart, hosts: 4, "
        "quota: {cpu: 1G, …}}]`",
        "every TPU flavor in the order Kueue tries them: its rung and kind, the TPU hosts its node pool holds, and its "
        "ClusterQueue quota (the tutorial's unlimited is 1e9: `1G`); multi-region mode: every worker's, each with its "
        "`worker`. The jobs stack refuses a job no flavor can admit")] = None
    elastic_jobs: Annotated[Any, OutputSpec(
        "elasticJobs", "`true`", "whether the Kueue this stack installs admits elastic jobs (its "
        "ElasticJobsViaWorkloadSlices gate); left out with `kueue.install: false`", optional=True)] = None
    multikueue: Annotated[Any, OutputSpec(
        "multikueue", "`true` (global)", "multi-region mode only: jobs are dispatched to the workers",
        multikueue_only=True)] = None
    workers: Annotated[Any, OutputSpec(
        "workers", "`[{name: us, location: us-east5-b, clusterName: tpu-global-us}, …]` (global)",
        "multi-region mode only: the worker clusters", multikueue_only=True)] = None

    def exports(self) -> dict[str, Any]:
        """Stack output name -> value; the multi-region outputs only where set."""
        return {spec.name: getattr(self, attr) for attr, spec in SPECS.items()
                if not ((spec.multikueue_only or spec.optional) and getattr(self, attr) is None)}


_HINTS = get_type_hints(InfraOutputs, include_extras=True)
SPECS: dict[str, OutputSpec] = {f.name: _HINTS[f.name].__metadata__[0] for f in fields(InfraOutputs)}
OUTPUTS: tuple[OutputSpec, ...] = tuple(SPECS.values())
OUTPUT_NAMES: tuple[str, ...] = tuple(spec.name for spec in OUTPUTS)
JOBS_READS: tuple[str, ...] = tuple(spec.name for spec in OUTPUTS if spec.jobs_reads)
# Read by the jobs program when present (multikueue only in multi-region mode; systemQuota since 2026-12; tpuFlavors
# and elasticJobs since issue 38, elasticJobs only where the stack installs Kueue).
JOBS_READS_OPTIONAL: tuple[str, ...] = ("multikueue", "systemQuota", "tpuFlavors", "elasticJobs")
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


def tpu_flavors_output(plan: QueuePlan, tpu: TpuSlice) -> list[dict[str, Any]]:
    """The `tpuFlavors` output: every TPU flavor of the ClusterQueue in the order Kueue tries them, with its rung, the
    rung's kind as a stack file writes it, the hosts its node pool holds (a flavor selects exactly one pool) and its
    quota in the canonical form Kueue stores. What the jobs stack checks a job against before submitting it: Kueue
    gives all the pods of a worker group one flavor and admits it only when the group's total request fits that
    flavor's quota (kueue v0.19.2 pkg/scheduler/flavorassigner/flavorassigner.go, fitsResourceQuota: "insufficient
    quota for %s in flavor %s, ... > maximum capacity", reason ExceedsMaxQuota; no cohort here, so the maximum is the
    nominal quota), and the pod set's pods then go to that one pool."""
    out: list[dict[str, Any]] = []
    for rung in plan.ladder.rungs:
        for pool, name in zip(rung.pools(tpu), plan.flavors_of_rung(rung.name), strict=True):
            flavor = plan.flavor(name)
            assert flavor is not None
            out.append({"name": name, "rung": rung.name, "kind": CONFIG_KIND[rung.kind], "hosts": pool.max_nodes,
                        "quota": {r: canonical_quantity(flavor.quota[r]) for r in COVERED_RESOURCES}})
    return out


def elastic_jobs_output(kueue: KueueSettings) -> bool | None:
    """The `elasticJobs` output: whether the Kueue this stack installs admits elastic jobs. Its
    ElasticJobsViaWorkloadSlices gate as kueue.featureGates sets it, else the version's default (None with
    kueue.install false: the running Kueue's gates are not this stack's to know)."""
    if not kueue.install:
        return None
    return elastic_jobs_gate(kueue.version, dict(kueue.feature_gates))


def markdown_table() -> str:
    """The outputs table of docs/outputs.md."""
    rows = ["| output | example (dev) | meaning |", "|---|---|---|"]
    rows += [f"| `{spec.name}` | {spec.example} | {spec.description} |" for spec in OUTPUTS]
    return "\n".join(rows)
