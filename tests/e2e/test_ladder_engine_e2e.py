"""A capacity ladder through the real Pulumi engine (issue 27, done-when: a 4-rung stack `up`, then a no-op
`preview --expect-no-changes`).

The infra program runs in existing-cluster mode (as tests/e2e/test_engine_e2e.py's stack: `kueue.install: false`, a
secret token kubeconfig, no GCP at all) with the example ladder of Pulumi.ladder.yaml: reservation -> on-demand ->
spot -> flex-start on v6e 4x4. Against one ControlPlane (etcd, kube-apiserver, kube-controller-manager, the real
Kueue v0.19.2), the module checks:

1. `up` creates the ladder's Kueue objects and a second `preview --expect-no-changes` is a no-op (the spot flavors'
   declared taint and the forced taint-reset patches of every closable rung, the fallback being off here, included);
2. the live ResourceFlavors and ClusterQueue are the offline plan's, in ladder order;
3. the real Kueue walks the ladder: RayJobs of the jobs project submitted one at a time land on the reservation, then
   on-demand, a `preemptible: true` one on spot, and the next ordinary one skips both spot flavors for flex-start;
4. `destroy` removes every object the stack made.

The engine, its hermetic CLI and the gate runner are tests/e2e/engine_cli.py's (built by tests/e2e/build_engine.sh).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import scenario
from tests.e2e.engine_cli import (
    REPO_ROOT,
    GateRunner,
    PulumiCli,
    Run,
    build_engine,
    copy_project,
    diff_steps,
    token_kubeconfig,
    value_changes,
    wait_gone,
)
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import ProgramRun, run_program
from tpu_fallback.render.kueue import KUEUE_NAMESPACE

pytestmark = pytest.mark.e2e

VENV = REPO_ROOT / "venv"
PROJECT = "tpu-fallback"
STACK = "ladder-local"
KUEUE_API = scenario.KUEUE_API
CLI_TIMEOUT = 300.0
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
TPU_GROUP = "tpu-group"


@dataclass
class Env:
    root: Path
    repo: Path
    cli: PulumiCli
    client: KubeClient
    server: str
    kubeconfig: str

    def pulumi(self, *args: str, stdin: str | None = None, check: bool = True) -> Run:
        return self.cli.run(*args, "-s", STACK, cwd=self.repo, stdin=stdin, check=check, timeout=CLI_TIMEOUT)

    def offline(self) -> ProgramRun:
        return run_program(self.repo, STACK, secret_overrides={"kubeconfig": self.kubeconfig})


def example_ladder() -> dict[str, Any]:
    """The example stack's capacity settings (Pulumi.ladder.yaml), for an existing cluster."""
    config = yaml.safe_load((REPO_ROOT / "Pulumi.ladder.yaml").read_text())["config"]
    return {key: config[f"{PROJECT}:{key}"] for key in ("location", "tpu", "ladder")}


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    from tests.e2e.controlplane import ControlPlane

    engine = build_engine()
    if not (VENV / "bin" / "python").exists():
        pytest.fail(f"no virtualenv at {VENV}: run ./scripts/setup")
    root = Path(tempfile.mkdtemp(prefix="tpu-fallback-ladder-engine-"))
    cli: PulumiCli | None = None
    started = time.monotonic()
    try:
        repo = copy_project(REPO_ROOT, root / "repo", VENV)
        cli = PulumiCli(engine, root)
        cli.login()
        with ControlPlane() as plane:
            kubeconfig = token_kubeconfig(plane.server, plane.ca_file.read_bytes(), plane.token)
            with GateRunner(plane.server, plane.ca_file, plane.token, KUEUE_NAMESPACE):
                yield Env(root, repo, cli, plane.client, plane.server, kubeconfig)
    finally:
        print(f"\n[ladder-engine] module {time.monotonic() - started:.1f} s; pulumi commands:")
        if cli is not None:
            print(cli.summary())
        if os.environ.get("KEEP_E2E") != "1":
            shutil.rmtree(root, ignore_errors=True)


def expect_no_changes(env: Env) -> Run:
    run = env.pulumi("preview", "--expect-no-changes", "--diff", check=False)
    if run.returncode != 0:
        steps = "\n".join(f"  {s.op} {s.type} {s.name}" for s in diff_steps(run.stdout) if s.op not in ("same",
                                                                                                           "read"))
        pytest.fail(f"the second preview is not a no-op:\n{steps}\n" + "\n".join(value_changes(run.stdout))
                    + f"\n\n{run.describe()}")
    return run


