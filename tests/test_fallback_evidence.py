"""Which pods are evidence about which rung, what GKE's words on them mean, and which Workload they belong to
(tpu_fallback/fallback/evidence.py), then what decide.py does with it: on plain objects, no cluster.

The messages are GKE's autoscaler's as it writes them (the format strings of GoogleCloudPlatform/cluster-autoscaler,
pkg/visibility: see tests/test_gke_reasons.py for the table itself)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback import evidence as ev
from tpu_fallback.fallback.read import build_snapshot

POOL = "cloud.google.com/gke-nodepool"
NOW = 1_800_000_000.0
FLAVORS = {"default-cpu": {POOL: "default-pool"}, "on-demand": {POOL: "on-demand-pool"},
           "spot": {POOL: "spot-pool"}, "reservation": {POOL: "reservation-pool"}, "dws": {POOL: "dws-pool"}}

OUT_OF_RESOURCES = ("Node scale up in zones us-east5-b associated with this pod failed: GCE out of resources. Pod is "
                    "at risk of not being scheduled.")
IP_SPACE = ("Node scale up in zones us-east5-b associated with this pod failed: IP space exhausted. Pod is at risk "
            "of not being scheduled.")
INTERNAL = ("Node scale up in zones us-east5-b associated with this pod failed: Internal error. Pod is at risk of "
            "not being scheduled.")
IN_BACKOFF = "pod didn't trigger scale-up: 1 in backoff after failed scale-up"
TRIGGERED = "pod triggered scale-up: [{on-demand-pool 0->4 (max: 4)}]"


def stamp(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tpu_pod(name: str, *, flavor: str = "on-demand", tpu: str | None = "4", node: str | None = None,
            labels: dict[str, str] | None = None, owners: list[dict[str, Any]] | None = None,
            gated: bool = False, uid: str | None = None, namespace: str = "default") -> dict[str, Any]:
    """A pod as Kueue starts it: the admitted flavor's node labels in its nodeSelector."""
    resources = {"requests": {"google.com/tpu": tpu}} if tpu else {"requests": {"cpu": "1"}}
    spec: dict[str, Any] = {"nodeSelector": dict(FLAVORS[flavor]), "containers": [{"resources": resources}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    scheduled = {"type": "PodScheduled", "status": "True"} if node else (
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"} if gated else
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"})
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "labels": labels or {},
                         "ownerReferences": owners or []},
            "spec": spec, "status": {"phase": "Running" if node else "Pending", "conditions": [scheduled]}}


def event(pod: dict[str, Any], reason: str, message: str, at: float, last: float | None = None) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"involvedObject": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                               "uid": meta["uid"]},
            "reason": reason, "message": message, "firstTimestamp": stamp(at), "lastTimestamp": stamp(last or at)}


def workload_of(name: str, kind: str, owner: str, uid: str, namespace: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace,
                         "ownerReferences": [{"kind": kind, "name": owner, "uid": uid, "controller": True}]}}


def read(pods: list[dict[str, Any]], events: list[dict[str, Any]], workloads: list[dict[str, Any]] = (),  # type: ignore[assignment]
         ray_clusters: list[dict[str, Any]] = (), reserved: tuple[str, ...] = (),  # type: ignore[assignment]
         memory: ev.Memory | None = None, now: float = NOW) -> ev.Evidence:
    return ev.read(now=now, pods=pods, events=events, workloads=workloads, ray_clusters=ray_clusters,
                   flavors=FLAVORS, reserved=reserved, memory=memory)


# --- which pods are evidence ---------------------------------------------------------------------------------------


def test_a_no_capacity_failure_on_a_tpu_pod_is_evidence_about_the_flavor_it_targets() -> None:
    worker = tpu_pod("w-0")
    found = read([worker], [event(worker, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 20)])
    assert found.flavors["on-demand"].no_capacity_since == NOW - 20
    assert found.flavors["on-demand"].pod == "default/w-0"
    assert "spot" not in found.flavors


def test_a_head_or_submitter_pod_without_a_tpu_is_never_evidence_whatever_gke_says() -> None:
    head = tpu_pod("head", flavor="default-cpu", tpu=None)
    on_tpu_pool_but_cpu_only = tpu_pod("submitter", flavor="on-demand", tpu=None)
    found = read([head, on_tpu_pool_but_cpu_only],
                 [event(head, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5),
                  event(on_tpu_pool_but_cpu_only, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5)])
    assert found.flavors == {}
    assert found.pods == ()


