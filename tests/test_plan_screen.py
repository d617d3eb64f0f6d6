"""What `./scripts/plan` prints (issue 39 items 1 and 2): one screen of at most 40 lines ending with the report paths,
for every example stack; `--full` and `--quiet`; compare mode across stacks listing the settings that differ and
matching resources by role.

Each test runs the real plan command (`python -m tpu_fallback.offline.plan`, the real __main__.py under Pulumi's
mock runtime) and reads what it printed; the expected figures and settings come from the stack files and the
model, not from the output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tpu_fallback.offline import compare, prices, report, settings_view, stacks
from tpu_fallback.offline.mockrun import REPO_ROOT

EXAMPLES = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO_ROOT.glob("Pulumi.*.yaml"))
SCREEN = 40
WIDTH = 120  # paths aside, the screen wraps at 100


@dataclass(frozen=True)
class Printed:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def plan(out: Path, *args: str) -> Printed:
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", *args, "--out", str(out)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    return Printed(result.returncode, result.stdout, result.stderr, out)


RUNS: dict[str, tuple[str, ...]] = {
    **{f"infra {stack}": (stack,) for stack in EXAMPLES},
    "jobs dev": ("dev", "--project", "jobs"),
    "dev --compare-stack prod": ("dev", "--compare-stack", "prod"),
    "dev --compare-stack global": ("dev", "--compare-stack", "global"),
    "dev --full": ("dev", "--full"),
    "dev --quiet": ("dev", "--quiet"),
}


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Printed]:
    tmp = tmp_path_factory.mktemp("plan-screen")
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(plan, tmp / re.sub(r"\W+", "-", name), *args) for name, args in RUNS.items()}
        return {name: future.result() for name, future in futures.items()}


def _paths(result: Printed, compared: bool = False) -> list[str]:
    """The trailer's last lines: where each file was written, the PR report last."""
    names = ["kubernetes.yaml", "summary.md", *(["compare.md"] if compared else []), "report.md"]
    return [str(result.out / name) for name in names]


def _ends_with_the_paths(result: Printed, compared: bool = False) -> None:
    paths = _paths(result, compared)
    tail = result.lines[-len(paths):]
    assert [line.split(":", 1)[1].strip() for line in tail] == paths, tail
    assert all(Path(p).is_file() for p in paths)


def test_every_example_stack_is_listed() -> None:
    assert {"dev", "prod", "global", "ladder", "hardened", "existing"} <= set(EXAMPLES)


@pytest.mark.parametrize("stack", EXAMPLES)
def test_the_plan_fits_a_screen_and_ends_with_the_report_paths(stack: str, printed: dict[str, Printed]) -> None:
    result = printed[f"infra {stack}"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.lines) <= SCREEN, result.stdout
    assert all(len(line) <= WIDTH for line in result.lines if str(result.out) not in line), result.stdout
    _ends_with_the_paths(result)
    assert "not a diff against live state" in result.stdout
    assert "## Cloud resources" not in result.stdout  # the full summary is in summary.md, not on the screen
    # The headline: every cluster, every rung with its chips and jobs at once, the cost, as the model computes them.
    settings = stacks.infra_settings(REPO_ROOT, stack)
    stack_report = report.stack_report(settings, stacks.job_shapes(stack, settings)[0])
    table = prices.load()
    text = result.stdout
    for cluster in stack_report.clusters:
        cost = report.cluster_cost(cluster, table)
        assert f" {cluster.name} ({cluster.location})" in text, cluster.name
        if cluster.settings is None:
            continue
        for rung in cluster.plans:
            row = next(line for line in result.lines if line.strip().startswith(cluster.plan_name(rung.plan))
                       and f"   {rung.chips}   " in line)
            assert re.search(rf"   {rung.runs}( \+ DWS queue)?   ", row), row
        at_once = f"{cluster.at_once} job{'s' if cluster.at_once != 1 else ''} at once"
        assert f"= {at_once}" in text, at_once
        assert f"all at full scale {cost.full.text()}" in text
        if cluster.role != "existing cluster":
            assert f"idle {cost.idle.text()}" in text
    if stack_report.multikueue:
        assert f"Stack: {stack_report.at_once} jobs at once" in text
    assert "not a bill" in text


