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

# Longest first, so no long module starts last (pytest-xdist hands each worker the next module as it frees up; a
# module is one work unit). The figures: wall seconds of each module in a warm `.ci/run` on 6 workers, 2 cores
# (2026-12-04, 0ece3b2, printed by tests/module_times.py); only the order matters. The unit tests follow.
SCHEDULE = (
    "test_fallback_operations_e2e",  # about 300 (estimated: a lease take-over, two 60 s cool-downs and their sweeps)
    "test_engine_e2e",  # 280 with the examples' half, now test_engine_examples_e2e
    "test_stockout_evidence_e2e",  # 228
    "test_gke_sim_e2e",  # 219
    "test_evidence_ladder_e2e",  # about 180 (measured alone beside a CPU busy loop: a 90 s slice, then a 32 s one)
    "test_ladder_e2e",  # 145
    "test_stockout_moves_e2e",  # 135
    "test_dws_failures_e2e",  # 166 alone (2026-12-04)
    "test_evidence_v3_e2e",  # 121 alone (2026-12-04)
    "test_fallback_lifecycle_e2e",  # 127
    "test_stockout_fallback_e2e",  # 105
    "test_status_e2e",  # about 250 alone (2026-12-05: four scenarios of tpu-fallback status)
    "test_job_kinds_e2e",  # 146-164 alone (2026-12-05, 2 busy cores: JobSet, RayCluster, batch Job, Pod group)
    "test_elastic_e2e",  # 94
    "test_engine_examples_e2e",  # about 80 (the example stacks' previews and the hardened stack)
    "test_component_e2e",  # 80-103 (2026-12-05: a YAML program's Platform, a stack made before the components)
    "test_pip_install_e2e",  # 66 alone (2026-12-05: pip installs the package at a git ref from PyPI)
    "test_component_sdks_e2e",  # 20 warm, 105 cold (2026-12-05: gen-sdk for Go and Node.js, both compiled)
    "test_ladder_engine_e2e",  # 78
    "test_fallback_e2e",  # 72
    "test_controller_manager_e2e",  # 48
    "test_multikueue_e2e",  # 42
    "test_kueue_chart_e2e",  # 31
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