@pytest.mark.parametrize("message", [IP_SPACE, INTERNAL])
def test_a_failure_that_is_not_about_capacity_is_no_evidence(message: str) -> None:
    worker = tpu_pod("w-0")
    found = read([worker], [event(worker, "FailedScaleUp", message, NOW - 5)])
    assert found.flavors["on-demand"].no_capacity_since is None


def test_a_back_off_alone_is_no_evidence_even_right_after_a_failure_of_another_kind() -> None:
    worker = tpu_pod("w-0")
    memory = ev.Memory()
    found = read([worker], [event(worker, "FailedScaleUp", IP_SPACE, NOW - 60),
                            event(worker, "NotTriggerScaleUp", IN_BACKOFF, NOW - 30)], memory=memory)
    assert found.flavors["on-demand"].no_capacity_since is None
    assert found.of("default", "x").no_capacity_since is None


def test_a_back_off_corroborates_a_stock_out_seen_on_the_same_flavor_but_not_another_flavors() -> None:
    first, second, on_reservation = tpu_pod("w-0"), tpu_pod("w-1"), tpu_pod("r-0", flavor="reservation")
    memory = ev.Memory()
    read([first], [event(first, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 100)], memory=memory)
    # The first job's pods are gone (evicted); a second job's only hear of the back-off. So does a pod of the
    # reservation's pool: the autoscaler lists every backed-off node group of the cluster on every pending pod.
    found = read([second, on_reservation], [event(second, "NotTriggerScaleUp", IN_BACKOFF, NOW - 10),
                                            event(on_reservation, "NotTriggerScaleUp", IN_BACKOFF, NOW - 10)],
                 workloads=[workload_of("wl-2", "Pod", "w-1", "uid-w-1")], memory=memory)
    assert found.flavors["on-demand"].no_capacity_since == NOW - 10
    assert found.of("default", "wl-2").no_capacity_since == NOW - 10
    assert found.flavors["reservation"].no_capacity_since is None


def test_a_back_off_long_after_the_last_stock_out_corroborates_nothing() -> None:
    from tpu_fallback.fallback import gke_reasons

    worker = tpu_pod("w-0")
    memory = ev.Memory(no_capacity_seen={"on-demand": NOW - gke_reasons.BACKOFF_MAX - 120})
    found = read([worker], [event(worker, "NotTriggerScaleUp", IN_BACKOFF, NOW - 5)], memory=memory)
    assert found.flavors["on-demand"].no_capacity_since is None


def test_a_stale_failure_says_nothing_about_now() -> None:
    worker = tpu_pod("w-0")
    found = read([worker], [event(worker, "FailedScaleUp", OUT_OF_RESOURCES, NOW - ev.FRESH_FOR - 60)])
    assert found.flavors["on-demand"].no_capacity_since is None


def test_a_reservation_error_is_evidence_on_a_reservation_flavor_only() -> None:
    from tpu_fallback.fallback import gke_reasons

    exhausted = next(r for r in gke_reasons.REASONS if r.form == gke_reasons.Form.FAILED_SCALE_UP
                     and r.reservation == gke_reasons.Verdict.RESERVATION_NO_CAPACITY
                     and r.no_reservation != gke_reasons.Verdict.NO_CAPACITY)  # "Reservation capacity exceeded"
    message = ("Node scale up in zones us-east5-b associated with this pod failed: "
               f"{exhausted.text}. Pod is at risk of not being scheduled.")
    on_reservation, elsewhere = tpu_pod("r-0", flavor="reservation"), tpu_pod("s-0", flavor="spot")
    found = read([on_reservation, elsewhere], [event(on_reservation, "FailedScaleUp", message, NOW - 5),
                                               event(elsewhere, "FailedScaleUp", message, NOW - 5)],
                 reserved=("reservation",))
    assert found.flavors["reservation"].no_capacity_since == NOW - 5
    assert found.flavors["spot"].no_capacity_since is None


