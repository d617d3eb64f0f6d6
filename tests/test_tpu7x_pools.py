"""TPU7x (Ironwood) node pools (issue 27 item 5, issue 39 item 6): the workload policy a multi-host slice is placed
by, the VM size from GKE's autoscaler machine table, flex-start where Google's blueprints run it, and what stays as it
was for every other family. The program runs under Pulumi's mock runtime on the fixture stack
tests/fixtures/Pulumi.tpu7x.yaml (two on-demand 2x2x4 slices in us-central1-c, no host size)."""

from __future__ import annotations

import importlib
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tests.test_sdk_arguments import args_class, unknown_keys
from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.queues import queue_plan
from tpu_fallback.model.settings import parse_settings
from tpu_fallback.model.settings.pools import check_gke_version
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline import compare
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

FIXTURE = Path(__file__).parent / "fixtures" / "Pulumi.tpu7x.yaml"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
NODE_POOL = "gcp:container/nodePool:NodePool"


def fixture_config() -> dict[str, Any]:
    config = yaml.safe_load(FIXTURE.read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in config.items() if key.startswith("tpu-fallback:")}


@pytest.fixture(scope="module")
def tpu7x() -> ProgramRun:
    # The dev stack's file with every key of the fixture laid over it (dev's flex-start is switched off there).
    return infra("dev", fixture_config())


def tpu_pools(run: ProgramRun) -> list[Any]:
    return [r for r in run.of_type(NODE_POOL) if r.inputs["name"] != "default-pool"]


def test_one_high_throughput_workload_policy_in_the_zones_region_places_every_slice(tpu7x: ProgramRun) -> None:
    config = fixture_config()
    (policy,) = tpu7x.of_type(POLICY)
    assert policy.inputs["workloadPolicy"] == {"type": "HIGH_THROUGHPUT",
                                               "acceleratorTopology": config["tpu"]["topology"]}
    assert policy.inputs["region"] == "us-central1"  # the region of us-central1-c, where the pools are
    assert policy.inputs["project"] == "my-gcp-project"
    assert policy.inputs["name"] == "ironwood-ironwood-pool-2x2x4"  # <clusterName>-<onDemand.name>-<topology>
    (component,) = [r for r in tpu7x.of_type("tpu-fallback:tpu:TpuNodePool")]
    assert policy.parent == component.urn
    pools = tpu_pools(tpu7x)
    assert sorted(p.inputs["name"] for p in pools) == ["ironwood-pool", "ironwood-pool-2"]  # maxSlices 2
    hosts = math.prod(int(side) for side in config["tpu"]["topology"].split("x")) // 4  # 4 chips per VM
    for pool in pools:
        assert pool.inputs["placementPolicy"] == {"type": "COMPACT", "policyName": policy.inputs["name"],
                                                  "tpuTopology": config["tpu"]["topology"]}
        assert pool.inputs["nodeConfig"]["machineType"] == "tpu7x-standard-4t"
        assert pool.inputs["autoscaling"]["maxNodeCount"] == hosts
        assert tpu7x.depends_on(pool, policy)  # the pool names the policy: it must exist first


def test_a_single_host_tpu7x_slice_has_neither_policy_nor_placement() -> None:
    run = infra("dev", {**fixture_config(), "tpu": {**fixture_config()["tpu"], "topology": "2x2x1"}})
    assert run.of_type(POLICY) == []
    (pool,) = tpu_pools(run)
    assert "placementPolicy" not in pool.inputs
    assert pool.inputs["autoscaling"]["maxNodeCount"] == 2  # two single-host slices in one pool


def test_example_stacks_make_no_workload_policy_and_keep_the_tpu_topology() -> None:
    for stack in ("dev", "prod", "ladder"):
        run = infra(stack)
        assert run.of_type(POLICY) == [], stack
        multi_host = [p for p in tpu_pools(run) if "placementPolicy" in p.inputs]
        assert multi_host, stack
        for pool in multi_host:
            assert set(pool.inputs["placementPolicy"]) == {"type", "tpuTopology"}, (stack, pool.name)


def test_the_policy_and_pool_arguments_exist_in_the_installed_sdk(tpu7x: ProgramRun) -> None:
    problems = []
    for resource in [*tpu7x.of_type(POLICY), *tpu_pools(tpu7x)]:
        cls = args_class(resource.type)
        module = importlib.import_module(cls.__module__.rsplit(".", 1)[0] + "._inputs")
        problems += [f"{resource.name}: {p}" for p in unknown_keys(resource.inputs, cls, "", module)]
    assert problems == []
    assert unknown_keys({"workloadPolicy": {"acceleratorTopolgy": "2x2x2"}}, args_class(POLICY), "",
                        importlib.import_module("pulumi_gcp.compute._inputs"))  # the walk reaches the policy's keys


