"""Every bad input gets one clear error before anything is registered, in both projects (issue 16).

One table per kind of rule: each case is a config (or a stack file) and the fragments its error must name
(the key path, the bad value, what is allowed or the suggested fix). Then a property test: random mutations
of every example stack end either in such an error, or in a plan the policy pack accepts.
"""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import schemacheck
from tools.policycheck import policy_resources
from tpu_fallback.model.validation import GO_TIME, YAML11_BOOLEANS, ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, infra_references, run_program, stack_config
from tpu_fallback.offline.stackfile import StackFileError, read
from tpu_fallback.policy.checks import Context, evaluate

JOBS = REPO_ROOT / "jobs"
REFS = None


def refused(run: ProgramRun, fragments: list[str]) -> None:
    assert isinstance(run.error, ConfigError), repr(run.error)
    message = str(run.error)
    assert "\n" not in message, message  # one line
    for fragment in fragments:
        assert fragment in message, message
    created = [r.name for r in run.resources if r.custom and not r.options.get("read")]
    assert created == [], created  # nothing created (reading the infra stack's outputs is not; nor is a component)


def jobs_refs() -> dict[str, Any]:
    global REFS
    if REFS is None:
        REFS = infra_references(JOBS, "dev")
    return REFS


INFRA_RULES: list[tuple[dict[str, Any], list[str]]] = [
    # unknown keys at every level, with the nearest known key
    ({"clusterNme": "x"}, ["tpu-fallback:clusterNme is not a known setting", "did you mean clusterName?"]),
    ({"onDemand": {"maxSlice": 2}}, ["onDemand.maxSlice is not a known setting", "did you mean maxSlices?"]),
    ({"queues": {"quotas": {"sytem": {"cpu": 4}}}}, ["queues.quotas.sytem", "did you mean system?"]),
    ({"flexStart": {"maxslices": 2}}, ["flexStart.maxslices", "did you mean maxSlices?"]),
    # namespaces and provider keys
    ({"tpu-falback:clusterName": "x"}, ["tpu-falback:clusterName is not read by this program",
                                         "did you mean tpu-fallback?"]),
    ({"gcp:regoin": "us-east5"}, ["gcp:regoin is not a gcp provider setting", "did you mean region?"]),
    ({"kubernetes:namespace": "ml"}, ["kubernetes:namespace is not read by this program"]),
    # Kueue feature gates the pinned controller does not know
    ({"kueue": {"featureGates": {"ElasticJobsViaWorkloadSlice": True}}},
     ["kueue.featureGates", '"ElasticJobsViaWorkloadSlice"', "Kueue 0.19.2 has no such feature gate",
      "did you mean ElasticJobsViaWorkloadSlices?"]),
    # project ids GCP would refuse
    ({"gcp:project": "My Project"}, ["gcp:project", '"My Project"', "6 to 30 lowercase"]),
    ({"gcp:project": "123456789012"}, ["gcp:project", "starts with a letter"]),
    # numbers where a version is text (more in TEXT_READ_AS_A_NUMBER below)
    ({"kueue": {"version": 0.2}}, ["kueue.version", "0.2", "YAML read the unquoted value as the number 0.2",
                                   "quote it", "a version such as 1.40 becomes 1.4", "expected a Kueue chart version"]),
    # a Kueue the project is not verified with
    ({"kueue": {"version": "0.18.3"}}, ["kueue.version", '"0.18.3"', "verified with Kueue 0.19.2",
                                        "kueue.allowUnverifiedVersion: true"]),
    # zones
    ({"location": "us-central1-b"}, ["location", "flex-start (plan B) only in"]),
    ({"location": "us-central2-b", "flexStart": {"enabled": False}}, ["location", "v6e TPUs are not offered there"]),
    ({"location": "europe-west4"}, ["location", "a zone is required, not a region"]),
    ({"location": "us-east5-x"}, ["location", '"us-east5-x"', "not known to be offered", "allowUnlistedZone"]),
    # length limits are named
    ({"queues": {"localQueues": [{"namespace": "n" * 64, "name": "q"}]}},
     ["queues.localQueues[0].namespace", "at most 63 characters"]),
    ({"queues": {"clusterQueue": "Q"}}, ["queues.clusterQueue", "at most 63 characters"]),
    ({"clusterName": "c" * 41}, ["clusterName", "at most 40 characters"]),
    # shapes
    ({"tpu": "v6e"}, ["tpu", "\"v6e\"", "object"]),
    ({"queues": {"localQueues": {"namespace": "a"}}}, ["queues.localQueues", "non-empty list"]),
]