def test_gated_scheduled_and_earlier_pods_of_the_same_name_are_no_evidence() -> None:
    gated, running = tpu_pod("gated", gated=True), tpu_pod("running", node="n1")
    renewed = tpu_pod("renewed", uid="uid-new")
    old_event = event(tpu_pod("renewed", uid="uid-old"), "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5)
    found = read([gated, running, renewed], [event(gated, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5),
                                             event(running, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 5), old_event])
    assert found.flavors["on-demand"].no_capacity_since is None
    assert found.tpu_in_use == {"n1": Decimal(4)}


def test_a_later_trigger_is_a_scale_up_under_way_a_later_failure_ends_it() -> None:
    worker = tpu_pod("w-0", owners=[{"kind": "Job", "name": "train", "uid": "job-uid"}])
    wl = [workload_of("job-train", "Job", "train", "job-uid")]
    under_way = read([worker], [event(worker, "TriggeredScaleUp", TRIGGERED, NOW - 700)], wl)
    assert under_way.of("default", "job-train").scale_up_since == NOW - 700
    failed = read([worker], [event(worker, "TriggeredScaleUp", TRIGGERED, NOW - 700),
                             event(worker, "FailedScaleUp", INTERNAL, NOW - 100)], wl)
    assert failed.of("default", "job-train").scale_up_since is None


# --- which Workload a pod belongs to --------------------------------------------------------------------------------


def _attributed(pod: dict[str, Any], workloads: list[dict[str, Any]], ray_clusters: list[dict[str, Any]] = ()  # type: ignore[assignment]
                ) -> tuple[str, str] | None:
    found = read([pod], [], workloads, ray_clusters)
    return found.pods[0].workload


def test_every_job_kind_kueue_admits_is_attributed() -> None:
    batch = tpu_pod("train-abc", labels={"batch.kubernetes.io/job-name": "train"},
                    owners=[{"kind": "Job", "name": "train", "uid": "job-uid"}])
    assert _attributed(batch, [workload_of("job-train-1", "Job", "train", "job-uid")]) == ("default", "job-train-1")

    # A JobSet's pods belong to its child Jobs; the JobSet controller labels them with the JobSet's name.
    jobset = tpu_pod("js-workers-0-0-x", labels={"jobset.sigs.k8s.io/jobset-name": "js",
                                                "batch.kubernetes.io/job-name": "js-workers-0"},
                     owners=[{"kind": "Job", "name": "js-workers-0", "uid": "child-uid"}])
    assert _attributed(jobset, [workload_of("jobset-js-1", "JobSet", "js", "js-uid")]) == ("default", "jobset-js-1")
    # A TrainJob runs as a JobSet of its own name.
    assert _attributed(jobset, [workload_of("trainjob-js-1", "TrainJob", "js", "tj-uid")]) == (
        "default", "trainjob-js-1")

    ray_worker = tpu_pod("rc-worker-0", labels={"ray.io/cluster": "rc"},
                         owners=[{"kind": "RayCluster", "name": "rc", "uid": "rc-uid"}])
    assert _attributed(ray_worker, [workload_of("raycluster-rc-1", "RayCluster", "rc", "rc-uid")]) == (
        "default", "raycluster-rc-1")
    cluster_of_a_rayjob = {"metadata": {"name": "rc", "namespace": "default", "uid": "rc-uid", "ownerReferences": [
        {"kind": "RayJob", "name": "rj", "uid": "rj-uid", "controller": True}]}}
    assert _attributed(ray_worker, [workload_of("rayjob-rj-1", "RayJob", "rj", "rj-uid")],
                       [cluster_of_a_rayjob]) == ("default", "rayjob-rj-1")

    group_member = tpu_pod("g-0", labels={"kueue.x-k8s.io/pod-group-name": "group-a"})
    group = {"metadata": {"name": "group-a", "namespace": "default", "ownerReferences": [
        {"kind": "Pod", "name": "g-0", "uid": "uid-g-0"}, {"kind": "Pod", "name": "g-1", "uid": "uid-g-1"}]}}
    assert _attributed(group_member, [group]) == ("default", "group-a")

    single = tpu_pod("lonely")
    assert _attributed(single, [workload_of("pod-lonely-1", "Pod", "lonely", "uid-lonely")]) == (
        "default", "pod-lonely-1")

    lws = tpu_pod("lws-0-1", labels={"kueue.x-k8s.io/prebuilt-workload-name": "leaderworkerset-lws-0-x"},
                  owners=[{"kind": "StatefulSet", "name": "lws-0", "uid": "sts-uid"}])
    assert _attributed(lws, [{"metadata": {"name": "leaderworkerset-lws-0-x", "namespace": "default",
                                           "ownerReferences": [{"kind": "LeaderWorkerSet", "name": "lws",
                                                                "uid": "lws-uid"}]}}]) == (
        "default", "leaderworkerset-lws-0-x")


def test_kueues_identifier_annotations_attribute_as_its_labels_do() -> None:
    """Kueue v0.19.2 writes pod-group-name and prebuilt-workload-name as annotations on LeaderWorkerSet pods
    (WorkloadIdentifierAnnotations, on by default), and reads the annotation before the label."""
    lws = tpu_pod("lws-0-1", owners=[{"kind": "StatefulSet", "name": "lws-0", "uid": "sts-uid"}])
    lws["metadata"]["annotations"] = {"kueue.x-k8s.io/prebuilt-workload-name": "leaderworkerset-lws-0-x",
                                      "kueue.x-k8s.io/pod-group-name": "leaderworkerset-lws-0-x"}
    wl = {"metadata": {"name": "leaderworkerset-lws-0-x", "namespace": "default",
                       "ownerReferences": [{"kind": "LeaderWorkerSet", "name": "lws", "uid": "lws-uid"}]}}
    assert _attributed(lws, [wl]) == ("default", "leaderworkerset-lws-0-x")
    group_member = tpu_pod("g-0", labels={"kueue.x-k8s.io/pod-group-name": "stale"})
    group_member["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-name": "group-a"}
    group = {"metadata": {"name": "group-a", "namespace": "default"}}
    assert _attributed(group_member, [group, {"metadata": {"name": "stale", "namespace": "default"}}]) == (
        "default", "group-a")


def test_a_workload_of_the_same_name_in_another_namespace_is_not_it() -> None:
    pod = tpu_pod("g-0", labels={"kueue.x-k8s.io/pod-group-name": "group-a"}, namespace="team-a")
    assert _attributed(pod, [{"metadata": {"name": "group-a", "namespace": "team-b"}}]) is None


def test_an_unattributed_tpu_pod_is_counted_and_still_evidence_about_its_flavor() -> None:
    stray = tpu_pod("stray", owners=[{"kind": "AppWrapper", "name": "aw", "uid": "aw-uid"}])
    found = read([stray], [event(stray, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 3)])
    assert found.flavors["on-demand"].unattributed == ("default/stray",)
    assert found.flavors["on-demand"].no_capacity_since == NOW - 3
    assert found.flavors["on-demand"].workload is None


def test_required_node_affinity_targets_a_flavor_as_a_node_selector_does() -> None:
    pod = tpu_pod("w")
    pod["spec"]["nodeSelector"] = {}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL, "operator": "In", "values": ["spot-pool"]}]}]}}}
    assert read([pod], []).pods[0].flavor == "spot"


