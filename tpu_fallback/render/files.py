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
