"""Existing-cluster mode: only Kueue, its readiness gate and the fallback queues, with the same outputs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tpu_fallback.model import outputs
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

KUBECONFIG = yaml.safe_dump({
    "apiVersion": "v1", "kind": "Config", "current-context": "ours",
    "clusters": [{"name": "c", "cluster": {"server": "https://10.1.2.3", "certificate-authority-data": "Q0E="}}],
    "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
    "contexts": [{"name": "ours", "context": {"cluster": "c", "user": "u"}}],
})
BY_NAME = {"existingCluster": {"name": "platform-gke", "location": "us-east5-b"}}


def existing(overrides: dict[str, Any] | None = None, kubeconfig: bool = False, raise_errors: bool = True
             ) -> ProgramRun:
    return run_program(REPO_ROOT, "dev", {**BY_NAME, "deletionProtection": None, **(overrides or {})},
                       secret_overrides={"kubeconfig": KUBECONFIG} if kubeconfig else None, raise_errors=raise_errors)


def test_only_what_goes_on_the_cluster_is_created() -> None:
    run = existing()
    assert [(r.type, r.options) for r in run.resources if r.type.startswith("gcp:")] == [
        ("gcp:container/cluster:Cluster", {"read": True})]  # read for its endpoint and CA, never managed
    kinds = sorted(o["kind"] for o in run.kubernetes_objects())
    dev_kinds = sorted(o["kind"] for o in infra("dev").kubernetes_objects())
    assert kinds == dev_kinds  # the same Kueue gate and fallback queues as a cluster this project builds
    assert run.of_type("kubernetes:helm.sh/v3:Release")


def test_the_outputs_contract_holds() -> None:
    run = existing()
    assert list(run.outputs) == [s.name for s in outputs.OUTPUTS if not s.multikueue_only]
    assert run.secret_outputs == set(outputs.SECRET_OUTPUTS)
    assert (run.outputs["clusterName"], run.outputs["clusterLocation"]) == ("platform-gke", "us-east5-b")
    for key in ("tpu", "flavors", "localQueues", "systemPool", "nodePools", "clusterQueue"):
        assert run.outputs[key] == infra("dev").outputs[key], key
    user = yaml.safe_load(run.outputs["kubeconfig"])["users"][0]["user"]
    assert user["exec"]["command"] == "gke-gcloud-auth-plugin"  # looked up by name: no credential stored


def test_a_given_kubeconfig_is_used_and_stays_secret() -> None:
    run = existing(kubeconfig=True)
    provider = run.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == KUBECONFIG and "kubeconfig" in provider.secret_inputs
    assert run.outputs["kubeconfig"] == KUBECONFIG and "kubeconfig" in run.secret_outputs
    assert run.outputs["clusterEndpoint"] == "10.1.2.3" and "clusterEndpoint" not in run.secret_outputs


def test_an_existing_kueue_is_checked_not_installed() -> None:
    run = existing({"kueue": {"install": False}})
    assert not run.of_type("kubernetes:helm.sh/v3:Release")
    assert not [o for o in run.kubernetes_objects() if o["kind"] == "Namespace" and
                o["metadata"]["name"] == "kueue-system"]
    gate = next(o for o in run.kubernetes_objects() if o["kind"] == "Job")
    assert gate["metadata"] == {"name": "kueue-webhooks-ready", "namespace": "kueue-system"}
    cluster_queue = next(r for r in run.resources if r.inputs.get("kind") == "ClusterQueue")
    gate_resource = next(r for r in run.resources if r.type == "kubernetes:batch/v1:Job")
    assert run.depends_on(cluster_queue, gate_resource)


@pytest.mark.parametrize(("overrides", "secret", "fragments"), [
    ({"network": {"privateNodes": True}}, False, ["network", "applies only to a cluster this stack creates"]),
    ({"gkeVersion": "1.36"}, False, ["gkeVersion", "existingCluster"]),
    ({"existingCluster": {"name": "x", "zone": "us-east5-b"}}, False, ["existingCluster.zone is not a known setting"]),
    ({"kueue": {"install": False}, "existingCluster": None}, False, ["kueue.install", "existingCluster"]),
    ({"multikueue": {"enabled": True}}, False, ["existingCluster", "multikueue"]),
    ({"kubeconfig": KUBECONFIG}, False, ["kubeconfig", "must be a secret", "--secret"]),
])
def test_bad_existing_cluster_settings(overrides: dict[str, Any], secret: bool, fragments: list[str]) -> None:
    run = existing(overrides, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    for fragment in fragments:
        assert fragment in str(run.error)
    assert "not-a-real-token" not in str(run.error)  # a kubeconfig never shows up in a message
    assert run.resources == []