# --- what decide.py makes of it --------------------------------------------------------------------------------------

LADDER = d.Config(plan_a_flavors=(), plan_b_flavors=(), stockout_after=600, cool_down=1800, rungs=(
    d.Rung("reservation", ("reservation",), reserved=True), d.Rung("onDemand", ("on-demand",)),
    d.Rung("spot", ("spot",)), d.Rung("flexStart", ("dws",), queued=True)))
SLICE = {"cpu": "32", "memory": "64Gi", "google.com/tpu": "16"}


def kueue_workload(name: str, flavor: str, *, owner: tuple[str, str, str], admitted: float,
                   active: bool = True, tpu_pods: int = 4) -> dict[str, Any]:
    kind, owner_name, uid = owner
    return {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": stamp(admitted - 1),
                     "resourceVersion": "1",
                     "ownerReferences": [{"kind": kind, "name": owner_name, "uid": uid, "controller": True}]},
        "spec": {"active": active, "podSets": [
            {"name": "head", "count": 1, "template": {"spec": {"containers": [{"resources": {"requests": {
                "cpu": "1"}}}]}}},
            {"name": "workers", "count": tpu_pods, "template": {"spec": {"containers": [{"resources": {
                "requests": {"google.com/tpu": "4"}}}]}}}]},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": [
                {"name": "head", "flavors": {"cpu": "default-cpu"}, "resourceUsage": {"cpu": "1"}},
                {"name": "workers", "flavors": {r: flavor for r in SLICE}, "resourceUsage": dict(SLICE)}]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(admitted)},
                {"type": "Admitted", "status": "True", "lastTransitionTime": stamp(admitted)},
                {"type": "PodsReady", "status": "False", "reason": "WaitForStart",
                 "lastTransitionTime": stamp(admitted)}]}}


