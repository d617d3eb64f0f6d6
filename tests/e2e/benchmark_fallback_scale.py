"""What the fallback controller costs on a big cluster: LIST every pass (the former way) against watching (issue 26
item 6, "Watch, don't poll-list").

    venv/bin/python -m tests.e2e.benchmark_fallback_scale                     # both modes, 500 nodes, 2,000 jobs
    venv/bin/python -m tests.e2e.benchmark_fallback_scale --modes watch --window 30

Prints figures, asserts nothing. For each mode, one after the other, a fresh ControlPlane (kube-apiserver, etcd,
kube-controller-manager without the node lifecycle controller, Kueue with the dev stack's waitForPodsReady; no
scheduler, no KWOK, no KubeRay) with:

- everything the dev stack's offline plan puts in Kubernetes (flavors, ClusterQueue, LocalQueue, the controller's
  RBAC and Deployment);
- `--nodes` Node objects (half in plan A's pool, half in plan B's, labelled and tainted as the plan's pools are)
  created through the API with a Ready status; nothing changes them afterwards (no node lifecycle controller in
  this control plane, so none is marked NotReady or deleted, and there is no kubelet to renew a Lease);
- `--jobs` copies of the jobs stack's RayJob in the stack's LocalQueue `default/user-queue`: Kueue makes their
  Workloads and admits a few (one on plan A, the rest of the admitted on plan B waiting for DWS; the
  default-cpu quota of the head pods caps them), the others stay queued.

Then the controller runs as its pod would (the ConfigMap's files, the container's command; `--list-every-pass`
added for the listing mode), with the plan's ServiceAccount token and pollIntervalSeconds (5 s unless `--poll`), and is
measured over two windows of `--window` seconds:

- steady: nothing happens (Kueue is settled before the controller starts);
- stock-out: plan A's job gets four Pending worker pods that the scheduler marked Unschedulable, its RayCluster
  (owned by the RayJob, as KubeRay makes it), and GKE's autoscaler `FailedScaleUp` "GCE out of resources" Event on
  each pod, repeated every 10 s while the pods exist (as the autoscaler does). The controller closes plan A and
  evicts the job; once Kueue suspends the RayJob this script deletes the pods and the RayCluster (KubeRay's part),
  Kueue requeues the job and re-admits it on plan B, and the queued jobs are looked at again.

Figures: the controller's own count of its API requests (tpu_fallback_api_requests_total, every request sent),
its CPU seconds per second and peak RSS (/proc), its passes; kube-apiserver's request rate (apiserver_request_total
of every client: its metrics carry no user agent, so the controller's share shows as the difference between the
modes) and CPU; and in the stock-out, how long from the first Event to plan A tainted. This script's own requests
(the setup, a GET of the RayJob and the flavor every 0.5 s in the stock-out, the /metrics reads) are the same in
both modes.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.controlplane import ControlPlane, process_usage
from tests.e2e.gke_sim import POOL_LABEL, NodePool, pools_from_plan
from tests.e2e.kube import KubeClient

KUEUE_API = scenario.KUEUE_API
STACK = gs.Stack("dev", {"fallback": {"enabled": True}})  # the shipped defaults: pollInterval 5s, coolDown 30m
QUEUE = "default/user-queue"
OUT_OF_RESOURCES = ("Node scale up in zones us-east5-b associated with this pod failed: GCE out of resources. Pod is "
                    "at risk of not being scheduled.")
EVENT_REPEAT = 10.0  # seconds between the autoscaler's repeats of its Event
WORKERS = 4  # the RayJob's TPU hosts (numOfHosts)
METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$")


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text as series (name with its labels) -> value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        found = METRIC_LINE.match(line.strip())
        if found:
            out[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return out


def total(values: Mapping[str, float], name: str, label: str = "") -> float:
    return sum(v for k, v in values.items() if k.split("{")[0] == name and label in k)


# --- the cluster --------------------------------------------------------------------------------------------------


def node_objects(pools: Sequence[NodePool], count: int) -> list[dict[str, Any]]:
    """`count` nodes, half in plan A's pool, half in plan B's, as GKE labels and taints them, with a Ready status
    that looks like a TPU host's (capacity, conditions, a few images)."""
    plan_a = next(p for p in pools if p.name == gs.PLAN_A_POOL)
    plan_b = next(p for p in pools if p.name == gs.PLAN_B_POOL)
    out = []
    for i in range(count):
        pool = plan_a if i % 2 == 0 else plan_b
        name = f"gke-{pool.name}-{i:04d}"
        chips = str(pool.machine.tpu_chips)
        capacity = {"cpu": "180", "memory": "738Gi", "google.com/tpu": chips, "pods": "110",
                    "ephemeral-storage": "100Gi"}
        stamp = now_stamp()
        out.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {**pool.node_labels(), "kubernetes.io/hostname": name},
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": pool.node_taints(), "providerID": f"gce://bench/us-east5-b/{name}"},
            "status": {
                "capacity": capacity, "allocatable": capacity,
                "conditions": [{"type": kind, "status": "True" if kind == "Ready" else "False",
                                "reason": reason, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
                               for kind, reason in (("Ready", "KubeletReady"), ("MemoryPressure", "KubeletHasNo"),
                                                    ("DiskPressure", "KubeletHasNo"), ("PIDPressure", "KubeletHasNo"))],
                "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250 + 1}"},
                              {"type": "Hostname", "address": name}],
                "nodeInfo": {"kubeletVersion": "v1.36.3-gke.100", "containerRuntimeVersion": "containerd://2.0.4",
                             "osImage": "Container-Optimized OS from Google", "architecture": "amd64",
                             "operatingSystem": "linux", "kernelVersion": "6.6.72+", "kubeProxyVersion": "",
                             "machineID": f"{i:032x}", "systemUUID": f"{i:032x}", "bootID": f"{i:032x}"},
                "images": [{"names": [f"gke.gcr.io/image-{k}@sha256:{k:064x}", f"gke.gcr.io/image-{k}:v1"],
                            "sizeBytes": 10_000_000 * (k + 1)} for k in range(12)],
            },
        })
    return out