def test_a_four_rung_ladder_up_is_a_fixed_point_kueue_walks_it_and_destroy_cleans_up(env: Env) -> None:
    ladder = example_ladder()
    assert [r["kind"] for r in ladder["ladder"]] == ["reservation", "onDemand", "spot", "flexStart"]
    stack_file = env.repo / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {
        "gcp:project": "my-gcp-project",
        f"{PROJECT}:existingCluster": {"name": "local", "location": ladder["location"]},
        f"{PROJECT}:kueue": {"install": False},  # the harness's Kueue is running
        **{f"{PROJECT}:{key}": value for key, value in ladder.items()},
    }}, sort_keys=False))
    env.cli.run("stack", "init", STACK, cwd=env.repo, timeout=CLI_TIMEOUT)
    env.pulumi("config", "set", "--secret", "kubeconfig", stdin=env.kubeconfig)

    # 1. up, then a no-op preview
    up = env.pulumi("up", "--yes")
    offline = env.offline()
    objects = offline.kubernetes_objects()
    patches = offline.kubernetes_patches()
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    created = re.search(r"\+ (\d+) created", up.stdout)
    assert created, up.describe()
    print(f"[ladder-engine] up: {created.group(0)} in {up.seconds:.1f} s")
    expect_no_changes(env)

    # 2. the live objects are the offline plan's, in ladder order
    names = ["default-cpu", "reserved", "on-demand", "spot", "spot-2", "flex", "flex-2"]  # 4x4: a pool per slice
    assert sorted(f["metadata"]["name"] for f in flavors) == sorted(names)
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    live_cq = env.client.get(KUEUE_API, "ClusterQueue", cq["metadata"]["name"])
    assert live_cq is not None
    assert [f["name"] for f in live_cq["spec"]["resourceGroups"][0]["flavors"]] == names
    assert live_cq["spec"]["admissionChecksStrategy"] == cq["spec"]["admissionChecksStrategy"]
    # the fallback is off (no Kueue of this stack's): every closable rung's taints are the stack's, by a forced patch
    assert sorted(p["metadata"]["name"] for p in patches if p["kind"] == "ResourceFlavor") == sorted(
        ["reserved", "on-demand", "spot", "spot-2"])
    for flavor in flavors:
        live = env.client.get(KUEUE_API, "ResourceFlavor", flavor["metadata"]["name"])
        assert live is not None, flavor["metadata"]["name"]
        assert live["spec"]["nodeLabels"] == flavor["spec"]["nodeLabels"]
        assert live["spec"].get("nodeTaints", []) == flavor["spec"].get("nodeTaints", []), live
    assert env.client.get(KUEUE_API, "ResourceFlavor", "spot")["spec"]["nodeTaints"] == [SPOT_TAINT]  # type: ignore[index]
    env.client.wait_for(lambda: scenario.true_condition(env.client.get(KUEUE_API, "ClusterQueue", "cluster-queue"),
                                                        "Active"), 60, "ClusterQueue cluster-queue Active")

    # 3. the real Kueue walks the ladder (quota decides here: no nodes exist, so nothing runs)
    refs = {"organization/tpu-fallback/dev": {"outputs": copy.deepcopy(offline.outputs),
                                              "secretOutputNames": sorted(offline.secret_outputs)}}
    jobs = run_program(REPO_ROOT / "jobs", "dev", {"jobs": [
        {"name": "steady", "count": 3, "queue": "default/user-queue"},
        {"name": "ckpt", "count": 1, "queue": "default/user-queue", "preemptible": True}]},
        stack_references=refs).kubernetes_objects()
    by_name = {o["metadata"]["name"]: o for o in jobs if o["kind"] == "RayJob"}
    order = ["steady-1", "steady-2", "ckpt-1", "steady-3"]
    assert set(order) <= set(by_name), sorted(by_name)
    timings = scenario.submit(env.client, [o for o in jobs if o["kind"] != "RayJob"]
                              + [by_name[name] for name in order])
    landed = {}
    for name in order:
        workload = scenario.workload_of(env.client, "default", name)
        assert workload is not None and scenario.condition_status(workload, "QuotaReserved") == "True", workload
        landed[name] = scenario.flavors(workload)[TPU_GROUP]
    print(f"[ladder-engine] flavors: {landed}; seconds to Kueue's decision: {timings}")
    assert landed == {"steady-1": {"reserved"}, "steady-2": {"on-demand"}, "ckpt-1": {"spot"},
                      "steady-3": {"flex"}}
    for name in order:  # and their Workloads, whose quota would keep Kueue from deleting the ClusterQueue
        env.client.delete("ray.io/v1", "RayJob", name, "default")
    for workload in env.client.list(KUEUE_API, "Workload", "default"):
        env.client.delete(KUEUE_API, "Workload", workload["metadata"]["name"], "default")

    # 4. destroy removes every object
    env.pulumi("destroy", "--yes", "--skip-preview")  # a preview of a destroy runs no program but costs a pass
    gone = [(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects]
    left = wait_gone(env.client, gone, 120)
    assert not left, left
