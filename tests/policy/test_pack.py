"""The pulumi-policy pack itself, driven through pulumi-policy's analyzer servicer with the engine's
protobuf messages (what `pulumi preview --policy-pack policy` sends), without the CLI."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import pulumi_policy.policy as sdk_policy
import pytest
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, Secret, StackValidationPolicy
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

from tests.conftest import infra
from tests.policy.test_tpu_policies import KUBECONFIG, cluster_queue, tpu_pool
from tools.policycheck import stacks_of
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun
from tpu_fallback.policy import pack
from tpu_fallback.policy.checks import CLUSTER, NODE_POOL, POLICIES, STACK, Unknown

SDK_NAME = pack._SDK_DESERIALIZE  # pulumi_policy.policy's deserializer, which the pack replaces
SECRET_SIG = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"


@pytest.fixture
def servicer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The pack's analyzer as the CLI talks to it, secret markers installed (and removed afterwards)."""
    # Record the SDK's deserializer so that monkeypatch puts it back after the test.
    monkeypatch.setattr(sdk_policy, SDK_NAME, getattr(sdk_policy, SDK_NAME))
    assert pack.install_secret_markers()
    yield sdk_policy._PolicyAnalyzerServicer(pack.PACK_NAME, "0.1.0", pack.build_policies(), pack.ENFORCEMENT_LEVEL)


def secret(value: Any) -> dict[str, Any]:
    return {**SECRET_SIG, "value": value}


def resource(type_: str, name: str, props: Mapping[str, Any], protect: bool = False) -> analyzer_pb2.AnalyzerResource:
    return analyzer_pb2.AnalyzerResource(
        # A plain dict initialises the google.protobuf.Struct field, as json_format would.
        type=type_, name=name, urn=f"urn:pulumi:test::tpu-fallback::{type_}::{name}", properties=dict(props),
        options=analyzer_pb2.AnalyzerResourceOptions(protect=protect),
    )


def analyze(servicer: Any, r: analyzer_pb2.AnalyzerResource) -> analyzer_pb2.AnalyzeResponse:
    request = analyzer_pb2.AnalyzeRequest(type=r.type, name=r.name, urn=r.urn, properties=r.properties,
                                          options=r.options)
    response: analyzer_pb2.AnalyzeResponse = servicer.Analyze(request, None)
    return response


def analyze_stack(servicer: Any, resources: list[analyzer_pb2.AnalyzerResource]) -> analyzer_pb2.AnalyzeResponse:
    response: analyzer_pb2.AnalyzeResponse = servicer.AnalyzeStack(
        analyzer_pb2.AnalyzeStackRequest(resources=resources), None)
    return response


def violations(response: analyzer_pb2.AnalyzeResponse) -> list[tuple[str, str]]:
    return [(d.policyName, d.urn) for d in response.diagnostics]


# --------------------------------------------------------------------------------------------


def test_every_policy_is_in_the_pack_with_its_kind() -> None:
    built = {p.name: p for p in pack.build_policies()}
    assert set(built) == {spec.name for spec in POLICIES}
    for spec in POLICIES:
        kind = ResourceValidationPolicy if spec.resource_check else StackValidationPolicy
        assert isinstance(built[spec.name], kind), spec.name
    assert pack.ENFORCEMENT_LEVEL is EnforcementLevel.MANDATORY


def test_plain_unwraps_proxies_secrets_and_unknowns() -> None:
    props = unknown_checking_proxy({
        "kubeconfig": Secret("text"),
        "nodeConfig": {"machineType": UNKNOWN_STRING_VALUE, "labels": {"a": "b"}},
        "list": [1.0, Secret({"inner": "x"})],
    })
    converted = pack.to_resource("t", props, urn="u", protect=True)
    assert converted.props == {
        "kubeconfig": "text",
        "nodeConfig": {"machineType": Unknown(UNKNOWN_STRING_VALUE), "labels": {"a": "b"}},
        "list": [1.0, {"inner": "x"}],
    }
    assert converted.secret_paths == {"kubeconfig", "list[1]"}
    assert converted.protect is True and converted.urn == "u"


def test_a_resource_violation_is_mandatory_and_names_the_resource(servicer: Any) -> None:
    bad = resource(NODE_POOL, "plan-a", tpu_pool(initialNodeCount=4.0))
    response = analyze(servicer, bad)
    assert violations(response) == [("tpu-pools-scale-to-zero", "")]  # the engine attributes it to the resource
    diagnostic = response.diagnostics[0]
    assert diagnostic.enforcementLevel == analyzer_pb2.MANDATORY
    assert "initialNodeCount = 4" in diagnostic.message
    assert violations(analyze(servicer, resource(NODE_POOL, "plan-a", tpu_pool()))) == []


def test_unknown_values_during_preview_are_advisory_not_violations(servicer: Any) -> None:
    pool = tpu_pool()
    pool["nodeConfig"]["machineType"] = UNKNOWN_STRING_VALUE
    response = analyze(servicer, resource(NODE_POOL, "plan-a", pool))
    assert [d.enforcementLevel for d in response.diagnostics] == [analyzer_pb2.ADVISORY]
    assert "can't be known during preview" in response.diagnostics[0].message


