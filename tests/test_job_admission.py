"""The jobs project refuses jobs Kueue could never admit (issue 38 item 3), before anything is registered, with one
line naming the setting as the stack file writes it, the value as written and what is allowed: a worker request above
every TPU flavor's quota (not only the VM), more workers than a flavor's node pool holds (a multi-host slice is a pool
and a flavor of its own), a job that tolerates none of the stack's flavors (spot only, DWS only for an elastic job), an
elastic job Kueue cannot honour (its gate off, a maximum size no flavor holds). A `preemptible` job on a stack without
a spot rung, and a job some rungs can never take, are warnings. The offline plan exits 2 on a refused config and
prices a job only on the rungs Kueue can admit it to.

The infra stacks are rendered from this repository with overrides; the jobs configs are written as a user would
write them (YAML text for the command line cases).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import infra
from tpu_fallback.model import jobs as model
from tpu_fallback.model.kueue_features import elastic_jobs_gate
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline import prices, report, stacks
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program

# What a jobs program registers before it refuses a job: the component and its StackReference, nothing else.
NOTHING_CREATED = ["tpu-fallback:index:TrainingJobs", "pulumi:pulumi:StackReference"]

JOBS = REPO_ROOT / "jobs"
INFRA_STACK = "organization/tpu-fallback/dev"  # jobs/Pulumi.dev.yaml's infraStack
DEV = "organization/tpu-fallback/dev"

# Infra stacks, as overrides of the dev stack (or another example stack).
PLAN_A_ONLY = {"flexStart": {"enabled": False}}  # the tutorial's 40 CPU / 75Gi for one 4-host slice, no DWS
BIG_PLAN_A_ONLY = {"flexStart": {"enabled": False}, "queues": {"quotas": {"onDemand": {"cpu": 64, "memory": "256Gi"}}}}
SINGLE_HOST = {"tpu": {"type": "v6e", "topology": "2x2"}, "onDemand": {"maxSlices": 2}}  # pools of 2 and 1 nodes
SINGLE_HOST_NO_GATE = {**SINGLE_HOST, "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}}}
SINGLE_HOST_DWS_ONLY = {**SINGLE_HOST, "onDemand": {"maxSlices": 0}}
SPOT_ONLY = {"ladder": [{"name": "cheap", "kind": "spot", "maxSlices": 1}]}


def outputs_of(stack: str = "dev", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    run = infra(stack, overrides)
    return {"outputs": copy.deepcopy(run.outputs), "secretOutputNames": sorted(run.secret_outputs)}


def references(stack: str = "dev", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    return {INFRA_STACK: outputs_of(stack, overrides)}


def jobs_run(jobs: list[dict[str, Any]], stack: str = "dev", overrides: dict[str, Any] | None = None) -> ProgramRun:
    return run_program(JOBS, "dev", {"jobs": jobs}, stack_references=references(stack, overrides),
                       raise_errors=False)


def as_written(message: str) -> str:
    """A boolean as the stack file writes it (true, false), whichever way the message's toolkit quotes it."""
    return re.sub(r"\b(True|False)\b", lambda m: m.group(1).lower(), message)


def refused(run: ProgramRun, fragments: list[str]) -> str:
    assert isinstance(run.error, ConfigError), repr(run.error)
    message = as_written(str(run.error))
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    # Nothing registered: reading the infra stack's outputs is all that happened.
    assert [r.type for r in run.resources] == NOTHING_CREATED, [r.type for r in run.resources]
    return message


