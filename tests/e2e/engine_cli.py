"""The real Pulumi engine (tests/e2e/build_engine.sh) driven hermetically, for tests/e2e/test_engine_e2e.py.

- `build_engine()` runs build_engine.sh (a no-op of ~40 ms when everything is cached) and reads its engine.env.
- `copy_project()` copies the repository to a temporary directory (without venv, .git, build and caches), with
  the `virtualenv:` option of both Pulumi.yaml files set to an absolute path, so the CLI never writes to the tree.
- `PulumiCli` runs `pulumi` as tests/e2e/engine/README.md ("Running the CLI hermetically") says: the engine's
  bin dir first on PATH, a throw-away PULUMI_HOME, a local file backend, no update check, no plugin download,
  a passphrase secrets provider, and no ambient PULUMI_* variable or KUBECONFIG. Every run is recorded with its
  wall time.
- `GateRunner` stands in for the kubelet the control plane lacks, for the pods of the Kueue readiness gate only:
  it runs the pod's own check (the server-side dry-run create of the probe ResourceFlavor from its ConfigMap) as
  the pod's service account, and reports the pod Succeeded or Failed by that result.
- Parsers of the CLI's output (`diff_steps`, `value_changes`, `warnings`), and `compare()` of a rendered object
  with the live one.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.controlplane import GO_RUNTIME_ENV
from tests.e2e.kube import KubeClient, KubeError

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parents[1]
BUILD_ENGINE = E2E_DIR / "build_engine.sh"
ENGINE_ENV_KEYS = ("PULUMI", "PULUMI_VERSION", "PULUMI_BIN_DIR", "PULUMI_KUBERNETES_PROVIDER_VERSION")
# What the copy leaves out: the venv (the copy's Pulumi.yaml files point at the original), git, build output and
# tool caches (the mypy cache alone is tens of MB).
COPY_IGNORE = ("venv", ".git", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__", "*.egg-info")
PROJECT_FILES = ("Pulumi.yaml", "jobs/Pulumi.yaml")
# The warnings tests/e2e/engine/README.md expects with the provider taken from PATH (PLUGIN_MODE=path).
EXPECTED_WARNINGS = (
    re.compile(r"using pulumi-resource-kubernetes from \$PATH at "),
    re.compile(r"resource plugin kubernetes is expected to have version >=\S+, but has \S+; "),
)
DEFAULT_TIMEOUT = 600.0

# The readiness gate of tpu_fallback/components/kueue.py.
GATE_JOB = "kueue-webhooks-ready"
GATE_ARGS = ["create", "--dry-run=server", "-f", "/probe/flavor.yaml", "-o", "name"]


# --- the engine ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """What build_engine.sh's engine.env names."""

    pulumi: Path
    version: str
    bin_dir: Path
    kubernetes_provider_version: str
    env: Mapping[str, str]


def cache_dir() -> Path:
    return Path(os.environ.get("TPU_FALLBACK_E2E_CACHE") or Path.home() / ".cache" / "tpu-fallback-e2e")


def read_engine_env(path: Path) -> Engine:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    missing = [k for k in ENGINE_ENV_KEYS if not env.get(k)]
    if missing:
        raise RuntimeError(f"{path} lacks {', '.join(missing)}; run {BUILD_ENGINE} with no arguments")
    bin_dir = Path(env["PULUMI_BIN_DIR"])
    if not (bin_dir / "pulumi").is_file():
        raise FileNotFoundError(f"{bin_dir}/pulumi does not exist; run {BUILD_ENGINE} again")
    return Engine(Path(env["PULUMI"]), env["PULUMI_VERSION"], bin_dir, env["PULUMI_KUBERNETES_PROVIDER_VERSION"],
                  env)


