"""Issue 37 item 3 on the simulated GKE: a JobSet, a RayCluster and a batch Job stuck on a stocked-out plan A reach
plan B (the "done when" line "a JobSet and a RayCluster stuck on a stocked-out plan A reach plan B"); a plain Pod
group on it is attributed to its Workload and evicted, and then waits for replacement pods (Kueue's pod integration
deletes an evicted group's pods; test_a_plain_pod_group_on_a_stocked_out_plan_a_is_evicted_and_waits_for_new_pods).

The cluster is the stock-out modules' (fallback_scenarios.FallbackBox: dev stack with short fallback times, real
Kueue 0.19.2 with the plan's waitForPodsReady, KubeRay, kube-scheduler, KWOK, the simulated GKE, the controller as
shipped), with Kueue running the integrations the shipped Kueue configuration enables
(tpu_fallback/render/templates/kueue-manager-config.yaml) whose CRDs this control plane serves: batch/job,
ray.io/rayjob, ray.io/raycluster, jobset.x-k8s.io/jobset (the JobSet CRD from sigs.k8s.io/jobset v0.12.0,
installed before Kueue starts) and pod (plain Pods: a core kind, no CRD). The JobSet controller is played by
tests/e2e/jobset_player.py (from its source). The shipped configuration sets no managedJobsNamespaceSelector, so
Kueue v0.19.2 manages Pods in every namespace but kube-system and its own (apis/config/v1beta2/defaults.go; the
chart's pod webhook has the same namespaceSelector, and this harness's too: controlplane.SYSTEM_NAMESPACES); the
v1beta1 `podOptions` is gone from the v1beta2 Configuration. So `default` is managed with nothing configured here.

Each test: plan A's pool has no capacity (`sim.set_capacity(PLAN_A_POOL, False)`); one job of the kind is submitted
to `default/user-queue` with a v6e 4x4 slice's TPU workers (4 pods x 4 chips, the jobs project's worker template,
scenario.render_queue_jobs); Kueue admits it to plan A (quota), its TPU pods stay unschedulable, GKE's autoscaler
(the sim) writes FailedScaleUp on them; the controller attributes them to the job's Workload (by the JobSet's label,
the RayCluster owner, the Job owner, a pod group's pod-group-name label), closes plan A and evicts the job; Kueue
admits it again, to plan B (dws), the sim's DWS provisions and the TPU pods run on `dws-pool`. Asserted: the
Workload reserved plan A, then plan B; the controller's Events (the close on the ResourceFlavor and on the Workload,
the eviction); all TPU pods Running on dws-pool at once; plan A closed within GKE's FailedScaleUp + 15 s
(fallback_scenarios.CONTROLLER_LATENCY), from the Events' own times. The pod group differs after the eviction: Kueue
deletes its pods and keeps the Workload out of the queue until pods of the group are created again (asserted over a
window, then with the user's replacement pods, which run on plan B). Bounds are the config's times plus
CONTROLLER_LATENCY. Run it alone with
`venv/bin/python -m pytest tests/e2e/test_job_kinds_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.gke_sim import KWOK_COMPLETE_DELAY, POOL_LABEL
from tests.e2e.jobset_player import JOBSET_API, JOBSET_NAME_KEY, JobSetPlayer, defaulted
from tests.e2e.kube import KubeClient, KubeError
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
# The integrations this control plane can serve (their CRDs are installed; plain Pods need none); Kueue runs those of
# the shipped config.
POD_FRAMEWORK = "pod"
SERVED_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster", "jobset.x-k8s.io/jobset", POD_FRAMEWORK)
# Kueue v0.19.2's pod integration (pkg/controller/jobs/pod/constants/constants.go, pod_controller.go).
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"  # GroupNameLabel: the group's Workload has this name
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"  # GroupTotalCountAnnotation
POD_FINALIZER = "kueue.x-k8s.io/managed"  # PodFinalizer (= the managed label's key), added by the pod webhook
TERMINATION_TARGET = "TerminationTarget"  # the condition Pod.Stop puts on each pod it deletes
REPLACEMENT_CONDITION = "WaitingForReplacementPods"  # a Workload with it True is not admissible (IsAdmissible)
# The pod group scenario holds plan A closed longer than the box's 45 s coolDown: its group is evicted, then left
# waiting for new pods for a window, then its replacement pods must still find plan A closed to be sent to plan B.
# Close to replacement took about 20 s here, more on a busy 2-core machine: 45 s would be a race. Only the
# controller's config changes (Kueue's configuration, waitForPodsReady included, is the box's).
POD_GROUP_STACK = gs.Stack("dev", {"fallback": {**fs.FALLBACK_SETTINGS, "coolDown": "180s"}})


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


def pod_group(name: str, rayjob: Mapping[str, Any], *, first: int = 0) -> list[dict[str, Any]]:
    """A plain Pod group of WORKERS pods with the TPU worker template, as Kueue's pod integration takes one: each
    pod labelled with the queue and the group's name, annotated with the group's size. Pods `first` .. first+3
    (replacement pods of the same group get new names). They run until deleted: KWOK's pod-complete stage only
    completes pods a Job owns."""
    template = worker_template(rayjob)
    meta = template.get("metadata") or {}
    spec = copy.deepcopy(template["spec"])
    spec["restartPolicy"] = "Never"
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-{i}", "namespace": NAMESPACE,
                          "labels": {**(meta.get("labels") or {}), QUEUE_LABEL: QUEUE, POD_GROUP_LABEL: name},
                          "annotations": {**(meta.get("annotations") or {}), POD_GROUP_TOTAL: str(WORKERS)}},
             "spec": copy.deepcopy(spec)}
            for i in range(first, first + WORKERS)]


@dataclass(frozen=True)
class Kind:
    """How to find a job's Workload and its TPU pods."""

    api_version: str
    kind: str
    name: str
    pod_selector: Callable[[Mapping[str, Any]], bool]
    # A Workload Kueue names after the job instead of one the job owns: a pod group's (its pods own it).
    workload_name: str | None = None

    def owns(self, workload: Mapping[str, Any]) -> bool:
        meta = workload.get("metadata") or {}
        if self.workload_name is not None:
            return bool(meta.get("name") == self.workload_name)
        return any(o.get("kind") == self.kind and o.get("name") == self.name for o in meta.get("ownerReferences") or [])


