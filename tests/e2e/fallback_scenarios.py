"""Issue 13 on the simulated GKE: fall back on a real stock-out, not only on quota.

Kueue falls back from plan A (the on-demand flavor) to plan B (dws) when plan A's *quota* is used up. A stock-out
(plan A's pool cannot get VMs) leaves the job admitted on plan A with pods that never start. The project's answer
is Kueue's own `waitForPodsReady` (evict and requeue a job whose pods have not started) plus the fallback
controller (`python -m tpu_fallback.fallback`), which taints plan A's ResourceFlavors during a stock-out so the
requeued job and new ones go to plan B, reopens plan A after a cool-down, and moves a job still waiting for DWS
capacity back to plan A once plan A has room.

This module runs that on the simulated GKE (gke_sim.py) with what the stack's offline plan ships:

- Kueue runs with the `waitForPodsReady` block of the plan's Kueue Helm values (`kueue_wait_for_pods_ready`,
  passed to `ControlPlane(wait_for_pods_ready=...)`), so its timeout and requeuing are the project's.
- The controller runs as a subprocess against the control plane's kubeconfig (`Controller`: start, stop with
  SIGTERM, kill with SIGKILL, restart), with the `config.json` of the plan's ConfigMap
  `kueue-system/tpu-fallback-controller` (`controller_config`).
- `FallbackWatch` (a gke_scenarios.Watch) also follows every Workload of each RayJob (how many, which flavors they
  reserved, their evictions), the taints on the ResourceFlavors over time, and the submitter pods that succeeded.

The scenarios (`run_*`) return a gke_scenarios.Outcome; tests/e2e/test_stockout_fallback_e2e.py and
test_stockout_moves_e2e.py assert on it, test_stockout_evidence_e2e.py for issue 26's evidence scenarios (GKE's
Events never seen, a job that is scheduled but never Ready, a slow start on plan B, an admin's taint, a probe after
the cool-down, the controller removed or restarted), tests/e2e/benchmark_fallback.py prints figures. Kueue,
KubeRay and the controller run in real time, so the controller's times (stockoutAfter, coolDown, ...) are real
seconds: the stack overrides below keep them short.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.e2e import gke_scenarios as gs
from tests.e2e import scenario
from tests.e2e.gke_sim import POOL_LABEL, GkeSim, Timings, pools_from_plan, with_run_time, with_workers_ready_after
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import ProgramRun
from tpu_fallback.render.fallback import MOUNT

T = TypeVar("T")
KUEUE_API = scenario.KUEUE_API
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
CONTROLLER_NAMESPACE = "kueue-system"
CONTROLLER_NAME = "tpu-fallback-controller"  # its ServiceAccount, ClusterRole and binding too
CONTROLLER_CONFIG_KEY = "config.json"
# The controller's Events and annotations (tpu_fallback/fallback).
STOCKOUT_EVENT = "PlanAStockOut"
REOPENED_EVENT = "PlanAReopened"
MOVED_EVENT = "MovedToPlanA"
FALLBACK_EVENTS = (STOCKOUT_EVENT, REOPENED_EVENT, MOVED_EVENT)
MOVING_ANNOTATION = "tpu-fallback.dev/moving-to-plan-a"
EVICTING_ANNOTATION = "tpu-fallback.dev/evicted-from-plan-a"
DEFAULT_TAINT_KEY = "tpu-fallback.dev/plan-a-stockout"
PLAN_A_POOL = gs.PLAN_A_POOL  # on-demand-pool (dev stack)
PLAN_B_POOL = gs.PLAN_B_POOL  # dws-pool

# Real seconds (Kueue and the controller run on the wall clock). stockoutAfter must stay well above what a healthy
# start takes here (a 1.8 s scale-up or a DWS booking, then KubeRay creating the pods: seconds, but more with three
# clusters busy on 2 cores), since Kueue's PodsReady timeout (stockoutAfter + 15 s) applies to every admitted job:
# with 15 s, a plan B job once missed it in a parallel run and was requeued.
FALLBACK_SETTINGS: Mapping[str, Any] = {"enabled": True, "stockoutAfter": "20s", "coolDown": "45s",
                                        "pollInterval": "1s", "requeueBackoff": "1s"}
FALLBACK = gs.Stack("dev", {"fallback": dict(FALLBACK_SETTINGS)})
NO_FALLBACK = gs.Stack("dev", {"fallback": {"enabled": False}})  # the tutorial's setup
# gke_scenarios' timings, but idle nodes stay 6 s real (GKE: 10 min) so the controller, polling every second, sees
# plan A's Ready nodes after a job there finished (a move back needs capacity it can see).
TIMINGS = replace(gs.TIMINGS, scale_down_unneeded=600)
# What the bounds allow on top of the configured times: Kueue's admission, KubeRay creating the RayCluster and its
# pods after the unsuspend (its requeues are 3 s), the sim's and the watch's polls. Real seconds.
CONTROLLER_LATENCY = 15.0


# --- what the plan ships -----------------------------------------------------------------------------------------


def controller_config(infra: ProgramRun) -> dict[str, Any]:
    """The controller's configuration: `config.json` of the ConfigMap its Deployment mounts."""
    files, _ = controller_bundle(infra)
    config: dict[str, Any] = json.loads(files[CONTROLLER_CONFIG_KEY])
    return config


def kueue_manager_config(infra: ProgramRun) -> dict[str, Any] | None:
    """Kueue's Configuration as the plan's Helm release sets it (managerConfig.controllerManagerConfigYaml), or
    None when the release leaves the chart's default."""
    (release,) = infra.of_type(HELM_RELEASE_TYPE)
    raw = ((release.inputs.get("values") or {}).get("managerConfig") or {}).get("controllerManagerConfigYaml")
    if not raw:
        return None
    config: dict[str, Any] = yaml.safe_load(raw)
    return config


def kueue_wait_for_pods_ready(infra: ProgramRun) -> dict[str, Any] | None:
    """The `waitForPodsReady` block of the plan's Kueue Configuration (None without one)."""
    block = (kueue_manager_config(infra) or {}).get("waitForPodsReady")
    return copy.deepcopy(block) if block else None


def parse_duration(value: str | float | int) -> float:
    """A Go duration ("1m30s", "45s", "1.5h", "300ms") or a number of seconds, in seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total, number, text = 0.0, "", value.strip()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = next((u for u in ("ms", "us", "µs", "ns", "h", "m", "s") if text.startswith(u, i)), None)
        if unit is None or not number:
            raise ValueError(f"not a Go duration: {value!r}")
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    if number:
        if total == 0:
            return float(number)
        raise ValueError(f"not a Go duration: {value!r}")
    return total


@dataclass(frozen=True)
class Bounds:
    """The fallback's times in real seconds, from the controller's config and Kueue's waitForPodsReady."""

    stockout_after: float
    cool_down: float
    poll: float
    pods_ready_timeout: float
    backoff_base: float
    dws_provision: float  # the sim's provisioning delay, real seconds

    @classmethod
    def of(cls, config: Mapping[str, Any], wait_for_pods_ready: Mapping[str, Any], sim_timings: Timings,
           real_per_sim: float) -> Bounds:
        strategy = wait_for_pods_ready.get("requeuingStrategy") or {}
        return cls(
            stockout_after=float(config["stockoutAfterSeconds"]),
            cool_down=float(config["coolDownSeconds"]),
            poll=float(config["pollIntervalSeconds"]),
            pods_ready_timeout=parse_duration(wait_for_pods_ready["timeout"]),
            backoff_base=float(strategy.get("backoffBaseSeconds", 60)),  # Kueue's default
            dws_provision=sim_timings.dws_provision * real_per_sim,
        )

    def to_plan_b(self) -> float:
        """Submission of a job stuck on plan A to all its pods Running on plan B without GKE's Event (the backstop):
        the controller closes plan A and evicts the job at stockoutAfter, Kueue requeues it at once (a
        reactivated Workload has no backoff), then DWS provisioning and the controllers' latency. Kueue's own
        PodsReady timeout (30 min) plays no part."""
        return self.stockout_after + self.dws_provision + self.poll + CONTROLLER_LATENCY

    def backstop_to_plan_b(self) -> float:
        """Submission of a job stuck on plan A to all its pods Running on plan B when GKE's Events are never seen:
        stockoutAfter after its admission, the controller's next poll closes plan A and evicts it, Kueue requeues it
        (at most its back-off base), DWS provisions, and the controllers' latency."""
        return self.stockout_after + self.poll + self.backoff_base + self.dws_provision + CONTROLLER_LATENCY

    def after_signal(self) -> float:
        """GKE's FailedScaleUp Event to all the job's pods Running on plan B: the controller's poll, DWS
        provisioning and the latency (the issue's "FailedScaleUp + 15 s", plus the simulated DWS's delay)."""
        return self.poll + self.dws_provision + CONTROLLER_LATENCY

    def describe(self) -> str:
        return (f"stockoutAfter {self.stockout_after:g} s + DWS {self.dws_provision:g} s + poll {self.poll:g} s + "
                f"latency {CONTROLLER_LATENCY:g} s = {self.to_plan_b():g} s; after GKE's FailedScaleUp "
                f"{self.after_signal():g} s")