def flavor_objects(closed: dict[str, float] | None = None) -> list[dict[str, Any]]:
    taint, closed = "tpu-fallback.dev/plan-a-stockout", closed or {}
    return [{"metadata": {"name": name}, "spec": {"nodeLabels": labels, "nodeTaints": [
        {"key": taint, "value": str(int(closed[name])), "effect": "NoSchedule"}] if name in closed else []}}
        for name, labels in FLAVORS.items()]


def tpu_node(name: str, pool: str, *, ready: bool = True, cordoned: bool = False, created: float = NOW - 3600,
             tpu: str = "4") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {POOL: pool}, "creationTimestamp": stamp(created)},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": {"google.com/tpu": tpu},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def cluster_queue(free_on: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"flavors": [
        {"name": f, "resources": [{"name": r, "nominalQuota": {"google.com/tpu": q, "cpu": "1000", "memory": "1Ti"}[r]}
                                  for r in SLICE]} for f, q in free_on.items()]}]}}


def decide_on(*, workloads: list[dict[str, Any]], pods: list[dict[str, Any]], events: list[dict[str, Any]] = (),  # type: ignore[assignment]
              nodes: list[dict[str, Any]] = (), closed: dict[str, float] | None = None,  # type: ignore[assignment]
              quota: dict[str, str] | None = None, now: float = NOW, memory: ev.Memory | None = None
              ) -> list[d.Action]:
    snap = build_snapshot(LADDER, now, flavors=flavor_objects(closed), workloads=workloads, nodes=nodes,
                          cluster_queues=[cluster_queue(quota or {"on-demand": "16", "spot": "16",
                                                                   "reservation": "16", "dws": "1e9"})],
                          provisioning_requests=[], pods=pods, events=events, memory=memory)
    return d.decide(LADDER, snap)


def closes(actions: list[d.Action]) -> list[str]:
    return [a.rung for a in actions if isinstance(a, d.ClosePlanA)]


def evictions(actions: list[d.Action]) -> list[str]:
    return [a.name for a in actions if isinstance(a, d.Evict)]


def test_a_ray_head_unschedulable_on_the_cpu_pool_never_closes_a_tpu_rung_nor_evicts_its_running_workers() -> None:
    job = kueue_workload("rayjob-a", "on-demand", owner=("RayJob", "a", "rj-a"), admitted=NOW - 3600)
    cluster = {"metadata": {"name": "a-rc", "namespace": "default", "uid": "rc-a",
                            "ownerReferences": [{"kind": "RayJob", "name": "a", "uid": "rj-a"}]}}
    owner = [{"kind": "RayCluster", "name": "a-rc", "uid": "rc-a"}]
    head = tpu_pod("a-head", flavor="default-cpu", tpu=None, owners=owner)
    workers = [tpu_pod(f"a-worker-{i}", node=f"n{i}", owners=owner) for i in range(4)]
    actions = decide_on(workloads=[job], pods=[head, *workers],
                        events=[event(head, "FailedScaleUp", OUT_OF_RESOURCES, NOW - 10),
                                event(head, "NotTriggerScaleUp", IN_BACKOFF, NOW - 5)])
    assert closes(actions) == [] and evictions(actions) == []
    del cluster


def test_a_non_capacity_failure_and_its_back_off_close_nothing_before_stockout_after_then_the_backstop_does() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 300)
    worker = tpu_pod("a-0", owners=[{"kind": "Job", "name": "a", "uid": "job-a"}])
    said = [event(worker, "FailedScaleUp", IP_SPACE, NOW - 200), event(worker, "NotTriggerScaleUp", IN_BACKOFF,
                                                                          NOW - 100)]
    assert closes(decide_on(workloads=[job], pods=[worker], events=said)) == []
    late = decide_on(workloads=[job], pods=[worker], events=said, now=NOW + 301)
    assert closes(late) == ["onDemand"] and evictions(late) == ["job-a"]


