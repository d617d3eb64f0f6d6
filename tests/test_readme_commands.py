"""Every command of the README's shell blocks, and of the docs/ blocks marked `<!-- runs offline: ... -->`, is run
here as written (offline: no cloud, no cluster) and must exit 0 and print what it is for; or it is listed in NOT_RUN
with the reason it cannot run here. A command that is neither fails the test, so the README cannot grow an untested
command, and an entry whose command is gone from the pages fails too.

The commands run side by side (a few seconds of CPU each). Offline plans write to a temporary directory (`--out`)
instead of build/plan/, so a run never clobbers a plan someone is reading; that is the only change made to them.
The excerpts the pages show of a plan (docs/offline-plan.md's summary, diagram and compare excerpts) are checked line
by line against what the commands rendered, and the screen excerpts (README's and docs/offline-plan.md's `text`
blocks) against what `./scripts/plan dev` and `./scripts/plan dev --compare-stack prod` printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tpu_fallback.offline.mockrun import REPO_ROOT

DOCS = REPO_ROOT / "docs"
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\s*$")
OFFLINE_MARK = "<!-- runs offline:"


def fenced_blocks(text: str) -> list[tuple[str, str, str]]:
    """(info string, body, the line before the fence) of every fenced block."""
    blocks: list[tuple[str, str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, before, body = lines[i][3:].strip(), lines[i - 1] if i else "", []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            blocks.append((info, "\n".join(body), before))
        i += 1
    return blocks


def strip_comment(line: str) -> str:
    """The line without a trailing shell comment (a # after whitespace, outside quotes)."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                continue
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands_of(body: str) -> list[str]:
    """One string per command: continuation lines joined, comments and blank lines dropped, spaces collapsed."""
    commands: list[str] = []
    pending = ""
    for raw in body.splitlines():
        line = strip_comment(raw)
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        if line.strip():
            commands.append(" ".join(line.split()))
    return commands


def page_commands() -> dict[str, str]:
    """command -> the page it is on: every shell block of README.md, the marked shell blocks of docs/."""
    found: dict[str, str] = {}
    for page in [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        readme = page.name == "README.md" and page.parent == REPO_ROOT
        for info, body, before in fenced_blocks(page.read_text()):
            if SHELL_BLOCK.match("```" + info) and (readme or before.startswith(OFFLINE_MARK)):
                for command in commands_of(body):
                    found.setdefault(command, str(page.relative_to(REPO_ROOT)))
    return found


def markdown_blocks(page: Path, info: str) -> list[str]:
    return [body for block_info, body, _ in fenced_blocks(page.read_text()) if block_info == info]


def excerpt_lines(excerpt: str) -> list[str]:
    """The lines an excerpt shows, each as it must occur in the rendered file (an elision `…` ends a line early)."""
    return [line.strip().removesuffix("…").strip() for line in excerpt.splitlines() if line.strip().strip("…")]


# --- what runs, and what cannot ----------------------------------------------------------------------------------

COMPARE_NEW_TOPOLOGY = "2x4"  # docs/offline-plan.md: new.yaml is Pulumi.dev.yaml with tpu.topology 2x4


@dataclass(frozen=True)
class Result:
    returncode: int
    output: str
    out: Path


@dataclass(frozen=True)
class Offline:
    """How to run one page command here: `out` appends `--out DIR` (an offline plan); `replace` swaps words of the
    command (placeholder files) for real ones; `expect` are patterns its stdout + stderr must contain; `then`
    checks what it wrote."""

    expect: tuple[str, ...]
    out: bool = False
    replace: dict[str, str] = field(default_factory=dict)
    then: Callable[[Result], None] | None = None


def check_summary_excerpts(result: Result) -> None:
    summary = (result.out / "summary.md").read_text()
    excerpts = markdown_blocks(DOCS / "offline-plan.md", "markdown")[:1]
    diagram = markdown_blocks(DOCS / "offline-plan.md", "mermaid")
    assert len(excerpts) == 1 and len(diagram) == 1
    missing = [line for block in excerpts + diagram for line in excerpt_lines(block) if line not in summary]
    assert not missing, "lines of the pages' excerpts that the dev plan does not render"
    check_screen(result, markdown_blocks(REPO_ROOT / "README.md", "text"))


def check_screen(result: Result, screens: list[str]) -> None:
    """A page's excerpt of what the plan prints: each line as printed (the timing and the paths are left out)."""
    assert len(screens) == 1
    printed = result.output.splitlines()
    missing = [line for line in screens[0].splitlines() if line not in printed]
    assert not missing, "lines of a page's screen excerpt that the command does not print as they are"


def check_compare_stack_screen(result: Result) -> None:
    check_screen(result, markdown_blocks(DOCS / "offline-plan.md", "text"))


def check_compare_excerpt(result: Result) -> None:
    summary = (result.out / "summary.md").read_text()
    excerpt = [b for b in markdown_blocks(DOCS / "offline-plan.md", "markdown") if "to replace" in b]
    assert len(excerpt) == 1
    missing = [line for line in excerpt_lines(excerpt[0]) if line not in summary]
    assert not missing, "lines of docs/offline-plan.md's compare excerpt that the comparison does not render"


RENDERED = r"Rendered \d+ registrations"
OFFLINE: dict[str, Offline] = {
    "./scripts/plan dev": Offline((RENDERED, r"2 jobs at once, limited by TPU capacity"), out=True,
                                  then=check_summary_excerpts),
    "./scripts/plan dev --project jobs": Offline((RENDERED, "rayjob-tpu-v6e-dws-1"), out=True),
    "./scripts/plan dev --compare-stack prod": Offline((RENDERED, r"deletionProtection +true → false",
                                                        r"\d+ to replace, \d+ to update"), out=True,
                                                       then=check_compare_stack_screen),
    # A checkout need not have a remote; HEAD takes the same path (git show REV:Pulumi.prod.yaml).
    "./scripts/plan prod --compare-rev origin/main": Offline((RENDERED, r"\d+ to replace, \d+ to update"), out=True,
                                                             replace={"origin/main": "HEAD"}),
    "./scripts/plan dev --stack-file new.yaml --compare-file old.yaml": Offline(
        (RENDERED, "2 to replace, 1 to update"), out=True, replace={"new.yaml": "{tmp}/new.yaml",
                                                                   "old.yaml": "{tmp}/old.yaml"},
        then=check_compare_excerpt),
    "venv/bin/python -m tools.benchmark --scenario dev --scenario workers:3": Offline(
        (r"infra dev stack +\d+ resources", r"multi-region, 3 workers +\d+ resources")),
    "venv/bin/python tpu_fallback/training/train.py --local": Offline(("Training Complete!", "Loss fell")),
    "venv/bin/python -m pytest tests/test_catalog.py -q -p no:xdist": Offline((r"\[100%\]",)),
}

NOT_RUN: dict[str, str] = {
    "./scripts/test": "the whole suite, this test included: CI runs it",
    "./scripts/setup": "installs the locked development requirements (from the network on a fresh machine); "
                       "./scripts/plan's own install check runs above",
    "pulumi package add github.com/<owner>/tpu-fallback/provider@v0.3.0": "fetches the package from GitHub; "
        "tests/e2e/test_component_e2e.py adds it from the checkout with the real CLI",
    "pulumi login --local": "the Pulumi CLI (the e2e's engine tests run it, hermetically)",
    "pulumi stack init dev": "the Pulumi CLI against a state backend",
    "pulumi config set gcp:project <your-project-id> -s dev": "the Pulumi CLI, a placeholder project",
    "pulumi preview -s dev": "needs GCP credentials and the GCP provider",
    "pulumi up -s dev": "creates resources in GCP (infra) or a real cluster (jobs)",
    "pulumi stack init existing": "the Pulumi CLI against a state backend",
    "pulumi config set --secret kubeconfig < kubeconfig.yaml -s existing": "needs a real cluster's kubeconfig",
    "pulumi up -s existing": "needs a real GKE cluster",
    "cd jobs": "changes the directory for the Pulumi commands after it",
    "pulumi stack output commands -s dev": "reads a deployed jobs stack",
    "kubectl -n default get workloads.kueue.x-k8s.io -o 'custom-columns=NAME:.metadata.name,"
    "FLAVORS:.status.admission.podSetAssignments[*].flavors'": "a real cluster",
    "kubectl -n default get provisioningrequests": "a real cluster",
    "venv/bin/tpu-fallback status --namespace default": "a cluster: tests/e2e/test_status_e2e.py runs the installed "
                                                        "command against the test cluster",
    "kubectl -n default logs -f job/rayjob-tpu-v6e-dws-1": "a real cluster",
    "kubectl get events -A --field-selector source=tpu-fallback-controller": "a real cluster",
    "kubectl get resourceflavors -o custom-columns=NAME:.metadata.name,TAINTS:.spec.nodeTaints": "a real cluster",
    "kubectl -n kueue-system port-forward deploy/tpu-fallback-controller 9090 &": "a real cluster",
    "curl -s localhost:9090/metrics | grep ^tpu_fallback": "the port-forward to a real cluster's controller",
    "venv/bin/python -m tools.benchmark": "every scenario, about a minute; the line after it runs two of them "
                                          "(and tests/test_readme_benchmark.py renders 3 workers)",
}


def test_every_command_is_run_or_listed() -> None:
    found = page_commands()
    unlisted = {command: page for command, page in found.items() if command not in OFFLINE and command not in NOT_RUN}
    assert not unlisted, "commands on the pages that this test neither runs nor lists in NOT_RUN with a reason"
    assert set(OFFLINE) & set(NOT_RUN) == set()
    gone = sorted((set(OFFLINE) | set(NOT_RUN)) - set(found))
    assert not gone, "entries whose command is no longer on the pages"


def test_the_parser_finds_commands() -> None:
    # Guards against a parser that finds nothing: a known command of each kind, comments and continuations handled.
    found = page_commands()
    assert found["./scripts/plan dev"] == "README.md"
    assert found["./scripts/plan dev --compare-stack prod"] == "README.md"
    assert found["venv/bin/python -m tools.benchmark --scenario dev --scenario workers:3"] == "docs/development.md"
    assert commands_of("a \\\n  b  # c\n# d\ne '#x' \"y # z\"") == ["a b", "e '#x' \"y # z\""]


def _venv_env() -> dict[str, str]:
    # The pages say venv/bin/python and ./scripts/plan uses ./venv: both mean the interpreter running these tests.
    env = dict(os.environ, VENV=str(Path(sys.prefix)), PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _run(command: str, spec: Offline, tmp: Path) -> Result:
    out = tmp / re.sub(r"\W+", "-", command)[:80]
    shell = command
    for word, real in spec.replace.items():
        shell = shell.replace(word, real.format(tmp=tmp))
    shell = shell.replace("venv/bin/python", sys.executable)
    if spec.out:
        shell += f" --out {out}"
    proc = subprocess.run(["bash", "-c", shell], cwd=REPO_ROOT, env=_venv_env(), capture_output=True, text=True,
                          timeout=600)
    return Result(proc.returncode, proc.stdout + proc.stderr, out)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    tmp = tmp_path_factory.mktemp("readme-commands")
    dev = (REPO_ROOT / "Pulumi.dev.yaml").read_text()
    (tmp / "old.yaml").write_text(dev)
    assert dev.count("topology: 4x4") == 1  # the one TPU description the compare excerpt changes
    (tmp / "new.yaml").write_text(dev.replace("topology: 4x4", f"topology: {COMPARE_NEW_TOPOLOGY}"))
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {command: pool.submit(_run, command, spec, tmp) for command, spec in OFFLINE.items()}
        return {command: future.result() for command, future in futures.items()}


TRAIN_LOCAL = "venv/bin/python tpu_fallback/training/train.py --local"


def test_train_local_without_jax_refuses_in_one_line(tmp_path: Path) -> None:
    """After `./scripts/plan` alone the venv has no jax (the runtime requirements leave it out). The README's command
    then says so in one line naming ./scripts/setup, exit 2, no traceback; and the README says it where it offers it.
    A `jax` module that fails to import, first on the path, stands in for the missing package."""
    assert TRAIN_LOCAL in OFFLINE and page_commands()[TRAIN_LOCAL] == "README.md"
    (tmp_path / "jax.py").write_text('raise ModuleNotFoundError("No module named \'jax\'", name="jax")\n')
    env = dict(_venv_env(), PYTHONPATH=str(tmp_path))
    proc = subprocess.run(["bash", "-c", TRAIN_LOCAL.replace("venv/bin/python", sys.executable)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "jax" in lines[0] and "./scripts/setup" in lines[0], proc.stderr
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    offered = readme.index(f"```bash {TRAIN_LOCAL} ```")
    assert "It needs jax, which `./scripts/setup` installs" in readme[offered - 400:offered]


@pytest.mark.parametrize("command", list(OFFLINE))
def test_offline_command_runs(command: str, results: dict[str, Result]) -> None:
    spec, result = OFFLINE[command], results[command]
    assert result.returncode == 0, result.output[-3000:]
    for pattern in spec.expect:
        assert re.search(pattern, result.output), (pattern, result.output[-3000:])
    if spec.then is not None:
        spec.then(result)
