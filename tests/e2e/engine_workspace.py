"""The real Pulumi engine's workspace for the engine e2e modules (test_engine_e2e.py, test_engine_examples_e2e.py): a
copy of the repository whose Pulumi.yaml files point at this repository's venv, the hermetic CLI
(tests/e2e/engine_cli.py), one ControlPlane (etcd, kube-apiserver, kube-controller-manager, Kueue v0.19.2) and the
readiness gate's runner, with the constants and checks both modules use. Two modules, so that pytest-xdist runs them
side by side (each on its own control plane)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e import scenario
from tests.e2e.engine_cli import (
    REPO_ROOT,
    GateRunner,
    PulumiCli,
    Run,
    Step,
    build_engine,
    copy_project,
    diff_steps,
    files_containing,
    stack_files,
    token_kubeconfig,
    unexpected_warnings,
    value_changes,
    without_encryption_salt,
)
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import ProgramRun, run_program
from tpu_fallback.render.kueue import KUEUE_NAMESPACE

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

VENV = REPO_ROOT / "venv"
INFRA_PROJECT = "tpu-fallback"
INFRA_STACK = "local"  # the existing-cluster stack this module creates in the copy
# `up`, `refresh` and `destroy` preview first unless told not to: a second run of the program for each. Where the test
# has just previewed the same change (or the preview is not what it checks), the step skips it; the first `up` of each
# stack and every `preview` of its own run the program as a user's command does.
SKIP_PREVIEW = "--skip-preview"
INFRA_REF = f"organization/{INFRA_PROJECT}/{INFRA_STACK}"  # a StackReference name with the file backend
JOBS_STACK = "dev"
KUEUE_API = scenario.KUEUE_API
RAY_API = "ray.io/v1"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
TPU_GROUP = "tpu-group"
CPU_ONLY = {"head": {"default-cpu"}, "submitter": {"default-cpu"}}
GCP_PLUGIN_MISSING = "no resource plugin 'pulumi-resource-gcp' found"
CONFIG_ERROR = re.compile(r"is not a known setting|is invalid:|must be a secret|configuration error", re.IGNORECASE)
BAD_KEY_MESSAGE = "tpu-fallback:clusterNme is not a known setting (did you mean clusterName?)"
SYSTEM_QUOTA_CHANGE = {"cpu": 12, "memory": "20Gi"}
# What the API server fills in from the CRD schemas' defaults on the Kueue objects (Kueue v0.19.2's CRDs); the
# offline plan renders none of it (and must not: the objects would then pin Kueue's current defaults).
SERVER_DEFAULTS: dict[str, dict[str, Any]] = {
    "ClusterQueue": {
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        "preemption": {"borrowWithinCohort": {"policy": "Never"}, "reclaimWithinCohort": "Never",
                       "withinClusterQueue": "Never"},
        "queueingStrategy": "BestEffortFIFO",
        "stopPolicy": "None",
    },
    "LocalQueue": {"stopPolicy": "None"},
    # The stack renders the whole retryStrategy (tpu_fallback/render/kueue.py dws_retry_strategy): nothing left to
    # fill in (it was Kueue's backoffLimitCount 3, base 60, max 1800).
    "ProvisioningRequestConfig": {},
    "ResourceFlavor": {},
    "AdmissionCheck": {},
}
# What every live object has and no rendered one can.
VOLATILE_METADATA = frozenset(f"metadata.{k}" for k in (
    "uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"))
TIMEOUT = 120.0
# Per pulumi command. Warm, none takes more than ~20 s; the provider waits up to 10 minutes for a deletion (a
# ClusterQueue Kueue keeps while Workloads use it) and 15 for the gate's Job, which would only hide the failure.
CLI_TIMEOUT = 300.0


# --- the workspace ------------------------------------------------------------------------------------------


@dataclass
class Workspace:
    """The repository copy, the hermetic CLI, the control plane and the gate runner of this module."""

    root: Path
    repo: Path
    cli: PulumiCli
    plane: ControlPlane
    gate: GateRunner
    kubeconfig: str
    kubeconfig_file: Path
    inits: dict[tuple[Path, str], StackInit] = field(default_factory=dict)
    example_previews: dict[str, Future[Run]] = field(default_factory=dict)  # started before the control plane
    _jobs_configured: set[str] = field(default_factory=set)
    jobs_up: set[str] = field(default_factory=set)  # jobs stacks that may have resources

    @property
    def jobs(self) -> Path:
        return self.repo / "jobs"

    @property
    def client(self) -> KubeClient:
        return self.plane.client

    def pulumi(self, *args: str, project: Path, stack: str | None = None, stdin: str | None = None,
               check: bool = True, timeout: float = CLI_TIMEOUT) -> Run:
        return self.cli.run(*args, *(("-s", stack) if stack else ()), cwd=project, stdin=stdin, check=check,
                            timeout=timeout)

    def init_stack(self, project: Path, stack: str) -> None:
        """`pulumi stack init` once per stack; the stack file must come out as it was, but for encryptionsalt."""
        if (project, stack) not in self.inits:
            self.inits[(project, stack)] = init_stack(self.cli, project, stack)
        self.inits[(project, stack)].check()

    def configure_jobs_stack(self, stack: str) -> None:
        """The jobs stack submits to this module's infra stack."""
        self.init_stack(self.jobs, stack)
        if stack not in self._jobs_configured:
            self.pulumi("config", "set", "infraStack", INFRA_REF, project=self.jobs, stack=stack)
            self._jobs_configured.add(stack)

    def offline_infra(self) -> ProgramRun:
        """The offline plan of the infra stack's current config (the copy's stack file).

        The secret kubeconfig is handed over as its real text: with the offline placeholder "[secret]" the
        existing-cluster program fails (tpu_fallback/components/existing.py `_server`: YAML "[secret]" is a list),
        and a failed run_program leaves pending Output tasks that make the next run in this process fail too."""
        return run_program(self.repo, INFRA_STACK, secret_overrides={"kubeconfig": self.kubeconfig})

    def secrets_in(self, root: Path) -> dict[str, list[str]]:
        """Files under `root` that hold the token or the kubeconfig in plain text (or the kubeconfig base64)."""
        return files_containing(root, {
            "token": self.plane.token,
            "kubeconfig": self.kubeconfig,
            "kubeconfig (base64)": base64.b64encode(self.kubeconfig.encode()).decode(),
        })


