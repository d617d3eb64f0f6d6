"""Scenarios on the simulated GKE (gke_sim.py): the stacks' real objects, real Kueue, KubeRay, scheduler and KWOK.

Each `run_*` function drives one scenario on a started `simulated_gke()` and returns what it observed; the tests
(test_gke_sim_e2e.py) assert on it, the benchmark (benchmark_gke_sim.py) prints its figures. `Watch` follows the
RayJobs: when each was submitted, admitted, had all its pods Running and finished (real seconds on the sim's
clock, `simulated()` divides by the time scale), and on which node and pool every pod ran.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from tests.e2e import scenario
from tests.e2e.gke_sim import (
    CONSUME_ANNOTATION,
    POOL_LABEL,
    PROVREQ_API,
    GkeSim,
    NodePool,
    TimeScale,
    Timings,
    simulated_gke,
    with_run_time,
)
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

T = TypeVar("T")
KUEUE_API = scenario.KUEUE_API
TPU_GROUP = "tpu-group"
REPLICA_LABEL = "ray.io/worker-group-replica-name"  # KubeRay's multi-host replica (one TPU slice)
TERMINAL = ("Complete", "Failed")

# The scenarios' time: a simulated minute is 0.6 s. GKE-like delays where they shape the scenario, shorter ones
# where they would only make it wait (a job runs 5 simulated minutes, idle nodes go after 5).
SCALE = TimeScale(0.01)
TIMINGS = Timings(scale_up=180, cpu_scale_up=60, dws_provision=300, job_run=300, scale_down_unneeded=300,
                  booking=600, backoff=300)


@dataclass(frozen=True)
class Stack:
    """An infra stack of this repository with config overrides, as the scenario runs it."""

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def render(self) -> ProgramRun:
        return run_program(REPO_ROOT, self.name, dict(self.overrides))


@dataclass
class JobRecord:
    namespace: str
    name: str
    submitted: float
    reserved: float | None = None  # Kueue reserved quota (QuotaReserved True)
    admitted: float | None = None  # and every admission check passed (Admitted True)
    running: float | None = None  # head and every worker Running
    finished: float | None = None
    state: str | None = None  # the RayJob's jobDeploymentStatus
    queued: bool | None = None  # Kueue's first decision was "does not fit" (set by Watch.submit one_by_one)
    flavors: dict[str, set[str]] = field(default_factory=dict)
    # pod name -> (node, pool, worker replica or "" for the head and the submitter)
    placements: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    consume_annotations: dict[str, str] = field(default_factory=dict)  # worker pod -> request it consumes

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def worker_pools(self) -> dict[str, dict[str, int]]:
        """Worker replica (slice) -> pool -> number of its pods that ran there."""
        out: dict[str, dict[str, int]] = {}
        for _node, pool, replica in self.placements.values():
            if replica:
                out.setdefault(replica, {})
                out[replica][pool] = out[replica].get(pool, 0) + 1
        return out

    def head_pools(self) -> set[str]:
        return {pool for pod, (_n, pool, replica) in self.placements.items() if not replica and "-head-" in pod}


@dataclass(frozen=True)
class Listed:
    """One namespace's RayJobs, Workloads and Pods as one poll listed them."""

    rayjobs: list[dict[str, Any]]
    workloads: list[dict[str, Any]]
    pods: list[dict[str, Any]]


