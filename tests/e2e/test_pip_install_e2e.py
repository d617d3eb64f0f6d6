"""A Python program outside the repository installs the package at a git ref with pip, into a virtualenv of its own
(its dependencies from PyPI, as the package pins them), and builds the dev stack's platform in a few lines: the same
resources the repository's dev stack registers. Run under Pulumi's mock runtime (there is no GCP here), with the
installed package's own tpu_fallback.offline.mockrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import infra
from tests.test_api import resources, user_project
from tpu_fallback.offline.mockrun import REPO_ROOT

pytestmark = pytest.mark.e2e

DRIVER = """
import json, sys
import tpu_fallback
from tpu_fallback.offline.mockrun import run_program

run = run_program(sys.argv[1], "dev")
print(json.dumps({"package": tpu_fallback.__file__, "secret": sorted(run.secret_outputs),
                  "resources": [[r.type, r.name, r.inputs] for r in run.resources]}))
"""


def test_pip_install_at_a_git_ref_then_a_program_of_a_few_lines(tmp_path: Path) -> None:
    ref = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
                         ).stdout.strip()
    venv = tmp_path / "venv"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    requirement = f"git+file://{REPO_ROOT}@{ref}"  # pip 23 (a fresh venv's) reads a file URL only bare
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement], env=env,
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]

    project = user_project(tmp_path)
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", DRIVER, str(project)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert Path(result["package"]).is_relative_to(venv), "the program used the repository's package, not pip's"
    assert result["secret"] == ["kubeconfig"]
    mine = {(t, n): inputs for t, n, inputs in result["resources"]
            if not t.startswith(("pulumi:pulumi:Stack", "tpu-fallback:index:"))}
    dev = {key: json.loads(json.dumps(inputs)) for key, inputs in resources(infra("dev")).items()}
    assert len(mine) >= 40 and mine == dev
