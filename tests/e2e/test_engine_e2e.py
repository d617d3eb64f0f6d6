"""The real Pulumi engine against the local control plane (issue 11, item 4).

The CLI (v3.274.1), the Python language host (v3.188.0) and the Kubernetes provider (4.25.0) are built from Go
modules by tests/e2e/build_engine.sh and run hermetically (tests/e2e/engine_cli.py): a throw-away PULUMI_HOME, a
local file backend, no update check, no plugin download, a passphrase secrets provider, the engine's bin dir first
on PATH. They run on a copy of the repository in a temporary directory whose Pulumi.yaml files point at this
repository's venv, against one ControlPlane (etcd, kube-apiserver, kube-controller-manager, Kueue v0.19.2) for the
whole module:

1. every example stack of both projects loads its project and config under `pulumi preview` (the GCP stacks stop at
   the GCP provider, which cannot be built here), and a misspelt key fails with its one-line message;
2. the infra program in existing-cluster mode (`kueue.install: false`, a secret token kubeconfig; no GCP at all):
   `up`, a second preview with no changes, a config change that updates the ClusterQueue only, and the live Kueue
   objects equal to what the offline plan renders for the same config;
3. the jobs project against that stack by StackReference: Kueue gives one RayJob the on-demand flavor and the other
   dws with a ProvisioningRequest, a second preview has no changes, `destroy` removes the jobs, and the state holds
   neither the kubeconfig nor the token in plain text;
4. a new ClusterQueue name replaces the LocalQueues (their spec.clusterQueue is immutable) rather than update them;
5. `destroy` of the infra stack removes every object it made;
6. the hardened example's Kubernetes half (Pulumi.hardened.yaml as an existing-cluster stack): `up`, a fixed point,
   its live Kueue objects equal to the hardened stack's offline plan, `destroy`.

The jobs test (3) also moves the infra kubeconfig to https://localhost:<port> (the same API server): the jobs
stack's provider is updated in place and no RayJob is replaced (its cluster_identifier).

There is no kubelet, so the Kueue readiness gate's pod would stay Pending and `up` would wait 15 minutes for its
Job: engine_cli.GateRunner runs the gate's own check (the server-side dry-run create of its probe ResourceFlavor, as
the gate's service account, through Kueue's real webhooks) and reports the pod Succeeded or Failed by its result.

The tests share the stacks and run in file order (the infra stack is created once, by the `infra` fixture, and
destroyed last); each one also runs alone. The example stacks' previews need no cluster, so the `ws` fixture runs
them (in parallel) while the control plane starts. Wall times of every pulumi command are printed at the end (-s).
"""

from __future__ import annotations

import base64
import functools
import json
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
import yaml

from tests.e2e import scenario
from tests.e2e.engine_cli import (
    REPO_ROOT,
    GateRunner,
    PulumiCli,
    Run,
    Step,
    build_engine,
    compare,
    copy_project,
    diff_steps,
    files_containing,
    stack_files,
    token_kubeconfig,
    unexpected_warnings,
    value_changes,
    wait_gone,
    without_encryption_salt,
)
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import ProgramRun, run_program
from tpu_fallback.render.kueue import KUEUE_NAMESPACE

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

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
    "ProvisioningRequestConfig": {"retryStrategy": {"backoffBaseSeconds": 60, "backoffLimitCount": 3,
                                                    "backoffMaxSeconds": 1800}},
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


@pytest.fixture(scope="module")
def ws() -> Iterator[Workspace]:
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
        # The example stacks' previews need no cluster: they run while the control plane starts (test 1 reads them).
        inits = {(repo, s): init_stack(cli, repo, s) for s in example_stacks()}
        previews = {s: pool.submit(cli.run, "preview", "-s", s, cwd=repo, check=False, timeout=CLI_TIMEOUT)
                    for s in example_stacks()}
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


@dataclass(frozen=True)
class InfraStack:
    first_up: Run
    stack_file: Path


