"""A simulated GKE for the end-to-end tests: node pools, cluster autoscaler, DWS queued provisioning, capacity.

The real control plane (tests/e2e/controlplane.py, `ControlPlane(gke=...)`) runs kube-scheduler, the KWOK
controller and the KubeRay operator next to Kueue. What GKE itself would do is played by this package, in the
test process, from the node pools the offline plan renders for a stack (`gcp:container/nodePool:NodePool` resources).
The autoscaler's behaviour and words are taken from its sources, each named where it is played (file@commit):
GKE's fork GoogleCloudPlatform/cluster-autoscaler@7d250507339b3a7583b380349f217ea191ff15ff, the open-source core
kubernetes-sigs/cluster-autoscaler@33c3f97bf2749b1385d9223f1f8856fe345011f7, GCE's error codes in
kubernetes/autoscaler@55c37cd5eb550756c5ccc5a89e9068d77797e575, the scheduler's and client-go's in
kubernetes/kubernetes (messages.py, events.py).

- **Node pools** (pools.py, `pools_from_plan`): the nodes GKE would register, with GKE's labels
  (`cloud.google.com/gke-nodepool`, `node.kubernetes.io/instance-type`, `cloud.google.com/gke-tpu-accelerator`,
  `cloud.google.com/gke-tpu-topology`, `cloud.google.com/gke-queued` and `cloud.google.com/gke-flex-start` on
  plan B, the pool's `nodeConfig.labels`), GKE's taints (`google.com/tpu=present:NoSchedule` on TPU nodes,
  `cloud.google.com/gke-queued=true:NoSchedule` on queued pools) and the machine type's allocatable cpu, memory
  and `google.com/tpu` (vCPU, memory and chips from `tpu_fallback.model.catalog`, minus GKE's documented
  kubelet reservations). KWOK (annotation `kwok.x-k8s.io/node: fake`) makes them Ready and runs their pods. Each
  pool's node group id is its MIG's URL (`NodePool.node_group_id`), as the autoscaler names it in its Events.
- **Cluster autoscaler** (autoscaler.py, `GkeSim.step`; its docstring has the details and sources): one loop per
  pass. Node groups are the autoscaled, non-queued pools; those in back-off or at max size are skipped. Pods the
  scheduler marked Unschedulable that no existing or upcoming node can take make one valid node group grow per
  loop (a multi-host pool by a whole slice, its hosts registering NotReady one by one over the scale-up's delay and
  turning Ready together), after `timings.scale_up` (`scale_up_delays` per pool). Events on pods in GKE's words
  (messages.py): `TriggeredScaleUp` ("Pod triggered scale-up: [{<MIG URL> 0->4 (max: 4)}]"), `NotTriggerScaleUp`
  in loops without a scale-up ("Pod didn't trigger scale-up: 1 in backoff after failed scale-up, ...", every
  skipped node group of the cluster counted on every pod: upstream's default), `FailedScaleUp` on the pods of a
  failed scale-up ("Node scale up in zones <zone> associated with this pod failed: <reason>. Pod is at risk of not
  being scheduled.", cut at 250 bytes). Events pass the autoscaler's recorder (events.py): one per reason and pod
  every 5 minutes, the 10th distinct message in 10 minutes "(combined from similar events): ...". Nodes without
  running pods for `timings.scale_down_unneeded` go away (a multi-host slice only as a whole).
- **Failures** (`set_failure(pool, kind)`, `set_capacity(pool, False)` being the "out-of-resources" stock-out;
  kinds in messages.FAILURES): each fails the pool's scale-ups with its FailedScaleUp text, then backs the pool off
  exponentially (backoff.py: 5 min doubling up to 30 min, forgotten 3 h after; `timings.backoff`, `max_backoff`,
  `backoff_reset`); "ip-space-exhausted" backs off every pool of the subnet, a reservation error every pool of the
  reservation; a scale-up slower than the max node provision time fails as "instances-timeout". Capacity back does
  not end a back-off: it runs out. `backed_off()` lists the pools in back-off. A reservation pool, one with
  `reservationAffinity` SPECIFIC, has no stock-out (its VMs are held for it, within its size) but has the
  reservation failures; `preempt(pool)` takes a pool's nodes away with their pods.
- **DWS queued provisioning** (dws.py): a ProvisioningRequest (autoscaling.x-k8s.io/v1) of class
  `queued-provisioning.gke.io` is Accepted at once; after `timings.dws_provision`, once a queued pool matching its
  PodTemplate has room and capacity, the slice's nodes appear in that pool and the request is Provisioned.
  Consuming pods are those with `autoscaling.x-k8s.io/consume-provisioning-request: <request>` (Kueue sets it
  through the admission check's podSetUpdates). Unconsumed for `timings.booking` (at least
  `TimeScale.min_real_wait` real seconds): BookingExpired.
  `spec.parameters.maxRunDurationSeconds` reached: CapacityRevoked (nodes and pods removed).
  `inject_condition` sets Failed, CapacityRevoked or BookingExpired by hand. A stocked-out queued pool
  (`set_capacity(pool, False)`) keeps its requests queued.
- **Spot preemption** (nodes.py, `preempt_spot(pool[, slices])`, Spot pools only: `nodeConfig.spot`, nodes labelled
  `cloud.google.com/gke-spot=true`): as GKE and the kubelet's graceful node shutdown do it, the node gets the
  kubelet's `Shutdown` Event and the not-ready taint, its pods turn Failed (reason `Terminated`, condition
  `DisruptionTarget`) at once, and after the 30 s grace period the node is gone. Their controllers (KubeRay)
  replace the pods; the autoscaler grows the pool again if it has capacity.
  `set_events(False[, pool])`: the autoscaler acts as before but its Events on pods are never written (a GKE whose
  autoscaler Events nobody sees); `suppressed_events` lists what it would have written.
- **Slow or broken pods** (kwok.py): `with_workers_ready_after(rayjob, seconds)` annotates a RayJob's workers so
  that, bound to a node, they stay Pending and not Ready (ContainerCreating, as while a large image is pulled) for
  that long, then run; `None`: never (ImagePullBackOff). Two stages of the sim's own next to KWOK's
  (`KWOK_STAGES`) do it.
- **Ray** (dashboard.py): KubeRay polls each RayJob's Ray dashboard
  (`http://<head-svc>.<ns>.svc.cluster.local:8265`). The operator runs with `HTTP_PROXY` pointing at
  `RayDashboard`, a tiny HTTP server here that answers the job API: a Ray job is SUCCEEDED when its submitter Job
  completed (KWOK's `pod-complete` stage finishes the submitter pod after `timings.job_run`, or the pod's
  `pod-complete.stage.kwok.x-k8s.io/delay` annotation: see `with_run_time`).
- **Reading the cluster**: every `interval` (0.2 s) the loop reads nodes, pods and ProvisioningRequests from the
  cluster's informers (`cache`, tests/e2e/informer.py; the dashboard reads RayJobs and Jobs there too), not with
  LISTs. Its own node writes go into the store at once (`observe`, `forget`), so the next pass never counts a node
  it deleted or misses one it created (which would grow a pool twice for the same pods). The scale-down's "was a
  pod bound meanwhile" check stays a LIST: it must see the latest.

Time: every delay above is in simulated seconds and multiplied by `TimeScale.real_per_sim` (0.01: a simulated
minute takes 0.6 s). The controllers themselves run in real time (KubeRay requeues a RayJob every 3 s, for one),
so a simulated duration measured on the wall clock is an upper bound.

What it cannot model: real ICI (a slice here is just nodes with the same annotation `tpu-fallback.sim/slice`),
real DWS timing and its queueing policy, GCE stock-outs as they really happen (when a multi-host TPU resize request
gives up is set by GKE's experiment flags, not public: the sim fails a scale-up at the end of its delay), node
auto-provisioning and its back-offs, the autoscaler's expanders (the sim grows the matching pool with the fewest
nodes), the TPU webhook of GKE's Ray add-on, kubelet behaviour (no images, no probes, no containers) and Ray
itself.

Layout: pools.py (node pools from the plan, machines), scheduling.py (a pod's requests, selectors, taints, the
scheduler's predicate failures), timing.py (TimeScale, Timings), messages.py (the autoscaler's texts and failure
kinds), backoff.py (back-offs), base.py (the state the parts share), events.py (the autoscaler's Events and its
recorder), nodes.py (registering and removing nodes, Spot preemption), autoscaler.py (scale-up, failures,
scale-down), dws.py (ProvisioningRequests), kwok.py (KWOK's stages), dashboard.py (the Ray job API), sim.py
(GkeSim, which joins them, and `simulated_gke`). Every public name is importable from `tests.e2e.gke_sim`.
"""

