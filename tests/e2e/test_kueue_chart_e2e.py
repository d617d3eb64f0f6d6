"""The Helm values this project gives Kueue's chart, against the pinned chart itself (from the Go module).

The chart has no values.schema.json, so Helm ignores a key it does not know: a misspelled or outdated key
would silently not apply. These tests read the chart build_components.sh copies from sigs.k8s.io/kueue, and
render it with the dev stack's values through the real Kubernetes provider (engine/chart_render: helm.v4.Chart
into renderYamlToDirectory, no cluster) to check that what the values say reaches Kueue's objects.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.controlplane import WEBHOOK_SECRET, WEBHOOK_SERVICE, build_components
from tests.e2e.engine_cli import REPO_ROOT, PulumiCli, build_engine, set_virtualenv
from tpu_fallback.model.kueue_features import FEATURE_GATES
from tpu_fallback.model.labels import NODEPOOL_LABEL
from tpu_fallback.model.settings import KueueSettings
from tpu_fallback.offline.mockrun import run_program
from tpu_fallback.render.files import load_template
from tpu_fallback.render.kueue import KUEUE_NAMESPACE, kueue_helm_values, kueue_manager_config

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def chart_values() -> dict[str, Any]:
    chart = build_components().kueue_chart
    chart_file = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert chart_file["version"].lstrip("v") == KueueSettings().version  # the chart of the pinned version
    values: dict[str, Any] = yaml.safe_load((chart / "values.yaml").read_text())
    return values


def key_paths(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            yield from key_paths(child, path)


# The chart's own free-form maps: anything below them is data, not a chart key.
FREE_FORM = ("controllerManager.nodeSelector.", "managerConfig.controllerManagerConfigYaml")


def unknown_keys(values: dict[str, Any], chart_values: dict[str, Any]) -> list[str]:
    """The key paths of `values` that the chart's values.yaml does not have (Helm would ignore them)."""
    known = set(key_paths(chart_values))
    return [p for p in key_paths(values) if p not in known and not p.startswith(FREE_FORM)]


def test_every_value_we_set_is_a_key_of_the_chart(chart_values: dict[str, Any]) -> None:
    ours = kueue_helm_values(KueueSettings(pod_monitoring=True), "default-pool")
    unknown = unknown_keys(ours, chart_values)
    assert not unknown, f"keys the Kueue chart does not have (Helm would ignore them): {unknown}"
    known = set(key_paths(chart_values))
    assert "controllerManager.featureGates" in known and "controllerManager.nodeSelector" in known


def test_the_manager_config_is_the_charts_default_plus_ours(chart_values: dict[str, Any]) -> None:
    default = yaml.safe_load(chart_values["managerConfig"]["controllerManagerConfigYaml"])
    assert load_template("kueue-manager-config.yaml") == default  # the vendored copy is the chart's, unchanged
    config = kueue_manager_config(KueueSettings(pod_monitoring=True))
    changed = {k for k in config if config[k] != default.get(k)}
    assert changed == {"metrics"} and config["metrics"] == {**default["metrics"], "enableClusterQueueResources": True}
    assert "ray.io/rayjob" in config["integrations"]["frameworks"]