def jobset_kind(name: str) -> Kind:
    return Kind(JOBSET_API, "JobSet", name, lambda p: _labels(p).get(JOBSET_NAME_KEY) == name)


def ray_cluster_kind(name: str) -> Kind:
    return Kind("ray.io/v1", "RayCluster", name, lambda p: _labels(p).get("ray.io/cluster") == name)


def batch_job_kind(name: str) -> Kind:
    return Kind("batch/v1", "Job", name, lambda p: _labels(p).get("batch.kubernetes.io/job-name") == name)


def pod_group_kind(name: str) -> Kind:
    return Kind("v1", "Pod", name, lambda p: _labels(p).get(POD_GROUP_LABEL) == name, workload_name=name)


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
            if not job.owns(wl):
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


# --- a plain Pod group ---------------------------------------------------------------------------------------


def _condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next((dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def pod_state(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What Kueue did to one pod of the group: deleted (deletionTimestamp), its finalizers, phase, TerminationTarget."""
    meta = pod.get("metadata") or {}
    termination = _condition(pod, TERMINATION_TARGET)
    return {"deleting": bool(meta.get("deletionTimestamp")), "finalizers": list(meta.get("finalizers") or []),
            "phase": (pod.get("status") or {}).get("phase"),
            "termination": (termination.get("status"), termination.get("reason"))}


def group_pods(client: KubeClient, name: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in client.list("v1", "Pod", NAMESPACE)
            if _labels(p).get(POD_GROUP_LABEL) == name}


def run_pod_group_stuck_on_plan_a(env: fs.Env, name: str) -> dict[str, Any]:
    """Plan A stocked out; a plain Pod group of WORKERS TPU pods submitted; until the controller evicted its Workload
    and Kueue stopped its pods; then a window in which nothing but its own pods could bring it back; then the user's
    replacement pods (new names, same group) until they all run and Kueue saw them ready. What the test asserts."""
    client, sim = env.client, env.sim
    job = pod_group_kind(name)
    watch = KindWatch(env, job)
    track = watch.record
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(PLAN_A_POOL, False)
    bound = env.bounds()
    configmaps, rayjob = rendered(env)
    for configmap in configmaps:
        client.apply(configmap)
    first = pod_group(name, rayjob)
    first_names = {p["metadata"]["name"] for p in first}
    for pod in first:
        client.create(pod)
    submitted = watch.now()
    facts: dict[str, Any] = {"bound": bound, "submitted": submitted, "first": sorted(first_names)}
    created = group_pods(client, name)
    facts["as_created"] = {n: {"gates": [g.get("name") for g in p["spec"].get("schedulingGates") or []],
                               "finalizers": list(p["metadata"].get("finalizers") or [])} for n, p in created.items()}
    watch.wait(lambda: track.flavors_reserved()[:1] == [PLAN_A], 60, "the pod group's Workload reserved on plan A")
    watch.wait(lambda: PLAN_A_POOL in track.pending_pools_seen, 60, "the group's TPU pods ungated for plan A's pool")
    # GKE's FailedScaleUp on them; the controller attributes them to the group's Workload, closes plan A, evicts it.
    watch.wait(lambda: track.evictions.get("Deactivated") and track.released,
               bound.stockout_after + bound.poll + fs.CONTROLLER_LATENCY + 30,
               "the controller to evict the group's Workload from plan A")
    facts["failed_scale_ups"] = failed_scale_ups(client, first_names)
    facts["events"] = {reason: fs.fallback_events(client, reason) for reason in (fs.STOCKOUT_EVENT, EVICTED_EVENT)}

    # Kueue stops an evicted pod group by deleting its pods (pod_controller.go Pod.Stop); its finalizer keeps them.
    def stopped() -> dict[str, dict[str, Any]] | None:
        pods = {n: pod_state(p) for n, p in group_pods(client, name).items() if n in first_names}
        done = len(pods) == WORKERS and all(p["deleting"] and p["termination"][0] == "True" for p in pods.values())
        return pods if done else None

    facts["stopped"] = watch.wait(stopped, 60, "Kueue to delete the evicted group's pods")

    # The controller queues the Workload again; Kueue marks it waiting for replacement pods.
    def requeued() -> bool:
        wl = track.last
        return ((wl.get("spec") or {}).get("active") is not False
                and fs.EVICTING_ANNOTATION not in (wl["metadata"].get("annotations") or {})
                and _condition(wl, REPLACEMENT_CONDITION).get("status") == "True")

    watch.wait(requeued, bound.poll + fs.CONTROLLER_LATENCY + 30,
               "the Workload active again and waiting for replacement pods")
    # A window as long as a requeue could take (the controller's poll, Kueue's requeue back-off, the latency): nothing
    # recreates the pods, so Kueue never queues it.
    hold = bound.poll + bound.backoff_base + fs.CONTROLLER_LATENCY
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline and len(track.reservations) == 1:
        watch.poll()
        env.controller.check()
        time.sleep(0.5)
    workload = client.get(scenario.KUEUE_API, "Workload", name, NAMESPACE) or {}
    facts["held"] = {
        "seconds": hold, "reserved": track.flavors_reserved(), "quota_reserved": _condition(workload, "QuotaReserved"),
        "active": (workload.get("spec") or {}).get("active"), "waiting": _condition(workload, REPLACEMENT_CONDITION),
        "pods": {n: pod_state(p) for n, p in group_pods(client, name).items()},
        "plan_a_closed": watch.tainted_since() is not None,
    }

    # The user creates the group's pods again (new names): Kueue finalizes the old ones and admits the Workload, past
    # the closed plan A, to plan B.
    replacements = pod_group(name, rayjob, first=WORKERS)
    for pod in replacements:
        client.create(pod)
    replaced = watch.now()
    facts["replaced"] = replaced
    watch.wait(lambda: track.all_running_at is not None, bound.after_signal() + 30,
               f"all {WORKERS} replacement TPU pods of the group Running")
    facts["replaced_to_running"] = (track.all_running_at or 0) - replaced
    facts["taints"] = watch.plan_a_taint_changes()
    facts["old_pods_left"] = sorted(set(group_pods(client, name)) & first_names)
    watch.wait(lambda: _condition(track.last, "PodsReady").get("status") == "True", 60,
               "Kueue to see the group's pods ready (PodsReady)")
    facts["track"] = track
    facts["to_running"] = (track.all_running_at or 0) - submitted
    facts["controller_log"] = env.controller.lines()
    return facts


def cleanup_pod_group(client: KubeClient, name: str, timeout: float = 90) -> None:
    """Delete the group's pods (their Kueue finalizer taken off: the test's cleanup, not Kueue's) and its Workload."""
    for pod in group_pods(client, name):
        client.delete("v1", "Pod", pod, NAMESPACE)
        try:
            client.request("PATCH", client.resource("v1", "Pod").path(pod, NAMESPACE),
                           {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
        except KubeError as err:
            if err.status != 404:
                raise
    client.delete(scenario.KUEUE_API, "Workload", name, NAMESPACE)
    client.wait_for(lambda: not group_pods(client, name), timeout, f"the pods of group {name} deleted")


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
    # Admitted to plan A first (quota), evicted once by the controller, admitted again to plan B.
    assert track.flavors_reserved() == [PLAN_A, PLAN_B], track
    assert track.evictions == {"Deactivated": 1}, track
    (workload,) = sorted(track.workloads)
    # Every TPU pod ran on plan B's pool, all at once.
    assert len(track.running_pools) == WORKERS and set(track.running_pools.values()) == {PLAN_B_POOL}, track
    assert_closed_on_signal(facts, workload)


def assert_closed_on_signal(facts: Mapping[str, Any], workload: str) -> None:
    """The controller closed plan A on GKE's FailedScaleUp on the job's TPU pods and evicted the job's Workload."""
    bound: fs.Bounds = facts["bound"]
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
    """The Kueue under test manages JobSets, RayClusters and plain Pods (as shipped), their CRDs served before it
    started, and Pods in `default` as the shipped configuration does (no managedJobsNamespaceSelector in either:
    Kueue's default, every namespace but kube-system and kueue-system)."""
    assert {"jobset.x-k8s.io/jobset", "ray.io/raycluster", "batch/job", POD_FRAMEWORK} <= set(
        box.options["frameworks"])
    assert "managedJobsNamespaceSelector" not in load_template("kueue-manager-config.yaml")
    with box.scenario(controller=False) as env:
        assert env.client.serves(JOBSET_API, "JobSet")
        assert "managedJobsNamespaceSelector" not in env.plane.kueue_configuration()
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



def test_a_plain_pod_group_on_a_stocked_out_plan_a_is_evicted_and_waits_for_new_pods(box: JobKindsBox) -> None:
    """A plain Pod group (Kueue's pod integration: the labels kueue.x-k8s.io/queue-name and pod-group-name, the
    annotation pod-group-total-count) is attributed to its Workload by the controller, which closes plan A within
    GKE's FailedScaleUp + CONTROLLER_LATENCY and evicts it. Kueue v0.19.2 then deletes the group's pods
    (pkg/controller/jobs/pod/pod_controller.go Pod.Stop: a TerminationTarget condition, then a delete; its finalizer
    keeps them, Terminating) and, with no pod of the group runnable, sets WaitingForReplacementPods, which keeps the
    Workload out of the queue (pkg/workload/workload.go IsAdmissible): nothing in Kubernetes recreates a plain pod,
    so the group does not reach plan B on its own (docs/fallback.md, Limits). Pods the user creates again in the group
    are admitted to plan B (Kueue finalizes the deleted ones, FindMatchingWorkloads) and run there."""
    name = "pg-stockout"
    with box.scenario(stack=POD_GROUP_STACK) as env:
        try:
            facts = run_pod_group_stuck_on_plan_a(env, name)
            report(facts)
            print(f"  created {facts['as_created']}\n  Kueue stopped {facts['stopped']}\n  held {facts['held']}")
            print(f"  replacements all Running {facts['replaced_to_running']:.1f} s after they were created")
        finally:
            cleanup_pod_group(env.client, name)
    track: Track = facts["track"]
    first = set(facts["first"])
    # Kueue's pod webhook took the pods: scheduling gate kueue.x-k8s.io/admission and Kueue's finalizer.
    for pod, made in facts["as_created"].items():
        assert "kueue.x-k8s.io/admission" in made["gates"] and POD_FINALIZER in made["finalizers"], (pod, made)
    # Attributed: the controller's close names the group's Workload, which it evicted; no pod read as nobody's.
    assert_closed_on_signal(facts, name)
    assert not [line for line in facts["controller_log"] if "belongs to no Kueue Workload" in line and name in line]
    # Kueue deleted each pod of the evicted group (TerminationTarget, reason WorkloadEvictedDueTo<the eviction's
    # reason>); its finalizer keeps them while the group has no replacement.
    for pod, state in facts["stopped"].items():
        assert state["termination"] == ("True", "WorkloadEvictedDueToDeactivated"), (pod, state)
        assert state["deleting"] and POD_FINALIZER in state["finalizers"], (pod, state)
    # Requeued by the controller (active again), but Kueue keeps it out of the queue for the whole window: it waits
    # for replacement pods, no quota reserved, plan A still closed, no other pod of the group exists.
    held = facts["held"]
    assert held["active"] is not False and held["waiting"].get("status") == "True", held
    # Kueue may reserve plan B's quota for the requeued Workload a moment before it marks it waiting for replacement
    # pods (seen in CI on a busy machine: QuotaReserved at :46, WaitingForReplacementPods at :47); either way no pod
    # of the group runs there until the user creates new ones (the pods below are the old ones, all being deleted).
    assert held["reserved"] in ([PLAN_A], [PLAN_A, PLAN_B]), held
    assert set(held["pods"]) == first and all(p["deleting"] for p in held["pods"].values()), held
    assert held["plan_a_closed"], f"plan A reopened before the replacements were created: {facts['taints']}"
    # The user's replacement pods: the old ones finalized, the Workload admitted to plan B, all four run on its pool.
    assert track.flavors_reserved() == [PLAN_A, PLAN_B], track
    assert track.evictions == {"Deactivated": 1}, track
    assert not facts["old_pods_left"], facts["old_pods_left"]
    assert len(track.running_pools) == WORKERS and set(track.running_pools.values()) == {PLAN_B_POOL}, track
    assert not set(track.running_pools) & first, track.running_pools
    assert _condition(track.last, "Admitted").get("status") == "True", track.last.get("status")