# (infra stack, its overrides, the jobs config, fragments of the one-line error)
REFUSALS: list[tuple[str, dict[str, Any] | None, list[dict[str, Any]], list[str]]] = [
    # more workers than one pool holds: a v6e 4x4 slice is a node pool (and a flavor) of its own
    ("dev", None, [{"name": "two-slices", "workers": 8}],
     ["jobs[0].workers 8 is invalid", "one 4x4 slice (4 hosts) each", "(on-demand, dws) holds 4 hosts",
      "at most 4"]),
    ("prod", None, [{"name": "ok"}, {"name": "three-slices", "count": 1, "workers": 12}],
     ["jobs[1].workers 12 is invalid", "at most 4"]),
    # single-host slices: one pool per rung, of maxSlices nodes
    ("dev", SINGLE_HOST, [{"name": "wide", "workers": 3}],
     ["jobs[0].workers 3 is invalid", "the largest (on-demand) holds 2 hosts", "at most 2"]),
    # a worker request within the VM but above every flavor's quota (no DWS flavor with its unlimited quota here)
    ("dev", PLAN_A_ONLY, [{"name": "cpu-hungry", "workerRequest": {"cpu": 16}}],
     ["jobs[0].workerRequest.cpu 16 is invalid", "4 workers × 16 = 64 CPU", "on-demand: 40 = 10 per worker",
      "never admit", "at most 10 per worker"]),
    ("dev", PLAN_A_ONLY, [{"name": "m", "workerRequest": {"memory": "20Gi"}}],
     ['jobs[0].workerRequest.memory "20Gi" is invalid', "80Gi memory", "75Gi = 19200Mi per worker",
      "at most 19200Mi per worker"]),
    ("dev", BIG_PLAN_A_ONLY, [{"name": "m", "workerRequest": {"cpu": "8", "memory": "80Gi"}}],
     ['jobs[0].workerRequest.memory "80Gi"', "on-demand: 256Gi = 64Gi per worker", "at most 64Gi per worker"]),
    # both too big: the first is named, and the other said too
    ("dev", PLAN_A_ONLY, [{"name": "both", "workerRequest": {"cpu": "12.5", "memory": "32Gi"}}],
     ['jobs[0].workerRequest.cpu "12.5"', "at most 10 per worker",
      "jobs[0].workerRequest.memory is too, at most 19200Mi per worker"]),
    # an elastic job never gets a DWS flavor: on a single-host stack its workers must fit plan A's quota
    ("dev", SINGLE_HOST, [{"name": "e", "elastic": {"minReplicas": 1, "maxReplicas": 2},
                           "workerRequest": {"cpu": "24"}}],
     ['jobs[0].workerRequest.cpu "24"', "1 workers × 24 = 24 CPU", "that it can use", "on-demand: 20 = 20 per worker",
      "at most 20 per worker"]),
    # an elastic job's largest size must fit the flavor it starts on
    ("dev", SINGLE_HOST, [{"name": "e", "elastic": {"minReplicas": 1, "maxReplicas": 4}}],
     ["jobs[0].elastic.maxReplicas 4 is invalid", "scale-up only on the flavor it started on",
      "on-demand: 4 workers, its pool holds 2 hosts", "maxReplicas at most 2"]),
    ("dev", SINGLE_HOST, [{"name": "e", "elastic": True, "workerRequest": {"cpu": "11"}}],
     ["jobs[0].elastic true is invalid", "on-demand: CPU 22 > quota 20", "elastic: true grows up to maxReplicas 2",
      "could never grow past 1 worker", "remove elastic"]),
    # Kueue without its elastic gate refuses the RayJob's autoscaling
    ("dev", SINGLE_HOST_NO_GATE, [{"name": "e", "elastic": True}],
     ["jobs[0].elastic true is invalid", "ElasticJobsViaWorkloadSlices feature gate off",
      "a kueue managed job should only use autoscaling when workload slicing is enabled", "remove elastic"]),
    # no flavor an elastic job tolerates
    ("dev", SINGLE_HOST_DWS_ONLY, [{"name": "e", "elastic": {"minReplicas": 1, "maxReplicas": 1}}],
     ["jobs[0].elastic", "no plan A (on-demand) or reservation flavor, only dws (flexStart)",
      "cloud.google.com/gke-queued", "remove elastic"]),
    # a spot-only stack and a job that does not opt in
    ("dev", SPOT_ONLY, [{"name": "plain"}],
     ["jobs[0].preemptible false is invalid", "every TPU flavor", "is spot (cheap)", "cloud.google.com/gke-spot",
      "jobs[0].preemptible is not set: false is its default", "set preemptible: true"]),
    ("dev", SPOT_ONLY, [{"name": "plain", "preemptible": False}],
     ["jobs[0].preemptible false is invalid", "set preemptible: true"]),
    # MultiKueue: every worker's flavors count, and the error names them
    ("global", None, [{"name": "two-slices", "workers": 8}],
     ["jobs[0].workers 8", "on-demand (worker europe)", "dws-2 (worker asia)", "at most 4"]),
]