def test_the_feature_gate_list_is_the_pinned_kueues() -> None:
    # Kueue's source, in the Go module cache that build_components.sh filled (a download only on a cold cache).
    go = shutil.which("go") or "/usr/local/go/bin/go"
    listing = subprocess.run([go, "mod", "download", "-json", f"sigs.k8s.io/kueue@v{KueueSettings().version}"],
                             capture_output=True, text=True, check=True, cwd=tempfile.gettempdir(),
                             env={**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod"})
    features = Path(json.loads(listing.stdout)["Dir"]) / "pkg" / "features" / "kube_features.go"
    declared = set(re.findall(r"^\s+([A-Z][A-Za-z0-9]+) featuregate\.Feature = ", features.read_text(), re.M))
    assert declared == FEATURE_GATES[KueueSettings().version]


# --- the chart rendered by the real provider -------------------------------------------------------------------

CHART_RENDER = REPO_ROOT / "tests" / "e2e" / "engine" / "chart_render"
MISSPELT = {"controllerManager": {"featureGatez": [{"name": "TopologyAwareScheduling", "enabled": True}]},
            "enablePrometeus": True}


def released_chart(module_chart: Path, dest: Path, version: str) -> Path:
    """The chart as Kueue's release publishes it (oci://registry.k8s.io/kueue/charts/kueue): the module's copy
    with the image set the way hack/helm-chart-package.sh sets it for a promoted version (registry.k8s.io/kueue,
    the version's tag, IfNotPresent); the module's values.yaml names the staging image of the release branch."""
    shutil.copytree(module_chart, dest)
    values_file = dest / "values.yaml"
    values = yaml.safe_load(values_file.read_text())
    values["controllerManager"]["manager"]["image"] = {
        "repository": "registry.k8s.io/kueue/kueue", "tag": f"v{version}", "pullPolicy": "IfNotPresent"}
    values_file.write_text(yaml.safe_dump(values, sort_keys=False))
    return dest


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def rendered_objects(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> object, from the files the provider's renderYamlToDirectory wrote."""
    objects = {}
    for path in sorted(directory.rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):  # libyaml: the CRDs are MBs
            if doc:
                objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


@pytest.fixture(scope="module")
def provider_render(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The dev stack's Helm values (its Release, from the offline plan) and the same values with two misspelt keys,
    each rendered by `pulumi up` of engine/chart_render with the real CLI and Kubernetes provider."""
    engine = build_engine()
    version = KueueSettings().version
    root = tmp_path_factory.mktemp("chart-render")
    chart = released_chart(build_components().kueue_chart, root / "chart", version)
    release = run_program(REPO_ROOT, "dev").one("kubernetes:helm.sh/v3:Release")
    assert release.inputs["version"] == version
    values: dict[str, Any] = release.inputs["values"]
    project = root / "project"
    shutil.copytree(CHART_RENDER, project)
    set_virtualenv(project / "Pulumi.yaml", REPO_ROOT / "venv")
    renders = {"ours": values, "misspelt": merged(values, MISSPELT)}
    (project / "renders.json").write_text(json.dumps([
        {"name": name, "release": release.inputs["name"], "chart": str(chart), "namespace": KUEUE_NAMESPACE,
         "values": v, "out": str(root / name)}
        for name, v in renders.items()]))
    # The stack is thrown away after the render: the engine writes its state once at the end instead of after every
    # step (with the Kueue CRDs in the rendered objects, a few MB rewritten per step: 38 of this up's 44 CLI
    # CPU-seconds). The file content at the end is the same (Pulumi's env.SkipCheckpoints, sdk/go/common/env).
    cli = PulumiCli(engine, root / "cli", extra_env={"PULUMI_SKIP_CHECKPOINTS": "true"})
    cli.login()
    cli.run("stack", "init", "render", cwd=project)
    cli.run("up", "--yes", "--skip-preview", cwd=project, timeout=300)
    return {"values": values, "renders": renders, "objects": {n: rendered_objects(root / n) for n in renders}}


def test_the_provider_renders_the_configured_feature_gates_node_selector_and_manager_config(
        provider_render: dict[str, Any]) -> None:
    values, objects = provider_render["values"], provider_render["objects"]["ours"]
    deployment = objects[("Deployment", "kueue-controller-manager")]
    pod = deployment["spec"]["template"]["spec"]
    (manager,) = [c for c in pod["containers"] if c["name"] == "manager"]
    gates = [a for a in manager["args"] if a.startswith("--feature-gates=")]
    configured = {g["name"]: g["enabled"] for g in values["controllerManager"]["featureGates"]}
    assert configured, "the dev stack turns Kueue feature gates on (kueue.featureGates)"
    assert len(gates) == 1, manager["args"]
    assert dict(kv.split("=") for kv in gates[0].removeprefix("--feature-gates=").split(",")) == {
        name: str(enabled).lower() for name, enabled in configured.items()}
    assert pod["nodeSelector"] == {NODEPOOL_LABEL: "default-pool"}  # the dev stack's system pool
    assert manager["image"] == f"registry.k8s.io/kueue/kueue:v{KueueSettings().version}"
    # The manager config Kueue reads is the one the values carry (waitForPodsReady for the fallback included), plus
    # the chart's internal cert management named after the release: the Secret and Service the harness's control
    # plane gives Kueue (controlplane.py) are those names.
    config_map = objects[("ConfigMap", "kueue-manager-config")]
    (config_text,) = config_map["data"].values()
    ours = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert "waitForPodsReady" in ours and "internalCertManagement" not in ours
    assert yaml.safe_load(config_text) == {**ours, "internalCertManagement": {
        "enable": True, "webhookServiceName": WEBHOOK_SERVICE, "webhookSecretName": WEBHOOK_SECRET}}


def test_a_misspelt_values_key_changes_nothing_so_the_key_check_must_catch_it(
        provider_render: dict[str, Any], chart_values: dict[str, Any]) -> None:
    renders, objects = provider_render["renders"], provider_render["objects"]
    # Helm ignores keys the chart does not know: the render with the misspelt keys is the same object for object.
    assert objects["misspelt"] == objects["ours"]
    # So the key check is what fails on them, and it passes the values the dev stack really sends.
    assert sorted(unknown_keys(renders["misspelt"], chart_values)) == [
        "controllerManager.featureGatez", "enablePrometeus"]
    assert unknown_keys(renders["ours"], chart_values) == []