def test_the_catalogs_host_size_sizes_the_ladders_quotas() -> None:
    config = {key: value for key, value in fixture_config().items() if key not in ("onDemand", "flexStart")}
    settings = parse_settings({**config, "ladder": [{"name": "od", "kind": "onDemand", "pool": "od-pool",
                                                     "maxSlices": 1}]}, "my-gcp-project")
    assert (settings.tpu.machine.vcpus, settings.tpu.machine.memory_gib) == (224, 992)
    (flavor,) = [f for f in queue_plan(settings).flavors if f.rung == "od"]
    assert (flavor.quota["cpu"], flavor.quota["memory"]) == (224 * 4, f"{992 * 4}Gi")  # 4 hosts of a 2x2x4 slice


LADDER_WITH_FLEX = [{"name": "od", "kind": "onDemand", "pool": "od-pool", "maxSlices": 1},
                    {"name": "flex", "kind": "flexStart", "pool": "flex-pool", "maxSlices": 2}]


def test_a_tpu7x_ladder_with_a_flex_start_rung_renders_in_the_blueprints_zone() -> None:
    """cluster-toolkit (1047080) runs TPU7x with flex-start, queued and not (examples/gke-consumption-options/
    dws-flex-start{,-queued-provisioning}/gke-tpu-7x, zone us-central1-c): the flexStart rung's pools are queued
    flex-start pools placed by the rung's own workload policy."""
    config = {key: value for key, value in fixture_config().items() if key not in ("onDemand", "flexStart")}
    run = infra("dev", {**config, "onDemand": None, "flexStart": None, "ladder": LADDER_WITH_FLEX})
    assert run.error is None, run.error
    flex = [p for p in tpu_pools(run) if p.inputs["name"].startswith("flex-pool")]
    assert sorted(p.inputs["name"] for p in flex) == ["flex-pool", "flex-pool-2"]
    for pool in flex:
        assert pool.inputs["queuedProvisioning"] == {"enabled": True}
        assert pool.inputs["nodeConfig"]["flexStart"] is True
        assert pool.inputs["placementPolicy"]["policyName"] == "ironwood-flex-pool-2x2x4"
    assert {p.inputs["name"] for p in run.of_type(POLICY)} == {"ironwood-od-pool-2x2x4", "ironwood-flex-pool-2x2x4"}


def test_two_plans_with_tpu7x_flex_start_render_in_us_central1_c() -> None:
    run = infra("dev", {**fixture_config(), "flexStart": {"enabled": True, "name": "ironwood-dws", "maxSlices": 1}})
    assert run.error is None, run.error
    (dws,) = [p for p in tpu_pools(run) if p.inputs["name"] == "ironwood-dws"]
    assert dws.inputs["queuedProvisioning"] == {"enabled": True}


def test_tpu7x_flex_start_outside_the_listed_zone_is_refused_naming_it() -> None:
    run = run_program(REPO_ROOT, "dev", {**fixture_config(), "location": "us-central1-ai1a",
                                         "flexStart": {"enabled": True}}, raise_errors=False)
    assert isinstance(run.error, ConfigError), repr(run.error)
    assert str(run.error).startswith('location "us-central1-ai1a" is invalid: GKE offers tpu7x flex-start (plan B) '
                                     "only in us-central1-c"), str(run.error)


def test_the_one_chip_tpu7x_host_renders_as_a_single_host_pool() -> None:
    run = infra("dev", {**fixture_config(), "tpu": {"type": "tpu7x", "topology": "1x1x1"}})
    assert run.of_type(POLICY) == []
    (pool,) = tpu_pools(run)
    assert pool.inputs["nodeConfig"]["machineType"] == "tpu7x-standard-1t"
    assert "placementPolicy" not in pool.inputs


def test_a_jobs_worker_request_is_not_refused_for_a_host_size_the_catalog_lacks() -> None:
    machine = catalog.MachineType("future-standard-4t", 4, 0, 0, ("2x2x1",), ())
    assert not machine.size_known
    assert capacity.fits_host(Resources(100, "100Gi"), machine)
    known = catalog.FAMILIES["v6e"].machine_types[1]
    assert not capacity.fits_host(Resources(known.vcpus + 1, "1Gi"), known)


@pytest.mark.parametrize(("tpu", "fragments"), [
    # The catalog has tpu7x-standard-4t's size now: a host size is refused as for every family, naming the catalog's.
    ({"type": "tpu7x", "topology": "2x2x4", "hostVcpus": 224, "hostMemoryGib": 960},
     ["tpu.hostVcpus 224", "only for a machine type whose size the catalog lacks",
      "tpu7x-standard-4t has 224 vCPU and 992 GiB in the catalog"]),
    ({"type": "tpu7x", "topology": "2x2x4", "hostMemoryGib": 992}, ["tpu.hostMemoryGib 992", "992 GiB in the catalog"]),
    ({"type": "v6e", "topology": "4x4", "hostVcpus": 100}, ["tpu.hostVcpus 100", "ct6e-standard-4t has 180 vCPU"]),
    ({"type": "tpu7x", "topology": "2x2x4", "hostCpus": 1},
     ["tpu.hostCpus is not a known setting", "did you mean hostVcpus"]),
])
def test_bad_host_sizes_are_refused_before_any_resource(tpu: dict[str, Any], fragments: list[str]) -> None:
    run = run_program(REPO_ROOT, "dev", {**fixture_config(), "tpu": tpu}, raise_errors=False)
    assert isinstance(run.error, ConfigError), repr(run.error)
    for fragment in fragments:
        assert fragment in str(run.error), str(run.error)
    assert [r.name for r in run.resources if not r.options.get("read")] == []


