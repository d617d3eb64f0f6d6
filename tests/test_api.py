"""The public components (tpu_fallback.api): their schema as Pulumi's analyzer reads it, their args against the
stack config's parser, and a program that builds the dev stack's platform from them under the mock runtime."""

from __future__ import annotations

import ast
import json
import textwrap
import typing
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.provider.experimental.analyzer import Analyzer
from pulumi.provider.experimental.schema import generate_schema

from tests.conftest import infra
from tpu_fallback.api import (
    MultiRegionPlatform,
    MultiRegionPlatformArgs,
    Platform,
    PlatformArgs,
    PlatformConfigError,
    TrainingJobs,
)
from tpu_fallback.api.convert import args_of, camel, config_of, fields_of
from tpu_fallback.api.platform import PACKAGE, settings_of
from tpu_fallback.model.ladder import RUNG_KEYS
from tpu_fallback.model.outputs import OUTPUT_NAMES
from tpu_fallback.model.settings import CONFIG_KEYS
from tpu_fallback.model.settings.multikueue import WORKER_OVERRIDES
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

SETTINGS = REPO_ROOT / "tpu_fallback" / "model" / "settings"


def schema() -> dict[str, Any]:
    result = Analyzer(PACKAGE).analyze([Platform, MultiRegionPlatform, TrainingJobs])
    return generate_schema(PACKAGE, "0.0.0", None, result["component_definitions"], result["type_definitions"],
                           list(result["dependencies"])).to_json()


def test_the_analyzer_reads_both_components_with_typed_plain_settings() -> None:
    spec = schema()
    platform = spec["resources"][f"{PACKAGE}:index:Platform"]
    inputs = platform["inputProperties"]
    assert {camel(k) for k in fields_of(PlatformArgs)} == set(inputs)
    assert not platform.get("requiredInputs"), "every setting has a default, as in a stack"
    assert inputs["tpu"] == {"$ref": f"#/types/{PACKAGE}:index:Tpu", "plain": True}
    assert spec["types"][f"{PACKAGE}:index:Tpu"]["description"].startswith("The TPU slice")
    assert spec["types"][f"{PACKAGE}:index:OnDemand"]["properties"]["maxSlices"]["type"] == "integer"
    # The kubeconfig alone may be known only after deployment (another resource's output); it is no setting.
    assert [k for k, v in inputs.items() if not v.get("plain")] == ["kubeconfig"]
    # Outputs: the stack's outputs contract, under the same names.
    assert set(platform["properties"]) == set(OUTPUT_NAMES) - {"multikueue", "workers"}
    multi = spec["resources"][f"{PACKAGE}:index:MultiRegionPlatform"]
    assert set(multi["properties"]) == set(OUTPUT_NAMES)
    assert multi["requiredInputs"] == ["workers"]


def _object_keys() -> dict[str, set[str]]:
    """Every object key the settings parser accepts: object_("<path>", value, (<keys>)) in model/settings."""
    found: dict[str, set[str]] = {}
    for path in SETTINGS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "object_" and len(node.args) == 3
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[2], ast.Tuple)):
                found[str(node.args[0].value)] = {str(e.value) for e in node.args[2].elts
                                                  if isinstance(e, ast.Constant)}
    return found


def _arg_keys(typ: Any, path: str = "") -> dict[str, set[str]]:
    """Object path (as the parser names it) -> the keys the args declare for it, through nested TypedDicts."""
    hints = fields_of(typ)
    found = {path: {camel(k) for k in hints}} if path else {}
    for key, hint in hints.items():
        hint = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
        if typing.is_typeddict(hint):
            found.update(_arg_keys(hint, f"{path}.{camel(key)}" if path else camel(key)))
    return found


