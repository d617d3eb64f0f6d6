"""The public components' arguments, as Pulumi's component analyzer reads them.

Each field is a stack config key of the infrastructure project (docs/configuration.md), in snake_case here and
camelCase in the schema other languages see (`max_slices` -> `maxSlices`). Every field is optional; what is left out
takes the same default as in a stack. The values are checked by the same parser as a stack's config, before any
resource is registered.

Why this module looks as it does (pulumi 3.272.0, pulumi/provider/experimental/analyzer.py):
- no `from __future__ import annotations`: the analyzer reads the annotations as objects, not strings;
- TypedDicts with `NotRequired`: the component host hands the args over as a plain dict (pulumi/pulumi#18526);
- plain types (not `pulumi.Input`) for settings: the schema marks them `plain`, so no language can pass a value
  known only after deployment; the settings decide which resources exist, so they must be known beforehand;
- `Any` where a setting takes more than one shape (`maintenance.exclusion`: a scope or false; a quantity: a number or
  a string), checked by the parser all the same;
- a string literal after a field is its description in the schema.
"""

from typing import Any, NotRequired, TypedDict

import pulumi


class SystemPool(TypedDict):
    """The CPU node pool for Ray heads and system pods (Kueue's default-cpu flavor selects it by name)."""

    name: NotRequired[str]
    """Node pool name (default default-pool)."""
    machine_type: NotRequired[str]
    """Machine type (default n2-standard-16)."""
    node_count: NotRequired[int]
    """Nodes (default 1)."""


class Tpu(TypedDict):
    """The TPU slice every TPU pool holds and every job matches."""

    type: NotRequired[str]
    """TPU family: v6e (default), v5e, v5p, v4 or tpu7x."""
    topology: NotRequired[str]
    """Slice topology (default 4x4)."""
    machine_type: NotRequired[str]
    """Machine type; derived from the family and topology when left out."""
    host_vcpus: NotRequired[int]
    """A host's vCPUs, only where the catalog lacks the machine's size (no family today)."""
    host_memory_gib: NotRequired[float]
    """A host's memory in GiB, only where the catalog lacks the machine's size (no family today)."""


class OnDemand(TypedDict):
    """Plan A: on-demand TPU slices."""

    name: NotRequired[str]
    """Node pool name (default on-demand-pool)."""
    max_slices: NotRequired[int]
    """Slices the pool scales up to (default 1; 0: no plan A)."""
    reservation: NotRequired[str]
    """A specific reservation of the cluster's own project, by name."""


class FlexStart(TypedDict):
    """Plan B: Dynamic Workload Scheduler flex-start slices with queued provisioning."""

    enabled: NotRequired[bool]
    """Whether plan B exists (default true)."""
    name: NotRequired[str]
    """Node pool name (default dws-pool)."""
    max_slices: NotRequired[int]
    """Slices the pool scales up to (default 1)."""
    max_run_duration: NotRequired[str]
    """How long a flex-start VM may run, in seconds such as "86400s" (at most 7 days)."""


class KueueOptions(TypedDict):
    """The Kueue this platform installs."""

    version: NotRequired[str]
    """Kueue Helm chart version (default 0.19.2, the one the project is verified with)."""
    feature_gates: NotRequired[dict[str, bool]]
    """Controller feature gates (default {ElasticJobsViaWorkloadSlices: true})."""
    pod_monitoring: NotRequired[bool]
    """Scrape Kueue's metrics with Managed Service for Prometheus and add a dashboard (default false)."""
    install: NotRequired[bool]
    """Install Kueue (default true; false only with an existing cluster that has its own)."""
    allow_unverified_version: NotRequired[bool]
    """Accept a chart version the project is not verified with (default false)."""


class LocalQueue(TypedDict):
    """A LocalQueue jobs are submitted to."""

    namespace: str
    """Its namespace."""
    name: str
    """Its name."""


class Quotas(TypedDict):
    """ClusterQueue quotas: each a map of resource to quantity, such as {cpu: 10, memory: 20Gi}."""

    system: NotRequired[dict[str, Any]]
    """The default-cpu flavor's quota (the Ray heads')."""
    on_demand: NotRequired[dict[str, Any]]
    """Plan A's quota (default: derived from plan A's size)."""


class Requests(TypedDict):
    """A pod's resource requests."""

    cpu: NotRequired[Any]
    """CPU, as a number or a quantity string."""
    memory: NotRequired[str]
    """Memory, as a quantity string such as 20Gi."""


