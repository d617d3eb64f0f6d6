"""The JobSet controller, played in the test process for the end-to-end cluster (sigs.k8s.io/jobset v0.12.0).

The cluster serves the JobSet CRD (build_components.sh copies it from the module Kueue v0.19.2 requires) and Kueue
runs its `jobset.x-k8s.io/jobset` integration, but the JobSet controller itself is not built: a cold build of its
own module graph (controller-runtime, client-go and the rest at versions of its own) would add minutes to the
suite's cold start, and it needs its own webhooks and certificates. What the scenarios need of it is small and
fixed, so `JobSetPlayer` does exactly that, from its source (sigs.k8s.io/jobset@v0.12.0,
pkg/controllers/jobset_controller.go unless said otherwise; label and annotation keys from api/jobset/v1alpha2
jobset_types.go and pkg/constants/constants.go):

- **Child Jobs** (`reconcileReplicatedJobs`, `constructJobsFromTemplate`, `constructJob`): for each replicatedJob,
  `replicas` batch Jobs named `<jobset>-<replicatedJob>-<index>` (pkg/util/placement GenJobName), created whether
  the JobSet is suspended or not (`Spec.Suspend` = the JobSet's), with the replicatedJob's Job template (its labels
  and annotations, its spec, the pod template as it is in the JobSet now: with what Kueue injected), an
  ownerReference to the JobSet with controller and blockOwnerDeletion (`ctrl.SetControllerReference`), and on the
  Job and its pod template the labels and annotations of `labelAndAnnotateObject` (jobset-name, jobset-uid,
  replicatedjob-name, restart-attempt, replicatedjob-replicas, global-replicas, job-index, job-key,
  job-global-index, group-name, group-replicas, job-group-index). With `network.enableDNSHostnames` the pod
  template's subdomain is the JobSet's (`GetSubdomain`) and a headless Service of that name selects the JobSet's
  pods (`createHeadlessSvcIfNecessary`).
- **Suspended** (`suspendJobs`): every active child Job not suspended yet gets `suspend: true` (an Update; they are
  not deleted), and the JobSet condition Suspended True (SuspendedJobs, "jobset is suspended"). The Job controller
  (kube-controller-manager) then deletes their pods.
- **Resumed** (`resumeJobsIfNecessary`, `resumeJob`): each suspended active child Job gets, in this order, its
  `status.startTime` cleared if set (a status Update: a Job's template may change only while it has not started),
  then its pod template's labels, annotations and nodeSelector merged with the replicatedJob's (the JobSet's wins on
  a key: collections.MergeMaps), its tolerations and scheduling gates merged as sets (collections.MergeSlices), and
  `suspend: false` (an Update); the JobSet condition Suspended False (ResumeJobs, "jobset is resumed"). This is how
  the nodeSelector Kueue put into the JobSet for the admitted flavor reaches the pods.
- **Status** (`calculateReplicatedJobStatuses`, `updateJobSetStatus`): per replicatedJob, of the current run's Jobs,
  `ready` (Jobs whose succeeded + ready pods reach min(parallelism, completions)), `active` (Jobs with active pods),
  `suspended`, `succeeded` and `failed` (Jobs with that condition); one status Update when something changed.
  Kueue reads it: IsActive (any `active`), PodsReady (ready + succeeded = replicas), reclaimable pods.
- **Finished**: all Jobs the success policy targets succeeded (operator All, `executeSuccessPolicy`): Completed
  True (AllJobsCompleted, "jobset completed successfully") and terminalState Completed; a failed Job without a
  failure policy (failure_policy.go `executeFailurePolicy`): Failed True (FailedJobs, "jobset failed due to one or
  more job failures (first failed job: <name>)") and terminalState Failed. A finished JobSet's active Jobs are
  deleted (foreground) and nothing else happens.

Not played (a JobSet that uses any of these is refused, in `errors`): failure policies and restarts (so
`restart-attempt` is always 0 and no Job is ever recreated), startup policy InOrder, dependsOn, coordinator,
exclusive placement, volume claim policies, in-place restart and the alpha feature gates (all off by default in
v0.12.0: pkg/features), a `managedBy` of another controller, TTL after finished. Nor the controller's Events, its
metrics, the `Restarting` condition (set False only, which adds nothing to a JobSet that never restarted) or the
JobSet webhooks: defaulting (pkg/webhooks/jobset_webhook.go `Default`: successPolicy All, startupPolicy AnyOrder,
completionMode Indexed, restartPolicy OnFailure, enableDNSHostnames and publishNotReadyAddresses true) is up to the
JobSet's author (`defaulted` applies it), and the pod webhook's `jobset.sigs.k8s.io/priority` label (for exclusive
placement only) is not added. Reading is through the cluster's informers (tests/e2e/informer.py), a pass every
`interval` seconds; a write that conflicts (409, the informer behind) is tried again on the next pass, as
controller-runtime requeues.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.e2e.informer import ClusterCache
from tests.e2e.kube import KubeClient, KubeError

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
JOB_API = "batch/v1"

# api/jobset/v1alpha2/jobset_types.go
JOBSET_NAME_KEY = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_KEY = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_KEY = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
GLOBAL_REPLICAS_KEY = "jobset.sigs.k8s.io/global-replicas"
JOB_INDEX_KEY = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_KEY = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
GROUP_NAME_KEY = "jobset.sigs.k8s.io/group-name"
GROUP_REPLICAS_KEY = "jobset.sigs.k8s.io/group-replicas"
JOB_GROUP_INDEX_KEY = "jobset.sigs.k8s.io/job-group-index"
EXCLUSIVE_KEY = "alpha.jobset.sigs.k8s.io/exclusive-topology"
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"  # JobSetControllerName: the default managedBy
DEFAULT_GROUP = "default"  # ReplicatedJob.GroupName's kubebuilder default
# pkg/constants/constants.go
RESTARTS_KEY = "jobset.sigs.k8s.io/restart-attempt"
SUSPENDED = ("SuspendedJobs", "jobset is suspended")
RESUMED = ("ResumeJobs", "jobset is resumed")
COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def job_name(jobset: str, replicated_job: str, index: int) -> str:
    """pkg/util/placement GenJobName."""
    return f"{jobset}-{replicated_job}-{index}"


def defaulted(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet as the JobSet webhook's `Default` (pkg/webhooks/jobset_webhook.go) would store it, since that
    webhook does not run here: successPolicy All, startupPolicy AnyOrder, completionMode Indexed and restartPolicy
    OnFailure on each replicatedJob, DNS hostnames on with not-ready addresses published, group name `default`
    (the CRD's default, which the API server applies anyway)."""
    out = copy.deepcopy(dict(jobset))
    spec = out.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rjob in spec.get("replicatedJobs") or []:
        rjob.setdefault("groupName", DEFAULT_GROUP)
        job_spec = rjob["template"].setdefault("spec", {})
        job_spec.setdefault("completionMode", "Indexed")
        job_spec["template"].setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return out