def test_every_object_setting_of_the_stack_is_an_arg_and_no_more() -> None:
    parser = _object_keys()
    args = {**_arg_keys(PlatformArgs), **_arg_keys(MultiRegionPlatformArgs)}
    args["multikueue.manager"] = args.pop("manager")
    compared = sorted(set(parser) & set(args))
    assert len(compared) >= 12, f"only {compared}: the parser's object_ calls changed shape"
    for path in compared:
        assert args[path] == parser[path], path
    # The objects the parser names by a variable (list items) or keeps elsewhere.
    assert args["ladder"] == set(RUNG_KEYS)
    assert args["workers"] == {"name", "location", *WORKER_OVERRIDES}
    assert args["queues.localQueues"] == {"namespace", "name"}
    assert args["queues.workerRequest"] == args["queues.headRequest"] == {"cpu", "memory"}
    assert {camel(k) for k in fields_of(PlatformArgs)} - {"project"} == set(CONFIG_KEYS) - {"multikueue"}


def test_args_and_raw_config_convert_both_ways_renaming_only_the_settings() -> None:
    raw = {"clusterName": "tpu-a", "tpu": {"type": "v5p", "topology": "2x2x2", "machineType": "ct5p-hightpu-4t"},
           "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}, "allowUnverifiedVersion": True},
           "queues": {"localQueues": [{"namespace": "team-a", "name": "q"}],
                      "namespaceLabels": {"team.example.com/tpu": "yes"},
                      "quotas": {"system": {"cpu": 12, "memory": "20Gi"}}}}
    args = args_of(raw, PlatformArgs)
    assert args["tpu"]["machine_type"] == "ct5p-hightpu-4t"
    assert args["kueue"]["feature_gates"] == {"ElasticJobsViaWorkloadSlices": False}  # a map's keys stay
    assert args["queues"]["namespace_labels"] == {"team.example.com/tpu": "yes"}
    assert config_of(args, PlatformArgs) == raw
    # Numbers cross languages as floats (pulumi/pulumi#21944): whole ones are the integers a stack file says.
    assert config_of({"on_demand": {"max_slices": 2.0}, "queues": {"quotas": {"system": {"cpu": 12.0}}}},
                     PlatformArgs) == {"onDemand": {"maxSlices": 2}, "queues": {"quotas": {"system": {"cpu": 12}}}}


@pytest.mark.parametrize(("args", "message"), [
    ({"tpu": {"type": "v9"}}, 'tpu.type "v9" is invalid: unknown TPU family'),
    ({"on_demand": {"max_slice": 2}}, "onDemand.maxSlice is not a known setting; known: name, maxSlices, reservation"),
    ({"clustername": "x"}, "clustername is not a known setting"),
    ({"location": "us-east5"}, 'location "us-east5" is invalid: a zone is required, not a region'),
    ({"kubeconfig": "apiVersion: v1"}, "is invalid: a kubeconfig is only used with existingCluster"),
])
def test_bad_args_are_one_line_errors_naming_the_setting(args: dict[str, Any], message: str) -> None:
    with pytest.raises(PlatformConfigError) as err:
        settings_of({"project": "my-gcp-project", **args}, PlatformArgs)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, pulumi.RunError), "the CLI shows a RunError without a traceback"


def test_a_setting_known_only_after_deployment_is_refused() -> None:
    with pytest.raises(PlatformConfigError, match=r"^clusterName is invalid: a pulumi.Output"):
        settings_of({"project": "my-gcp-project", "cluster_name": pulumi.Output.from_input("x")}, PlatformArgs)


def test_the_settings_are_the_stacks() -> None:
    """The args give the same Settings as the same stack config does (defaults included)."""
    from tpu_fallback.model.settings import parse_settings

    raw = {"clusterName": "tpu-prod", "onDemand": {"maxSlices": 2}, "deletionProtection": False}
    assert settings_of({"project": "my-gcp-project", **args_of(raw, PlatformArgs)}, PlatformArgs) == parse_settings(
        raw, "my-gcp-project")


