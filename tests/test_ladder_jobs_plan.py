"""The jobs stack's offline plan against a capacity ladder prices every rung (report.jobs_markdown): one column per
rung in ladder order, from the infra stack's `flavors.rungs` output; against a two-plan stack the table is today's
(plan A / plan B). Expected figures are computed here from prices.yaml and the catalog, not taken from the report.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import yaml

from tests.conftest import infra
from tpu_fallback.model import catalog
from tpu_fallback.model.jobs import JobSpec
from tpu_fallback.offline import prices, report
from tpu_fallback.offline.mockrun import REPO_ROOT

PRICES = yaml.safe_load((REPO_ROOT / "tpu_fallback" / "offline" / "prices.yaml").read_text())
CHIPS = catalog.resolve_slice("v6e", "4x4").chips_per_slice  # one slice per copy
REGION = "us-east5"  # Pulumi.ladder.yaml's us-east5-b


def chip_hour(plan: str) -> Decimal | None:
    value = PRICES["tpu"]["v6e"][plan].get("regions", {}).get(REGION, PRICES["tpu"]["v6e"][plan].get("default"))
    return None if value is None else Decimal(str(value))


def usd(value: Decimal) -> str:
    return prices.money(value)


def table(outputs: dict[str, Any], specs: tuple[JobSpec, ...]) -> list[list[str]]:
    lines, _diagram = report.jobs_markdown("organization/tpu-fallback/x", specs, outputs, prices.load())
    header = next(i for i, line in enumerate(lines) if line.startswith("| job |"))
    rows = [line for line in lines[header:] if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows if not row.startswith("|---")]


def test_a_ladder_stacks_jobs_are_priced_on_every_rung_in_ladder_order() -> None:
    outputs = dict(infra("ladder").outputs)
    specs = (JobSpec(name="plain", count=1), JobSpec(name="ckpt", count=2, preemptible=True))
    header, plain, ckpt = table(outputs, specs)
    assert header[6:] == ["`reserved` (reservation) per copy-hour", "`on-demand` (on-demand) per copy-hour",
                          "`spot` (spot) per copy-hour", "`flex` (DWS flex-start) per copy-hour"]
    on_demand, spot = chip_hour("onDemand"), chip_hour("spot")
    assert on_demand is not None and spot is not None  # v6e in us-east5: both sourced in prices.yaml
    # A reservation is billed at the on-demand price, used or not; spot only for a job that opts in; flex-start has
    # no verified price.
    assert plain[6:] == [f"{usd(on_demand * CHIPS)} (reserved: billed whether it runs or not)",
                         usd(on_demand * CHIPS), "– (not preemptible)", "n/a"]
    assert ckpt[6:] == [f"{usd(on_demand * CHIPS)} (reserved: billed whether it runs or not)",
                        usd(on_demand * CHIPS), usd(spot * CHIPS), "n/a"]
    assert spot < on_demand
    lines, _ = report.jobs_markdown("x", specs, outputs, prices.load())
    (note,) = [line for line in lines if line.startswith("Prices:")]
    assert "reservation " in note and "spot $" in note and "DWS flex-start no verified price" in note


def test_a_two_plan_stacks_jobs_table_is_todays() -> None:
    outputs = dict(infra("dev").outputs)
    header, row = table(outputs, (JobSpec(name="plain", count=1, preemptible=True),))
    assert header[6:] == ["plan A per copy-hour", "plan B per copy-hour"]
    on_demand = chip_hour("onDemand")
    assert on_demand is not None
    assert row[6:] == [usd(on_demand * CHIPS), "n/a"]


def test_a_rung_kind_this_plan_does_not_know_is_left_out_not_mispriced() -> None:
    outputs = dict(infra("ladder").outputs)
    flavors = dict(outputs["flavors"])
    flavors["rungs"] = [*flavors["rungs"], {"name": "future", "kind": "somethingNew", "flavors": ["future"]}]
    header, _row = table({**outputs, "flavors": flavors}, (JobSpec(name="plain", count=1),))
    assert len(header) == 6 + 4 and not any("future" in cell for cell in header)