def unsupported(jobset: Mapping[str, Any]) -> list[str]:
    """What this JobSet uses that the player does not play (see the module docstring)."""
    spec = jobset.get("spec") or {}
    out = []
    if spec.get("failurePolicy"):
        out.append("failurePolicy")
    if (spec.get("startupPolicy") or {}).get("startupPolicyOrder", "AnyOrder") != "AnyOrder":
        out.append("startupPolicy InOrder")
    if spec.get("coordinator"):
        out.append("coordinator")
    if spec.get("volumeClaimPolicies"):
        out.append("volumeClaimPolicies")
    if spec.get("ttlSecondsAfterFinished") is not None:
        out.append("ttlSecondsAfterFinished")
    if EXCLUSIVE_KEY in (jobset["metadata"].get("annotations") or {}):
        out.append("exclusive placement")
    for rjob in spec.get("replicatedJobs") or []:
        if rjob.get("dependsOn"):
            out.append(f"dependsOn ({rjob['name']})")
        annotations = (((rjob.get("template") or {}).get("metadata") or {}).get("annotations") or {})
        if EXCLUSIVE_KEY in annotations:
            out.append(f"exclusive placement ({rjob['name']})")
    return out


def _merge_maps(old: Mapping[str, str] | None, new: Mapping[str, str] | None) -> dict[str, str]:
    """collections.MergeMaps: `new` wins on a key."""
    return {**(old or {}), **(new or {})}


