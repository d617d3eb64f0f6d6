"""MultiKueue end to end (issue 15 item 4): a manager and a worker control plane from the `global` stack's plan.

Each of the two is a whole `ControlPlane` (tests/e2e/controlplane.py): its own etcd, kube-apiserver,
kube-controller-manager (with the serviceaccount-token controller) and the real Kueue 0.19.2 controller, with the
CRDs of Kueue and KubeRay 1.6.2 (whose RayJob has `spec.managedBy`, which Kueue's MultiKueue RayJob adapter
needs). No KubeRay operator runs: the test writes a RayJob's status as KubeRay would.

- `GlobalPlan` is the offline plan of `Pulumi.global.yaml` with its Kubernetes objects grouped by the cluster of
  their provider (tpu_fallback.offline.tree.clusters_of, as the per-cluster YAML of the plan report), and each
  cluster's Kueue feature gates read from its Helm release's values.
- `start_pair` starts both control planes at once (the worker in a helper thread that stays alive until both
  are stopped: the harness's children die with the thread that started them, PR_SET_PDEATHSIG).
- `connect_worker` is what `pulumi up` does between the two: it waits for the worker's own token controller to
  fill the project's `kubernetes.io/service-account-token` Secret and renders the manager's kubeconfig Secret
  with the project's renderer (tpu_fallback.render.kubeconfig.token_kubeconfig, as
  tpu_fallback.components.multikueue.WorkerAccess does), pointing at the worker's https://127.0.0.1:<port> with
  its CA; `manager_objects` puts it in place of the planned one (whose token is unknown offline).
- `AuditedControlPlane` adds an audit log of one user's requests to the API server (the worker's), so a test
  sees every request the manager's Kueue makes with the project's token and whether RBAC let it through.

Kueue's configuration on both: the harness's (integrations batch/job and ray.io/rayjob) with the plan's feature
gates. MultiKueue is a Beta gate, on by default in 0.19.2 (pkg/features/kube_features.go), and the project does
not turn it off; `multiKueue` settings are Kueue's defaults (origin "multikueue", the AllAtOnce dispatcher,
gcInterval 1 min, workerLostTimeout 15 min), as the chart's manager config leaves them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import (
    REPO_ROOT,
    ProgramRun,
    apply_order,
    kubernetes_manifest,
    run_program,
)
from tpu_fallback.offline.tree import clusters_of
from tpu_fallback.render.kubeconfig import token_kubeconfig

STACK = "global"
KUEUE_API = "kueue.x-k8s.io/v1beta2"
INFRA_STACK = "organization/tpu-fallback/dev"  # the jobs dev stack's infraStack: the outputs are handed over as it
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"  # Kueue's MultiKueueOriginLabel
PREBUILT_ANNOTATION = "kueue.x-k8s.io/prebuilt-workload-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerOfPlan:
    name: str  # the MultiKueueCluster's name ("europe")
    cluster_name: str  # its GKE cluster ("tpu-global-europe"), the kubeconfig's context
    secret_name: str  # the manager's kubeconfig Secret the MultiKueueCluster names


@dataclass(frozen=True)
class GlobalPlan:
    run: ProgramRun
    manager: str  # the manager's cluster name
    workers: list[WorkerOfPlan]  # in the MultiKueueConfig's order
    objects: dict[str, list[dict[str, Any]]] = field(repr=False)  # cluster -> its objects, in apply order
    feature_gates: dict[str, dict[str, bool]] = field(repr=False)  # cluster -> its Kueue's gates (Helm values)

    @property
    def first_worker(self) -> WorkerOfPlan:
        return self.workers[0]

    def manager_objects(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.objects[self.manager])

    def worker_objects(self, worker: WorkerOfPlan) -> list[dict[str, Any]]:
        return copy.deepcopy(self.objects[worker.cluster_name])

    def find(self, cluster: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = [o for o in self.objects[cluster] if o["kind"] == kind and o["metadata"]["name"] == name
                 and (namespace is None or o["metadata"].get("namespace") == namespace)]
        if len(found) != 1:
            raise AssertionError(f"expected one {kind} {name} on {cluster} in the plan, found {len(found)}")
        return copy.deepcopy(found[0])


def objects_by_cluster(run: ProgramRun) -> dict[str, list[dict[str, Any]]]:
    """The plan's Kubernetes objects (Helm releases excluded) by the cluster of their provider, in apply order."""
    where = clusters_of(run)
    out: dict[str, list[dict[str, Any]]] = {}
    for r in run.resources:
        if r.type.startswith("kubernetes:") and not r.type.startswith("kubernetes:helm.sh/"):
            if r.urn not in where:
                raise AssertionError(f"{r.urn}: no cluster found for it in the plan")
            out.setdefault(where[r.urn], []).append(kubernetes_manifest(r))
    return {cluster: sorted(objs, key=apply_order) for cluster, objs in out.items()}