@pytest.mark.parametrize(("overrides", "fragments"), INFRA_RULES, ids=[str(r[0])[:60] for r in INFRA_RULES])
def test_infra_rule(overrides: dict[str, Any], fragments: list[str]) -> None:
    refused(run_program(REPO_ROOT, "dev", overrides, raise_errors=False), fragments)


JOBS_RULES: list[tuple[dict[str, Any], list[str]]] = [
    ({"job": [{"name": "x"}]}, ["tpu-fallback-jobs:job is not a known setting", "did you mean jobs?"]),
    ({"tpu-fallback-job:jobs": []}, ["tpu-fallback-job:jobs is not read by this program",
                                      "did you mean tpu-fallback-jobs?"]),
    ({"jobs": [{"name": "a", "worker": 4}]}, ["jobs[0].worker is not a known setting", "did you mean workers?"]),
    ({"jobs": [{"name": "a", "image": "Ray:Latest"}]}, ["jobs[0].image", '"Ray:Latest"', "container image reference"]),
    ({"jobs": [{"name": "a", "image": "ray:2.53 py311"}]}, ["jobs[0].image"]),
    ({"jobs": [{"name": "a", "env": {"TPU_FALLBACK_NUM_WORKERS": "8"}}]},
     ["jobs[0].env.TPU_FALLBACK_NUM_WORKERS", "infra stack's TPU outputs"]),
    ({"jobs": [{"name": "a", "env": {"1BAD": "x"}}]}, ["jobs[0].env", '"1BAD"', "environment variable name"]),
    ({"jobs": [{"name": "a", "env": {"N": 3}}]}, ["jobs[0].env.N 3", "read the unquoted value as a number",
                                                  'quote it in the stack file ("3")']),
    ({"jobs": [{"name": "a", "env": {"N": True}}]}, ["jobs[0].env.N true", 'quote it in the stack file ("true")']),
    ({"jobs": [{"name": "a", "count": 1000}]}, ["jobs[0].count", "1000", "at most 100 copies", "wait in Kueue"]),
    ({"jobs": [{"name": "a", "workerRequest": {"cpu": "0"}}]}, ["jobs[0].workerRequest.cpu", "must be positive"]),
    ({"jobs": [{"name": "a", "queue": "nope"}]}, ["jobs[0].queue", '"nope"', "not a local queue"]),
    ({"infraStack": "a/b/c/d"}, ["infraStack", '"a/b/c/d"']),
    ({"jobs": [{"name": "a", "headRequest": {"cpu": "10", "memory": "4Gi"}}]},
     ["jobs[0].headRequest", "never be admitted", "cpu 10.5", "system quota (cpu=10, memory=20Gi)"]),
]


@pytest.mark.parametrize(("overrides", "fragments"), JOBS_RULES, ids=[str(r[0])[:60] for r in JOBS_RULES])
def test_jobs_rule(overrides: dict[str, Any], fragments: list[str]) -> None:
    run = run_program(JOBS, "dev", overrides, stack_references=jobs_refs(), raise_errors=False)
    refused(run, fragments)