def _merge_slices(old: Sequence[Any] | None, new: Sequence[Any] | None) -> list[Any]:
    """collections.MergeSlices: the union of both (Go's map order is random; here `old`'s order, then `new`'s)."""
    out: list[Any] = []
    for item in [*(old or []), *(new or [])]:
        if item not in out:
            out.append(copy.deepcopy(item))
    return out


def _pods_count(job: Mapping[str, Any]) -> int:
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    return min(parallelism, int(completions)) if completions is not None else parallelism


def _job_finished(job: Mapping[str, Any]) -> str:
    """JobFinished: "Complete", "Failed" or "" (active)."""
    for kind in ("Complete", "Failed"):
        if _true(job, kind):
            return kind
    return ""


@dataclass
class Children:
    """childJobs: the current run's Jobs by state, and those of an earlier restart."""

    active: list[dict[str, Any]] = field(default_factory=list)
    successful: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    previous: list[dict[str, Any]] = field(default_factory=list)

    def every(self) -> list[dict[str, Any]]:
        return [*self.active, *self.successful, *self.failed, *self.previous]


class JobSetPlayer:
    """Plays the JobSet controller for every JobSet of the cluster (see the module docstring), in a thread.

    `errors` collects what went wrong (a refused JobSet, an unexpected API error); `check()` raises the first.
    `actions` lists what it did, for failure messages."""

    def __init__(self, client: KubeClient, cache: ClusterCache | None = None, *, interval: float = 0.2) -> None:
        self.client = client
        self.cache = cache or ClusterCache(client)
        self._own_cache = cache is None
        self.interval = interval
        self.errors: list[str] = []
        self.actions: list[str] = []
        self._refused: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- running ------------------------------------------------------------------------------------------------

    def start(self) -> JobSetPlayer:
        self.cache.informer(JOBSET_API, JOBSET_KIND)
        self.cache.informer(JOB_API, "Job")
        self._thread = threading.Thread(target=self._run, name="jobset-player", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._own_cache:
            self.cache.stop()

    def __enter__(self) -> JobSetPlayer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> None:
        if self.errors:
            raise AssertionError(f"the JobSet player failed: {self.errors[0]}\nits last actions:\n"
                                 + "\n".join(self.actions[-20:]))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # noqa: BLE001 - reported through check()
                self.errors.append(traceback.format_exc())
            self._stop.wait(self.interval)

    def _note(self, what: str) -> None:
        self.actions.append(f"{time.strftime('%H:%M:%S')} {what}")

    # --- one pass -----------------------------------------------------------------------------------------------

    def step(self) -> None:
        jobs = self.cache.items(JOB_API, "Job")
        for jobset in self.cache.items(JOBSET_API, JOBSET_KIND):
            try:
                self.reconcile(jobset, jobs)
            except KubeError as err:
                if err.status in (404, 409):
                    continue  # gone or changed meanwhile: the next pass sees the latest
                raise

    def reconcile(self, jobset: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> None:
        meta = jobset["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if meta.get("deletionTimestamp"):
            return
        spec = jobset.get("spec") or {}
        if spec.get("managedBy") not in (None, CONTROLLER_NAME):
            return  # managedByExternalController
        problems = unsupported(jobset)
        if problems:
            if key not in self._refused:
                self._refused.add(key)
                self.errors.append(f"JobSet {key} uses what the player does not play: {', '.join(problems)}")
            return
        js = copy.deepcopy(dict(jobset))
        status = js.setdefault("status", {})
        before = copy.deepcopy(status)
        children = self._children(js, jobs)
        status["replicatedJobsStatus"] = self._replicated_job_statuses(js, children)
        if _true(js, "Completed") or _true(js, "Failed"):
            self._delete_jobs(children.active)
            self._update_status(js, before)
            return
        self._delete_jobs(children.previous)
        if children.failed:
            first = sorted(children.failed, key=lambda j: str(
                next((c.get("lastTransitionTime") for c in (j.get("status") or {}).get("conditions") or []
                      if c.get("type") == "Failed"), "")))[0]
            self._set_condition(js, "Failed", "True", FAILED_JOBS[0],
                                f"{FAILED_JOBS[1]} (first failed job: {first['metadata']['name']})")
            status["terminalState"] = "Failed"
            self._update_status(js, before)
            return
        if children.successful and self._succeeded(js, children):
            self._set_condition(js, "Completed", "True", *COMPLETED)
            status["terminalState"] = "Completed"
            self._update_status(js, before)
            return
        self._headless_service(js)
        self._create_jobs(js, children)
        if spec.get("suspend"):
            for job in children.active:
                if not (job.get("spec") or {}).get("suspend"):
                    self._update_job(job, lambda j: j["spec"].__setitem__("suspend", True), "suspended")
            self._set_condition(js, "Suspended", "True", *SUSPENDED)
        else:
            templates = {r["name"]: r["template"]["spec"]["template"] for r in spec.get("replicatedJobs") or []}
            for job in children.active:
                if (job.get("spec") or {}).get("suspend"):
                    self._resume_job(job, templates)
            self._set_condition(js, "Suspended", "False", *RESUMED)
        self._update_status(js, before)

    # --- the parts ----------------------------------------------------------------------------------------------

    @staticmethod
    def _children(js: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> Children:
        """getChildJobs: the Jobs whose controller is this JobSet, by state."""
        uid = js["metadata"]["uid"]
        restarts = int((js.get("status") or {}).get("restarts", 0))
        out = Children()
        for job in jobs:
            meta = job["metadata"]
            if meta.get("namespace") != js["metadata"]["namespace"] or not any(
                    o.get("controller") and o.get("uid") == uid for o in meta.get("ownerReferences") or []):
                continue
            copied = copy.deepcopy(dict(job))
            if int((meta.get("labels") or {}).get(RESTARTS_KEY, "0")) < restarts:
                out.previous.append(copied)
                continue
            {"": out.active, "Complete": out.successful, "Failed": out.failed}[_job_finished(job)].append(copied)
        return out

    @staticmethod
    def _replicated_job_statuses(js: Mapping[str, Any], children: Children) -> list[dict[str, Any]]:
        """calculateReplicatedJobStatuses, in the spec's order."""
        counts = {r["name"]: {"name": r["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0,
                              "suspended": 0} for r in (js.get("spec") or {}).get("replicatedJobs") or []}
        for job in children.active:
            entry = counts.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME_KEY, ""))
            if entry is None:
                continue
            status = job.get("status") or {}
            if int(status.get("succeeded", 0)) + int(status.get("ready", 0)) >= _pods_count(job):
                entry["ready"] += 1
            if int(status.get("active", 0)) > 0:
                entry["active"] += 1
            if (job.get("spec") or {}).get("suspend"):
                entry["suspended"] += 1
        for jobs, what in ((children.successful, "succeeded"), (children.failed, "failed")):
            for job in jobs:
                entry = counts.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME_KEY, ""))
                if entry is not None:
                    entry[what] += 1
        return list(counts.values())

    @staticmethod
    def _succeeded(js: Mapping[str, Any], children: Children) -> bool:
        """executeSuccessPolicy (success_policy.go)."""
        spec = js.get("spec") or {}
        policy = spec.get("successPolicy") or {"operator": "All"}
        targets = policy.get("targetReplicatedJobs") or []
        matching = [j for j in children.successful
                    if not targets or (j["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME_KEY) in targets]
        if policy.get("operator") == "Any":
            expected = 1
        else:
            expected = sum(int(r.get("replicas", 1)) for r in spec.get("replicatedJobs") or []
                           if not targets or r["name"] in targets)
        return len(matching) >= expected

    def _headless_service(self, js: Mapping[str, Any]) -> None:
        """createHeadlessSvcIfNecessary."""
        network = (js.get("spec") or {}).get("network") or {}
        if not network.get("enableDNSHostnames"):
            return
        namespace, name = js["metadata"]["namespace"], network.get("subdomain") or js["metadata"]["name"]
        if self.client.get("v1", "Service", name, namespace) is not None:
            return
        self.client.create({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [self._owner(js)]},
            "spec": {"clusterIP": "None", "selector": {JOBSET_NAME_KEY: js["metadata"]["name"]},
                     "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)}})
        self._note(f"created headless Service {namespace}/{name}")

    @staticmethod
    def _owner(js: Mapping[str, Any]) -> dict[str, Any]:
        """ctrl.SetControllerReference."""
        return {"apiVersion": JOBSET_API, "kind": JOBSET_KIND, "name": js["metadata"]["name"],
                "uid": js["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def _create_jobs(self, js: Mapping[str, Any], children: Children) -> None:
        """reconcileReplicatedJobs with constructJobsFromTemplate and createJobs."""
        existing = {j["metadata"]["name"] for j in children.every()}
        for rjob in (js.get("spec") or {}).get("replicatedJobs") or []:
            for index in range(int(rjob.get("replicas", 1))):
                name = job_name(js["metadata"]["name"], rjob["name"], index)
                if name in existing:
                    continue
                try:
                    self.client.create(self.construct_job(js, rjob, index))
                except KubeError as err:
                    if err.status != 409:  # already there: the informer has not seen it yet
                        raise
                    continue
                self._note(f"created Job {js['metadata']['namespace']}/{name} (suspend "
                           f"{bool((js.get('spec') or {}).get('suspend'))})")

    @classmethod
    def construct_job(cls, js: Mapping[str, Any], rjob: Mapping[str, Any], index: int) -> dict[str, Any]:
        """constructJob: the replicatedJob's Job template as a Job, labelled and annotated, owned by the JobSet."""
        template = rjob["template"]
        name = job_name(js["metadata"]["name"], rjob["name"], index)
        job: dict[str, Any] = {
            "apiVersion": JOB_API, "kind": "Job",
            "metadata": {"name": name, "namespace": js["metadata"]["namespace"],
                         "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                         "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                         "ownerReferences": [cls._owner(js)]},
            "spec": copy.deepcopy(template["spec"]),
        }
        pod_meta = job["spec"]["template"].setdefault("metadata", {})
        for meta in (job["metadata"], pod_meta):
            cls._label_and_annotate(meta, js, rjob, index)
        network = (js.get("spec") or {}).get("network") or {}
        if network.get("enableDNSHostnames"):
            job["spec"]["template"].setdefault("spec", {})["subdomain"] = (network.get("subdomain")
                                                                            or js["metadata"]["name"])
        job["spec"]["suspend"] = bool((js.get("spec") or {}).get("suspend"))
        return job

    @staticmethod
    def _label_and_annotate(meta: dict[str, Any], js: Mapping[str, Any], rjob: Mapping[str, Any], index: int
                            ) -> None:
        """labelAndAnnotateObject: the same keys as labels and as annotations."""
        spec = js.get("spec") or {}
        rjobs = spec.get("replicatedJobs") or []
        namespace, jobset = js["metadata"]["namespace"], js["metadata"]["name"]
        group = rjob.get("groupName") or DEFAULT_GROUP
        global_index = group_index = 0
        for other in rjobs:
            if other["name"] == rjob["name"]:
                break
            global_index += int(other.get("replicas", 1))
        for other in rjobs:
            if (other.get("groupName") or DEFAULT_GROUP) == group:
                if other["name"] == rjob["name"]:
                    break
                group_index += int(other.get("replicas", 1))
        name = job_name(jobset, rjob["name"], index)
        values = {
            JOBSET_NAME_KEY: jobset,
            JOBSET_UID_KEY: js["metadata"]["uid"],
            REPLICATED_JOB_NAME_KEY: rjob["name"],
            RESTARTS_KEY: str(int((js.get("status") or {}).get("restarts", 0))),
            REPLICATED_JOB_REPLICAS: str(int(rjob.get("replicas", 1))),
            GLOBAL_REPLICAS_KEY: str(sum(int(r.get("replicas", 1)) for r in rjobs)),
            JOB_INDEX_KEY: str(index),
            JOB_KEY: hashlib.sha1(f"{namespace}/{name}".encode()).hexdigest(),  # the controller's sha1Hash
            JOB_GLOBAL_INDEX_KEY: str(global_index + index),
            GROUP_NAME_KEY: group,
            GROUP_REPLICAS_KEY: str(sum(int(r.get("replicas", 1)) for r in rjobs
                                        if (r.get("groupName") or DEFAULT_GROUP) == group)),
            JOB_GROUP_INDEX_KEY: str(group_index + index),
        }
        meta["labels"] = {**(meta.get("labels") or {}), **values}
        meta["annotations"] = {**(meta.get("annotations") or {}), **values}

    def _resume_job(self, job: dict[str, Any], templates: Mapping[str, Mapping[str, Any]]) -> None:
        """resumeJob."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        jobs = self.client.resource(JOB_API, "Job")
        if (job.get("status") or {}).get("startTime"):
            job["status"]["startTime"] = None
            job = self.client.request("PUT", jobs.path(name, namespace, "status"), job)
        template = templates.get((job["metadata"].get("labels") or {}).get(REPLICATED_JOB_NAME_KEY, ""))
        if template is not None:
            pod = job["spec"]["template"]
            pod_meta = pod.setdefault("metadata", {})
            wanted_meta = template.get("metadata") or {}
            pod_meta["labels"] = _merge_maps(pod_meta.get("labels"), wanted_meta.get("labels"))
            pod_meta["annotations"] = _merge_maps(pod_meta.get("annotations"), wanted_meta.get("annotations"))
            spec, wanted = pod.setdefault("spec", {}), template.get("spec") or {}
            spec["nodeSelector"] = _merge_maps(spec.get("nodeSelector"), wanted.get("nodeSelector"))
            spec["tolerations"] = _merge_slices(spec.get("tolerations"), wanted.get("tolerations"))
            spec["schedulingGates"] = _merge_slices(spec.get("schedulingGates"), wanted.get("schedulingGates"))
        job["spec"]["suspend"] = False
        self.client.request("PUT", jobs.path(name, namespace), job)
        self._note(f"resumed Job {namespace}/{name} (nodeSelector "
                   f"{job['spec']['template'].get('spec', {}).get('nodeSelector')})")

    def _update_job(self, job: dict[str, Any], change: Any, what: str) -> None:
        change(job)
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        self.client.request("PUT", self.client.resource(JOB_API, "Job").path(name, namespace), job)
        self._note(f"{what} Job {namespace}/{name}")

    def _delete_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> None:
        """deleteJobs: foreground, skipping those being deleted."""
        for job in jobs:
            if job["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(KubeError):
                self.client.delete(JOB_API, "Job", job["metadata"]["name"], job["metadata"]["namespace"],
                                   propagation_policy="Foreground")
                self._note(f"deleted Job {job['metadata']['namespace']}/{job['metadata']['name']}")

    @staticmethod
    def _set_condition(js: dict[str, Any], kind: str, status: str, reason: str, message: str) -> None:
        """updateCondition: a new type only if True; a status change with a new time; reason or message alone
        changed keeps the time."""
        js_status = js.setdefault("status", {})
        conditions = js_status["conditions"] = list(js_status.get("conditions") or [])
        for cond in conditions:
            if cond.get("type") != kind:
                continue
            if cond.get("status") != status:
                cond.update(status=status, reason=reason, message=message, lastTransitionTime=_now())
            elif cond.get("reason") != reason or cond.get("message") != message:
                cond.update(reason=reason, message=message)
            return
        if status == "True":
            conditions.append({"type": kind, "status": status, "reason": reason, "message": message,
                               "lastTransitionTime": _now()})

    def _update_status(self, js: dict[str, Any], before: Mapping[str, Any]) -> None:
        """updateJobSetStatus: one status Update when anything changed."""
        status = js.get("status") or {}
        if status == before:
            return
        meta = js["metadata"]
        resource = self.client.resource(JOBSET_API, JOBSET_KIND)
        self.client.request("PUT", resource.path(meta["name"], meta["namespace"], "status"), js)
        summary = [(r["name"], {k: v for k, v in r.items() if k != "name" and v}) for r in
                   status.get("replicatedJobsStatus") or []]
        conditions = [f"{c['type']}={c['status']}" for c in status.get("conditions") or []]
        self._note(f"status of JobSet {meta['namespace']}/{meta['name']}: {summary} {conditions}")