@pytest.mark.parametrize(("stack", "overrides", "jobs", "fragments"), REFUSALS,
                         ids=[f"{r[0]}-{r[3][0][:40]}" for r in REFUSALS])
def test_a_job_kueue_could_never_admit_is_refused(stack: str, overrides: dict[str, Any] | None,
                                                  jobs: list[dict[str, Any]], fragments: list[str]) -> None:
    refused(jobs_run(jobs, stack, overrides), fragments)


# (infra stack, overrides, jobs): right at the limits, or on a flavor the job does tolerate: accepted.
ACCEPTED: list[tuple[str, dict[str, Any] | None, list[dict[str, Any]]]] = [
    ("dev", None, [{"name": "one-slice", "workers": 4}]),
    ("dev", PLAN_A_ONLY, [{"name": "at-the-quota", "workerRequest": {"cpu": "10", "memory": "19200Mi"}}]),
    ("dev", None, [{"name": "dws-only", "workerRequest": {"cpu": "16"}}]),  # above plan A's quota: plan B has room
    ("dev", BIG_PLAN_A_ONLY, [{"name": "m", "workerRequest": {"cpu": "16", "memory": "64Gi"}}]),
    ("dev", SINGLE_HOST, [{"name": "two", "workers": 2}]),
    ("dev", SINGLE_HOST, [{"name": "e", "elastic": {"minReplicas": 1, "maxReplicas": 2},
                           "workerRequest": {"cpu": "10"}}]),
    ("dev", SPOT_ONLY, [{"name": "ckpt", "preemptible": True}]),
    ("ladder", None, [{"name": "plain"}, {"name": "ckpt", "preemptible": True}]),
    ("global", None, [{"name": "one-slice"}]),
]


@pytest.mark.parametrize(("stack", "overrides", "jobs"), ACCEPTED, ids=[f"{a[0]}-{a[2][0]['name']}" for a in ACCEPTED])
def test_a_job_some_flavor_admits_is_submitted(stack: str, overrides: dict[str, Any] | None,
                                               jobs: list[dict[str, Any]]) -> None:
    run = jobs_run(jobs, stack, overrides)
    assert run.error is None, run.error
    assert len([o for o in run.kubernetes_objects() if o["kind"] == "RayJob"]) == sum(j.get("count", 2) for j in jobs)


def planned(jobs: list[dict[str, Any]], stack: str = "dev", overrides: dict[str, Any] | None = None
            ) -> tuple[model.PlannedJob, ...]:
    facts = model.InfraFacts.from_outputs(DEV, outputs_of(stack, overrides)["outputs"])
    return model.plan_jobs(model.parse_jobs(jobs), facts)


