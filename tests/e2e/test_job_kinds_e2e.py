"""Issue 37 item 3 on the simulated GKE: a JobSet, a RayCluster and a batch Job stuck on a stocked-out plan A reach
plan B (the "done when" line "a JobSet and a RayCluster stuck on a stocked-out plan A reach plan B").

The cluster is the stock-out modules' (fallback_scenarios.FallbackBox: dev stack with short fallback times, real
Kueue 0.19.2 with the plan's waitForPodsReady, KubeRay, kube-scheduler, KWOK, the simulated GKE, the controller as
shipped), with Kueue running the integrations the shipped Kueue configuration enables
(tpu_fallback/render/templates/kueue-manager-config.yaml) whose CRDs this control plane serves: batch/job,
ray.io/rayjob, ray.io/raycluster and jobset.x-k8s.io/jobset (the JobSet CRD from sigs.k8s.io/jobset v0.12.0,
installed before Kueue starts). The JobSet controller is played by tests/e2e/jobset_player.py (from its source).

Each test: plan A's pool has no capacity (`sim.set_capacity(PLAN_A_POOL, False)`); one job of the kind is submitted
to `default/user-queue` with a v6e 4x4 slice's TPU workers (4 pods x 4 chips, the jobs project's worker template,
scenario.render_queue_jobs); Kueue admits it to plan A (quota), its TPU pods stay unschedulable, GKE's autoscaler
(the sim) writes FailedScaleUp on them; the controller attributes them to the job's Workload (by the JobSet's label,
the RayCluster owner, the Job owner), closes plan A and evicts the job; Kueue admits it again, to plan B (dws), the
sim's DWS provisions and the TPU pods run on `dws-pool`. Asserted: the Workload reserved plan A, then plan B; the
controller's Events (the close on the ResourceFlavor and on the Workload, the eviction); all TPU pods Running on
dws-pool at once; plan A closed within GKE's FailedScaleUp + 15 s (fallback_scenarios.CONTROLLER_LATENCY), from the
Events' own times. Bounds are the config's times plus CONTROLLER_LATENCY. Run it alone with
`venv/bin/python -m pytest tests/e2e/test_job_kinds_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import scenario
from tests.e2e.gke_sim import KWOK_COMPLETE_DELAY, POOL_LABEL
from tests.e2e.jobset_player import JOBSET_API, JOBSET_NAME_KEY, JobSetPlayer, defaulted
from tests.e2e.kube import KubeClient
from tpu_fallback.render.files import load_template

pytestmark = pytest.mark.e2e

T = TypeVar("T")
PLAN_A, PLAN_B = "on-demand", "dws"  # the dev stack's TPU flavors
PLAN_A_POOL, PLAN_B_POOL = fs.PLAN_A_POOL, fs.PLAN_B_POOL
NAMESPACE, QUEUE = "default", "user-queue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TPU = "google.com/tpu"
EVICTED_EVENT = "EvictedFromPlanA"  # the controller's Event on the Workload it evicts from plan A
ROUNDING = 1.0  # Events carry whole seconds
WORKERS = 4  # a v6e 4x4 slice: 4 hosts of 4 chips
# The integrations this control plane can serve (their CRDs are installed); Kueue runs those of the shipped config.
SERVED_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster", "jobset.x-k8s.io/jobset")


def shipped_frameworks() -> list[str]:
    """The shipped Kueue configuration's integrations that this control plane serves."""
    config = load_template("kueue-manager-config.yaml")
    return [f for f in config["integrations"]["frameworks"] if f in SERVED_FRAMEWORKS]


class JobKindsBox(fs.FallbackBox):
    """The stock-out modules' cluster, with Kueue's JobSet and RayCluster integrations on as shipped."""

    def __init__(self) -> None:
        super().__init__()
        self.options["frameworks"] = shipped_frameworks()


@pytest.fixture(scope="module")
def box() -> Iterator[JobKindsBox]:
    with JobKindsBox() as cluster_box:
        yield cluster_box


# --- the jobs ------------------------------------------------------------------------------------------------------