def _by_rayjob(workloads: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """RayJob name -> its Workload, of the given Workloads (the last one listed, for a job with several)."""
    out: dict[str, dict[str, Any]] = {}
    for item in workloads:
        for owner in item["metadata"].get("ownerReferences", []):
            if owner["kind"] == "RayJob":
                out[owner["name"]] = item
    return out


class Watch:
    """Follows submitted RayJobs: each poll reads the sim's informers (sim.cache), not the API server."""

    def __init__(self, client: KubeClient, sim: GkeSim) -> None:
        self.client = client
        self.sim = sim
        self.cache = sim.cache
        self.jobs: dict[str, JobRecord] = {}
        self.node_pool: dict[str, str] = {}  # every node ever seen -> its pool
        self.max_nodes: dict[str, int] = {}  # pool -> the most nodes seen at once
        self._nodes: list[dict[str, Any]] = []
        self._listed: dict[str, Listed] = {}  # namespace -> its objects at the last poll

    def now(self) -> float:
        return self.sim.elapsed()

    def simulated(self, real_seconds: float) -> float:
        return self.sim.scale.sim(real_seconds)

    def submit(self, objects: Sequence[Mapping[str, Any]], *, one_by_one: bool = True) -> list[JobRecord]:
        """Apply the non-RayJob objects, then the RayJobs (one_by_one: each after Kueue decided on the previous,
        as scenario.submit does, so admission order is submission order)."""
        records = []
        for obj in objects:
            if obj["kind"] != "RayJob":
                self.client.apply(obj)
        for obj in objects:
            if obj["kind"] != "RayJob":
                continue
            meta = obj["metadata"]
            record = JobRecord(meta["namespace"], meta["name"], self.now())
            self.jobs[record.key] = record
            self.client.apply(obj)
            records.append(record)
            if one_by_one:
                record.queued = self._queued(meta["namespace"], meta["name"])
        return records

    def _queued(self, namespace: str, name: str, fits_within: float = 5.0) -> bool:
        """Wait for Kueue's first decision on the job's Workload: False if it reserved quota within `fits_within`
        seconds, True if it said the job does not fit or said nothing by then (Kueue does not always write a
        Pending condition for a workload behind a head that does not fit either)."""
        # Through poll(), so the earlier jobs' records go on being updated while this one is decided (their
        # `running` is the poll that first saw it: without polling here a job could start during the next
        # submission and be recorded only after it).
        def polled() -> dict[str, Any] | None:
            return _by_rayjob(self.listed(namespace).workloads).get(name)

        workload = self.wait(polled, 30, f"the Workload of {namespace}/{name}", interval=0.1)
        deadline = time.monotonic() + fits_within
        while time.monotonic() < deadline:
            self.poll()
            workload = polled() or workload
            status = scenario.condition_status(workload, "QuotaReserved")
            if status == "True":
                return False
            if scenario.evaluated(workload) is not None:
                return True
            time.sleep(0.1)
        return True

    def poll(self) -> None:
        # The informers follow the API server a few milliseconds late at most; the watch only observes.
        self._nodes = self.cache.items("v1", "Node")
        for node in self._nodes:
            self.node_pool[node["metadata"]["name"]] = (node["metadata"].get("labels") or {}).get(POOL_LABEL, "")
        counts: dict[str, int] = {}
        for pool in self.node_pool_now():
            counts[pool] = counts.get(pool, 0) + 1
        for pool, n in counts.items():
            self.max_nodes[pool] = max(self.max_nodes.get(pool, 0), n)
        for namespace in sorted({r.namespace for r in self.jobs.values()}):
            self._poll_namespace(namespace)

    def node_pool_now(self) -> list[str]:
        """The pool of each node at the last poll."""
        return [(n["metadata"].get("labels") or {}).get(POOL_LABEL, "") for n in self._nodes]

    def listed(self, namespace: str) -> Listed:
        """What the last poll listed in `namespace` (subclasses read it instead of listing again)."""
        return self._listed.get(namespace) or Listed([], [], [])

    def _poll_namespace(self, namespace: str) -> None:
        now = self.now()
        listed = self._listed[namespace] = Listed(self.cache.items("ray.io/v1", "RayJob", namespace),
                                                  self.cache.items(KUEUE_API, "Workload", namespace),
                                                  self.cache.items("v1", "Pod", namespace))
        rayjobs = {r["metadata"]["name"]: r for r in listed.rayjobs}
        workloads = _by_rayjob(listed.workloads)
        pods = listed.pods
        for record in [r for r in self.jobs.values() if r.namespace == namespace]:
            rayjob = rayjobs.get(record.name)
            if rayjob is None:
                continue
            status = rayjob.get("status") or {}
            record.state = status.get("jobDeploymentStatus")
            wl = workloads.get(record.name)
            if wl is not None:
                if scenario.flavors(wl):
                    record.flavors = scenario.flavors(wl)
                if record.reserved is None and scenario.condition_status(wl, "QuotaReserved") == "True":
                    record.reserved = now
                if record.admitted is None and scenario.condition_status(wl, "Admitted") == "True":
                    record.admitted = now
            cluster = status.get("rayClusterName")
            mine = [p for p in pods if cluster and (p["metadata"].get("labels") or {}).get("ray.io/cluster") == cluster]
            mine += [p for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == record.name]
            for pod in mine:
                node = (pod.get("spec") or {}).get("nodeName")
                # Only pods that ran for the job: once it has finished, KubeRay may still create a worker replica
                # until its RayCluster is gone (seen once beside a busy loop: a second replica, bound after the
                # job's end), which says nothing about where the job's slices ran.
                if node and record.finished is None:
                    replica = (pod["metadata"].get("labels") or {}).get(REPLICA_LABEL, "")
                    if node not in self.node_pool:  # bound to a node created after this poll listed the nodes
                        for fresh in self.client.list("v1", "Node"):
                            self.node_pool[fresh["metadata"]["name"]] = (
                                (fresh["metadata"].get("labels") or {}).get(POOL_LABEL, ""))
                    known = record.placements.get(pod["metadata"]["name"])
                    pool = self.node_pool.get(node) or (known[1] if known and known[0] == node else "?")
                    record.placements[pod["metadata"]["name"]] = (node, pool, replica)
                consumed = (pod["metadata"].get("annotations") or {}).get(CONSUME_ANNOTATION)
                if consumed and (pod["metadata"].get("labels") or {}).get(REPLICA_LABEL):
                    record.consume_annotations[pod["metadata"]["name"]] = consumed
            ray_pods = [p for p in mine if (p["metadata"].get("labels") or {}).get("ray.io/cluster") == cluster]
            expected = 1 + _workers_wanted(rayjob)
            if record.running is None and len(ray_pods) >= expected and all(
                    (p.get("status") or {}).get("phase") == "Running" for p in ray_pods):
                record.running = now
            if record.finished is None and record.state in TERMINAL:
                record.finished = now

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.3) -> T:
        """Poll the cluster and the sim until `predicate` is truthy; a timeout's message has the sim's log and the
        jobs' states."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            value = predicate()
            if value:
                return value
            self.sim.check()
            if time.monotonic() >= deadline:
                log = "\n".join(f"  {e.at:6.1f}s {e.what}" for e in self.sim.log[-30:])
                jobs = "\n".join(f"  {r.key}: {r.state} flavors={r.flavors} admitted={r.admitted} "
                                 f"running={r.running} finished={r.finished}" for r in self.jobs.values())
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}\njobs:\n{jobs}\n"
                                   f"unfinished jobs' pods:\n{self.describe_unfinished()}\nsim log:\n{log}")
            time.sleep(interval)

    def describe_unfinished(self) -> str:
        """The RayCluster state and the pods (phase, node, why not scheduled) of every job not finished yet."""
        lines = []
        for r in self.jobs.values():
            if r.finished is not None:
                continue
            rayjob = self.client.get("ray.io/v1", "RayJob", r.name, r.namespace) or {}
            cluster_name = (rayjob.get("status") or {}).get("rayClusterName", "")
            cluster = self.client.get("ray.io/v1", "RayCluster", cluster_name, r.namespace) if cluster_name else None
            lines.append(f"  {r.key}: suspend={rayjob.get('spec', {}).get('suspend')} RayCluster {cluster_name} "
                         f"state={((cluster or {}).get('status') or {}).get('state')}")
            wl = scenario.workload_of(self.client, r.namespace, r.name)
            if wl is not None:
                wl_status = wl.get("status") or {}
                conditions = [f"{c['type']}={c['status']} ({c.get('reason')}: {c.get('message', '')[:160]})"
                              for c in wl_status.get("conditions", [])]
                checks = [f"{c['name']}={c['state']} ({c.get('message', '')[:160]})"
                          for c in wl_status.get("admissionChecks", [])]
                lines.append(f"    Workload {wl['metadata']['name']}: {'; '.join(conditions)}; checks: {checks}")
            for pod in self.client.list("v1", "Pod", r.namespace):
                labels = pod["metadata"].get("labels") or {}
                if labels.get("ray.io/cluster") != cluster_name and labels.get("job-name") != r.name:
                    continue
                why = [c.get("message", "") for c in (pod.get("status") or {}).get("conditions", [])
                       if c.get("type") == "PodScheduled" and c.get("status") == "False"]
                lines.append(f"    {pod['metadata']['name']}: {(pod.get('status') or {}).get('phase')} on "
                             f"{(pod.get('spec') or {}).get('nodeName')} {'; '.join(why)}")
        return "\n".join(lines) or "  (none)"

    def wait_finished(self, records: Sequence[JobRecord], timeout: float = 120) -> None:
        self.wait(lambda: all(r.finished is not None for r in records), timeout,
                  f"{', '.join(r.key for r in records)} to finish")

    def wait_running(self, records: Sequence[JobRecord], timeout: float = 120) -> None:
        self.wait(lambda: all(r.running is not None for r in records), timeout,
                  f"all pods of {', '.join(r.key for r in records)} Running")

    def wait_scaled_down(self, keep: Sequence[str], timeout: float = 60) -> None:
        """Until only nodes of the `keep` pools are left."""
        self.wait(lambda: all(p in keep for p in self.node_pool_now()), timeout,
                  f"the TPU pools to scale down to zero (only {', '.join(keep)} left)")

    def figures(self) -> list[str]:
        """Per job: simulated seconds from submission to admitted, to all pods Running, to finished."""
        lines = []
        for r in self.jobs.values():
            def since(t: float | None, r: JobRecord = r) -> str:
                return f"{'-':>6}  " if t is None else f"{self.simulated(t - r.submitted):6.0f} s"
            tpu = ",".join(sorted(r.flavors.get(TPU_GROUP, set()))) or "-"
            lines.append(f"{r.key:40} {tpu:11} admitted {since(r.admitted)}, all pods Running "
                         f"{since(r.running)}, finished {since(r.finished)} (simulated)")
        return lines


def flavor_plans(infra: ProgramRun, pools: Sequence[NodePool]) -> dict[str, str]:
    """ResourceFlavor name -> the plan of the nodes it selects ("on-demand", "flex-start" or "system"), from the
    flavors' nodeLabels and the pools' labels, so assertions hold however the plan names or splits its flavors."""
    out: dict[str, str] = {}
    for flavor in infra.kubernetes_objects():
        if flavor["kind"] != "ResourceFlavor":
            continue
        wanted = (flavor.get("spec") or {}).get("nodeLabels") or {}
        plans = {p.plan for p in pools if all(p.node_labels().get(k) == v for k, v in wanted.items())}
        out[flavor["metadata"]["name"]] = ",".join(sorted(plans)) or "?"
    return out


def flavors_spanning_pools(infra: ProgramRun, pools: Sequence[NodePool]) -> dict[str, list[str]]:
    """ResourceFlavors whose nodeLabels select more than one multi-host TPU pool -> those pools."""
    out: dict[str, list[str]] = {}
    for flavor in infra.kubernetes_objects():
        if flavor["kind"] != "ResourceFlavor":
            continue
        wanted = (flavor.get("spec") or {}).get("nodeLabels") or {}
        selected = [p.name for p in pools if p.hosts_per_slice > 1
                    and all(p.node_labels().get(k) == v for k, v in wanted.items())]
        if len(selected) > 1:
            out[flavor["metadata"]["name"]] = selected
    return out


def tpu_plan(record: JobRecord, plans: Mapping[str, str]) -> str:
    """The plan the job's TPU PodSet was admitted to ("-" if none yet)."""
    return ",".join(sorted({plans.get(f, f) for f in record.flavors.get(TPU_GROUP, set())})) or "-"


