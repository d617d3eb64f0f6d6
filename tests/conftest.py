"""Shared fixtures: stacks evaluated under Pulumi's mock runtime (tools/mockrun.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.mockrun import REPO_ROOT, ProgramRun, run_program

SHARED = Path(os.environ.get("TPU_FALLBACK_SHARED", REPO_ROOT.parent / "shared"))
CRDCHECK = SHARED / "tools" / "crdcheck.py"


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


def crdcheck(objects: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Validate objects with ../shared/tools/crdcheck.py; skip when ../shared is absent."""
    if not CRDCHECK.exists():
        pytest.skip(f"{CRDCHECK} not present")
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return subprocess.run([sys.executable, str(CRDCHECK), str(path)], capture_output=True, text=True, check=False)


Finder = Callable[[str], list[dict[str, Any]]]