def rendered(env: fs.Env) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The jobs dev stack's objects other than its RayJob (the train script's ConfigMap), and its RayJob."""
    objects = scenario.render_queue_jobs(env.infra, f"{NAMESPACE}/{QUEUE}", 1, "kinds")
    (rayjob,) = [o for o in objects if o["kind"] == "RayJob"]
    return [o for o in objects if o["kind"] != "RayJob"], rayjob


def worker_template(rayjob: Mapping[str, Any]) -> dict[str, Any]:
    """The RayJob's TPU worker pod template (gs.TPU_GROUP): its container, TPU requests, node selector for the slice
    type and topology, tolerations of the TPU and queued taints, the script volume."""
    (group,) = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert int(group["numOfHosts"]) == WORKERS and int(group.get("replicas", 1)) == 1, group
    template: dict[str, Any] = copy.deepcopy(group["template"])
    return template


def with_run_time(template: Mapping[str, Any], seconds: float) -> dict[str, Any]:
    """The pod template with KWOK's pod-complete delay (its pods of a Job succeed `seconds` after they run)."""
    out = copy.deepcopy(dict(template))
    out.setdefault("metadata", {}).setdefault("annotations", {})[KWOK_COMPLETE_DELAY] = f"{int(seconds * 1000)}ms"
    return out


def jobset(name: str, rayjob: Mapping[str, Any], run_seconds: float) -> dict[str, Any]:
    """A JobSet of one replicatedJob, one Job of WORKERS indexed pods: the slice's hosts, as GKE's TPU JobSet
    examples write it (backoffLimit 0, restartPolicy Never), as the JobSet webhook would default it."""
    template = with_run_time(worker_template(rayjob), run_seconds)
    template["spec"]["restartPolicy"] = "Never"
    return defaulted({
        "apiVersion": JOBSET_API, "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: QUEUE}},
        "spec": {"replicatedJobs": [{"name": "slice", "replicas": 1, "template": {"spec": {
            "parallelism": WORKERS, "completions": WORKERS, "backoffLimit": 0, "template": template}}}]},
    })


def ray_cluster(name: str, rayjob: Mapping[str, Any]) -> dict[str, Any]:
    """A RayCluster with the RayJob's head and TPU worker group (rayClusterSpec as the jobs project renders it)."""
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: QUEUE}},
            "spec": copy.deepcopy(rayjob["spec"]["rayClusterSpec"])}


def batch_job(name: str, rayjob: Mapping[str, Any], run_seconds: float) -> dict[str, Any]:
    """A batch Job of WORKERS indexed pods with the TPU worker template."""
    template = with_run_time(worker_template(rayjob), run_seconds)
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {QUEUE_LABEL: QUEUE}},
            "spec": {"parallelism": WORKERS, "completions": WORKERS, "completionMode": "Indexed",
                     "backoffLimit": 0, "template": template}}


@dataclass(frozen=True)
class Kind:
    """How to find a job's Workload and its TPU pods."""

    api_version: str
    kind: str
    name: str
    pod_selector: Callable[[Mapping[str, Any]], bool]


def jobset_kind(name: str) -> Kind:
    return Kind(JOBSET_API, "JobSet", name, lambda p: _labels(p).get(JOBSET_NAME_KEY) == name)


def ray_cluster_kind(name: str) -> Kind:
    return Kind("ray.io/v1", "RayCluster", name, lambda p: _labels(p).get("ray.io/cluster") == name)


def batch_job_kind(name: str) -> Kind:
    return Kind("batch/v1", "Job", name, lambda p: _labels(p).get("batch.kubernetes.io/job-name") == name)


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def tpu_chips(pod: Mapping[str, Any]) -> int:
    return sum(int(((c.get("resources") or {}).get("requests") or {}).get(TPU, 0))
               for c in (pod.get("spec") or {}).get("containers") or [])


# --- following the job -----------------------------------------------------------------------------------------