def create_nodes(client: KubeClient, nodes: Sequence[Mapping[str, Any]]) -> None:
    def one(node: Mapping[str, Any]) -> None:
        client.create({k: v for k, v in node.items() if k != "status"})
        client.request("PATCH", f"/api/v1/nodes/{node['metadata']['name']}/status", {"status": node["status"]},
                       content_type="application/merge-patch+json")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, nodes))


def job_objects(infra: Any, count: int) -> list[dict[str, Any]]:
    """The jobs stack's ConfigMap and `count` copies of its RayJob (bench-0001, ...) in the stack's LocalQueue."""
    rendered = scenario.render_queue_jobs(infra, QUEUE, 1, "bench")
    (template,) = [o for o in rendered if o["kind"] == "RayJob"]
    jobs = []
    for i in range(1, count + 1):
        job = copy.deepcopy(template)
        job["metadata"]["name"] = f"bench-{i:04d}"
        jobs.append(job)
    return [o for o in rendered if o["kind"] != "RayJob"] + jobs


def submit(client: KubeClient, objects: Sequence[Mapping[str, Any]]) -> None:
    for obj in objects:
        if obj["kind"] != "RayJob":
            client.apply(obj)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(client.create, [o for o in objects if o["kind"] == "RayJob"]))


def wait_settled(client: KubeClient, count: int, quiet: float = 10.0, timeout: float = 900.0) -> list[dict[str, Any]]:
    """Until Kueue has made `count` Workloads and changed none for `quiet` seconds; returns them."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        workloads = client.list(KUEUE_API, "Workload", "default")
        top = max((int(w["metadata"]["resourceVersion"]) for w in workloads), default=0)
        if len(workloads) >= count and top == last and time.monotonic() - since >= quiet:
            return workloads
        if top != last:
            last, since = top, time.monotonic()
        time.sleep(2)
    raise TimeoutError(f"Kueue did not settle {count} Workloads within {timeout:.0f} s")


def tpu_flavor(workload: Mapping[str, Any]) -> str | None:
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        flavor = (assignment.get("flavors") or {}).get("google.com/tpu")
        if flavor:
            return str(flavor)
    return None


def admitted_summary(workloads: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in workloads:
        flavor = tpu_flavor(w) or "queued"
        out[flavor] = out.get(flavor, 0) + 1
    return out


# --- the stock-out ------------------------------------------------------------------------------------------------


@dataclass
class StockOut:
    """Plan A's job stuck: unschedulable worker pods and GKE's no-capacity Events on them, repeated; KubeRay's
    clean-up (pods and RayCluster deleted) once Kueue suspended the RayJob. `run` in a thread of its own."""

    client: KubeClient
    rayjob: Mapping[str, Any]
    workload: str  # the RayJob's Workload (Kueue keeps it through the eviction and the requeue)
    plan_a_flavor: str
    taint_key: str
    started: float = 0.0
    tainted_after: float | None = None
    suspended_after: float | None = None
    readmitted_on: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    events: dict[str, str] = field(default_factory=dict)  # pod -> its Event's name

    @property
    def cluster_name(self) -> str:
        return f"{self.rayjob['metadata']['name']}-raycluster-bnch"

    def pods(self) -> list[str]:
        return [f"{self.cluster_name}-tpu-group-worker-{i}" for i in range(WORKERS)]

    def create(self) -> None:
        job = self.rayjob
        spec = copy.deepcopy(job["spec"]["rayClusterSpec"])
        owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": job["metadata"]["name"],
                 "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        self.client.create({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                            "metadata": {"name": self.cluster_name, "namespace": "default",
                                         "labels": {"ray.io/originated-from-crd": "RayJob"},
                                         "ownerReferences": [owner]}, "spec": spec})
        cluster = self.client.get("ray.io/v1", "RayCluster", self.cluster_name, "default")
        assert cluster is not None
        worker = spec["workerGroupSpecs"][0]["template"]["spec"]
        for name in self.pods():
            pod_spec = copy.deepcopy(worker)
            pod_spec["nodeSelector"] = {**pod_spec.get("nodeSelector", {}), POOL_LABEL: gs.PLAN_A_POOL}
            self.client.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": "default",
                "labels": {"ray.io/cluster": self.cluster_name, "ray.io/node-type": "worker",
                           "ray.io/group": "tpu-group"},
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": self.cluster_name,
                                     "uid": cluster["metadata"]["uid"], "controller": True}]}, "spec": pod_spec})
            self.client.request("PATCH", f"/api/v1/namespaces/default/pods/{name}/status", {"status": {
                "phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime":
                    now_stamp(), "message": "0/500 nodes are available: 500 node(s) didn't match Pod's node "
                                            "affinity/selector."}]}}, content_type="application/merge-patch+json")

    def say_no_capacity(self) -> None:
        """The autoscaler's FailedScaleUp on each pod: a new Event the first time, then count + 1."""
        stamp = now_stamp()
        for pod in self.pods():
            name = self.events.get(pod)
            if name is None:
                created = self.client.create({
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"generateName": f"{pod}.", "namespace": "default"},
                    "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": "default"},
                    "reason": "FailedScaleUp", "message": OUT_OF_RESOURCES, "type": "Warning",
                    "source": {"component": "cluster-autoscaler"}, "firstTimestamp": stamp, "lastTimestamp": stamp,
                    "count": 1, "reportingComponent": "cluster-autoscaler"})
                self.events[pod] = created["metadata"]["name"]
            else:
                current = self.client.get("v1", "Event", name, "default")
                count = int((current or {}).get("count") or 1) + 1
                self.client.request("PATCH", f"/api/v1/namespaces/default/events/{name}",
                                    {"count": count, "lastTimestamp": stamp},
                                    content_type="application/merge-patch+json")

    def clean_up(self) -> None:
        """KubeRay's part once the RayJob is suspended: its RayCluster and pods go."""
        for name in self.pods():
            self.client.delete("v1", "Pod", name, "default")
        self.client.delete("ray.io/v1", "RayCluster", self.cluster_name, "default")

    def run(self) -> None:
        self.create()
        self.started = time.monotonic()  # the times below count from the first Event
        self.say_no_capacity()
        said, cleaned = time.monotonic(), False
        name = self.rayjob["metadata"]["name"]
        while not self.stop.wait(0.5):
            elapsed = time.monotonic() - self.started
            if self.tainted_after is None:
                flavor = self.client.get(KUEUE_API, "ResourceFlavor", self.plan_a_flavor) or {}
                if any(t.get("key") == self.taint_key for t in (flavor.get("spec") or {}).get("nodeTaints") or []):
                    self.tainted_after = elapsed
            job = self.client.get("ray.io/v1", "RayJob", name, "default") or {}
            if not cleaned and (job.get("spec") or {}).get("suspend"):
                self.suspended_after = elapsed
                self.clean_up()
                cleaned = True
            elif not cleaned and time.monotonic() - said >= EVENT_REPEAT:
                self.say_no_capacity()
                said = time.monotonic()
            if cleaned and self.readmitted_on is None:
                workload = self.client.get(KUEUE_API, "Workload", self.workload, "default") or {}
                if (workload.get("spec") or {}).get("active", True) is not False:
                    self.readmitted_on = tpu_flavor(workload)


