"""A capacity ladder's Kueue side: one flavor per rung's pool in ladder order, quotas from each pool's size, the spot
flavor's taint, the queued rung's ProvisioningRequest check, and the fallback controller's "rungs"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import schema_check
from tpu_fallback.fallback.config import Settings as ControllerSettings
from tpu_fallback.model import catalog
from tpu_fallback.model.queues import QueuePlan, queue_plan
from tpu_fallback.model.settings import FallbackSettings, Settings, parse_settings
from tpu_fallback.render import fallback as render_fallback
from tpu_fallback.render import kueue as render

FOUR_RUNGS: list[dict[str, Any]] = [
    {"name": "reserved", "kind": "reservation", "reservation": {"name": "tpu-v6e-res", "size": 2}},
    {"name": "on-demand", "kind": "onDemand", "maxSlices": 1},
    {"name": "spot", "kind": "spot", "maxSlices": 2},
    {"name": "flex", "kind": "flexStart", "maxSlices": 2, "maxRunDuration": "86400s"},
]
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
QUEUED_TAINT = {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"}


def ladder_settings(rungs: list[dict[str, Any]], raw: dict[str, Any] | None = None) -> Settings:
    return parse_settings({**(raw or {}), "ladder": rungs}, "my-project")


def four_rung_plan() -> QueuePlan:
    return queue_plan(ladder_settings(FOUR_RUNGS))


def test_one_flavor_per_rung_pool_in_ladder_order() -> None:
    plan = four_rung_plan()
    # v6e 4x4 is multi-host: one pool per slice, so 2 + 1 + 2 + 2 TPU flavors behind the system flavor
    assert [(f.name, f.rung, f.node_labels["cloud.google.com/gke-nodepool"]) for f in plan.flavors] == [
        ("default-cpu", "", "default-pool"),
        ("reserved", "reserved", "reserved-pool"), ("reserved-2", "reserved", "reserved-pool-2"),
        ("on-demand", "on-demand", "on-demand-pool"),
        ("spot", "spot", "spot-pool"), ("spot-2", "spot", "spot-pool-2"),
        ("flex", "flex", "flex-pool"), ("flex-2", "flex", "flex-pool-2")]
    assert plan.closable_flavors == ["reserved", "reserved-2", "on-demand", "spot", "spot-2"]


def test_quotas_come_from_each_pools_size() -> None:
    plan = four_rung_plan()
    tpu = catalog.resolve_slice("v6e", "4x4")
    assert (tpu.chips_per_slice, tpu.hosts_per_slice, tpu.machine.vcpus, tpu.machine.memory_gib) == (16, 4, 180, 720)
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
              for f in render.cluster_queue(plan)["spec"]["resourceGroups"][0]["flavors"]}
    chips = tpu.chips_per_slice
    # one 4-host slice per pool: 16 chips, and its hosts' vCPUs and memory (4 x 180 vCPU, 4 x 720 GiB)
    for name in ("reserved", "reserved-2", "on-demand", "spot", "spot-2"):
        assert quotas[name] == {"cpu": "720", "memory": "2880Gi", "google.com/tpu": str(chips)}, name
    # the queued rung: its first pool capped at one slice, the last unlimited (jobs wait there for DWS)
    assert quotas["flex"]["google.com/tpu"] == str(chips)
    assert quotas["flex-2"]["google.com/tpu"] == "1G"
    # a configured on-demand quota applies to the onDemand rung only
    configured = queue_plan(ladder_settings(FOUR_RUNGS, {"queues": {"quotas": {"onDemand": {"cpu": 64,
                                                                                              "memory": "128Gi"}}}}))
    assert configured.flavor("on-demand").quota["cpu"] == 64  # type: ignore[union-attr]
    assert configured.flavor("spot").quota == plan.flavor("spot").quota  # type: ignore[union-attr]


def test_the_spot_flavor_carries_the_spot_taint_and_only_the_queued_one_the_dws_check() -> None:
    plan = four_rung_plan()
    flavors = {f.name: render.resource_flavor(f) for f in plan.flavors}
    assert flavors["spot"]["spec"]["nodeTaints"] == [SPOT_TAINT] == flavors["spot-2"]["spec"]["nodeTaints"]
    assert flavors["flex"]["spec"]["nodeTaints"] == [QUEUED_TAINT]
    for name in ("default-cpu", "reserved", "on-demand"):
        assert "nodeTaints" not in flavors[name]["spec"], name
    # no flavor hands out tolerations: a job reaches spot only by tolerating the taint itself
    assert all("tolerations" not in f["spec"] for f in flavors.values())
    queue = render.cluster_queue(plan)
    assert [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]] == [f.name for f in plan.flavors]
    assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [
        {"name": "dws-prov", "onFlavors": ["flex", "flex-2"]}]}
    config = render.provisioning_request_config(plan)
    assert config["spec"]["parameters"] == {"maxRunDurationSeconds": "86400"}
    assert config["spec"]["retryStrategy"] == render.dws_retry_strategy()  # a ladder's queued rungs retry alike
    # with the fallback off the stack resets a closable flavor's taints to what it declares: the spot taint stays
    assert render.flavor_taints_reset(plan.flavor("spot"))["spec"]["nodeTaints"] == [SPOT_TAINT]  # type: ignore[arg-type]
    assert render.flavor_taints_reset(plan.flavor("reserved"))["spec"]["nodeTaints"] == []  # type: ignore[arg-type]


def test_ladder_objects_pass_the_crd_schemas() -> None:
    plan = four_rung_plan()
    objects = [render.resource_flavor(f) for f in plan.flavors] + [
        render.cluster_queue(plan), render.provisioning_request_config(plan)]
    report = schema_check(objects)
    assert report.ok, report


def test_a_ladder_without_a_queued_rung_has_no_provisioning_check() -> None:
    plan = queue_plan(ladder_settings(FOUR_RUNGS[:3]))
    assert not plan.provisioning_check
    assert "admissionChecksStrategy" not in render.cluster_queue(plan)["spec"]


def test_the_controller_gets_rungs_for_a_ladder_and_todays_keys_for_two_plans() -> None:
    fallback = FallbackSettings()
    config = render_fallback.controller_config(four_rung_plan(), fallback)
    assert "planAFlavors" not in config and "planBFlavors" not in config
    assert config["rungs"] == [
        {"name": "reserved", "flavors": ["reserved", "reserved-2"], "queued": False, "reserved": True,
         "nodeSelector": "cloud.google.com/gke-nodepool in (reserved-pool,reserved-pool-2)"},
        {"name": "on-demand", "flavors": ["on-demand"], "queued": False,
         "nodeSelector": "cloud.google.com/gke-nodepool in (on-demand-pool)"},
        {"name": "spot", "flavors": ["spot", "spot-2"], "queued": False,
         "nodeSelector": "cloud.google.com/gke-nodepool in (spot-pool,spot-pool-2)"},
        {"name": "flex", "flavors": ["flex", "flex-2"], "queued": True,
         "nodeSelector": "cloud.google.com/gke-nodepool in (flex-pool,flex-pool-2)"}]
    two_plans = render_fallback.controller_config(queue_plan(parse_settings({}, "my-project")), fallback)
    assert "rungs" not in two_plans
    assert (two_plans["planAFlavors"], two_plans["planBFlavors"]) == (["on-demand"], ["dws"])
    # the controller may update only the flavors it closes: every rung's but the queued one
    role = render_fallback.cluster_role(four_rung_plan())
    (update,) = [r for r in role["rules"] if "update" in r["verbs"]]
    assert update["resourceNames"] == ["reserved", "reserved-2", "on-demand", "spot", "spot-2"]


def test_the_controller_parses_the_rungs_it_is_given(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(render_fallback.controller_config(four_rung_plan(), FallbackSettings())))
    parsed = ControllerSettings.from_file(path)
    assert [(r.name, r.flavors, r.queued, r.reserved) for r in parsed.decide.rungs] == [
        ("reserved", ("reserved", "reserved-2"), False, True), ("on-demand", ("on-demand",), False, False),
        ("spot", ("spot", "spot-2"), False, False), ("flex", ("flex", "flex-2"), True, False)]