def test_the_stack_name_comes_from_the_cli_environment(servicer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = resource(CLUSTER, "tpu-prod", {"name": "tpu-prod", "deletionProtection": True}, protect=False)
    monkeypatch.setenv("PULUMI_STACK", "prod")
    assert violations(analyze(servicer, cluster)) == [("production-cluster-protected", "")]
    protected = resource(CLUSTER, "tpu-prod", {"name": "tpu-prod", "deletionProtection": True}, protect=True)
    assert violations(analyze(servicer, protected)) == []
    monkeypatch.setenv("PULUMI_STACK", "dev")
    assert violations(analyze(servicer, cluster)) == []


def test_secret_stack_outputs_pass_and_plain_ones_fail(servicer: Any) -> None:
    good = resource(STACK, "tpu-fallback-dev", {"clusterName": "c", "kubeconfig": secret(KUBECONFIG)})
    assert violations(analyze_stack(servicer, [good])) == []
    bad = resource(STACK, "tpu-fallback-dev", {"clusterName": "c", "kubeconfig": KUBECONFIG})
    assert violations(analyze_stack(servicer, [bad])) == [("kubeconfig-is-secret", bad.urn)]


def test_without_secret_markers_the_kubeconfig_policy_is_not_applicable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_policy, SDK_NAME, getattr(sdk_policy, SDK_NAME))
    plain_servicer = sdk_policy._PolicyAnalyzerServicer(pack.PACK_NAME, "0.1.0", pack.build_policies(),
                                                        pack.ENFORCEMENT_LEVEL)
    bad = resource(STACK, "tpu-fallback-dev", {"kubeconfig": KUBECONFIG})
    response = analyze_stack(plain_servicer, [bad])
    assert violations(response) == []
    assert [n.policy_name for n in response.not_applicable] == ["kubeconfig-is-secret"]


def test_the_quota_policy_sees_the_whole_stack(servicer: Any) -> None:
    pools = [resource(NODE_POOL, "plan-a", tpu_pool()), resource(NODE_POOL, "plan-b", tpu_pool("flex-start"))]
    queue = resource(CLUSTER_QUEUE, "cq", cluster_queue(16))
    assert violations(analyze_stack(servicer, [*pools, queue])) == []
    too_big = resource(CLUSTER_QUEUE, "cq", cluster_queue(17))
    assert violations(analyze_stack(servicer, [*pools, too_big])) == [("on-demand-quota-within-capacity", too_big.urn)]


# --------------------------------------------------------------------------------------------
# The example stacks, through the pack
# --------------------------------------------------------------------------------------------


def _wrap_secrets(value: Any, secret_paths: set[str], path: str = "") -> Any:
    """Re-wrap the values the mock runtime recorded as secrets in the engine's secret signature."""
    if (path or ".") in secret_paths:
        return secret(_wrap_secrets(value, secret_paths - {path or "."}, path))
    if isinstance(value, dict):
        return {k: _wrap_secrets(v, secret_paths, f"{path}.{k}" if path else k) for k, v in value.items()}
    if isinstance(value, list):
        return [_wrap_secrets(v, secret_paths, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def engine_view(run: ProgramRun) -> list[analyzer_pb2.AnalyzerResource]:
    out = [
        resource(r.type, r.name, _wrap_secrets(r.inputs, set(r.secret_inputs)), protect=r.protect)
        for r in run.resources
    ]
    outputs = _wrap_secrets(run.outputs, set(run.secret_outputs))
    out.append(resource(STACK, f"{run.project}-{run.stack}", outputs))
    return out


@pytest.mark.parametrize("stack", stacks_of(REPO_ROOT))
def test_the_pack_passes_the_example_stacks(servicer: Any, stack: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULUMI_STACK", stack)
    resources = engine_view(infra(stack))
    for r in resources:
        assert violations(analyze(servicer, r)) == [], r.urn
    assert violations(analyze_stack(servicer, resources)) == []
    assert os.environ["PULUMI_STACK"] == stack


# --------------------------------------------------------------------------------------------
# The pack as the CLI starts it
# --------------------------------------------------------------------------------------------


def test_the_pack_starts_like_the_cli_starts_it() -> None:
    """`pulumi-analyzer-policy-python` runs `python -m pulumi.policy <engine> .` in the pack's directory;
    the pack then serves the analyzer protocol on the port it prints."""
    import subprocess
    import sys

    import grpc  # type: ignore[import-untyped,unused-ignore]
    from google.protobuf import empty_pb2  # type: ignore[import-untyped,unused-ignore]
    from pulumi.runtime.proto import analyzer_pb2_grpc

    env = {**os.environ, "PULUMI_PROJECT": "tpu-fallback", "PULUMI_STACK": "prod", "PULUMI_DRY_RUN": "true"}
    process = subprocess.Popen([sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:0", "."],
                               cwd=REPO_ROOT / "policy", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        assert port.isdigit(), (port, process.stderr.read() if process.poll() is not None and process.stderr else "")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            info = stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
            assert info.name == pack.PACK_NAME
            assert {p.name for p in info.policies} == {spec.name for spec in POLICIES}
            assert {p.enforcementLevel for p in info.policies} == {analyzer_pb2.MANDATORY}
            cluster = resource(CLUSTER, "tpu-prod", {"name": "tpu-prod", "deletionProtection": True})
            response = stub.Analyze(analyzer_pb2.AnalyzeRequest(
                type=cluster.type, name=cluster.name, urn=cluster.urn, properties=cluster.properties,
                options=cluster.options), timeout=30)
            assert [d.policyName for d in response.diagnostics] == ["production-cluster-protected"]
            outputs = resource(STACK, "tpu-fallback-prod", {"kubeconfig": secret(KUBECONFIG)})
            response = stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[outputs]), timeout=30)
            assert list(response.diagnostics) == [] and list(response.not_applicable) == []
    finally:
        process.kill()
        process.wait(timeout=30)
