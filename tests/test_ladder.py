"""The capacity ladder's config (tpu_fallback/model/ladder.py): rungs in order, and every impossible ladder refused with
a message naming the setting, the value and what is allowed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tpu_fallback.model import catalog
from tpu_fallback.model.ladder import (
    FLEX_START,
    ON_DEMAND,
    RESERVATION,
    SPOT,
    Reservation,
    parse_ladder,
    two_rungs,
)
from tpu_fallback.model.settings import CONFIG_KEYS, Settings, decode_config, parse_settings
from tpu_fallback.model.validation import ConfigError

V6E_4X4 = catalog.resolve_slice("v6e", "4x4")
V6E_2X2 = catalog.resolve_slice("v6e", "2x2")  # single host
FOUR_RUNGS: list[dict[str, Any]] = [
    {"name": "reserved", "kind": "reservation", "reservation": {"name": "tpu-v6e-res", "size": 2}},
    {"name": "on-demand", "kind": "onDemand", "maxSlices": 1},
    {"name": "spot", "kind": "spot", "maxSlices": 2},
    {"name": "flex", "kind": "flexStart", "maxSlices": 2, "maxRunDuration": "86400s"},
]


def ladder(rungs: Any, tpu: catalog.TpuSlice = V6E_4X4, location: str = "us-east5-b", **kw: Any) -> Any:
    return parse_ladder(rungs, tpu, location, **kw)


def refused(rungs: Any, *needles: str, **kw: Any) -> str:
    with pytest.raises(ConfigError) as err:
        ladder(rungs, **kw)
    message = str(err.value)
    for needle in needles:
        assert needle in message, message
    return message


def test_four_rungs_in_order_with_their_pools_and_flavors() -> None:
    parsed = ladder(FOUR_RUNGS)
    assert parsed.explicit
    assert [(r.name, r.kind, r.max_slices, r.queued) for r in parsed.rungs] == [
        ("reserved", RESERVATION, 2, False), ("on-demand", ON_DEMAND, 1, False), ("spot", SPOT, 2, False),
        ("flex", FLEX_START, 2, True)]
    reserved, _, spot, flex = parsed.rungs
    assert reserved.reservation == Reservation("tpu-v6e-res", 2)  # maxSlices defaults to the reservation's size
    assert spot.preemptible and not reserved.preemptible
    assert flex.max_run_duration == "86400s"
    # 4x4 is multi-host: one pool (and one flavor) per slice, the first keeping the base name
    assert [p.name for p in spot.pools(V6E_4X4)] == ["spot-pool", "spot-pool-2"]
    assert spot.flavors(V6E_4X4) == ["spot", "spot-2"]
    assert spot.component == "rung-spot"
    # single-host slices share one pool
    single = ladder(FOUR_RUNGS, tpu=V6E_2X2)
    assert [(p.name, p.max_nodes) for p in single.rungs[2].pools(V6E_2X2)] == [("spot-pool", 2)]
    assert parsed.queued is flex and parsed.of_kind(SPOT) == (spot,)


def test_the_two_rung_default_keeps_todays_names() -> None:
    default = two_rungs("on-demand-pool", 1, None, "dws-pool", 1, True, None)
    assert not default.explicit
    assert [(r.name, r.kind, r.pool, r.flavor, r.component) for r in default.rungs] == [
        ("on-demand", ON_DEMAND, "on-demand-pool", "on-demand", "plan-a"),
        ("flex-start", FLEX_START, "dws-pool", "dws", "plan-b")]
    # a plan without capacity has no rung
    assert [r.kind for r in two_rungs("a", 0, None, "b", 2, True, None).rungs] == [FLEX_START]
    assert [r.kind for r in two_rungs("a", 1, None, "b", 2, False, None).rungs] == [ON_DEMAND]
    reserved = two_rungs("a", 2, "my-res", "b", 1, True, "3600s")
    assert reserved.rungs[0].reservation == Reservation("my-res", 2)
    assert reserved.rungs[1].max_run_duration == "3600s"


@pytest.mark.parametrize("value", [None, [], {"name": "x"}, "onDemand"])
def test_an_empty_or_non_list_ladder(value: Any) -> None:
    refused(value, "ladder", "non-empty list of rungs")


def test_unknown_kind_and_unknown_key() -> None:
    refused([{"name": "x", "kind": "preemptible", "maxSlices": 1}], 'ladder[0].kind "preemptible"',
            "reservation, onDemand, spot, flexStart")
    refused([{"name": "x", "kind": "spot", "maxslices": 1}], "ladder[0].maxslices is not a known setting",
            "did you mean maxSlices?")
    refused([{"name": "x", "kind": "reservation", "reservation": {"name": "r", "size": 1, "zone": "z"}}],
            "ladder[0].reservation.zone is not a known setting")


def test_duplicate_names_and_kinds() -> None:
    refused([{"name": "a", "kind": "onDemand", "maxSlices": 1}, {"name": "a", "kind": "spot", "maxSlices": 1}],
            'ladder[1].name "a"', "unique")
    refused([{"name": "a", "kind": "spot", "maxSlices": 1}, {"name": "b", "kind": "spot", "maxSlices": 1}],
            'ladder[1].kind "spot"', "ladder[0] (a) is already spot")
    # two queued rungs
    message = refused([{"name": "a", "kind": "flexStart", "maxSlices": 1},
                       {"name": "b", "kind": "flexStart", "maxSlices": 1}], 'ladder[1].kind "flexStart"')
    assert "at most one queued rung" in message
    # two reservations are two rungs, but not of the same reservation
    two = [{"name": f"r{i}", "kind": "reservation", "reservation": {"name": f"res-{i}", "size": 1}} for i in (1, 2)]
    assert [r.reservation.name for r in ladder(two).rungs] == ["res-1", "res-2"]
    two[1]["reservation"] = {"name": "res-1", "size": 1}
    refused(two, 'ladder[0].reservation.name "res-1"', "same reservation")


def test_flex_start_where_gke_offers_none() -> None:
    flex = [{"name": "flex", "kind": "flexStart", "maxSlices": 1}]
    refused(flex, 'ladder[0].kind "flexStart"', "only in asia-northeast1-b, us-east5-a, us-east5-b",
            "europe-west4-a", location="europe-west4-a")
    assert ladder(flex, location="europe-west4-a", allow_unlisted_zone=True).queued is not None
    v4 = catalog.resolve_slice("v4", "2x2x1")
    refused(flex, "no flex-start for tpu.type v4", tpu=v4, location="us-central2-b")
    # without a flexStart rung the zone's flex-start offer does not matter
    assert ladder([{"name": "od", "kind": "onDemand", "maxSlices": 1}], location="europe-west4-a").queued is None


def test_flex_start_must_be_last_unless_capped() -> None:
    flex_first = [{"name": "flex", "kind": "flexStart", "maxSlices": 1}, {"name": "spot", "kind": "spot",
                                                                           "maxSlices": 1}]
    refused(flex_first, 'ladder[0].kind "flexStart"', "must be the last", "ladder[1] (spot) would never be tried",
            "queues.capFlexStart")
    assert [r.name for r in ladder(flex_first, cap_flex_start=True).rungs] == ["flex", "spot"]


def test_reservation_rules() -> None:
    refused([{"name": "r", "kind": "reservation", "maxSlices": 1}], "ladder[0].reservation is not set", "{name, size}")
    refused([{"name": "r", "kind": "reservation", "reservation": {"name": "res", "size": 0}}],
            "ladder[0].reservation.size 0", ">= 1")
    refused([{"name": "r", "kind": "reservation", "maxSlices": 3, "reservation": {"name": "res", "size": 2}}],
            "ladder[0].maxSlices 3", "at most reservation.size (2)")
    partial = ladder([{"name": "r", "kind": "reservation", "maxSlices": 1, "reservation": {"name": "res", "size": 4}}])
    assert partial.rungs[0].max_slices == 1
    refused([{"name": "od", "kind": "onDemand", "maxSlices": 1, "reservation": {"name": "res", "size": 1}}],
            "ladder[0].reservation", "only a rung of kind reservation")


def test_per_rung_values() -> None:
    refused([{"name": "od", "kind": "onDemand"}], "ladder[0].maxSlices is not set", ">= 1")
    refused([{"name": "od", "kind": "onDemand", "maxSlices": 0}], "ladder[0].maxSlices 0", ">= 1")
    refused([{"name": "od", "kind": "onDemand", "maxSlices": 1, "maxRunDuration": "60s"}],
            "ladder[0].maxRunDuration", "only a flexStart rung")
    refused([{"name": "f", "kind": "flexStart", "maxSlices": 1, "maxRunDuration": "700000s"}],
            'ladder[0].maxRunDuration "700000s"', "7 days")
    refused([{"name": "Spot", "kind": "spot", "maxSlices": 1}], 'ladder[0].name "Spot"', "lowercase")
    refused([{"name": "default-cpu", "kind": "spot", "maxSlices": 1}], "system pool's flavor")


def test_pool_and_flavor_names() -> None:
    refused([{"name": "a", "kind": "spot", "maxSlices": 1, "pool": "default-pool"}], 'ladder[0].pool "default-pool"',
            "clashes with systemPool.name")
    long_pool = "p" * 39
    refused([{"name": "a", "kind": "spot", "maxSlices": 2, "pool": long_pool}], f'ladder[0].pool "{long_pool}"',
            "GKE allows 40", "at most 38 characters")
    # rung "spot" with two multi-host pools has flavors spot and spot-2: a rung named spot-2 would take one of them
    refused([{"name": "spot", "kind": "spot", "maxSlices": 2},
             {"name": "spot-2", "kind": "onDemand", "maxSlices": 1}], 'ladder[1].name "spot-2"',
            "clashes with ladder[0]")


# --------------------------------------------------------------------------------------------
# The `ladder` key among the stack's settings
# --------------------------------------------------------------------------------------------


def stack(raw: dict[str, Any]) -> Settings:
    return parse_settings(raw, "my-project")


def stack_refused(raw: dict[str, Any], *needles: str) -> str:
    with pytest.raises(ConfigError) as err:
        stack(raw)
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    return str(err.value)


def test_without_a_ladder_the_two_plans_are_the_ladder() -> None:
    settings = stack({})
    assert settings.ladder is None
    assert [(r.kind, r.pool, r.max_slices) for r in settings.capacity_ladder.rungs] == [
        (ON_DEMAND, settings.on_demand.name, settings.on_demand.max_slices),
        (FLEX_START, settings.flex_start.name, settings.flex_start.max_slices)]


def test_a_ladder_replaces_the_two_plans() -> None:
    # The CLI hands over Pulumi.yaml's onDemand/flexStart defaults too: left at them, they are no conflict.
    settings = stack({"ladder": FOUR_RUNGS, "onDemand": {"name": "on-demand-pool", "maxSlices": 1},
                      "flexStart": {"enabled": True, "name": "dws-pool", "maxSlices": 1}})
    assert [r.name for r in settings.capacity_ladder.rungs] == ["reserved", "on-demand", "spot", "flex"]
    assert settings.on_demand.max_slices == 0 and not settings.flex_start.active  # nothing of plan A/B is built
    assert settings.fallback.enabled  # on by default, as with two plans
    stack_refused({"ladder": FOUR_RUNGS, "onDemand": {"maxSlices": 2}}, "onDemand", "make it a rung")
    stack_refused({"ladder": FOUR_RUNGS, "flexStart": {"maxSlices": 3}}, "flexStart", "make it a rung")


def test_stack_rules_that_need_the_rest_of_the_config() -> None:
    # flex-start where GKE offers none: the stack's own location decides
    stack_refused({"ladder": FOUR_RUNGS, "location": "europe-west4-a"},
                  "ladder[3].kind", "europe-west4-a")
    assert stack({"ladder": FOUR_RUNGS, "location": "europe-west4-a", "allowUnlistedZone": True}).ladder is not None
    # a rung's pool must not take the system pool's name
    stack_refused({"ladder": [{"name": "od", "kind": "onDemand", "maxSlices": 1, "pool": "cpu"}],
                   "systemPool": {"name": "cpu"}}, 'ladder[0].pool "cpu"', "systemPool.name")
    # flexStart before spot is fine once its quota is capped
    flex_first = [FOUR_RUNGS[3], FOUR_RUNGS[2]]
    stack_refused({"ladder": flex_first}, "must be the last")
    assert stack({"ladder": flex_first, "queues": {"capFlexStart": True}}).ladder is not None
    # an on-demand quota needs an onDemand rung, and must admit one slice there
    stack_refused({"ladder": [FOUR_RUNGS[2]], "queues": {"quotas": {"onDemand": {"cpu": 64, "memory": "128Gi"}}}},
                  "queues.quotas.onDemand", "no onDemand rung")
    stack_refused({"ladder": FOUR_RUNGS, "queues": {"quotas": {"onDemand": {"cpu": 10, "memory": "75Gi"}}}},
                  "queues.quotas.onDemand", "must admit one 4x4 slice")
    # the fallback moves jobs between rungs
    stack_refused({"ladder": [FOUR_RUNGS[1]], "fallback": {"enabled": True}}, "fallback.enabled", "two rungs")
    assert not stack({"ladder": [FOUR_RUNGS[1]]}).fallback.enabled


def test_a_ladder_with_too_many_pools_for_one_cluster_queue() -> None:
    # v6e 4x4 is multi-host: one pool (one flavor) per slice; 63 TPU flavors beside default-cpu is Kueue's limit
    stack_refused({"ladder": [{"name": "od", "kind": "onDemand", "maxSlices": 40},
                              {"name": "spot", "kind": "spot", "maxSlices": 24}]},
                  "ladder[0].maxSlices 40", "make 64 node pools", "at most 64")
    assert stack({"ladder": [{"name": "od", "kind": "onDemand", "maxSlices": 40},
                             {"name": "spot", "kind": "spot", "maxSlices": 23}]}).ladder is not None


def test_the_ladder_key_through_the_cli_strings() -> None:
    # the CLI hands the stack file's list over as JSON text
    settings = parse_settings(decode_config({"tpu-fallback:ladder": json.dumps(FOUR_RUNGS)}), "my-project")
    assert [r.name for r in settings.capacity_ladder.rungs] == [r["name"] for r in FOUR_RUNGS]
    assert "ladder" in CONFIG_KEYS
    stack_refused({"ladder": "[{not json"}, "ladder", "YAML list of rungs")


def test_multikueue_workers_take_the_stack_ladder_or_their_own() -> None:
    workers: list[dict[str, Any]] = [
        {"name": "us", "location": "us-east5-b"},
        {"name": "eu", "location": "europe-west4-a", "ladder": FOUR_RUNGS[:3]}]  # no v6e flex-start there
    settings = stack({"ladder": FOUR_RUNGS, "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}},
                      "multikueue": {"enabled": True, "workers": workers}})
    us, eu = (w.settings.capacity_ladder for w in settings.multikueue.workers)
    assert [r.name for r in us.rungs] == ["reserved", "on-demand", "spot", "flex"]
    assert [r.name for r in eu.rungs] == ["reserved", "on-demand", "spot"]
    # the stack's ladder in a zone without v6e flex-start: the worker's entry is named
    workers[1].pop("ladder")
    stack_refused({"ladder": FOUR_RUNGS, "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}},
                   "multikueue": {"enabled": True, "workers": workers}}, "multikueue.workers[1]", "ladder[3].kind",
                  "europe-west4-a")
