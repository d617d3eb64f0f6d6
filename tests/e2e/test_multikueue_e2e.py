"""MultiKueue end to end (issue 15 item 4): the `global` stack's manager and first worker on two real control planes.

Each is a whole control plane of its own (etcd, kube-apiserver, kube-controller-manager with the serviceaccount-token
controller, Kueue 0.19.2 and the CRDs of Kueue and KubeRay 1.6.2; see tests/e2e/multikueue_e2e_support.py). The
objects are the offline plan's, per cluster: the worker's (its queues, the MultiKueue ServiceAccount, its RBAC and
its token Secret) and the manager's (MultiKueueClusters, MultiKueueConfig, AdmissionCheck, queues) except the
workers' kubeconfig Secrets. The one of the first worker is rendered as the program renders it once the worker
exists: the project's token_kubeconfig with the token the worker's own token controller put into the project's
Secret, the worker's https://127.0.0.1:<port> and its CA. The other two workers do not run, so their
MultiKueueClusters stay inactive. The worker's API server writes an audit log of that ServiceAccount's requests.

No KubeRay operator runs: the test writes the worker RayJob's status as KubeRay would (Running, then Complete and
SUCCEEDED), which is what Kueue's RayJob adapter copies back to the manager. Selected by the `e2e` marker; run alone
with `venv/bin/python -m pytest tests/e2e/test_multikueue_e2e.py -m e2e -s`.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.e2e import multikueue_e2e_support as mk
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import KubeClient, KubeError
from tpu_fallback.offline.mockrun import MOCK_CA, MOCK_ENDPOINT
from tpu_fallback.render import kueue as kueue_objects
from tpu_fallback.render import multikueue as scoped
from tpu_fallback.render.kubeconfig import token_kubeconfig

pytestmark = pytest.mark.e2e

T = TypeVar("T")
WAIT = 90.0  # seconds for each controller step: two Kueues and two API servers share 2 cores with other tests
RAY_API = "ray.io/v1"
TPU_GROUP, HEAD, SUBMITTER = "tpu-group", "head", "submitter"
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"
LOW, HIGH = ("low", 100), ("high", 1000)  # WorkloadPriorityClasses, the same on both clusters
REFUSALS = ("is forbidden", "cannot update resource", "cannot create resource", "cannot delete resource",
            "cannot patch resource", "cannot get resource", "cannot list resource", "cannot watch resource")


@dataclass
class Env:
    plan: mk.GlobalPlan
    worker: mk.WorkerOfPlan
    manager_plane: ControlPlane
    worker_plane: mk.AuditedControlPlane
    connection: mk.Connection
    account: str  # namespace/name of the worker's MultiKueue ServiceAccount
    skipped: dict[str, list[str]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    connected: bool = False
    applied: float = 0.0  # time.monotonic() when the manager's objects were in

    @property
    def manager(self) -> KubeClient:
        return self.manager_plane.client

    @property
    def remote(self) -> KubeClient:
        return self.worker_plane.client

    def step(self, name: str, started: float) -> None:
        self.timings[name] = time.monotonic() - started
        print(f"[multikueue] {name}: {self.timings[name]:.2f} s")


def multikueue_account(plan: mk.GlobalPlan, worker: mk.WorkerOfPlan) -> tuple[str, str]:
    """(namespace, name) of the worker's token Secret for the MultiKueue ServiceAccount, from the plan."""
    found = [o for o in plan.worker_objects(worker) if o["kind"] == "Secret" and o.get("type") == TOKEN_SECRET_TYPE
             and o["metadata"].get("annotations", {}).get("kubernetes.io/service-account.name")
             == kueue_objects.MULTIKUEUE_ACCOUNT]
    assert len(found) == 1, f"the plan should give {worker.cluster_name} one token Secret for the MultiKueue account"
    return found[0]["metadata"]["namespace"], found[0]["metadata"]["name"]


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    t0 = time.monotonic()
    plan = mk.global_plan()
    worker = plan.first_worker
    namespace, secret = multikueue_account(plan, worker)
    user = mk.service_account_user(namespace, kueue_objects.MULTIKUEUE_ACCOUNT)
    manager_plane = ControlPlane(feature_gates=plan.feature_gates[plan.manager], kueue_log_level=3)
    worker_plane = mk.AuditedControlPlane(feature_gates=plan.feature_gates[worker.cluster_name], audit_users=[user])
    with mk.start_pair(manager_plane, worker_plane):
        started = time.monotonic()
        print(f"\n[multikueue] plan and both control planes: {started - t0:.1f} s")
        for role, plane in (("manager", manager_plane), ("worker", worker_plane)):
            print(f"[multikueue] {role} start-up: " + ", ".join(f"{k} {v:.1f}" for k, v in plane.timings.items()))
        # As `pulumi up` orders them: the worker's objects, its token, then the manager's objects with the
        # kubeconfig Secret built from that token (the MultiKueueClusters depend on it).
        skipped = {"worker": mk.apply_objects(worker_plane.client, plan.worker_objects(worker))}
        connection = mk.connect_worker(plan, worker, worker_plane, namespace, secret, started)
        skipped["manager"] = mk.apply_objects(manager_plane.client, mk.manager_objects(plan, {worker.name: connection}))
        applied = time.monotonic()
        for client in (manager_plane.client, worker_plane.client):
            for name, value in (LOW, HIGH):
                client.apply({"apiVersion": mk.KUEUE_API, "kind": "WorkloadPriorityClass",
                              "metadata": {"name": name}, "value": value})
        yield Env(plan, worker, manager_plane, worker_plane, connection, f"{namespace}/{secret}", skipped,
                  {"token": connection.token_seconds, "objects_and_token": applied - started}, applied=applied)


