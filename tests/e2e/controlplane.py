"""A throw-away Kubernetes control plane with the real Kueue controller, for the end-to-end tests.

    with ControlPlane() as cp:
        cp.client.apply({...})

`ControlPlane` runs `build_components.sh` (which reuses the cached binaries and manifests), then, in a temporary
directory: etcd and kube-apiserver on 127.0.0.1 free ports, a kube-controller-manager with the controllers the tests
need, the CRDs of Kueue, KubeRay, the ProvisioningRequest API and JobSet (copied from their Go modules by
build_components.sh and listed in its bin.env; $TPU_FALLBACK_CRDS or `crd_dirs=` overrides them), Kueue's own
admission and conversion webhooks rewritten to `url: https://127.0.0.1:<port>/...` (an EndpointSlice may not name a
loopback address, so a Service cannot lead to Kueue here), and the Kueue controller. It is ready when Kueue's
/readyz answers, a server-side dry-run create of a ResourceFlavor passes through Kueue's webhooks (the idea of the
project's readiness gate, tpu_fallback/components/kueue.py), and the controller manager is healthy and has created
the `default` ServiceAccount.

Cluster seeds. Creating the CRDs costs kube-apiserver ≈12 CPU-seconds (the KubeRay CRDs' embedded pod templates),
and the certificates ≈1 s of openssl. So the first control plane with a given set of CRDs (and kube-apiserver and
etcd versions) builds a *seed* under the cache directory: an etcd data directory in which a kube-apiserver created
those CRDs, and the CA and serving certificates the CRDs' caBundle names. Every later control plane starts etcd on a
copy of it (and makes its own service-account key and admin token), so its API server finds the CRDs in storage; it
only points the five conversion webhooks at its own Kueue port (the seed's URLs name port SEED_WEBHOOK_PORT). A seed
is rebuilt after SEED_MAX_AGE (its certificates last 400 days).

With `gke=True` (or a `GkeOptions`) it also runs what a GKE cluster has besides Kueue: kube-scheduler, the KWOK
controller (fake nodes and pods: it manages the nodes annotated `kwok.x-k8s.io/node: fake` and their pods with
the given Stages) and the KubeRay operator (RayJobs become RayClusters, pods and a submitter Job). The nodes
themselves, the autoscaler and DWS are the simulated GKE's (tests/e2e/gke_sim.py, `simulated_gke()`).

The controller manager runs the garbage collector, namespace, job, serviceaccount and serviceaccount-token
controllers only: namespaces finish terminating, dependents are garbage-collected, Jobs get Pods and
namespaces get their `default` ServiceAccount. There is no scheduler or kubelet, so Pods stay Pending. See
tests/e2e/NOTES.md.

Certificates. Kueue 0.19.2 with `internalCertManagement.enable: false` insists on a metrics certificate at the
hard-coded path /etc/kueue/metrics/certs/tls.crt (cmd/kueue/main.go, even with metrics disabled), which a test
must not write. So internal cert management stays on, and the harness hands Kueue's cert rotator certificates
it accepts as they are: the Secret kueue-webhook-server-cert is pre-filled with our CA (SAN DNS:kueue-ca, valid
beyond the rotator's 90-day look-ahead) and a serving certificate for both kueue-webhook-service.kueue-system.svc
and IP 127.0.0.1, and the same files sit in the webhook cert dir. The rotator then only injects that same CA
into the two webhook configurations and the five CRDs with conversion webhooks, which must exist before Kueue
starts (it blocks until it has injected them all).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ctypes
import fcntl
import functools
import hashlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

import yaml

from tests.e2e.kube import KubeClient, KubeError, wait_for
from tpu_fallback.render.kueue import readiness_probe_flavor

E2E_DIR = Path(__file__).resolve().parent
BUILD_SCRIPT = E2E_DIR / "build_components.sh"
# Overrides the CRD directories of bin.env: os.pathsep-separated directories (searched recursively for *.yaml).
CRDS_ENV = "TPU_FALLBACK_CRDS"
KEEP_ENV = "KEEP_E2E"

KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
WEBHOOK_SERVICE = "kueue-webhook-service"  # only used in the cert's DNS name, which the rotator checks
WEBHOOK_SECRET = "kueue-webhook-server-cert"
# The names Kueue's cert rotator patches (pkg/util/cert/cert.go):
# "<webhookServiceName without -webhook-service>-<mutating|validating>-webhook-configuration".
MUTATING_WEBHOOK = "kueue-mutating-webhook-configuration"
VALIDATING_WEBHOOK = "kueue-validating-webhook-configuration"
# CRDs Kueue's kustomize/Helm install gives a conversion webhook (config/components/crd/kustomization.yaml); the
# cert rotator injects its CA into exactly these and fails if one lacks spec.conversion.webhook.
CONVERSION_CRDS = (
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
)
RAYJOB_FRAMEWORK = "ray.io/rayjob"
RAY_CRDS = ("rayjobs.ray.io", "rayclusters.ray.io")  # needed with the RayJob integration
# Installed before Kueue starts, so its provisioning admission-check controller is set up.
PROVREQ_CRD = "provisioningrequests.autoscaling.x-k8s.io"
# Installed before Kueue starts too (every CRD is: they are in the cluster seed). Kueue v0.19.2 sets up an enabled
# integration whose API the server does not serve yet with its webhook only, and polls for the API with a back-off
# from 1 s doubling up to 2 min before it starts the integration's controller
# (pkg/controller/jobframework/setup.go: SetupControllers, WaitForAPI, maxBackoffWaitForIntegration): a JobSet
# created soon after a late CRD could wait minutes for its Workload. With the CRD in place at start the JobSet
# controller of Kueue runs at once. Only the CRD: the JobSet controller itself is not built (the tests play it).
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
JOBSET_CRD = "jobsets.jobset.x-k8s.io"
# kube-controller-manager: only what the harness needs (names as in cmd/kube-controller-manager/names).
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "job-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
)
# With gke: the node lifecycle controller removes the node.kubernetes.io/not-ready taint the API server's
# TaintNodesByCondition admission puts on every new node, once KWOK has made the node Ready (and would evict pods
# from nodes whose KWOK lease stops). Without it no pod is ever scheduled.
# The pod garbage collector deletes pods left bound to a node that is gone (after its 40 s quarantine).
GKE_CONTROLLERS = ("node-lifecycle-controller", "pod-garbage-collector-controller")
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"  # the nodes KWOK manages (annotation selector)
KWOK_POD_CIDR = "10.64.0.0/14"  # fake pod IPs (GKE's default pod range size); nothing routes them
DEFAULT_FEATURE_GATES: Mapping[str, bool] = {"ElasticJobsViaWorkloadSlices": True}
# VisibilityOnDemand (on by default) starts an API server on 0.0.0.0:8082 that wants certs under /visibility.
BASE_FEATURE_GATES: Mapping[str, bool] = {"VisibilityOnDemand": False}
DEFAULT_FRAMEWORKS = ("batch/job", "ray.io/rayjob")
# Like Kueue's kustomize patch: job-type webhooks skip these namespaces.
SYSTEM_NAMESPACES = ("kube-system", KUEUE_NAMESPACE)

STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL
# The Go runtime settings every component (and the Pulumi engine, engine_cli.py) runs with: a garbage collection at
# 5x the live heap instead of 2x, capped by a soft memory limit. kube-apiserver spends much of its CPU collecting
# the garbage of the big CRDs and list answers; this takes a seeded cluster start from ≈15 to ≈10 CPU-seconds. The
# suite is CPU-bound on 2 cores (tests/e2e/NOTES.md) and memory is plentiful; behaviour is unchanged.
GO_RUNTIME_ENV: Mapping[str, str] = {"GOGC": "400", "GOMEMLIMIT": "1536MiB"}
# Cluster seeds (see the module docstring): bump SEED_FORMAT when what a seed holds changes.
SEED_FORMAT = 1
SEED_WEBHOOK_PORT = 1  # in the seeded conversion webhook URLs; each cluster patches in its own
SEED_MAX_AGE = 30 * 24 * 3600.0  # seconds; the certificates last 400 days
SEED_STAMP = "seed.json"  # written last: a seed without it is incomplete
CLUSTER_CREDENTIALS = ("sa.key", "sa.pub", "tokens.csv")  # made per cluster, not kept in a seed
# libyaml's loader parses the 4 MB of CRDs in ~0.3 s instead of ~2.8 s.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Components:
    """The binaries and manifests from build_components.sh (its $CACHE/bin.env)."""

    kube_apiserver: Path
    kube_controller_manager: Path
    etcd: Path
    kueue: Path
    kueue_crd_dir: Path
    kuberay_crd_dir: Path
    provreq_crd_dir: Path
    jobset_crd_dir: Path
    kueue_chart: Path
    webhook_manifests: Path
    versions: Mapping[str, str]
    # The GKE components (ControlPlane(gke=...)); None if bin.env does not list them.
    kube_scheduler: Path | None = None
    kwok: Path | None = None
    kwok_stages_dir: Path | None = None
    kuberay_operator: Path | None = None

    KEYS: ClassVar[tuple[str, ...]] = (
        "KUBE_APISERVER", "KUBE_CONTROLLER_MANAGER", "ETCD", "KUEUE",
        "KUEUE_CRD_DIR", "KUEUE_CHART", "KUBERAY_CRD_DIR", "PROVREQ_CRD_DIR", "JOBSET_CRD_DIR",
    )
    GKE_KEYS: ClassVar[tuple[str, ...]] = ("KUBE_SCHEDULER", "KWOK", "KWOK_STAGES_DIR", "KUBERAY_OPERATOR")

    def require_gke(self) -> None:
        missing = [k for k, v in zip(self.GKE_KEYS, (self.kube_scheduler, self.kwok, self.kwok_stages_dir,
                                                      self.kuberay_operator), strict=True) if v is None]
        if missing:
            raise RuntimeError(f"bin.env lacks {', '.join(missing)}; run {BUILD_SCRIPT} with no arguments")

    @property
    def crd_dirs(self) -> list[Path]:
        """The CRDs the harness installs by default: Kueue's, KubeRay's, the ProvisioningRequest CRD and JobSet's."""
        return [self.kueue_crd_dir, self.kuberay_crd_dir, self.provreq_crd_dir, self.jobset_crd_dir]

    @classmethod
    def from_env_file(cls, path: Path) -> Components:
        env: dict[str, str] = {}
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
        missing = [k for k in cls.KEYS if not env.get(k)]
        if missing:
            raise RuntimeError(f"{path} lacks {', '.join(missing)}; run {BUILD_SCRIPT} with no arguments")
        gone = [f"{k}={env[k]}" for k in (*cls.KEYS, *cls.GKE_KEYS) if env.get(k) and not Path(env[k]).exists()]
        if gone:
            raise FileNotFoundError(f"{path} names paths that do not exist: {', '.join(gone)}; remove them (or "
                                    f"their cache directory) and run {BUILD_SCRIPT} again")
        crd_dir = Path(env["KUEUE_CRD_DIR"])
        return cls(
            kube_apiserver=Path(env["KUBE_APISERVER"]),
            kube_controller_manager=Path(env["KUBE_CONTROLLER_MANAGER"]),
            etcd=Path(env["ETCD"]),
            kueue=Path(env["KUEUE"]),
            kueue_crd_dir=crd_dir,
            kuberay_crd_dir=Path(env["KUBERAY_CRD_DIR"]),
            provreq_crd_dir=Path(env["PROVREQ_CRD_DIR"]),
            jobset_crd_dir=Path(env["JOBSET_CRD_DIR"]),
            kueue_chart=Path(env["KUEUE_CHART"]),
            webhook_manifests=crd_dir.parent / "webhook-manifests.yaml",
            versions={k: v for k, v in env.items() if k.endswith("_VERSION")},
            kube_scheduler=_optional_path(env.get("KUBE_SCHEDULER")),
            kwok=_optional_path(env.get("KWOK")),
            kwok_stages_dir=_optional_path(env.get("KWOK_STAGES_DIR")),
            kuberay_operator=_optional_path(env.get("KUBERAY_OPERATOR")),
        )


