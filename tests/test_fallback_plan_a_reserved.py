"""Two plans whose plan A consumes a specific reservation (onDemand.reservation): the controller's config says so
(planAReserved), and a job waiting on plan B moves to plan A's free quota with no node in plan A's pool, as it does
to a reservation rung of a ladder (tests/test_fallback_ladder.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.test_fallback import T0
from tests.test_fallback_ladder import node, of, snap, waiting_on_dws, write_config
from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.config import Settings
from tpu_fallback.model.queues import queue_plan
from tpu_fallback.model.settings import FallbackSettings, parse_settings
from tpu_fallback.render import fallback as render_fallback

TWO_PLANS = d.Config(plan_a_flavors=("on-demand",), plan_b_flavors=("dws",), stockout_after=600, cool_down=1800)


def test_a_job_waiting_on_plan_b_moves_to_a_reserved_plan_a_with_no_node() -> None:
    reserved = replace(TWO_PLANS, plan_a_reserved=True)
    (move,) = of(d.Deactivate, d.decide(reserved, snap(T0 + 10, [waiting_on_dws()])))
    assert move.target == "on-demand" and "no node yet" in move.why and "moving it to plan A" in move.why
    # Without the flag plan A's empty pool is no capacity seen: nothing moves until a Ready node is there.
    assert of(d.Deactivate, d.decide(TWO_PLANS, snap(T0 + 10, [waiting_on_dws()]))) == []
    (move,) = of(d.Deactivate, d.decide(TWO_PLANS, snap(T0 + 10, [waiting_on_dws()], nodes=[node("on-demand-pool")])))
    assert "1 free Ready node" in move.why


def test_the_config_carries_plan_a_reserved_only_when_plan_a_consumes_a_reservation(tmp_path: Path) -> None:
    plain = render_fallback.controller_config(queue_plan(parse_settings({}, "my-project")), FallbackSettings())
    assert "planAReserved" not in plain and "rungs" not in plain
    settings = parse_settings({"onDemand": {"reservation": "my-reservation"}}, "my-project")
    reserved = render_fallback.controller_config(queue_plan(settings), FallbackSettings())
    assert reserved["planAReserved"] is True
    assert {k: v for k, v in reserved.items() if k != "planAReserved"} == plain  # nothing else changes
    # and the controller reads what the program renders
    path = tmp_path / "config.json"
    path.write_text(json.dumps(reserved))
    assert [r.reserved for r in Settings.from_file(path).decide.ladder] == [True, False]


def test_the_controller_reads_plan_a_reserved(tmp_path: Path) -> None:
    keys: dict[str, Any] = {"planAFlavors": ["on-demand"], "planBFlavors": ["dws"]}
    assert Settings.from_file(write_config(tmp_path, **keys)).decide.ladder[0].reserved is False
    settings = Settings.from_file(write_config(tmp_path, **keys, planAReserved=True))
    assert settings.decide.two_plans and [r.reserved for r in settings.decide.ladder] == [True, False]


@pytest.mark.parametrize("keys, message", [
    ({"planAFlavors": ["a"], "planBFlavors": ["b"], "planAReserved": "yes"}, "planAReserved 'yes' is invalid"),
    ({"rungs": [{"name": "a", "flavors": ["x"]}], "planAReserved": True}, "only without \"rungs\""),
])
def test_a_bad_plan_a_reserved_is_refused(tmp_path: Path, keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_file(write_config(tmp_path, **keys))