def build_engine() -> Engine:
    """Run build_engine.sh (a no-op when cached; a cold build takes many minutes) and read engine.env."""
    proc = subprocess.run([str(BUILD_ENGINE)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_ENGINE} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return read_engine_env(cache_dir() / "engine.env")


# --- the project copy ---------------------------------------------------------------------------------------


def copy_project(source: Path, dest: Path, venv: Path) -> Path:
    """Copy the repository to `dest` (which must not exist) and point both Pulumi.yaml files at `venv`."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*COPY_IGNORE), symlinks=True)
    for name in PROJECT_FILES:
        set_virtualenv(dest / name, venv)
    return dest


def set_virtualenv(project_file: Path, venv: Path) -> None:
    """Rewrite the `virtualenv:` line of a Pulumi.yaml in place (the rest of the file stays byte for byte)."""
    text = project_file.read_text()
    new, count = re.subn(r"(?m)^(\s+virtualenv:[ \t]*)\S.*$", lambda m: m.group(1) + str(venv), text)
    if count != 1:
        raise ValueError(f"{project_file}: expected one `virtualenv:` line, found {count}")
    project_file.write_text(new)
    options = (yaml.safe_load(new) or {}).get("runtime", {}).get("options", {})
    if options.get("virtualenv") != str(venv):
        raise ValueError(f"{project_file}: runtime.options.virtualenv is {options.get('virtualenv')!r} after the edit")


def stack_files(project_dir: Path) -> list[str]:
    """The stacks that have a Pulumi.<stack>.yaml in the project directory, sorted."""
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))


def without_encryption_salt(text: str) -> str:
    """A stack file's text without the `encryptionsalt:` line `pulumi stack init` appends."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("encryptionsalt:"))


def token_kubeconfig(server: str, ca_pem: bytes, token: str, name: str = "local") -> str:
    """A kubeconfig for one API server with a bearer token, the CA embedded (nothing refers to a file)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
    }, sort_keys=False)


# --- the CLI ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One `pulumi` invocation."""

    args: tuple[str, ...]
    cwd: Path
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def text(self) -> str:
        return f"{self.stdout}\n{self.stderr}"

    @property
    def command(self) -> str:
        return "pulumi " + " ".join(self.args)

    def describe(self, tail: int = 12000) -> str:
        """The command, where, exit code, time and the end of its output, for assertion messages."""
        out = self.text
        cut = f"[... {len(out) - tail} characters cut ...]\n" if len(out) > tail else ""
        return (f"$ {self.command}   (in {self.cwd}; exit {self.returncode}; {self.seconds:.1f} s)\n"
                f"{cut}{out[-tail:]}")


class CliError(AssertionError):
    def __init__(self, run: Run) -> None:
        self.run = run
        super().__init__(run.describe())


@dataclass
class PulumiCli:
    """`pulumi` from the engine's bin dir, hermetic: its own PULUMI_HOME and file backend under `root`."""

    engine: Engine
    root: Path
    passphrase: str = "e2e-passphrase"
    # Set after the defaults, e.g. PULUMI_SKIP_CHECKPOINTS for a throw-away stack (see test_kueue_chart_e2e).
    extra_env: Mapping[str, str] = field(default_factory=dict)
    history: list[Run] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def home(self) -> Path:
        return self.root / "pulumi-home"

    @property
    def backend_dir(self) -> Path:
        return self.root / "state"

    @property
    def backend_url(self) -> str:
        return f"file://{self.backend_dir}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_") and k != "KUBECONFIG"}
        env.update(
            PATH=f"{self.engine.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            PULUMI_HOME=str(self.home),
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            PULUMI_CONFIG_PASSPHRASE=self.passphrase,
        )
        env.update(GO_RUNTIME_ENV)  # the CLI and the Kubernetes provider are Go programs too
        # The Python host runs `pip list` before every preview and up; pip's version check would look for PyPI.
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        env.update(self.extra_env)
        return env

    def login(self) -> Run:
        self.home.mkdir(parents=True, exist_ok=True)
        self.backend_dir.mkdir(parents=True, exist_ok=True)
        return self.run("login", self.backend_url, cwd=self.root)

    def run(self, *args: str, cwd: Path, stdin: str | None = None, check: bool = True,
            timeout: float = DEFAULT_TIMEOUT) -> Run:
        """Run `pulumi --non-interactive --color never ARGS` in `cwd`; raises CliError on a non-zero exit if
        `check`. On a timeout the whole process group (the CLI and its plugins) is killed."""
        argv = [str(self.engine.bin_dir / "pulumi"), *args, "--non-interactive", "--color", "never"]
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=self.env(), text=True, start_new_session=True,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            stderr += f"\n[engine_cli] killed after {timeout:g} s"
        run = Run(tuple(args), cwd, proc.returncode, stdout, stderr, time.monotonic() - started)
        with self._lock:
            self.history.append(run)
        print(f"[engine] {run.seconds:6.1f} s  exit {run.returncode}  {run.command}  (in {_short(cwd, self.root)})",
              flush=True)
        if check and run.returncode != 0:
            raise CliError(run)
        return run

    def summary(self) -> str:
        """Every run with its wall time, and the total."""
        lines = [f"{r.seconds:7.1f} s  exit {r.returncode:>2}  {r.command}  ({_short(r.cwd, self.root)})"
                 for r in self.history]
        total = sum(r.seconds for r in self.history)
        return "\n".join([*lines, f"{total:7.1f} s  the sum over {len(self.history)} pulumi commands (some ran in "
                                    "parallel)"])