def _workers_wanted(rayjob: Mapping[str, Any]) -> int:
    groups = rayjob["spec"]["rayClusterSpec"].get("workerGroupSpecs") or []
    return sum(int(g.get("replicas", 1)) * int(g.get("numOfHosts", 1)) for g in groups)


def cluster_queue_idle(client: KubeClient, name: str) -> bool:
    """No workload reserves or uses quota in the ClusterQueue (every flavor's total reserved is zero)."""
    cq = client.get(KUEUE_API, "ClusterQueue", name) or {}
    status = cq.get("status") or {}
    if status.get("reservingWorkloads", 0) or status.get("admittedWorkloads", 0):
        return False
    for usage in status.get("flavorsReservation", []) + status.get("flavorsUsage", []):
        for res in usage.get("resources", []):
            if str(res.get("total", "0")) not in ("0", ""):
                return False
    return True


def events(client: KubeClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in client.list("v1", "Event", namespace) if e.get("reason") == reason]


def request_conditions(client: KubeClient, namespace: str) -> dict[str, dict[str, str]]:
    """ProvisioningRequest name -> condition type -> status, as stored."""
    return {pr["metadata"]["name"]: {c["type"]: c["status"] for c in (pr.get("status") or {}).get("conditions", [])}
            for pr in client.list(PROVREQ_API, "ProvisioningRequest", namespace)}


