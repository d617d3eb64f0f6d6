"""The end-to-end tests build real components (minutes on a cold cache); TPU_FALLBACK_SKIP_E2E=1 leaves them out.

Parallel runs (./scripts/test: `pytest -n N --dist loadfile --no-loadscope-reorder`): a module's tests share its
cluster (module-scoped fixtures), so a module is one work unit, run whole on one worker; a long scenario set that
needs no state of another is a module of its own (test_stockout_moves_e2e.py beside test_stockout_fallback_e2e.py).
xdist gives each worker two work units to start with, round-robin in collection order, then one more whenever a
worker runs short; so the e2e modules are collected first, in the order below, which pairs the longest with the
shortest of the first eight on 4 workers, and the unit test files fill the gaps at the end. (`--dist loadgroup`
would let a module span workers, but pytest-xdist 3.8 marks a group by rewriting `Item._nodeid`, which pytest 9
no longer reads: the groups are silently ignored.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.e2e.fallback_scenarios import FallbackBox

# Warm wall seconds of each module run alone on 2 cores (2026-12-01; the two stock-out evidence modules: half of the
# 270 s of the one they were split from, 2026-12-03); only the order matters. Those two wait on the fallback's
# timers most of their time, so each pairs with a short one.
SCHEDULE = (
    "test_engine_e2e",  # 275 (with the hardened stack, 2026-12-04)  worker 1
    "test_ladder_engine_e2e",  # 225 (2026-12-04, beside a CPU hog)  worker 2
    "test_gke_sim_e2e",  # 170  worker 3
    "test_stockout_evidence_e2e",  # 175  worker 4
    "test_controller_manager_e2e",  # 28  worker 1
    "test_fallback_e2e",  # 38  worker 2
    "test_kueue_chart_e2e",  # 42  worker 3
    "test_elastic_e2e",  # 62  worker 4
    "test_fallback_lifecycle_e2e",  # 140  then to whichever worker runs short
    "test_ladder_e2e",  # 140 (2026-12-04, beside a CPU hog)
    "test_stockout_moves_e2e",  # 130
    "test_stockout_fallback_e2e",  # 110
    "test_multikueue_e2e",  # 70
)


def _rank(item: pytest.Item) -> int:
    module = item.path.stem  # the test file's name
    return SCHEDULE.index(module) if module in SCHEDULE else len(SCHEDULE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TPU_FALLBACK_SKIP_E2E") == "1":
        skip = pytest.mark.skip(reason="TPU_FALLBACK_SKIP_E2E=1")
        for item in items:
            if "e2e" in item.keywords:
                item.add_marker(skip)
    items.sort(key=_rank)  # stable: the order within a module (and of the unit tests) stays the file order


@pytest.fixture(scope="module")
def fallback_box() -> Iterator[FallbackBox]:
    """The stock-out modules' simulated GKE with Kueue's waitForPodsReady: one per module, reset between tests."""
    from tests.e2e.fallback_scenarios import FallbackBox  # only where a test asks for it

    with FallbackBox() as cluster_box:
        yield cluster_box
