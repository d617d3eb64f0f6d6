"""Config validation: every bad value gets one clear error naming the key, the value and what is allowed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.settings import Settings, parse_settings
from tpu_fallback.model.validation import ConfigError


def test_defaults_are_the_tutorial() -> None:
    s = parse_settings({}, "my-project")
    # The tutorial's 1.34 reached end of life on 2026-10-01 (GKE release schedule): the oldest minor still offered.
    assert (s.cluster_name, s.location, s.gke_version) == ("tpu-cluster", "us-east5-b", "1.35")
    assert (s.tpu.family.name, s.tpu.topology, s.tpu.machine_type) == ("v6e", "4x4", "ct6e-standard-4t")
    assert (s.on_demand.name, s.on_demand.max_slices, s.on_demand.reservation) == ("on-demand-pool", 1, None)
    assert (s.flex_start.name, s.flex_start.max_slices, s.flex_start.enabled) == ("dws-pool", 1, True)
    assert (s.system_pool.name, s.system_pool.machine_type) == ("default-pool", "n2-standard-16")
    assert s.kueue.version == "0.19.2" and s.kueue.feature_gates == (("ElasticJobsViaWorkloadSlices", True),)
    assert s.deletion_protection is True


def test_the_parser_takes_every_default_from_the_settings_dataclasses() -> None:
    # Each default is written once, on its dataclass field: the parser given nothing (or empty objects) builds the
    # same Settings as the dataclasses' own defaults (the node account id is the parser's to derive).
    empty_objects: dict[str, Any] = {key: {} for key in ("systemPool", "tpu", "onDemand", "flexStart", "kueue",
                                                         "queues", "fallback", "maintenance", "network", "multikueue")}
    for raw in ({}, empty_objects):
        parsed = parse_settings(raw, "my-project")
        assert parsed == replace(Settings(project="my-project"), node_account_id=parsed.node_account_id)


BAD: list[tuple[dict[str, Any], list[str]]] = [
    ({"tpu": {"type": "v7x"}}, ["tpu.type", '"v7x"', "v6e, v5e, v5p, v4"]),
    ({"tpu": {"topology": "3x3"}}, ["tpu.topology", '"3x3"', "valid: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"]),
    ({"tpu": {"topology": "4x4x4"}}, ["tpu.topology", '"4x4x4"', "v6e"]),
    ({"tpu": {"type": "v5p", "topology": "2x2"}}, ["tpu.topology", '"2x2"', "2x2x1"]),
    ({"tpu": {"machineType": "ct5p-hightpu-4t"}}, ["tpu.machineType", '"ct5p-hightpu-4t"', "ct6e-standard-4t"]),
    ({"tpu": {"topology": "4x4", "machineType": "ct6e-standard-8t"}}, ["tpu.topology", "ct6e-standard-8t", "2x4"]),
    ({"tpu": {"size": 4}}, ["tpu.size", "type, topology, machineType"]),
    ({"onDemand": {"maxSlices": -1}}, ["onDemand.maxSlices", "-1", "integer >= 0"]),
    ({"onDemand": {"maxSlices": "2"}}, ["onDemand.maxSlices", '"2"', "integer"]),
    ({"onDemand": {"maxSlices": 1.5}}, ["onDemand.maxSlices", "1.5", "integer"]),
    ({"flexStart": {"maxSlices": True}}, ["flexStart.maxSlices true", "integer"]),  # YAML's true, not Python's
    ({"onDemand": {"maxSlices": 0}, "flexStart": {"maxSlices": 0}}, ["onDemand.maxSlices", "flexStart.maxSlices"]),
    ({"onDemand": {"maxSlices": 0}, "flexStart": {"enabled": False}}, ["onDemand.maxSlices", "flexStart.enabled"]),
    ({"location": "us-east5"}, ["location", '"us-east5"', "zone is required"]),
    ({"location": "somewhere"}, ["location", '"somewhere"', "zone"]),
    ({"clusterName": "TPU"}, ["clusterName", '"TPU"', "lowercase"]),
    ({"clusterName": "1tpu"}, ["clusterName", '"1tpu"', "start with a letter"]),
    ({"clusterName": "a" * 41}, ["clusterName", "at most 40"]),
    ({"clusterName": "tpu_cluster"}, ["clusterName", "hyphens"]),
    ({"gkeVersion": "1.32"}, ["gkeVersion", '"1.32"', "no longer offers", "1.35 or later"]),
    ({"gkeVersion": "1.34.11-gke.1209000"}, ["gkeVersion", '"1.34.11-gke.1209000"', "1.35 or later"]),
    ({"gkeVersion": "latest"}, ["gkeVersion", '"latest"']),
    ({"kueue": {"version": "0.19"}}, ["kueue.version", '"0.19"', "x.y.z"]),
    ({"kueue": {"version": "v0.19.2"}}, ["kueue.version", '"v0.19.2"']),
    ({"onDemand": {"name": "dws-pool"}}, ["dws-pool", "unique"]),
    ({"systemPool": {"name": "on-demand-pool"}}, ["on-demand-pool", "unique"]),
    ({"flexStart": {"maxRunDuration": "8d"}}, ["flexStart.maxRunDuration", '"8d"']),
    ({"flexStart": {"maxRunDuration": "700000s"}}, ["flexStart.maxRunDuration", "7 days"]),
    ({"tpu": {"type": "v4", "topology": "2x2x2"}}, ["flexStart.enabled", "v4"]),
    ({"nodeCount": 3}, ["tpu-fallback:nodeCount", "not a known setting"]),
    ({"deletionProtection": "yes"}, ["deletionProtection", '"yes"', "true or false"]),
]


@pytest.mark.parametrize(("raw", "fragments"), BAD, ids=[str(b[0]) for b in BAD])
def test_bad_input_is_a_clear_error(raw: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings(raw, "my-project")
    for fragment in fragments:
        assert fragment in str(err.value)


def test_missing_project() -> None:
    with pytest.raises(ConfigError, match="gcp:project"):
        parse_settings({}, None)


def test_gke_versions_at_or_above_the_oldest_offered_minor_pass() -> None:
    for version in ("1.35", "1.35.8-gke.1036000", "1.36", "1.37.1"):
        assert parse_settings({"gkeVersion": version}, "my-project").gke_version == version


def test_partial_objects_keep_defaults() -> None:
    s = parse_settings({"tpu": {"topology": "4x8"}, "onDemand": {"maxSlices": 2}}, "my-project")
    assert s.tpu.family.name == "v6e" and s.tpu.hosts_per_slice == 8
    assert s.on_demand.name == "on-demand-pool" and s.on_demand.max_slices == 2


def test_on_demand_quota_defaults_to_the_tutorial_and_scales_with_plan_a() -> None:
    assert parse_settings({}, "my-project").on_demand_quota == Resources(40, "75Gi")
    assert parse_settings({"onDemand": {"maxSlices": 2}}, "my-project").on_demand_quota == Resources(80, "150Gi")
    # 2 hosts x 18.75Gi is not a whole number of Gi, so it is written in Mi.
    assert parse_settings({"tpu": {"topology": "2x4"}}, "my-project").on_demand_quota == Resources(20, "38400Mi")
    configured = parse_settings({"queues": {"quotas": {"onDemand": {"cpu": 64, "memory": "128Gi"}}}}, "my-project")
    assert configured.on_demand_quota == Resources(64, "128Gi")


def test_configured_on_demand_quota_too_small_for_one_slice() -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"queues": {"quotas": {"onDemand": {"cpu": 10, "memory": "75Gi"}}}}, "my-project")
    assert "queues.quotas.onDemand" in str(err.value) and "cpu 32" in str(err.value)


def test_worker_request_larger_than_the_tpu_host() -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"queues": {"workerRequest": {"cpu": 200, "memory": "16Gi"}}}, "my-project")
    assert "queues.workerRequest" in str(err.value) and "180 vCPU" in str(err.value)


def test_system_quota_must_hold_one_jobs_head_and_submitter() -> None:
    # head 2 CPU / 4Gi + KubeRay's submitter 500m / 200Mi (measured by the end-to-end test); an elastic job's
    # autoscaler sidecar is checked by the jobs stack, which knows whether a job is elastic
    ok = parse_settings({"queues": {"quotas": {"system": {"cpu": "2500m", "memory": "4296Mi"}}}}, "my-project")
    assert ok.queues.system_quota == Resources("2500m", "4296Mi")
    for system in ({"cpu": "2400m", "memory": "4296Mi"}, {"cpu": "2500m", "memory": "4295Mi"}):
        with pytest.raises(ConfigError, match=r"queues\.quotas\.system"):
            parse_settings({"queues": {"quotas": {"system": system}}}, "my-project")
