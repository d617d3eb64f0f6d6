"""Where a test run's time goes: each test module's wall time and CPU time, printed at the end of the run.

CPU time is the test process's own plus that of the processes it started and waited for (the control planes, the
Pulumi CLI and its plugins, the offline plans' interpreters): the figure that decides how long the suite takes on a
busy 2-core runner, where wall times mostly measure the neighbours. A module's figures run from its first test's
start to the next module's (its module-scoped fixtures' teardown included). Figures are printed, never asserted.

Under pytest-xdist each worker writes its modules' figures to a file in a directory the controller made and passed
on (workerinput), and the controller prints them all.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

_DIR_KEY = "module_times_dir"
SHOWN = 25  # the longest modules by CPU time; the rest are summed in one line


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class ModuleTimes:
    def __init__(self, out: Path, worker: str) -> None:
        self.out, self.worker = out, worker
        self.module: str | None = None
        self.wall = self.cpu = 0.0

    def start(self, module: str) -> None:
        if module == self.module:
            return
        self.finish()
        self.module, self.wall, self.cpu = module, time.monotonic(), _cpu_seconds()

    def finish(self) -> None:
        if self.module is None:
            return
        row = {"module": self.module, "worker": self.worker, "wall": time.monotonic() - self.wall,
               "cpu": _cpu_seconds() - self.cpu}
        with (self.out / f"{self.worker}.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        self.module = None


def pytest_configure(config: pytest.Config) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None:  # the controller, or a run without xdist
        out = Path(tempfile.mkdtemp(prefix="module-times-"))
        config.stash[_OUT] = out
        config.stash[_STARTED] = time.monotonic()
        worker = "main"
    else:
        out, worker = Path(workerinput[_DIR_KEY]), str(workerinput.get("workerid", "worker"))
    config.stash[_TIMES] = ModuleTimes(out, worker)
    if workerinput is None and config.pluginmanager.hasplugin("xdist"):  # its hook exists only with the plugin
        config.pluginmanager.register(_XdistController(), "module-times-xdist")


class _XdistController:
    def pytest_configure_node(self, node: Any) -> None:  # hand the directory to each worker
        node.workerinput[_DIR_KEY] = str(node.config.stash[_OUT])


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    item.config.stash[_TIMES].start(item.nodeid.split("::")[0])


def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[_TIMES].finish()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    out = config.stash.get(_OUT, None)
    if out is None:  # a worker
        return
    started_wall = config.stash[_STARTED]
    rows = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    shutil.rmtree(out, ignore_errors=True)
    if not rows:
        return
    # A module split over workers (without --dist loadfile) is one row: its CPU and wall times added up.
    modules: dict[str, dict[str, Any]] = {}
    for r in rows:
        row = modules.setdefault(r["module"], {"module": r["module"], "cpu": 0.0, "wall": 0.0, "workers": []})
        row["cpu"] += r["cpu"]
        row["wall"] += r["wall"]
        row["workers"].append(r["worker"])
    rows = sorted(modules.values(), key=lambda r: -r["cpu"])
    write = terminalreporter.write_line
    terminalreporter.section("module times (wall and CPU seconds; CPU includes the processes a module started)")
    write(f"{'cpu':>8} {'wall':>8}  worker  module")
    for r in rows[:SHOWN]:
        write(f"{r['cpu']:8.1f} {r['wall']:8.1f}  {','.join(r['workers']):<6}  {r['module']}")
    rest = rows[SHOWN:]
    if rest:
        write(f"{sum(r['cpu'] for r in rest):8.1f} {sum(r['wall'] for r in rest):8.1f}  {'':<6}  "
              f"the other {len(rest)} modules")
    write(f"{sum(r['cpu'] for r in rows):8.1f} {time.monotonic() - started_wall:8.1f}  every module's CPU time / "
          f"the session's wall time, on {os.cpu_count()} CPUs")


_OUT = pytest.StashKey[Path]()
_STARTED = pytest.StashKey[float]()
_TIMES = pytest.StashKey[ModuleTimes]()
