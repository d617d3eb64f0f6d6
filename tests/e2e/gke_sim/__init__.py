"""A simulated GKE for the end-to-end tests: node pools, cluster autoscaler, DWS queued provisioning, capacity.

The real control plane (tests/e2e/controlplane.py, `ControlPlane(gke=...)`) runs kube-scheduler, the KWOK
controller and the KubeRay operator next to Kueue. What GKE itself would do is played by this package, in the
test process, from the node pools the offline plan renders for a stack (`gcp:container/nodePool:NodePool` resources):

- **Node pools** (`pools_from_plan`): the nodes GKE would register, with GKE's labels
  (`cloud.google.com/gke-nodepool`, `node.kubernetes.io/instance-type`, `cloud.google.com/gke-tpu-accelerator`,
  `cloud.google.com/gke-tpu-topology`, `cloud.google.com/gke-queued` and `cloud.google.com/gke-flex-start` on
  plan B, the pool's `nodeConfig.labels`), GKE's taints (`google.com/tpu=present:NoSchedule` on TPU nodes,
  `cloud.google.com/gke-queued=true:NoSchedule` on queued pools) and the machine type's allocatable cpu, memory
  and `google.com/tpu` (vCPU, memory and chips from `tpu_fallback.model.catalog`, minus GKE's documented
  kubelet reservations). KWOK (annotation `kwok.x-k8s.io/node: fake`) makes them Ready and runs their pods.
- **Cluster autoscaler** (`GkeSim.step`): pods the scheduler marked Unschedulable that no existing or upcoming
  node can take make a matching, non-queued pool grow within `autoscaling.maxNodeCount` after `timings.scale_up`;
  a multi-host pool (one with `placementPolicy.tpuTopology` over several hosts) gets a whole slice at once.
  Nodes without running pods for `timings.scale_down_unneeded` go away (a multi-host slice only as a whole).
  Events on pods as GKE's autoscaler writes them: `TriggeredScaleUp`, `FailedScaleUp`, `NotTriggerScaleUp`.
- **DWS queued provisioning**: a ProvisioningRequest (autoscaling.x-k8s.io/v1) of class
  `queued-provisioning.gke.io` is Accepted at once; after `timings.dws_provision`, once a queued pool matching its
  PodTemplate has room and capacity, the slice's nodes appear in that pool and the request is Provisioned.
  Consuming pods are those with `autoscaling.x-k8s.io/consume-provisioning-request: <request>` (Kueue sets it
  through the admission check's podSetUpdates). Unconsumed for `timings.booking` (at least
  `TimeScale.min_real_wait` real seconds): BookingExpired.
  `spec.parameters.maxRunDurationSeconds` reached: CapacityRevoked (nodes and pods removed).
  `inject_condition` sets Failed, CapacityRevoked or BookingExpired by hand.
- **Capacity**: `set_capacity(pool, False)` is a stock-out (scale-ups of that pool fail after the delay, with
  `FailedScaleUp` on the pods and the pool in back-off for `timings.backoff`; ProvisioningRequests stay queued),
  `set_capacity(pool, True)` brings it back (one pool or several, each its own switch; a reservation pool, one
  with `reservationAffinity` SPECIFIC, has none: its VMs are held for it, within its size); `preempt(pool)` takes
  a pool's nodes away with their pods.
- **Spot preemption** (`preempt_spot(pool[, slices])`, Spot pools only: `nodeConfig.spot`, nodes labelled
  `cloud.google.com/gke-spot=true`): as GKE and the kubelet's graceful node shutdown do it, the node gets the
  kubelet's `Shutdown` Event and the not-ready taint, its pods turn Failed (reason `Terminated`, condition
  `DisruptionTarget`) at once, and after the 30 s grace period the node is gone. Their controllers (KubeRay)
  replace the pods; the autoscaler grows the pool again if it has capacity.
  `set_events(False[, pool])`: the autoscaler acts as before but its Events on pods are never written (a GKE whose
  autoscaler Events nobody sees); `suppressed_events` lists what it would have written.
- **Slow or broken pods**: `with_workers_ready_after(rayjob, seconds)` annotates a RayJob's workers so that, bound
  to a node, they stay Pending and not Ready (ContainerCreating, as while a large image is pulled) for that long,
  then run; `None`: never (ImagePullBackOff). Two stages of the sim's own next to KWOK's (`KWOK_STAGES`) do it.
- **Ray**: KubeRay polls each RayJob's Ray dashboard (`http://<head-svc>.<ns>.svc.cluster.local:8265`). The
  operator runs with `HTTP_PROXY` pointing at `RayDashboard`, a tiny HTTP server here that answers the job API:
  a Ray job is SUCCEEDED when its submitter Job completed (KWOK's `pod-complete` stage finishes the submitter pod
  after `timings.job_run`, or the pod's `pod-complete.stage.kwok.x-k8s.io/delay` annotation: see `with_run_time`).
- **Reading the cluster**: every `interval` (0.2 s) the loop reads nodes, pods and ProvisioningRequests from the
  cluster's informers (`cache`, tests/e2e/informer.py; the dashboard reads RayJobs and Jobs there too), not with
  LISTs. Its own node writes go into the store at once (`observe`, `forget`), so the next pass never counts a node
  it deleted or misses one it created (which would grow a pool twice for the same pods). The scale-down's "was a
  pod bound meanwhile" check stays a LIST: it must see the latest.

Time: every delay above is in simulated seconds and multiplied by `TimeScale.real_per_sim` (0.01: a simulated
minute takes 0.6 s). The controllers themselves run in real time (KubeRay requeues a RayJob every 3 s, for one),
so a simulated duration measured on the wall clock is an upper bound.

What it cannot model: real ICI (a slice here is just nodes with the same annotation `tpu-fallback.sim/slice`),
real DWS timing and its queueing policy, GCE stock-outs as they really happen, node auto-provisioning, the TPU
webhook of GKE's Ray add-on, kubelet behaviour (no images, no probes, no containers) and Ray itself.

Layout: pools.py (node pools from the plan, machines), scheduling.py (a pod's requests, selectors, taints),
timing.py (TimeScale, Timings), base.py (the state the parts share), events.py (the autoscaler's Events on pods),
nodes.py (registering and removing nodes, Spot preemption), autoscaler.py (scale-up, scale-down, capacity),
dws.py (ProvisioningRequests), kwok.py (KWOK's stages), dashboard.py (the Ray job API), sim.py (GkeSim, which
joins them, and `simulated_gke`). Every public name is importable from `tests.e2e.gke_sim`.
"""

