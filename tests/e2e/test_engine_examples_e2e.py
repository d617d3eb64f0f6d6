"""The real Pulumi engine (tests/e2e/engine_workspace.py) on the infra project's example stacks.

1. every example stack of the infra project loads its project and config under `pulumi preview` (the GCP stacks
   stop at the GCP provider, which cannot be built here), and a misspelt key fails with its one-line message; the
   previews need no cluster, so the `ws` fixture runs them (in parallel) while the control plane starts;
2. the hardened example's Kubernetes half (Pulumi.hardened.yaml as an existing-cluster stack): `up`, a fixed point,
   its live Kueue objects equal to the hardened stack's offline plan, `destroy`.

The existing-cluster infra stack and the jobs project through the engine: test_engine_e2e.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.engine_cli import REPO_ROOT, wait_gone
from tests.e2e.engine_workspace import (
    BAD_KEY_MESSAGE,
    CONFIG_ERROR,
    GCP_PLUGIN_MISSING,
    INFRA_PROJECT,
    SERVER_DEFAULTS,
    SKIP_PREVIEW,
    TIMEOUT,
    Workspace,
    assert_no_unexpected_warnings,
    example_stacks,
    expect_no_changes,
    open_workspace,
    timed,
)
from tpu_fallback.offline.mockrun import run_program

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ws() -> Iterator[Workspace]:
    with open_workspace(example_previews=True) as workspace:
        yield workspace


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
    with timed(request):
        yield


# --- 1. every example stack of the infra project ----------------------------------------------------------------


def test_every_example_stack_loads_its_project_and_config(ws: Workspace) -> None:
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
    assert_no_unexpected_warnings(ws, since, previews.values())


# --- 2. the hardened example's Kubernetes half ------------------------------------------------------------------

HARDENED = "hardened"
HARDENED_K8S = "hardened-k8s"  # the example's config, on this control plane as an existing cluster
CREATED_CLUSTER_ONLY = ("clusterName", "gkeVersion", "network", "deletionProtection", "protect")


def test_the_hardened_examples_queues_go_through_the_engine(ws: Workspace) -> None:
    """Issue 28 item 10: Pulumi.hardened.yaml's Kubernetes half through the real engine. Its GCP half (private nodes,
    Cloud NAT, authorized networks, the node account on every pool) cannot run here and is checked on the offline
    plan (tests/test_hardened.py); the rest of its config goes on this control plane as an existing cluster
    (kueue.install false: the harness's Kueue; no PodMonitoring CRD here), `up` is a fixed point, and the Kueue
    objects live are exactly what the offline plan renders for the hardened stack itself. On this module's
    control plane, where no other stack makes objects of the same names."""
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
