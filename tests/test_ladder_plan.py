"""The offline plan of a capacity-ladder stack (Pulumi.ladder.yaml): every rung with its capacity, concurrency and
list-price cost, and the ladder in the Mermaid diagram.

Expected figures come from the stack file, the TPU catalog and prices.yaml, not from the report."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import yaml

from tests.test_plan_report import price, stack_file, stack_report
from tpu_fallback.model import catalog
from tpu_fallback.offline import prices, report
from tpu_fallback.offline.mockrun import REPO_ROOT

LADDER = stack_file("ladder")["tpu-fallback:ladder"]
KINDS = {"reservation": "reservation", "onDemand": "on-demand", "spot": "spot", "flexStart": "flex-start"}


def slices(rung: dict[str, object]) -> int:
    value = rung.get("maxSlices") or rung["reservation"]["size"]  # type: ignore[index]
    assert isinstance(value, int)
    return value


def test_the_example_is_a_four_rung_ladder_where_gke_offers_v6e_flex_start() -> None:
    config = stack_file("ladder")
    assert [r["kind"] for r in LADDER] == ["reservation", "onDemand", "spot", "flexStart"]
    tpu = config["tpu-fallback:tpu"]
    assert tpu["type"] == "v6e"
    assert config["tpu-fallback:location"] in catalog.FAMILIES["v6e"].flex_start_zones


def test_every_rung_with_its_capacity_and_concurrency() -> None:
    (cluster,) = stack_report("ladder").clusters
    chips_per_slice = catalog.resolve_slice("v6e", "4x4").chips_per_slice
    assert [(p.plan, p.chips) for p in cluster.plans] == [(r["name"], slices(r) * chips_per_slice) for r in LADDER]
    # v6e 4x4 is multi-host: one pool per slice, each running one one-slice job
    assert [(p.plan, p.runs) for p in cluster.plans] == [(r["name"], slices(r)) for r in LADDER]
    assert [p.kind for p in cluster.pools] == [KINDS[r["kind"]] for r in LADDER for _ in range(slices(r))]
    text = "\n".join(report.capacity_markdown(stack_report("ladder")))
    for i, rung in enumerate(LADDER, 1):
        assert f"| rung {i} {rung['name']} (" in text, rung
    assert "`reserved` → `on-demand` → `spot` → `flex`" in text
    assert "preemptible: true" in text and "tpu-v6e-reservation" in text


def test_cost_per_rung_from_the_price_table() -> None:
    table = prices.load()
    (cluster,) = stack_report("ladder").clusters
    cost = report.cluster_cost(cluster, table)
    region = "us-east5"
    on_demand = price("tpu", "v6e", "onDemand", region=region)
    spot = price("tpu", "v6e", "spot", region=region)
    assert on_demand is not None and spot is not None and spot < on_demand
    chips = {p.plan: p.chips for p in cluster.plans}
    assert cost.plans["reserved"].value == chips["reserved"] * on_demand  # a reservation bills at on-demand rates
    assert cost.plans["on-demand"].value == chips["on-demand"] * on_demand
    assert cost.plans["spot"].value == chips["spot"] * spot == Decimal(32) * Decimal("1.08")
    assert cost.plans["flex"].missing and cost.plans["flex"].value == 0  # no verified flex-start price: n/a
    job_chips = 16
    assert cost.job["spot"].value == job_chips * spot
    text = "\n".join(report.cost_markdown(stack_report("ladder"), table))
    assert ("| rung 1 reserved at full scale | rung 2 on-demand at full scale | rung 3 spot at full scale | "
            "rung 4 flex at full scale |") in text
    assert f"| {prices.money(chips['spot'] * spot)} | n/a |" in text
    assert "TPU v6e spot chip-hour" in text and "skypilot-catalog" in text


def test_the_diagram_shows_the_ladder_in_order() -> None:
    mermaid = report.diagram(stack_report("ladder")).mermaid()
    flavors = [f for r in LADDER for f in ([r["name"]] + [f"{r['name']}-{i}" for i in range(2, slices(r) + 1)])]
    for i, flavor in enumerate(flavors, 2):  # 1 is default-cpu
        node = "tpu_ladder_flavor_" + flavor.replace("-", "_")
        assert f'tpu_ladder_cq -->|"{i}' in mermaid and f"{i}" in mermaid
        assert f"{node}[" in mermaid, flavor
    assert "spot, preemptible jobs only" in mermaid and "reservation tpu-v6e-reservation" in mermaid


def test_scripts_plan_renders_the_ladder_stack(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "ladder", "--quiet", "--out",
                             str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "summary.md").read_text()
    for rung in LADDER:
        assert f"rung {LADDER.index(rung) + 1} {rung['name']}" in summary
    objects = [o for o in yaml.safe_load_all((tmp_path / "kubernetes.yaml").read_text()) if o]
    flavors = [o["metadata"]["name"] for o in objects if o["kind"] == "ResourceFlavor"]
    assert len(flavors) == 1 + sum(slices(r) for r in LADDER), flavors