def test_another_pools_back_off_never_closes_a_rung() -> None:
    memory = ev.Memory(no_capacity_seen={"spot": NOW - 60})  # spot stocked out a minute ago
    job = kueue_workload("job-r", "reservation", owner=("Job", "r", "job-r"), admitted=NOW - 30)
    worker = tpu_pod("r-0", flavor="reservation", owners=[{"kind": "Job", "name": "r", "uid": "job-r"}])
    actions = decide_on(workloads=[job], pods=[worker], memory=memory,
                        events=[event(worker, "NotTriggerScaleUp", IN_BACKOFF, NOW - 5)])
    assert closes(actions) == []


def test_a_real_stock_out_closes_the_rung_at_once_and_evicts_the_job_whose_pods_wait() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 40)
    worker = tpu_pod("a-0", owners=[{"kind": "Job", "name": "a", "uid": "job-a"}])
    actions = decide_on(workloads=[job], pods=[worker], events=[event(worker, "FailedScaleUp", OUT_OF_RESOURCES,
                                                                      NOW - 1)])
    assert closes(actions) == ["onDemand"] and evictions(actions) == ["job-a"]
    close = next(a for a in actions if isinstance(a, d.ClosePlanA))
    assert close.cause == "default/job-a" and "default/a-0" in close.why and "GCE out of resources" in close.why


def test_the_backstop_waits_while_a_scale_up_is_under_way() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 1200)
    worker = tpu_pod("a-0", owners=[{"kind": "Job", "name": "a", "uid": "job-a"}])
    triggered = [event(worker, "TriggeredScaleUp", TRIGGERED, NOW - 700)]
    assert closes(decide_on(workloads=[job], pods=[worker], events=triggered)) == []
    # Without the autoscaler's word: nodes of the pool registered since its admission, not Ready yet.
    creating = [tpu_node(f"n{i}", "on-demand-pool", ready=False, created=NOW - 100) for i in range(2)]
    assert closes(decide_on(workloads=[job], pods=[worker], nodes=creating)) == []
    # Past --max-node-provision-time with nothing coming: the backstop closes.
    assert closes(decide_on(workloads=[job], pods=[worker], events=triggered, now=NOW + 300)) == ["onDemand"]


def test_a_job_waiting_for_dws_moves_only_onto_free_hosts_never_onto_busy_or_cordoned_ones() -> None:
    waiting = kueue_workload("job-w", "dws", owner=("Job", "w", "job-w"), admitted=NOW - 60)
    waiting["status"]["conditions"] = [c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved"]
    nodes = [tpu_node(f"n{i}", "on-demand-pool") for i in range(4)]
    busy = [tpu_pod(f"other-{i}", node=f"n{i}") for i in range(4)]

    def moves(pods: list[dict[str, Any]], node_objects: list[dict[str, Any]]) -> list[str]:
        no_reservation = {"reservation": "0", "on-demand": "16", "spot": "0", "dws": "1e9"}
        return [a.target for a in decide_on(workloads=[waiting], pods=pods, nodes=node_objects, quota=no_reservation)
                if isinstance(a, d.Deactivate)]

    assert moves([], nodes) == ["on-demand"]
    assert moves(busy, nodes) == []  # Ready nodes and free quota, but every host runs another job's pod
    assert moves(busy[:1], nodes) == []  # three free hosts for four pods
    assert moves([], [*nodes[:3], tpu_node("n3", "on-demand-pool", cordoned=True)]) == []


# --- a Workload Kueue deactivated after its DWS check was rejected ---------------------------------------------------


def deactivated_by_kueue(name: str, since: float, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """As Kueue v0.19.2 leaves it (workload_controller.go reconcileCheckBasedEviction, then the inactive branch)."""
    obj = kueue_workload(name, "dws", owner=("RayJob", name, f"uid-{name}"), admitted=since - 600, active=False)
    obj["metadata"]["annotations"] = annotations or {}
    obj["status"] = {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "lastTransitionTime": stamp(since)},
        {"type": "Evicted", "status": "True", "reason": "DeactivatedDueToAdmissionCheck",
         "message": 'The workload is deactivated due to AdmissionCheck in Rejected state: "dws-prov" (capacity '
                    'revoked)', "lastTransitionTime": stamp(since)}]}
    return obj