def kueue_feature_gates(run: ProgramRun) -> dict[str, dict[str, bool]]:
    """cluster -> the feature gates its Kueue Helm release sets (controllerManager.featureGates)."""
    where = clusters_of(run)
    gates: dict[str, dict[str, bool]] = {}
    for r in run.of_type(HELM_RELEASE):
        values = r.inputs.get("values") or {}
        listed = (values.get("controllerManager") or {}).get("featureGates") or []
        if r.urn in where and "kueue" in str(r.inputs.get("chart", r.name)):
            gates[where[r.urn]] = {str(g["name"]): bool(g["enabled"]) for g in listed}
    return gates


def global_plan(overrides: Mapping[str, Any] | None = None) -> GlobalPlan:
    run = run_program(REPO_ROOT, STACK, dict(overrides or {}))
    if run.error is not None:
        raise run.error
    objects = objects_by_cluster(run)
    manager = str(run.outputs["clusterName"])
    clusters = {str(w["name"]): str(w["clusterName"]) for w in run.outputs["workers"]}
    (config,) = [o for o in objects[manager] if o["kind"] == "MultiKueueConfig"]
    secrets = {o["metadata"]["name"]: o["spec"]["clusterSource"]["kubeConfig"]["location"]
               for o in objects[manager] if o["kind"] == "MultiKueueCluster"}
    workers = [WorkerOfPlan(name, clusters[name], secrets[name]) for name in config["spec"]["clusters"]]
    return GlobalPlan(run, manager, workers, objects, kueue_feature_gates(run))


def render_rayjob(plan: GlobalPlan, name: str, queue: str, labels: Mapping[str, str] | None = None
                  ) -> list[dict[str, Any]]:
    """The jobs project's objects (its ConfigMap, one RayJob `<name>-1`) for the global stack's outputs, as
    `pulumi up` of the jobs stack submits them to the manager; `labels` are added to the RayJob."""
    refs = {INFRA_STACK: {"outputs": copy.deepcopy(plan.run.outputs),
                          "secretOutputNames": sorted(plan.run.secret_outputs)}}
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": [{"name": name, "count": 1, "queue": queue}]},
                      stack_references=refs)
    if run.error is not None:
        raise run.error
    objects = run.kubernetes_objects()
    for obj in objects:
        if obj["kind"] == "RayJob" and labels:
            obj["metadata"].setdefault("labels", {}).update(labels)
    return objects


# --------------------------------------------------------------------------------------------
# Two control planes
# --------------------------------------------------------------------------------------------


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


