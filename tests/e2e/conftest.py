"""The end-to-end tests build real components (minutes on a cold cache); TPU_FALLBACK_SKIP_E2E=1 leaves them out."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TPU_FALLBACK_SKIP_E2E") == "1":
        skip = pytest.mark.skip(reason="TPU_FALLBACK_SKIP_E2E=1")
        for item in items:
            if "e2e" in item.keywords:
                item.add_marker(skip)
