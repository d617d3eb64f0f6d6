"""`python -m tools.benchmark` (docs/development.md, "Benchmark"): the multi-region scenarios render for any
number of workers, and a bad --scenario is refused with a clear message."""

from __future__ import annotations

import pytest

from tools import benchmark
from tpu_fallback.model import catalog


def test_workers_get_plan_b_only_where_the_catalog_offers_v6e_flex_start() -> None:
    family = catalog.FAMILIES["v6e"]
    zones = benchmark.worker_zones(20)
    assert len(zones) == 20
    # 20 workers go round every v6e zone, so both kinds of zone occur (the crash at 3 workers was a zone without
    # flex-start getting plan B).
    assert {zone for zone, _ in zones} == set(family.known_zones)
    assert {flex for _, flex in zones} == {True, False}
    for zone, flex in zones:
        assert flex == (zone in family.flex_start_zones), zone


def test_three_workers_render() -> None:
    """The scenario that crashed: rendered in this process through the same entry the table uses."""
    figures = benchmark.measure("workers", 3)
    # Each worker adds a cluster, so 3 workers register more than 1 does.
    assert figures["resources"] > benchmark.measure("workers", 1)["resources"]


@pytest.mark.parametrize("text", ["workers:0", "jobs", "jobs:x", "dev:1", "prod"])
def test_a_bad_scenario_names_itself_and_what_is_allowed(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["--scenario", text])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert repr(text) in err and "dev, workers:N or jobs:N" in err


@pytest.mark.parametrize(("text", "expected"), [("dev", ("dev", 0)), ("workers:3", ("workers", 3)),
                                                ("jobs:100", ("jobs", 100))])
def test_scenarios_parse(text: str, expected: tuple[str, int]) -> None:
    assert benchmark.scenario(text) == expected
