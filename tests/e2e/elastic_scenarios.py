"""Elastic RayJobs on the simulated GKE (issue 15 item 1): plan A only, scaled up and down through workload slices.

An elastic RayJob (annotation `kueue.x-k8s.io/elastic-job: "true"`, `enableInTreeAutoscaling`, worker group
minReplicas/maxReplicas) is allowed for single-host slices only, and runs on plan A only: its workers do not tolerate
`cloud.google.com/gke-queued`, and the DWS flavors declare that taint (ResourceFlavor `nodeTaints`), so Kueue never
assigns it a dws flavor. The stack here is v6e 2x2 (one ct6e-standard-4t host, 4 chips, a slice): `on-demand-pool`
autoscales to 2 nodes, flavor `on-demand` has 8 chips of quota; plan B is `dws-pool`.

There is no Ray here, so the scenarios do what the Ray autoscaler does to the RayCluster (KubeRay's node provider):
a scale-up patches `spec.workerGroupSpecs[i].replicas`; a scale-down lowers `replicas` and names the worker in
`scaleStrategy.workersToDelete` (KubeRay deletes no worker of an autoscaled cluster on its own). Kueue 0.19.2 reads
the RayCluster's replicas as the RayJob's PodSet counts (pkg/controller/jobs/raycluster UpdatePodSets): a scale-up
of an admitted Workload creates a new Workload slice (annotation `kueue.x-k8s.io/workload-slice-replacement-for`)
that, once admitted, finishes the old one (reason WorkloadSliceReplaced); a scale-down updates the admitted slice's
counts in place (pkg/workloadslicing EnsureWorkloadSlices).

Kueue runs with the integrations and feature gates the stack's Helm release gives it (`kueue_options`): the chart's
frameworks include `ray.io/raycluster`, whose webhook puts the `kueue.x-k8s.io/elastic-job` scheduling gate on an
elastic RayCluster's pod templates, so a scaled-up worker waits, gated, until Kueue admits the slice that covers it
(Kueue's ElasticJobUngater). Without that integration the new worker would be scheduled before any admission.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.gke_sim import POOL_LABEL, PROVREQ_API, GkeSim, with_run_time
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program
from tpu_fallback.render.files import load_template

KUEUE_API = scenario.KUEUE_API
WORKER_GROUP = gs.TPU_GROUP  # the RayJob's worker group, and its Kueue PodSet
ELASTIC_RANGE = {"minReplicas": 1, "maxReplicas": 2}
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
ELASTIC_GATE = "kueue.x-k8s.io/elastic-job"  # Kueue's scheduling gate on elastic pods (ElasticJobSchedulingGate)
REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
QUEUED_TAINT_IN_DWS = "untolerated taint {cloud.google.com/gke-queued true NoSchedule <nil>} in flavor dws"
PLAN_A_POOL = "on-demand-pool"
PLAN_B_POOL = "dws-pool"
QUEUE = "default/user-queue"

# v6e 2x2: a single-host slice, the only kind the jobs project lets be elastic. Plan A grows to 2 slices; the
# stock-out fallback is off (this is about Kueue's flavor choice, not about stock-outs).
ELASTIC = gs.Stack("dev", {"tpu": {"type": "v6e", "topology": "2x2"}, "onDemand": {"maxSlices": 2},
                           "fallback": {"enabled": False}})

# The integrations whose CRDs the control plane installs (Kueue waits forever for the others' APIs).
SUPPORTED_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


def kueue_options(infra: ProgramRun) -> dict[str, Any]:
    """ControlPlane's `frameworks` and `feature_gates` as the stack's Kueue Helm release runs Kueue: the gates of
    controllerManager.featureGates, the frameworks of managerConfig (the chart's own, kept in
    render/templates/kueue-manager-config.yaml, where the stack sets none) that this control plane can serve."""
    release = next(r for r in infra.of_type(HELM_RELEASE) if "kueue" in str(r.inputs.get("chart", r.name)))
    values = release.inputs.get("values") or {}
    gates = {str(g["name"]): bool(g["enabled"])
             for g in (values.get("controllerManager") or {}).get("featureGates") or []}
    raw = ((values.get("managerConfig") or {}).get("controllerManagerConfigYaml"))
    config = yaml.safe_load(raw) if raw else load_template("kueue-manager-config.yaml")
    frameworks = [f for f in config["integrations"]["frameworks"] if f in SUPPORTED_FRAMEWORKS]
    return {"frameworks": frameworks, "feature_gates": gates}


def render_jobs(infra: ProgramRun, name: str, count: int = 1, *, elastic: bool = True,
                run_seconds: float | None = None) -> list[dict[str, Any]]:
    """The jobs dev stack's objects (ConfigMap, RayJobs <name>-1..) on the infra stack's user-queue, elastic
    (minReplicas 1, maxReplicas 2) or not; `run_seconds`: each Ray job's run time (real seconds)."""
    refs = {scenario.INFRA_STACK: {"outputs": copy.deepcopy(infra.outputs),
                                   "secretOutputNames": sorted(infra.secret_outputs)}}
    job: dict[str, Any] = {"name": name, "count": count, "queue": QUEUE}
    if elastic:
        job["elastic"] = dict(ELASTIC_RANGE)
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": [job]}, stack_references=refs)
    if run.error is not None:
        raise run.error
    objects = run.kubernetes_objects()
    return [with_run_time(o, run_seconds) for o in objects] if run_seconds is not None else objects