def system_pools(pools: Sequence[NodePool]) -> list[str]:
    return [p.name for p in pools if not p.autoscaled]


# --- one cluster for several scenarios ------------------------------------------------------------------------

# What reset() deletes, in this order (a ClusterQueue goes once its Workloads are gone, a flavor once no
# ClusterQueue uses it).
_STACK_KINDS = (
    ("ray.io/v1", "RayJob"),
    (KUEUE_API, "Workload"),
    (KUEUE_API, "LocalQueue"),
    (KUEUE_API, "ClusterQueue"),
    (KUEUE_API, "AdmissionCheck"),
    (KUEUE_API, "ProvisioningRequestConfig"),
    (KUEUE_API, "ResourceFlavor"),
    (PROVREQ_API, "ProvisioningRequest"),
    ("v1", "PodTemplate"),
)


def reset(client: KubeClient, sim: GkeSim, pools: Sequence[NodePool], timeout: float = 90) -> None:
    """Make a used cluster ready for another scenario: every RayJob, Kueue queue object, ProvisioningRequest and
    Event of the last one deleted (and waited for), every node gone, then the sim set up for `pools`.
    Namespaces and the kueue-system objects stay (the next stack applies its own over them)."""
    for api_version, kind in _STACK_KINDS:
        for obj in client.list(api_version, kind):
            client.delete(api_version, kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
        _wait_gone(client, api_version, kind, timeout)
    sim.reconfigure(pools)
    for ns in client.list("v1", "Namespace"):
        client.request("DELETE", f"/api/v1/namespaces/{ns['metadata']['name']}/events")

    def quiet() -> bool:
        return not [p for p in client.list("v1", "Pod") if p["metadata"]["namespace"] != "kueue-system"]

    _wait(quiet, timeout, "the last scenario's pods to be gone")


def _wait_gone(client: KubeClient, api_version: str, kind: str, timeout: float) -> None:
    _wait(lambda: not client.list(api_version, kind), timeout, f"every {kind} deleted")


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"reset: timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


FRESH_ENV = "TPU_FALLBACK_GKE_FRESH"  # "1": a new cluster for every test instead of one reset between tests


class SimBox:
    """One simulated GKE shared by a module's tests: started by the first `acquire`, reset (`reset`) for each next
    one, stopped by `close` (or at the end of a `with` block). `options` are simulated_gke's keyword arguments
    besides the pools (scale, timings, the ControlPlane's Kueue options)."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self._exit = contextlib.ExitStack()
        self._plane: Any = None  # a ControlPlane (imported by simulated_gke)
        self._sim: GkeSim | None = None
        self.startup: float | None = None  # seconds the last start took

    def acquire(self, pools: Sequence[NodePool], label: str) -> bool:
        """The cluster with these pools and nothing of an earlier test; True if it was started (not reset)."""
        if self._plane is not None and os.environ.get(FRESH_ENV) == "1":
            self.close()
        t0 = time.monotonic()
        if self._plane is None or self._sim is None:
            self._plane, self._sim = self._exit.enter_context(simulated_gke(pools, **self.options))
            self.startup = time.monotonic() - t0
            print(f"\n[{label}] cluster up in {self.startup:.1f} s")
            return True
        reset(self._plane.client, self._sim, pools)
        print(f"\n[{label}] cluster reset in {time.monotonic() - t0:.1f} s")
        return False

    @property
    def plane(self) -> Any:
        if self._plane is None:
            raise RuntimeError("no cluster: call acquire() first")
        return self._plane

    @property
    def sim(self) -> GkeSim:
        if self._sim is None:
            raise RuntimeError("no cluster: call acquire() first")
        return self._sim

    def close(self) -> None:
        self._exit.close()
        self._plane = self._sim = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

# --- scenarios -------------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a scenario saw: its jobs, and free-form observations for the test's assertions."""

    watch: Watch
    facts: dict[str, Any] = field(default_factory=dict)


TUTORIAL = Stack("dev")


def run_tutorial(client: KubeClient, sim: GkeSim, infra: ProgramRun) -> Outcome:
    """The tutorial: two RayJobs; job 1 runs on plan A's nodes, job 2 waits for DWS, then runs on plan B's."""
    watch = Watch(client, sim)
    scenario.apply_infra(client, infra)
    first, second = watch.submit(scenario.render_queue_jobs(infra, "default/user-queue", 2))
    facts: dict[str, Any] = {}
    watch.wait_running([first, second])
    facts["requests"] = request_conditions(client, "default")
    watch.wait_finished([first, second])
    watch.wait_scaled_down(system_pools(list(sim.pools.values())))
    facts["queue_idle"] = watch.wait(lambda: cluster_queue_idle(client, "cluster-queue"), 30,
                                     "cluster-queue's quota to be free")
    facts["triggered_scale_up"] = [e["involvedObject"]["name"] for e in events(client, "default", "TriggeredScaleUp")]
    facts["finished"] = {r.name: _finished_condition(client, r) for r in (first, second)}
    return Outcome(watch, facts)


def _finished_condition(client: KubeClient, record: JobRecord) -> str | None:
    wl = scenario.workload_of(client, record.namespace, record.name)
    return scenario.condition_status(wl, "Finished") if wl else None


TWO_SLICES = Stack("dev", {"onDemand": {"maxSlices": 2}})
# How the pods and the nodes of two on-demand slices appear, one variant after the other on the same cluster.
SPLIT_VARIANTS = (
    ("pods first, both slices at once", "together"),
    ("nodes first, then the jobs", "nodes-first"),
    ("pods first, the second pool's slice later", "staggered"),
)


def run_two_slices(client: KubeClient, sim: GkeSim, infra: ProgramRun,
                   variants: Sequence[tuple[str, str]] = SPLIT_VARIANTS) -> Outcome:
    """onDemand.maxSlices 2: two RayJobs of one v6e 4x4 slice each, both on the `on-demand` flavor (which selects
    both on-demand pools by tpu-fallback/plan). Where does each slice's 4 workers land, per variant?"""
    watch = Watch(client, sim)
    scenario.apply_infra(client, infra)
    tpu_pools = [p.name for p in sim.pools.values() if p.tpu and not p.queued]
    keep = system_pools(list(sim.pools.values()))
    placements: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for label, variant in variants:
        if variant == "nodes-first":
            for pool in tpu_pools:
                sim.add_nodes(pool)
            watch.wait(lambda: _ready_untainted(client) >= 8, 30, "the 8 on-demand nodes Ready and schedulable")
        if variant == "staggered":
            sim.scale_up_delays[tpu_pools[1]] = sim.timings.scale_up + 120
        objects = scenario.render_queue_jobs(infra, "default/user-queue", 2, f"split-{variant}")
        records = watch.submit(objects)
        watch.wait_running(records)
        placements[label] = {r.name: r.worker_pools() for r in records}
        sim.scale_up_delays.clear()
        watch.wait_finished(records)
        watch.wait_scaled_down(keep)
    return Outcome(watch, {"placements": placements, "pools": tpu_pools})


def _ready_untainted(client: KubeClient) -> int:
    count = 0
    for node in client.list("v1", "Node"):
        taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get(
            "conditions", []))
        if ready and "node.kubernetes.io/not-ready" not in taints and (node["metadata"].get("labels") or {}).get(
                "tpu-fallback/plan") == "on-demand":
            count += 1
    return count


