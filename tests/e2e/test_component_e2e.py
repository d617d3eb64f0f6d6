"""The public components on the real engine (Pulumi CLI v3.274.1, its Python and YAML language hosts, the Kubernetes
provider), against a real kube-apiserver with Kueue v0.19.2:

1. A Pulumi YAML program adds the component package from the checkout (`pulumi package add <copy>/provider`), `up`s a
   Platform in existing-cluster mode (a secret token kubeconfig, the harness's Kueue), and the queue objects are in
   the API server; a second preview has no changes; the outputs are the stack outputs, the kubeconfig a secret. A bad
   setting is one line naming it.
2. A stack made by the infra program as it was before the components (its components registered at the stack's
   root; that program is below, copied from tpu_fallback/programs/infra.py at 65f7d49) keeps every resource when the
   program becomes a user of Platform: the preview creates the Platform component and nothing else, deletes and
   replaces nothing, and the objects in the API server are the same objects (same uid) after `up`.

The two stacks put the same cluster-wide Kueue objects on the same API server, so each test destroys its stack.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.component_package import prepare_provider
from tests.e2e.engine_cli import wait_gone
from tests.e2e.engine_workspace import (
    INFRA_PROJECT,
    KUEUE_API,
    SKIP_PREVIEW,
    TIMEOUT,
    VENV,
    Workspace,
    open_workspace,
    timed,
)

pytestmark = pytest.mark.e2e

PLATFORM = "tpu-fallback:index:Platform"
YAML_QUEUE = "yaml-queue"


@pytest.fixture(scope="module")
def ws() -> Iterator[Workspace]:
    with open_workspace(example_previews=False) as workspace:
        yield workspace


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
    with timed(request):
        yield


def yaml_program(properties: dict[str, Any]) -> str:
    return yaml.safe_dump({
        "name": "yaml-platform",
        "runtime": "yaml",
        "config": {"kubeconfig": {"type": "string", "secret": True}},
        "resources": {"platform": {"type": PLATFORM, "properties": properties}},
        "outputs": {name: f"${{platform.{name}}}" for name in
                    ("clusterName", "clusterQueue", "localQueues", "flavors", "tpu", "kubeconfig")},
    }, sort_keys=False)


PROPERTIES: dict[str, Any] = {
    "project": "my-gcp-project",
    "existingCluster": {"name": "local", "location": "us-east5-b"},
    "kubeconfig": "${kubeconfig}",
    "kueue": {"install": False},  # the harness's Kueue is running
    "queues": {"clusterQueue": YAML_QUEUE, "localQueues": [{"namespace": "default", "name": "yaml-user-queue"}]},
}


def test_a_yaml_program_adds_the_package_and_builds_a_platform(ws: Workspace) -> None:
    provider = prepare_provider(ws.repo, VENV, ws.cli.home)
    project = ws.root / "yaml-platform"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(yaml_program(PROPERTIES))
    ws.cli.run("package", "add", str(provider), cwd=project, timeout=600)
    packages = yaml.safe_load((project / "Pulumi.yaml").read_text()).get("packages", {})
    assert packages == {"tpu-fallback": str(provider)}, packages
    ws.cli.run("stack", "init", "dev", cwd=project)
    ws.cli.run("config", "set", "--secret", "kubeconfig", cwd=project, stdin=ws.kubeconfig)
    try:
        up = ws.cli.run("up", "--yes", cwd=project, timeout=900)
        assert "error" not in up.stderr.lower(), up.describe()
        queue = ws.client.get(KUEUE_API, "ClusterQueue", YAML_QUEUE)
        assert queue is not None, "the ClusterQueue the YAML program's Platform makes"
        flavors = [f["name"] for group in queue["spec"]["resourceGroups"] for f in group["flavors"]]
        assert flavors == ["default-cpu", "on-demand", "dws"], flavors
        assert ws.client.get(KUEUE_API, "LocalQueue", "yaml-user-queue", "default") is not None

        outputs = json.loads(ws.cli.run("stack", "output", "--json", cwd=project).stdout)
        assert outputs["kubeconfig"] == "[secret]"
        assert outputs["clusterQueue"] == YAML_QUEUE and outputs["clusterName"] == "local"
        assert outputs["localQueues"] == [{"namespace": "default", "name": "yaml-user-queue"}]
        assert outputs["flavors"] == {"system": "default-cpu", "onDemand": "on-demand", "flexStart": "dws"}
        assert outputs["tpu"]["chipsPerSlice"] == 16  # the default v6e 4x4, as the stack's
        state = "\n".join(p.read_text(errors="replace") for p in ws.cli.backend_dir.rglob("*.json"))
        assert ws.plane.token not in state, "the kubeconfig's token in the state in plain text"

        ws.cli.run("preview", "--expect-no-changes", cwd=project, timeout=600)

        # A bad setting: one line naming it, before anything changes.
        program = yaml.safe_load((project / "Pulumi.yaml").read_text())
        program["resources"]["platform"]["properties"]["tpu"] = {"type": "v9", "topology": "4x4"}
        (project / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
        failed = ws.cli.run("preview", cwd=project, check=False, timeout=600)
        said = failed.stdout + failed.stderr
        assert failed.returncode != 0
        assert 'tpu.type "v9" is invalid: unknown TPU family; valid: v6e, v5e, v5p, v4, tpu7x' in said, said
        assert "Traceback" not in said, said
    finally:
        ws.cli.run("destroy", "--yes", SKIP_PREVIEW, cwd=project, timeout=900)
    assert not wait_gone(ws.client, [(KUEUE_API, "ClusterQueue", YAML_QUEUE, None)], TIMEOUT)


# The infra program as it was before tpu_fallback.api (tpu_fallback/programs/infra.py at 65f7d49, its
# existing-cluster branch): the component registered at the stack's root.
PROGRAM_BEFORE = textwrap.dedent('''\
    import pulumi

    from tpu_fallback.components.existing import ExistingClusterPlatform, ExistingClusterPlatformArgs
    from tpu_fallback.programs.infra import load_settings

    settings = load_settings()
    kubeconfig = pulumi.Config().require_secret("kubeconfig") if settings.existing_cluster.kubeconfig else None
    existing = ExistingClusterPlatform(settings.existing_cluster.name,
                                       ExistingClusterPlatformArgs(settings, kubeconfig))
    for name, value in existing.outputs.exports().items():
        pulumi.export(name, value)
''')
STACK = "before"


def test_a_stack_made_before_the_components_keeps_every_resource(ws: Workspace) -> None:
    main = ws.repo / "__main__.py"
    program_now = main.read_text()
    stack_file = ws.repo / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {
        "gcp:project": "my-gcp-project",
        f"{INFRA_PROJECT}:existingCluster": {"name": "local", "location": "us-east5-b"},
        f"{INFRA_PROJECT}:kueue": {"install": False},
    }}, sort_keys=False))
    ws.init_stack(ws.repo, STACK)
    ws.pulumi("config", "set", "--secret", "kubeconfig", project=ws.repo, stack=STACK, stdin=ws.kubeconfig)
    try:
        main.write_text(PROGRAM_BEFORE)
        ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=STACK, timeout=900)
        before = urns(ws)
        assert not [u for u in before if PLATFORM in u]
        uids = live_uids(ws)
        assert uids, "no Kubernetes object in the stack"

        main.write_text(program_now)
        preview = json.loads(ws.pulumi("preview", "--json", project=ws.repo, stack=STACK, timeout=600).stdout)
        ops: dict[str, list[str]] = {}
        for step in preview.get("steps", []):
            ops.setdefault(step["op"], []).append(step["urn"])
        assert [u.rsplit("::", 1)[0].rsplit("::", 1)[1] for u in ops.pop("create", [])] == [PLATFORM], ops
        assert set(ops) <= {"same"}, {op: urns for op, urns in ops.items() if op != "same"}
        # Every resource the stack had is the same one (by alias), the stack included.
        assert preview["changeSummary"] == {"create": 1, "same": len(before)}, preview["changeSummary"]

        ws.pulumi("up", "--yes", SKIP_PREVIEW, project=ws.repo, stack=STACK, timeout=900)
        after = urns(ws)
        assert len(after) == len(before) + 1
        assert all(u in after or u.replace(f"::{INFRA_PROJECT}::", f"::{INFRA_PROJECT}::{PLATFORM}$", 1) in after
                   for u in before if "pulumi:pulumi:Stack" not in u and "pulumi:providers:" not in u), (before, after)
        assert live_uids(ws) == uids, "an object was deleted and created again"
    finally:
        main.write_text(program_now)
        ws.pulumi("destroy", "--yes", SKIP_PREVIEW, project=ws.repo, stack=STACK, timeout=900)
        stack_file.unlink(missing_ok=True)


def urns(ws: Workspace) -> list[str]:
    exported = json.loads(ws.pulumi("stack", "export", project=ws.repo, stack=STACK).stdout)
    return [r["urn"] for r in exported["deployment"]["resources"]]


def live_uids(ws: Workspace) -> dict[str, str]:
    """kind/name -> uid of the Kueue objects the stack made."""
    found: dict[str, str] = {}
    for kind in ("ResourceFlavor", "ClusterQueue"):
        for obj in ws.client.list(KUEUE_API, kind):
            found[f"{kind}/{obj['metadata']['name']}"] = obj["metadata"]["uid"]
    for obj in ws.client.list(KUEUE_API, "LocalQueue", "default"):
        found[f"LocalQueue/{obj['metadata']['name']}"] = obj["metadata"]["uid"]
    return found


def test_nothing_is_left_behind(ws: Workspace) -> None:
    """Both stacks destroyed: no queue object of theirs is left on the API server."""
    assert not ws.client.list(KUEUE_API, "ClusterQueue")
    shutil.rmtree(ws.root / "yaml-platform", ignore_errors=True)