from __future__ import annotations

from tests.e2e.gke_sim.autoscaler import (
    STOCK_OUT,
    AutoscalerMixin,
)
from tests.e2e.gke_sim.backoff import (
    INVALID_RESERVATION_RESET,
    RESERVATION_OUT_OF_RESOURCES_RESET,
    BackoffEntry,
    KeyedBackoff,
    NodeGroupBackoff,
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
    AGGREGATE_INTERVAL,
    AGGREGATE_MAX_EVENTS,
    AGGREGATED_PREFIX,
    ALL_POOLS,
    COMPONENT,
    SPAM_BURST,
    SPAM_QPS,
    EventsMixin,
    Recorder,
)
from tests.e2e.gke_sim.kwok import (
    KWOK_ANNOTATION,
    KWOK_COMPLETE_DELAY,
    KWOK_STAGE_FILES,
    KWOK_STAGES,
    NEVER,
    READY_AFTER_ANNOTATION,
    REGISTERING_ANNOTATION,
    kwok_stage_files,
    kwok_stages,
    with_run_time,
    with_workers_ready_after,
)
from tests.e2e.gke_sim.messages import (
    FAILED_SCALE_UP,
    FAILURES,
    MESSAGE_LENGTH_LIMIT,
    NOT_TRIGGER_SCALE_UP,
    TRIGGERED_SCALE_UP,
    Failure,
    failed_scale_up,
    not_triggered,
    triggered,
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
    is_registering,
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
    predicate_reasons,
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
    "AGGREGATED_PREFIX",
    "AGGREGATE_INTERVAL",
    "AGGREGATE_MAX_EVENTS",
    "ALL_POOLS",
    "BOOKING_EXPIRED",
    "CAPACITY_REVOKED",
    "COMPONENT",
    "CONSUME_ANNOTATION",
    "DEFAULT_SCALE",
    "DEFAULT_TIMINGS",
    "FAILED",
    "FAILED_SCALE_UP",
    "FAILURES",
    "GIB",
    "INJECTABLE",
    "INVALID_RESERVATION_RESET",
    "KWOK_ANNOTATION",
    "KWOK_COMPLETE_DELAY",
    "KWOK_STAGES",
    "KWOK_STAGE_FILES",
    "MESSAGE_LENGTH_LIMIT",
    "NEVER",
    "NODE_POOL_TYPE",
    "NODE_SHUTDOWN",
    "NOT_PROVISIONED",
    "NOT_READY_TAINT",
    "NOT_TRIGGER_SCALE_UP",
    "PODS_PER_NODE",
    "POD_SHUTDOWN",
    "POOL_LABEL",
    "PROVISIONED",
    "PROVREQ_API",
    "QUEUED_CLASS",
    "QUEUED_LABEL",
    "QUEUED_TAINT",
    "READY_AFTER_ANNOTATION",
    "REGISTERING_ANNOTATION",
    "REQUEST_ANNOTATION",
    "RESERVATION_OUT_OF_RESOURCES_RESET",
    "SHUTDOWN_GRACE",
    "SLICE_ANNOTATION",
    "SPAM_BURST",
    "SPAM_QPS",
    "SPOT_LABEL",
    "STOCK_OUT",
    "TO_BE_DELETED",
    "TPU_RESOURCE",
    "TPU_TAINT",
    "TRIGGERED_SCALE_UP",
    "AutoscalerMixin",
    "BackoffEntry",
    "DwsMixin",
    "EventsMixin",
    "Failure",
    "GkeSim",
    "KeyedBackoff",
    "Machine",
    "NodeGroupBackoff",
    "NodePool",
    "NodesMixin",
    "RayDashboard",
    "Recorder",
    "Resources",
    "SimEvent",
    "SuppressedEvent",
    "TimeScale",
    "Timings",
    "failed_scale_up",
    "fits",
    "is_registering",
    "is_terminal",
    "is_unschedulable",
    "kwok_stage_files",
    "kwok_stages",
    "machine",
    "node_pool",
    "not_triggered",
    "pod_key",
    "pod_requests",
    "pools_from_plan",
    "predicate_reasons",
    "selector_matches",
    "simulated_gke",
    "subtract",
    "triggered",
    "untolerated",
    "wait_until",
    "why_not",
    "with_run_time",
    "with_workers_ready_after",
]