# A user's program outside the repository: the dev stack's platform in a few lines.
USER_PROGRAM = textwrap.dedent('''\
    import pulumi
    from tpu_fallback.api import Platform

    platform = Platform("tpu", {"deletion_protection": False})  # the dev stack: the tutorial's defaults
    pulumi.export("kubeconfig", platform.kubeconfig)
    pulumi.export("localQueues", platform.local_queues)
''')


def user_project(root: Path) -> Path:
    project = root / "my-platform"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: my-platform\nruntime: python\n")
    (project / "Pulumi.dev.yaml").write_text("config:\n  gcp:project: my-gcp-project\n")
    (project / "__main__.py").write_text(USER_PROGRAM)
    return project


def resources(run: ProgramRun) -> dict[tuple[str, str], dict[str, Any]]:
    """(type, name) -> inputs of every resource but the component a program wraps them in."""
    return {(r.type, r.name): r.inputs for r in run.resources
            if not r.type.startswith(("pulumi:pulumi:Stack", f"{PACKAGE}:index:"))}


def test_a_program_of_a_few_lines_builds_what_the_dev_stack_builds(tmp_path: Path) -> None:
    mine = run_program(user_project(tmp_path), "dev")
    dev = infra("dev")
    assert resources(mine) == resources(dev)
    assert len(resources(mine)) >= 40  # the cluster, its pools, Kueue, the queues, the fallback
    assert "kubeconfig" in mine.secret_outputs
    assert mine.outputs["localQueues"] == dev.outputs["localQueues"]
    (platform,) = [r for r in mine.resources if r.type == f"{PACKAGE}:index:Platform"]
    assert platform.name == "tpu"


def test_the_stack_program_is_a_user_of_the_component() -> None:
    dev = infra("dev")
    (platform,) = [r for r in dev.resources if r.type == f"{PACKAGE}:index:Platform"]
    children = {r.type for r in dev.resources if r.parent == platform.urn}
    assert children == {"tpu-fallback:platform:TpuPlatform", "tpu-fallback:project:ProjectApis"}
    assert json.loads(json.dumps(dev.outputs["localQueues"])) == [{"namespace": "default", "name": "user-queue"}]


def test_the_offline_plan_renders_a_program_of_ones_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tpu_fallback.offline import plan

    out = tmp_path / "plan"
    assert plan.main(["dev", "--project", str(user_project(tmp_path)), "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "builds 1 tpu-fallback component(s) (tpu)" in shown and "--stack-file" in shown
    kinds = {doc["kind"] for doc in yaml.safe_load_all((out / "kubernetes.yaml").read_text()) if doc}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Deployment"} <= kinds


def test_the_jobs_component_takes_the_jobs_config_and_exports_the_jobs_outputs() -> None:
    from tpu_fallback.model.jobs import _JOB_KEYS
    from tpu_fallback.programs.jobs import OUTPUT_NAMES as JOBS_OUTPUTS

    jobs = schema()["resources"][f"{PACKAGE}:index:TrainingJobs"]
    assert jobs["requiredInputs"] == ["infraStack"]
    assert jobs["inputProperties"]["jobs"]["items"]["$ref"] == f"#/types/{PACKAGE}:index:Job"
    assert set(schema()["types"][f"{PACKAGE}:index:Job"]["properties"]) == set(_JOB_KEYS)
    assert set(jobs["properties"]) == set(JOBS_OUTPUTS)


def test_the_package_serves_every_public_component() -> None:
    import tpu_fallback.api as api

    served = (REPO_ROOT / "provider" / "__main__.py").read_text()
    public = [n for n in api.__all__ if isinstance(getattr(api, n), type) and issubclass(getattr(api, n),
                                                                                        pulumi.ComponentResource)]
    assert sorted(public) == ["MultiRegionPlatform", "Platform", "TrainingJobs"]
    assert all(name in served.split("components=")[1] for name in public)