def test_what_a_job_can_use_is_a_warning_not_a_refusal() -> None:
    (plain,) = planned([{"name": "plain"}])
    assert plain.warnings == ()
    assert [f.name for f in plain.flavors or ()] == ["on-demand", "dws"]
    (spot,) = planned([{"name": "ckpt", "preemptible": True}])
    assert spot.warnings == (f"jobs[0].preemptible true: infra stack {DEV!r} has no spot rung, so the job's toleration "
                             "of spot nodes is unused; it runs on the stack's other rungs as any job does",)
    (hungry,) = planned([{"name": "hungry", "workerRequest": {"cpu": "12"}}])
    assert hungry.warnings == ("jobs[0] (hungry): Kueue can never admit it to on-demand (CPU 48 > quota 40); only to "
                               "dws",)
    assert [f.name for f in hungry.flavors or ()] == ["dws"]
    (ladder_spot,) = planned([{"name": "ckpt", "preemptible": True}], "ladder")
    assert ladder_spot.warnings == ()
    assert [f.name for f in ladder_spot.flavors or ()] == ["reserved", "on-demand", "spot", "spot-2", "flex", "flex-2"]
    (ladder_plain,) = planned([{"name": "plain"}], "ladder")
    assert ladder_plain.warnings == ()  # skipping spot is what a job that does not opt in means
    assert "spot" not in [f.name for f in ladder_plain.flavors or ()]
    # MultiKueue: a worker that can never take it is named
    (big,) = planned([{"name": "big", "workerRequest": {"cpu": "16"}}], "global")
    assert big.warnings == ("jobs[0] (big): Kueue can never admit it to on-demand (worker europe) (CPU 64 > quota 40); "
                            "on-demand (worker us) (CPU 64 > quota 40); on-demand (worker asia) (CPU 64 > quota 40); "
                            "only to dws (worker us), dws-2 (worker us), dws (worker asia), dws-2 (worker asia)",)


def test_an_infra_stack_without_the_flavor_outputs_is_checked_as_before() -> None:
    """A stack deployed before `tpuFlavors`: only the host, the system quota and the elastic rules it can tell."""
    refs = references()
    del refs[INFRA_STACK]["outputs"]["tpuFlavors"]
    del refs[INFRA_STACK]["outputs"]["elasticJobs"]
    run = run_program(JOBS, "dev", {"jobs": [{"name": "two-slices", "count": 1, "workers": 8}]},
                      stack_references=refs, raise_errors=False)
    assert run.error is None, run.error
    refs = {INFRA_STACK: outputs_of("dev", SINGLE_HOST_DWS_ONLY)}
    del refs[INFRA_STACK]["outputs"]["tpuFlavors"]
    run = run_program(JOBS, "dev", {"jobs": [{"name": "e", "elastic": True}]}, stack_references=refs,
                      raise_errors=False)
    refused(run, ["jobs[0].elastic", "no plan A (on-demand) flavor"])


def test_an_unreadable_flavor_output_is_one_clear_line() -> None:
    refs = references()
    refs[INFRA_STACK]["outputs"]["tpuFlavors"] = [{"name": "on-demand", "kind": "onDemand"}]
    run = run_program(JOBS, "dev", {"jobs": [{"name": "j"}]}, stack_references=refs, raise_errors=False)
    refused(run, [f"infra stack {INFRA_STACK!r} output 'tpuFlavors'", "update tpu-fallback in the jobs project"])


# --------------------------------------------------------------------------------------------
# The infra stack's outputs the checks read
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "overrides"), [("dev", None), ("prod", None), ("ladder", None),
                                                  ("dev", SINGLE_HOST), ("dev", {"queues": {"capFlexStart": True}})])
def test_the_flavor_output_is_the_cluster_queue_and_the_pools(stack: str, overrides: dict[str, Any] | None) -> None:
    """tpuFlavors says what the rendered ClusterQueue and node pools say: every TPU flavor in the queue's order with
    its nominal quota, and the maximum size of the one pool its node labels select."""
    run = infra(stack, overrides)
    (queue,) = [o for o in run.kubernetes_objects() if o["kind"] == "ClusterQueue"]
    group = queue["spec"]["resourceGroups"][0]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    selects = {o["metadata"]["name"]: o["spec"]["nodeLabels"]["cloud.google.com/gke-nodepool"]
               for o in run.kubernetes_objects() if o["kind"] == "ResourceFlavor"}
    pools = {p.inputs["name"]: int(p.inputs["autoscaling"]["maxNodeCount"])
             for p in run.of_type("gcp:container/nodePool:NodePool") if "autoscaling" in p.inputs}  # TPU pools
    out = run.outputs["tpuFlavors"]
    assert [f["name"] for f in out] == [f["name"] for f in group["flavors"] if f["name"] != "default-cpu"]
    for flavor in out:
        assert flavor["quota"] == quotas[flavor["name"]], flavor
        assert flavor["hosts"] == pools[selects[flavor["name"]]], flavor
    rungs = {r["name"]: r["kind"] for r in run.outputs["flavors"].get("rungs", [])}
    if rungs:
        assert all(rungs[f["rung"]] == f["kind"] for f in out)