def _short(path: Path, root: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(root)) or "."
    return str(path)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue


# --- reading the CLI's output -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    op: str  # same, create, update, delete, replace, read, refresh, ...
    type: str
    name: str  # the resource's name, from its URN


_STEP = re.compile(r"^\s*(?:[~+\-<>=]{1,2}\s+)?(?P<type>[\w.\-]+(?::[\w.\-/]+)+): \((?P<op>[\w-]+)\)\s*$")
_URN = re.compile(r"^\s*\[urn=(?P<urn>[^\]]+)\]\s*$")


def diff_steps(output: str) -> list[Step]:
    """The steps of a `pulumi preview --diff` (or `up --diff`) output: each `<type>: (<op>)` header line with
    the name from the `[urn=...]` line after it."""
    steps: list[Step] = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        found = _STEP.match(line)
        if not found:
            continue
        urn = next((m["urn"] for m in map(_URN.match, lines[i + 1:i + 3]) if m), "")
        steps.append(Step(found["op"], found["type"], urn.rsplit("::", 1)[-1] if urn else ""))
    return steps


def value_changes(output: str) -> list[str]:
    """Every `<key>: <old> => <new>` line of a diff, whitespace collapsed."""
    return [" ".join(line.split()) for line in output.splitlines() if " => " in line]


def warnings(output: str) -> list[str]:
    """Every distinct warning the CLI printed (the text after `warning: `), in order."""
    seen: dict[str, None] = {}
    for found in re.finditer(r"warning: (.+)", output):
        seen.setdefault(found.group(1).strip(), None)
    return list(seen)


def unexpected_warnings(runs: Iterable[Run]) -> list[str]:
    found: dict[str, None] = {}
    for run in runs:
        for text in warnings(run.text):
            if not any(p.search(text) for p in EXPECTED_WARNINGS):
                found.setdefault(f"{text}   [{run.command}]", None)
    return list(found)


# --- comparing objects --------------------------------------------------------------------------------------


@dataclass
class Comparison:
    """A rendered object against the live one: what differs, and what only the live object has."""

    different: list[str] = field(default_factory=list)  # "path: rendered X, live Y" (also: missing in live)
    extra: dict[str, Any] = field(default_factory=dict)  # path -> the live value the rendered object lacks


def compare(rendered: Any, live: Any, path: str = "") -> Comparison:
    out = Comparison()
    _compare(rendered, live, path, out)
    return out


def _compare(rendered: Any, live: Any, path: str, out: Comparison) -> None:
    if isinstance(rendered, Mapping) and isinstance(live, Mapping):
        for key, value in rendered.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in live:
                out.different.append(f"{sub}: rendered {value!r}, missing in the live object")
            else:
                _compare(value, live[key], sub, out)
        for key in live:
            if key not in rendered:
                out.extra[f"{path}.{key}" if path else str(key)] = live[key]
    elif isinstance(rendered, list) and isinstance(live, list) and len(rendered) == len(live):
        for i, (a, b) in enumerate(zip(rendered, live, strict=True)):
            _compare(a, b, f"{path}[{i}]", out)
    elif rendered != live:
        out.different.append(f"{path}: rendered {rendered!r}, live {live!r}")


def files_containing(root: Path, needles: Mapping[str, str]) -> dict[str, list[str]]:
    """label -> the files under `root` (relative paths) whose bytes contain that needle; labels found nowhere
    are left out."""
    hits: dict[str, list[str]] = {}
    encoded = {label: needle.encode() for label, needle in needles.items()}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for label, needle in encoded.items():
            if needle in data:
                hits.setdefault(label, []).append(str(path.relative_to(root)))
    return hits


# --- the readiness gate's pods ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateRun:
    pod: str
    succeeded: bool
    output: str  # what `kubectl create --dry-run=server -o name` would print, or the API server's refusal
    seconds_after_creation: float