@dataclass(frozen=True)
class StackInit:
    path: Path
    before: str  # the stack file before `pulumi stack init` ("" if there was none)
    after: str

    def check(self) -> None:
        assert re.search(r"(?m)^encryptionsalt: v1:", self.after), f"stack init wrote no encryptionsalt to {self.path}"
        assert without_encryption_salt(self.after) == self.before, (
            f"`pulumi stack init` rewrote {self.path.name} beyond adding encryptionsalt:\n--- before\n{self.before}"
            f"\n--- after\n{self.after}")


def init_stack(cli: PulumiCli, project: Path, stack: str) -> StackInit:
    path = project / f"Pulumi.{stack}.yaml"
    before = path.read_text() if path.exists() else ""
    cli.run("stack", "init", stack, cwd=project, timeout=CLI_TIMEOUT)
    return StackInit(path, before, path.read_text() if path.exists() else "")


def example_stacks() -> list[str]:
    """The infra project's example stacks (each has a Pulumi.<stack>.yaml in the repository)."""
    return [s for s in stack_files(REPO_ROOT) if s != INFRA_STACK]


@contextlib.contextmanager
def open_workspace(example_previews: bool) -> Iterator[Workspace]:
    """The repository copy, the CLI logged in to a file backend, a control plane with its gate runner; with
    `example_previews`, every example stack initialized and previewed (in parallel, while the control plane
    starts: they need no cluster)."""
    from tests.e2e.controlplane import ControlPlane

    started = time.monotonic()
    engine = build_engine()
    if not (VENV / "bin" / "python").exists():
        pytest.fail(f"no virtualenv at {VENV}: run ./scripts/setup")
    root = Path(tempfile.mkdtemp(prefix="tpu-fallback-engine-e2e-"))
    keep = os.environ.get("KEEP_E2E") == "1"
    cli: PulumiCli | None = None
    pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="preview")
    try:
        repo = copy_project(REPO_ROOT, root / "repo", VENV)
        cli = PulumiCli(engine, root)
        version = cli.run("version", cwd=root)
        assert version.stdout.strip() == engine.version, version.describe()
        cli.login()
        examples = example_stacks() if example_previews else []
        inits = {(repo, s): init_stack(cli, repo, s) for s in examples}
        previews = {s: pool.submit(cli.run, "preview", "-s", s, cwd=repo, check=False, timeout=CLI_TIMEOUT)
                    for s in examples}
        with ControlPlane() as plane:
            print(f"[engine-e2e] control plane up in {plane.timings.get('total', 0):.1f} s", flush=True)
            kubeconfig = token_kubeconfig(plane.server, plane.ca_file.read_bytes(), plane.token)
            kubeconfig_file = root / "kubeconfig.yaml"
            kubeconfig_file.write_text(kubeconfig)
            with GateRunner(plane.server, plane.ca_file, plane.token, KUEUE_NAMESPACE) as gate:
                yield Workspace(root, repo, cli, plane, gate, kubeconfig, kubeconfig_file, inits, previews)
            print(f"[engine-e2e] gate pods run: {gate.runs}; poll errors: {gate.errors[-3:]}")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        print(f"\n[engine-e2e] pulumi commands (module {time.monotonic() - started:.1f} s):")
        if cli is not None:
            print(cli.summary())
        if keep:
            print(f"[engine-e2e] kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def timed(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's wall time, printed (-s)."""
    started = time.monotonic()
    yield
    print(f"\n[engine-e2e] {request.node.name}: {time.monotonic() - started:.1f} s wall", flush=True)


def assert_no_unexpected_warnings(ws: Workspace, since: int, also: Iterable[Run] = ()) -> None:
    """Only the two warnings the engine README expects (provider from PATH, its version) in runs since `since`
    (and in `also`)."""
    found = unexpected_warnings([*also, *ws.cli.history[since:]])
    assert not found, "warnings besides the expected ones:\n" + "\n".join(found)


def changed(steps: list[Step]) -> list[Step]:
    return [s for s in steps if s.op not in ("same", "read")]


def expect_no_changes(ws: Workspace, project: Path, stack: str) -> Run:
    """`pulumi preview --expect-no-changes` (with --diff, so a failure shows which resource and property)."""
    run = ws.pulumi("preview", "--expect-no-changes", "--diff", project=project, stack=stack, check=False)
    if run.returncode != 0:
        steps = "\n".join(f"  {s.op} {s.type} {s.name}" for s in changed(diff_steps(run.stdout)))
        pytest.fail(f"the second preview is not a no-op:\nsteps:\n{steps}\nchanged values:\n"
                    + "\n".join(value_changes(run.stdout)) + f"\n\n{run.describe()}")
    return run
