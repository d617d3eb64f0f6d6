"""tools/replacecheck.py: compare mode's replacement calls (a table kept by hand beside the provider) against the
replace reasons `pulumi preview --json` gives, as the preview workflow runs it (issue 39 item 2).

The offline side is the real comparison of the dev stack with its topology changed (two TPU pools replaced for
placementPolicy, the ClusterQueue updated), as compare.json holds it; the engine's side is a `pulumi preview --json`
document in the CLI's shape (pkg/display/json.go: steps with op, urn, replaceReasons, diffReasons), written here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import infra
from tools import replacecheck
from tpu_fallback.offline import compare
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun

POOL = "gcp:container/nodePool:NodePool"
QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"


def _runs() -> tuple[ProgramRun, ProgramRun]:
    return infra("dev"), infra("dev", {"tpu": {"type": "v6e", "topology": "2x4"}})


def offline() -> list[dict[str, Any]]:
    before, after = _runs()
    return compare.to_json(compare.diff(before, after), before, after)


def urns(type_: str) -> list[str]:
    return sorted(r.urn for r in _runs()[1].of_type(type_))


def step(op: str, urn: str, **reasons: list[str]) -> dict[str, Any]:
    return {"op": op, "urn": urn, "detailedDiff": None, **reasons}


def engine_agreeing() -> dict[str, Any]:
    """What the engine plans for the topology change, replacing each pool in three steps as it does."""
    steps = [step("update", urns(QUEUE)[0], diffReasons=["spec"])]
    for urn in urns(POOL):
        if "plan-" in urn:
            steps += [step("create-replacement", urn, replaceReasons=["placementPolicy"]),
                      step("replace", urn, replaceReasons=["placementPolicy"], diffReasons=["autoscaling",
                                                                                            "placementPolicy"]),
                      step("delete-replaced", urn)]
    steps.append(step("same", urns("gcp:container/cluster:Cluster")[0]))
    return {"steps": steps, "changeSummary": {"replace": 2, "update": 1}}


def test_compare_json_names_each_change_by_urn_and_what_replaces_it() -> None:
    changes = {c["name"]: c for c in offline()}
    pool = changes["tpu-cluster-plan-a-on-demand-pool"]
    assert pool["op"] == "replace" and pool["replacedFor"] == ["placementPolicy"]
    assert "urn:pulumi:dev::" + pool["urn"] in urns(POOL)
    assert changes["tpu-cluster-queues-cluster-queue"]["op"] == "update"


def test_agreeing_calls_report_nothing() -> None:
    assert replacecheck.check(offline(), engine_agreeing()) == []


def test_an_update_the_table_calls_a_replacement_is_reported() -> None:
    preview = engine_agreeing()
    pool = next(u for u in urns(POOL) if "plan-a" in u)
    preview["steps"] = [s for s in preview["steps"] if s["urn"] != pool] + [
        step("update", pool, diffReasons=["autoscaling", "placementPolicy"])]
    (finding,) = replacecheck.check(offline(), preview)
    assert finding.disagree and "tpu-cluster-plan-a-on-demand-pool" in finding.text
    assert "updates it in place" in finding.text


def test_a_replacement_the_table_misses_is_reported() -> None:
    preview = engine_agreeing()
    queue = urns(QUEUE)[0]
    preview["steps"] = [s for s in preview["steps"] if s["urn"] != queue] + [
        step("replace", queue, replaceReasons=["spec"])]
    (finding,) = replacecheck.check(offline(), preview)
    assert finding.disagree and "compare mode calls it an update" in finding.text and "lacks spec" in finding.text


def test_a_change_only_one_side_saw_is_a_note() -> None:
    preview = engine_agreeing()
    cluster = urns("gcp:container/cluster:Cluster")[0]
    preview["steps"].append(step("replace", cluster, replaceReasons=["location"]))
    findings = replacecheck.check(offline(), preview)
    assert [(f.disagree, "the stack's state is not the base's render" in f.text) for f in findings] == [(False, True)]


def test_the_command_annotates_and_writes_the_summary(tmp_path: Path) -> None:
    compare_json, preview_json, summary = tmp_path / "compare.json", tmp_path / "preview.json", tmp_path / "summary"
    compare_json.write_text(json.dumps(offline()))
    preview = engine_agreeing()
    pool = next(u for u in urns(POOL) if "plan-b" in u)
    preview["steps"] = [s for s in preview["steps"] if s["urn"] != pool] + [step("update", pool)]
    preview_json.write_text(json.dumps(preview))
    result = subprocess.run([sys.executable, "-m", "tools.replacecheck", str(compare_json), str(preview_json),
                             "--github", "--summary", str(summary)], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr  # advisory: a disagreement never fails the workflow
    assert "::warning title=Replacement table::compare mode calls tpu-cluster-plan-b-dws-pool replaced" in (
        result.stdout)
    assert "**disagree**" in summary.read_text()
    missing = subprocess.run([sys.executable, "-m", "tools.replacecheck", str(compare_json), str(tmp_path / "none")],
                             cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert missing.returncode == 0 and "not run" in missing.stdout  # no preview output: said, not failed