def test_a_workload_kueue_deactivated_is_told_once_then_revived_after_the_cool_down_a_few_times_at_most() -> None:
    told = [a for a in decide_on(workloads=[deactivated_by_kueue("j", NOW - 10)], pods=[])
            if isinstance(a, d.TellDeactivation)]
    assert len(told) == 1 and "capacity revoked" in told[0].why and "queues it again in 1800s" in told[0].why
    seen = {d.KUEUE_DEACTIVATION_TOLD: stamp(NOW - 5)}
    assert [a for a in decide_on(workloads=[deactivated_by_kueue("j", NOW - 10, seen)], pods=[])
            if isinstance(a, d.Revive | d.TellDeactivation)] == []  # told already, cool-down not over
    later = decide_on(workloads=[deactivated_by_kueue("j", NOW - 1801, seen)], pods=[])
    assert [(a.name, a.count) for a in later if isinstance(a, d.Revive)] == [("j", 1)]
    worn_out = {**seen, d.REVIVED_ANNOTATION: f"{d.MAX_REVIVALS} {stamp(NOW - 4000)}"}
    assert [a for a in decide_on(workloads=[deactivated_by_kueue("j", NOW - 1801, worn_out)], pods=[])
            if isinstance(a, d.Revive)] == []
    untold = {d.REVIVED_ANNOTATION: worn_out[d.REVIVED_ANNOTATION]}
    final = [a for a in decide_on(workloads=[deactivated_by_kueue("j", NOW - 1801, untold)], pods=[])
             if isinstance(a, d.TellDeactivation)]
    assert len(final) == 1 and "kubectl patch workload -n default j --type=merge" in final[0].why


def test_a_workload_a_person_deactivated_is_left_alone() -> None:
    obj = deactivated_by_kueue("j", NOW - 4000)
    obj["status"]["conditions"][1].update(reason="Deactivated", message="The workload is deactivated")
    assert [a for a in decide_on(workloads=[obj], pods=[]) if isinstance(a, d.Revive | d.TellDeactivation)] == []


def test_a_later_not_triggered_ends_a_scale_up_under_way_for_the_pod() -> None:
    """The autoscaler writes NotTriggerScaleUp only for a pod no upcoming node can take: another pod took the
    slice under way, and this one waits for nothing."""
    worker = tpu_pod("w-0", owners=[{"kind": "Job", "name": "train", "uid": "job-uid"}])
    wl = [workload_of("job-train", "Job", "train", "job-uid")]
    found = read([worker], [event(worker, "TriggeredScaleUp", TRIGGERED, NOW - 700),
                            event(worker, "NotTriggerScaleUp", "Pod didn't trigger scale-up: 1 max node group size "
                                                               "reached", NOW - 600)], wl)
    assert found.of("default", "job-train").scale_up_since is None