STACK_FILE_RULES: list[tuple[str, list[str]]] = [
    # YAML 1.1's booleans: the file, the line and the key
    ("config:\n  gcp:project: my-project\n  tpu-fallback:flexStart:\n    enabled: yes\n",
     ["Pulumi.bad.yaml, line 4, tpu-fallback:flexStart.enabled: 'yes' is a boolean to YAML 1.1",
      "Pulumi CLI (YAML 1.2)", "write true or false"]),
    ("config:\n  gcp:project: my-project\n  tpu-fallback:deletionProtection: off\n",
     ["Pulumi.bad.yaml, line 3, tpu-fallback:deletionProtection: 'off' is a boolean to YAML 1.1"]),
    ("config:\n  gcp:project: my-project\n  tpu-fallback:queues:\n    localQueues:\n      - namespace: a\n"
     "        name: N\n", ["line 6, tpu-fallback:queues.localQueues[0].name: 'N' is a boolean to YAML 1.1",
                          'quote it ("N") if you mean the text']),
    # an unquoted timestamp, which the CLI would hand over in Go's format
    ("config:\n  gcp:project: my-project\n  tpu-fallback:maintenance:\n    exclusionStart: 2026-12-01T00:00:00Z\n",
     ["Pulumi.bad.yaml, line 4, tpu-fallback:maintenance.exclusionStart: 2026-12-01T00:00:00Z unquoted is a "
      "timestamp", "Go's format", 'quote it ("2026-12-01T00:00:00Z")']),
    # YAML 1.1's base-60 numbers are text to the CLI: 3:00 stays "3:00" (not 180), and the setting says what it takes
    ("config:\n  gcp:project: my-project\n  tpu-fallback:maintenance:\n    dailyWindowStart: 3:00\n",
     ['maintenance.dailyWindowStart "3:00" is invalid: expected a UTC time "HH:MM" such as "03:00"']),
    # a version YAML read as a number, end to end
    ("config:\n  gcp:project: my-project\n  tpu-fallback:kueue:\n    version: 1.40\n",
     ["kueue.version 1.4 is invalid: YAML read the unquoted value as the number 1.4", "quote it in the stack file"]),
    ("config:\n  gcp:project: my-project\n  tpu-fallback:clusterName: a\n  tpu-fallback:clusterName: b\n",
     ["Pulumi.bad.yaml, line 4, config: key 'tpu-fallback:clusterName' appears twice", "first on line 3",
      "refuses"]),
    ("- just\n- a list\n", ["expected a mapping"]),
    ("config: [1, 2]\n", ["config must be a mapping"]),
    ("config:\n  gcp:project:\n    secure: AAABAM2Vw==\n", ["gcp:project is a secure value", "cannot decrypt"]),
]


