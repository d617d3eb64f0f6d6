"""Shared fixtures: stacks evaluated under Pulumi's mock runtime (tpu_fallback/offline/mockrun.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pytest

from tools import schemacheck
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program


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


def crdcheck(objects: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """Validate objects with ../shared/tools/crdcheck.py (kinds without a shared schema set aside); skip without it."""
    if not schemacheck.CRDCHECK.exists():
        pytest.skip(f"{schemacheck.CRDCHECK} not present")
    return schemacheck.crdcheck(objects)

