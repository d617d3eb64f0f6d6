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


def example_stacks() -> set[tuple[str, str, str]]:
    """(project, dir, stack) of every example stack file: Pulumi.*.yaml at the root (infra) and in jobs/."""
    found = set()
    for project, folder in (("infra", "."), ("jobs", "jobs")):
        for path in (REPO_ROOT / folder).glob("Pulumi.*.yaml"):
            found.add((project, folder, path.name[len("Pulumi."):-len(".yaml")]))
    return found


def legs(name: str, job: str | None = None) -> set[tuple[str, str, str]]:
    return {(r["project"], r["dir"], r["stack"]) for key, found in jobs(WORKFLOWS / name).items()
            if job in (None, key) for r in matrix_rows(found)}


def test_the_example_stacks_are_found() -> None:
    assert {("infra", ".", s) for s in ("dev", "prod", "global", "ladder", "hardened", "existing")} \
        <= example_stacks()
    assert ("jobs", "jobs", "dev") in example_stacks()


def test_every_example_stack_is_previewed_and_the_deployed_ones_against_their_state() -> None:
    """The preview matrix covers every example stack (issue 39 item 5). Those up.yml deploys are previewed against
    the backend's state; the others against an empty scratch backend (they have no state there)."""
    rows = matrix_rows(jobs(WORKFLOWS / "preview.yml")["preview"])
    assert legs("preview.yml", "preview") == example_stacks()
    backend = {(r["project"], r["dir"], r["stack"]) for r in rows if r["state"] == "backend"}
    scratch = {(r["project"], r["dir"], r["stack"]) for r in rows if r["state"] == "scratch"}
    assert backend == legs("up.yml") and backend | scratch == example_stacks() and not backend & scratch
    assert ("infra", ".", "dev") in backend and ("infra", ".", "prod") in backend
    job = jobs(WORKFLOWS / "preview.yml")["preview"]
    assert job["env"]["PULUMI_BACKEND_URL"] == \
        "${{ matrix.state == 'scratch' && 'file://~' || vars.PULUMI_BACKEND_URL }}"
    (step,) = [step for _, step in _pulumi_steps(WORKFLOWS / "preview.yml")]
    assert step["with"]["cloud-url"] == "${{ env.PULUMI_BACKEND_URL }}"
    assert step["with"]["upsert"] == "${{ matrix.state == 'scratch' }}"
    assert "steps.prerequisites.outputs.preview == 'true'" in step["if"]
    # Only same-repository pull requests: a fork's gets neither the secrets nor the id token.
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"


def test_the_preview_checks_the_prerequisites_and_keeps_the_replacement_cross_check() -> None:
    steps = jobs(WORKFLOWS / "preview.yml")["preview"]["steps"]
    names = [step.get("name", step.get("uses", "")) for step in steps]
    (prereq,) = [step for step in steps if step.get("id") == "prerequisites"]
    assert "python -m tools.prerequisites" in prereq["run"] and "--github-output" in prereq["run"]
    assert (REPO_ROOT / "tools" / "prerequisites.py").exists()
    cross = names.index("Cross-check the offline plan's replacement calls")
    assert names.index("Prerequisites outside the stack") < cross
    assert "tools.replacecheck" in steps[cross]["run"] and "matrix.state == 'backend'" in steps[cross]["if"]
    assert "PULUMI_BACKEND_URL" not in steps[cross].get("env", {}), "the job's backend (scratch or not) is used"


def test_the_offline_report_runs_for_forks_without_secrets() -> None:
    """Every pull request, from forks too (issue 39 item 5): ./scripts/plan of every example stack with a read-only
    token and nothing else, the screen in the job summary and the reports as an artifact."""
    workflow = load(WORKFLOWS / "preview.yml")
    assert "pull_request" in workflow["on"] and "pull_request_target" not in workflow["on"]
    job = jobs(WORKFLOWS / "preview.yml")["offline-report"]
    assert "if" not in job, "no condition: forks get it too"
    assert job["permissions"] == {"contents": "read"}
    text = " ".join(strings(job))
    for forbidden in ("secrets.", "vars.", "id-token", "github.token", "google-github-actions/", "pulumi/actions"):
        assert forbidden not in text, f"the fork-safe job uses {forbidden}"
    assert legs("preview.yml", "offline-report") == example_stacks()
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert './scripts/plan "$STACK" --project "$WORK_DIR"' in runs and "GITHUB_STEP_SUMMARY" in runs
    (upload,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == "build/plan/${{ matrix.project }}-${{ matrix.stack }}/"
    assert "always()" in upload["if"]
    checkout = job["steps"][0]
    assert checkout["with"]["persist-credentials"] is False


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


def test_the_previews_page_matches_the_workflow_and_the_provider_pin() -> None:
    """docs/previews.md's claims that can go stale: the scratch stacks, the backend and the provider version whose
    preview behaviour (a refused server-side dry run falls back to the inputs) it read."""
    page = (REPO_ROOT / "docs" / "previews.md").read_text()
    rows = matrix_rows(jobs(WORKFLOWS / "preview.yml")["preview"])
    backend_line = next(line for line in page.splitlines() if line.startswith("| infra `dev`"))
    first_cell = backend_line.split("|")[1]
    for row in rows:
        if row["state"] == "backend":
            assert f"`{row['stack']}`" in first_cell and "their state in the backend" in backend_line, row
        else:
            line = next(line for line in page.splitlines() if line.startswith(f"| infra `{row['stack']}` |"))
            assert "an empty backend on the runner" in line, row
    assert "`file://~`" in page
    pin = re.search(r"^pulumi-kubernetes==(\S+)", (REPO_ROOT / "requirements.txt").read_text(), re.MULTILINE)
    assert pin is not None and f"pinned pulumi-kubernetes {pin.group(1)}" in page