class Queues(TypedDict):
    """The Kueue queue objects (defaults are the tutorial's)."""

    cluster_queue: NotRequired[str]
    """ClusterQueue name (default cluster-queue)."""
    local_queues: NotRequired[list[LocalQueue]]
    """LocalQueues (default [{namespace: default, name: user-queue}])."""
    namespace_labels: NotRequired[dict[str, str]]
    """Labels a namespace needs for the ClusterQueue to admit its jobs."""
    quotas: NotRequired[Quotas]
    """ClusterQueue quotas."""
    cap_flex_start: NotRequired[bool]
    """Cap plan B's quota at its pools' size (default: the tutorial's unlimited)."""
    worker_request: NotRequired[Requests]
    """A TPU worker pod's CPU and memory requests."""
    head_request: NotRequired[Requests]
    """A Ray head pod's CPU and memory requests."""


class Maintenance(TypedDict):
    """The cluster's maintenance window and upgrade exclusion."""

    daily_window_start: NotRequired[str]
    """Daily window start, UTC "HH:MM" (default "03:00")."""
    exclusion: NotRequired[Any]
    """NO_MINOR_OR_NODE_UPGRADES (default), NO_MINOR_UPGRADES, or false for none."""
    exclusion_start: NotRequired[str]
    """When the exclusion starts, an RFC 3339 UTC time."""


class Network(TypedDict):
    """The cluster's network."""

    network: NotRequired[str]
    """VPC name or self link (default the project's default network)."""
    subnetwork: NotRequired[str]
    """Subnetwork name or self link."""
    private_nodes: NotRequired[bool]
    """Nodes without external addresses (default false)."""
    authorized_networks: NotRequired[list[str]]
    """CIDRs that may reach the control plane."""
    cloud_nat: NotRequired[bool]
    """A Cloud Router and NAT per region for private nodes' egress (default true with private nodes)."""


class FallbackOptions(TypedDict):
    """The stock-out fallback controller."""

    enabled: NotRequired[bool]
    """On by default where the platform installs Kueue and has two rungs or more."""
    stockout_after: NotRequired[str]
    """How long a job waits on a rung without a sign of capacity before it moves on (default 10m)."""
    cool_down: NotRequired[str]
    """How long a stocked-out rung stays closed (default 30m)."""
    requeue_backoff: NotRequired[str]
    """Kueue's requeue delay after an eviction (default 10s)."""
    poll_interval: NotRequired[str]
    """How often the controller reads the cluster (default 5s)."""
    move_back: NotRequired[bool]
    """Move a job that waits on a later rung to an earlier one that has free hosts (default true)."""
    image: NotRequired[str]
    """The controller's Python image."""


class Rung(TypedDict):
    """One rung of a capacity ladder."""

    name: NotRequired[str]
    """The rung's name (default its kind's)."""
    kind: str
    """reservation, onDemand, spot or flexStart."""
    pool: NotRequired[str]
    """Its node pool's name (default <name>-pool)."""
    max_slices: NotRequired[int]
    """Slices its pool scales up to."""
    reservation: NotRequired[Any]
    """A reservation rung's reservation: its name, or {name, size, project}."""
    max_run_duration: NotRequired[str]
    """A flexStart rung's maximum run duration, such as "86400s"."""


class ExistingCluster(TypedDict):
    """A GKE cluster made elsewhere: the platform installs Kueue, the fallback and the queues on it."""

    name: NotRequired[str]
    """The cluster's name (default cluster_name)."""
    location: NotRequired[str]
    """Its zone or region (default location)."""