# --- measuring ----------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    controller: dict[str, float]
    apiserver: dict[str, float]
    controller_cpu: float
    controller_rss: int
    controller_peak_rss: int
    apiserver_cpu: float
    etcd_cpu: float


def sample(plane: ControlPlane, controller: fs.Controller) -> Sample:
    pids = plane.pids()
    own = process_usage(controller.pid) if controller.pid else None
    api = process_usage(pids["apiserver"])
    etcd = process_usage(pids["etcd"])
    return Sample(time.monotonic(), controller.metrics(), parse_metrics(str(plane.client.request("GET", "/metrics"))),
                  own.cpu_seconds if own else float("nan"), own.rss_bytes if own else 0,
                  own.peak_rss_bytes if own else 0,
                  api.cpu_seconds if api else float("nan"), etcd.cpu_seconds if etcd else float("nan"))


def figures(a: Sample, b: Sample) -> dict[str, float]:
    span = b.at - a.at

    def rate(get: Callable[[Sample], float]) -> float:
        return (get(b) - get(a)) / span

    return {
        "controller API requests/s": rate(lambda s: total(s.controller, "tpu_fallback_api_requests_total")),
        "  of which LIST/s": rate(lambda s: total(s.controller, "tpu_fallback_api_requests_total", 'verb="list"')),
        "  of which WATCH opened/s": rate(
            lambda s: total(s.controller, "tpu_fallback_api_requests_total", 'verb="watch"')),
        "controller watch events/s": rate(lambda s: total(s.controller, "tpu_fallback_watch_events_total")),
        "controller passes/s": rate(lambda s: total(s.controller, "tpu_fallback_reconcile_passes_total")),
        "controller failed passes": b.controller.get("tpu_fallback_reconcile_errors_total", 0)
        - a.controller.get("tpu_fallback_reconcile_errors_total", 0),
        "controller CPU s/s": rate(lambda s: s.controller_cpu),
        "controller RSS MiB at the end": b.controller_rss / 2**20,
        "controller peak RSS MiB (since start)": b.controller_peak_rss / 2**20,
        "apiserver requests/s (all clients)": rate(lambda s: total(s.apiserver, "apiserver_request_total")),
        "apiserver LIST/s (all clients)": rate(lambda s: total(s.apiserver, "apiserver_request_total",
                                                               'verb="LIST"')),
        "apiserver CPU s/s": rate(lambda s: s.apiserver_cpu),
        "etcd CPU s/s": rate(lambda s: s.etcd_cpu),
    }