# --- what Kueue does with the slices ----------------------------------------------------------------------------


@dataclass
class SliceRecord:
    """One Workload slice of a RayJob, as the watch saw it over time."""

    name: str
    created: str  # metadata.creationTimestamp
    replacement_for: str | None  # namespace/name of the slice it replaces (a scale-up), None for the first
    counts: dict[str, int] = field(default_factory=dict)  # PodSet -> count, the latest seen
    worker_counts: list[int] = field(default_factory=list)  # every distinct count of the worker PodSet, in order
    tpu_flavors: set[str] = field(default_factory=set)  # every flavor ever assigned to the worker PodSet
    reserved: float | None = None  # QuotaReserved True first seen (watch clock)
    admitted: float | None = None
    finished: float | None = None
    finished_reason: str | None = None
    pending_messages: list[str] = field(default_factory=list)  # distinct QuotaReserved False messages


def _conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


class ElasticWatch(gs.Watch):
    """gs.Watch, plus every Workload slice of every job, the ProvisioningRequests ever seen and the pools' sizes.

    (gs.Watch reads one Workload per job; an elastic job has one per scale-up.)"""

    def __init__(self, client: KubeClient, sim: GkeSim) -> None:
        super().__init__(client, sim)
        self.slices: dict[str, dict[str, SliceRecord]] = {}  # job key -> slice name -> record
        self.requests: dict[str, str] = {}  # ProvisioningRequest namespace/name -> the Workload that owns it
        self.pool_sizes: list[tuple[float, dict[str, int]]] = []  # (time, pool -> nodes) at each change

    def poll(self) -> None:
        super().poll()
        now = self.now()
        sizes: dict[str, int] = {}
        for pool in self.node_pool_now():
            sizes[pool] = sizes.get(pool, 0) + 1
        if not self.pool_sizes or self.pool_sizes[-1][1] != sizes:
            self.pool_sizes.append((now, sizes))
        for namespace in sorted({r.namespace for r in self.jobs.values()}):
            for wl in self.listed(namespace).workloads:  # what super().poll() just listed
                owner = next((o["name"] for o in wl["metadata"].get("ownerReferences", []) if o["kind"] == "RayJob"),
                             None)
                if owner is not None and f"{namespace}/{owner}" in self.jobs:
                    self._record_slice(f"{namespace}/{owner}", wl, now)
            for pr in self.cache.items(PROVREQ_API, "ProvisioningRequest", namespace):
                owner = next((o["name"] for o in pr["metadata"].get("ownerReferences", [])), "")
                self.requests[f"{namespace}/{pr['metadata']['name']}"] = owner

    def _record_slice(self, job: str, wl: Mapping[str, Any], now: float) -> None:
        meta = wl["metadata"]
        records = self.slices.setdefault(job, {})
        rec = records.get(meta["name"])
        if rec is None:
            rec = records[meta["name"]] = SliceRecord(meta["name"], meta.get("creationTimestamp", ""),
                                                      (meta.get("annotations") or {}).get(REPLACEMENT_FOR))
        rec.counts = {p["name"]: int(p.get("count", 1)) for p in wl["spec"]["podSets"]}
        workers = rec.counts.get(WORKER_GROUP, 0)
        if not rec.worker_counts or rec.worker_counts[-1] != workers:
            rec.worker_counts.append(workers)
        rec.tpu_flavors |= scenario.flavors(dict(wl)).get(WORKER_GROUP, set())
        conds = _conditions(wl)
        if rec.reserved is None and conds.get("QuotaReserved", {}).get("status") == "True":
            rec.reserved = now
        if rec.admitted is None and conds.get("Admitted", {}).get("status") == "True":
            rec.admitted = now
        finished = conds.get("Finished", {})
        if rec.finished is None and finished.get("status") == "True":
            rec.finished, rec.finished_reason = now, finished.get("reason")
        pending = conds.get("QuotaReserved", {})
        if pending.get("status") == "False" and pending.get("message") and \
                pending["message"] not in rec.pending_messages:
            rec.pending_messages.append(pending["message"])

    # --- reading it back ----------------------------------------------------------------------------------------

    def slices_of(self, record: gs.JobRecord) -> list[SliceRecord]:
        """The job's slices, oldest first."""
        return sorted(self.slices.get(record.key, {}).values(), key=lambda s: (s.created, s.name))

    def active_slice(self, record: gs.JobRecord) -> SliceRecord | None:
        """The slice holding the job's quota now: admitted, not finished (the newest if several)."""
        live = [s for s in self.slices_of(record) if s.admitted is not None and s.finished is None]
        return live[-1] if live else None

    def tpu_flavors_ever(self, record: gs.JobRecord) -> set[str]:
        return {f for s in self.slices_of(record) for f in s.tpu_flavors}

    def requests_of(self, record: gs.JobRecord) -> list[str]:
        names = {s.name for s in self.slices_of(record)}
        return sorted(pr for pr, owner in self.requests.items() if owner in names)

    def pool_size(self, pool: str) -> int:
        return sum(1 for p in self.node_pool_now() if p == pool)

    def max_pool_size_between(self, pool: str, start: float, end: float) -> int:
        """The most nodes the pool had at once between two watch times."""
        sizes = [s.get(pool, 0) for t, s in self.pool_sizes if start <= t <= end]
        before = [s.get(pool, 0) for t, s in self.pool_sizes if t < start]
        return max(sizes + before[-1:] or [0])