def test_the_elastic_gate_output_follows_kueue() -> None:
    assert infra("dev").outputs["elasticJobs"] is True  # the dev stack sets the gate, as the tutorial does
    assert infra("dev", {"kueue": {"featureGates": {}}}).outputs["elasticJobs"] is True  # 0.19.2's default
    assert infra("dev", SINGLE_HOST_NO_GATE).outputs["elasticJobs"] is False
    assert infra("global").outputs["elasticJobs"] is False
    # A Kueue this stack does not install: its gates are not known, so the output is left out (not null).
    existing = infra("existing", {"kueue": {"install": False}, "fallback": {"enabled": False}})
    assert "elasticJobs" not in existing.outputs and existing.outputs["tpuFlavors"]
    # sigs.k8s.io/kueue@v0.19.2 pkg/features/kube_features.go: alpha (off) from 0.13, beta (on) from 0.18
    assert [elastic_jobs_gate(v, {}) for v in ("0.13.0", "0.17.4", "0.18.0", "0.19.2")] == [False, False, True, True]
    assert elastic_jobs_gate("0.19.2", {"ElasticJobsViaWorkloadSlices": False}) is False
    assert elastic_jobs_gate("0.17.0", {"ElasticJobsViaWorkloadSlices": True}) is True


# --------------------------------------------------------------------------------------------
# The offline plan: a refused config exits 2; an accepted one is priced only where it can be admitted
# --------------------------------------------------------------------------------------------


def _plan(tmp_path: Path, stack_text: str, infra_stack: str = "dev", overrides: dict[str, Any] | None = None
          ) -> subprocess.CompletedProcess[str]:
    refs = tmp_path / "infra-outputs.json"
    refs.write_text(json.dumps(references(infra_stack, overrides)))
    stack_file = tmp_path / "Pulumi.mine.yaml"
    stack_file.write_text(stack_text)
    command = [sys.executable, "-m", "tpu_fallback.offline.plan", "dev", "--project", "jobs", "--stack-file",
               str(stack_file), "--stack-outputs", str(refs), "--quiet", "--out", str(tmp_path / "out")]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)


HEAD = "config:\n  tpu-fallback-jobs:infraStack: organization/tpu-fallback/dev\n  tpu-fallback-jobs:jobs:\n"

# Stack files as users write them: block and flow style, quoted and unquoted numbers, a good job before the bad one.
PLAN_REFUSALS: list[tuple[str, dict[str, Any] | None, str, list[str]]] = [
    ("dev", None, HEAD + "    - name: big-run\n      count: 1\n      workers: 8\n",
     ["jobs[0].workers 8 is invalid", "at most 4"]),
    ("dev", PLAN_A_ONLY, HEAD + "    - name: fine\n    - name: greedy\n      workerRequest: {cpu: 32, memory: 64Gi}\n",
     ["jobs[1].workerRequest.cpu 32 is invalid", "4 workers × 32 = 128 CPU", "at most 10 per worker"]),
    ("dev", SINGLE_HOST, HEAD + "    - name: grow\n      elastic:\n        minReplicas: 1\n        maxReplicas: 3\n",
     ["jobs[0].elastic.maxReplicas 3 is invalid", "maxReplicas at most 2"]),
    ("dev", SINGLE_HOST_NO_GATE, HEAD + "    - name: grow\n      elastic: true\n",
     ["jobs[0].elastic true is invalid", "ElasticJobsViaWorkloadSlices"]),
    ("dev", SPOT_ONLY, HEAD + "    - name: plain\n      count: 3\n",
     ["jobs[0].preemptible false is invalid", "set preemptible: true"]),
]


@pytest.mark.parametrize(("infra_stack", "overrides", "text", "fragments"), PLAN_REFUSALS,
                         ids=[p[3][0][:40] for p in PLAN_REFUSALS])
