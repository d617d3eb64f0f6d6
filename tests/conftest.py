"""Shared fixtures: stacks evaluated under Pulumi's mock runtime (tpu_fallback/offline/mockrun.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pytest

from tests.module_times import (  # each test module's wall and CPU time, printed at the end of the run
    pytest_configure,
    pytest_runtest_protocol,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
from tools import schemacheck
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

__all__ = ["pytest_configure", "pytest_runtest_protocol", "pytest_sessionfinish", "pytest_terminal_summary"]


def _freeze(overrides: Mapping[str, Any] | None) -> str:
    return json.dumps(overrides or {}, sort_keys=True)


@lru_cache(maxsize=64)
def _cached_infra(stack: str, frozen: str) -> ProgramRun:
    return run_program(REPO_ROOT, stack, json.loads(frozen))


def infra(stack: str = "dev", overrides: Mapping[str, Any] | None = None) -> ProgramRun:
    """Evaluate the infrastructure project (cached: runs are read-only)."""
    return _cached_infra(stack, _freeze(overrides))


@pytest.fixture
def dev() -> ProgramRun:
    return infra("dev")


def schema_check(objects: list[dict[str, Any]]) -> schemacheck.Report:
    """Validate objects against the real CRD schemas (tools/schemacheck.py: the CRDs the e2e build copies out of the
    Go modules), plus ../shared's crdcheck where present; skip, saying why, when the CRDs are not on this machine
    (./scripts/test builds them first, unless TPU_FALLBACK_SKIP_E2E=1)."""
    try:
        return schemacheck.check_with_extra(objects)
    except schemacheck.CrdsUnavailableError as err:
        pytest.skip(f"CRD schema check not run: {err}")