def _optional_path(value: str | None) -> Path | None:
    return Path(value) if value else None


@dataclass(frozen=True)
class GkeOptions:
    """How ControlPlane runs the GKE components.

    `kwok_stages`: the KWOK Stage objects (None: gke_sim.kwok_stages() with GKE-like job run time of 10 s);
    `ray_dashboard_proxy`: an http:// URL the KubeRay operator uses as HTTP_PROXY, so its Ray dashboard calls
    (http://<head-svc>.<ns>.svc.cluster.local:8265) reach a fake dashboard (gke_sim.RayDashboard); None: no proxy,
    and RayJobs stay Running because no dashboard answers.
    """

    kwok_stages: Sequence[Mapping[str, Any]] | None = None
    ray_dashboard_proxy: str | None = None


def cache_dir() -> Path:
    return Path(os.environ.get("TPU_FALLBACK_E2E_CACHE") or Path.home() / ".cache" / "tpu-fallback-e2e")


def build_components() -> Components:
    """Run build_components.sh (a no-op of ~10 ms when everything is cached) and read bin.env."""
    proc = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Components.from_env_file(cache_dir() / "bin.env")


def crd_dirs_from_env() -> list[Path] | None:
    """The directories in $TPU_FALLBACK_CRDS, or None if it is unset or empty (then bin.env's are used)."""
    raw = os.environ.get(CRDS_ENV)
    if raw:
        return [Path(p) for p in raw.split(os.pathsep) if p] or None
    return None