def test_the_offline_plan_of_a_refused_job_exits_2_with_one_line(tmp_path: Path, infra_stack: str,
                                                                 overrides: dict[str, Any] | None, text: str,
                                                                 fragments: list[str]) -> None:
    result = _plan(tmp_path, text, infra_stack, overrides)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    (error,) = [as_written(line) for line in result.stderr.splitlines() if "configuration error" in line]
    for fragment in fragments:
        assert fragment in error, error
    assert "(2 resources were registered before the failure)" in result.stderr  # the component, its StackReference
    assert not (tmp_path / "out").exists()  # nothing priced


def test_the_offline_plan_prices_a_job_only_where_kueue_can_admit_it(tmp_path: Path) -> None:
    text = HEAD + "    - name: hungry\n      count: 1\n      workerRequest: {cpu: \"12\"}\n    - name: plain\n"
    overrides = {"queues": {"quotas": {"onDemand": {"cpu": 40, "memory": "75Gi"}}}}
    result = _plan(tmp_path, text, "ladder", overrides)
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "out" / "summary.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in summary.splitlines() if line.startswith("| `")}
    hungry, plain = rows["`hungry`"], rows["`plain`"]
    # columns: reserved, on-demand, spot, flex
    assert hungry[6].startswith("$") and plain[6].startswith("$")
    assert hungry[7] == "– (CPU 48 > quota 40)" and plain[7].startswith("$")
    assert hungry[8] == plain[8] == "– (not preemptible)"
    assert "The jobs stack warns" in summary
    assert "jobs[0] (hungry): Kueue can never admit it to on-demand (CPU 48 > quota 40); only to reserved, flex, " \
           "flex-2" in summary


def test_the_jobs_table_without_the_flavor_outputs_prices_as_before() -> None:
    outputs = dict(infra("ladder").outputs)
    specs = (model.JobSpec(name="j", count=1, worker_request=Resources("800", "16Gi")),)
    lines, _ = report.jobs_markdown("x", specs, {**outputs, "tpuFlavors": None}, prices.load())
    row = next(line for line in lines if line.startswith("| `j`"))
    assert row.count("$") == 2 and "not preemptible" in row  # reserved, on-demand; spot skipped; flex n/a
    lines, _ = report.jobs_markdown("x", specs, outputs, prices.load())
    row = next(line for line in lines if line.startswith("| `j`"))
    assert "$" not in row and row.count("– (CPU 3200 > quota 720)") == 2  # only flex-2's unlimited quota has room


def test_the_jobs_docs_name_every_refusal() -> None:
    page = (REPO_ROOT / "docs" / "jobs.md").read_text()
    section = page.split("\n## Jobs Kueue could never admit\n", 1)[1].split("\n## ", 1)[0]
    for phrase in ("workerRequest", "workers", "preemptible", "elastic", "ElasticJobsViaWorkloadSlices",
                   "maxReplicas", "tpuFlavors", "exit code 2", "warning"):
        assert phrase in section, phrase
    assert yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])  # its example is YAML


def test_the_infra_plan_prices_a_job_shape_only_on_the_plans_that_admit_it() -> None:
    """The infra stack's report prices its jobs stacks' job shape per plan: a plan whose quota never admits it says so
    instead of a price."""
    settings = stacks.infra_settings(REPO_ROOT, "dev")
    lines = {}
    for cpu in ("8", "12"):
        shape = stacks.JobShape("j", Resources("2", "4Gi"), Resources(cpu, "16Gi"), None, 1, "a test")
        cost = report.cost_markdown(report.stack_report(settings, shape), prices.load())
        (lines[cpu],) = [line for line in cost if line.startswith("- A job on")]
    assert "plan A (on-demand) $" in lines["8"] and "never" not in lines["8"]
    assert "plan A (on-demand) never: Kueue cannot admit it there (on-demand: cpu quota 40)" in lines["12"]
    assert "plan A (on-demand) $" not in lines["12"] and "plan B (DWS flex-start)" in lines["12"]