PROD = Stack("prod")


class CpuPodSetOnTpuFlavorError(AssertionError):
    """A CPU-only PodSet of a RayJob (the Ray head or the submitter Job) was given a TPU plan's flavor."""


def unpinned_cpu_pod_sets(objects: Sequence[Mapping[str, Any]], system_pool: str) -> list[str]:
    """"<RayJob>/<PodSet>" for each head or submitter pod template of the RayJobs that no nodeSelector pins to the
    system pool. Kueue may then give that PodSet any flavor with cpu/memory quota left, a TPU plan's included: the
    pod then waits for TPU nodes it does not tolerate (on-demand), or the job for a ProvisioningRequest (dws)."""
    out = []
    for job in objects:
        if job["kind"] != "RayJob":
            continue
        spec = job["spec"]
        templates = {"head": spec["rayClusterSpec"]["headGroupSpec"]["template"],
                     "submitter": spec.get("submitterPodTemplate")}
        for name, template in templates.items():
            selector = ((template or {}).get("spec") or {}).get("nodeSelector") or {}
            if selector.get(POOL_LABEL) != system_pool:
                out.append(f"{job['metadata']['name']}/{name}")
    return out


def run_prod(client: KubeClient, sim: GkeSim, infra: ProgramRun, per_namespace: int = 4) -> Outcome:
    """The prod stack: two namespaces (ml-research, ml-prod) on one ClusterQueue, 2 on-demand slices and plan B
    capped at 4 slices; 2 x per_namespace jobs submitted alternately, more than fit, drained in order."""
    watch = Watch(client, sim)
    scenario.apply_infra(client, infra)
    plans = flavor_plans(infra, list(sim.pools.values()))
    queues = [(lq["metadata"]["namespace"], lq["metadata"]["name"]) for lq in infra.kubernetes_objects()
              if lq["kind"] == "LocalQueue"]
    rendered = {ns: [o for o in scenario.render_queue_jobs(infra, f"{ns}/{q}", per_namespace, ns.split("-")[-1])]
                for ns, q in sorted(queues, reverse=True)}  # ml-research first
    objects: list[dict[str, Any]] = []
    for ns in rendered:
        objects += [o for o in rendered[ns] if o["kind"] != "RayJob"]
    jobs = list(zip(*[[o for o in rendered[ns] if o["kind"] == "RayJob"] for ns in rendered], strict=True))
    ordered = [job for pair in jobs for job in pair]
    # The six that fit run long enough (12 s) to hold their quota while the last two are submitted.
    objects += [with_run_time(job, 12) if i < 6 else job for i, job in enumerate(ordered)]
    records = watch.submit(objects)
    at_once: dict[str, int] = {}
    max_at_once = {"reserved": 0, "dws": 0}

    def progress() -> bool:
        for r in records:
            for pod_set in ("head", "submitter"):
                wrong = {f for f in r.flavors.get(pod_set, set()) if plans.get(f) != "system"}
                if wrong:
                    message = (f"{r.key}: Kueue gave its {pod_set} PodSet the flavor(s) {sorted(wrong)} of plan "
                               f"{sorted({plans.get(f, '?') for f in wrong})} (the system flavor's quota was full); "
                               f"the job cannot start there. Unfinished jobs:\n{watch.describe_unfinished()}")
                    print(message)
                    raise CpuPodSetOnTpuFlavorError(message)
        holding = [r for r in records if r.reserved is not None and r.finished is None]
        max_at_once["reserved"] = max(max_at_once["reserved"], len(holding))
        on_dws = [r for r in holding if tpu_plan(r, plans) == "flex-start"]
        max_at_once["dws"] = max(max_at_once["dws"], len(on_dws))
        return all(r.finished is not None for r in records)

    watch.wait(progress, 240, "every prod job to finish")
    at_once.update(max_at_once)
    watch.wait_scaled_down(system_pools(list(sim.pools.values())))
    facts = {
        "records": records,
        "at_once": at_once,
        "queue_idle": watch.wait(lambda: cluster_queue_idle(client, "cluster-queue"), 30, "quota free"),
        "max_nodes": dict(watch.max_nodes),
    }
    return Outcome(watch, facts)