@pytest.mark.parametrize(("text", "fragments"), STACK_FILE_RULES, ids=[r[1][0][:40] for r in STACK_FILE_RULES])
def test_stack_file_rule(tmp_path: Path, text: str, fragments: list[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (project / "Pulumi.bad.yaml").write_text(text)
    (project / "__main__.py").write_text((REPO_ROOT / "__main__.py").read_text())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.md").write_text("an earlier plan")
    plan = [sys.executable, "-m", "tpu_fallback.offline.plan", "bad", "--project", str(project),
            "--out", str(tmp_path / "out")]
    result = subprocess.run(plan, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


# Every text setting that YAML can hand over as a number (written unquoted): the setting, the value, that YAML read
# it as a number, the fix (quote it, where the quoted text would do) and what is allowed.
TEXT_READ_AS_A_NUMBER: list[tuple[dict[str, Any], str, str | None, str]] = [
    ({"kueue": {"version": 1.4}}, "kueue.version 1.4", None, "expected a Kueue chart version x.y.z"),
    ({"tpu": {"type": 5}}, "tpu.type 5", '"5"', "expected one of v6e"),
    ({"tpu": {"topology": 4}}, "tpu.topology 4", '"4"', "expected a topology string such as 4x4"),
    ({"tpu": {"machineType": 8}}, "tpu.machineType 8", '"8"', "expected a string"),
    ({"systemPool": {"name": 123}}, "systemPool.name 123", None, "node pool names use lowercase letters"),
    ({"systemPool": {"machineType": 2}}, "systemPool.machineType 2", None, "Compute Engine machine type"),
    ({"onDemand": {"reservation": 123}}, "onDemand.reservation 123", '"123"', "a specific Compute Engine reservation"),
    ({"flexStart": {"maxRunDuration": 86400}}, "flexStart.maxRunDuration 86400", None,
     'expected seconds such as "86400s"'),
    ({"queues": {"clusterQueue": 7}}, "queues.clusterQueue 7", '"7"', "expected a lowercase DNS label"),
    ({"queues": {"localQueues": [{"namespace": 2024, "name": "q"}]}}, "queues.localQueues[0].namespace 2024",
     '"2024"', "Kubernetes namespace name"),
    ({"queues": {"namespaceLabels": {"team": 1}}}, "queues.namespaceLabels.team 1", '"1"',
     "expected a Kubernetes label value"),
    ({"maintenance": {"dailyWindowStart": 3}}, "maintenance.dailyWindowStart 3", None, 'expected a UTC time "HH:MM"'),
    ({"network": {"network": 5}}, "network.network 5", None, "expected a name such as tpu-vpc"),
    ({"fallback": {"image": 1}}, "fallback.image 1", None, "expected an image reference"),
    ({"multikueue": {"enabled": True, "workers": [{"name": 1, "location": "us-east5-b"}]},
      "kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": False}}}, "multikueue.workers[0].name 1", None,
     "expected a short lowercase name"),
]


@pytest.mark.parametrize(("overrides", "shown", "quoted", "allowed"), TEXT_READ_AS_A_NUMBER,
                         ids=[r[1].split(" ")[0] for r in TEXT_READ_AS_A_NUMBER])
def test_text_that_yaml_read_as_a_number_says_so_and_to_quote_it(
        overrides: dict[str, Any], shown: str, quoted: str | None, allowed: str) -> None:
    run = run_program(REPO_ROOT, "dev", overrides, raise_errors=False)
    fragments = [f"{shown} is invalid: YAML read the unquoted value as ", "but this setting is text", allowed]
    if quoted:
        fragments.append(f"quote it in the stack file ({quoted})")
    elif "." in shown.split(" ")[1]:  # a float: the digits YAML dropped cannot be shown, so quote as meant
        fragments.append("quote it in the stack file exactly as you mean it")
    refused(run, fragments)


JOBS_TEXT_READ_AS_A_NUMBER: list[tuple[dict[str, Any], list[str]]] = [
    ({"name": 123}, ["jobs[0].name 123", "as a number", "lowercase letters, digits and hyphens"]),
    ({"name": "a", "image": 2.5}, ["jobs[0].image 2.5", "as the number 2.5", "exactly as you mean it",
                                   "expected a container image reference"]),
    ({"name": "a", "entrypoint": 7}, ["jobs[0].entrypoint 7", 'quote it in the stack file ("7")']),
    ({"name": "a", "queue": 5}, ["jobs[0].queue 5", 'quote it in the stack file ("5")', "a local queue name"]),
    ({"name": "a", "env": {"N": 1.5}}, ["jobs[0].env.N 1.5", "exactly as you mean it", "value is text"]),
]


@pytest.mark.parametrize(("job", "fragments"), JOBS_TEXT_READ_AS_A_NUMBER,
                         ids=[r[1][0].split(" ")[0] for r in JOBS_TEXT_READ_AS_A_NUMBER])
def test_jobs_text_that_yaml_read_as_a_number_says_so(job: dict[str, Any], fragments: list[str]) -> None:
    run = run_program(JOBS, "dev", {"jobs": [job]}, stack_references=jobs_refs(), raise_errors=False)
    refused(run, [*fragments, "YAML read the unquoted value as"])


# What the Pulumi CLI hands the program where YAML 1.1 and 1.2 disagree (the offline plan refuses those before):
# YAML 1.1's booleans arrive as text, a timestamp in Go's format, and a top-level version as the number's text.
CLI_TEXT_RULES: list[tuple[dict[str, Any], list[str]]] = [
    ({"flexStart": {"enabled": "yes"}}, ['flexStart.enabled "yes" is invalid: expected true or false',
                                         "yes is a boolean only to YAML 1.1", 'where it is the text "yes"']),
    ({"deletionProtection": "no"}, ['deletionProtection "no" is invalid', "no is a boolean only to YAML 1.1"]),
    ({"kueue": {"featureGates": {"ElasticJobsViaWorkloadSlices": "on"}}},
     ['kueue.featureGates.ElasticJobsViaWorkloadSlices "on" is invalid', "on is a boolean only to YAML 1.1"]),
    ({"maintenance": {"exclusionStart": "2026-12-01 00:00:00 +0000 UTC"}},
     ['maintenance.exclusionStart "2026-12-01 00:00:00 +0000 UTC" is invalid', "read the unquoted value as a "
      "timestamp", "Go's format", "quote it in the stack file", 'expected an RFC 3339 UTC time']),
    ({"gkeVersion": "1.3"}, ['gkeVersion "1.3" is invalid', "use 1.35 or later", "if the stack file says 1.30 "
                             "without quotes, YAML read it as the number 1.3", 'quote it ("1.30")']),
]


@pytest.mark.parametrize(("overrides", "fragments"), CLI_TEXT_RULES, ids=[r[1][0][:40] for r in CLI_TEXT_RULES])
def test_what_the_cli_hands_over_is_explained(overrides: dict[str, Any], fragments: list[str]) -> None:
    refused(run_program(REPO_ROOT, "dev", overrides, raise_errors=False), fragments)


def test_the_strict_reader_still_reads_every_example_stack() -> None:
    for path in sorted([*REPO_ROOT.glob("Pulumi*.yaml"), *JOBS.glob("Pulumi*.yaml")]):
        assert read(path) == yaml.safe_load(path.read_text()), path.name  # where both agree, nothing changes


def test_yaml12_booleans_and_quoted_words_read_as_the_cli_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text('config:\n  a: true\n  b: "yes"\n  c: False\n')
    assert read(path) == {"config": {"a": True, "b": "yes", "c": False}}
    path.write_text("config:\n  a: off\n")
    with pytest.raises(StackFileError, match=r"^Pulumi\.x\.yaml, line 2, a: 'off' is a boolean to YAML 1\.1"):
        read(path)
    # As keys, such words are the text to the CLI: read as the text; base-60 numbers are text too.
    path.write_text("config:\n  p:o:\n    n: 1\n    t: 3:00\n    v: 1.40\n    o: 010\n")
    assert read(path) == {"config": {"p:o": {"n": 1, "t": "3:00", "v": 1.4, "o": 8}}}
    path.write_text("config:\n  p:o:\n    2026-12-01: 2\n")
    with pytest.raises(StackFileError, match=r"^Pulumi\.x\.yaml, line 3, p:o: the key 2026-12-01 unquoted is a "
                       r'timestamp .* quote it \("2026-12-01"\)$'):
        read(path)


def _pulumi_cli() -> Path | None:
    """The Pulumi CLI tests/e2e/build_engine.sh builds into the e2e cache, if it is there."""
    cache = Path(os.environ.get("TPU_FALLBACK_E2E_CACHE") or Path.home() / ".cache" / "tpu-fallback-e2e")
    found = sorted(cache.glob("pulumi-v*/pulumi"))
    return found[-1] if found else None


def test_the_offline_reader_hands_over_what_the_pulumi_cli_does(tmp_path: Path) -> None:
    """The claims the messages above make about the CLI, checked against the CLI itself: what it hands the program
    where YAML 1.1 and 1.2 could differ is what the offline plan hands over, or what the offline plan refuses."""
    pulumi = _pulumi_cli()
    if pulumi is None:
        pytest.skip("no Pulumi CLI in the e2e cache (tests/e2e/build_engine.sh builds it; ./scripts/test runs it)")
    (tmp_path / "Pulumi.yaml").write_text("name: p\nruntime: python\n")
    env = {**os.environ, "PULUMI_HOME": str(tmp_path / "home"), "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
           "PULUMI_CONFIG_PASSPHRASE": "test", "PULUMI_SKIP_UPDATE_CHECK": "1"}
    (tmp_path / "state").mkdir()
    subprocess.run([str(pulumi), "stack", "init", "s", "--non-interactive"], cwd=tmp_path, env=env,
                   capture_output=True, check=True)
    agreed = ("config:\n  p:version: 1.40\n  p:octal: 010\n  p:time: 3:00\n  p:word: \"yes\"\n  p:object:\n"
              "    version: 1.40\n    time: 3:00\n    n: 1\n    yes: 2\n    under: 1_000\n    hex: 0x1F\n"
              "    list: [1.50, a]\n")
    refused = "  p:yes: yes\n  p:stamp: 2026-12-01T00:00:00Z\n  p:date: 2026-12-01\n  p:keyed:\n    2026-12-01: 1\n"
    (tmp_path / "Pulumi.s.yaml").write_text(agreed + refused)
    cli = json.loads(subprocess.run([str(pulumi), "config", "--json", "-s", "s"], cwd=tmp_path, env=env,
                                    capture_output=True, text=True, check=True).stdout)
    assert cli["p:yes"]["value"] in YAML11_BOOLEANS
    for text in (cli["p:stamp"]["value"], cli["p:date"]["value"], *cli["p:keyed"]["objectValue"]):
        assert GO_TIME.match(text), text
    (tmp_path / "Pulumi.s.yaml").write_text(agreed)
    _, ours, _ = stack_config(tmp_path, "s")
    assert set(ours) == set(cli) - {"p:yes", "p:stamp", "p:date", "p:keyed"}
    for key, text in ours.items():
        if "objectValue" in cli[key]:
            assert json.loads(text) == cli[key]["objectValue"], key
        else:
            assert text == cli[key]["value"], key
    assert ours["p:version"] == "1.4" and json.loads(ours["p:object"])["version"] == 1.4  # the zero is lost in both


# --------------------------------------------------------------------------------------------
# Property test: random mutations of every example stack
# --------------------------------------------------------------------------------------------

EXAMPLE_STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in REPO_ROOT.glob("Pulumi.*.yaml"))
ODD_VALUES: list[Any] = [-1, 0, 1, 2.5, "", "x", "Bad_Name", True, False, [], {}, "1e9", "20Gi", "4x4", None,
                         {"unknownKey": 1}, ["a"], "us-east5-a", "europe-west4-a", 99, "v5p"]