class AuditedControlPlane(ControlPlane):
    """A ControlPlane whose API server writes a JSON audit log (level Metadata) of the requests of `audit_users`
    only, so a test sees every request the manager's Kueue makes on a worker with the project's token, and each
    answer's status code (403 if the project's RBAC lacks something)."""

    def __init__(self, *args: Any, audit_users: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.audit_users = list(audit_users)

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Any:
        if name == "apiserver" and self.audit_users:
            policy = self.workdir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump({
                "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "users": self.audit_users}, {"level": "None"}],
            }))
            argv = [*argv, "--audit-policy-file", str(policy), "--audit-log-path", str(self.audit_log),
                    "--audit-log-format", "json", "--audit-log-mode", "blocking"]
        return super()._spawn(name, argv, env)

    def audit_events(self, since: int = 0) -> list[dict[str, Any]]:
        """The audit events from byte `since` of the log on (see log_size): ResponseStarted of watches and
        ResponseComplete of every request."""
        return [json.loads(line) for line in read_log(self.audit_log, since).splitlines() if line.strip()]


@dataclass(frozen=True)
class Request:
    verb: str
    resource: str  # "kueue.x-k8s.io/workloads", "ray.io/rayjobs/status", "secrets", or the path ("/apis")
    code: int

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> Request:
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource", event.get("requestURI", "")))
        if ref.get("subresource"):
            resource += f"/{ref['subresource']}"
        if ref.get("apiGroup"):
            resource = f"{ref['apiGroup']}/{resource}"
        return cls(str(event.get("verb", "")), resource, int((event.get("responseStatus") or {}).get("code", 0)))


TEST_USER_AGENT = "Python-urllib/"  # tests/e2e/kube.py's requests (urllib's default User-Agent)


def requests_of(events: Sequence[Mapping[str, Any]], *, ignore_agent: str = TEST_USER_AGENT) -> dict[Request, int]:
    """(verb, resource, code) -> how many times, from audit events (a watch counted once, when it started), leaving
    out the requests whose User-Agent starts with `ignore_agent` (the test's own, with the same token)."""
    counts: dict[Request, int] = {}
    for event in events:
        if ignore_agent and str(event.get("userAgent", "")).startswith(ignore_agent):
            continue
        req = Request.of(event)
        started = event.get("stage") == "ResponseStarted"
        if req.verb == "watch" and not (started or req.code >= 400):
            continue  # counted when it started (a refused watch never starts)
        if req.verb != "watch" and started:
            continue
        counts[req] = counts.get(req, 0) + 1
    return counts


@contextlib.contextmanager
def start_pair(manager: ControlPlane, worker: ControlPlane) -> Iterator[tuple[ControlPlane, ControlPlane]]:
    """Start both at once (the worker in a helper thread, kept alive until both are stopped), stop both after."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker-plane") as pool:
        started = pool.submit(worker.start)
        try:
            try:
                manager.start()
            finally:
                started.result()  # on a manager failure: wait for the worker, then stop it below
            yield manager, worker
        finally:
            manager.stop()
            worker.stop()  # in this thread: stopping does not need the one that started it


def apply_objects(client: KubeClient, objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Apply each object whose kind the API server serves; returns `Kind namespace/name` of those skipped
    (PodMonitoring: no Managed Prometheus here)."""
    skipped = []
    for obj in objects:
        if not client.serves(obj["apiVersion"], obj["kind"]):
            meta = obj["metadata"]
            skipped.append(f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " "))
            continue
        client.apply(obj)
    return skipped


def service_account_token(client: KubeClient, namespace: str, name: str, timeout: float = 60) -> str:
    """The token the worker's serviceaccount-token controller puts into a `kubernetes.io/service-account-token`
    Secret."""
    def filled() -> str | None:
        secret = client.get("v1", "Secret", name, namespace) or {}
        token = (secret.get("data") or {}).get("token")
        return base64.b64decode(token).decode() if token else None

    return client.wait_for(filled, timeout, f"the token in Secret {namespace}/{name}")


def kubeconfig_secret(planned: Mapping[str, Any], context: str, server: str, ca_file: Path, token: str
                      ) -> dict[str, Any]:
    """The manager's kubeconfig Secret: the planned object with the kubeconfig WorkerAccess renders once the
    worker exists (its endpoint, its CA, the real token)."""
    secret = copy.deepcopy(dict(planned))
    ca_b64 = base64.b64encode(ca_file.read_bytes()).decode()
    kubeconfig = token_kubeconfig(context, server, ca_b64, token)
    secret["stringData"] = {**secret.get("stringData", {}), "kubeconfig": kubeconfig}
    return secret