def test_the_screen_warns_what_the_full_report_cautions(printed: dict[str, Printed]) -> None:
    ladder = printed["infra ladder"].stdout
    reservation = next(r.reservation for r in stacks.infra_settings(REPO_ROOT, "ladder").capacity_ladder.rungs
                       if r.reservation is not None)
    assert f"consumes reservation `{reservation.affinity_value}`" in ladder
    assert "limited by the system pool's CPU quota" in ladder and "never all busy" in ladder
    assert "No verified list price for" in printed["infra dev"].stdout  # flex-start has no published price
    assert "An existing cluster: its pools are not created by this stack" in printed["infra existing"].stdout


def test_the_jobs_project_fits_a_screen(printed: dict[str, Printed]) -> None:
    result = printed["jobs dev"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.lines) <= SCREEN, result.stdout
    _ends_with_the_paths(result)
    names = [o["metadata"]["name"] for o in yaml.safe_load_all((result.out / "kubernetes.yaml").read_text())
             if o["kind"] == "RayJob"]
    assert names and all(f"RayJob default/{name}" in result.stdout for name in names)


def test_full_prints_the_whole_summary_and_quiet_only_the_paths(printed: dict[str, Printed]) -> None:
    full, quiet = printed["dev --full"], printed["dev --quiet"]
    assert full.returncode == quiet.returncode == 0, full.stderr + quiet.stderr
    summary = (full.out / "summary.md").read_text()
    assert summary in full.stdout and "## Resource tree" in full.stdout
    _ends_with_the_paths(full)
    _ends_with_the_paths(quiet)
    assert len(quiet.lines) == 4 and quiet.lines[0].startswith("Rendered ")


