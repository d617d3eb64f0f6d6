"""Both projects' Pulumi.yaml `config:` schemas against the code: every key the parsers accept is declared (the
known-keys tuples their "not a known setting" errors use), nothing else is, each declared default is the code's
own default (the defaults handed over as the CLI hands them parse to exactly what no config at all parses to),
objects are declared objects, secrets secret; and the real Pulumi CLI hands over what the offline plan reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tpu_fallback.model import jobs
from tpu_fallback.model.settings import CONFIG_KEYS, PROJECT, SECRET_CONFIG_KEYS, FallbackSettings, duration
from tpu_fallback.model.settings.stack import OBJECT_CONFIG_KEYS, UNSET, decode_config, parse_settings
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, encode_config_value, stack_config

INFRA = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
JOBS = yaml.safe_load((REPO_ROOT / "jobs" / "Pulumi.yaml").read_text())
GCP_PROJECT = "my-project"
YAML_TYPES = {"string": str, "boolean": bool, "integer": int, "array": list, "object": dict}


def handed_over(declared: dict[str, Any]) -> dict[str, Any]:
    """The declared defaults as the program reads them: encoded as the CLI's config strings, then decoded."""
    return decode_config({f"{PROJECT}:{key}": encode_config_value(spec["default"])
                          for key, spec in declared.items() if "default" in spec})


def test_the_infra_schema_declares_exactly_the_keys_the_parser_accepts() -> None:
    assert set(INFRA["config"]) == set(CONFIG_KEYS)
    # CONFIG_KEYS is what the parser checks against: a key beyond it is refused as unknown.
    with pytest.raises(ConfigError, match="not a known setting"):
        parse_settings({"notAKey": 1}, GCP_PROJECT)


def test_every_infra_default_is_the_codes_default() -> None:
    nothing = parse_settings({}, GCP_PROJECT)
    declared = INFRA["config"]
    assert all("default" in spec for spec in declared.values())  # the CLI requires a declared key without one
    assert parse_settings(handed_over(declared), GCP_PROJECT) == nothing
    for key, spec in declared.items():  # one at a time too, so that a failure names the key
        assert parse_settings(handed_over({key: spec}), GCP_PROJECT) == nothing, key


def test_the_declared_types_match_what_the_code_reads() -> None:
    for key, spec in INFRA["config"].items():
        if "type" not in spec:  # an optional key: its default is what the code reads as "not set" (Pulumi.yaml)
            assert key in UNSET and spec["default"] == UNSET[key] and type(spec["default"]) is type(UNSET[key]), key
            continue
        assert (spec["type"] == "object") == (key in OBJECT_CONFIG_KEYS), key
        assert isinstance(spec["default"], YAML_TYPES[spec["type"]]), key


def test_the_secret_keys_are_declared_secret() -> None:
    declared = {key for key, spec in INFRA["config"].items() if spec.get("secret")}
    assert declared == set(SECRET_CONFIG_KEYS)
    # And the code does refuse them in plain text.
    with pytest.raises(ConfigError, match=r"kubeconfig.*must be a secret"):
        parse_settings({"existingCluster": {"name": "c"}, "kubeconfig": "apiVersion: v1"}, GCP_PROJECT)


def test_the_fallback_description_states_the_codes_timers() -> None:
    description = INFRA["config"]["fallback"]["description"]
    stated = dict(re.findall(r"(\w+) \((\d+[smh])\)", description))
    assert set(stated) == {"stockoutAfter", "coolDown", "requeueBackoff", "pollInterval"}, stated
    fields = {"stockoutAfter": "stockout_after", "coolDown": "cool_down", "requeueBackoff": "requeue_backoff",
              "pollInterval": "poll_interval"}
    for key, text in stated.items():
        assert duration(key, text, 0, 10**6) == getattr(FallbackSettings(), fields[key]), key


def test_the_jobs_schema_declares_exactly_the_keys_the_parser_accepts_with_its_defaults() -> None:
    declared = JOBS["config"]
    assert set(declared) == set(jobs.JOBS_CONFIG_KEYS)
    with pytest.raises(ConfigError, match="not a known setting"):
        jobs.check_jobs_config_keys(["notAKey"])
    # infraStack has no default, so the CLI requires it: the program cannot go without it.
    assert "default" not in declared["infraStack"]
    with pytest.raises(ConfigError, match="infraStack"):
        jobs.parse_infra_stack(None)
    assert jobs.parse_jobs(declared["jobs"]["default"]) == jobs.parse_jobs(None)
    assert isinstance(declared["jobs"]["default"], YAML_TYPES[declared["jobs"]["type"]])


def _pulumi_cli() -> Path | None:
    """The Pulumi CLI tests/e2e/build_engine.sh builds into the e2e cache, if it is there."""
    cache = Path(os.environ.get("TPU_FALLBACK_E2E_CACHE") or Path.home() / ".cache" / "tpu-fallback-e2e")
    found = sorted(cache.glob("pulumi-v*/pulumi"))
    return found[-1] if found else None


@pytest.mark.parametrize("project_dir", [REPO_ROOT, REPO_ROOT / "jobs"], ids=["infra", "jobs"])
def test_the_pulumi_cli_loads_the_schema_and_hands_over_what_the_offline_plan_reads(project_dir: Path,
                                                                                   tmp_path: Path) -> None:
    pulumi = _pulumi_cli()
    if pulumi is None:
        pytest.skip("no Pulumi CLI in the e2e cache (tests/e2e/build_engine.sh builds it; ./scripts/test runs it)")
    work = tmp_path / "project"
    work.mkdir()
    (work / "Pulumi.yaml").write_text((project_dir / "Pulumi.yaml").read_text())
    # A stack that sets only what the CLI requires (no default): everything else comes from the schema.
    required = {k: "org/tpu-fallback/dev" for k, spec in yaml.safe_load((work / "Pulumi.yaml").read_text())[
        "config"].items() if "default" not in spec}
    name = yaml.safe_load((work / "Pulumi.yaml").read_text())["name"]
    (work / "Pulumi.s.yaml").write_text(yaml.safe_dump({"config": {f"{name}:{k}": v for k, v in required.items()}}))
    env = {**os.environ, "PULUMI_HOME": str(tmp_path / "home"), "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
           "PULUMI_CONFIG_PASSPHRASE": "test", "PULUMI_SKIP_UPDATE_CHECK": "1"}
    (tmp_path / "state").mkdir()
    subprocess.run([str(pulumi), "stack", "init", "s", "--non-interactive"], cwd=work, env=env, capture_output=True,
                   check=True)
    out = subprocess.run([str(pulumi), "config", "--json", "-s", "s"], cwd=work, env=env, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    cli = {key: entry["value"] for key, entry in json.loads(out.stdout).items()}
    _, ours, _ = stack_config(work, "s")
    assert set(ours) == set(cli)
    for key, text in ours.items():  # objects compared as JSON: the CLI and json.dumps space them differently
        assert as_value(text) == as_value(cli[key]), key


def as_value(text: str) -> Any:
    return json.loads(text) if text.startswith(("[", "{")) else text
