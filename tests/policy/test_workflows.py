"""Guard rails for .github/workflows that the workflow linters (check-jsonschema's GitHub workflow schema,
zizmor) do not check: expressions, job and matrix references, pins, permissions, and that the paths,
stacks and versions the workflows name exist in this repository."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tpu_fallback.offline.mockrun import REPO_ROOT

WORKFLOWS = REPO_ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+\.\d+\.\d+\s*$")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def jobs(path: Path) -> dict[str, dict[str, Any]]:
    found = load(path)["jobs"]
    assert isinstance(found, dict)
    return found


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def matrix_rows(job: dict[str, Any]) -> list[dict[str, Any]]:
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    rows = list(matrix.get("include") or [])
    assert not (set(matrix) - {"include"}), "use include rows only, so every leg is spelled out"
    return rows


def test_the_workflows_exist() -> None:
    assert {p.name for p in FILES} >= {"ci.yml", "preview.yml", "up.yml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_expressions_are_closed(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in re.finditer(r"\$\{\{", line):
            assert "}}" in line[match.end():], f"{path.name}:{number}: unclosed expression"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_needs_and_matrix_references_exist(path: Path) -> None:
    all_jobs = jobs(path)
    for name, job in all_jobs.items():
        needs = job.get("needs") or []
        for other in [needs] if isinstance(needs, str) else needs:
            assert other in all_jobs, f"{path.name}: job {name} needs unknown job {other}"
        keys = {k for row in matrix_rows(job) for k in row}
        for text in strings(job):
            for ref in re.findall(r"matrix\.([A-Za-z0-9_-]+)", text):
                assert ref in keys, f"{path.name}: job {name} uses matrix.{ref}, not in its matrix"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_actions_are_pinned_to_commits_with_their_version(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = re.match(r"^\s*-?\s*uses:\s*(\S+)(.*)$", line)
        if not match or match.group(1).startswith("./"):
            continue
        assert PINNED.match(match.group(1)), f"{path.name}:{number}: pin {match.group(1)} to a commit SHA"
        assert VERSION_COMMENT.search(match.group(2)), f"{path.name}:{number}: add the release (# vX.Y.Z)"


def test_one_action_one_pin() -> None:
    pins: dict[str, set[str]] = {}
    for path in FILES:
        for ref in re.findall(r"uses:\s*([\w.-]+/[\w./-]+@\S+\s*#\s*\S+)", path.read_text()):
            action = ref.split("@")[0]
            pins.setdefault(action, set()).add(" ".join(ref.split()))
    for action, refs in pins.items():
        assert len(refs) == 1, f"{action} is pinned differently across workflows: {refs}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_permissions_are_per_job_and_minimal(path: Path) -> None:
    assert load(path).get("permissions") == {}, f"{path.name}: set `permissions: {{}}` at the top"
    for name, job in jobs(path).items():
        permissions = job.get("permissions")
        assert isinstance(permissions, dict), f"{path.name}: job {name} has no explicit permissions"
        assert "write-all" not in strings(permissions)


def _pulumi_steps(path: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(job, step) for job in jobs(path).values() for step in job.get("steps", [])
            if str(step.get("uses", "")).startswith("pulumi/actions@")]


def test_preview_and_up_cover_the_same_stacks() -> None:
    def legs(name: str) -> set[tuple[str, str, str]]:
        return {(r["project"], r["dir"], r["stack"]) for job in jobs(WORKFLOWS / name).values()
                for r in matrix_rows(job)}

    assert legs("preview.yml") == legs("up.yml")
    assert ("infra", ".", "dev") in legs("up.yml") and ("infra", ".", "prod") in legs("up.yml")


@pytest.mark.parametrize("name", ["preview.yml", "up.yml"])
def test_pulumi_steps_name_real_stacks_policy_pack_and_cli_version(name: str) -> None:
    path = WORKFLOWS / name
    pins = (REPO_ROOT / "requirements.txt").read_text()
    sdk = re.search(r"^pulumi==(\S+)", pins, re.MULTILINE)
    assert sdk is not None
    steps = _pulumi_steps(path)
    assert steps, f"{name} runs no pulumi/actions step"
    for job, step in steps:
        inputs = step["with"]
        assert inputs["command"] == ("preview" if name == "preview.yml" else "up")
        assert str(inputs["pulumi-version"]) == sdk.group(1), "the CLI must match the SDK pin"
        assert inputs["policyPacks"] == "${{ github.workspace }}/policy"
        assert (REPO_ROOT / "policy" / "PulumiPolicy.yaml").exists()
        assert "PULUMI_CONFIG_PASSPHRASE" in step.get("env", {})
        for row in matrix_rows(job):
            project = REPO_ROOT / row["dir"]
            if not (project / "Pulumi.yaml").exists():
                continue  # a project still being written: the workflow skips it (see its guard step)
            assert (project / f"Pulumi.{row['stack']}.yaml").exists(), f"{name}: no stack file for {row}"


def test_up_jobs_are_serial_protected_and_never_cancelled() -> None:
    for job in jobs(WORKFLOWS / "up.yml").values():
        assert job["strategy"]["max-parallel"] == 1 and job["strategy"]["fail-fast"] is True
        assert job["environment"] == "${{ matrix.project }}-${{ matrix.stack }}"
        assert job["concurrency"]["cancel-in-progress"] is False
        order = [(r["project"], r["stack"]) for r in matrix_rows(job)]
        assert order.index(("infra", "dev")) < order.index(("infra", "prod"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_scripts_the_workflows_run_exist(path: Path) -> None:
    for text in strings(jobs(path)):
        for script in re.findall(r"(?:^|\s)\./(scripts/[\w.-]+)", text):
            target = REPO_ROOT / script
            assert target.exists() and os.access(target, os.X_OK), f"{path.name} runs missing ./{script}"