def wait(client: KubeClient, predicate: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    return client.wait_for(predicate, timeout, what)


def active_condition(client: KubeClient, kind: str, name: str) -> dict[str, Any] | None:
    return mk.condition(client.get(mk.KUEUE_API, kind, name), "Active")


def connected(env: Env) -> None:
    """The manager reaches the worker with the project's token (checked once per module; every test needs it)."""
    if env.connected:
        return
    plan, worker = env.plan, env.worker
    assert env.skipped == {"worker": ["PodMonitoring kueue-system/kueue-controller-metrics"],
                           "manager": ["PodMonitoring kueue-system/kueue-controller-metrics"]}

    # The plan's kubeconfig is token_kubeconfig of the mock endpoint, CA and (unknown, empty) token: the test's
    # real one is the same rendering with the worker's values.
    planned = plan.find(plan.manager, "Secret", worker.secret_name, kueue_objects.KUEUE_NAMESPACE)
    assert planned["stringData"]["kubeconfig"] == token_kubeconfig(worker.cluster_name, MOCK_ENDPOINT, MOCK_CA, "")

    # The token is the worker's own, minted into the project's Secret by its token controller (which also put the
    # worker's CA there), and it is the MultiKueue ServiceAccount's.
    namespace, secret_name = env.account.split("/")
    token_secret = env.remote.get("v1", "Secret", secret_name, namespace) or {}
    assert base64.b64decode(token_secret["data"]["ca.crt"]) == env.worker_plane.ca_file.read_bytes()
    as_account = KubeClient(env.worker_plane.server, env.worker_plane.ca_file, env.connection.token)
    review = as_account.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == mk.service_account_user(
        namespace, kueue_objects.MULTIKUEUE_ACCOUNT)
    with pytest.raises(KubeError) as refused:  # least privilege: no Secrets
        as_account.request("GET", f"/api/v1/namespaces/{namespace}/secrets")
    assert refused.value.status == 403

    active = wait(env.manager, lambda: (lambda c: c if c and c["status"] == "True" else None)(
        active_condition(env.manager, "MultiKueueCluster", worker.name)), f"MultiKueueCluster {worker.name} Active")
    env.step("manager's objects applied to MultiKueueCluster Active (at most)", env.applied)
    assert (active.get("reason"), active.get("message")) == ("Active", "Connected")

    # The other workers of the stack do not run here: their clusters stay inactive, the check is partly active.
    for other in plan.workers[1:]:
        cond = wait(env.manager, functools.partial(active_condition, env.manager, "MultiKueueCluster", other.name),
                    f"{other.name}'s Active condition")
        assert cond["status"] == "False" and cond["reason"] == "BadKubeConfig", cond
        assert f'Secret "{other.secret_name}" not found' in cond["message"]
    others = " ".join(w.name for w in plan.workers[1:])

    def partly_active() -> dict[str, Any] | None:
        cond = active_condition(env.manager, "AdmissionCheck", kueue_objects.MULTIKUEUE_CHECK)
        return cond if cond and cond["reason"] == "SomeActiveClusters" and others in cond["message"] else None

    check = wait(env.manager, partly_active, "the multikueue AdmissionCheck active on some clusters")
    assert check["status"] == "True" and check["message"] == f"Inactive clusters: [{others}]"
    queue = str(plan.run.outputs["clusterQueue"])
    for client in (env.manager, env.remote):
        # (The manager's turns Active once Kueue has seen the multikueue check active.)
        wait(client, lambda c=client: (lambda q: q if q and q["status"] == "True" else None)(  # type: ignore[misc]
            active_condition(c, "ClusterQueue", queue)), f"ClusterQueue {queue} Active")
    # The kubeconfig was accepted at once: Kueue's checks (no exec plugin, CA data, no insecure TLS) passed and it
    # logged no error about this cluster.
    errors = [e for e in mk.json_log(env.manager_plane.kueue_log)
              if e.get("level") == "error" and e.get("logger") == "multikueue-cluster" and e.get("name") == worker.name]
    assert not errors, errors
    env.connected = True


def test_the_manager_connects_to_the_worker_with_the_projects_token(env: Env) -> None:
    connected(env)


def no_jobs_left(env: Env, namespace: str) -> None:
    """Delete the RayJobs an earlier test left on the manager and wait for their Workloads and worker copies to go,
    so each test starts with the worker's quota free."""
    for job in env.manager.list(RAY_API, "RayJob", namespace):
        env.manager.delete(RAY_API, "RayJob", job["metadata"]["name"], namespace)
    wait(env.manager, lambda: not any(c.list(kind_api, kind, namespace) for c in (env.manager, env.remote)
                                      for kind_api, kind in ((mk.KUEUE_API, "Workload"), (RAY_API, "RayJob"))) or None,
         "no RayJob or Workload left on either cluster")


def test_a_rayjob_runs_on_the_worker_and_reports_back(env: Env) -> None:
    connected(env)
    plan, worker = env.plan, env.worker
    (queue,) = plan.run.outputs["localQueues"]
    namespace = queue["namespace"]
    no_jobs_left(env, namespace)
    kueue_log, audit_log = mk.log_size(env.manager_plane.kueue_log), mk.log_size(env.worker_plane.audit_log)
    objects = mk.render_rayjob(plan, "mk", f"{namespace}/{queue['name']}", {mk.PRIORITY_LABEL: LOW[0]})
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    name = job["metadata"]["name"]

    def local_workload() -> dict[str, Any] | None:
        return mk.workload_of(env.manager, namespace, "RayJob", name)

    def remote_workload() -> dict[str, Any] | None:
        return mk.workload_of(env.remote, namespace, "RayJob", name)

    def admitted(get: Callable[[], dict[str, Any] | None]) -> Callable[[], dict[str, Any] | None]:
        return lambda: (lambda w: w if mk.is_true(w, "Admitted") else None)(get())

    # Submitted to the manager as the jobs stack does; Kueue's webhook hands the RayJob to MultiKueue.
    started = time.monotonic()
    for obj in objects:
        env.manager.apply(obj)
    remote = wait(env.remote, admitted(remote_workload), f"the worker's copy of {name} admitted")
    env.step("submission to the worker's admission", started)
    local = wait(env.manager, admitted(local_workload), f"the manager's Workload of {name} admitted")
    env.step("submission to the manager's admission", started)

    manager_job = env.manager.get(RAY_API, "RayJob", name, namespace) or {}
    assert manager_job["spec"].get("managedBy") == mk.MULTIKUEUE_MANAGED_BY
    worker_job = env.remote.get(RAY_API, "RayJob", name, namespace)
    assert worker_job is not None, "no RayJob copy on the worker"
    assert worker_job["metadata"]["labels"][mk.ORIGIN_LABEL] == "multikueue"
    # Kueue 0.19's WorkloadIdentifierAnnotations (Beta, on): the prebuilt Workload's name is an annotation.
    assert worker_job["metadata"]["annotations"][mk.PREBUILT_ANNOTATION] == local["metadata"]["name"]
    assert worker_job["spec"].get("managedBy") is None  # so the worker's KubeRay runs it

    # The worker's Kueue admits its copy on the worker's flavors; the manager's only on its pass-through flavor.
    assert remote["metadata"]["name"] == local["metadata"]["name"]
    assert remote["metadata"]["labels"][mk.ORIGIN_LABEL] == "multikueue"
    assert mk.flavors(remote) == {TPU_GROUP: {"on-demand"}, HEAD: {"default-cpu"}, SUBMITTER: {"default-cpu"}}
    assert mk.flavors(local) == {ps: {"multikueue"} for ps in (TPU_GROUP, HEAD, SUBMITTER)}
    check = mk.admission_check(local, kueue_objects.MULTIKUEUE_CHECK) or {}
    assert check.get("state") == "Ready", local["status"]
    assert check.get("message") == f'The workload was admitted on "{worker.name}"'
    assert local["status"].get("clusterName") == worker.name
    # `tpu-fallback status` on the manager says which worker runs it (issue 38).
    shown = subprocess.run([str(Path(sys.executable).parent / "tpu-fallback"), "status", name, "-n", namespace,
                            "-o", "json", "--kubeconfig", str(env.manager_plane.kubeconfig)],
                           capture_output=True, text=True, timeout=60, check=True)
    (job_status,) = json.loads(shown.stdout)["jobs"]
    assert job_status["where"]["workerCluster"] == worker.name, job_status
    assert job_status["state"] in ("admitted", "running") and job_status["job"]["name"] == name, job_status
    wait(env.manager, lambda: not (env.manager.get(RAY_API, "RayJob", name, namespace) or {}).get("spec", {})
         .get("suspend") or None, "the manager's RayJob unsuspended (spec.suspend false, left out)")

    # Priority: the user moves the job to another WorkloadPriorityClass on the manager; MultiKueue updates the
    # worker's copy in place (an update on workloads, which the project's RBAC grants).
    assert (remote["spec"].get("priorityClassRef") or {}).get("name") == LOW[0]
    assert remote["spec"].get("priority") == LOW[1]
    started = time.monotonic()
    mk.merge_patch(env.manager, RAY_API, "RayJob", name, namespace,
                   {"metadata": {"labels": {mk.PRIORITY_LABEL: HIGH[0]}}})
    raised = wait(env.remote, lambda: (lambda w: w if w and w["spec"].get("priority") == HIGH[1] else None)(
        remote_workload()), "the new priority on the worker's copy")
    env.step("priority change to the worker", started)
    assert (raised["spec"].get("priorityClassRef") or {}).get("name") == HIGH[0]
    assert raised["metadata"]["uid"] == remote["metadata"]["uid"], "the worker's copy was re-created, not updated"
    assert mk.is_true(raised, "Admitted")
    assert (local_workload() or {}).get("spec", {}).get("priority") == HIGH[1]

    # Status: what KubeRay would write on the worker comes back to the manager's RayJob.
    def set_status(**status: Any) -> None:
        env.remote.apply_status({"apiVersion": RAY_API, "kind": "RayJob",
                                 "metadata": {"name": name, "namespace": namespace}, "status": status})

    def manager_status(key: str, value: str) -> Callable[[], dict[str, Any] | None]:
        return lambda: (lambda s: s if s.get(key) == value else None)(
            (env.manager.get(RAY_API, "RayJob", name, namespace) or {}).get("status") or {})

    running = {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": f"{name}-raycluster",
               "jobId": f"{name}-job"}
    started = time.monotonic()
    set_status(**running)
    status = wait(env.manager, manager_status("jobStatus", "RUNNING"), "the worker's RayJob status on the manager")
    env.step("Running status back to the manager", started)
    assert {k: status.get(k) for k in running} == running

    # Completion: the worker's Kueue finishes its Workload, MultiKueue finishes the manager's and cleans up.
    started = time.monotonic()
    set_status(**{**running, "jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "done"})
    finished = wait(env.manager, lambda: (lambda w: w if mk.is_true(w, "Finished") else None)(local_workload()),
                    "the manager's Workload Finished")
    env.step("completion to the manager's Workload Finished", started)
    assert (mk.condition(finished, "Finished") or {}).get("reason") == "Succeeded"
    assert (mk.condition(finished, "Finished") or {}).get("message") == "done"
    status = wait(env.manager, manager_status("jobDeploymentStatus", "Complete"), "the manager's RayJob Complete")
    assert status.get("jobStatus") == "SUCCEEDED"
    wait(env.remote, lambda: (env.remote.get(RAY_API, "RayJob", name, namespace) is None
                              and remote_workload() is None) or None, "the worker's copies deleted")
    env.step("completion to the worker's copies deleted", started)

    # The RBAC the project grants on the worker was enough: no refusal logged by the manager's Kueue, and none in
    # the worker's audit log of the ServiceAccount's requests.
    refused = mk.log_lines(env.manager_plane.kueue_log, *REFUSALS, since=kueue_log)
    assert not refused, "\n".join(line[:600] for line in refused[:10])
    events = env.worker_plane.audit_events(audit_log)
    requests = mk.requests_of(events)
    agents = sorted({a for a in (str(e.get("userAgent")) for e in events) if not a.startswith(mk.TEST_USER_AGENT)})
    print(f"[multikueue] user agents of the ServiceAccount on the worker, besides the test's: {agents}")
    print("[multikueue] the manager's requests on the worker (verb, resource, status: count):")
    for req, count in sorted(requests.items(), key=lambda kv: (kv[0].resource, kv[0].verb, kv[0].code)):
        print(f"    {req.verb:7} {req.resource:32} {req.code}: {count}")
    assert not [r for r in requests if r.code in (401, 403)], requests
    used = {(r.verb, r.resource) for r in requests}
    for needed in [("create", "kueue.x-k8s.io/workloads"), ("update", "kueue.x-k8s.io/workloads"),
                   ("create", "ray.io/rayjobs"), ("delete", "ray.io/rayjobs")]:
        assert needed in used, f"expected the manager to {needed[0]} {needed[1]} on the worker: {sorted(used)}"
    # The worker's copy of the Workload goes one of two ways, and which one is a race: Kueue's RemoveRemoteObjects
    # (pkg/controller/admissionchecks/multikueue/workload.go, v0.19.2) deletes the remote RayJob, then removes the
    # Workload's finalizer and deletes it; but the worker's Kueue made that RayJob the Workload's owner (the
    # prebuilt-workload ownership of jobframework), so the worker's garbage collector may remove it first, and then
    # the manager has nothing left to delete. Either way the project's RBAC was enough (no 401/403 above).
    owners = [(o.get("kind"), o.get("name")) for o in raised["metadata"].get("ownerReferences", [])]
    assert ("RayJob", name) in owners, f"the worker's Workload is not owned by the worker's RayJob: {owners}"
    print(f"[multikueue] the worker's Workload deleted by the manager: {('delete', 'kueue.x-k8s.io/workloads') in used}"
          " (else by the worker's garbage collector)")
    # Its watches started when it connected, before this job.
    watches = {r.resource for r in mk.requests_of(env.worker_plane.audit_events()) if r.verb == "watch"}
    assert {"kueue.x-k8s.io/workloads", "ray.io/rayjobs"} <= watches, watches
    print(f"[multikueue] timings: {env.timings}")


def test_without_update_on_workloads_a_priority_change_is_refused(env: Env) -> None:
    """The control for the RBAC check above: the project's worker role without update/patch on workloads (as
    before a5d3661) makes the manager's priority sync fail with "cannot update resource", and it recovers once
    the project's role is back."""
    connected(env)
    plan, worker = env.plan, env.worker
    (queue,) = plan.run.outputs["localQueues"]
    namespace = queue["namespace"]
    no_jobs_left(env, namespace)
    # Writes are granted by the write role, bound in the job namespaces only (render/multikueue.py).
    role = plan.find(worker.cluster_name, "ClusterRole", scoped.WRITE_ROLE)
    reduced = copy.deepcopy(role)
    for rule in reduced["rules"]:
        if rule["apiGroups"] == ["kueue.x-k8s.io"] and rule["resources"] == ["workloads"]:
            rule["verbs"] = [v for v in rule["verbs"] if v not in ("update", "patch")]
    assert reduced != role, "the project's role grants no update on workloads: this control means nothing"
    objects = mk.render_rayjob(plan, "rbac", f"{namespace}/{queue['name']}", {mk.PRIORITY_LABEL: LOW[0]})
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    name = job["metadata"]["name"]

    def remote_workload() -> dict[str, Any] | None:
        return mk.workload_of(env.remote, namespace, "RayJob", name)

    for obj in objects:
        env.manager.apply(obj)
    wait(env.remote, lambda: (lambda w: w if mk.is_true(w, "Admitted") else None)(remote_workload()),
         f"the worker's copy of {name} admitted")
    kueue_log = mk.log_size(env.manager_plane.kueue_log)
    try:
        env.remote.apply(reduced)
        mk.merge_patch(env.manager, RAY_API, "RayJob", name, namespace,
                       {"metadata": {"labels": {mk.PRIORITY_LABEL: HIGH[0]}}})
        refused = wait(env.manager, lambda: mk.log_lines(env.manager_plane.kueue_log, "cannot update resource",
                                                         since=kueue_log) or None,
                       "the manager's Kueue refused an update on the worker")
        print(f"[multikueue] with the reduced role: {refused[0][:400]}")
        assert '\\"workloads\\"' in refused[0] and "failed to update remote workload" in refused[0]
        assert (remote_workload() or {}).get("spec", {}).get("priority") == LOW[1]
    finally:
        env.remote.apply(role)
    started = time.monotonic()
    wait(env.remote, lambda: (lambda w: w if w and w["spec"].get("priority") == HIGH[1] else None)(remote_workload()),
         "the new priority on the worker's copy once the project's role is back")
    env.step("project's role back to the priority on the worker", started)


def test_the_worker_token_writes_only_in_the_job_namespaces(env: Env) -> None:
    """Issue 28 item 6: the token the manager holds may read across the worker (its watches are cluster-wide) but
    create or delete jobs, RayClusters and Workloads only in the job namespaces; in kube-system, or any other
    namespace, the worker's API server refuses (SelfSubjectAccessReview as the token, and a real create)."""
    connected(env)
    (queue,) = env.plan.run.outputs["localQueues"]
    as_account = KubeClient(env.worker_plane.server, env.worker_plane.ca_file, env.connection.token)

    def allowed(verb: str, group: str, resource: str, namespace: str | None) -> bool:
        review = as_account.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                            **({"namespace": namespace} if namespace else {})}}})
        return bool(review["status"].get("allowed"))

    writes = [("create", "ray.io", "rayjobs"), ("create", "ray.io", "rayclusters"), ("create", "batch", "jobs"),
              ("delete", "ray.io", "rayjobs"), ("update", "kueue.x-k8s.io", "workloads")]
    for verb, group, resource in writes:
        assert allowed(verb, group, resource, queue["namespace"]), (verb, resource, queue["namespace"])
        for other in ("kube-system", "kueue-system", None):  # None: every namespace at once
            assert not allowed(verb, group, resource, other), (verb, resource, other)
    for group, resource in (("ray.io", "rayjobs"), ("kueue.x-k8s.io", "workloads")):
        assert allowed("watch", group, resource, None) and allowed("list", group, resource, "kube-system")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "mk-rbac-probe", "namespace": "kube-system"},
           "spec": {"template": {"spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
    with pytest.raises(KubeError) as refused:
        as_account.request("POST", "/apis/batch/v1/namespaces/kube-system/jobs", job)
    assert refused.value.status == 403
    assert env.remote.get("batch/v1", "Job", "mk-rbac-probe", "kube-system") is None


def test_the_worker_has_what_a_dispatched_rayjob_mounts(env: Env) -> None:
    connected(env)
    (queue,) = env.plan.run.outputs["localQueues"]
    namespace = queue["namespace"]
    no_jobs_left(env, namespace)
    objects = mk.render_rayjob(env.plan, "mounts", f"{namespace}/{queue['name']}")
    (job,) = [o for o in objects if o["kind"] == "RayJob"]
    name = job["metadata"]["name"]
    for obj in objects:
        env.manager.apply(obj)
    copy = wait(env.remote, lambda: env.remote.get(RAY_API, "RayJob", name, namespace), f"the worker's copy of {name}")
    spec = copy["spec"]["rayClusterSpec"]
    templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec.get("workerGroupSpecs", []))]
    mounted = {v["configMap"]["name"] for t in templates for v in t["spec"].get("volumes", []) if "configMap" in v
               and not v["configMap"].get("optional")}
    assert mounted, "the RayJob mounts no ConfigMap: this test checks nothing"
    missing = sorted(m for m in mounted if env.remote.get("v1", "ConfigMap", m, namespace) is None)
    assert not missing, f"ConfigMaps the worker's copy of {name} mounts but the worker lacks: {missing}"