# --- the controller as a process ---------------------------------------------------------------------------------


class ControllerExitedError(AssertionError):
    """The fallback controller exited while the scenario expected it to run."""


def controller_bundle(infra: ProgramRun) -> tuple[dict[str, str], dict[str, Any]]:
    """What the controller's pod runs, as shipped: the files its Deployment mounts from the ConfigMap (path under
    the mount -> text, config.json included) and its container (command, env)."""
    objects = infra.kubernetes_objects()
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == CONTROLLER_NAME]
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    (configmap,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume[
        "configMap"]["name"] and o["metadata"]["namespace"] == CONTROLLER_NAMESPACE]
    files = {item["path"]: configmap["data"][item["key"]] for item in volume["configMap"]["items"]}
    (container,) = pod["containers"]
    return files, container


@functools.cache
def image_python() -> str:
    """A plain interpreter (no venv) of the controller image's Python version, as on the machine: on PATH, or a
    pyenv build. None found: the base interpreter of this venv, said in the controller's log."""
    from tpu_fallback.model.settings import FALLBACK_IMAGE_PYTHON

    name = f"python{FALLBACK_IMAGE_PYTHON}"
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    builds = sorted(str(p) for p in root.glob(f"versions/{FALLBACK_IMAGE_PYTHON}.*/bin/{name}"))
    candidates = [shutil.which(name), *builds]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return str(Path(sys.base_prefix) / "bin" / "python3")