class GateRunner:
    """Runs the readiness gate's pods, which no kubelet runs here (the control plane has none).

    For each new Pending pod of the Job `kueue-webhooks-ready` it does what the pod's container would do, with the
    pod's own identity: it checks that the container still runs `kubectl create --dry-run=server -f
    /probe/flavor.yaml -o name` (so the stand-in cannot drift from the gate), reads flavor.yaml from the ConfigMap
    the pod mounts at /probe, asks the API server for a token of the pod's service account bound to the pod
    (TokenRequest) and creates each document with `dryRun=All` with that token: the request passes RBAC (the
    account may only create ResourceFlavors) and Kueue's real mutating and validating webhooks, and stores nothing.
    Then it writes the pod's status as the kubelet would: Succeeded with exit code 0 if every create passed, Failed
    with exit code 1 and the refusal as the termination message otherwise, so the Job controller completes the Job
    or retries it with its back-off, exactly as on a cluster.
    """

    def __init__(self, server: str, ca_file: Path, admin_token: str, namespace: str, job: str = GATE_JOB,
                 interval: float = 0.3) -> None:
        self.server, self.ca_file = server, ca_file
        self.client = KubeClient(server, ca_file, admin_token)  # its own client: KubeClient is not thread-safe
        self.namespace, self.job, self.interval = namespace, job, interval
        self.runs: list[GateRun] = []
        self.errors: list[str] = []
        self._handled: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gate-runner", daemon=True)

    def __enter__(self) -> GateRunner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except KubeError as err:  # the API server is busy or going away: try again
                self.errors.append(str(err))
            self._stop.wait(self.interval)

    def poll(self) -> None:
        pods = self.client.list("v1", "Pod", self.namespace, label_selector=f"batch.kubernetes.io/job-name={self.job}")
        for pod in pods:
            meta = pod["metadata"]
            if (meta["uid"] in self._handled or meta.get("deletionTimestamp")
                    or pod.get("status", {}).get("phase", "Pending") != "Pending"):
                continue
            self._handled.add(meta["uid"])
            self.runs.append(self._run(pod))

    def _run(self, pod: Mapping[str, Any]) -> GateRun:
        meta, spec = pod["metadata"], pod["spec"]
        (container,) = spec["containers"]
        ok, output = False, ""
        if container.get("command") or container.get("args") != GATE_ARGS:
            output = f"the gate's container runs {container.get('command')} {container.get('args')}, not {GATE_ARGS}"
        else:
            try:
                output = self._check(pod)
                ok = True
            except KubeError as err:
                output = f"Error from server: {err.message}"
            except (KeyError, ValueError) as err:
                output = f"cannot run the gate's check: {err!r}"
        self._report(pod, container["name"], ok, output)
        created = datetime.datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
        return GateRun(meta["name"], ok, output, (datetime.datetime.now(datetime.UTC) - created).total_seconds())

    def _check(self, pod: Mapping[str, Any]) -> str:
        """What `kubectl create --dry-run=server -f /probe/flavor.yaml -o name` prints, as the pod's account."""
        spec = pod["spec"]
        (container,) = spec["containers"]
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/probe")
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        config_map = self.client.get("v1", "ConfigMap", volume["configMap"]["name"], self.namespace)
        if config_map is None:
            raise ValueError(f"ConfigMap {volume['configMap']['name']} not found")
        documents = [d for d in yaml.safe_load_all(config_map["data"]["flavor.yaml"]) if d]
        account = spec["serviceAccountName"]
        request = self.client.request(
            "POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 600,
                      "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                         "uid": pod["metadata"]["uid"]}}})
        as_pod = KubeClient(self.server, self.ca_file, request["status"]["token"])
        names = []
        for doc in documents:
            created = as_pod.create(doc, dry_run=True)
            group = created["apiVersion"].split("/")[0] if "/" in created["apiVersion"] else ""
            names.append(f"{created['kind'].lower()}{'.' + group if group else ''}/{created['metadata']['name']}")
        return "\n".join(names)

    def _report(self, pod: Mapping[str, Any], container: str, ok: bool, output: str) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        terminated = {"exitCode": 0 if ok else 1, "reason": "Completed" if ok else "Error", "message": output[-4000:],
                      "startedAt": now, "finishedAt": now}
        status = {"phase": "Succeeded" if ok else "Failed", "startTime": now, "containerStatuses": [{
            "name": container, "image": pod["spec"]["containers"][0]["image"], "imageID": "", "ready": False,
            "restartCount": 0, "started": False, "state": {"terminated": terminated}}]}
        self.client.request("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status",
                            {"status": status}, content_type="application/merge-patch+json")


def wait_gone(client: KubeClient, objects: Sequence[tuple[str, str, str, str | None]], timeout: float) -> list[str]:
    """Wait until none of (apiVersion, kind, name, namespace) exists; returns those still there at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = [f"{kind} {ns + '/' if ns else ''}{name}" for api, kind, name, ns in objects
                if client.get(api, kind, name, ns) is not None]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.3)
