"""tests/module_times.py: a module's CPU time counts the processes it started, and xdist workers' figures reach the
controller's summary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tpu_fallback.offline.mockrun import REPO_ROOT

SPIN = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"
BUSY_CHILD = f"""
import subprocess, sys

def test_busy_child():
    # about 0.6 s of CPU in a child process, none in this one
    subprocess.run([sys.executable, "-c", "{SPIN}"], check=True)
"""
IDLE = """
import time

def test_idle():
    time.sleep(0.3)
"""


@pytest.mark.parametrize("xdist", [False, True], ids=["one-process", "xdist"])
def test_each_module_gets_its_own_and_its_childrens_cpu(tmp_path: Path, xdist: bool) -> None:
    (tmp_path / "test_busy.py").write_text(BUSY_CHILD)
    (tmp_path / "test_idle.py").write_text(IDLE)
    args = ["-n", "2", "--dist", "loadfile"] if xdist else ["-p", "no:xdist"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.module_times", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path), *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {m.group(3): (float(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"^\s+([\d.]+)\s+([\d.]+)\s+\S+\s+(\S+\.py)$", proc.stdout, re.MULTILINE)}
    assert set(rows) == {"test_busy.py", "test_idle.py"}, proc.stdout
    busy_cpu, _ = rows["test_busy.py"]
    idle_cpu, idle_wall = rows["test_idle.py"]
    assert busy_cpu >= 0.55, proc.stdout  # the child's 0.6 s counted (minus clock granularity)
    assert idle_cpu < 0.3 <= idle_wall, proc.stdout
    assert re.search(r"every module's CPU time / the session's wall time", proc.stdout), proc.stdout
