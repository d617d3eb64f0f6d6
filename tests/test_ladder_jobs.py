"""Jobs opt into a capacity ladder's spot rung with `preemptible: true`: their TPU workers tolerate the spot taint
the spot flavor declares (tpu_fallback/render/kueue.py), and no other job does."""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_jobs_stack import jobs_run, rayjobs
from tpu_fallback.model.jobs import parse_jobs
from tpu_fallback.model.validation import ConfigError

SPOT_TOLERATION = {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def worker_tolerations(job: dict[str, Any]) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"][
        "tolerations"]
    return tolerations


def test_only_a_preemptible_job_tolerates_the_spot_taint() -> None:
    run = jobs_run(overrides={"jobs": [{"name": "ckpt", "count": 1, "preemptible": True},
                                       {"name": "plain", "count": 1}]})
    by_name = {job["metadata"]["name"].rsplit("-", 1)[0]: job for job in rayjobs(run)}
    assert set(by_name) == {"ckpt", "plain"}, list(by_name)
    assert SPOT_TOLERATION in worker_tolerations(by_name["ckpt"])
    assert all(t["key"] != "cloud.google.com/gke-spot" for t in worker_tolerations(by_name["plain"]))
    # the rest of the worker's tolerations are the same (TPU and queued-provisioning taints)
    assert [t for t in worker_tolerations(by_name["ckpt"]) if t != SPOT_TOLERATION] == \
        worker_tolerations(by_name["plain"])
    # the Ray head stays on the system pool: it never tolerates spot
    head = by_name["ckpt"]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert all(t.get("key") != "cloud.google.com/gke-spot" for t in head.get("tolerations", []))


@pytest.mark.parametrize("value", ["yes", 1, "True"])
def test_preemptible_is_a_boolean(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.preemptible"):
        parse_jobs([{"name": "j", "preemptible": value}])
    assert parse_jobs([{"name": "j"}])[0].preemptible is False
