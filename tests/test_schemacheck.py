"""tools/schemacheck.py: the rendered objects against the real CRD schemas, and proof that the check can fail.

The CRDs are the files tests/e2e/build_components.sh copies out of the Go modules into the e2e cache (./scripts/test
builds them before the tests; CI does too). Where they are not on this machine the tests that need them skip, naming
the reason; the ones about that situation run everywhere.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tests.test_jobs_stack import jobs_run
from tools import schemacheck
from tpu_fallback.offline.mockrun import REPO_ROOT

KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def crds() -> schemacheck.Schemas:
    try:
        return schemacheck.schemas()
    except schemacheck.CrdsUnavailableError as err:
        pytest.skip(f"the real CRDs are not on this machine: {err}")


def one(kind: str, stack: str = "dev") -> dict[str, Any]:
    """A deep copy of the first object of that kind the stack renders."""
    return copy.deepcopy(next(o for o in infra(stack).kubernetes_objects() if o["kind"] == kind))


@cache
def _rendered_rayjob() -> dict[str, Any]:
    run = jobs_run()
    return next(o for o in run.kubernetes_objects() if o["kind"] == "RayJob")


def rayjob() -> dict[str, Any]:
    """A deep copy of a RayJob as the jobs project renders it (its dev stack)."""
    return copy.deepcopy(_rendered_rayjob())


def errors(obj: dict[str, Any], crds: schemacheck.Schemas) -> list[str]:
    (result,) = schemacheck.check([obj], crds).results
    return result.errors


# --------------------------------------------------------------------------------------------
# The CRDs are the e2e's, and every example stack passes
# --------------------------------------------------------------------------------------------


def test_the_crds_are_the_ones_the_e2e_builds_from_the_go_modules(crds: schemacheck.Schemas) -> None:
    kinds = set(crds.crds)
    for kind in ("ClusterQueue", "LocalQueue", "ResourceFlavor", "AdmissionCheck", "ProvisioningRequestConfig",
                 "MultiKueueCluster", "MultiKueueConfig"):
        assert (KUEUE, kind) in kinds
    assert ("ray.io/v1", "RayJob") in kinds
    assert ("autoscaling.x-k8s.io/v1", "ProvisioningRequest") in kinds
    if not os.environ.get(schemacheck.CRDS_ENV):
        assert "bin.env" in crds.source and "kueue v0.19.2" in crds.source, crds.source
        assert all(c.path.is_relative_to(schemacheck.e2e_cache()) for c in crds.crds.values())


@pytest.mark.parametrize("stack", sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO_ROOT.glob("Pulumi.*.yaml")))
def test_every_example_stack_passes_with_its_custom_resources_checked_against_a_crd(
        stack: str, crds: schemacheck.Schemas) -> None:
    report = schemacheck.check(infra(stack).kubernetes_objects(), crds)
    assert report.ok, report.text()
    checked = {r.label.split(" ")[0] for r in report.results if r.how == "crd"}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "AdmissionCheck"} <= checked, checked
    assert report.cel.evaluated > 0 and not report.cel.unevaluated, report.summary()


def test_a_rayjob_as_rendered_passes(crds: schemacheck.Schemas) -> None:
    assert errors(rayjob(), crds) == []


# --------------------------------------------------------------------------------------------
# It catches what the API server would refuse or silently change
# --------------------------------------------------------------------------------------------


def test_an_unknown_field_is_an_error_where_the_crd_prunes(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    queue["spec"]["cohrt"] = "team"
    assert errors(queue, crds) == ["spec.cohrt: unknown field 'cohrt': not in the schema, the API server would drop "
                                   "it; did you mean 'cohortName'?"]
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "x"
    (error,) = errors(job, crds)
    assert "workerGroupSpecs[0].template.spec.containers[0].imagePullPolicyy: unknown field" in error
    assert "did you mean 'imagePullPolicy'?" in error


def test_a_free_form_map_is_not_pruned(crds: schemacheck.Schemas) -> None:
    flavor = one("ResourceFlavor")
    flavor["spec"]["nodeLabels"] = {"any.example.com/label": "x"}  # additionalProperties: string
    assert errors(flavor, crds) == []


def test_a_wrong_type_is_an_error(crds: schemacheck.Schemas) -> None:
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "4"
    assert errors(job, crds) == ["spec.rayClusterSpec.workerGroupSpecs[0].replicas: '4' is not of type 'integer'"]
    queue = one("LocalQueue")
    queue["spec"]["clusterQueue"] = 7
    assert errors(queue, crds) == ["spec.clusterQueue: 7 is not of type 'string'"]
    queue = one("ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = [10]
    assert errors(queue, crds) == ["spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: [10] is not an "
                                   "integer or a string (x-kubernetes-int-or-string)"]


def test_an_int_or_string_takes_both(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 10
    assert errors(queue, crds) == []


def test_a_missing_required_field_is_an_error(crds: schemacheck.Schemas) -> None:
    check = one("AdmissionCheck")
    del check["spec"]["controllerName"]
    assert errors(check, crds) == ["spec: 'controllerName' is a required property"]
    job = rayjob()
    del job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"]
    assert errors(job, crds) == ["spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]: 'name' is a "
                                 "required property"]


def test_a_required_field_with_a_default_is_filled_in_as_on_the_server(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    queue["spec"].pop("queueingStrategy", None)  # default BestEffortFIFO
    assert errors(queue, crds) == []


def test_enums_patterns_and_limits_are_checked(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    queue["spec"]["queueingStrategy"] = "Fifo"
    (error,) = errors(queue, crds)
    assert error.startswith("spec.queueingStrategy: 'Fifo' is not one of ['StrictFIFO', 'BestEffortFIFO']"), error
    queue = one("ClusterQueue")
    queue["spec"]["cohortName"] = "Not_A_Name"
    (error,) = errors(queue, crds)
    assert error.startswith("spec.cohortName: 'Not_A_Name' does not match"), error


def test_cel_rules_are_evaluated(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    (error,) = errors(queue, crds)
    assert error.startswith("spec.resourceGroups[0]: flavors must have the same number of resources as the "
                            "coveredResources (x-kubernetes-validations: "), error


def test_a_duplicate_key_of_a_list_map_is_an_error(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(copy.deepcopy(flavors[0]))
    assert f"spec.resourceGroups[0].flavors[{len(flavors) - 1}]: duplicate key name={flavors[0]['name']!r} (also at " \
           "[0]; x-kubernetes-list-type: map)" in errors(queue, crds)


def test_a_null_is_an_error(crds: schemacheck.Schemas) -> None:
    queue = one("LocalQueue")
    queue["spec"]["stopPolicy"] = None
    assert errors(queue, crds) == ["spec.stopPolicy: null, which the API server drops (leave the field out)"]


def test_an_api_version_the_crd_does_not_define(crds: schemacheck.Schemas) -> None:
    queue = one("LocalQueue")
    queue["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    assert errors(queue, crds) == ["the LocalQueue CRD defines kueue.x-k8s.io/v1beta1, kueue.x-k8s.io/v1beta2, not "
                                   "kueue.x-k8s.io/v1alpha1"]


def test_metadata_and_built_in_kinds(crds: schemacheck.Schemas) -> None:
    queue = one("ClusterQueue")
    queue["metadata"]["labels"] = {"team": "x" * 64, "bad key!": "a"}
    queue["metadata"]["namespace"] = "default"
    assert errors(queue, crds) == [
        "metadata.namespace: ClusterQueue is cluster-scoped, it has no namespace",
        f"metadata.labels[team]: {'x' * 64!r} is not a valid label value",
        "metadata.labels: key 'bad key!' is not a qualified name ([prefix/]name, name at most 63 characters)",
    ]
    deployment = one("Deployment")
    deployment["apiVersion"] = "apps/v1beta1"
    deployment["metadata"]["annotations"] = {"replicas": 2}
    assert errors(deployment, crds) == ["apiVersion 'apps/v1beta1' is not Deployment's (apps/v1)",
                                        "metadata.annotations[replicas]: 2 is not a string (quote it)"]


def test_a_kind_with_no_crd_is_an_error_unless_set_aside(crds: schemacheck.Schemas) -> None:
    (error,) = errors({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, crds)
    assert error.startswith("no CRD for Widget in example.com/v1 among "), error
    monitor = {"apiVersion": "monitoring.googleapis.com/v1", "kind": "PodMonitoring", "metadata": {"name": "m"}}
    report = schemacheck.check([monitor], crds)
    assert report.ok and report.results[0].how == "set aside"
    assert "set aside, no CRD here (their structure is checked by the tests): 1 PodMonitoring" in report.summary()


# --------------------------------------------------------------------------------------------
# The command: its exit status, and a clear word when it cannot run
# --------------------------------------------------------------------------------------------


def run_command(tmp_path: Path, objects: list[dict[str, Any]], **env: str) -> subprocess.CompletedProcess[str]:
    manifest = tmp_path / "kubernetes.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    environ = {k: v for k, v in os.environ.items() if k != schemacheck.CRDS_ENV}
    environ["TPU_FALLBACK_SHARED"] = str(tmp_path / "no-shared")  # ../shared's extra is not under test here
    return subprocess.run([sys.executable, "-m", "tools.schemacheck", str(manifest)], cwd=REPO_ROOT,
                          env={**environ, **env}, capture_output=True, text=True, check=False)


def test_the_command_passes_a_valid_plan_and_fails_an_invalid_one(tmp_path: Path, crds: schemacheck.Schemas) -> None:
    if os.environ.get(schemacheck.CRDS_ENV):
        pytest.skip(f"${schemacheck.CRDS_ENV} is set: the command is tested with bin.env's CRDs")
    objects = infra("dev").kubernetes_objects()
    ok = run_command(tmp_path, objects)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"{len(objects)} objects: all valid" in ok.stdout
    bad = copy.deepcopy(objects)
    next(o for o in bad if o["kind"] == "LocalQueue")["spec"]["clusterQueu"] = "x"
    failed = run_command(tmp_path, bad)
    assert failed.returncode == schemacheck.EXIT_INVALID, failed.stdout + failed.stderr
    assert "FAIL LocalQueue default/user-queue (kueue.x-k8s.io/v1beta2): spec.clusterQueu: unknown field" \
        in failed.stdout
    assert "1 INVALID" in failed.stdout


@pytest.fixture
def empty_cache(tmp_path: Path) -> Iterator[Path]:
    cache = tmp_path / "e2e-cache"
    cache.mkdir()
    yield cache


def test_without_the_crds_the_command_says_it_did_not_run_and_why(tmp_path: Path, empty_cache: Path) -> None:
    result = run_command(tmp_path, [one("LocalQueue")], TPU_FALLBACK_E2E_CACHE=str(empty_cache))
    assert result.returncode == schemacheck.EXIT_NOT_RUN, result.stdout + result.stderr
    assert result.stdout.startswith(
        f"CRD schema check NOT RUN: no CRDs: {empty_cache / 'bin.env'} does not exist "
        "(tests/e2e/build_components.sh copies the CRDs out of the Go modules"), result.stdout
    assert "valid" not in result.stdout and "passed" not in result.stdout


def test_a_partial_bin_env_names_what_it_lacks(monkeypatch: pytest.MonkeyPatch, empty_cache: Path) -> None:
    monkeypatch.delenv(schemacheck.CRDS_ENV, raising=False)
    monkeypatch.setenv("TPU_FALLBACK_E2E_CACHE", str(empty_cache))
    (empty_cache / "bin.env").write_text(f"ETCD={empty_cache}/etcd\nKUEUE_CRD_DIR={empty_cache}\n")
    with pytest.raises(schemacheck.CrdsUnavailableError, match=r"lacks KUBERAY_CRD_DIR, PROVREQ_CRD_DIR .*run it "
                       "with no argument"):
        schemacheck.crd_sources()
    (empty_cache / "bin.env").write_text("".join(f"{k}={empty_cache / 'gone'}\n" for k in schemacheck.CRD_DIR_KEYS))
    with pytest.raises(schemacheck.CrdsUnavailableError, match="names directories that do not exist"):
        schemacheck.crd_sources()


def test_go_patterns_with_inline_flags_are_translated() -> None:
    assert schemacheck.python_pattern("^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$") == "(?i)^[a-z]([-a-z0-9]*[a-z0-9])?$"
    assert schemacheck.python_pattern("[") is None