from __future__ import annotations

from tests.e2e.gke_sim.autoscaler import (
    AutoscalerMixin,
)
from tests.e2e.gke_sim.base import (
    SimEvent,
    SuppressedEvent,
)
from tests.e2e.gke_sim.dashboard import (
    RayDashboard,
)
from tests.e2e.gke_sim.dws import (
    ACCEPTED,
    BOOKING_EXPIRED,
    CAPACITY_REVOKED,
    CONSUME_ANNOTATION,
    FAILED,
    INJECTABLE,
    NOT_PROVISIONED,
    PROVISIONED,
    PROVREQ_API,
    QUEUED_CLASS,
    DwsMixin,
)
from tests.e2e.gke_sim.events import (
    ALL_POOLS,
    COMPONENT,
    EventsMixin,
)
from tests.e2e.gke_sim.kwok import (
    KWOK_ANNOTATION,
    KWOK_COMPLETE_DELAY,
    KWOK_STAGE_FILES,
    KWOK_STAGES,
    NEVER,
    READY_AFTER_ANNOTATION,
    kwok_stage_files,
    kwok_stages,
    with_run_time,
    with_workers_ready_after,
)
from tests.e2e.gke_sim.nodes import (
    NODE_SHUTDOWN,
    NOT_READY_TAINT,
    POD_SHUTDOWN,
    REQUEST_ANNOTATION,
    SHUTDOWN_GRACE,
    SLICE_ANNOTATION,
    TO_BE_DELETED,
    NodesMixin,
    node_pool,
)
from tests.e2e.gke_sim.pools import (
    GIB,
    NODE_POOL_TYPE,
    PODS_PER_NODE,
    POOL_LABEL,
    QUEUED_LABEL,
    QUEUED_TAINT,
    SPOT_LABEL,
    TPU_RESOURCE,
    TPU_TAINT,
    Machine,
    NodePool,
    machine,
    pools_from_plan,
)
from tests.e2e.gke_sim.scheduling import (
    Resources,
    fits,
    is_terminal,
    is_unschedulable,
    pod_key,
    pod_requests,
    selector_matches,
    subtract,
    untolerated,
    why_not,
)
from tests.e2e.gke_sim.sim import (
    GkeSim,
    simulated_gke,
    wait_until,
)
from tests.e2e.gke_sim.timing import (
    DEFAULT_SCALE,
    DEFAULT_TIMINGS,
    TimeScale,
    Timings,
)

__all__ = [
    "ACCEPTED",
    "ALL_POOLS",
    "BOOKING_EXPIRED",
    "CAPACITY_REVOKED",
    "COMPONENT",
    "CONSUME_ANNOTATION",
    "DEFAULT_SCALE",
    "DEFAULT_TIMINGS",
    "FAILED",
    "GIB",
    "INJECTABLE",
    "KWOK_ANNOTATION",
    "KWOK_COMPLETE_DELAY",
    "KWOK_STAGES",
    "KWOK_STAGE_FILES",
    "NEVER",
    "NODE_POOL_TYPE",
    "NODE_SHUTDOWN",
    "NOT_PROVISIONED",
    "NOT_READY_TAINT",
    "PODS_PER_NODE",
    "POD_SHUTDOWN",
    "POOL_LABEL",
    "PROVISIONED",
    "PROVREQ_API",
    "QUEUED_CLASS",
    "QUEUED_LABEL",
    "QUEUED_TAINT",
    "READY_AFTER_ANNOTATION",
    "REQUEST_ANNOTATION",
    "SHUTDOWN_GRACE",
    "SLICE_ANNOTATION",
    "SPOT_LABEL",
    "TO_BE_DELETED",
    "TPU_RESOURCE",
    "TPU_TAINT",
    "AutoscalerMixin",
    "DwsMixin",
    "EventsMixin",
    "GkeSim",
    "Machine",
    "NodePool",
    "NodesMixin",
    "RayDashboard",
    "Resources",
    "SimEvent",
    "SuppressedEvent",
    "TimeScale",
    "Timings",
    "fits",
    "is_terminal",
    "is_unschedulable",
    "kwok_stage_files",
    "kwok_stages",
    "machine",
    "node_pool",
    "pod_key",
    "pod_requests",
    "pools_from_plan",
    "selector_matches",
    "simulated_gke",
    "subtract",
    "untolerated",
    "wait_until",
    "why_not",
    "with_run_time",
    "with_workers_ready_after",
]