def test_the_flags_exclude_each_other() -> None:
    result = subprocess.run([sys.executable, "-m", "tpu_fallback.offline.plan", "dev", "--full", "--quiet"],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "not allowed with" in result.stderr


# --------------------------------------------------------------------------------------------
# Compare mode across stacks
# --------------------------------------------------------------------------------------------


def _config(stack: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {k.removeprefix("tpu-fallback:"): v for k, v in config.items()}


def _screen_row(result: Printed, key: str) -> str:
    return next((line for line in result.lines if line.strip().split("   ")[0] == key), "")


def test_compare_stack_lists_the_settings_that_differ(printed: dict[str, Printed]) -> None:
    result = printed["dev --compare-stack prod"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.lines) <= SCREEN, result.stdout
    _ends_with_the_paths(result, compared=True)
    dev, prod = _config("dev"), _config("prod")
    # What the stack files write differently, row by row as the user wrote it (booleans arrive as strings).
    expected = {
        "deletionProtection": (prod["deletionProtection"], dev["deletionProtection"]),
        "protect": (prod["protect"], "false"),  # dev leaves it at its default
        "clusterName": (prod["clusterName"], dev["clusterName"]),
        "onDemand.maxSlices": (str(prod["onDemand"]["maxSlices"]), str(dev["onDemand"]["maxSlices"])),
        "flexStart.maxSlices": (str(prod["flexStart"]["maxSlices"]), str(dev["flexStart"]["maxSlices"])),
        "flexStart.maxRunDuration": (prod["flexStart"]["maxRunDuration"], settings_view.NOT_SET),
        "systemPool.nodeCount": (str(prod["systemPool"]["nodeCount"]), "1"),
        "queues.capFlexStart": ("true", "false"),
        "queues.localQueues": (", ".join(f"{q['namespace']}/{q['name']}" for q in prod["queues"]["localQueues"]),
                               "default/user-queue"),
    }
    for key, (before, after) in expected.items():
        row = _screen_row(result, key)
        assert row.split(None, 1)[1] == f"{before} → {after}", (key, row)
    assert "matched by role" in (result.out / "compare.md").read_text()
    # The settings both stacks leave alike are not listed.
    assert not _screen_row(result, "tpu") and not _screen_row(result, "kueue.version")


def test_compare_stack_matches_resources_by_role(printed: dict[str, Printed]) -> None:
    text = (printed["dev --compare-stack prod"].out / "compare.md").read_text()
    assert "| `deletionProtection` | true | false |" in text
    assert "cluster `tpu-prod` is DELETED" not in text and "cluster `tpu-cluster` is" not in text
    # prod has one more plan A slice and three more plan B slices than dev: exactly those pools have no dev twin.
    prod, dev = _config("prod"), _config("dev")
    extra = (prod["onDemand"]["maxSlices"] - dev["onDemand"]["maxSlices"]
             + prod["flexStart"]["maxSlices"] - dev["flexStart"]["maxSlices"])
    deleted_pools = re.findall(r"^### - delete `gcp:container/nodePool:NodePool` `(\S+)`", text, re.M)
    assert len(deleted_pools) == extra == 4, deleted_pools
    assert not re.findall(r"^### \+ create `gcp:", text, re.M)  # every GCP resource of dev has its prod twin
    assert "`deletionProtection`: true → false" in text  # the cluster's own setting, on the matched cluster
    assert compare.ADVISORY in text


def test_compare_stack_of_another_kind_says_so(printed: dict[str, Printed]) -> None:
    result = printed["dev --compare-stack global"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.lines) <= SCREEN, result.stdout
    _ends_with_the_paths(result, compared=True)
    assert _screen_row(result, "multikueue.enabled").split(None, 1)[1] == "true → false"
    assert "different clusters of different kinds" in result.stdout
    text = (result.out / "compare.md").read_text()
    assert "### Resources\n" in text and "to delete" not in text


def test_role_matching_reads_cluster_names_and_projects_as_equal() -> None:
    aliases = compare.Aliases({"tpu-prod": "<cluster>", "p-prod": "<project>"},
                              {"tpu-cluster": "<cluster>", "p-dev": "<project>"})
    assert aliases.name("tpu-prod-plan-a-on-demand-pool", aliases.before) == "<cluster>-plan-a-on-demand-pool"
    assert aliases.name("tpu-production", aliases.before) == "tpu-production"  # a prefix of a word is not a name
    assert aliases.value({"m": ["serviceAccount:tpu-prod-nodes@p-prod.iam"]}, aliases.before) == {
        "m": ["serviceAccount:<cluster>-nodes@<project>.iam"]}
    changes = compare.diff(infra("prod"), infra("dev"), compare.Aliases(
        {"tpu-prod": "<cluster>", "my-gcp-prod-project": "<project>"},
        {"tpu-cluster": "<cluster>", "my-gcp-project": "<project>"}))
    cluster = next(c for c in changes if c.type == "gcp:container/cluster:Cluster")
    assert cluster.op == "update" and {f.key for f in cluster.fields} == {"deletionProtection", "(option) protect"}
    assert not [c for c in changes if c.op == "replace"]  # names and projects aside, nothing replaces


def test_settings_rows_name_config_keys() -> None:
    rows = settings_view.stack_rows(stacks.infra_settings(REPO_ROOT, "ladder"))
    ladder = _config("ladder")["ladder"]
    assert rows["ladder"] == " → ".join(r["name"] for r in ladder)
    for rung in ladder:
        assert rows[f"ladder[{rung['name']}].kind"] == rung["kind"]
    assert "onDemand.maxSlices" not in rows  # a ladder replaces onDemand and flexStart
    rows = settings_view.stack_rows(stacks.infra_settings(REPO_ROOT, "global"))
    europe = next(w for w in _config("global")["multikueue"]["workers"] if w["name"] == "europe")
    assert rows["multikueue.workers[europe].location"] == europe["location"]
    assert rows["multikueue.workers[europe].flexStart.enabled"] == "false"
    assert "multikueue.workers[us].location" in rows and "multikueue.workers[us].tpu" not in rows  # inherited


def test_a_compare_of_the_same_stack_lists_the_changed_setting(tmp_path: Path) -> None:
    changed = tmp_path / "dev.yaml"
    changed.write_text((REPO_ROOT / "Pulumi.dev.yaml").read_text().replace("maxSlices: 1", "maxSlices: 2", 1))
    result = plan(tmp_path / "out", "dev", "--stack-file", str(changed), "--compare-file",
                  str(REPO_ROOT / "Pulumi.dev.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert _screen_row(result, "onDemand.maxSlices").split(None, 1)[1] == "1 → 2"
    assert "Resources by URN: 0 to replace" in result.stdout and "replacements advisory" in result.stdout
