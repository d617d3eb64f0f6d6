"""The example ladder stack (Pulumi.ladder.yaml) under Pulumi's mock runtime: one TpuNodePool per rung with the
pulumi-gcp arguments of its kind, its outputs, and the fallback controller's "rungs"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.offline.mockrun import ProgramRun

NODE_POOL = "gcp:container/nodePool:NodePool"


@pytest.fixture(scope="module")
def ladder() -> ProgramRun:
    return infra("ladder")


def pools(run: ProgramRun) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.inputs for r in run.of_type(NODE_POOL) if r.inputs["name"] != "default-pool"}


def test_one_pool_component_per_rung_with_its_pools(ladder: ProgramRun) -> None:
    components = {r.name: sorted(c.name for c in ladder.children(r))
                  for r in ladder.of_type("tpu-fallback:tpu:TpuNodePool")}
    assert components == {
        "tpu-ladder-rung-reserved": ["tpu-ladder-rung-reserved-reserved-pool"],
        "tpu-ladder-rung-on-demand": ["tpu-ladder-rung-on-demand-on-demand-pool"],
        "tpu-ladder-rung-spot": ["tpu-ladder-rung-spot-spot-pool", "tpu-ladder-rung-spot-spot-pool-2"],
        "tpu-ladder-rung-flex": ["tpu-ladder-rung-flex-flex-pool", "tpu-ladder-rung-flex-flex-pool-2"],
    }
    assert ladder.outputs["nodePools"] == {"reserved": ["reserved-pool"], "on-demand": ["on-demand-pool"],
                                           "spot": ["spot-pool", "spot-pool-2"], "flex": ["flex-pool", "flex-pool-2"]}
    # today's keys as they were, then every rung in ladder order with its kind (as the stack file writes it)
    assert ladder.outputs["flavors"] == {
        "system": "default-cpu", "onDemand": "on-demand", "flexStart": "flex",
        "rungs": [{"name": "reserved", "kind": "reservation", "flavors": ["reserved"]},
                  {"name": "on-demand", "kind": "onDemand", "flavors": ["on-demand"]},
                  {"name": "spot", "kind": "spot", "flavors": ["spot", "spot-2"]},
                  {"name": "flex", "kind": "flexStart", "flavors": ["flex", "flex-2"]}]}
    assert list(ladder.outputs["flavors"]) == ["system", "onDemand", "flexStart", "rungs"]


def test_each_kind_of_pool(ladder: ProgramRun) -> None:
    by_name = pools(ladder)
    reserved, on_demand = by_name["reserved-pool"], by_name["on-demand-pool"]
    assert reserved["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
        "values": ["tpu-v6e-reservation"]}
    assert on_demand["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    for name in ("spot-pool", "spot-pool-2"):
        config = by_name[name]["nodeConfig"]
        assert config["spot"] is True
        assert config["taints"] == [{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NO_SCHEDULE"}]
        assert config["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
        assert "queuedProvisioning" not in by_name[name]
    for name in ("flex-pool", "flex-pool-2"):
        assert by_name[name]["queuedProvisioning"] == {"enabled": True}
        assert by_name[name]["nodeConfig"]["flexStart"] is True
        assert "spot" not in by_name[name]["nodeConfig"]
    for name in ("reserved-pool", "on-demand-pool"):
        assert "spot" not in by_name[name]["nodeConfig"] and "taints" not in by_name[name]["nodeConfig"]
        assert "queuedProvisioning" not in by_name[name]
    # every pool: one 4-host v6e 4x4 slice, labelled with its rung's kind
    assert {n: (p["autoscaling"]["maxNodeCount"], p["placementPolicy"]["tpuTopology"]) for n, p in by_name.items()} \
        == {n: (4, "4x4") for n in by_name}
    assert {n: p["nodeConfig"]["labels"]["tpu-fallback/plan"] for n, p in by_name.items()} == {
        "reserved-pool": "reservation", "on-demand-pool": "on-demand", "spot-pool": "spot", "spot-pool-2": "spot",
        "flex-pool": "flex-start", "flex-pool-2": "flex-start"}


def test_the_fallback_controller_gets_the_rungs(ladder: ProgramRun) -> None:
    (config_map,) = [o for o in ladder.kubernetes_objects()
                     if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tpu-fallback-controller"]
    config = json.loads(config_map["data"]["config.json"])
    assert [(r["name"], r["flavors"], r["queued"], r.get("reserved", False)) for r in config["rungs"]] == [
        ("reserved", ["reserved"], False, True), ("on-demand", ["on-demand"], False, False),
        ("spot", ["spot", "spot-2"], False, False), ("flex", ["flex", "flex-2"], True, False)]
    assert "planAFlavors" not in config