# The tutorial's setup, without the stock-out fallback (issue 13; fallback_scenarios.py runs it with the fallback on):
# the baseline of what a stock-out does to a Kueue that falls back on quota only.
STOCKOUT = Stack("dev", {"fallback": {"enabled": False}})
PLAN_A_POOL = "on-demand-pool"


def run_stockout(client: KubeClient, sim: GkeSim, infra: ProgramRun, stuck_for: float = 900) -> Outcome:
    """Plan A is stocked out: one RayJob, then `stuck_for` simulated seconds; then capacity returns; once the job
    runs, GCE preempts plan A's slice, and the job's workers come back on a new one."""
    watch = Watch(client, sim)
    scenario.apply_infra(client, infra)
    sim.set_capacity(PLAN_A_POOL, False)
    # A long run (12 s real), so the job is still running when its slice is preempted.
    (job,) = watch.submit([with_run_time(o, 12) for o in scenario.render_queue_jobs(infra, "default/user-queue", 1,
                                                                                    "stockout")])
    watch.wait(lambda: events(client, "default", "FailedScaleUp"), 60, "a FailedScaleUp event")
    deadline = watch.now() + sim.scale.real(stuck_for)
    watch.wait(lambda: watch.now() >= deadline or job.running is not None, stuck_for, "the stock-out window")
    facts: dict[str, Any] = {
        "flavors_during": dict(job.flavors),
        "running_during": job.running is not None,
        "pools_during": {pool for _n, pool, replica in job.placements.values() if replica},
        "failed_scale_up": sorted({e["involvedObject"]["name"] for e in events(client, "default", "FailedScaleUp")}),
        "not_triggered": [e["message"] for e in events(client, "default", "NotTriggerScaleUp")],
        "nodes_during": sorted(set(watch.node_pool_now())),
        "requests_during": request_conditions(client, "default"),
    }
    sim.set_capacity(PLAN_A_POOL, True)
    watch.wait_running([job], 120)
    facts["pools_after"] = {pool for _n, pool, replica in job.placements.values() if replica}
    first_nodes = {node for node, _p, replica in job.placements.values() if replica}
    facts["preempted"] = sorted(sim.preempt(PLAN_A_POOL))

    def workers_back() -> set[str] | None:
        nodes = {node for node, _p, replica in job.placements.values() if replica} - first_nodes
        return nodes if len(nodes) >= 4 else None

    facts["nodes_after_preemption"] = sorted(watch.wait(workers_back, 60, "the workers back on new nodes"))
    facts["pools_after_preemption"] = {watch.node_pool[n] for n in facts["nodes_after_preemption"]}
    facts["state_after_preemption"] = job.state
    watch.wait_finished([job])
    # Kueue marks the Workload Finished moments after the RayJob completes, and the watch (informers) can see the
    # RayJob first.
    facts["finished"] = watch.wait(lambda: _finished_condition(client, job), 30, "the Workload's Finished condition")
    return Outcome(watch, facts)