@pytest.fixture(scope="module")
def infra(ws: Workspace) -> InfraStack:
    """The existing-cluster infra stack, up: no GCP resource, Kueue already running, a secret token kubeconfig."""
    stack_file = ws.repo / f"Pulumi.{INFRA_STACK}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {
        "gcp:project": "my-gcp-project",
        f"{INFRA_PROJECT}:existingCluster": {"name": "local", "location": "us-east5-b"},
        f"{INFRA_PROJECT}:kueue": {"install": False},  # the harness's Kueue is running
    }}, sort_keys=False))
    ws.init_stack(ws.repo, INFRA_STACK)
    ws.pulumi("config", "set", "--secret", "kubeconfig", project=ws.repo, stack=INFRA_STACK,
              stdin=ws.kubeconfig_file.read_text())
    stored = yaml.safe_load(stack_file.read_text())["config"][f"{INFRA_PROJECT}:kubeconfig"]
    assert set(stored) == {"secure"}, stored
    up = ws.pulumi("up", "--yes", project=ws.repo, stack=INFRA_STACK)
    return InfraStack(up, stack_file)


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
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


# --- 1. every example stack ---------------------------------------------------------------------------------


def test_every_example_stack_loads_its_project_and_config(ws: Workspace, infra: InfraStack) -> None:
    since = len(ws.cli.history)
    examples = example_stacks()
    assert {"dev", "prod", "global", "existing"} <= set(examples), examples
    for stack in examples:
        ws.init_stack(ws.repo, stack)  # initialized by the fixture; checks the stack file was kept

    # Each needs GCP (a cluster to create, or in `existing` one to look up): the program gets past the config
    # check, registers its components and stops at the GCP provider's plugin. (Run by the fixture, in parallel.)
    previews = {s: ws.example_previews[s].result() for s in examples}
    for stack, run in previews.items():
        assert run.returncode != 0, run.describe()
        assert GCP_PLUGIN_MISSING in run.text and "pulumi-resource-gcp" in run.text, run.describe()
        assert not CONFIG_ERROR.search(run.text), run.describe()
        assert re.search(r"tpu-fallback:(platform|project):\w+ ", run.stdout), run.describe()  # components registered
        print(f"[engine-e2e] {stack}: stopped at the GCP plugin after {run.seconds:.1f} s, config valid")

    # A misspelt key: the one-line message, no traceback; `config rm` leaves the stack file as it was.
    dev_file = ws.repo / "Pulumi.dev.yaml"
    before = dev_file.read_text()
    ws.pulumi("config", "set", "clusterNme", "x", project=ws.repo, stack="dev")
    bad = ws.pulumi("preview", project=ws.repo, stack="dev", check=False)
    ws.pulumi("config", "rm", "clusterNme", project=ws.repo, stack="dev")
    assert dev_file.read_text() == before
    assert bad.returncode != 0, bad.describe()
    assert f"error: {BAD_KEY_MESSAGE}; known: clusterName, location," in bad.stdout, bad.describe()
    assert "Traceback" not in bad.text, bad.describe()
    assert GCP_PLUGIN_MISSING not in bad.text, bad.describe()  # refused before any resource
    errors = {line.strip() for line in bad.stdout.splitlines() if line.strip().startswith("error:")}
    assert len(errors) == 2 and "error: an unhandled error occurred: program exited with non-zero exit code: 1" in (
        errors), errors  # the message above, and the CLI's own line

    # The jobs stacks, against this module's existing-cluster infra stack.
    jobs_examples = stack_files(REPO_ROOT / "jobs")
    assert JOBS_STACK in jobs_examples
    for stack in jobs_examples:
        ws.configure_jobs_stack(stack)
        run = ws.pulumi("preview", "--diff", project=ws.jobs, stack=stack)
        steps = diff_steps(run.stdout)
        assert {s.type for s in changed(steps)} >= {"kubernetes:ray.io/v1:RayJob", "kubernetes:core/v1:ConfigMap"}, (
            run.describe())
        assert all(s.op == "create" for s in changed(steps)), run.describe()
        assert Step("read", "pulumi:pulumi:StackReference", INFRA_REF) in steps, run.describe()
    assert_no_unexpected_warnings(ws, since, previews.values())


# --- 2. the infra program in existing-cluster mode ---------------------------------------------------------