def test_the_workload_policy_name_stays_within_63_characters_and_unique() -> None:
    assert capacity.workload_policy_name("tpu-cluster", "on-demand-pool", "4x4x4") == "tpu-cluster-on-demand-pool-4x4x4"
    names = [capacity.workload_policy_name("c" * 40, "a" * 39 + last, topology)
             for last in "12" for topology in ("4x4x4", "4x4x8")]
    for name in names:
        assert len(name) <= 63 and name[0].isalpha() and name[-1] != "-" and name == name.lower(), name
    assert len(set(names)) == len(names)


def test_a_new_topology_is_a_new_policy_and_replaces_the_pools() -> None:
    # A policy in use cannot change shape under its pools: the new topology gets a policy of its own name, and the
    # pools' policyName (which forces a new pool) follows it.
    before = run_program(REPO_ROOT, "dev", fixture_config())
    config = fixture_config()
    config["tpu"] = {**config["tpu"], "topology": "2x4x4"}
    after = run_program(REPO_ROOT, "dev", config)
    policies = [{r.inputs["name"] for r in run.resources if r.type == "gcp:compute/resourcePolicy:ResourcePolicy"}
                for run in (before, after)]
    assert policies[0] and policies[1] and not policies[0] & policies[1], policies
    # What compare mode tells a reviewer: the policy (workload_policy.accelerator_topology is ForceNew in
    # resource_compute_resource_policy.go) and the pools (policyName is ForceNew) are replaced.
    changes = {(c.type, c.op) for c in compare.diff(before, after)}
    assert ("gcp:compute/resourcePolicy:ResourcePolicy", "replace") in changes, changes
    assert ("gcp:container/nodePool:NodePool", "replace") in changes, changes


@pytest.mark.parametrize(("version", "ok"), [
    ("1.35", True), ("1.34", True), ("1.34.0-gke.2201000", True), ("1.34.1", True),
    ("1.34.0-gke.2200999", False), ("1.33", False), ("1.33.9-gke.9999999", False),
])
def test_the_gke_version_must_offer_tpu7x(version: str, ok: bool) -> None:
    tpu = catalog.resolve_slice("tpu7x", "2x2x2")
    if ok:
        check_gke_version(tpu, version)
    else:
        with pytest.raises(ConfigError, match=rf'gkeVersion "{version}" is invalid: tpu7x node pools need GKE '
                                              r"1\.34\.0-gke\.2201000 or later"):
            check_gke_version(tpu, version)
    check_gke_version(catalog.resolve_slice("v6e", "4x4"), "1.20")  # no minimum recorded for v6e


def test_the_offline_plan_renders_the_fixture_stack(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "tpu7x", "--stack-file", str(FIXTURE),
                           "--out", str(tmp_path), "--quiet"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert "### gcp:compute/resourcePolicy:ResourcePolicy" in summary
    assert 'placementPolicy.policyName = "ironwood-ironwood-pool-2x2x4"' in summary


def test_a_tpu7x_stack_with_a_host_size_exits_2_without_a_traceback(tmp_path: Path) -> None:
    config = yaml.safe_load(FIXTURE.read_text())
    config["config"]["tpu-fallback:tpu"]["hostVcpus"] = 224
    stack_file = tmp_path / "Pulumi.bad.yaml"
    stack_file.write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "bad", "--stack-file", str(stack_file),
                           "--out", str(tmp_path / "out"), "--quiet"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert "tpu.hostVcpus 224" in done.stderr and "Traceback" not in done.stderr


def test_the_tpu_output_has_no_host_size_and_the_jobs_stack_checks_workers_against_the_catalogs() -> None:
    """The catalog sizes tpu7x-standard-4t: the infra stack's `tpu` output is as for every family, and the jobs
    stack's workerRequest check works against GKE's allocatable of that host."""
    # a quota that admits whole hosts, so that the host's size is what a request meets first
    run = infra("dev", {**fixture_config(), "queues": {"quotas": {"onDemand": {"cpu": 4000, "memory": "40000Gi"}}}})
    assert "hostVcpus" not in run.outputs["tpu"] and "hostMemoryGib" not in run.outputs["tpu"]
    refs = {"organization/tpu-fallback/dev": {"outputs": run.outputs, "secretOutputNames": sorted(run.secret_outputs)}}
    room = capacity.gke_allocatable(224, 992)

    def jobs_run(cpu: str) -> ProgramRun:
        jobs = [{"name": "j", "workerRequest": {"cpu": cpu, "memory": "16Gi"}}]
        return run_program(REPO_ROOT / "jobs", "dev", {"jobs": jobs}, stack_references=refs, raise_errors=False)

    assert jobs_run(str(room.cpu)).error is None
    refused = jobs_run("224").error  # the whole VM: more than GKE leaves pods
    assert isinstance(refused, ConfigError) and str(refused).startswith("jobs[0].workerRequest"), refused
    assert "224 vCPU / 992 GiB" in str(refused)
