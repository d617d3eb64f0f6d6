"""The stack-outputs contract (tpu_fallback.model.outputs) is what both modes export, what the jobs program
reads, and what the table of docs/outputs.md lists."""

from __future__ import annotations

import re

from tests.conftest import infra
from tpu_fallback.model import outputs
from tpu_fallback.offline.mockrun import REPO_ROOT


def test_single_cluster_stacks_export_the_contract_without_the_multi_region_outputs() -> None:
    single = [spec.name for spec in outputs.OUTPUTS if not spec.multikueue_only]
    for stack in ("dev", "prod"):
        run = infra(stack)
        assert list(run.outputs) == single
        assert run.secret_outputs == set(outputs.SECRET_OUTPUTS)


def test_multi_region_stack_exports_every_output() -> None:
    run = infra("global")
    assert list(run.outputs) == list(outputs.OUTPUT_NAMES)
    assert run.secret_outputs == set(outputs.SECRET_OUTPUTS)
    assert run.outputs["multikueue"] is True


def test_the_jobs_program_reads_outputs_of_the_contract() -> None:
    assert set(outputs.JOBS_READS) <= set(outputs.OUTPUT_NAMES)
    assert set(outputs.JOBS_READS_OPTIONAL) <= set(outputs.OUTPUT_NAMES)
    assert "kubeconfig" in outputs.JOBS_READS and "tpu" in outputs.JOBS_READS


def test_the_tpu_output_has_the_fields_the_jobs_program_checks() -> None:
    assert tuple(infra("dev").outputs["tpu"]) == outputs.TPU_FIELDS


def test_docs_outputs_table_is_the_contract() -> None:
    page = (REPO_ROOT / "docs" / "outputs.md").read_text()
    section = ("\n" + page).split("\n# Outputs\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert table == outputs.markdown_table()
    assert re.findall(r"^\| `(\w+)`", table, re.M) == list(outputs.OUTPUT_NAMES)


def test_the_flavors_output_keeps_todays_keys_and_only_a_ladder_stack_adds_its_rungs() -> None:
    """Other teams read flavors.{system,onDemand,flexStart}: stacks on today's keys export exactly those."""
    for stack in ("dev", "prod", "existing", "global"):
        assert list(infra(stack).outputs["flavors"]) == ["system", "onDemand", "flexStart"], stack
    ladder = infra("ladder").outputs["flavors"]
    assert (ladder["system"], ladder["onDemand"], ladder["flexStart"]) == ("default-cpu", "on-demand", "flex")
    assert [(r["name"], r["kind"]) for r in ladder["rungs"]] == [
        ("reserved", "reservation"), ("on-demand", "onDemand"), ("spot", "spot"), ("flex", "flexStart")]
    # Every TPU flavor of the ClusterQueue, once, in the order Kueue tries them.
    (queue,) = [o for o in infra("ladder").kubernetes_objects() if o["kind"] == "ClusterQueue"]
    tried = [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"] if f["name"] != ladder["system"]]
    assert [f for r in ladder["rungs"] for f in r["flavors"]] == tried


def test_docs_lists_the_jobs_stack_outputs_and_its_commands() -> None:
    """docs/outputs.md's jobs section: the jobs program's outputs in order, and job 1's commands of the dev stack
    as the stack exports them, in order (status command first), each with its key as the line's comment."""
    from tests.test_shell_commands import jobs_dev, split_comment
    from tpu_fallback.programs.jobs import OUTPUT_NAMES

    page = (REPO_ROOT / "docs" / "outputs.md").read_text()
    section = page.split("\n## The jobs stack's outputs\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `(\w+)`", section, re.M) == list(OUTPUT_NAMES)
    outputs = jobs_dev().outputs
    assert list(outputs) == list(OUTPUT_NAMES)
    (block,) = re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S)
    shown = [split_comment(line) for line in block.splitlines()]
    exported = outputs["commands"][outputs["jobs"][0]]
    assert [(command, comment.removeprefix("# ").split(":")[0]) for command, comment in shown] == [
        (command, key) for key, command in exported.items()]