DWS_FAULTS = Stack("dev")
PLAN_B_POOL = "dws-pool"


def _check_state(client: KubeClient, record: JobRecord, check: str = "dws-prov") -> dict[str, Any] | None:
    wl = scenario.workload_of(client, record.namespace, record.name) or {}
    return next((c for c in (wl.get("status") or {}).get("admissionChecks", []) if c["name"] == check), None)


def run_dws_faults(client: KubeClient, sim: GkeSim, infra: ProgramRun) -> Outcome:
    """GKE's DWS answers that go wrong, injected on Kueue's ProvisioningRequests (dev stack):

    1. Failed while still queued (plan B stocked out): Kueue retries the check (state Retry; a new request after
       the ProvisioningRequestConfig's back-off).
    2. BookingExpired once the job runs: Kueue ignores it, the job goes on.
    3. CapacityRevoked while it runs: the nodes go away, Kueue rejects the check and deactivates the Workload.
    """
    watch = Watch(client, sim)
    scenario.apply_infra(client, infra)
    facts: dict[str, Any] = {}
    sim.set_capacity(PLAN_B_POOL, False)
    jobs = scenario.render_queue_jobs(infra, "default/user-queue", 2, "faults")
    # Job 1 holds plan A's quota for the whole scenario (a long run), so jobs 2 and 3 go to plan B.
    jobs = [with_run_time(o, 120) if o["metadata"]["name"] == "faults-1" else o for o in jobs]
    first, second = watch.submit(jobs)
    watch.wait(lambda: [k for k, c in sim.requests().items() if c.get("Accepted", {}).get("status") == "True"
                        and k.startswith("default/rayjob-faults-2-")], 60, "job 2's ProvisioningRequest Accepted")
    (request,) = [k for k in sim.requests() if k.startswith("default/rayjob-faults-2-")]
    facts["check_queued"] = dict(_check_state(client, second) or {})
    sim.inject_condition(request, "Failed")

    def retried() -> dict[str, Any] | None:
        check = _check_state(client, second)
        if check and (check["state"] in ("Retry", "Rejected") or "Retrying after failure" in check.get("message", "")):
            return check
        return None

    facts["check_after_failed"] = watch.wait(retried, 30, "Kueue to retry after the Failed request")
    # 2 and 3 on a third job, with plan B's capacity back.
    sim.set_capacity(PLAN_B_POOL, True)
    # A long run, so that it is still running when its capacity is revoked: with the default 10 s it finished
    # before Kueue's eviction under a loaded CPU, and a finished Workload is never evicted.
    (third,) = watch.submit([with_run_time(o, 120)
                             for o in scenario.render_queue_jobs(infra, "default/user-queue", 1, "revoked")])
    watch.wait_running([third])
    (third_request,) = [k for k in sim.requests() if k.startswith("default/rayjob-revoked-1-")]
    sim.inject_condition(third_request, "BookingExpired")
    time.sleep(sim.scale.real(300))  # 5 simulated minutes: Kueue must not react
    facts["check_after_booking_expired"] = dict(_check_state(client, third) or {})
    facts["state_after_booking_expired"] = (client.get("ray.io/v1", "RayJob", third.name, "default") or {}).get(
        "status", {}).get("jobDeploymentStatus")
    sim.inject_condition(third_request, "CapacityRevoked")

    def deactivated() -> dict[str, Any] | None:
        wl = scenario.workload_of(client, "default", third.name)
        return wl if wl is not None and wl["spec"].get("active") is False else None

    facts["after_revoked"] = watch.wait(deactivated, 60, "Kueue to deactivate job 3's Workload")
    # The check's Rejected state is short-lived: once the eviction has cleared the Workload's admission, Kueue drops
    # the flavor-bound dws-prov check from its status (AdmissionChecksForWorkload lists only the checks of every
    # flavor then; seen under a cold build's load). The Evicted condition keeps why: read both.
    facts["check_after_revoked"] = dict(_check_state(client, third) or {})

    facts["evicted_after_revoked"] = watch.wait(
        lambda: scenario.true_condition(scenario.workload_of(client, "default", third.name), "Evicted"), 60,
        "Kueue to evict job 3's deactivated Workload")
    facts["nodes_after_revoked"] = sorted(set(watch.node_pool_now()))
    facts["first_plan"] = dict(first.flavors)
    return Outcome(watch, facts)