@dataclass
class Track:
    """What the watch saw of one job: its Workloads, the TPU flavors they reserved, its TPU pods."""

    workloads: set[str] = field(default_factory=set)
    reservations: list[tuple[float, str]] = field(default_factory=list)  # (watch time, TPU flavor) at each change
    released: bool = False
    evictions: dict[str, int] = field(default_factory=dict)  # reason -> count (status.schedulingStats)
    finished: bool = False
    last: dict[str, Any] = field(default_factory=dict)
    # When all its TPU pods were first seen Running at once, and on which pools.
    all_running_at: float | None = None
    running_pools: dict[str, str] = field(default_factory=dict)  # pod -> pool
    pending_pools_seen: set[str] = field(default_factory=set)  # nodeSelector pools of its unscheduled TPU pods

    def flavors_reserved(self) -> list[str]:
        return [flavor for _t, flavor in self.reservations]


def tpu_flavor(workload: Mapping[str, Any]) -> str | None:
    """The flavor of the Workload's TPU resources (any PodSet's google.com/tpu assignment)."""
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        flavor = (assignment.get("flavors") or {}).get(TPU)
        if flavor:
            return str(flavor)
    return None


class KindWatch(fs.FallbackWatch):
    """fs.FallbackWatch (plan A's taints, the controller's health) plus one job of any kind: its Workloads (owned
    by the job) and its TPU pods, from the sim's informers; a wait also fails at once if the JobSet player did."""

    def __init__(self, env: fs.Env, job: Kind, player: JobSetPlayer | None = None) -> None:
        super().__init__(env.client, env.sim, env.controller, env.config)
        self.job = job
        self.player = player
        self.record = Track()

    def poll(self) -> None:
        super().poll()
        now = self.now()
        track, job = self.record, self.job
        for wl in self.cache.items(scenario.KUEUE_API, "Workload", NAMESPACE):
            if not any(o.get("kind") == job.kind and o.get("name") == job.name
                       for o in wl["metadata"].get("ownerReferences") or []):
                continue
            track.workloads.add(wl["metadata"]["name"])
            track.last = wl
            stats = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
            evictions: dict[str, int] = {}
            for entry in stats:
                evictions[str(entry.get("reason"))] = evictions.get(str(entry.get("reason")), 0) + int(
                    entry.get("count", 0))
            track.evictions = evictions
            track.finished = scenario.condition_status(wl, "Finished") == "True"
            reserved = scenario.condition_status(wl, "QuotaReserved") == "True"
            flavor = tpu_flavor(wl) if reserved else None
            if flavor and (track.released or not track.reservations or track.reservations[-1][1] != flavor):
                track.reservations.append((now, flavor))
            track.released = not reserved
        pods = [p for p in self.cache.items("v1", "Pod", NAMESPACE) if job.pod_selector(p) and tpu_chips(p) > 0
                and not p["metadata"].get("deletionTimestamp")]
        for pod in pods:
            if not (pod.get("spec") or {}).get("nodeName"):
                track.pending_pools_seen.add(str(((pod.get("spec") or {}).get("nodeSelector") or {}).get(
                    POOL_LABEL, "")))
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
                   and (p.get("spec") or {}).get("nodeName")]
        if track.all_running_at is None and len(running) >= WORKERS:
            track.all_running_at = now
            track.running_pools = {p["metadata"]["name"]: self._pool_of(str(p["spec"]["nodeName"])) for p in running}

    def _pool_of(self, node: str) -> str:
        if node not in self.node_pool:
            found = self.client.get("v1", "Node", node) or {"metadata": {}}
            self.node_pool[node] = _labels(found).get(POOL_LABEL, "")
        return self.node_pool[node]

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.3) -> T:
        def checked() -> T | None:
            if self.player is not None:
                self.player.check()
            return predicate()

        try:
            return super().wait(checked, timeout, what, interval)
        except TimeoutError as err:
            err.add_note(f"{self.job.kind} {self.job.name}: {self.record}")
            if self.player is not None:
                err.add_note("JobSet player:\n" + "\n".join(self.player.actions[-30:]))
            raise


# --- the scenario --------------------------------------------------------------------------------------------


