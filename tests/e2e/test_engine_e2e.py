"""The real Pulumi engine against the local control plane (issue 11, item 4): the infra program in existing-cluster
mode and the jobs project on it.

The CLI (v3.274.1), the Python language host (v3.188.0) and the Kubernetes provider (4.25.0) are built from Go
modules by tests/e2e/build_engine.sh and run hermetically (tests/e2e/engine_cli.py): a throw-away PULUMI_HOME, a
local file backend, no update check, no plugin download, a passphrase secrets provider, the engine's bin dir first
on PATH. They run on a copy of the repository in a temporary directory whose Pulumi.yaml files point at this
repository's venv, against one ControlPlane (etcd, kube-apiserver, kube-controller-manager, Kueue v0.19.2) for the
whole module (tests/e2e/engine_workspace.py):

1. every jobs example stack loads its project and config and previews against the infra stack below;
2. the infra program in existing-cluster mode (`kueue.install: false`, a secret token kubeconfig; no GCP at all):
   `up`, a second preview with no changes, a config change that updates the ClusterQueue only, and the live Kueue
   objects equal to what the offline plan renders for the same config;
3. the jobs project against that stack by StackReference: Kueue gives one RayJob the on-demand flavor and the other
   dws with a ProvisioningRequest, a second preview has no changes, `destroy` removes the jobs, and the state holds
   neither the kubeconfig nor the token in plain text;
4. a new ClusterQueue name replaces the LocalQueues (their spec.clusterQueue is immutable) rather than update them;
5. `destroy` of the infra stack removes every object it made.

The infra project's example stacks under `pulumi preview` and the hardened example's Kubernetes half:
test_engine_examples_e2e.py (its own control plane, so pytest-xdist runs the two side by side).

The jobs test (3) also moves the infra kubeconfig to https://localhost:<port> (the same API server): the jobs
stack's provider is updated in place and no RayJob is replaced (its cluster_identifier).

There is no kubelet, so the Kueue readiness gate's pod would stay Pending and `up` would wait 15 minutes for its
Job: engine_cli.GateRunner runs the gate's own check (the server-side dry-run create of its probe ResourceFlavor, as
the gate's service account, through Kueue's real webhooks) and reports the pod Succeeded or Failed by its result.

The tests share the stacks and run in file order (the infra stack is created once, by the `infra` fixture, and
destroyed last); each one also runs alone. Wall times of every pulumi command are printed at the end (-s).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import scenario
from tests.e2e.engine_cli import REPO_ROOT, Run, Step, compare, diff_steps, stack_files, value_changes, wait_gone
from tests.e2e.engine_workspace import (
    CLUSTER_QUEUE,
    CPU_ONLY,
    INFRA_PROJECT,
    INFRA_REF,
    INFRA_STACK,
    JOBS_STACK,
    KUEUE_API,
    RAY_API,
    SERVER_DEFAULTS,
    SKIP_PREVIEW,
    SYSTEM_QUOTA_CHANGE,
    TIMEOUT,
    TPU_GROUP,
    VOLATILE_METADATA,
    Workspace,
    assert_no_unexpected_warnings,
    changed,
    expect_no_changes,
    open_workspace,
    timed,
)
from tpu_fallback.offline.mockrun import run_program
from tpu_fallback.render.kueue import KUEUE_NAMESPACE

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ws() -> Iterator[Workspace]:
    with open_workspace(example_previews=False) as workspace:
        yield workspace


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
    with timed(request):
        yield


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


# --- 1. the jobs project's example stacks ---------------------------------------------------------------------


def test_the_jobs_example_stacks_preview_against_the_infra_stack(ws: Workspace, infra: InfraStack) -> None:
    """Every jobs example stack loads its project and config and previews its RayJobs against this module's
    existing-cluster infra stack, read by StackReference. (The infra project's example stacks:
    test_engine_examples_e2e.py.)"""
    since = len(ws.cli.history)
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
    assert_no_unexpected_warnings(ws, since)


# --- 2. the infra program in existing-cluster mode ---------------------------------------------------------


def test_existing_cluster_up_is_a_fixed_point_and_matches_the_offline_plan(ws: Workspace, infra: InfraStack
                                                                           ) -> None:
    since = len(ws.cli.history)
    up = infra.first_up
    # 17 objects, the patch that makes plan A's flavor taints the stack's (the fallback is off in this mode), and
    # the Platform component (tpu_fallback.api) the program builds them with.
    assert re.search(r"\+ 19 created", up.stdout), up.describe()

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
    assert re.search(r"~ 1 to update\s+18 unchanged", diff.stdout), diff.describe()
    second = ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=INFRA_STACK)
    assert re.search(r"~ 1 updated\s+18 unchanged", second.stdout), second.describe()

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
    from tpu_fallback.fallback.config import Settings
    from tpu_fallback.fallback.controller import Controller
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
        patch_urn = (f"urn:pulumi:{INFRA_STACK}::{INFRA_PROJECT}::tpu-fallback:index:Platform$"
                     "tpu-fallback:platform:ExistingClusterPlatform$"
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
    assert re.search(r"- 19 deleted", run.stdout), run.describe()
    assert not wait_gone(ws.client, objects, TIMEOUT)
    for kind in SERVER_DEFAULTS:
        assert ws.client.list(KUEUE_API, kind) == [], kind
    assert ws.client.wait_for(lambda: not ws.client.list("v1", "Pod", KUEUE_NAMESPACE), TIMEOUT, "the gate's pods gone")
    # Every state file, backups and history included, and the CLI's home: no credential in plain text.
    assert not ws.secrets_in(ws.cli.backend_dir), ws.secrets_in(ws.cli.backend_dir)
    assert not ws.secrets_in(ws.cli.home), ws.secrets_in(ws.cli.home)
    assert_no_unexpected_warnings(ws, since)