def check_crd_dirs(dirs: Sequence[Path], source: str) -> None:
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"CRD directory {d} (from {source}) does not exist")


def required_crds(frameworks: Sequence[str]) -> list[str]:
    """The CRDs the harness cannot do without: Kueue's conversion-webhook CRDs (its cert rotator waits for them),
    the ProvisioningRequest CRD, KubeRay's with the RayJob integration and JobSet's with the JobSet integration."""
    ray = list(RAY_CRDS) if RAYJOB_FRAMEWORK in frameworks else []
    jobset = [JOBSET_CRD] if JOBSET_FRAMEWORK in frameworks else []
    return [*CONVERSION_CRDS, PROVREQ_CRD, *ray, *jobset]


def load_crds(dirs: Sequence[Path]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in *.yaml/*.yml under the directories (recursively, sorted)."""
    crds: list[dict[str, Any]] = []
    for d in dirs:
        if not d.is_dir():
            raise FileNotFoundError(f"CRD directory {d} does not exist")
        files = sorted(p for p in d.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        for f in files:
            for doc in yaml.load_all(f.read_text(), Loader=_YAML_LOADER):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
    if not crds:
        raise FileNotFoundError(f"no CustomResourceDefinition found under {', '.join(map(str, dirs))}")
    return crds


def kueue_webhook_configurations(manifests: str, base_url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfiguration with every service clientConfig turned into a URL.

    Names get the `kueue-` prefix of a real install; failurePolicy, rules and the rest stay as they are, and
    job-type webhooks (not on kueue.x-k8s.io) get the namespaceSelector Kueue's kustomize patch adds.
    """
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(manifests):
        if not isinstance(doc, dict) or doc.get("kind") not in ("MutatingWebhookConfiguration",
                                                                "ValidatingWebhookConfiguration"):
            continue
        conf = copy.deepcopy(doc)
        conf["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        for hook in conf["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if "kueue.x-k8s.io" not in groups:
                hook["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)}]}
        out.append(conf)
    names = sorted(c["metadata"]["name"] for c in out)
    if names != sorted([MUTATING_WEBHOOK, VALIDATING_WEBHOOK]):
        raise RuntimeError(f"unexpected webhook configurations in Kueue's manifests: {names}")
    return out


def with_conversion_webhook(crd: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """The CRD with Kueue's conversion webhook (as Kueue's install patches it), for the CONVERSION_CRDS."""
    out = copy.deepcopy(dict(crd))
    if out["metadata"]["name"] in CONVERSION_CRDS:
        out["spec"]["conversion"] = {
            "strategy": "Webhook",
            "webhook": {"clientConfig": {"url": conversion_url(base_url), "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"]},
        }
    return out


def conversion_url(base_url: str) -> str:
    return f"{base_url}/convert"


def seed_key(comps: Components, crds: Sequence[Mapping[str, Any]]) -> str:
    """Names the seed of these CRDs (their content) under these kube-apiserver and etcd versions."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"format": SEED_FORMAT, "kube": comps.versions.get("KUBE_VERSION"),
                              "etcd": comps.versions.get("ETCD_VERSION")}, sort_keys=True).encode())
    for crd in crds:
        digest.update(json.dumps(crd, sort_keys=True, default=str).encode())
    return f"{comps.versions.get('KUBE_VERSION', 'kube')}-{digest.hexdigest()[:16]}"


def _fresh_seed(path: Path) -> bool:
    try:
        return time.time() - (path / SEED_STAMP).stat().st_mtime < SEED_MAX_AGE
    except OSError:
        return False


def _remove_stale_seeds(root: Path, keep: Path) -> None:
    """Seeds past SEED_MAX_AGE and builds a crash left behind (the caller holds the lock: no build is running)."""
    for path in root.iterdir():
        if path.is_dir() and path != keep and not _fresh_seed(path):
            shutil.rmtree(path, ignore_errors=True)


# Ports for the components' listeners come from below the kernel's ephemeral range: outgoing connections take their
# local ports from that range, so a port found free there could be taken by one (an informer's watch, say) before
# the component binds it; a parallel run saw etcd fail with "bind: address already in use". Each xdist worker draws
# from a slice of its own, and a process never hands out a port twice, not even to two threads at once (MultiKueue's
# two control planes start side by side). Two test runs at once on one machine (a developer's and CI's) share the
# slices: each process starts its scan at a random place in its slice, and a port counts as free only when nothing
# listens on it on any address (the fallback controller's metrics listen on all of them).
PORT_BASE, PORT_SLICE = 10000, 1000
_handed_out: set[int] = set()
_handing_out = threading.Lock()
_SCAN_START = random.randrange(PORT_SLICE)


def free_port() -> int:
    """A localhost TCP port nothing listens on, for a component to bind."""
    low = PORT_BASE + (_worker_index() % 16) * PORT_SLICE
    if low + PORT_SLICE > _ephemeral_start():
        return _kernel_port()  # an unusual ephemeral range: take the kernel's pick
    with _handing_out:
        for step in range(PORT_SLICE):
            port = low + (_SCAN_START + step) % PORT_SLICE
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("", port))
                except OSError:
                    continue  # in use, by another process
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port left in {low}-{low + PORT_SLICE - 1}")


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... under pytest-xdist
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL the child if the Python process dies without running __exit__ (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = STOP_GRACE) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
            self.popen.wait()


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * lines))
            data = f.read().decode(errors="replace")
    except OSError as err:
        return f"(cannot read {path}: {err})"
    return "\n".join(data.splitlines()[-lines:])


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + CRDs + Kueue (with webhooks) on 127.0.0.1; a context manager.

    `crd_dirs`: where the CRDs come from; None means $TPU_FALLBACK_CRDS if set, else the directories
    build_components.sh lists in bin.env (KUEUE_CRD_DIR, KUBERAY_CRD_DIR, PROVREQ_CRD_DIR, JOBSET_CRD_DIR).
    `wait_for_pods_ready`: the Configuration's `waitForPodsReady` block (timeout, blockAdmission,
    requeuingStrategy, ...), e.g. the one a stack's offline plan puts in Kueue's Helm values
    (tests/e2e/fallback_scenarios.py, `kueue_wait_for_pods_ready`); None: Kueue runs without it.

    Attributes after start: `client` (KubeClient with the admin token), `workdir`, `kueue_log`, `server`,
    `ca_file`, `token`, `kubeconfig`, `kueue_config`, `components`, `crd_dirs`, `controller_manager_port`, and
    `timings` (seconds per startup phase).
    """

    def __init__(
        self,
        crd_dirs: Sequence[Path] | None = None,
        *,
        feature_gates: Mapping[str, bool] | None = None,
        frameworks: Sequence[str] = DEFAULT_FRAMEWORKS,
        kueue_log_level: int = 2,
        keep: bool | None = None,
        timeout: float = 120.0,
        gke: bool | GkeOptions = False,
        wait_for_pods_ready: Mapping[str, Any] | None = None,
    ) -> None:
        self.wait_for_pods_ready = copy.deepcopy(dict(wait_for_pods_ready)) if wait_for_pods_ready else None
        self.gke: GkeOptions | None = (GkeOptions() if gke is True else gke) if gke else None
        self._crd_dirs_arg = list(crd_dirs) if crd_dirs is not None else None
        self.crd_dirs: list[Path] = []  # resolved at start
        self._crd_source = ""
        self.feature_gates = {**BASE_FEATURE_GATES,
                              **(DEFAULT_FEATURE_GATES if feature_gates is None else feature_gates)}
        self.frameworks = list(frameworks)
        self.kueue_log_level = kueue_log_level
        self.keep = os.environ.get(KEEP_ENV) == "1" if keep is None else keep
        self.timeout = timeout
        self.timings: dict[str, float] = {}
        self._procs: list[_Process] = []
        self._workdir: Path | None = None
        self._client: KubeClient | None = None
        self.components: Components | None = None
        self.token = secrets.token_hex(16)
        self.server = ""
        self.webhook_port = 0
        self.health_port = 0
        self.controller_manager_port = 0
        self.scheduler_port = 0
        self.kuberay_health_port = 0

    # --- public ----------------------------------------------------------------------------------------------

    @property
    def client(self) -> KubeClient:
        if self._client is None:
            raise RuntimeError("the control plane is not started")
        return self._client

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the control plane is not started")
        return self._workdir

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig.yaml"

    @property
    def kueue_config(self) -> Path:
        return self.workdir / "kueue-config.yaml"

    @property
    def kueue_log(self) -> Path:
        return self.workdir / "kueue.log"

    @property
    def apiserver_log(self) -> Path:
        return self.workdir / "apiserver.log"

    @property
    def etcd_log(self) -> Path:
        return self.workdir / "etcd.log"

    @property
    def controller_manager_log(self) -> Path:
        return self.workdir / "controller-manager.log"

    @property
    def scheduler_log(self) -> Path:
        return self.workdir / "scheduler.log"

    @property
    def kwok_log(self) -> Path:
        return self.workdir / "kwok.log"

    @property
    def kuberay_log(self) -> Path:
        return self.workdir / "kuberay.log"

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start everything; on any failure (KeyboardInterrupt included) stop what was started and re-raise."""
        if self._workdir is not None:
            raise RuntimeError("already started")
        t0 = time.monotonic()
        try:
            self._start()
        except BaseException as err:
            if not isinstance(err, KeyboardInterrupt):
                err.add_note(f"control plane logs ({self._workdir}):\n{self.logs_tail()}")
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0

    def stop(self) -> None:
        """Stop Kueue, the GKE components (KubeRay, KWOK, kube-scheduler), kube-controller-manager, kube-apiserver,
        then etcd (reverse start order); remove the work dir."""
        t0 = time.monotonic()
        interrupted: KeyboardInterrupt | None = None
        for proc in reversed(self._procs):
            try:
                proc.stop()
            except KeyboardInterrupt as err:  # finish the cleanup, then re-raise
                interrupted = err
                proc.stop(grace=0)
        self._procs.clear()
        self._client = None
        if self._workdir is not None:
            if self.keep:
                print(f"[controlplane] kept {self._workdir}", file=sys.stderr)
            else:
                shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self.timings["stop"] = time.monotonic() - t0
        if interrupted is not None:
            raise interrupted

    def logs_tail(self, lines: int = 40) -> str:
        """The last lines of each component's log (Kueue, KubeRay, KWOK, kube-scheduler, kube-controller-manager,
        kube-apiserver, etcd), for failure messages."""
        if self._workdir is None:
            return "(no work dir)"
        parts = []
        for log in (self.kueue_log, self.kuberay_log, self.kwok_log, self.scheduler_log, self.controller_manager_log,
                    self.apiserver_log, self.etcd_log):
            if log.exists():
                parts.append(f"---- {log.name} (last {lines} lines)\n{_tail(log, lines)}")
        return "\n".join(parts) or "(no logs yet)"

    def kueue_running(self) -> bool:
        return any(p.name == "kueue" and p.running() for p in self._procs)

    def pids(self) -> dict[str, int]:
        """The process id of each child still running, by name (etcd, apiserver, controller-manager, kueue, and
        with gke scheduler, kwok, kuberay)."""
        return {p.name: p.popen.pid for p in self._procs if p.running()}

    def usage(self) -> dict[str, ProcessUsage]:
        """CPU seconds (user + system) and resident memory of each child still running, from /proc."""
        out: dict[str, ProcessUsage] = {}
        for name, pid in self.pids().items():
            found = process_usage(pid)
            if found is not None:
                out[name] = found
        return out

    # --- startup ------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        yield
        self.timings[name] = time.monotonic() - t0

    def _resolve_crd_dirs(self, comps: Components) -> None:
        if self._crd_dirs_arg is not None:
            self.crd_dirs, source = self._crd_dirs_arg, "ControlPlane(crd_dirs=...)"
        elif (from_env := crd_dirs_from_env()) is not None:
            self.crd_dirs, source = from_env, f"${CRDS_ENV}"
        else:
            self.crd_dirs, source = comps.crd_dirs, f"{cache_dir() / 'bin.env'}, written by {BUILD_SCRIPT}"
        check_crd_dirs(self.crd_dirs, source)
        self._crd_source = source

    def _start(self) -> None:
        if self._crd_dirs_arg is not None:  # fail before the build if the caller's directories are wrong
            check_crd_dirs(self._crd_dirs_arg, "ControlPlane(crd_dirs=...)")
        with self._phase("build_components"):
            self.components = comps = build_components()
        self._resolve_crd_dirs(comps)
        crds = load_crds(self.crd_dirs)
        self._check_required_crds(crds)
        with self._phase("seed"):
            seed = self._seed(comps, crds)
        self._workdir = Path(tempfile.mkdtemp(prefix="tpu-fallback-e2e-"))
        with self._phase("etcd+certs"):
            shutil.copytree(seed / "etcd-data", self.workdir / "etcd-data")
            etcd_url = self._start_etcd(comps)
            shutil.copytree(seed / "pki", self.pki)
            self._make_cluster_credentials()
            self._wait(lambda: _http_ok(f"{etcd_url}/health", b'"health":"true"'), 30, "etcd /health")
        with self._phase("apiserver"):
            self._start_apiserver(comps, etcd_url)
            self._client = KubeClient(self.server, self.ca_file, self.token)
            self._wait(self._apiserver_ready, self.timeout, "kube-apiserver /readyz")
        with self._phase("controller_manager_start"):  # it gets ready while the CRDs go in
            self._write_kubeconfig()
            self._start_controller_manager(comps)
            if self.gke is not None:
                comps.require_gke()
                self._start_scheduler(comps)
                self._start_kwok(comps, self.gke)
        self.webhook_port, self.health_port = free_port(), free_port()
        base_url = f"https://127.0.0.1:{self.webhook_port}"
        with self._phase("crds"):  # in storage since the seed: served once the API server has loaded them
            self._point_conversion_webhooks(base_url)
            self._wait_crds_served(self.client, crds)
        with self._phase("kueue_objects"):
            self._install_kueue_objects(comps, base_url)
        with self._phase("kueue"):
            if self.gke is not None:  # it needs the Ray CRDs; it gets ready while Kueue starts
                self._start_kuberay(comps, self.gke)
            self._start_kueue(comps)
            self._wait(lambda: _http_ok(f"http://127.0.0.1:{self.health_port}/readyz"), self.timeout,
                       "Kueue /readyz")
        with self._phase("webhooks"):
            self._wait(self._webhooks_answer, self.timeout,
                       "a dry-run ResourceFlavor create through Kueue's webhooks")
        with self._phase("controller_manager"):
            self._wait(self._controller_manager_healthy, self.timeout, "kube-controller-manager /healthz")
            self._wait(lambda: self.client.get("v1", "ServiceAccount", "default", "default") is not None,
                       self.timeout, "the default ServiceAccount (kube-controller-manager's serviceaccount controller)")
        if self.gke is not None:
            with self._phase("gke_components"):
                self._wait(lambda: _http_ok(f"https://127.0.0.1:{self.scheduler_port}/healthz", b"ok",
                                            context=_insecure_context()), self.timeout, "kube-scheduler /healthz")
                self._wait(lambda: _http_ok(f"http://127.0.0.1:{self.kuberay_health_port}/readyz"), self.timeout,
                           "KubeRay operator /readyz")

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> _Process:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     cwd=self.workdir, start_new_session=True, preexec_fn=_die_with_parent,
                                     env={**(os.environ if env is None else env), **GO_RUNTIME_ENV})
        proc = _Process(name, popen, log)
        self._procs.append(proc)
        return proc

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """wait_for, but fail at once if one of the processes exits."""

        def check() -> bool:
            for proc in self._procs:
                if not proc.running():
                    raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode} while waiting for {what}")
            return predicate()

        wait_for(check, timeout, what)

    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(["openssl", *args], cwd=self.pki, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")

    # --- seeds ------------------------------------------------------------------------------------------------

    def _seed(self, comps: Components, crds: Sequence[Mapping[str, Any]]) -> Path:
        """The seed directory for these CRDs and versions (`etcd-data/`, `pki/`), built first if missing or old."""
        key = seed_key(comps, crds)
        root = cache_dir() / "cluster-seeds"
        dest = root / key
        if _fresh_seed(dest):
            return dest
        root.mkdir(parents=True, exist_ok=True)
        with (root / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time (xdist workers share the cache)
            if not _fresh_seed(dest):
                self._build_seed(comps, crds, dest)
                _remove_stale_seeds(root, keep=dest)
        return dest

    def _build_seed(self, comps: Components, crds: Sequence[Mapping[str, Any]], dest: Path) -> None:
        """Certificates, then etcd and kube-apiserver in a temporary directory; the CRDs go in; both stop cleanly,
        and the directory (etcd's data and the certificates, nothing else) is moved to `dest` whole."""
        builder = ControlPlane(crd_dirs=self.crd_dirs, timeout=self.timeout)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=dest.parent))
        builder._workdir = tmp
        try:
            builder.pki.mkdir()
            builder._make_seed_certs()
            builder._make_cluster_credentials()
            url = builder._start_etcd(comps)
            builder._wait(lambda: _http_ok(f"{url}/health", b'"health":"true"'), 30, "etcd /health (seed)")
            builder._start_apiserver(comps, url)
            builder._client = client = KubeClient(builder.server, builder.ca_file, builder.token)
            builder._wait(builder._apiserver_ready, self.timeout, "kube-apiserver /readyz (seed)")
            ca_bundle = base64.b64encode(builder.ca_file.read_bytes()).decode()
            installed = [with_conversion_webhook(c, f"https://127.0.0.1:{SEED_WEBHOOK_PORT}", ca_bundle)
                         for c in crds]
            for crd in installed:
                client.create(crd)
            self._wait_crds_served(client, installed)
            for proc in reversed(builder._procs):
                proc.stop()
                if proc.popen.returncode not in (0, -signal.SIGTERM):
                    raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode} while the seed was saved")
            builder._procs.clear()
            for path in tmp.iterdir():
                if path.name not in ("etcd-data", "pki"):
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            for name in CLUSTER_CREDENTIALS:
                (builder.pki / name).unlink()
            (tmp / SEED_STAMP).write_text(json.dumps({
                "crds": [c["metadata"]["name"] for c in crds], "versions": dict(comps.versions)}, indent=2))
            shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
        except BaseException as err:
            if not isinstance(err, KeyboardInterrupt):
                err.add_note(f"while building the cluster seed {dest}:\n{builder.logs_tail()}")
            for proc in reversed(builder._procs):
                proc.stop(grace=0)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _make_seed_certs(self) -> None:
        """CA, API server and webhook serving certs (kept in the seed: the seeded CRDs' caBundle is this CA)."""
        days = "400"  # beyond the cert rotator's 90-day look-ahead, or it would replace our certs
        # One CA for everything. SAN DNS:kueue-ca because Kueue's rotator verifies the CA against that name.
        # The rotator parses ca.key as PKCS#1 ("BEGIN RSA PRIVATE KEY"), hence -traditional.
        self._openssl("genrsa", "-traditional", "-out", "ca.key", "2048")
        self._openssl("req", "-x509", "-key", "ca.key", "-days", days,
                      "-subj", "/CN=tpu-fallback-e2e-ca", "-out", "ca.crt",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
                      "-addext", "subjectAltName=DNS:kueue-ca")
        self._serving_cert("apiserver", "kube-apiserver", days, [
            "IP:127.0.0.1", "DNS:localhost", "IP:10.0.0.1", "DNS:kubernetes", "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc"])
        self._serving_cert("webhook", f"{WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc", days, [
            f"DNS:{WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc", "IP:127.0.0.1", "DNS:localhost"])

    def _make_cluster_credentials(self) -> None:
        """This cluster's own: the service-account key pair, the admin token file, the webhook cert dir."""
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        (self.pki / "tokens.csv").write_text(f'{self.token},e2e-admin,e2e-admin,"system:masters"\n')
        # controller-runtime's webhook server reads tls.crt/tls.key from its cert dir.
        certs = self.workdir / "webhook-certs"
        certs.mkdir()
        shutil.copy(self.pki / "webhook.crt", certs / "tls.crt")
        shutil.copy(self.pki / "webhook.key", certs / "tls.key")
        shutil.copy(self.pki / "ca.crt", certs / "ca.crt")

    def _serving_cert(self, name: str, cn: str, days: str, sans: list[str]) -> None:
        self._openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
                      "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (self.pki / f"{name}.ext").write_text(
            f"subjectAltName={','.join(sans)}\nextendedKeyUsage=serverAuth\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n")
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-CAcreateserial", "-days", days, "-extfile", f"{name}.ext", "-out", f"{name}.crt")

    def _start_etcd(self, comps: Components) -> str:
        client_port, peer_port = free_port(), free_port()
        url, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        self._spawn("etcd", [
            str(comps.etcd), "--name", "e2e", "--data-dir", str(self.workdir / "etcd-data"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"e2e={peer}", "--initial-cluster-state", "new",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        return url

    def _start_apiserver(self, comps: Components, etcd_url: str) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        pki = self.pki
        self._spawn("apiserver", [
            str(comps.kube_apiserver),
            "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1",
            "--advertise-address", "127.0.0.1",
            "--endpoint-reconciler-type", "none",
            "--secure-port", str(port),
            "--cert-dir", str(self.workdir / "apiserver-certs"),
            "--tls-cert-file", str(pki / "apiserver.crt"),
            "--tls-private-key-file", str(pki / "apiserver.key"),
            "--client-ca-file", str(pki / "ca.crt"),
            "--token-auth-file", str(pki / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-signing-key-file", str(pki / "sa.key"),
            "--service-account-key-file", str(pki / "sa.pub"),
        ])

    def _write_kubeconfig(self) -> None:
        """The admin kubeconfig that Kueue and kube-controller-manager use."""
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": self.server,
                                                     "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "e2e-admin", "user": {"token": self.token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e-admin"}}],
        }))

    def _start_controller_manager(self, comps: Components) -> None:
        """kube-controller-manager with CONTROLLERS only, no leader election, serving /healthz on 127.0.0.1.

        The serviceaccount-token controller signs with sa.key, the key the API server signs its own tokens with
        (--service-account-signing-key-file) and verifies them with (its public half, --service-account-key-file);
        --root-ca-file is the CA of the API server's serving certificate, put into each token Secret as ca.crt.
        """
        self.controller_manager_port = free_port()
        pki = self.pki
        self._spawn("controller-manager", [
            str(comps.kube_controller_manager),
            "--kubeconfig", str(self.kubeconfig),
            "--controllers", ",".join((*CONTROLLERS, *(GKE_CONTROLLERS if self.gke is not None else ()))),
            "--leader-elect=false",
            "--bind-address", "127.0.0.1",
            "--secure-port", str(self.controller_manager_port),
            "--cert-dir", str(self.workdir / "controller-manager-certs"),
            "--service-account-private-key-file", str(pki / "sa.key"),
            "--root-ca-file", str(pki / "ca.crt"),
            "--use-service-account-credentials=false",
        ])

    def _controller_manager_healthy(self) -> bool:
        # Its serving certificate is self-signed (in --cert-dir); /healthz needs no authentication.
        return _http_ok(f"https://127.0.0.1:{self.controller_manager_port}/healthz", b"ok",
                        context=_insecure_context())

    def _start_scheduler(self, comps: Components) -> None:
        """kube-scheduler with its default profile, no leader election, serving /healthz on 127.0.0.1.

        Its retry back-off for pods that did not fit is cut from 1-10 s to 1 s: the back-off runs in real seconds,
        while the sim's scale-ups take 1-3 real seconds (0.01 of GKE's minutes). With the default, a pod that failed
        four times before its nodes came waited up to 10 s more, and a plan A job came up no earlier than a later
        plan B job.
        On GKE the 10 s cap is small beside a minutes-long scale-up; 1 s keeps that proportion closer."""
        assert comps.kube_scheduler is not None
        self.scheduler_port = free_port()
        config = self.workdir / "scheduler-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            # With --config the scheduler ignores --kubeconfig (cmd/kube-scheduler/app/options: ApplyTo).
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "podInitialBackoffSeconds": 1,  # the least its validation allows (> 0)
            "podMaxBackoffSeconds": 1,
        }))
        self._spawn("scheduler", [
            str(comps.kube_scheduler),
            "--config", str(config),
            "--bind-address", "127.0.0.1",
            "--secure-port", str(self.scheduler_port),
            "--cert-dir", str(self.workdir / "scheduler-certs"),
        ])

    def _start_kwok(self, comps: Components, gke: GkeOptions) -> None:
        """The KWOK controller for the nodes annotated kwok.x-k8s.io/node=fake, with the given Stages only."""
        assert comps.kwok is not None and comps.kwok_stages_dir is not None
        stages = gke.kwok_stages
        if stages is None:
            from tests.e2e.gke_sim import kwok_stages

            stages = kwok_stages(10.0, comps.kwok_stages_dir)
        config = self.workdir / "kwok-stages.yaml"
        config.write_text(yaml.safe_dump_all([dict(s) for s in stages], sort_keys=False))
        self._spawn("kwok", [
            str(comps.kwok),
            "--kubeconfig", str(self.kubeconfig),
            "--config", str(config),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", KWOK_NODE_SELECTOR,
            "--cidr", KWOK_POD_CIDR,
            # The kwok binary's default is 0, no node Leases (only kwokctl sets 40: v1alpha1 zz_generated.defaults.go
            # in sigs.k8s.io/kwok v0.8.0). Without Leases every node's heartbeat lapses ~50 s after it comes up and
            # kube-controller-manager marks its pods Ready=False for good (the sim reports that as an error).
            "--node-lease-duration-seconds", "40",
        ])

    def _start_kuberay(self, comps: Components, gke: GkeOptions) -> None:
        """The KubeRay operator (no webhooks, no leader election, metrics off), with HTTP_PROXY set to the fake
        Ray dashboard if there is one (it reaches Ray head services by their cluster DNS names, which do not
        resolve here)."""
        assert comps.kuberay_operator is not None
        self.kuberay_health_port = free_port()
        env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        if gke.ray_dashboard_proxy:
            env.update(HTTP_PROXY=gke.ray_dashboard_proxy, http_proxy=gke.ray_dashboard_proxy,
                       NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        self._spawn("kuberay", [
            str(comps.kuberay_operator),
            "--metrics-addr", "0",
            "--health-probe-bind-address", f"127.0.0.1:{self.kuberay_health_port}",
            "--enable-leader-election=false",
        ], env=env)

    def _apiserver_ready(self) -> bool:
        try:
            return bool(self.client.request("GET", "/readyz", timeout=5) == "ok")
        except KubeError:
            return False

    def _check_required_crds(self, loaded: list[dict[str, Any]]) -> None:
        names = {c["metadata"]["name"] for c in loaded}
        missing = [n for n in required_crds(self.frameworks) if n not in names]
        if missing:
            # Without the conversion-webhook CRDs Kueue's cert rotator would wait forever to inject its CA.
            raise FileNotFoundError(
                f"these CRDs are missing from {', '.join(map(str, self.crd_dirs))} (from {self._crd_source}): "
                f"{', '.join(missing)}; unset {CRDS_ENV} to use the ones build_components.sh copies from the "
                "Go modules of Kueue, KubeRay, cluster-autoscaler and JobSet")

    @staticmethod
    def _wait_crds_served(client: KubeClient, crds: Sequence[Mapping[str, Any]]) -> None:
        def established(crd: Mapping[str, Any]) -> bool:
            got = client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"])
            conds = (got or {}).get("status", {}).get("conditions", [])
            return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

        for crd in crds:
            wait_for(functools.partial(established, crd), 60, f"CRD {crd['metadata']['name']} Established")
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    gv = f"{group}/{version['name']}"
                    wait_for(functools.partial(client.serves, gv, kind), 60, f"discovery of {kind} in {gv}")

    def _point_conversion_webhooks(self, base_url: str) -> None:
        """Each CRD of CONVERSION_CRDS gets its conversion webhook URL (the seed's names SEED_WEBHOOK_PORT)."""
        client = self.client
        res = client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        patch = {"spec": {"conversion": {"webhook": {"clientConfig": {"url": conversion_url(base_url)}}}}}
        for name in CONVERSION_CRDS:
            client.request("PATCH", res.path(name), patch, content_type="application/merge-patch+json")

    def _install_kueue_objects(self, comps: Components, base_url: str) -> None:
        client = self.client
        client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
        ca_bundle = base64.b64encode(self.ca_file.read_bytes()).decode()
        pki = self.pki
        data = {"ca.crt": pki / "ca.crt", "ca.key": pki / "ca.key",
                "tls.crt": pki / "webhook.crt", "tls.key": pki / "webhook.key"}
        client.apply({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": WEBHOOK_SECRET, "namespace": KUEUE_NAMESPACE},
            "data": {k: base64.b64encode(p.read_bytes()).decode() for k, p in data.items()},
        })
        if not comps.webhook_manifests.is_file():
            raise FileNotFoundError(f"{comps.webhook_manifests} missing; remove {comps.kueue_crd_dir} and run "
                                    f"{BUILD_SCRIPT} to copy Kueue's manifests again")
        for conf in kueue_webhook_configurations(comps.webhook_manifests.read_text(), base_url, ca_bundle):
            client.apply(conf)
        self.kueue_config.write_text(yaml.safe_dump(self.kueue_configuration(), sort_keys=False))

    def kueue_configuration(self) -> dict[str, Any]:
        """The Configuration file Kueue runs with (gates in the file: Kueue refuses them in both places)."""
        config: dict[str, Any] = {
            "apiVersion": KUEUE_CONFIG_API,
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port,
                        "certDir": str(self.workdir / "webhook-certs")},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE,
                                       "webhookSecretName": WEBHOOK_SECRET},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(self.frameworks)},
            "featureGates": dict(self.feature_gates),
        }
        if self.wait_for_pods_ready is not None:
            config["waitForPodsReady"] = copy.deepcopy(self.wait_for_pods_ready)
        return config

    def _start_kueue(self, comps: Components) -> None:
        self._spawn("kueue", [
            str(comps.kueue), "--config", str(self.kueue_config), "--kubeconfig", str(self.kubeconfig),
            f"--zap-log-level={self.kueue_log_level}",
        ])

    def _webhooks_answer(self) -> bool:
        try:
            self.client.create(readiness_probe_flavor(), dry_run=True)
        except KubeError:
            return False
        return True


def _insecure_context() -> ssl.SSLContext:
    """For the self-signed serving certificates of kube-controller-manager and kube-scheduler (/healthz only)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@dataclass(frozen=True)
class ProcessUsage:
    cpu_seconds: float  # user + system, since the process started
    rss_bytes: int  # resident memory now
    peak_rss_bytes: int  # the high-water mark (VmHWM)


def process_usage(pid: int) -> ProcessUsage | None:
    """CPU time and memory of a process from /proc (Linux), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of proc(5))
    mem = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in status.splitlines()
           if line.startswith(("VmRSS:", "VmHWM:"))}
    return ProcessUsage(cpu, mem.get("VmRSS", 0), mem.get("VmHWM", 0))


def _http_ok(url: str, expect: bytes | None = None, *, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            body: bytes = resp.read()
    except (urllib.error.URLError, OSError):
        return False
    return expect is None or expect in body


def dump(obj: Any) -> str:
    """Pretty JSON of an object, for assertion messages."""
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