@dataclass
class Connection:
    """What connect_worker did, for the test's assertions."""

    token: str
    secret: dict[str, Any]
    token_seconds: float  # from applying the worker's objects to a filled token


def connect_worker(plan: GlobalPlan, worker: WorkerOfPlan, worker_plane: ControlPlane, namespace: str,
                   token_secret: str, started: float) -> Connection:
    """Wait for the worker's token, then render the manager's kubeconfig Secret for that worker (not applied)."""
    token = service_account_token(worker_plane.client, namespace, token_secret)
    token_seconds = time.monotonic() - started
    planned = plan.find(plan.manager, "Secret", worker.secret_name)
    secret = kubeconfig_secret(planned, worker.cluster_name, worker_plane.server, worker_plane.ca_file, token)
    return Connection(token, secret, token_seconds)


def manager_objects(plan: GlobalPlan, connections: Mapping[str, Connection]) -> list[dict[str, Any]]:
    """The manager's objects of the plan, in its apply order (Secrets before the MultiKueueClusters, as Pulumi's
    dependencies order them), with the kubeconfig Secret of each connected worker (by name) rendered for real, and
    without those of the workers that do not run here."""
    secrets = {w.secret_name: w.name for w in plan.workers}
    out = []
    for obj in plan.manager_objects():
        worker = secrets.get(obj["metadata"]["name"]) if obj["kind"] == "Secret" else None
        if worker is None:
            out.append(obj)
        elif worker in connections:
            out.append(copy.deepcopy(connections[worker].secret))
    return out


# --------------------------------------------------------------------------------------------
# Reading Kueue's objects
# --------------------------------------------------------------------------------------------


def condition(obj: Mapping[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in (obj or {}).get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    found = condition(obj, kind)
    return bool(found and found.get("status") == "True")


def workload_of(client: KubeClient, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    for workload in client.list(KUEUE_API, "Workload", namespace):
        owners = workload["metadata"].get("ownerReferences", [])
        if any(o.get("kind") == kind and o.get("name") == name for o in owners):
            return workload
    return None


def admission_check(workload: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for check in workload.get("status", {}).get("admissionChecks", []) or []:
        if check.get("name") == name:
            return dict(check)
    return None


def flavors(workload: Mapping[str, Any]) -> dict[str, set[str]]:
    assignments = (workload.get("status", {}).get("admission") or {}).get("podSetAssignments", [])
    return {a["name"]: set((a.get("flavors") or {}).values()) for a in assignments}


def log_size(path: Path) -> int:
    """Where a log ends now: pass it as `since` to read only what comes after."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_log(path: Path, since: int = 0) -> str:
    try:
        with path.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def log_lines(path: Path, *needles: str, since: int = 0) -> list[str]:
    """Lines of a log (from byte `since` on) holding any of the needles (case-insensitive)."""
    lowered = [n.lower() for n in needles]
    return [line for line in read_log(path, since).splitlines() if any(n in line.lower() for n in lowered)]


def json_log(path: Path, since: int = 0) -> list[dict[str, Any]]:
    """The JSON lines of a controller's log (zap's JSON encoder) from byte `since` on, others left out."""
    out = []
    for line in read_log(path, since).splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                out.append(entry)
    return out


def merge_patch(client: KubeClient, api_version: str, kind: str, name: str, namespace: str | None,
                patch: Mapping[str, Any], subresource: str | None = None) -> dict[str, Any]:
    """A JSON merge patch (server-side apply would drop the fields this client applied before and left out)."""
    res = client.resource(api_version, kind)
    result: dict[str, Any] = client.request("PATCH", res.path(name, namespace, subresource), dict(patch),
                                            content_type="application/merge-patch+json")
    return result