def ray_cluster(client: KubeClient, record: gs.JobRecord) -> dict[str, Any] | None:
    """The RayCluster KubeRay made for the RayJob (by owner: the RayJob's status.rayClusterName may lag)."""
    for rc in client.list("ray.io/v1", "RayCluster", record.namespace):
        if any(o["kind"] == "RayJob" and o["name"] == record.name for o in rc["metadata"].get("ownerReferences", [])):
            return rc
    return None


def worker_pods(client: KubeClient, record: gs.JobRecord) -> list[dict[str, Any]]:
    """The job's worker pods now (not being deleted), by name."""
    rc = ray_cluster(client, record)
    if rc is None:
        return []
    selector = f"ray.io/cluster={rc['metadata']['name']},ray.io/node-type=worker"
    pods = [p for p in client.list("v1", "Pod", record.namespace, label_selector=selector)
            if not p["metadata"].get("deletionTimestamp")]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def running_on(pods: Sequence[Mapping[str, Any]], watch: gs.Watch) -> dict[str, str]:
    """Running pod -> the pool of its node (pods not Running left out)."""
    out = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        node = (pod.get("spec") or {}).get("nodeName", "")
        if node not in watch.node_pool:  # a node newer than the watch's last poll
            labels = ((watch.client.get("v1", "Node", node) or {}).get("metadata") or {}).get("labels") or {}
            if POOL_LABEL in labels:
                watch.node_pool[node] = labels[POOL_LABEL]
        out[pod["metadata"]["name"]] = watch.node_pool.get(node, "?")
    return out


