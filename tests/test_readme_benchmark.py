"""`python -m tools.benchmark` (docs/development.md, "Benchmark"): the multi-region scenarios give plan B only to
workers in zones with v6e flex-start, and a bad --scenario is refused with a clear message. (That 3 workers render
through the command line is run by tests/test_readme_commands.py, as docs/development.md shows it.)"""

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
