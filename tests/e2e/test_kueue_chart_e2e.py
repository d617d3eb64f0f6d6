"""The Helm values this project gives Kueue's chart, against the pinned chart itself (from the Go module).

The chart has no values.schema.json, so Helm ignores a key it does not know: a misspelled or outdated key
would silently not apply. These tests read the chart build_components.sh copies from sigs.k8s.io/kueue.
"""

from __future__ import annotations

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

from tests.e2e.controlplane import build_components
from tpu_fallback.model.kueue_features import FEATURE_GATES
from tpu_fallback.model.settings import KueueSettings
from tpu_fallback.render.files import load_template
from tpu_fallback.render.kueue import kueue_helm_values, kueue_manager_config

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


def test_every_value_we_set_is_a_key_of_the_chart(chart_values: dict[str, Any]) -> None:
    ours = kueue_helm_values(KueueSettings(pod_monitoring=True), "default-pool")
    known = set(key_paths(chart_values))
    # The chart's own free-form maps: anything below them is data, not a chart key.
    free_form = ("controllerManager.nodeSelector.", "managerConfig.controllerManagerConfigYaml")
    unknown = [p for p in key_paths(ours) if p not in known and not p.startswith(free_form)]
    assert not unknown, f"keys the Kueue chart does not have (Helm would ignore them): {unknown}"
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