MUTATIONS = 60


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            out.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out.extend(_paths(child, (*prefix, i)))
    return out


def _mutate(config: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """A copy with one random change, and the top-level key it changed."""
    mutated = copy.deepcopy(config)
    path = rng.choice(_paths(mutated))
    parent: Any = mutated
    for step in path[:-1]:
        parent = parent[step]
    how = rng.choice(["replace", "replace", "delete", "add"])
    if how == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif how == "add" and isinstance(parent, dict):
        parent[rng.choice(["extra", "maxslices", "Name", "enable"])] = rng.choice(ODD_VALUES)
    else:
        parent[path[-1]] = rng.choice(ODD_VALUES)
    return mutated, str(path[0])


def _stack_overrides(stack: str) -> dict[str, Any]:
    config = read(REPO_ROOT / f"Pulumi.{stack}.yaml").get("config", {})
    return {k.removeprefix("tpu-fallback:"): v for k, v in config.items() if k != "gcp:project"}


# A policy may refuse a valid config on purpose: a production stack without its protections.
POLICY_REFUSALS = {"production-cluster-protected": {"deletionProtection", "protect"}}


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_random_mutations_end_in_a_clear_error_or_an_acceptable_plan(stack: str) -> None:
    rng = random.Random(f"tpu-fallback-{stack}")  # reproducible
    base = _stack_overrides(stack)
    outcomes = {"refused": 0, "accepted": 0}
    accepted_objects: list[dict[str, Any]] = []
    for _ in range(MUTATIONS // len(EXAMPLE_STACKS) + 5):
        mutated, changed = _mutate(base, rng)
        overrides: dict[str, Any] = {k: mutated.get(k) for k in set(base) | set(mutated)}
        run = run_program(REPO_ROOT, stack, overrides, raise_errors=False, timeout=60)
        label = json.dumps(mutated, sort_keys=True, default=str)[:400]
        if run.error is not None:
            assert isinstance(run.error, ConfigError), f"{type(run.error).__name__}: {run.error} for {label}"
            assert "\n" not in str(run.error) and str(run.error), label
            assert [r for r in run.resources if not r.options.get("read")] == [], label
            outcomes["refused"] += 1
        else:
            violations = [v for v in evaluate(policy_resources(run), Context(stack=stack))
                          if changed not in POLICY_REFUSALS.get(v.policy, set())]
            assert violations == [], f"{violations} for {label}"
            accepted_objects.extend(run.kubernetes_objects())
            outcomes["accepted"] += 1
    assert outcomes["refused"] > 0  # the mutations do reach the rules
    try:  # the accepted plans against the real CRD schemas, where they are on this machine (./scripts/test builds
        report = schemacheck.check_with_extra(accepted_objects)  # them first)
    except schemacheck.CrdsUnavailableError as err:  # the rest of the test ran: say what did not, without skipping it
        warnings.warn(f"the accepted plans were not checked against the CRD schemas: {err}", stacklevel=1)
        return
    assert report.ok, report.text()