@dataclass
class Result:
    mode: str
    setup: dict[str, Any]
    steady: dict[str, float]
    stockout: dict[str, float]
    stock: StockOut


def measure(plane: ControlPlane, controller: fs.Controller, seconds: float) -> dict[str, float]:
    first = sample(plane, controller)
    time.sleep(seconds)
    controller.check()
    return figures(first, sample(plane, controller))


def wait_first_pass(controller: fs.Controller, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        controller.check()
        if controller.metrics().get("tpu_fallback_reconcile_passes_total", 0) >= 1:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the controller made no pass within {timeout:.0f} s:\n{controller.tail()}")


def run_mode(mode: str, args: argparse.Namespace) -> Result:
    infra = STACK.render()
    pools = pools_from_plan(infra)
    setup: dict[str, Any] = {}
    t0 = time.monotonic()
    with ControlPlane(wait_for_pods_ready=fs.kueue_wait_for_pods_ready(infra)) as plane:
        client = plane.client
        setup["control plane s"] = time.monotonic() - t0
        t1 = time.monotonic()
        scenario.apply_infra(client, infra)
        kubeconfig = fs.controller_kubeconfig(plane, infra)
        fs.apply_controller_deployment(client, infra)
        create_nodes(client, node_objects(pools, args.nodes))
        setup["nodes created s"] = time.monotonic() - t1
        t2 = time.monotonic()
        submit(client, job_objects(infra, args.jobs))
        workloads = wait_settled(client, args.jobs)
        setup["jobs submitted and Kueue settled s"] = time.monotonic() - t2
        setup["workloads by TPU flavor"] = admitted_summary(workloads)
        files, container = fs.controller_bundle(infra)
        config = json.loads(files[fs.CONTROLLER_CONFIG_KEY])
        if args.poll is not None:
            config["pollIntervalSeconds"] = args.poll
            files = {**files, fs.CONTROLLER_CONFIG_KEY: json.dumps(config)}
        if mode == "list":
            container = {**container, "command": [*container["command"], "--list-every-pass"]}
        setup["pollIntervalSeconds"] = config["pollIntervalSeconds"]
        controller = fs.Controller((files, container), kubeconfig, plane.workdir, name=f"controller-{mode}")
        plan_a = next(w for w in workloads if tpu_flavor(w) in config["planAFlavors"])
        rayjob = client.get("ray.io/v1", "RayJob", plan_a["metadata"]["ownerReferences"][0]["name"], "default")
        assert rayjob is not None
        with controller:
            wait_first_pass(controller)
            time.sleep(args.warmup)
            print(f"[{mode}] steady window ({args.window:.0f} s) ...", flush=True)
            steady = measure(plane, controller, args.window)
            stock = StockOut(client, rayjob, plan_a["metadata"]["name"], config["planAFlavors"][0], config["taintKey"])
            thread = threading.Thread(target=stock.run, daemon=True)
            print(f"[{mode}] stock-out window ({args.window:.0f} s) ...", flush=True)
            first = sample(plane, controller)
            thread.start()
            time.sleep(args.window)
            stock.stop.set()
            thread.join(30)
            controller.check()
            stockout = figures(first, sample(plane, controller))
            print(controller.tail(8), flush=True)
    return Result(mode, setup, steady, stockout, stock)


def _cell(value: float) -> str:
    if value != value:  # NaN
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if value else "0"


def print_table(results: Sequence[Result], args: argparse.Namespace) -> None:
    columns = [(f"{r.mode} {phase}", getattr(r, phase)) for phase in ("steady", "stockout") for r in results]
    rows = list(results[0].steady)
    width = max(len(r) for r in rows) + 2
    print(f"\n{args.nodes} nodes, {args.jobs} RayJobs, windows of {args.window:.0f} s; controller pollIntervalSeconds "
          f"{results[0].setup['pollIntervalSeconds']}; list = --list-every-pass, watch = informers")
    print("".ljust(width) + "".join(name.rjust(16) for name, _ in columns))
    for row in rows:
        print(row.ljust(width) + "".join(_cell(values[row]).rjust(16) for _, values in columns))
    for r in results:
        stock = r.stock
        setup = ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.setup.items())
        print(f"{r.mode}: setup: {setup}")
        print(f"{r.mode}: stock-out: plan A tainted "
              + (f"{stock.tainted_after:.1f} s" if stock.tainted_after is not None else "never")
              + " after the first FailedScaleUp; RayJob suspended "
              + (f"{stock.suspended_after:.1f} s" if stock.suspended_after is not None else "never")
              + " after; " + (f"re-admitted on {stock.readmitted_on}" if stock.readmitted_on
                              else "not re-admitted within the window (queued behind jobs Kueue admitted meanwhile)"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds of each measured window")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds after the first pass before measuring")
    parser.add_argument("--poll", type=float, default=None,
                        help="the controller's pollIntervalSeconds (default: the plan's)")
    parser.add_argument("--modes", default="list,watch", help="comma-separated: list, watch")
    args = parser.parse_args(argv)
    results = []
    for mode in args.modes.split(","):
        print(f"== {mode}: a fresh control plane, {args.nodes} nodes, {args.jobs} RayJobs", flush=True)
        results.append(run_mode(mode, args))
    print_table(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
