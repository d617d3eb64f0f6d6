"""The prose of docs/fallback.md about what closes, reopens and moves, checked against the controller's decisions.

Each claim is quoted as the page says it (the quote must still be on the page: a reworded claim fails here until
its check is reviewed) and checked on cluster objects as the controller reads them (tests/test_fallback_evidence.py
builds them as Kueue, KubeRay and GKE's autoscaler write them)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_fallback_evidence import (
    IN_BACKOFF,
    INTERNAL,
    IP_SPACE,
    NOW,
    OUT_OF_RESOURCES,
    TRIGGERED,
    closes,
    decide_on,
    event,
    evictions,
    kueue_workload,
    tpu_node,
    tpu_pod,
)
from tpu_fallback.fallback import decide as d

PAGE = Path(__file__).resolve().parent.parent / "docs" / "fallback.md"
JOB = [{"kind": "Job", "name": "a", "uid": "job-a"}]


def _page() -> str:
    return re.sub(r"\s+", " ", PAGE.read_text())


def a_ray_head_never_closes() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 3600)
    head = tpu_pod("a-head", flavor="default-cpu", tpu=None, owners=JOB)
    actions = decide_on(workloads=[job], pods=[head, *[tpu_pod(f"a-{i}", node=f"n{i}", owners=JOB) for i in range(4)]],
                        events=[event(head, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5)])
    assert closes(actions) == [] and evictions(actions) == []


def no_capacity_closes_at_once() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 10)
    worker = tpu_pod("a-0", owners=JOB)
    actions = decide_on(workloads=[job], pods=[worker], events=[event(worker, "FailedScaleUp", OUT_OF_RESOURCES,
                                                                      NOW - 2)])
    assert closes(actions) == ["onDemand"] and evictions(actions) == ["job-a"]


def not_capacity_waits_for_the_backstop() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 100)
    worker = tpu_pod("a-0", owners=JOB)
    for message in (IP_SPACE, INTERNAL):
        assert closes(decide_on(workloads=[job], pods=[worker],
                                events=[event(worker, "FailedScaleUp", message, NOW - 90)])) == []
    assert closes(decide_on(workloads=[job], pods=[worker], now=NOW + 500,
                            events=[event(worker, "FailedScaleUp", IP_SPACE, NOW - 90)])) == ["onDemand"]


def a_back_off_alone_is_no_evidence() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 100)
    worker = tpu_pod("a-0", owners=JOB)
    assert closes(decide_on(workloads=[job], pods=[worker],
                            events=[event(worker, "NotTriggerScaleUp", IN_BACKOFF, NOW - 5)])) == []


def a_scale_up_under_way_holds_the_backstop() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 700)
    worker = tpu_pod("a-0", owners=JOB)
    assert closes(decide_on(workloads=[job], pods=[worker],
                            events=[event(worker, "TriggeredScaleUp", TRIGGERED, NOW - 650)])) == []
    assert closes(decide_on(workloads=[job], pods=[worker])) == ["onDemand"]


def scheduled_pods_never_close() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 3600)
    pulling = [tpu_pod(f"a-{i}", node=f"n{i}", owners=JOB) for i in range(4)]
    assert closes(decide_on(workloads=[job], pods=pulling)) == []


def reopens_after_the_cool_down_or_a_new_node() -> None:
    closed = {"on-demand": NOW - 100}
    reopen = [a for a in decide_on(workloads=[], pods=[], closed=closed) if isinstance(a, d.ReopenPlanA)]
    assert reopen == []
    late = [a for a in decide_on(workloads=[], pods=[], closed=closed, now=NOW + 1800) if isinstance(a, d.ReopenPlanA)]
    assert [a.rung for a in late] == ["onDemand"]
    fresh = [a for a in decide_on(workloads=[], pods=[], closed=closed,
                                  nodes=[tpu_node("n", "on-demand-pool", created=NOW - 50)])
             if isinstance(a, d.ReopenPlanA)]
    assert [a.rung for a in fresh] == ["onDemand"]


def moves_need_a_free_host_per_tpu_pod() -> None:
    waiting = kueue_workload("job-w", "dws", owner=("Job", "w", "job-w"), admitted=NOW - 60)
    waiting["status"]["conditions"] = [c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved"]
    quota = {"reservation": "0", "on-demand": "16", "spot": "0", "dws": "1e9"}
    nodes = [tpu_node(f"n{i}", "on-demand-pool") for i in range(4)]

    def moved(pods: list[dict[str, object]]) -> bool:
        return any(isinstance(a, d.Deactivate) for a in decide_on(workloads=[waiting], pods=pods,
                                                                  nodes=nodes, quota=quota))

    assert moved([]) and not moved([tpu_pod("other", node="n0")])


def a_queued_rung_is_never_closed() -> None:
    job = kueue_workload("job-q", "dws", owner=("Job", "q", "job-q"), admitted=NOW - 5000)
    worker = tpu_pod("q-0", flavor="dws", owners=[{"kind": "Job", "name": "q", "uid": "job-q"}])
    assert closes(decide_on(workloads=[job], pods=[worker],
                            events=[event(worker, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5)])) == []


CLAIMS: list[tuple[str, Callable[[], None]]] = [
    ("A Ray head, KubeRay's submitter or any CPU pod never closes a TPU rung, whatever GKE says about it.",
     a_ray_head_never_closes),
    ("*no capacity* closes the rung", no_capacity_closes_at_once),
    ("*not capacity* (IP space, service account, TPU topology, …) and *unknown* (\"Internal error\", nodes that did "
     "not appear in time) leave it to the backstop", not_capacity_waits_for_the_backstop),
    ("A back-off message (\"… in backoff after failed scale-up\") is never evidence on its own.",
     a_back_off_alone_is_no_evidence),
    ("A `TriggeredScaleUp` on the job's TPU pods, later than any failure and younger than the autoscaler's "
     "`--max-node-provision-time` (15 min), or nodes of the pool registered but not Ready yet, hold the backstop.",
     a_scale_up_under_way_holds_the_backstop),
    ("Pods that were scheduled (pulling a large image, crash looping, never Ready) are the job's own problem and "
     "**never** close a rung.", scheduled_pods_never_close),
    ("Plan A reopens (taint removed) after `coolDown`, or sooner when a Ready node created after the close appears "
     "in a plan A pool.", reopens_after_the_cool_down_or_a_new_node),
    ("**and that flavor's pool has a free Ready host for each of its TPU pods**", moves_need_a_free_host_per_tpu_pod),
    ("a queued rung (flex-start) is never closed.", a_queued_rung_is_never_closed),
]


@pytest.mark.parametrize(("claim", "check"), CLAIMS, ids=[check.__name__ for _c, check in CLAIMS])
def test_the_page_says_it_and_the_controller_does_it(claim: str, check: Callable[[], None]) -> None:
    assert claim in _page(), f"docs/fallback.md no longer says: {claim!r} (review this claim's check)"
    check()
