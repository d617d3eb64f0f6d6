"""The package's data files: the YAML templates the renderers start from, and the training script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PACKAGE = Path(__file__).resolve().parent.parent
TEMPLATES = PACKAGE / "render" / "templates"
TRAINING_SCRIPT = PACKAGE / "training" / "train.py"


def load_template(name: str) -> Any:
    """A template from render/templates/, parsed (each call returns a fresh copy to modify)."""
    return yaml.safe_load((TEMPLATES / name).read_text())


def training_script() -> str:
    return TRAINING_SCRIPT.read_text()


# The fallback controller runs from these files, mounted from a ConfigMap into a stock Python image
# (tpu_fallback/fallback/__init__.py); tests/test_fallback.py checks they import nothing else of the package.
CONTROLLER_SOURCES = (
    "__init__.py", "model/__init__.py", "model/quantity.py", "fallback/__init__.py", "fallback/__main__.py",
    "fallback/config.py", "fallback/controller.py", "fallback/decide.py", "fallback/evidence.py",
    "fallback/gke_reasons.py", "fallback/kube.py", "fallback/lease.py", "fallback/metrics.py", "fallback/read.py",
    "fallback/sweep.py", "fallback/view.py", "fallback/watch.py",
)


def controller_sources() -> dict[str, str]:
    """Path below tpu_fallback/ -> source text."""
    return {path: (PACKAGE / path).read_text() for path in CONTROLLER_SOURCES}