class Controller:
    """The controller's pod as a subprocess: exactly the files its ConfigMap ships (written under
    `<workdir>/<name>/`, as the pod mounts them), run by a plain interpreter of the image's Python version with
    `-S` (no site-packages: the distroless image has none) and the container's own command and env; its output
    in `<workdir>/<name>.log` (each start appends a marker line).

    The config is the plan's, except `metricsPort`: a free port of 127.0.0.1 instead of the pod's 9090 (the
    process runs on the test machine, where 9090 may be taken); `metrics()` reads its /metrics there. Outside a
    pod it reads the cluster through `--kubeconfig` (the plan's ServiceAccount's token)."""

    def __init__(self, bundle: tuple[dict[str, str], dict[str, Any]] | None, kubeconfig: Path, workdir: Path,
                 python: str | None = None, name: str = "fallback-controller") -> None:
        files, container = bundle or ({CONTROLLER_CONFIG_KEY: "{}"}, {"command": [], "env": []})
        self.files = dict(files)
        self.container = container
        self.config: dict[str, Any] = json.loads(files[CONTROLLER_CONFIG_KEY])
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.python = python or image_python()
        self.mount = workdir / name
        self.config_file = self.mount / CONTROLLER_CONFIG_KEY
        self.log = workdir / f"{name}.log"
        self._popen: subprocess.Popen[bytes] | None = None
        self.starts: list[float] = []  # time.monotonic() of each start
        self.exits: list[int] = []  # return code of each stop or kill
        self.metrics_port: int | None = None

    def _in_mount(self, value: str) -> str:
        return value.replace(MOUNT, str(self.mount))

    @property
    def argv(self) -> list[str]:
        command = [self._in_mount(arg) for arg in self.container["command"]]
        if command[:1] != ["python3"]:
            raise AssertionError(f"the controller's command does not start with python3: {command}")
        return [self.python, "-S", *command[1:], "--kubeconfig", str(self.kubeconfig)]

    def _env(self) -> dict[str, str]:
        env = {e["name"]: self._in_mount(e["value"]) for e in self.container["env"] if "value" in e}
        # The downward API's pod name (the Lease's holder): this process's name stands for it, so a restart of the
        # same Controller is the same pod's container restarted (it takes its lease back at once).
        env.update({e["name"]: self.mount.name for e in self.container["env"]
                    if (e.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "metadata.name"})
        return {**env, "PATH": "/usr/bin:/bin", "HOME": str(self.mount)}

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def start(self) -> None:
        if self.running():
            raise RuntimeError("the fallback controller is already running")
        config = dict(self.config)
        if config.get("metricsPort"):
            from tests.e2e.controlplane import free_port

            self.metrics_port = config["metricsPort"] = free_port()
        for path, text in self.files.items():
            target = self.mount / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.config_file.write_text(json.dumps(config, indent=2))
        with self.log.open("ab") as out:
            out.write(f"---- start {len(self.starts) + 1} at {time.strftime('%H:%M:%S')}: "
                      f"{' '.join(self.argv)}\n".encode())
            out.flush()
            self._popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                           cwd=self.mount, env=self._env(), start_new_session=True,
                                           preexec_fn=_die_with_parent)
        self.starts.append(time.monotonic())

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def check(self) -> None:
        """Raise ControllerExitedError (with the log's tail) if it was started and has exited on its own."""
        if self._popen is not None and self._popen.poll() is not None:
            code = self._popen.returncode
            self._popen = None
            self.exits.append(code)
            raise ControllerExitedError(f"the fallback controller exited with {code}:\n{self.tail()}")

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace` seconds; the return code (None if it was not running)."""
        return self._end(signal.SIGTERM, grace)

    def kill(self) -> int | None:
        """SIGKILL at once: a crash, or the pod deleted without a grace period."""
        return self._end(signal.SIGKILL, 10.0)

    def restart(self, *, kill: bool = True) -> None:
        (self.kill if kill else self.stop)()
        self.start()

    def _end(self, sig: signal.Signals, grace: float) -> int | None:
        popen, self._popen = self._popen, None
        if popen is None:
            return None
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(sig)
            try:
                popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
                popen.wait()
        self.exits.append(popen.returncode)
        return popen.returncode

    def metrics(self) -> dict[str, float]:
        """The controller's /metrics (Prometheus text) as name -> value; {} if it does not answer."""
        if self.metrics_port is None:
            return {}
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as resp:
                text = resp.read().decode()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and " " in line:
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def lines(self) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def tail(self, count: int = 40) -> str:
        return "\n".join(self.lines()[-count:]) or "(no output)"

    def __enter__(self) -> Controller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    from tests.e2e.controlplane import _die_with_parent as die

    die()


# --- following Workloads, taints and events ----------------------------------------------------------------------


@dataclass
class WorkloadTrack:
    """Everything seen of the Workloads of one RayJob."""

    uids: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    reservations: list[tuple[float, str]] = field(default_factory=list)  # (time, TPU flavor) at each change
    evictions: dict[str, int] = field(default_factory=dict)  # reason -> count (status.schedulingStats)
    deactivated_at: float | None = None  # first seen with spec.active false
    annotations: dict[str, str] = field(default_factory=dict)
    last: dict[str, Any] = field(default_factory=dict)  # the Workload at the last poll
    succeeded_submitters: set[str] = field(default_factory=set)  # submitter pods seen Succeeded
    released: bool = False  # no quota reserved at the last poll
    releases: list[float] = field(default_factory=list)  # times a reservation was seen gone (eviction, deactivation)
    admitted_at: list[float] = field(default_factory=list)  # Kueue's Admitted lastTransitionTime (unix s) of each
    conditions_seen: set[tuple[str, str, str]] = field(default_factory=set)  # (type, status, reason) ever seen

    def flavors_reserved(self) -> list[str]:
        return [flavor for _t, flavor in self.reservations]


class FallbackWatch(gs.Watch):
    """gke_scenarios.Watch plus the Workloads of each job, the plan A flavors' taints over time and the controller
    (its exit fails the wait at once; a timeout's message has its log)."""

    def __init__(self, client: KubeClient, sim: GkeSim, controller: Controller, config: Mapping[str, Any]) -> None:
        super().__init__(client, sim)
        self.controller = controller
        # Without the fallback (no config): the dev stack's flavors, and the taint the controller would set.
        self.plan_a = tuple(config.get("planAFlavors", ("on-demand",)))
        self.plan_b = tuple(config.get("planBFlavors", ("dws",)))
        self.taint_key = str(config.get("taintKey", DEFAULT_TAINT_KEY))
        self.tracks: dict[str, WorkloadTrack] = {}
        # flavor -> [(time, taint value or None)] at each change, starting with the first poll's state.
        self.taints: dict[str, list[tuple[float, str | None]]] = {}
        # flavor -> [(time, its whole spec.nodeTaints)] at each change (anyone's taints, not only the controller's).
        self.flavor_taints: dict[str, list[tuple[float, list[dict[str, Any]]]]] = {}

    def track(self, record: gs.JobRecord) -> WorkloadTrack:
        return self.tracks.setdefault(record.key, WorkloadTrack())

    def poll(self) -> None:
        super().poll()
        now = self.now()
        for flavor in self.cache.items(KUEUE_API, "ResourceFlavor"):
            name = flavor["metadata"]["name"]
            value = next((str(t.get("value", "")) for t in (flavor.get("spec") or {}).get("nodeTaints") or []
                          if t.get("key") == self.taint_key), None)
            history = self.taints.setdefault(name, [])
            if not history or history[-1][1] != value:
                history.append((now, value))
            taints = copy.deepcopy(list((flavor.get("spec") or {}).get("nodeTaints") or []))
            every = self.flavor_taints.setdefault(name, [])
            if not every or every[-1][1] != taints:
                every.append((now, taints))
        for namespace in sorted({r.namespace for r in self.jobs.values()}):
            self._poll_workloads(namespace, now)

    def _poll_workloads(self, namespace: str, now: float) -> None:
        owned: dict[str, list[dict[str, Any]]] = {}
        listed = self.listed(namespace)  # what super().poll() just listed
        for wl in listed.workloads:
            for owner in wl["metadata"].get("ownerReferences", []):
                if owner["kind"] == "RayJob":
                    owned.setdefault(owner["name"], []).append(wl)
        submitters: dict[str, set[str]] = {}
        for pod in listed.pods:
            job = (pod["metadata"].get("labels") or {}).get("job-name")
            if job and (pod.get("status") or {}).get("phase") == "Succeeded":
                submitters.setdefault(job, set()).add(pod["metadata"]["name"])
        for record in [r for r in self.jobs.values() if r.namespace == namespace]:
            track = self.track(record)
            track.succeeded_submitters |= submitters.get(record.name, set())
            for wl in owned.get(record.name, []):
                meta = wl["metadata"]
                track.uids.add(meta["uid"])
                track.names.add(meta["name"])
                track.last = wl
                track.annotations = dict(meta.get("annotations") or {})
                if wl["spec"].get("active") is False and track.deactivated_at is None:
                    track.deactivated_at = now
                stats = ((wl.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
                evictions: dict[str, int] = {}
                for e in stats:  # one entry per reason and underlyingCause
                    evictions[str(e.get("reason"))] = evictions.get(str(e.get("reason")), 0) + int(e.get("count", 0))
                track.evictions = evictions
                for cond in (wl.get("status") or {}).get("conditions") or []:
                    track.conditions_seen.add((str(cond.get("type")), str(cond.get("status")),
                                               str(cond.get("reason"))))
                    if cond.get("type") == "Admitted" and cond.get("status") == "True":
                        stamp = _unix(cond.get("lastTransitionTime"))
                        if stamp is not None and stamp not in track.admitted_at:
                            track.admitted_at.append(stamp)
                reserved = scenario.condition_status(wl, "QuotaReserved") == "True"
                flavor = tpu_flavor(wl) if reserved else None
                # A new reservation: another flavor, or the same one again after an eviction or a deactivation.
                if flavor and (track.released or not track.reservations or track.reservations[-1][1] != flavor):
                    track.reservations.append((now, flavor))
                if track.reservations and not reserved and not track.released:
                    track.releases.append(now)
                track.released = not reserved

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.3) -> T:
        def checked() -> T | None:
            self.controller.check()
            return predicate()

        try:
            return super().wait(checked, timeout, what, interval)
        except TimeoutError as err:
            err.add_note(f"fallback controller log (last lines):\n{self.controller.tail()}\n"
                         f"plan A taints: {self.taints}\nworkloads:\n{self.describe_workloads()}")
            raise

    def describe_workloads(self) -> str:
        lines = []
        for key, track in self.tracks.items():
            wl = track.last
            status = wl.get("status") or {}
            conditions = [f"{c['type']}={c['status']} ({c.get('reason')}: {c.get('message', '')[:120]})"
                          for c in status.get("conditions", [])]
            checks = [f"{c['name']}={c['state']}" for c in status.get("admissionChecks", [])]
            lines.append(f"  {key}: {sorted(track.names)} active={wl.get('spec', {}).get('active')} reserved "
                         f"{track.flavors_reserved()} evictions={track.evictions} annotations="
                         f"{ {k: v for k, v in track.annotations.items() if 'tpu-fallback' in k} } "
                         f"checks={checks}; {'; '.join(conditions)}")
        return "\n".join(lines) or "  (none)"

    def plan_a_taint_changes(self) -> dict[str, list[tuple[float, str | None]]]:
        """Per plan A flavor, its taint's value at each change (None: untainted)."""
        return {f: list(self.taints.get(f, [])) for f in self.plan_a}

    def tainted_since(self) -> float | None:
        """The watch's time at which the first plan A flavor was seen tainted, if it is now."""
        times = [h[-1][0] for f, h in self.taints.items() if f in self.plan_a and h and h[-1][1] is not None]
        return min(times) if times else None

    def tainted_at_first(self) -> float | None:
        """The watch's time at which a plan A flavor was first seen tainted."""
        times = [t for f, h in self.taints.items() if f in self.plan_a for t, value in h if value is not None]
        return min(times) if times else None

    def tainted(self) -> bool:
        return any(h and h[-1][1] is not None for f, h in self.taints.items() if f in self.plan_a)


def _unix(stamp: str | None) -> float | None:
    """An RFC 3339 time of the API (whole seconds) as unix seconds."""
    if not stamp:
        return None
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def tpu_flavor(workload: Mapping[str, Any]) -> str | None:
    """The flavor of the Workload's TPU PodSet (gke_scenarios.TPU_GROUP), if it has one."""
    for assignment in (workload.get("status") or {}).get("admission", {}).get("podSetAssignments", []):
        if assignment.get("name") == gs.TPU_GROUP:
            flavors = set((assignment.get("flavors") or {}).values())
            return ",".join(sorted(flavors)) or None
    return None


def fallback_events(client: KubeClient, reason: str | None = None) -> list[dict[str, Any]]:
    """The controller's Events (every namespace), oldest first; one reason or all of FALLBACK_EVENTS."""
    reasons = (reason,) if reason else FALLBACK_EVENTS
    found = [e for e in client.list("v1", "Event") if e.get("reason") in reasons]
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def event_count(events: Sequence[Mapping[str, Any]], kind: str | None = None, name: str | None = None) -> int:
    """Occurrences (an aggregated Event with count > 1 counts as many), on objects of `kind` / `name` if given."""
    return sum(int(e.get("count") or 1) for e in events
               if (kind is None or e["involvedObject"].get("kind") == kind)
               and (name is None or e["involvedObject"].get("name") == name))


def workloads_of(client: KubeClient, record: gs.JobRecord) -> list[dict[str, Any]]:
    return [wl for wl in client.list(KUEUE_API, "Workload", record.namespace)
            if any(o["kind"] == "RayJob" and o["name"] == record.name for o in wl["metadata"].get("ownerReferences",
                                                                                                  []))]


def job_summary(client: KubeClient, watch: FallbackWatch, record: gs.JobRecord) -> dict[str, Any]:
    """What a test asserts per job: its Workloads (now and ever), the flavors they reserved, evictions, where the
    workers ran, how often it succeeded."""
    track = watch.track(record)
    rayjob = client.get("ray.io/v1", "RayJob", record.name, record.namespace) or {}
    status = rayjob.get("status") or {}
    return {
        "workloads_now": len(workloads_of(client, record)),
        "workloads_ever": len(track.uids),
        "workload_names": sorted(track.names),
        "reserved": track.flavors_reserved(),
        "evictions": dict(track.evictions),
        "worker_pools": {pool for replica in record.worker_pools().values() for pool in replica},
        "state": record.state,
        "succeeded": status.get("succeeded"),
        "failed": status.get("failed"),
        "succeeded_submitters": len(track.succeeded_submitters),
        "annotations": {k: v for k, v in track.annotations.items() if k.startswith("tpu-fallback")},
        "deactivated_at": track.deactivated_at,
    }


# --- a cluster with the project's Kueue config, and the controller -----------------------------------------------


@dataclass
class Env:
    """One scenario's cluster: the control plane, the sim, the stack's plan and the running controller."""

    plane: Any
    sim: GkeSim
    infra: ProgramRun
    controller: Controller
    config: dict[str, Any]
    wait_for_pods_ready: dict[str, Any] | None

    @property
    def client(self) -> KubeClient:
        client: KubeClient = self.plane.client
        return client

    def bounds(self) -> Bounds:
        if self.wait_for_pods_ready is None:
            raise LookupError("the plan's Kueue has no waitForPodsReady")
        return Bounds.of(self.config, self.wait_for_pods_ready, self.sim.timings, self.sim.scale.real_per_sim)

    def watch(self) -> FallbackWatch:
        return FallbackWatch(self.client, self.sim, self.controller, self.config)


class FallbackBox(gs.SimBox):
    """The simulated GKE (gs.SimBox) whose Kueue runs with the stack's waitForPodsReady, shared by scenarios of that
    stack; a fresh controller for each scenario."""

    def __init__(self, stack: gs.Stack = FALLBACK, timings: Timings = TIMINGS) -> None:
        self.stack = stack
        self.infra = stack.render()
        self.wait_for_pods_ready = kueue_wait_for_pods_ready(self.infra)
        super().__init__(scale=gs.SCALE, timings=timings, wait_for_pods_ready=self.wait_for_pods_ready)
        self.scenarios = 0
        self._rendered: dict[str, ProgramRun] = {}

    def render(self, stack: gs.Stack) -> ProgramRun:
        """Another stack's plan, for a scenario on this cluster: its Kueue must run as this one does (the same
        waitForPodsReady block), since the cluster's Kueue is not restarted."""
        if stack == self.stack:
            return self.infra
        key = json.dumps([stack.name, stack.overrides], sort_keys=True)
        if key not in self._rendered:
            infra = stack.render()
            if kueue_wait_for_pods_ready(infra) != self.wait_for_pods_ready:
                raise ValueError(f"{stack} needs another Kueue configuration than this cluster's ({self.stack}): "
                                 f"waitForPodsReady {kueue_wait_for_pods_ready(infra)} != {self.wait_for_pods_ready}")
            self._rendered[key] = infra
        return self._rendered[key]

    @contextlib.contextmanager
    def scenario(self, *, controller: bool = True, stack: gs.Stack | None = None) -> Iterator[Env]:
        """One scenario on the box's cluster (reset first): the box's stack, or `stack` (same Kueue configuration),
        with a fresh controller (the plan's config.json) unless controller=False."""
        stack = stack or self.stack
        infra = self.render(stack)
        if self.acquire(pools_from_plan(infra), f"{stack.name} {dict(stack.overrides)}"):
            _wait_lists_answer(self.plane.client)
        plane, sim = self.plane, self.sim
        self.scenarios += 1
        bundle = controller_bundle(infra) if controller else None
        kubeconfig = controller_kubeconfig(plane, infra) if controller else plane.kubeconfig
        if controller:  # what the process reads on its way out: is its Deployment going away?
            apply_controller_deployment(plane.client, infra)
        ctl = Controller(bundle, kubeconfig, plane.workdir, name=f"fallback-controller-{self.scenarios}")
        env = Env(plane, sim, infra, ctl, ctl.config if controller else {}, self.wait_for_pods_ready)
        try:
            if controller:
                ctl.start()
            yield env
        except BaseException as err:
            if controller:
                err.add_note(f"fallback controller log:\n{ctl.tail(60)}")
            raise
        finally:
            ctl.stop()
        sim.check()


def controller_kubeconfig(plane: Any, infra: ProgramRun) -> Path:
    """A kubeconfig with a token of the plan's own ServiceAccount for the controller, so it runs with exactly the
    ClusterRole the stack grants it (least privilege proved, not assumed). The plan's SA, role and binding are
    applied first (apply_infra applies them again, unchanged); the token comes from the TokenRequest API."""
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    rbac = [o for o in infra.kubernetes_objects()
            if o["kind"] in kinds and o["metadata"]["name"] == CONTROLLER_NAME]
    if len(rbac) != len(kinds):
        raise AssertionError(f"the plan has no {'/'.join(sorted(kinds))} {CONTROLLER_NAME}")
    client: KubeClient = plane.client
    if client.get("v1", "Namespace", CONTROLLER_NAMESPACE) is None:
        client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CONTROLLER_NAMESPACE}})
    for obj in rbac:
        client.apply(obj)
    answer = client.request(
        "POST", f"/api/v1/namespaces/{CONTROLLER_NAMESPACE}/serviceaccounts/{CONTROLLER_NAME}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    path = Path(plane.workdir) / "fallback-controller-kubeconfig.json"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "controller",
        "clusters": [{"name": "e2e", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}],
        "users": [{"name": CONTROLLER_NAME, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "controller", "context": {"cluster": "e2e", "user": CONTROLLER_NAME}}],
    }))
    return path


def apply_controller_deployment(client: KubeClient, infra: ProgramRun) -> None:
    """The plan's Deployment of the controller (its pod is a KWOK pod on the system pool; the process itself runs
    on the test machine): on SIGTERM the controller reopens plan A only if this is being deleted or is gone."""
    (deployment,) = [o for o in infra.kubernetes_objects()
                     if o["kind"] == "Deployment" and o["metadata"]["name"] == CONTROLLER_NAME]
    client.apply(deployment)


# What gke_scenarios.reset, the watch and the controller list.
_LISTED = (("ray.io/v1", "RayJob"), (KUEUE_API, "Workload"), (KUEUE_API, "LocalQueue"), (KUEUE_API, "ClusterQueue"),
           (KUEUE_API, "AdmissionCheck"), (KUEUE_API, "ProvisioningRequestConfig"), (KUEUE_API, "ResourceFlavor"),
           ("autoscaling.x-k8s.io/v1", "ProvisioningRequest"), ("v1", "PodTemplate"), ("v1", "Node"), ("v1", "Pod"),
           ("v1", "Event"))


def _wait_lists_answer(client: KubeClient, timeout: float = 30.0) -> None:
    """Until a LIST of every kind the scenarios use answers. Right after the control plane is up, the first LIST
    of some Kueue kinds (clusterqueues, provisioningrequestconfigs) gets 429 "storage is (re)initializing" for a
    fraction of a second (their watch cache is not ready yet); a reset that starts with a LIST would fail on it."""
    from tests.e2e.kube import KubeError

    def answered(api_version: str, kind: str) -> bool:
        try:
            client.list(api_version, kind)
        except KubeError as err:
            if err.status != 429:
                raise
            return False
        return True

    for api_version, kind in _LISTED:
        client.wait_for(functools.partial(answered, api_version, kind), timeout, f"a LIST of {kind} to answer")


def plan_of(infra: ProgramRun, sim: GkeSim) -> dict[str, str]:
    return gs.flavor_plans(infra, list(sim.pools.values()))


def _jobs(env: Env, count: int, prefix: str, run_times: Mapping[int, float] | None = None
          ) -> list[dict[str, Any]]:
    """The jobs dev stack's objects for `count` RayJobs named <prefix>-1..., job i running run_times[i] s."""
    objects = scenario.render_queue_jobs(env.infra, "default/user-queue", count, prefix)
    out = []
    for obj in objects:
        if obj["kind"] == "RayJob":
            index = int(obj["metadata"]["name"].rsplit("-", 1)[1])
            seconds = (run_times or {}).get(index)
            if seconds is not None:
                obj = with_run_time(obj, seconds)
        out.append(obj)
    return out


def _submit_one(watch: FallbackWatch, objects: Sequence[Mapping[str, Any]], name: str) -> gs.JobRecord:
    chosen = [o for o in objects if o["kind"] != "RayJob" or o["metadata"]["name"] == name]
    (record,) = watch.submit(chosen)
    return record


# --- scenarios -------------------------------------------------------------------------------------------------


def run_stockout_fallback(env: Env) -> gs.Outcome:
    """(a) Plan A stocked out. Job 1 is admitted to plan A, its pods stay unschedulable; GKE's autoscaler writes
    FailedScaleUp on them, the controller taints plan A and evicts the job at once, Kueue requeues it, and the job
    runs on plan B. Job 2, submitted during the cool-down, goes straight to plan B. Capacity returns; once the
    cool-down is over (the taint gone), job 3 runs on plan A."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(PLAN_A_POOL, False)
    objects = _jobs(env, 3, "stockout")
    bound = env.bounds()
    wall_minus_watch = time.time() - watch.now()
    first = _submit_one(watch, objects, "stockout-1")
    watch.wait_running([first], bound.to_plan_b() + 30)
    facts: dict[str, Any] = {"bound": bound, "first_to_running": (first.running or 0) - first.submitted,
                             "tainted_at": watch.tainted_since(), "first_submitted": first.submitted,
                             "running_at": first.running,
                             "failed_scale_up_at": first_event_time(client, "FailedScaleUp", wall_minus_watch)}
    facts["taint_during"] = {f: h[-1][1] for f, h in watch.plan_a_taint_changes().items()}
    # Job 2 while plan A is closed.
    second = _submit_one(watch, objects, "stockout-2")
    facts["second_submitted_after_taint"] = second.submitted - (facts["tainted_at"] or second.submitted)
    facts["tainted_when_second_submitted"] = watch.tainted()
    watch.wait_running([second], 90)
    # Capacity returns; plan A reopens at the end of the cool-down (no node appears in plan A meanwhile: nothing
    # asks for one).
    sim.set_capacity(PLAN_A_POOL, True)
    watch.wait(lambda: not watch.tainted(), bound.cool_down + bound.poll + 20, "plan A to reopen after the cool-down")
    facts["reopened_at"] = watch.now()
    third = _submit_one(watch, objects, "stockout-3")
    watch.wait_running([third], 60)
    watch.wait_finished([first, second, third], 90)
    facts["taints"] = watch.plan_a_taint_changes()
    facts["all_taints"] = dict(watch.taints)
    facts["metrics"] = env.controller.metrics()
    facts["events"] = {reason: fallback_events(client, reason) for reason in FALLBACK_EVENTS}
    facts["jobs"] = {r.name: job_summary(client, watch, r) for r in (first, second, third)}
    facts["plans"] = plan_of(env.infra, sim)
    facts["controller_log"] = env.controller.lines()
    return gs.Outcome(watch, facts)


def run_quota_fallback(env: Env) -> gs.Outcome:
    """(b) The tutorial with the fallback on: two jobs, plan A's quota takes one, the other goes to plan B; no
    stock-out, so plan A is never closed. Job 1 runs long enough that plan A is still full while job 2 waits for
    DWS (no move back either)."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    first, second = watch.submit(_jobs(env, 2, "quota", {1: 10}))
    watch.wait_running([first, second], 90)
    requests = gs.request_conditions(client, "default")  # while job 2 runs (Kueue deletes it with the Workload)
    watch.wait_finished([first, second], 90)
    facts: dict[str, Any] = {
        "taints": watch.plan_a_taint_changes(),
        "events": {reason: fallback_events(client, reason) for reason in FALLBACK_EVENTS},
        "jobs": {r.name: job_summary(client, watch, r) for r in (first, second)},
        "plans": plan_of(env.infra, sim),
        "requests": requests,
        "controller_log": env.controller.lines(),
    }
    return gs.Outcome(watch, facts)


def _plan_a_free(client: KubeClient, watch: FallbackWatch, cluster_queue: str = "cluster-queue") -> bool:
    """No Workload holds quota on a plan A flavor of the ClusterQueue."""
    cq = client.get(KUEUE_API, "ClusterQueue", cluster_queue) or {}
    for usage in (cq.get("status") or {}).get("flavorsReservation", []):
        if usage.get("name") in watch.plan_a and any(str(r.get("total", "0")) not in ("0", "")
                                                     for r in usage.get("resources", [])):
            return False
    return True


def run_move_back(env: Env, *, kill_after_deactivation: bool = False) -> gs.Outcome:
    """(c) Plan A full with job 1 (a long run); job 2 on plan B waits for DWS (plan B stocked out, its
    ProvisioningRequest stays queued); job 1 finishes and job 2 moves to plan A, where it runs. Then job 3 on plan B
    with DWS capacity (Provisioned, running) while job 2 holds plan A; job 2 finishes: job 3 is never moved.

    kill_after_deactivation (d): SIGKILL the controller as soon as job 2's Workload is deactivated for the move,
    and start it again: the move must still complete."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(PLAN_B_POOL, False)
    objects = _jobs(env, 3, "move", {1: 8, 2: 10, 3: 15})
    first = _submit_one(watch, objects, "move-1")
    second = _submit_one(watch, objects, "move-2")
    facts: dict[str, Any] = {}
    watch.wait_running([first], 60)
    facts["second_waiting"] = watch.wait(
        lambda: _check_pending(client, second), 30, "job 2 on plan B, its ProvisioningRequest queued")
    facts["second_flavor_before"] = tpu_flavor(watch.track(second).last)
    if kill_after_deactivation:
        def deactivated() -> bool:
            track = watch.track(second)
            return track.deactivated_at is not None

        watch.wait(deactivated, 60, "the controller to deactivate job 2 for the move", interval=0.05)
        facts["active_when_killed"] = (watch.track(second).last.get("spec") or {}).get("active")
        facts["annotations_when_killed"] = dict(watch.track(second).annotations)
        env.controller.kill()
        facts["killed_at"] = watch.now()
        time.sleep(env.bounds().poll * 2)  # nothing reactivates it meanwhile
        watch.poll()
        facts["active_while_down"] = (watch.track(second).last.get("spec") or {}).get("active")
        env.controller.start()
    watch.wait_finished([first], 60)
    watch.wait_running([second], 60)
    facts["second_running_after_first"] = (second.running or 0) - (first.finished or 0)
    # Job 3 on plan B, with DWS capacity: Provisioned, admitted, running, while job 2 holds plan A.
    sim.set_capacity(PLAN_B_POOL, True)
    third = _submit_one(watch, objects, "move-3")
    watch.wait_running([third], 60)
    facts["third_request"] = gs.request_conditions(client, "default")
    watch.wait_finished([second], 60)
    watch.wait(lambda: _plan_a_free(client, watch), 30, "plan A's quota free after job 2")
    facts["plan_a_free_at"] = watch.now()
    # A few polls of the controller with plan A free and Ready nodes there: job 3 stays where its capacity is.
    hold = watch.now() + max(5.0, 4 * env.bounds().poll)
    watch.wait(lambda: watch.now() >= hold, 30, "the controller's polls with plan A free")
    facts["third_flavor_after"] = tpu_flavor(watch.track(third).last)
    facts["third_active_after"] = (watch.track(third).last.get("spec") or {}).get("active")
    watch.wait_finished([third], 60)
    facts["events"] = {reason: fallback_events(client, reason) for reason in FALLBACK_EVENTS}
    facts["jobs"] = {r.name: job_summary(client, watch, r) for r in (first, second, third)}
    facts["plans"] = plan_of(env.infra, sim)
    facts["taints"] = watch.plan_a_taint_changes()
    facts["metrics"] = env.controller.metrics()  # of the last start
    facts["controller_log"] = env.controller.lines()
    return gs.Outcome(watch, facts)


def _check_pending(client: KubeClient, record: gs.JobRecord) -> dict[str, Any] | None:
    """The Workload if it holds quota with its dws check Pending (its ProvisioningRequest not Provisioned)."""
    wl = scenario.workload_of(client, record.namespace, record.name)
    if wl is None or scenario.condition_status(wl, "QuotaReserved") != "True":
        return None
    checks = {c["name"]: c["state"] for c in (wl.get("status") or {}).get("admissionChecks", [])}
    return wl if checks and all(state == "Pending" for state in checks.values()) else None


def first_event_time(client: KubeClient, reason: str, wall_minus_watch: float) -> float | None:
    """The watch's time of the first Event of `reason` in "default" (Events carry whole wall-clock seconds)."""
    from datetime import datetime

    stamps = [datetime.fromisoformat(e["firstTimestamp"].replace("Z", "+00:00")).timestamp()
              for e in gs.events(client, "default", reason) if e.get("firstTimestamp")]
    return min(stamps) - wall_minus_watch if stamps else None


def run_restart_during_stockout(env: Env) -> gs.Outcome:
    """(d) Plan A stocked out, one job; the controller is killed (SIGKILL) as soon as it has tainted plan A, and
    started again. The job still runs on plan B, once; plan A's taint is neither removed nor re-stamped by the
    restart. Then capacity returns and a plan A node appears (added by hand): plan A reopens before the cool-down's
    end, once."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(PLAN_A_POOL, False)
    objects = _jobs(env, 1, "restart")
    bound = env.bounds()
    (job,) = watch.submit(objects)
    watch.wait(watch.tainted, bound.stockout_after + bound.poll + 20, "the controller to taint plan A",
               interval=0.05)
    facts: dict[str, Any] = {"bound": bound, "taint_before_kill": watch.plan_a_taint_changes()}
    env.controller.kill()
    facts["killed_at"] = watch.now()
    env.controller.start()
    watch.wait_running([job], bound.to_plan_b() + 30)
    facts["to_running"] = (job.running or 0) - job.submitted
    facts["taint_after_restart"] = watch.plan_a_taint_changes()
    sim.set_capacity(PLAN_A_POOL, True)
    sim.add_nodes(PLAN_A_POOL)
    facts["nodes_added_at"] = watch.now()
    watch.wait(lambda: not watch.tainted(), 30, "plan A to reopen once its new node is Ready")
    facts["reopened_at"] = watch.now()
    facts["cool_down_end"] = (watch.tainted_at_first() or 0) + bound.cool_down
    watch.wait_finished([job], 60)
    facts["taints"] = watch.plan_a_taint_changes()
    facts["events"] = {reason: fallback_events(client, reason) for reason in FALLBACK_EVENTS}
    facts["jobs"] = {job.name: job_summary(client, watch, job)}
    facts["plans"] = plan_of(env.infra, sim)
    facts["controller_log"] = env.controller.lines()
    return gs.Outcome(watch, facts)


# --- issue 26's "done when": evidence, not timers, and nothing left behind ---------------------------------------

# The dev stack with room for two plan A slices (on-demand and on-demand-2, a pool each) and the same fallback.
TWO_SLICES_FALLBACK = gs.Stack("dev", {"onDemand": {"maxSlices": 2}, "fallback": dict(FALLBACK_SETTINGS)})
# An admin's own taint on plan A's flavor (say, a maintenance window the jobs accept), and the jobs' toleration.
ADMIN_TAINT: Mapping[str, str] = {"key": "example.com/maintenance", "value": "planned", "effect": "NoSchedule"}
ADMIN_TOLERATION: Mapping[str, str] = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
AUTOSCALER_REASONS = ("TriggeredScaleUp", "FailedScaleUp", "NotTriggerScaleUp")


def no_capacity_events(client: KubeClient, record: gs.JobRecord) -> list[float]:
    """When GKE's autoscaler said it has no VMs for one of the job's pods (its RayCluster's and submitter's pods
    are named after the RayJob): FailedScaleUp, or NotTriggerScaleUp for a pool in back-off after one; unix seconds
    (whole: Events carry whole seconds), oldest first."""
    out = []
    for event in client.list("v1", "Event", record.namespace):
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Pod" or not str(involved.get("name", "")).startswith(f"{record.name}-"):
            continue
        reason, message = event.get("reason"), str(event.get("message", ""))
        if reason == "FailedScaleUp" or (reason == "NotTriggerScaleUp" and "in backoff after failed scale-up"
                                         in message):
            stamp = _unix(event.get("firstTimestamp"))
            if stamp is not None:
                out.append(stamp)
    return sorted(out)


def autoscaler_event_counts(client: KubeClient, namespace: str = "default") -> dict[str, int]:
    return {reason: len(gs.events(client, namespace, reason)) for reason in AUTOSCALER_REASONS}


def worker_pods(client: KubeClient, record: gs.JobRecord) -> list[dict[str, Any]]:
    """The job's TPU worker pods now (its RayCluster's pods of gke_scenarios.TPU_GROUP)."""
    return [p for p in client.list("v1", "Pod", record.namespace)
            if p["metadata"]["name"].startswith(f"{record.name}-")
            and (p["metadata"].get("labels") or {}).get("ray.io/group") == gs.TPU_GROUP]


def workers_on_nodes(client: KubeClient, record: gs.JobRecord) -> int:
    """How many of the job's workers are bound to a node and handled there (KWOK gave them an IP)."""
    return len([p for p in worker_pods(client, record)
                if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("podIP")])


def pod_states(watch: FallbackWatch, record: gs.JobRecord) -> list[dict[str, Any]]:
    """What a test asserts of the job's TPU worker pods now: phase, pool of the node, Ready, containers waiting."""
    return [pod_state(p, watch) for p in worker_pods(watch.client, record)]


def pod_state(pod: Mapping[str, Any], watch: FallbackWatch) -> dict[str, Any]:
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if node and node not in watch.node_pool:  # created after the watch's last poll
        found = watch.client.get("v1", "Node", node) or {"metadata": {}}
        watch.node_pool[node] = (found["metadata"].get("labels") or {}).get(POOL_LABEL, "")
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    waiting = sorted({str(((c.get("state") or {}).get("waiting") or {}).get("reason"))
                      for c in status.get("containerStatuses") or [] if (c.get("state") or {}).get("waiting")})
    return {"phase": status.get("phase"), "pool": watch.node_pool.get(node) if node else None, "ready": ready,
            "waiting": waiting}


def _with_rayjob(objects: Sequence[Mapping[str, Any]], change: Callable[[dict[str, Any]], dict[str, Any]],
                 names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The objects, with `change` applied to the RayJobs (those named in `names`, or all)."""
    return [change(dict(o)) if o["kind"] == "RayJob" and (names is None or o["metadata"]["name"] in names)
            else dict(o) for o in objects]


def tolerating(rayjob: dict[str, Any], toleration: Mapping[str, str]) -> dict[str, Any]:
    """The RayJob whose TPU workers tolerate `toleration` too (Kueue checks a flavor's taints against them)."""
    out = copy.deepcopy(rayjob)
    for group in out["spec"]["rayClusterSpec"].get("workerGroupSpecs") or []:
        group["template"]["spec"].setdefault("tolerations", []).append(dict(toleration))
    return out


def _wait_or_none(watch: FallbackWatch, predicate: Callable[[], Any], timeout: float, interval: float = 0.1
                  ) -> float | None:
    """The watch's time at which `predicate` held, None if it did not within `timeout` (an outcome, not an error)."""
    try:
        watch.wait(predicate, timeout, "(optional)", interval=interval)
    except TimeoutError:
        return None
    return watch.now()


def _close_value(watch: FallbackWatch, index: int = 0) -> float | None:
    """The value (unix seconds of the close) of the controller's `index`-th taint on the first plan A flavor."""
    values = [v for _t, v in watch.plan_a_taint_changes()[watch.plan_a[0]] if v is not None]
    return float(values[index]) if len(values) > index else None


def _finish(env: Env, watch: FallbackWatch, facts: dict[str, Any], records: Sequence[gs.JobRecord]) -> gs.Outcome:
    """What every scenario reports at its end."""
    client = env.client
    facts["taints"] = watch.plan_a_taint_changes()
    facts["all_taints"] = dict(watch.taints)
    facts["flavor_taints"] = dict(watch.flavor_taints)
    facts["events"] = {reason: fallback_events(client, reason) for reason in FALLBACK_EVENTS}
    facts["jobs"] = {r.name: job_summary(client, watch, r) for r in records}
    facts["plans"] = plan_of(env.infra, env.sim)
    facts["metrics"] = env.controller.metrics()
    facts["controller_log"] = env.controller.lines()
    return gs.Outcome(watch, facts)


def run_backstop_without_events(env: Env) -> gs.Outcome:
    """(1) A GKE whose autoscaler Events are never seen (`sim.set_events(False)`): plan A stocked out, job 1
    admitted there; its pods stay unschedulable but nothing says why, so only the stockoutAfter backstop can close
    plan A. Job 1 still runs on plan B."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_events(False)
    sim.set_capacity(PLAN_A_POOL, False)
    bound = env.bounds()
    wall_minus_watch = time.time() - watch.now()
    (job,) = watch.submit(_jobs(env, 1, "backstop"))
    watch.wait_running([job], bound.backstop_to_plan_b() + 30)
    track = watch.track(job)
    facts: dict[str, Any] = {
        "bound": bound, "submitted": job.submitted, "running_at": job.running,
        "to_running": (job.running or 0) - job.submitted,
        "admitted_kueue": track.admitted_at[0] if track.admitted_at else None,  # unix, whole seconds
        "admitted_watch": (track.admitted_at[0] - wall_minus_watch) if track.admitted_at else None,
        "tainted_at": watch.tainted_at_first(), "close_value": _close_value(watch),
        "autoscaler_events": autoscaler_event_counts(client),
        "suppressed": sorted({e.reason for e in sim.suppressed_events}),
        "suppressed_count": len(sim.suppressed_events),
    }
    watch.wait_finished([job], 60)
    return _finish(env, watch, facts, [job])


def run_not_ready_with_capacity(env: Env) -> gs.Outcome:
    """(2) Plan A has capacity (TWO_SLICES_FALLBACK: quota and a pool for two slices). Job 1's workers are bound to
    the nodes plan A's pool grew for them, but their image never pulls (Pending on their node, never Ready: the
    job's own problem). Well past stockoutAfter plan A is still open; a healthy job 2 then runs on plan A too."""
    client = env.client
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    bound = env.bounds()
    objects = _with_rayjob(_jobs(env, 2, "notready"), lambda o: with_workers_ready_after(o, None), ["notready-1"])
    first = _submit_one(watch, objects, "notready-1")
    watch.wait(lambda: workers_on_nodes(client, first) >= 4, 60, "job 1's workers bound to plan A's nodes")
    facts: dict[str, Any] = {"bound": bound, "workers_bound_at": watch.now(), "admitted": first.admitted}
    # Well past stockoutAfter after its admission, and a few of the controller's polls more.
    hold_until = (first.admitted or first.submitted) + bound.stockout_after + 5 * bound.poll + 5
    watch.wait(lambda: watch.now() >= hold_until, hold_until - watch.now() + 30, "stockoutAfter and a few polls")
    facts["held_after_admission"] = watch.now() - (first.admitted or first.submitted)
    facts["first_pods"] = pod_states(watch, first)
    facts["tainted_before_second"] = watch.tainted_at_first()
    facts["first_flavor"] = tpu_flavor(watch.track(first).last)
    second = _submit_one(watch, objects, "notready-2")
    watch.wait_running([second], 60)
    watch.wait_finished([second], 60)
    facts["first_pods_end"] = pod_states(watch, first)
    facts["first_running"] = first.running
    return _finish(env, watch, facts, [first, second])


def run_slow_start_on_plan_b(env: Env, ready_after: float) -> gs.Outcome:
    """(3) Plan A full (job 1, running, holds its one slice of quota): job 2 goes to plan B, DWS provisions its
    slice, and its workers, once bound, take `ready_after` seconds to turn Ready (a large image). Nobody evicts it:
    not the controller (it is not on plan A), not Kueue's PodsReady timeout (30 min); it completes on plan B."""
    client = env.client
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    bound = env.bounds()
    wall_minus_watch = time.time() - watch.now()
    objects = _with_rayjob(_jobs(env, 2, "slow", {1: 10}), lambda o: with_workers_ready_after(o, ready_after),
                           ["slow-2"])
    first = _submit_one(watch, objects, "slow-1")
    second = _submit_one(watch, objects, "slow-2")
    watch.wait(lambda: workers_on_nodes(client, second) >= 4, bound.dws_provision + 60,
               "job 2's workers bound to plan B's nodes")
    facts: dict[str, Any] = {"bound": bound, "ready_after": ready_after, "workers_bound_at": watch.now(),
                             "second_pods_bound": pod_states(watch, second)}
    watch.wait_running([second], ready_after + 60)
    track = watch.track(second)
    facts["second_running"] = second.running
    facts["second_admitted_kueue"] = (track.admitted_at[0] - wall_minus_watch) if track.admitted_at else None
    facts["second_requests"] = gs.request_conditions(client, "default")
    watch.wait_finished([first, second], 90)
    facts["second_conditions_seen"] = sorted(track.conditions_seen)
    facts["second_releases"] = list(track.releases)
    return _finish(env, watch, facts, [first, second])


def set_flavor_taints(client: KubeClient, flavor: str, taints: Sequence[Mapping[str, str]]) -> None:
    """What an admin does with `kubectl patch resourceflavor <flavor> --type merge -p '{"spec":{"nodeTaints":...}}'`
    (spec.nodeTaints is an atomic list: the patch sets all of it)."""
    client.request("PATCH", f"/apis/{KUEUE_API}/resourceflavors/{flavor}", {"spec": {"nodeTaints": list(taints)}},
                   content_type="application/merge-patch+json")


def run_admin_taint_and_probe(env: Env) -> gs.Outcome:
    """(4) and (6). An admin's taint (ADMIN_TAINT, which the jobs tolerate) on plan A's flavor before anything
    happens. Plan A stays stocked out for the whole scenario: job 1 closes it (GKE's FailedScaleUp) and runs on
    plan B; the cool-down passes and plan A reopens; job 2, admitted to the reopened plan A, gets GKE's FailedScaleUp
    within seconds and closes it again at once (a probe costs seconds, not stockoutAfter) and runs on plan B. The
    admin's taint is read at every step."""
    client = env.client
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    flavor = watch.plan_a[0]
    set_flavor_taints(client, flavor, [ADMIN_TAINT])
    env.sim.set_capacity(PLAN_A_POOL, False)
    bound = env.bounds()
    wall_minus_watch = time.time() - watch.now()
    objects = _with_rayjob(_jobs(env, 2, "probe"), lambda o: tolerating(o, ADMIN_TOLERATION))
    watch.wait(lambda: ADMIN_TAINT in (watch.flavor_taints.get(flavor) or [(0, [])])[-1][1], 10,
               "the watch to see the admin's taint on plan A's flavor")
    facts: dict[str, Any] = {"bound": bound, "flavor": flavor, "taints_before": watch.flavor_taints[flavor][-1][1]}
    first = _submit_one(watch, objects, "probe-1")
    watch.wait(watch.tainted, bound.stockout_after + bound.poll + 20, "the controller to close plan A", interval=0.1)
    facts["closed_at"] = watch.now()
    facts["taints_closed"] = watch.flavor_taints[flavor][-1][1]
    watch.wait_running([first], bound.to_plan_b() + 30)
    watch.wait_finished([first], 60)
    close = _close_value(watch) or 0.0
    watch.wait(lambda: not watch.tainted(), close - wall_minus_watch + bound.cool_down + bound.poll + 20 - watch.now(),
               "plan A to reopen after the cool-down", interval=0.1)
    facts["reopened_at"] = watch.now()
    facts["close_value"] = close
    facts["taints_reopened"] = watch.flavor_taints[flavor][-1][1]
    # The probe: job 2 on the reopened, still stocked-out plan A.
    second = _submit_one(watch, objects, "probe-2")
    watch.wait(lambda: _close_value(watch, 1) is not None, bound.stockout_after + bound.poll + 20,
               "the controller to close plan A again", interval=0.1)
    facts["reclosed_at"] = watch.now()
    facts["reclose_value"] = _close_value(watch, 1)
    facts["taints_reclosed"] = watch.flavor_taints[flavor][-1][1]
    watch.wait_running([second], bound.stockout_after + bound.after_signal() + 30)
    track = watch.track(second)
    facts["second"] = {"submitted": second.submitted, "running": second.running,
                       "admitted_kueue": track.admitted_at[0] if track.admitted_at else None,
                       "no_capacity": no_capacity_events(client, second)}
    facts["wall_minus_watch"] = wall_minus_watch
    watch.wait_finished([second], 60)
    facts["taints_end"] = watch.flavor_taints[flavor][-1][1]
    return _finish(env, watch, facts, [first, second])


@contextlib.contextmanager
def paused(plane: Any, component: str) -> Iterator[int]:
    """A component of the control plane stopped (SIGSTOP) for the block, then continued (SIGCONT), also on failure:
    a busy or stalled controller, as far as the others can tell. Yields its pid."""
    pid = plane.pids()[component]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def run_controller_removed_then_restarted(env: Env) -> gs.Outcome:
    """(5) Plan A stocked out, job 1 admitted there; the controller closes plan A and evicts job 1 (deactivates it).
    While job 1 is deactivated and not yet reactivated, the controller's Deployment is deleted (as `pulumi destroy`
    does: foreground) and the process gets SIGTERM, as the kubelet sends it: plan A must reopen at once and job 1
    must be active again, since no controller will come back to finish the eviction.
    Then the Deployment is back and a new controller closes plan A again; SIGTERM with the Deployment in place (a
    restart: a drained node, an evicted pod) must keep the close, and the next process carries on: job 1 runs on
    plan B.

    The window between the eviction's two halves is deterministic here: KubeRay is paused (SIGSTOP) from the moment
    job 1's pods exist until the controller is gone. Kueue clears an evicted Workload's reservation only once its job
    is no longer active (for a RayJob: KubeRay reports it Suspended; jobframework/reconciler.go), and the controller
    reactivates only a released Workload, so job 1 stays deactivated, by the controller, for as long as needed.
    GKE's FailedScaleUp on plan A comes 10 s after its pods ask for nodes (a slower scale-up attempt), so KubeRay is
    paused before the close."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_capacity(PLAN_A_POOL, False)
    sim.scale_up_delays[PLAN_A_POOL] = sim.scale.sim(10.0)
    bound = env.bounds()
    (job,) = watch.submit(_jobs(env, 1, "removed"))
    track = watch.track(job)
    watch.wait(lambda: len(worker_pods(client, job)) >= 4, 30, "KubeRay to create job 1's worker pods")
    facts: dict[str, Any] = {"bound": bound, "workers_created_at": watch.now()}

    def deactivated() -> bool:
        return track.last.get("spec", {}).get("active") is False and EVICTING_ANNOTATION in track.annotations

    with paused(env.plane, "kuberay"):
        facts["paused_at"] = watch.now()
        watch.wait(deactivated, 10 + bound.stockout_after + bound.poll + 20, "the controller to evict job 1",
                   interval=0.1)
        facts["deactivated_seen_at"] = watch.now()
        sim.scale_up_delays.pop(PLAN_A_POOL)
        time.sleep(2 * bound.poll)  # a few of the controller's passes: it does not reactivate a reserved Workload
        (name,) = sorted(track.names)
        before = client.get(KUEUE_API, "Workload", name, job.namespace) or {}
        facts["before_sigterm"] = {
            "active": (before.get("spec") or {}).get("active"),
            "reserved": scenario.condition_status(before, "QuotaReserved"),
            "annotations": {k: v for k, v in (before["metadata"].get("annotations") or {}).items()
                            if k.startswith("tpu-fallback")}}
        facts["deployment_before"] = client.get("apps/v1", "Deployment", CONTROLLER_NAME, CONTROLLER_NAMESPACE) \
            is not None
        client.delete("apps/v1", "Deployment", CONTROLLER_NAME, CONTROLLER_NAMESPACE, propagation_policy="Foreground")
        facts["sigterm_at"] = watch.now()
        facts["exit_removed"] = env.controller.stop()
        facts["exited_at"] = watch.now()
        facts["reopened_at"] = _wait_or_none(watch, lambda: not watch.tainted(), 10, interval=0.05)
        after = client.get(KUEUE_API, "Workload", name, job.namespace) or {}
        facts["after_removal"] = {
            "active": (after.get("spec") or {}).get("active"),
            "annotations": {k: v for k, v in (after["metadata"].get("annotations") or {}).items()
                            if k.startswith("tpu-fallback")}}
        facts["deployment_after"] = client.get("apps/v1", "Deployment", CONTROLLER_NAME, CONTROLLER_NAMESPACE)
        facts["taints_after_removal"] = watch.plan_a_taint_changes()
    # KubeRay goes on; the Deployment is back (pulumi up) and a new controller closes plan A again.
    apply_controller_deployment(client, env.infra)
    env.controller.start()
    watch.wait(lambda: _close_value(watch, 1) is not None, bound.stockout_after + bound.poll + 30,
               "the new controller to close plan A again", interval=0.05)
    facts["reclose_value"] = _close_value(watch, 1)
    facts["exit_restart"] = env.controller.stop()  # SIGTERM, its Deployment in place: a restart
    flavor = client.get(KUEUE_API, "ResourceFlavor", watch.plan_a[0]) or {}
    facts["taint_after_restart_exit"] = next((t.get("value") for t in (flavor.get("spec") or {}).get(
        "nodeTaints") or [] if t.get("key") == watch.taint_key), None)
    time.sleep(3)  # no process meanwhile: nothing may have changed the close
    watch.poll()
    facts["tainted_while_down"] = watch.tainted()
    env.controller.start()
    watch.wait_running([job], bound.to_plan_b() + 30)
    watch.wait_finished([job], 60)
    return _finish(env, watch, facts, [job])


def run_stockout_time_to_running(env: Env, window: float, *, events: bool = True) -> gs.Outcome:
    """Plan A stocked out, one job: how long until all its pods run (None if not within `window` real seconds),
    and what happened on the way (for benchmark_fallback.py). Without the fallback (no controller, a Kueue without
    waitForPodsReady) the job sits on plan A's quota for as long as the stock-out lasts. events=False: GKE's
    autoscaler Events are never seen (the controller has only its stockoutAfter backstop)."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    sim.set_events(events)
    sim.set_capacity(PLAN_A_POOL, False)
    (job,) = watch.submit(_jobs(env, 1, "bench"))
    deadline = job.submitted + window
    watch.wait(lambda: job.running is not None or watch.now() >= deadline, window + 30, "the job to run or the window")
    track = watch.track(job)

    def since(t: float | None) -> float | None:
        return None if t is None else t - job.submitted

    facts: dict[str, Any] = {
        "window": window,
        "to_running": since(job.running) if job.running is not None and job.running <= deadline else None,
        "admitted": since(job.admitted),
        "reservations": [(since(t), flavor) for t, flavor in track.reservations],
        "releases": [since(t) for t in track.releases],
        "tainted": since(watch.tainted_at_first()),
        "evictions": dict(track.evictions),
        "worker_pools": {pool for replica in job.worker_pools().values() for pool in replica},
        "pods": watch.describe_unfinished() if job.running is None else "",
        "failed_scale_ups": len(gs.events(client, "default", "FailedScaleUp")),
        "suppressed_events": len(sim.suppressed_events),
        "first_no_capacity": since(next((t - (time.time() - watch.now()) for t in no_capacity_events(client, job)),
                                        None)),
    }
    if env.controller.pid is not None:
        from tests.e2e.controlplane import process_usage

        usage = process_usage(env.controller.pid)
        facts["controller_cpu"] = usage.cpu_seconds if usage else None
        facts["controller_rss"] = usage.peak_rss_bytes if usage else None
    sim.set_capacity(PLAN_A_POOL, True)  # let the job finish, so the next scenario starts clean
    return gs.Outcome(watch, facts)


# --- issue 27: a capacity ladder (reservation -> on-demand -> spot -> flex-start) ------------------------------------
# The example ladder stack (Pulumi.ladder.yaml: v6e 4x4, a reservation of one slice, on-demand 1, spot 2, flex-start
# 2 slices) with this module's short fallback times: its pools, flavors (the spot ones with GKE's spot taint), one
# ClusterQueue in ladder order and the controller's config.json with "rungs", all as the program renders them.

LADDER = gs.Stack("ladder", {"fallback": dict(FALLBACK_SETTINGS)})
# Idle nodes stay 30 s real here (GKE: 10 min of cluster-autoscaler's --scale-down-unneeded-time): a move up needs a
# Ready node on the freed rung, and on GKE the controller acts seconds after a job ends, minutes before the pool
# shrinks; 6 s real would make that a race under a busy CPU, which GKE's own times do not.
LADDER_TIMINGS = replace(TIMINGS, scale_down_unneeded=3000)
LADDER_EVENTS = ("RungStockOut", "RungReopened", "EvictedFromRung", "MovingUp", "MovedUp")
# The kinds of flavor plan_of names (the pools' tpu-fallback/plan label).
RESERVATION, ON_DEMAND, SPOT, FLEX_START = "reservation", "on-demand", "spot", "flex-start"


class LadderBox(FallbackBox):
    """A FallbackBox of the example ladder stack."""

    def __init__(self) -> None:
        super().__init__(LADDER, LADDER_TIMINGS)


def render_jobs(infra: ProgramRun, jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The jobs dev stack's objects for the `jobs` config (any keys the jobs program reads: preemptible, ...)."""
    from tpu_fallback.offline.mockrun import REPO_ROOT, run_program

    refs = {scenario.INFRA_STACK: {"outputs": copy.deepcopy(infra.outputs),
                                   "secretOutputNames": sorted(infra.secret_outputs)}}
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": [dict(j) for j in jobs]}, stack_references=refs)
    return run.kubernetes_objects()


def ladder_events(client: KubeClient, reason: str) -> list[dict[str, Any]]:
    return sorted((e for e in client.list("v1", "Event") if e.get("reason") == reason),
                  key=lambda e: str(e.get("firstTimestamp") or ""))


def taint_values_of(history: Sequence[tuple[float, str | None]]) -> list[str]:
    """Every close in a flavor's taint history (FallbackWatch.taints): the taint's values (the close's unix time)."""
    return [v for _t, v in history if v is not None]


def events_of(facts: Mapping[str, Any], reason: str, kind: str | None = None) -> int:
    """How many of the controller's Events of `reason` run_ladder found (on objects of `kind`)."""
    return event_count(facts["events"].get(reason, []), kind)


def run_ladder(env: Env) -> gs.Outcome:
    """Issue 27's done-when on the example ladder. The reservation is taken by job `ladder-1` (40 s); on-demand and
    flex-start have no capacity for now. Job `ladder-2` (not preemptible) is admitted to on-demand, GKE's
    FailedScaleUp closes on-demand and the controller evicts it: it skips spot (it does not tolerate the spot taint)
    and lands on flex-start, where it waits. Job `spot-1` (preemptible: true) lands on spot and runs; then its Spot
    VMs are preempted and Spot has no capacity: its replacement workers get FailedScaleUp, the controller closes
    spot and requeues the job (to flex-start, waiting). When `ladder-1` finishes, the job waiting longest on
    flex-start (`ladder-2`) moves up to the reservation and runs there; when it finishes, `spot-1` moves up too and
    finishes."""
    client, sim = env.client, env.sim
    watch = env.watch()
    scenario.apply_infra(client, env.infra)
    watch.poll()
    plans = plan_of(env.infra, sim)
    pools_of = {kind: [p.name for p in sim.pools.values() if p.plan == kind] for kind in set(plans.values())}
    sim.set_capacity(pools_of[ON_DEMAND] + pools_of[FLEX_START], False)
    wall_minus_watch = time.time() - watch.now()
    queue = "default/user-queue"
    objects = render_jobs(env.infra, [{"name": "ladder", "count": 2, "queue": queue},
                                      {"name": "spot", "count": 1, "queue": queue, "preemptible": True}])
    run_times = {"ladder-1": 40.0, "ladder-2": 8.0, "spot-1": 25.0}
    objects = [with_run_time(o, run_times[o["metadata"]["name"]]) if o["kind"] == "RayJob" else o for o in objects]
    facts: dict[str, Any] = {"bound": env.bounds(), "wall_minus_watch": wall_minus_watch, "plans": plans}

    def closed(kind: str) -> bool:
        return any(taint_values_of(watch.taints.get(f, [])) for f, k in plans.items() if k == kind)

    def last_kind(record: gs.JobRecord) -> str | None:
        reserved = watch.track(record).flavors_reserved()
        return plans.get(reserved[-1]) if reserved else None

    first = _submit_one(watch, objects, "ladder-1")
    watch.wait_running([first], 60)
    second = _submit_one(watch, objects, "ladder-2")
    watch.wait(lambda: closed(ON_DEMAND), 60, "on-demand to close", interval=0.1)
    watch.wait(lambda: last_kind(second) == FLEX_START, 60, "ladder-2 on flex-start")
    third = _submit_one(watch, objects, "spot-1")
    watch.wait_running([third], 60)
    facts["third_pools"] = {p for pools in third.worker_pools().values() for p in pools}
    # Its Spot VMs preempted, and no Spot capacity for the replacements.
    sim.set_capacity(pools_of[SPOT], False)
    facts["preempted_nodes"] = [n for pool in sorted(facts["third_pools"]) for n in sim.preempt_spot(pool)]
    facts["preempted_at"] = watch.now()
    watch.wait(lambda: closed(SPOT), 60, "spot to close after the preemption", interval=0.1)
    watch.wait(lambda: last_kind(third) == FLEX_START, 60, "spot-1 requeued to flex-start")
    watch.wait_finished([first], 90)
    watch.wait(lambda: last_kind(second) == RESERVATION, 60, "ladder-2 to move up")
    watch.wait_finished([second], 90)
    watch.wait(lambda: last_kind(third) == RESERVATION, 60, "spot-1 to move up")
    watch.wait_finished([third], 120)
    records = (first, second, third)
    facts["finished_conditions"] = {
        r.name: _unix(next((c.get("lastTransitionTime") for c in (watch.track(r).last.get("status") or {}).get(
            "conditions") or [] if c.get("type") == "Finished"), None)) for r in records}
    # Per job: (unix time first seen, kind of the flavor) of each reservation.
    facts["reservations"] = {r.name: [(t + wall_minus_watch, plans.get(f, f)) for t, f in watch.track(r).reservations]
                             for r in records}
    facts["no_capacity"] = {r.name: no_capacity_events(client, r) for r in (second, third)}
    facts["closes"] = {kind: sorted(float(v) for f, k in plans.items() if k == kind
                                    for v in set(taint_values_of(watch.taints.get(f, []))))
                       for kind in set(plans.values())}
    facts["taints"] = {f: list(h) for f, h in watch.taints.items()}
    facts["metrics"] = env.controller.metrics()
    facts["rung_of_kind"] = {plans[r["flavors"][0]]: r["name"] for r in env.config["rungs"]}  # for the metrics
    facts["events"] = {reason: ladder_events(client, reason) for reason in LADDER_EVENTS}
    facts["node_shutdown_events"] = [e for e in client.list("v1", "Event", "default")
                                     if e.get("reason") == "Shutdown" and e["involvedObject"].get("kind") == "Node"]
    facts["jobs"] = {r.name: {**job_summary(client, watch, r), "kinds": [plans.get(f, f) for f in
                                                                          watch.track(r).flavors_reserved()]}
                     for r in records}
    facts["pool_kinds"] = {p.name: p.plan for p in sim.pools.values()}
    facts["controller_log"] = env.controller.lines()
    return gs.Outcome(watch, facts)