def _unix(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def event_time(event: Mapping[str, Any]) -> float | None:
    return _unix(event.get("firstTimestamp") or event.get("eventTime"))


def failed_scale_ups(client: KubeClient, pod_names: set[str]) -> list[float]:
    """When GKE's autoscaler wrote FailedScaleUp on one of these pods (unix seconds, whole), oldest first."""
    out = [event_time(e) for e in client.list("v1", "Event", NAMESPACE)
           if e.get("reason") == "FailedScaleUp" and (e.get("involvedObject") or {}).get("name") in pod_names]
    return sorted(t for t in out if t is not None)


def run_stuck_on_plan_a(env: fs.Env, job: Kind, obj: Mapping[str, Any], *, player: JobSetPlayer | None = None,
                        finishes: bool = True) -> dict[str, Any]:
    """Plan A stocked out; `obj` (the job `job` names) submitted; until all its TPU pods run, and (if `finishes`)
    until its Workload has finished. What the test asserts, in a dict."""
    client, sim = env.client, env.sim
    watch = KindWatch(env, job, player)
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(PLAN_A_POOL, False)
    bound = env.bounds()
    configmaps, _rayjob = rendered(env)
    for configmap in configmaps:
        client.apply(configmap)
    tpu_pod_names: set[str] = set()

    def remember_pods() -> None:
        tpu_pod_names.update(p["metadata"]["name"] for p in client.list("v1", "Pod", NAMESPACE)
                             if job.pod_selector(p) and tpu_chips(p) > 0)

    client.create(obj)
    submitted = watch.now()
    watch.wait(lambda: watch.record.flavors_reserved()[:1] == [PLAN_A], 60, f"{job.kind} reserved on plan A")
    watch.wait(lambda: PLAN_A_POOL in watch.record.pending_pools_seen, 60,
               f"{job.kind}'s TPU pods created for plan A's pool")
    remember_pods()
    watch.wait(lambda: watch.record.all_running_at is not None, bound.to_plan_b() + 30,
               f"all {WORKERS} TPU pods of the {job.kind} Running")
    facts: dict[str, Any] = {"bound": bound, "submitted": submitted, "track": watch.record,
                             "to_running": (watch.record.all_running_at or 0) - submitted}
    remember_pods()
    facts["failed_scale_ups"] = failed_scale_ups(client, tpu_pod_names)
    facts["events"] = {reason: fs.fallback_events(client, reason) for reason in (fs.STOCKOUT_EVENT, EVICTED_EVENT)}
    facts["taints"] = watch.plan_a_taint_changes()
    if finishes:
        watch.wait(lambda: watch.record.finished, 90, f"the {job.kind}'s Workload to finish")
    facts["track"] = watch.record
    facts["controller_log"] = env.controller.lines()
    return facts


def cleanup(client: KubeClient, job: Kind, timeout: float = 90) -> None:
    """Delete the job and wait for it and its TPU pods to be gone (the box's reset deletes Workloads, not jobs)."""
    client.delete(job.api_version, job.kind, job.name, NAMESPACE)

    def gone() -> bool:
        return client.get(job.api_version, job.kind, job.name, NAMESPACE) is None and not [
            p for p in client.list("v1", "Pod", NAMESPACE) if job.pod_selector(p)]

    client.wait_for(gone, timeout, f"{job.kind} {job.name} and its pods deleted")


def report(facts: Mapping[str, Any]) -> None:
    track: Track = facts["track"]
    print(f"  reserved {track.flavors_reserved()}, evictions {track.evictions}, all TPU pods Running "
          f"{facts['to_running']:.1f} s after submission on {sorted(set(track.running_pools.values()))}")
    print(f"  FailedScaleUp at {facts['failed_scale_ups'][:1]}, plan A taints {facts['taints']}")
    for reason, events in facts["events"].items():
        for e in events:
            print(f"  event {reason} on {e['involvedObject'].get('kind')} {e['involvedObject'].get('name')} at "
                  f"{e.get('firstTimestamp')}: {str(e.get('message'))[:160]}")


def assert_reached_plan_b(facts: Mapping[str, Any]) -> None:
    track: Track = facts["track"]
    bound: fs.Bounds = facts["bound"]
    # Admitted to plan A first (quota), evicted once by the controller, admitted again to plan B.
    assert track.flavors_reserved() == [PLAN_A, PLAN_B], track
    assert track.evictions == {"Deactivated": 1}, track
    (workload,) = sorted(track.workloads)
    # Every TPU pod ran on plan B's pool, all at once.
    assert len(track.running_pools) == WORKERS and set(track.running_pools.values()) == {PLAN_B_POOL}, track
    # The controller's Events: plan A closed (on the flavor and on the Workload that caused it), the eviction.
    events = facts["events"]
    assert fs.event_count(events[fs.STOCKOUT_EVENT], "ResourceFlavor", PLAN_A) == 1, events
    assert fs.event_count(events[fs.STOCKOUT_EVENT], "Workload", workload) == 1, events
    assert fs.event_count(events[EVICTED_EVENT], "Workload", workload) == 1, events
    # Plan A closed within GKE's FailedScaleUp + 15 s, from the Events' own times (whole seconds).
    assert facts["failed_scale_ups"], "the simulated GKE wrote no FailedScaleUp on the job's TPU pods"
    signal = facts["failed_scale_ups"][0]
    (close,) = [event_time(e) for e in events[fs.STOCKOUT_EVENT]
                if e["involvedObject"].get("kind") == "ResourceFlavor"]
    assert close is not None and close - signal <= fs.CONTROLLER_LATENCY + ROUNDING, (signal, close)
    # Well before the stockoutAfter backstop could have acted: GKE's words closed it.
    assert close - signal < bound.stockout_after, (signal, close, bound.describe())
    assert [value is None for _t, value in facts["taints"][PLAN_A]][:2] == [True, False], facts["taints"]


def test_kueue_runs_the_shipped_jobset_and_raycluster_integrations(box: JobKindsBox) -> None:
    """The Kueue under test manages JobSets and RayClusters (as shipped), their CRDs served before it started."""
    assert {"jobset.x-k8s.io/jobset", "ray.io/raycluster", "batch/job"} <= set(box.options["frameworks"])
    with box.scenario(controller=False) as env:
        assert env.client.serves(JOBSET_API, "JobSet")
        log = env.plane.kueue_log.read_text()
    assert "No matching API in the server for job framework" not in log, "an integration's CRD came after Kueue"


def test_a_jobset_stuck_on_a_stocked_out_plan_a_reaches_plan_b(box: JobKindsBox) -> None:
    with box.scenario() as env, JobSetPlayer(env.client, env.sim.cache) as player:
        _objects, rayjob = rendered(env)
        job = jobset_kind("js-stockout")
        try:
            facts = run_stuck_on_plan_a(env, job, jobset(job.name, rayjob, run_seconds=15), player=player)
            report(facts)
            completed = env.client.get(JOBSET_API, "JobSet", job.name, NAMESPACE) or {}
        finally:
            cleanup(env.client, job)
        player.check()
    assert_reached_plan_b(facts)
    # The JobSet completed (the player's success policy) and Kueue finished its Workload.
    assert (completed.get("status") or {}).get("terminalState") == "Completed", completed.get("status")
    assert facts["track"].finished


def test_a_raycluster_stuck_on_a_stocked_out_plan_a_reaches_plan_b(box: JobKindsBox) -> None:
    with box.scenario() as env:
        _objects, rayjob = rendered(env)
        job = ray_cluster_kind("rc-stockout")
        try:
            facts = run_stuck_on_plan_a(env, job, ray_cluster(job.name, rayjob), finishes=False)
            report(facts)
        finally:
            cleanup(env.client, job)
    assert_reached_plan_b(facts)


def test_a_batch_job_stuck_on_a_stocked_out_plan_a_reaches_plan_b(box: JobKindsBox) -> None:
    with box.scenario() as env:
        _objects, rayjob = rendered(env)
        job = batch_job_kind("job-stockout")
        try:
            facts = run_stuck_on_plan_a(env, job, batch_job(job.name, rayjob, run_seconds=15))
            report(facts)
        finally:
            cleanup(env.client, job)
    assert_reached_plan_b(facts)
    assert facts["track"].finished

