"""The package's layers hold: pure modules import no Pulumi, each layer imports only those below it,
no code edits the import path, and tools/ never imports tests/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tpu_fallback.offline.mockrun import REPO_ROOT

PACKAGE = REPO_ROOT / "tpu_fallback"
# What each layer may import from the package (besides itself). offline/ and policy/ sit beside the programs.
ALLOWED = {
    "model": set(),
    # render ships the controller's sources and takes the names it shares with them (the taint key, the Lease's
    # duration) from the controller itself, so that the two cannot disagree.
    "render": {"model", "fallback"},
    "components": {"model", "render"},
    # The public components (tpu_fallback.api): what other programs and languages build with; the programs use them.
    "api": {"model", "render", "components"},
    "programs": {"model", "render", "components", "api"},
    "offline": {"model"},
    "policy": {"model"},
    "training": set(),
    # The controller ships to the cluster with model/quantity.py only (tests/test_fallback.py checks the set).
    "fallback": {"model"},
    # `tpu-fallback status`: reads the cluster with Kubernetes' client, never Pulumi; what it shares with the
    # controller it repeats (tests/test_status.py checks they agree), so the command does not load the controller.
    # From the model only quantities.
    "status": {"model"},
}
PURE_LAYERS = ("model", "render", "training", "fallback", "status")


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", PURE_LAYERS)
def test_pure_layers_import_no_pulumi(layer: str) -> None:
    offenders = {str(p.relative_to(REPO_ROOT)): sorted(m for m in imports(p) if m.split(".")[0].startswith("pulumi"))
                 for p in modules(layer)}
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layers_import_only_the_layers_below(layer: str) -> None:
    for path in modules(layer):
        used = {m.split(".")[1] for m in imports(path) if m.startswith("tpu_fallback.")}
        assert used - {layer} <= ALLOWED[layer], f"{path.relative_to(REPO_ROOT)} imports {sorted(used - {layer})}"


def test_the_checker_sees_imports() -> None:
    # Guard against a checker that finds nothing: the jobs renderer does import the model.
    assert "tpu_fallback.model.jobs" in imports(PACKAGE / "render" / "rayjob.py")


def project_python_files() -> list[Path]:
    skip = {"venv", "build", ".git"}
    return [p for p in REPO_ROOT.rglob("*.py") if not skip & set(p.relative_to(REPO_ROOT).parts)]


def test_no_code_edits_sys_path() -> None:
    needle = ".".join(("sys", "path"))  # spelled so that `git grep` for it finds no project code, this file included
    offenders = [str(p.relative_to(REPO_ROOT)) for p in project_python_files() if needle in p.read_text()]
    assert not offenders


def test_tools_never_import_tests() -> None:
    for path in sorted((REPO_ROOT / "tools").glob("*.py")):
        assert not {m for m in imports(path) if m.split(".")[0] == "tests"}, path.name