class ClusterArgs(TypedDict):
    """What one cluster's platform and a multi-region platform share: the stack config's keys."""

    project: NotRequired[str]
    """GCP project id (default: the gcp:project config of the stack)."""
    cluster_name: NotRequired[str]
    """GKE cluster name (default tpu-cluster)."""
    location: NotRequired[str]
    """Zone of the cluster and its node pools (default us-east5-b)."""
    gke_version: NotRequired[str]
    """Minimum GKE master version (default 1.35)."""
    system_pool: NotRequired[SystemPool]
    """The CPU pool."""
    tpu: NotRequired[Tpu]
    """The TPU slice (default v6e 4x4)."""
    on_demand: NotRequired[OnDemand]
    """Plan A."""
    flex_start: NotRequired[FlexStart]
    """Plan B."""
    ladder: NotRequired[list[Rung]]
    """A capacity ladder in place of on_demand and flex_start, most preferred rung first."""
    kueue: NotRequired[KueueOptions]
    """Kueue."""
    queues: NotRequired[Queues]
    """The queue objects."""
    fallback: NotRequired[FallbackOptions]
    """The stock-out fallback."""
    deletion_protection: NotRequired[bool]
    """GKE deletion protection (default true)."""
    protect: NotRequired[bool]
    """Pulumi's protect option on the cluster (default false)."""
    enable_apis: NotRequired[bool]
    """Enable the Google APIs the platform needs (default true)."""
    secure_boot: NotRequired[bool]
    """Shielded VM secure boot on the TPU pools (default true)."""
    allow_unlisted_zone: NotRequired[bool]
    """Accept a location the dated TPU catalog does not list (default false)."""
    maintenance: NotRequired[Maintenance]
    """Maintenance window and upgrade exclusion."""
    network: NotRequired[Network]
    """VPC, private nodes, authorized networks, Cloud NAT."""


class PlatformArgs(ClusterArgs):
    """One cluster: created with its TPU pools, or an existing one."""

    existing_cluster: NotRequired[ExistingCluster]
    """A cluster made elsewhere; left out: the platform creates its cluster."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """With existing_cluster only: the kubeconfig that reaches it (kept secret); left out: a gke-gcloud-auth-plugin
    kubeconfig from the cluster's endpoint."""


class Manager(TypedDict):
    """The MultiKueue manager cluster."""

    cluster_name: NotRequired[str]
    """Its name (default <cluster_name>-manager)."""
    location: NotRequired[str]
    """Its region (Autopilot) or zone (default the workers' first region)."""
    autopilot: NotRequired[bool]
    """An Autopilot cluster (default true)."""


class Worker(TypedDict):
    """A regional worker cluster, named <cluster_name>-<name>: the shared settings with its own overrides."""

    name: str
    """A short name such as us."""
    location: str
    """Its zone."""
    tpu: NotRequired[Tpu]
    """Its TPU slice."""
    on_demand: NotRequired[OnDemand]
    """Its plan A."""
    flex_start: NotRequired[FlexStart]
    """Its plan B."""
    ladder: NotRequired[list[Rung]]
    """Its capacity ladder."""


class MultiRegionPlatformArgs(ClusterArgs):
    """A MultiKueue manager in front of regional worker clusters; the shared settings apply to every worker."""

    manager: NotRequired[Manager]
    """The manager cluster."""
    workers: list[Worker]
    """The worker clusters (1 to 20)."""


class Job(TypedDict):
    """A training job: a RayJob running JAX with Ray Train on the infra platform's TPU slices (docs/jobs.md)."""

    name: NotRequired[str]
    """The job's name (default rayjob-tpu-v6e-dws); copies are <name>-1..<name>-<count>."""
    count: NotRequired[int]
    """Copies to submit (default 2, as the tutorial)."""
    queue: NotRequired[str]
    """A local queue of the platform, name or namespace/name (default its first)."""
    image: NotRequired[str]
    """The Ray image."""
    entrypoint: NotRequired[str]
    """The command the job runs (default the training script)."""
    pip: NotRequired[list[str]]
    """pip requirements installed in the Ray runtime environment."""
    worker_request: NotRequired[Requests]
    """A TPU worker pod's CPU and memory requests."""
    head_request: NotRequired[Requests]
    """The Ray head's CPU and memory requests."""
    workers: NotRequired[int]
    """TPU hosts: a multiple of the slice's hosts that one node pool holds (default one slice)."""
    elastic: NotRequired[Any]
    """true, false, or {minReplicas, maxReplicas}: an elastic job that grows and shrinks by whole slices."""
    env: NotRequired[dict[str, str]]
    """Extra environment variables."""
    preemptible: NotRequired[bool]
    """A low-priority job that others may preempt."""


class TrainingJobsArgs(TypedDict):
    """Training jobs submitted to the queues of an infrastructure stack (a stack of this project, or any stack that
    exports the outputs of a Platform under their names)."""

    infra_stack: str
    """The infrastructure stack to submit to, e.g. organization/tpu-fallback/dev."""
    # An Input only so that Pulumi's Go SDK generator writes JobArgs (it skips the element type of a plain list of
    # objects, pulumi/pulumi pkg/codegen/go); the value must still be known before deployment.
    jobs: NotRequired[pulumi.Input[list[Job]]]
    """The jobs (default the tutorial's two copies of one job)."""