def test_existing_cluster_up_is_a_fixed_point_and_matches_the_offline_plan(ws: Workspace, infra: InfraStack
                                                                           ) -> None:
    since = len(ws.cli.history)
    up = infra.first_up
    # 17 objects, and the patch that makes plan A's flavor taints the stack's (the fallback is off in this mode).
    assert re.search(r"\+ 18 created", up.stdout), up.describe()

    # The gate ran for real: a dry-run create as its service account passed Kueue's webhooks.
    passed = [r for r in ws.gate.runs if r.succeeded]
    assert passed, f"no gate pod passed: {ws.gate.runs}"
    assert re.fullmatch(r"resourceflavor\.kueue\.x-k8s\.io/tpu-fallback-readiness-probe-\w+", passed[0].output), passed
    job = ws.client.get("batch/v1", "Job", "kueue-webhooks-ready", KUEUE_NAMESPACE) or {}
    assert scenario.condition_status(job, "Complete") == "True", job.get("status")
    assert not [f for f in ws.client.list(KUEUE_API, "ResourceFlavor") if "readiness-probe" in f["metadata"]["name"]]
    print(f"[engine-e2e] gate pods: {[(r.pod, r.succeeded, round(r.seconds_after_creation, 1)) for r in ws.gate.runs]}")

    # The stack's outputs are the offline plan's (but for the secret, which the CLI does not show).
    offline = ws.offline_infra()
    outputs = json.loads(ws.pulumi("stack", "output", "--json", project=ws.repo, stack=INFRA_STACK).stdout)
    assert outputs.pop("kubeconfig") == "[secret]"
    assert outputs == {k: v for k, v in offline.outputs.items() if k != "kubeconfig"}
    assert outputs["clusterEndpoint"] == ws.plane.server.removeprefix("https://")

    # The second up would be a no-op.
    expect_no_changes(ws, ws.repo, INFRA_STACK)

    # A config change updates the ClusterQueue's quota and nothing else.
    for key, value in SYSTEM_QUOTA_CHANGE.items():
        ws.pulumi("config", "set", "--path", f"queues.quotas.system.{key}", str(value), project=ws.repo,
                  stack=INFRA_STACK)
    stored = yaml.safe_load(infra.stack_file.read_text())["config"]
    assert stored[f"{INFRA_PROJECT}:queues"] == {"quotas": {"system": SYSTEM_QUOTA_CHANGE}}
    diff = ws.pulumi("preview", "--diff", project=ws.repo, stack=INFRA_STACK)
    assert changed(diff_steps(diff.stdout)) == [Step("update", CLUSTER_QUEUE, "local-queues-cluster-queue")], (
        diff.describe())
    assert sorted(value_changes(diff.stdout)) == ['~ cpu : "10" => "12"', '~ nominalQuota: "10" => "12"'], (
        diff.describe())  # the default-cpu quota, and the systemQuota output
    assert re.search(r"~ 1 to update\s+17 unchanged", diff.stdout), diff.describe()
    second = ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
    assert re.search(r"~ 1 updated\s+17 unchanged", second.stdout), second.describe()

    # The live objects are what the offline plan renders for the same config.
    offline = ws.offline_infra()
    objects = offline.kubernetes_objects()
    assert {o["kind"] for o in objects} >= set(SERVER_DEFAULTS)
    # The stack's server-side apply patches of those objects (plan A's flavor taints, with the fallback off):
    # their fields are checked on their own, and their annotations join the object's.
    patches = {(p["kind"], p["metadata"]["name"], p["metadata"].get("namespace")): p
               for p in offline.kubernetes_patches()}
    assert set(patches) == {("ResourceFlavor", "on-demand", None)}, patches
    notes = []
    for obj in objects:
        meta = obj["metadata"]
        live = ws.client.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        assert live is not None, f"{obj['kind']} {meta['name']} is not on the API server"
        where = f"{obj['kind']} {meta['name']}"
        patch = patches.get((obj["kind"], meta["name"], meta.get("namespace")))
        if patch is not None:
            for key, value in patch["spec"].items():  # an empty list the API server may store or drop
                assert live["spec"].get(key, []) == value, (where, key, live["spec"].get(key))
                live["spec"].pop(key, None)
            meta = {**meta, "annotations": {**meta.get("annotations", {}), **patch["metadata"]["annotations"]}}
        if obj["kind"] in SERVER_DEFAULTS:  # exactly the rendered spec plus the CRD's defaults
            for part in ("labels", "annotations"):
                assert live["metadata"].get(part) == meta.get(part), (where, part, live["metadata"].get(part))
            body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
            live_body = {k: v for k, v in live.items() if k not in ("apiVersion", "kind", "metadata", "status")}
            assert live_body == {**body, "spec": {**body.get("spec", {}), **SERVER_DEFAULTS[obj["kind"]]}}, (
                f"{where}: rendered {json.dumps(body, sort_keys=True)}\nlive {json.dumps(live_body, sort_keys=True)}")
        else:  # the rendered object is all there; the API server and the controllers add to it
            found = compare(obj, {k: v for k, v in live.items() if k != "status"})
            assert not found.different, (where, found.different)
            notes.append(f"{where}: live adds {sorted(k for k in found.extra if k not in VOLATILE_METADATA)}")
        if live["metadata"].get("finalizers"):
            notes.append(f"{where}: finalizers {live['metadata']['finalizers']}")
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    default_cpu = cq["spec"]["resourceGroups"][0]["flavors"][0]
    assert default_cpu["name"] == "default-cpu" and default_cpu["resources"][0] == {"name": "cpu", "nominalQuota": "12"}
    print("[engine-e2e] live vs offline:\n  " + "\n  ".join(notes))
    assert_no_unexpected_warnings(ws, since)