def test_a_registering_node_with_the_not_ready_taint_is_capacity_on_its_way() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 1200)
    worker = tpu_pod("a-0", owners=[{"kind": "Job", "name": "a", "uid": "job-a"}])
    registering = tpu_node("n0", "on-demand-pool", ready=False, created=NOW - 30)
    registering["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    assert closes(decide_on(workloads=[job], pods=[worker], nodes=[registering])) == []
    registering["spec"]["taints"].append({"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"})
    assert closes(decide_on(workloads=[job], pods=[worker], nodes=[registering])) == ["onDemand"]


def test_a_reactivated_workload_kueue_left_unqueued_is_marked_requeued_and_no_other() -> None:
    """Kueue v0.19.2 turns Requeued back to True on a reactivation only for reason "Deactivated"."""
    stuck = deactivated_by_kueue("j", NOW - 100)
    stuck["spec"]["active"] = True
    stuck["status"]["conditions"].append({"type": "Requeued", "status": "False",
                                          "reason": "DeactivatedDueToAdmissionCheck", "message": "m"})
    assert [a.name for a in decide_on(workloads=[stuck], pods=[]) if isinstance(a, d.MarkRequeued)] == ["j"]
    ours = deactivated_by_kueue("k", NOW - 100)
    ours["spec"]["active"] = True
    ours["status"]["conditions"].append({"type": "Requeued", "status": "False", "reason": "Deactivated"})
    assert [a for a in decide_on(workloads=[ours], pods=[]) if isinstance(a, d.MarkRequeued)] == []
    asleep = deactivated_by_kueue("l", NOW - 100)  # still inactive: nothing to requeue yet
    asleep["status"]["conditions"].append({"type": "Requeued", "status": "False",
                                           "reason": "DeactivatedDueToAdmissionCheck"})
    assert [a for a in decide_on(workloads=[asleep], pods=[]) if isinstance(a, d.MarkRequeued)] == []


def test_a_ray_clusters_owner_is_remembered_while_its_pods_outlive_it() -> None:
    """KubeRay deletes a suspended RayJob's RayCluster before the cluster's pods are gone."""
    cluster = {"metadata": {"name": "rc", "namespace": "default", "uid": "rc-uid", "ownerReferences": [
        {"kind": "RayJob", "name": "rj", "uid": "rj-uid"}]}}
    worker = tpu_pod("rc-worker-0", labels={"ray.io/cluster": "rc"},
                     owners=[{"kind": "RayCluster", "name": "rc", "uid": "rc-uid"}])
    job = [workload_of("rayjob-rj-1", "RayJob", "rj", "rj-uid")]
    memory = ev.Memory()
    assert read([worker], [], job, [cluster], memory=memory).pods[0].workload == ("default", "rayjob-rj-1")
    assert read([worker], [], job, [], memory=memory).pods[0].workload == ("default", "rayjob-rj-1")
    read([], [], job, [], memory=memory)  # its pods gone: forgotten
    assert read([worker], [], job, [], memory=memory).pods[0].workload is None


def test_a_pool_growing_for_other_pods_holds_the_backstop_until_its_nodes_exist() -> None:
    """The autoscaler meant the slice under way for another team's older pods (NotTriggerScaleUp on ours since),
    but the pool is growing: not a stock-out, and its VMs are not given away mid-way. Once the four nodes it adds
    exist and are Ready, and ours are still pending, the backstop acts; a FailedScaleUp on the pool ends it too."""
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 1200)
    ours = tpu_pod("a-0", owners=[{"kind": "Job", "name": "a", "uid": "job-a"}])
    theirs = tpu_pod("other-0", labels={"team": "other"})
    said = [event(ours, "TriggeredScaleUp", TRIGGERED, NOW - 300),
            event(ours, "NotTriggerScaleUp", "Pod didn't trigger scale-up: 1 max node group size reached, "
                                             "1 in backoff after failed scale-up", NOW - 200),
            event(theirs, "TriggeredScaleUp", TRIGGERED, NOW - 250)]
    assert read([ours], said, [job]).of("default", "job-a").scale_up_since is None  # for our pod, nothing comes
    assert closes(decide_on(workloads=[job], pods=[ours, theirs], events=said)) == []
    two = [tpu_node(f"n{i}", "on-demand-pool", created=NOW - 100, tpu="0") for i in range(2)]
    assert closes(decide_on(workloads=[job], pods=[ours, theirs], events=said, nodes=two)) == []
    four = [tpu_node(f"n{i}", "on-demand-pool", created=NOW - 100, tpu="0") for i in range(4)]
    assert closes(decide_on(workloads=[job], pods=[ours, theirs], events=said, nodes=four)) == ["onDemand"]
    failed = event(theirs, "FailedScaleUp", "Node scale up in zones us-east5-b associated with this pod failed: "
                                            "Internal error. Pod is at risk of not being scheduled.", NOW - 100)
    assert closes(decide_on(workloads=[job], pods=[ours, theirs], events=[*said, failed])) == ["onDemand"]


def test_a_scale_up_older_than_the_admission_holds_nothing() -> None:
    job = kueue_workload("job-a", "on-demand", owner=("Job", "a", "job-a"), admitted=NOW - 1200)
    ours = tpu_pod("a-0", owners=[{"kind": "Job", "name": "a", "uid": "job-a"}])
    theirs = tpu_pod("other-0", labels={"team": "other"})
    said = [event(theirs, "TriggeredScaleUp", TRIGGERED, NOW - 1300)]
    assert closes(decide_on(workloads=[job], pods=[ours, theirs], events=said)) == ["onDemand"]