def gates(pod: Mapping[str, Any]) -> list[str]:
    return [g["name"] for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def scale(client: KubeClient, record: gs.JobRecord, replicas: int, delete: Sequence[str] = ()) -> None:
    """What the Ray autoscaler does (KubeRay node provider): a JSON patch of the worker group's replicas and, for a
    scale-down, the workers to delete."""
    rc = ray_cluster(client, record)
    if rc is None:
        raise AssertionError(f"{record.key} has no RayCluster to scale")
    index = next(i for i, g in enumerate(rc["spec"]["workerGroupSpecs"]) if g["groupName"] == WORKER_GROUP)
    patch: list[dict[str, Any]] = [
        {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/replicas", "value": replicas}]
    if delete:
        patch.append({"op": "add", "path": f"/spec/workerGroupSpecs/{index}/scaleStrategy",
                      "value": {"workersToDelete": list(delete)}})
    client.request("PATCH", f"/apis/ray.io/v1/namespaces/{record.namespace}/rayclusters/{rc['metadata']['name']}",
                   patch, content_type="application/json-patch+json")


def flavor_usage(client: KubeClient, cluster_queue: str = "cluster-queue") -> dict[str, dict[str, dict[str, str]]]:
    """"reserved" and "admitted" -> flavor -> resource -> total, from the ClusterQueue's status."""
    status = (client.get(KUEUE_API, "ClusterQueue", cluster_queue) or {}).get("status") or {}
    out: dict[str, dict[str, dict[str, str]]] = {}
    for key, field_name in (("reserved", "flavorsReservation"), ("admitted", "flavorsUsage")):
        out[key] = {f["name"]: {r["name"]: str(r.get("total", "0")) for r in f.get("resources", [])}
                    for f in status.get(field_name, [])}
    return out


def provisioning_events(client: KubeClient, namespace: str) -> dict[str, list[str]]:
    """Workload -> Kueue's ProvisioningRequestCreated events on it (lasting evidence, unlike a poll, that Kueue
    created a ProvisioningRequest for it, i.e. that it reserved quota on a dws flavor)."""
    out: dict[str, list[str]] = {}
    for event in gs.events(client, namespace, "ProvisioningRequestCreated"):
        name = (event.get("involvedObject") or event.get("regarding") or {}).get("name", "")
        out.setdefault(name, []).append(str(event.get("message") or event.get("note") or ""))
    return out


def tpu_chips(usage: Mapping[str, Mapping[str, Mapping[str, str]]], kind: str, flavor: str) -> str:
    return usage.get(kind, {}).get(flavor, {}).get("google.com/tpu", "0")


# --- scenarios -------------------------------------------------------------------------------------------------


def run_scale_up_down(client: KubeClient, sim: GkeSim, infra: ProgramRun) -> gs.Outcome:
    """One elastic RayJob: admitted with 1 worker on plan A; the autoscaler asks for 2, then for 1 again."""
    watch = ElasticWatch(client, sim)
    scenario.apply_infra(client, infra)
    facts: dict[str, Any] = {}
    (job,) = watch.submit(render_jobs(infra, "elastic", run_seconds=300))
    watch.wait(lambda: len(running_on(worker_pods(client, job), watch)) == 1 and job.running is not None, 60,
               f"{job.key}: head and 1 worker Running")
    facts["workers_before"] = running_on(worker_pods(client, job), watch)
    watch.poll()  # the pool's nodes from after the workers were seen Running (the last poll may predate a node)
    facts["pool_before"] = watch.pool_size(PLAN_A_POOL)
    facts["usage_before"] = flavor_usage(client)
    rc = ray_cluster(client, job) or {}
    facts["worker_template_gates"] = gates({"spec": rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]})
    first = watch.active_slice(job)
    facts["first_slice"] = copy.deepcopy(first)

    # Scale-up: 1 -> 2 workers.
    t_up = watch.now()
    scale(client, job, 2)

    def scaled_up() -> bool:
        new = watch.active_slice(job)
        return bool(new and first and new.name != first.name and new.counts.get(WORKER_GROUP) == 2
                    and len(running_on(worker_pods(client, job), watch)) == 2)

    watch.wait(scaled_up, 60, f"{job.key}: a 2-worker slice admitted and 2 workers Running")
    second = watch.active_slice(job)
    assert second is not None
    facts["scale_up_admitted_after"] = (second.admitted or t_up) - t_up
    facts["scale_up_running_after"] = watch.now() - t_up
    facts["workers_after_up"] = running_on(worker_pods(client, job), watch)
    watch.poll()  # as above: under load the last poll predated the second node once (pool size 1, workers on 2)
    facts["pool_after_up"] = watch.pool_size(PLAN_A_POOL)
    watch.wait(lambda: first is not None and watch.slices[job.key][first.name].finished is not None, 30,
               f"{job.key}: the first slice finished")
    facts["usage_after_up"] = flavor_usage(client)
    facts["slices_after_up"] = copy.deepcopy(watch.slices_of(job))

    # Scale-down: 2 -> 1, the newer worker named for deletion (the Ray autoscaler names an idle one).
    victim = sorted(facts["workers_after_up"])[-1]
    victim_pod = client.get("v1", "Pod", victim, job.namespace) or {}
    victim_node = (victim_pod.get("spec") or {}).get("nodeName", "")
    t_down = watch.now()
    scale(client, job, 1, delete=[victim])

    def scaled_down() -> bool:
        usage = flavor_usage(client)
        left = sorted(set(facts["workers_after_up"]) - {victim})
        chips = {tpu_chips(usage, kind, "on-demand") for kind in ("reserved", "admitted")}
        return sorted(running_on(worker_pods(client, job), watch)) == left and chips == {"4"}

    watch.wait(scaled_down, 60, f"{job.key}: 1 worker left and 4 chips of on-demand in use")
    facts["usage_after_down"] = flavor_usage(client)
    facts["scale_down_quota_after"] = watch.now() - t_down
    watch.wait(lambda: watch.pool_size(PLAN_A_POOL) == 1, 60, f"{PLAN_A_POOL} scaled down to 1 node")
    facts["scale_down_node_after"] = watch.now() - t_down
    facts["victim"], facts["victim_node"] = victim, victim_node
    facts["nodes_after_down"] = sorted(n for n, p in watch.node_pool.items() if p == PLAN_A_POOL
                                       and n in {x["metadata"]["name"] for x in client.list("v1", "Node")})
    facts["workers_after_down"] = running_on(worker_pods(client, job), watch)
    facts["slices_after_down"] = copy.deepcopy(watch.slices_of(job))
    facts["t_up"], facts["t_down"] = t_up, t_down
    facts["requests"] = dict(watch.requests)
    facts["sim_requests"] = sim.requests()
    facts["provisioning_events"] = provisioning_events(client, job.namespace)
    return gs.Outcome(watch, facts)


def run_plan_a_only(client: KubeClient, sim: GkeSim, infra: ProgramRun, hold: float = 300) -> gs.Outcome:
    """Plan A full (two elastic jobs of one slice each hold its 8 chips), then, for `hold` simulated seconds each:
    the second one's scale-up, a third elastic job, and a non-elastic job (the contrast: it falls back to dws).
    Then the first elastic job is deleted, and the freed on-demand quota goes to an elastic job that waited."""
    watch = ElasticWatch(client, sim)
    scenario.apply_infra(client, infra)
    facts: dict[str, Any] = {}
    first, second = watch.submit(render_jobs(infra, "fill-a", run_seconds=300)
                                 + [o for o in render_jobs(infra, "fill-b", run_seconds=300) if o["kind"] == "RayJob"])
    watch.wait_running([first, second], 60)
    facts["usage_full"] = flavor_usage(client)
    hold_real = sim.scale.real(hold)

    # The second job's scale-up while plan A is full.
    before = watch.active_slice(second)
    scale(client, second, 2)

    def scale_up_pending() -> SliceRecord | None:
        pending = [s for s in watch.slices_of(second) if s.replacement_for and s.pending_messages]
        return pending[-1] if pending else None

    watch.wait(scale_up_pending, 30, f"{second.key}: its scale-up slice evaluated")
    _hold(watch, hold_real)
    facts["scale_up_slice"] = copy.deepcopy(scale_up_pending())
    facts["second_active"] = copy.deepcopy(watch.active_slice(second))
    facts["second_before"] = copy.deepcopy(before)
    facts["second_workers"] = {p["metadata"]["name"]: (running_on([p], watch).get(p["metadata"]["name"]),
                                                       (p.get("status") or {}).get("phase"), gates(p))
                               for p in worker_pods(client, second)}

    # A third elastic job: it waits for plan A.
    (third,) = watch.submit([o for o in render_jobs(infra, "waits") if o["kind"] == "RayJob"])
    watch.wait(lambda: watch.slices_of(third) and watch.slices_of(third)[0].pending_messages, 30,
               f"{third.key}: Kueue's verdict")
    _hold(watch, hold_real)
    facts["third_slices_while_full"] = copy.deepcopy(watch.slices_of(third))
    facts["third_conditions"] = {k: dict(v) for k, v in _conditions(
        scenario.workload_of(client, third.namespace, third.name) or {}).items()}

    # The contrast: a non-elastic job at that moment falls back to dws.
    (plain,) = watch.submit([o for o in render_jobs(infra, "plain", elastic=False, run_seconds=300)
                             if o["kind"] == "RayJob"])
    watch.wait_running([plain], 60)
    facts["plain_requests"] = watch.requests_of(plain)
    facts["plain_workers"] = running_on(worker_pods(client, plain), watch)
    facts["third_after_plain"] = copy.deepcopy(watch.slices_of(third))
    facts["scale_up_after_plain"] = copy.deepcopy(scale_up_pending())

    # The first job goes (deleted: ending it on cue keeps the steps above from racing its run time): 4 chips of
    # on-demand free up, and an elastic job that waited gets them.
    client.delete("ray.io/v1", "RayJob", first.name, first.namespace)

    def next_admitted() -> SliceRecord | None:
        waited = [s for r in (second, third) for s in watch.slices_of(r) if before is None or s.name != before.name]
        done = [s for s in waited if s.admitted is not None]
        return done[0] if done else None

    facts["freed_to"] = copy.deepcopy(watch.wait(next_admitted, 60, "an elastic job admitted on the freed quota"))
    facts["freed_to_job"] = next(r.key for r in (second, third)
                                 if facts["freed_to"].name in watch.slices.get(r.key, {}))
    facts["usage_end"] = flavor_usage(client)
    facts["records"] = {"first": first, "second": second, "third": third, "plain": plain}
    facts["flavors_ever"] = {r.key: watch.tpu_flavors_ever(r) for r in (first, second, third, plain)}
    facts["requests_ever"] = {r.key: watch.requests_of(r) for r in (first, second, third, plain)}
    events = provisioning_events(client, plain.namespace)
    facts["provisioning_events"] = {r.key: {w: events[w] for w in sorted(watch.slices.get(r.key, {})) if w in events}
                                    for r in (first, second, third, plain)}
    return gs.Outcome(watch, facts)


def _hold(watch: gs.Watch, seconds: float) -> None:
    """Keep polling for `seconds` real seconds (the state must hold, not just appear)."""
    deadline = time.monotonic() + seconds
    watch.wait(lambda: time.monotonic() >= deadline, seconds + 30, f"{seconds:g} s to pass")
