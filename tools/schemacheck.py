"""Validate rendered Kubernetes objects with ../shared/tools/crdcheck.py.

Kinds whose CRD is not among the shared schemas (PodMonitoring: Google Managed Prometheus) are set
aside and reported, not silently passed; the tests check their structure instead.

    python -m tools.schemacheck build/plan/*/kubernetes.yaml
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tpu_fallback.offline.mockrun import REPO_ROOT

SHARED = Path(os.environ.get("TPU_FALLBACK_SHARED", REPO_ROOT.parent / "shared"))
CRDCHECK = SHARED / "tools" / "crdcheck.py"
NO_SHARED_SCHEMA = {("monitoring.googleapis.com/v1", "PodMonitoring")}


def split(objects: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    checkable = [o for o in objects if (o.get("apiVersion"), o.get("kind")) not in NO_SHARED_SCHEMA]
    return checkable, [o for o in objects if o not in checkable]


def crdcheck(objects: list[dict[str, Any]], *extra: str) -> subprocess.CompletedProcess[str]:
    checkable, _ = split(objects)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump_all(checkable, handle, sort_keys=False)
    try:
        return subprocess.run([sys.executable, str(CRDCHECK), *extra, handle.name],
                              capture_output=True, text=True, check=False)
    finally:
        Path(handle.name).unlink()


def main(argv: list[str]) -> int:
    if not CRDCHECK.exists():
        print(f"schema check skipped: {CRDCHECK} not found")
        return 0
    objects: list[dict[str, Any]] = []
    for path in argv:
        objects.extend(o for o in yaml.safe_load_all(Path(path).read_text()) if o)
    _, set_aside = split(objects)
    result = crdcheck(objects, "--quiet")
    print(result.stdout, end="")
    print(result.stderr, end="", file=sys.stderr)
    for obj in set_aside:
        print(f"no shared schema, structure checked by the tests: {obj['kind']} "
              f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