def test_with_the_fallback_off_the_stacks_patch_takes_a_left_over_close_away_a_plain_up_changes_nothing(
        ws: Workspace, infra: InfraStack) -> None:
    """A close left behind by a controller that never ran its way out, set here with the controller's own code
    (tpu_fallback/fallback/controller.py set_taint, a read-modify-write under its field manager). The flavor
    resource ignores `spec.nodeTaints` (ignore_changes), so a plain `pulumi up` and the preview see no change.
    With the fallback off (as in this existing-cluster stack) the stack owns plan A's taints through a forced
    server-side apply patch (render.kueue.flavor_taints_reset), applied when the fallback is turned off (the patch
    is created then): here its creation anew takes the field back over the controller's ownership, atomic list
    and all."""
    since = len(ws.cli.history)
    from tpu_fallback.fallback.controller import Controller, Settings
    from tpu_fallback.fallback.decide import Config
    from tpu_fallback.fallback.kube import Kube

    taint_key = "tpu-fallback.dev/plan-a-stockout"
    controller = Controller(Kube.from_kubeconfig(ws.plane.kubeconfig),
                            Settings(Config(("on-demand",), ("dws",), 600, 1800, taint_key)))

    def taints() -> list[dict[str, Any]]:
        flavor = ws.client.get(KUEUE_API, "ResourceFlavor", "on-demand") or {}
        return list((flavor.get("spec") or {}).get("nodeTaints") or [])

    controller.set_taint("on-demand", "1764583200")
    taint = {"key": taint_key, "value": "1764583200", "effect": "NoSchedule"}
    assert taints() == [taint]
    try:
        expect_no_changes(ws, ws.repo, INFRA_STACK)
        up = ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
        assert re.search(r"\d+ unchanged", up.stdout) and not re.search(r"updated|replaced", up.stdout), up.describe()
        assert taints() == [taint]
        # What the `up` that turns the fallback off does: create the patch (here created anew with --replace; a
        # refresh does not see the drift, since the controller's write took the field's ownership away from it).
        patch_urn = (f"urn:pulumi:{INFRA_STACK}::{INFRA_PROJECT}::tpu-fallback:platform:ExistingClusterPlatform$"
                     "tpu-fallback:queues:FallbackQueues$kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavorPatch::"
                     f"{INFRA_STACK}-queues-flavor-on-demand-taints-reset")
        up = ws.pulumi("up", "--yes", SKIP_PREVIEW, "--replace", patch_urn, project=ws.repo, stack=INFRA_STACK)
        assert re.search(r"1 replaced", up.stdout), up.describe()
        assert taints() == [], up.describe()
    finally:
        if taints():
            controller.set_taint("on-demand", None)
    # The state the later tests start from.
    ws.pulumi("refresh", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
    expect_no_changes(ws, ws.repo, INFRA_STACK)
    assert_no_unexpected_warnings(ws, since)


# --- 3. the jobs project by StackReference -----------------------------------------------------------------


def test_jobs_by_stack_reference_fall_back_and_keep_no_credential_in_state(ws: Workspace, infra: InfraStack
                                                                           ) -> None:
    since = len(ws.cli.history)
    ws.configure_jobs_stack(JOBS_STACK)
    ws.jobs_up.add(JOBS_STACK)
    up = ws.pulumi("up", "--yes", project=ws.jobs, stack=JOBS_STACK)
    names = json.loads(ws.pulumi("stack", "output", "jobs", "--json", project=ws.jobs, stack=JOBS_STACK).stdout)
    assert names == ["rayjob-tpu-v6e-dws-1", "rayjob-tpu-v6e-dws-2"], up.describe()

    # Kueue's verdicts: the jobs were created together, so either copy may take plan A.
    def decided(name: str) -> dict[str, Any] | None:
        return scenario.evaluated(scenario.workload_of(ws.client, "default", name))

    workloads = {n: ws.client.wait_for(functools.partial(decided, n), TIMEOUT, f"Kueue's decision on {n}")
                 for n in names}
    by_flavor = {min(scenario.flavors(w).get(TPU_GROUP, {"none"})): (n, w) for n, w in workloads.items()}
    assert set(by_flavor) == {"on-demand", "dws"}, {n: scenario.flavors(w) for n, w in workloads.items()}
    on_demand_job, on_demand = by_flavor["on-demand"]
    dws_job, dws = by_flavor["dws"]
    assert scenario.flavors(on_demand) == {**CPU_ONLY, TPU_GROUP: {"on-demand"}}
    assert scenario.condition_status(on_demand, "Admitted") == "True"
    assert scenario.provisioning_requests(ws.client, "default", on_demand) == []
    assert scenario.flavors(dws) == {**CPU_ONLY, TPU_GROUP: {"dws"}}
    assert {c["name"]: c["state"] for c in dws["status"].get("admissionChecks", [])} == {"dws-prov": "Pending"}
    (request,) = ws.client.wait_for(lambda: scenario.provisioning_requests(ws.client, "default", dws) or None,
                                    TIMEOUT, f"the ProvisioningRequest of {dws_job}")
    assert request["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert [p["count"] for p in request["spec"]["podSets"]] == [4]
    print(f"[engine-e2e] {on_demand_job}: on-demand, admitted; {dws_job}: dws, ProvisioningRequest "
          f"{request['metadata']['name']}")

    expect_no_changes(ws, ws.jobs, JOBS_STACK)

    # The live jobs hold everything the offline plan renders for them (with the offline infra outputs).
    offline_infra = ws.offline_infra()
    refs = {INFRA_REF: {"outputs": offline_infra.outputs, "secretOutputNames": sorted(offline_infra.secret_outputs)}}
    rendered = run_program(ws.jobs, JOBS_STACK, stack_references=refs).kubernetes_objects()
    assert sorted(o["metadata"]["name"] for o in rendered if o["kind"] == "RayJob") == names
    live_objects = []
    for obj in rendered:
        meta = obj["metadata"]
        live = ws.client.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        assert live is not None, f"{obj['kind']} {meta['name']} is not on the API server"
        live_objects.append((obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace")))
        found = compare({k: v for k, v in obj.items() if k != "status"},
                        {k: v for k, v in live.items() if k != "status"})
        assert not found.different, (obj["kind"], meta["name"], found.different)
        extra = {k: v for k, v in found.extra.items() if k not in VOLATILE_METADATA}
        print(f"[engine-e2e] {obj['kind']} {meta['name']}: live adds {json.dumps(extra, sort_keys=True)[:1500]}")

    # No credential in plain text in the state, which does hold them encrypted.
    infra_state = json.loads((ws.cli.backend_dir / ".pulumi" / "stacks" / INFRA_PROJECT / f"{INFRA_STACK}.json")
                             .read_text())
    stack_res = next(r for r in infra_state["checkpoint"]["latest"]["resources"] if r["type"] == "pulumi:pulumi:Stack")
    assert set(stack_res["outputs"]["kubeconfig"]) == {"4dabf18193072939515e22adb298388d", "ciphertext"}
    assert not ws.secrets_in(ws.cli.backend_dir), ws.secrets_in(ws.cli.backend_dir)

    check_a_new_endpoint_keeps_the_rayjobs(ws, names)

    ws.pulumi("destroy", "--yes", SKIP_PREVIEW, project=ws.jobs, stack=JOBS_STACK)
    ws.jobs_up.discard(JOBS_STACK)
    gone = [*live_objects,
            *((KUEUE_API, "Workload", w["metadata"]["name"], "default") for w in workloads.values()),
            ("autoscaling.x-k8s.io/v1", "ProvisioningRequest", request["metadata"]["name"], "default")]
    assert not wait_gone(ws.client, gone, TIMEOUT)
    assert not ws.secrets_in(ws.cli.backend_dir), ws.secrets_in(ws.cli.backend_dir)
    assert_no_unexpected_warnings(ws, since)


def check_a_new_endpoint_keeps_the_rayjobs(ws: Workspace, names: list[str]) -> None:
    """Issue 28 item 9: the same API server at a new address (GKE can change a cluster's endpoint or CA) updates the
    jobs stack's provider in place and keeps every RayJob (their UIDs); without the provider's cluster_identifier
    the engine replaces the provider and with it every running job. The infra kubeconfig is put back after."""
    uids = {n: (ws.client.get(RAY_API, "RayJob", n, "default") or {})["metadata"]["uid"] for n in names}
    moved = ws.kubeconfig.replace("https://127.0.0.1:", "https://localhost:")
    assert moved != ws.kubeconfig, "the harness's kubeconfig no longer names 127.0.0.1: this check means nothing"
    try:
        ws.pulumi("config", "set", "--secret", "kubeconfig", project=ws.repo, stack=INFRA_STACK, stdin=moved)
        ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
        preview = ws.pulumi("preview", "--diff", project=ws.jobs, stack=JOBS_STACK)
        steps = {(s.op, s.type) for s in changed(diff_steps(preview.stdout))}
        assert steps == {("update", "pulumi:providers:kubernetes")}, preview.describe()
        ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.jobs, stack=JOBS_STACK)
        after = {n: (ws.client.get(RAY_API, "RayJob", n, "default") or {}).get("metadata", {}).get("uid")
                 for n in names}
        assert after == uids
    finally:
        ws.pulumi("config", "set", "--secret", "kubeconfig", project=ws.repo, stack=INFRA_STACK,
                  stdin=ws.kubeconfig_file.read_text())
        ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
        ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.jobs, stack=JOBS_STACK)
    expect_no_changes(ws, ws.jobs, JOBS_STACK)


# --- 4. an immutable field ---------------------------------------------------------------------------------


def test_renaming_the_cluster_queue_replaces_its_local_queues(ws: Workspace, infra: InfraStack) -> None:
    """LocalQueue.spec.clusterQueue is immutable (Kueue 0.19.2 CRD rule `self == oldSelf`): a new ClusterQueue name
    must replace the LocalQueues (delete first: same name), not send an update the API server refuses. The other
    immutable fields of Kueue's CRDs (AdmissionCheck.spec.controllerName, TAS flavor fields) the program never
    changes; a RayJob's spec is replaced (tpu_fallback/components/jobs.py). After the jobs' test, so the stack keeps
    the new name (the destroy test renders the plan from the stack's config): no second up to rename it back."""
    since = len(ws.cli.history)
    ws.pulumi("config", "set", "--path", "queues.clusterQueue", "renamed-queue", project=ws.repo, stack=INFRA_STACK)
    diff = ws.pulumi("preview", "--diff", project=ws.repo, stack=INFRA_STACK)
    # The CLI prints replacements as "+-<type>: (replace)".
    replaced = re.search(r"\+-kubernetes:kueue\.x-k8s\.io/v1beta2:LocalQueue: \(replace\)", diff.stdout)
    assert replaced, diff.describe()
    assert not re.search(r"LocalQueue: \(update\)", diff.stdout), diff.describe()
    up = ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
    assert "error" not in up.stdout.lower(), up.describe()
    local = ws.client.get(KUEUE_API, "LocalQueue", "user-queue", "default") or {}
    assert local["spec"]["clusterQueue"] == "renamed-queue"
    assert ws.client.get(KUEUE_API, "ClusterQueue", "cluster-queue") is None
    expect_no_changes(ws, ws.repo, INFRA_STACK)
    assert_no_unexpected_warnings(ws, since)


# --- 5. destroy ---------------------------------------------------------------------------------------------


def test_infra_destroy_removes_every_object(ws: Workspace, infra: InfraStack) -> None:
    since = len(ws.cli.history)
    for stack in sorted(ws.jobs_up):  # left by a failed test 3: its Workloads would keep the ClusterQueue in use
        ws.pulumi("destroy", "--yes", SKIP_PREVIEW, project=ws.jobs, stack=stack)
        ws.jobs_up.discard(stack)
    objects = [(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
               for o in ws.offline_infra().kubernetes_objects()]
    for api, kind, name, ns in objects:
        assert ws.client.get(api, kind, name, ns) is not None, f"{kind} {name} missing before destroy"
    run = ws.pulumi("destroy", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
    assert re.search(r"- 18 deleted", run.stdout), run.describe()
    assert not wait_gone(ws.client, objects, TIMEOUT)
    for kind in SERVER_DEFAULTS:
        assert ws.client.list(KUEUE_API, kind) == [], kind
    assert ws.client.wait_for(lambda: not ws.client.list("v1", "Pod", KUEUE_NAMESPACE), TIMEOUT, "the gate's pods gone")
    # Every state file, backups and history included, and the CLI's home: no credential in plain text.
    assert not ws.secrets_in(ws.cli.backend_dir), ws.secrets_in(ws.cli.backend_dir)
    assert not ws.secrets_in(ws.cli.home), ws.secrets_in(ws.cli.home)
    assert_no_unexpected_warnings(ws, since)


# --- 6. the hardened example's Kubernetes half ------------------------------------------------------------------

HARDENED = "hardened"
HARDENED_K8S = "hardened-k8s"  # the example's config, on this control plane as an existing cluster
CREATED_CLUSTER_ONLY = ("clusterName", "gkeVersion", "network", "deletionProtection", "protect")


def test_the_hardened_examples_queues_go_through_the_engine(ws: Workspace) -> None:
    """Issue 28 item 10: Pulumi.hardened.yaml's Kubernetes half through the real engine. Its GCP half (private nodes,
    Cloud NAT, authorized networks, the node account on every pool) cannot run here and is checked on the offline
    plan (tests/test_hardened.py); the rest of its config goes on this control plane as an existing cluster
    (kueue.install false: the harness's Kueue; no PodMonitoring CRD here), `up` is a fixed point, and the Kueue
    objects live are exactly what the offline plan renders for the hardened stack itself. After the infra destroy,
    so the two stacks' objects (same names) never meet."""
    since = len(ws.cli.history)
    config = yaml.safe_load((REPO_ROOT / f"Pulumi.{HARDENED}.yaml").read_text())["config"]
    derived = {k: v for k, v in config.items() if k.partition(":")[2] not in CREATED_CLUSTER_ONLY}
    derived[f"{INFRA_PROJECT}:existingCluster"] = {"name": "local", "location": config[f"{INFRA_PROJECT}:location"]}
    derived[f"{INFRA_PROJECT}:kueue"] = {**config.get(f"{INFRA_PROJECT}:kueue", {}), "install": False,
                                         "podMonitoring": False}
    (ws.repo / f"Pulumi.{HARDENED_K8S}.yaml").write_text(yaml.safe_dump({"config": derived}, sort_keys=False))
    ws.init_stack(ws.repo, HARDENED_K8S)
    ws.pulumi("config", "set", "--secret", "kubeconfig", project=ws.repo, stack=HARDENED_K8S,
              stdin=ws.kubeconfig_file.read_text())
    rendered: list[dict[str, Any]] = []
    try:
        ws.pulumi("up", "--yes", project=ws.repo, stack=HARDENED_K8S)
        expect_no_changes(ws, ws.repo, HARDENED_K8S)
        rendered += [o for o in run_program(REPO_ROOT, HARDENED).kubernetes_objects() if o["kind"] in SERVER_DEFAULTS]
        assert {o["kind"] for o in rendered} == set(SERVER_DEFAULTS)
        for obj in rendered:
            meta = obj["metadata"]
            live = ws.client.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            assert live is not None, f"{obj['kind']} {meta['name']} is not on the API server"
            live_spec = dict(live["spec"])
            if not live_spec.get("nodeTaints"):  # the stack's own patch of plan A's taints (fallback off here)
                live_spec.pop("nodeTaints", None)
            assert live_spec == {**obj.get("spec", {}), **SERVER_DEFAULTS[obj["kind"]]}, (obj["kind"], meta["name"])
        print(f"[engine-e2e] hardened: {len(rendered)} Kueue objects live as the hardened stack's offline plan")
    finally:
        ws.pulumi("destroy", "--yes", SKIP_PREVIEW, project=ws.repo, stack=HARDENED_K8S)
    assert not wait_gone(ws.client, [(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
                                     for o in rendered], TIMEOUT)
    assert_no_unexpected_warnings(ws, since)
