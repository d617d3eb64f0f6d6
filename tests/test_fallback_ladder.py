"""The fallback controller on a capacity ladder (decide.Config.rungs): each rung closed and reopened on its own
evidence, jobs moving up the ladder, the "rungs" config, the per-rung metrics. Without a cluster; on the simulated
GKE with the real Kueue: tests/e2e/test_ladder_e2e.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.test_fallback import (
    ADMIN_TAINT,
    FLAVORS,
    POOL,
    SLICE,
    T0,
    FakeKube,
    event,
    owned,
    parse_now,
    pod,
    ray_cluster,
    taints,
)
from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.config import Settings, merge_selectors, parse_rungs
from tpu_fallback.fallback.controller import Controller
from tpu_fallback.fallback.metrics import Metrics

LADDER = (d.Rung("reservation", ("reservation",)), d.Rung("onDemand", ("on-demand",)), d.Rung("spot", ("spot",)),
          d.Rung("flexStart", ("dws",), queued=True))
CONFIG = d.Config(plan_a_flavors=("reservation", "on-demand", "spot"), plan_b_flavors=("dws",), stockout_after=600,
                  cool_down=1800, rungs=LADDER)
POOLS = {"reservation": "reservation-pool", "on-demand": "on-demand-pool", "spot": "spot-pool", "dws": "dws-pool"}
FULL: dict[str, Decimal] = {}  # no room left on a flavor


def flavors(closed: dict[str, float] | None = None) -> dict[str, d.Flavor]:
    return {name: d.Flavor(name, {POOL: p}, (closed or {}).get(name)) for name, p in POOLS.items()}


def workload(name: str, flavor: str | None, **kw: Any) -> d.Workload:
    defaults: dict[str, Any] = {"namespace": "default", "name": name, "created": T0, "cluster_queue": "cq",
                                "tpu_flavor": flavor, "usage": dict(SLICE), "quota_reserved": flavor is not None}
    return d.Workload(**{**defaults, **kw})


def node(pool: str, created: float = T0, ready: bool = True, tpu_free: Decimal = Decimal(4)) -> d.Node:
    return d.Node({POOL: pool}, created, ready, tpu_free=tpu_free)


def snap(now: float, workloads: list[d.Workload], closed: dict[str, float] | None = None,
         nodes: list[d.Node] | None = None, free: dict[str, dict[str, Decimal]] | None = None) -> d.Snapshot:
    room = {name: dict(SLICE) for name in POOLS}
    room.update(free or {})
    return d.Snapshot(now=now, flavors=flavors(closed), workloads=tuple(workloads), nodes=tuple(nodes or ()),
                      free={"cq": room})


def stuck(name: str, flavor: str) -> d.Workload:
    """A job admitted to `flavor` whose pods are unschedulable, with GKE's no-capacity Event on them."""
    return workload(name, flavor, admitted_since=T0, pods_unschedulable=True, stockout_event=T0 + 30)


def of(kind: type, actions: list[d.Action]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


# --- each rung on its own evidence ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavor, rung", [("reservation", "reservation"), ("on-demand", "onDemand"),
                                          ("spot", "spot")])
def test_a_stock_out_on_one_rung_closes_that_rung_only_and_evicts_only_its_job(flavor: str, rung: str) -> None:
    others = [workload(f"on-{f}", f, admitted_since=T0, pods_started=True) for f in POOLS if f != flavor]
    actions = d.decide(CONFIG, snap(T0 + 31, [stuck("job-1", flavor), *others]))
    (close,) = of(d.ClosePlanA, actions)
    assert close.flavors == (flavor,) and close.rung == rung and close.cause == "default/job-1"
    assert f"the {rung} rung has no capacity" in close.why
    (evict,) = of(d.Evict, actions)
    assert evict.name == "job-1" and evict.rung == rung
    assert actions.index(close) < actions.index(evict)  # the taint first


def test_stock_outs_on_two_rungs_close_both_and_a_queued_rung_is_never_closed() -> None:
    jobs = [stuck("a", "on-demand"), stuck("b", "spot"), stuck("c", "dws")]
    closes = of(d.ClosePlanA, d.decide(CONFIG, snap(T0 + 31, jobs)))
    assert sorted((c.rung, c.flavors) for c in closes) == [("onDemand", ("on-demand",)), ("spot", ("spot",))]


def test_the_backstop_closes_a_rung_whose_pods_stay_unschedulable_without_an_event() -> None:
    quiet = workload("job-1", "spot", admitted_since=T0, pods_unschedulable=True)
    assert of(d.ClosePlanA, d.decide(CONFIG, snap(T0 + 599, [quiet]))) == []
    (close,) = of(d.ClosePlanA, d.decide(CONFIG, snap(T0 + 600, [quiet])))
    assert close.rung == "spot" and "stockoutAfter (600s)" in close.why


def test_each_closed_rung_reopens_on_its_own_clock_and_its_own_nodes() -> None:
    closed = {"on-demand": T0, "spot": T0 + 1000}
    (reopen,) = d.decide(CONFIG, snap(T0 + 1800, [], closed))
    assert isinstance(reopen, d.ReopenPlanA) and reopen.flavors == ("on-demand",) and reopen.rung == "onDemand"
    (reopen,) = of(d.ReopenPlanA, d.decide(CONFIG, snap(T0 + 1100, [], closed, [node("spot-pool", created=T0 + 1050)])))
    assert reopen.flavors == ("spot",) and "spot-pool" not in reopen.why and "spot's pool" in reopen.why
    # A new node on another rung's pool reopens nothing.
    assert d.decide(CONFIG, snap(T0 + 1100, [], closed, [node("reservation-pool", created=T0 + 1050)])) == []


def test_a_job_stuck_on_a_closed_rung_is_evicted_a_job_on_an_open_rung_is_left_alone() -> None:
    jobs = [stuck("late", "on-demand"), workload("fine", "spot", admitted_since=T0, pods_unschedulable=True)]
    actions = d.decide(CONFIG, snap(T0 + 40, jobs, {"on-demand": T0 + 35}))
    assert [(type(a).__name__, getattr(a, "name", None)) for a in actions] == [("Evict", "late")]


# --- moving up the ladder -------------------------------------------------------------------------------------------


def waiting_on_dws(name: str = "job-2", **kw: Any) -> d.Workload:
    return workload(name, "dws", **kw)


def test_a_job_waiting_on_flex_start_moves_to_the_highest_open_rung_with_room_and_ready_nodes() -> None:
    nodes = [node("reservation-pool"), node("on-demand-pool"), node("spot-pool")]
    (move,) = d.decide(CONFIG, snap(T0, [waiting_on_dws()], nodes=nodes))
    assert isinstance(move, d.Deactivate) and (move.target, move.rung) == ("reservation", "reservation")
    # The reservation full: the next rung down that has room.
    (move,) = of(d.Deactivate, d.decide(CONFIG, snap(T0, [waiting_on_dws()], nodes=nodes, free={"reservation": FULL})))
    assert (move.target, move.rung) == ("on-demand", "onDemand")
    # The reservation closed, on-demand without a Ready node: spot.
    (move,) = of(d.Deactivate, d.decide(CONFIG, snap(
        T0 + 1, [waiting_on_dws()], {"reservation": T0},
        [node("reservation-pool"), node("on-demand-pool", ready=False), node("spot-pool")])))
    assert (move.target, move.rung) == ("spot", "spot")


def test_no_move_to_a_rung_that_reopens_in_the_same_pass() -> None:
    """Kueue has to see the taint go before it can admit there: the move waits for the next pass."""
    actions = d.decide(CONFIG, snap(T0 + 1800, [waiting_on_dws()], {"reservation": T0},
                                    [node("reservation-pool")], free={"on-demand": FULL, "spot": FULL}))
    assert [type(a).__name__ for a in actions] == ["ReopenPlanA"]


def test_a_job_waiting_for_a_scale_up_on_a_lower_rung_moves_up_a_running_one_does_not() -> None:
    waiting = workload("scaling", "spot", admitted_since=T0, pods_unschedulable=True)
    running = workload("running", "spot", admitted_since=T0, pods_started=True)
    scheduled = workload("scheduled", "spot", admitted_since=T0)  # pods bound, pulling: capacity has arrived
    actions = d.decide(CONFIG, snap(T0 + 10, [waiting, running, scheduled], nodes=[node("on-demand-pool")],
                                    free={"reservation": FULL}))
    assert [(a.name, a.target) for a in of(d.Deactivate, actions)] == [("scaling", "on-demand")]


def test_the_oldest_waiting_job_moves_first_and_the_room_is_counted_down() -> None:
    older, newer = waiting_on_dws("old", created=T0), waiting_on_dws("new", created=T0 + 1)
    actions = d.decide(CONFIG, snap(T0 + 5, [newer, older], nodes=[node("reservation-pool")],
                                    free={"on-demand": FULL, "spot": FULL}))
    assert [(a.name, a.target) for a in of(d.Deactivate, actions)] == [("old", "reservation")]


def test_a_moved_job_moves_again_only_further_up() -> None:
    moved_to_spot = workload("m", "spot", admitted_since=T0, pods_unschedulable=True,
                             annotations={d.MOVED_ANNOTATION: "2026-12-01T10:00:00Z to spot"})
    nodes = [node("reservation-pool"), node("on-demand-pool")]
    (move,) = of(d.Deactivate, d.decide(CONFIG, snap(T0 + 10, [moved_to_spot], nodes=nodes,
                                                     free={"reservation": FULL})))
    assert move.target == "on-demand"
    moved_to_reservation = waiting_on_dws(annotations={d.MOVED_ANNOTATION: "2026-12-01T10:00:00Z to reservation"})
    assert of(d.Deactivate, d.decide(CONFIG, snap(T0 + 10, [moved_to_reservation], nodes=nodes))) == []


def test_a_job_evicted_from_a_closed_rung_is_not_also_moved() -> None:
    actions = d.decide(CONFIG, snap(T0 + 40, [stuck("job-1", "spot")], nodes=[node("reservation-pool")]))
    assert [type(a).__name__ for a in actions] == ["ClosePlanA", "Evict"]


def test_the_second_half_of_a_move_names_its_target_rung() -> None:
    released = waiting_on_dws(active=False, quota_reserved=False, tpu_flavor=None,
                              annotations={d.MOVING_ANNOTATION: "2026-12-01T10:00:00Z to on-demand"})
    (action,) = d.decide(CONFIG, snap(T0, [released]))
    assert isinstance(action, d.Reactivate) and action.rung == "onDemand" and "the onDemand rung" in action.why
    assert not action.after_eviction


# --- a reserved rung: moved to without a Ready node ------------------------------------------------------------------
# A specific reservation's pool autoscales from zero, but its capacity is held for it: its free quota is enough.

RESERVED = replace(CONFIG, rungs=(replace(LADDER[0], reserved=True), *LADDER[1:]))


def test_a_job_waiting_on_flex_start_moves_to_a_reserved_rung_whose_pool_has_no_node() -> None:
    (move,) = d.decide(RESERVED, snap(T0, [waiting_on_dws()]))  # no node anywhere
    assert isinstance(move, d.Deactivate) and (move.target, move.rung) == ("reservation", "reservation")
    assert "no node yet" in move.why and "Ready nodes" not in move.why
    # The same cluster without the flag: a rung with no Ready node is no target, so nothing moves.
    assert d.decide(CONFIG, snap(T0, [waiting_on_dws()])) == []


def test_a_job_waiting_for_a_scale_up_on_spot_moves_to_a_reserved_rung_without_nodes() -> None:
    waiting = workload("scaling", "spot", admitted_since=T0, pods_unschedulable=True)
    (move,) = of(d.Deactivate, d.decide(RESERVED, snap(T0 + 10, [waiting])))
    assert (move.name, move.target) == ("scaling", "reservation")


def test_no_move_to_a_closed_reserved_rung_or_one_reopening_in_this_pass_or_one_without_free_quota() -> None:
    # Closed (within its cool-down): the job moves to on-demand, which has a Ready node, or nowhere.
    closed = {"reservation": T0}
    (move,) = of(d.Deactivate, d.decide(RESERVED, snap(T0 + 5, [waiting_on_dws()], closed, [node("on-demand-pool")])))
    assert move.target == "on-demand"
    assert of(d.Deactivate, d.decide(RESERVED, snap(T0 + 5, [waiting_on_dws()], closed))) == []
    # Reopened by this very pass (its cool-down over): Kueue must see the taint go first.
    actions = d.decide(RESERVED, snap(T0 + 1800, [waiting_on_dws()], closed))
    assert [type(a).__name__ for a in actions] == ["ReopenPlanA"]
    # Its quota taken: no move, Ready node or not.
    assert d.decide(RESERVED, snap(T0, [waiting_on_dws()], free={"reservation": FULL})) == []


def test_one_slice_free_on_a_reserved_rung_without_nodes_takes_one_job_and_no_second_move_follows() -> None:
    older, newer = waiting_on_dws("old", created=T0), waiting_on_dws("new", created=T0 + 1)
    actions = d.decide(RESERVED, snap(T0 + 5, [newer, older]))
    assert [(a.name, a.target) for a in of(d.Deactivate, actions)] == [("old", "reservation")]
    # Next pass: the first move is under way (deactivated, then queued again), its target's quota still shows free.
    for in_flight in ({"active": False, "annotations": {d.MOVING_ANNOTATION: "2026-12-01T10:00:00Z to reservation"}},
                      {"active": True, "annotations": {d.MOVED_ANNOTATION: "2026-12-01T10:00:00Z to reservation"}}):
        mover = waiting_on_dws("old", created=T0, quota_reserved=False, tpu_flavor=None, **in_flight)
        assert of(d.Deactivate, d.decide(RESERVED, snap(T0 + 6, [mover, newer]))) == []
    # Once there (admitted, its pool scaling up), it never moves again to the rung it was moved to.
    arrived = workload("old", "reservation", admitted_since=T0 + 7, pods_unschedulable=True,
                       annotations={d.MOVED_ANNOTATION: "2026-12-01T10:00:00Z to reservation"})
    assert of(d.Deactivate, d.decide(RESERVED, snap(T0 + 8, [arrived], free={"reservation": FULL}))) == []


def test_a_job_waiting_for_one_reservations_scale_up_is_not_moved_to_another_without_nodes() -> None:
    """Both capacities are held: moving would restart the job for nothing. With a Ready node it may move."""
    two = replace(CONFIG, rungs=(replace(LADDER[0], reserved=True), d.Rung("reservation-b", ("spot",), reserved=True),
                                 LADDER[3]))
    waiting = workload("scaling", "spot", admitted_since=T0, pods_unschedulable=True)
    assert of(d.Deactivate, d.decide(two, snap(T0 + 10, [waiting]))) == []
    (move,) = of(d.Deactivate, d.decide(two, snap(T0 + 10, [waiting], nodes=[node("reservation-pool")])))
    assert move.target == "reservation" and "1 free Ready node" in move.why


# --- the "rungs" config -------------------------------------------------------------------------------------------


def write_config(tmp_path: Path, **keys: Any) -> Path:
    raw = {"stockoutAfterSeconds": 600, "coolDownSeconds": 1800, "pollIntervalSeconds": 5, "taintKey": "t",
           "metricsPort": 0, "moveBack": True, **keys}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


RUNGS_JSON = [
    {"name": "reservation", "flavors": ["reservation"], "queued": False, "reserved": True,
     "nodeSelector": f"{POOL} in (reservation-pool)"},
    {"name": "onDemand", "flavors": ["on-demand", "on-demand-2"], "queued": False,
     "nodeSelector": f"{POOL} in (on-demand-pool,on-demand-pool-2)"},
    {"name": "spot", "flavors": ["spot"], "queued": False, "nodeSelector": f"{POOL}=spot-pool"},
    {"name": "flexStart", "flavors": ["dws"], "queued": True},
]


def test_rungs_are_read_in_order_with_one_node_selector_for_every_closable_rungs_pools(tmp_path: Path) -> None:
    settings = Settings.from_file(write_config(tmp_path, rungs=RUNGS_JSON))
    config = settings.decide
    assert [(r.name, list(r.flavors), r.queued, r.reserved) for r in config.ladder] == [
        ("reservation", ["reservation"], False, True), ("onDemand", ["on-demand", "on-demand-2"], False, False),
        ("spot", ["spot"], False, False), ("flexStart", ["dws"], True, False)]
    assert not config.two_plans and "dws" not in config.closable_flavors
    assert set(config.closable_flavors) == {"reservation", "on-demand", "on-demand-2", "spot"}
    assert settings.node_selector == f"{POOL} in (on-demand-pool,on-demand-pool-2,reservation-pool,spot-pool)"
    # A rung without a selector: every node is read.
    no_selector = [dict(r) for r in RUNGS_JSON]
    del no_selector[2]["nodeSelector"]
    assert Settings.from_file(write_config(tmp_path, rungs=no_selector)).node_selector is None


def test_without_rungs_plan_a_and_plan_b_are_the_two_rungs(tmp_path: Path) -> None:
    settings = Settings.from_file(write_config(tmp_path, planAFlavors=["on-demand"], planBFlavors=["dws"],
                                               planANodeSelector=f"{POOL} in (on-demand-pool)"))
    assert settings.decide.two_plans and settings.decide.rungs == ()
    assert [(r.flavors, r.queued) for r in settings.decide.ladder] == [(("on-demand",), False), (("dws",), True)]
    assert settings.node_selector == f"{POOL} in (on-demand-pool)"


@pytest.mark.parametrize("rungs, message", [
    ([], "expected a non-empty list"),
    ([{"name": "a", "flavors": ["x"], "preemptible": True}], r"unknown keys \['preemptible'\]"),
    ([{"name": "a", "flavors": []}], r"rungs\[0\].flavors \[\] is invalid"),
    ([{"name": "a", "flavors": ["x"]}, {"name": "a", "flavors": ["y"]}], "another rung has that name"),
    ([{"name": "a", "flavors": ["x"]}, {"name": "b", "flavors": ["x"]}], r"\['x'\] is on another rung"),
    ([{"name": "a", "flavors": ["x"], "queued": "yes"}], r"rungs\[0\].queued 'yes' is invalid"),
    ([{"name": "a", "flavors": ["x"], "reserved": 1}], r"rungs\[0\].reserved 1 is invalid: expected true or false"),
    ([{"name": "a", "flavors": ["x"], "queued": True, "reserved": True}], "holds no reservation"),
])
def test_bad_rungs_are_refused_with_what_is_wrong(rungs: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rungs(rungs)


@pytest.mark.parametrize("selectors, merged", [
    (["k in (a)", "k=b", "k == c"], "k in (a,b,c)"),
    (["k in (a)", "other in (b)"], None),
    (["k notin (a)"], None),
    ([], None),
])
def test_node_selectors_merge_only_on_one_key(selectors: list[str], merged: str | None) -> None:
    assert merge_selectors(selectors) == merged


# --- acting on a ladder against a fake API ---------------------------------------------------------------------------


def ladder_cluster() -> FakeKube:
    flavor_objects = {name: {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                             "metadata": {"name": name, "resourceVersion": "7"},
                             "spec": {"nodeLabels": {POOL: pool}, "nodeTaints": [dict(ADMIN_TAINT)]}}
                      for name, pool in POOLS.items()}
    job = owned("job-1")  # admitted to "on-demand" (tests/test_fallback.py kueue_workload)
    job["metadata"]["resourceVersion"] = "42"
    objects: dict[str, Any] = {f"{FLAVORS}/{n}": o for n, o in flavor_objects.items()}
    objects.update({
        FLAVORS: list(flavor_objects.values()),
        "/apis/kueue.x-k8s.io/v1beta2/workloads": [job],
        "/api/v1/pods": [pod("job-1-worker-a", "job-1")],
        "/apis/ray.io/v1/rayclusters": [ray_cluster("job-1")],
        "/api/v1/events": [event("job-1-worker-a", "FailedScaleUp", "Node scale up in zones z associated with "
                                 "this pod failed: GCE out of resources. Pod is at risk of not being scheduled.")],
    })
    return FakeKube(objects)


def test_a_stock_out_on_on_demand_taints_its_flavor_only_with_rung_events_and_metrics() -> None:
    kube = ladder_cluster()
    metrics = Metrics()
    controller = Controller(kube, Settings(CONFIG, poll_interval=0.01), metrics)  # type: ignore[arg-type]
    actions = controller.reconcile(now=parse_now("2026-12-01T10:00:40Z"))
    assert [type(a).__name__ for a in actions] == ["ClosePlanA", "Evict"]
    assert taints(kube, "on-demand")[0] == ADMIN_TAINT and taints(kube, "on-demand")[1]["key"] == CONFIG.taint_key
    for other in ("reservation", "spot", "dws"):
        assert taints(kube, other) == [ADMIN_TAINT]
    reasons = {c[2]["reason"] for c in kube.calls if c[0] == "POST"}
    assert reasons == {"RungStockOut", "EvictedFromRung"}
    text = metrics.text()
    assert 'tpu_fallback_rung_closed{rung="onDemand"} 1' in text
    assert 'tpu_fallback_rung_closed{rung="spot"} 0' in text
    assert 'tpu_fallback_rung_closes_total{rung="onDemand"} 1' in text
    assert "tpu_fallback_plan_a" not in text and 'rung="flexStart"} 0' in text  # moves up to it: counted


def test_the_sweep_reopens_each_rung_whose_cool_down_passed() -> None:
    kube = ladder_cluster()
    for name, at in (("on-demand", T0), ("spot", T0 + 1000)):
        kube.objects[f"{FLAVORS}/{name}"]["spec"]["nodeTaints"].append(
            {"key": CONFIG.taint_key, "value": str(int(at)), "effect": "NoSchedule"})
    metrics = Metrics()
    controller = Controller(kube, Settings(CONFIG, poll_interval=0.01), metrics)  # type: ignore[arg-type]
    assert controller.sweep(now=T0 + 1800) == ["on-demand"]
    assert taints(kube, "on-demand") == [ADMIN_TAINT] and taints(kube, "spot")[-1]["key"] == CONFIG.taint_key
    assert metrics.values['tpu_fallback_rung_reopens_total{rung="onDemand"}'] == 1
    assert metrics.values['tpu_fallback_rung_reopens_total{rung="spot"}'] == 0


def test_two_plans_keep_todays_metric_names_and_no_rung_series() -> None:
    from tests.test_fallback import CONFIG as TWO_PLANS

    metrics = Metrics()
    Controller(FakeKube({}), Settings(TWO_PLANS, poll_interval=0.01), metrics)  # type: ignore[arg-type]
    text = metrics.text()
    assert "tpu_fallback_plan_a_closed 0" in text and "tpu_fallback_moves_to_plan_a_total 0" in text
    assert "rung" not in text


def test_a_running_job_that_lost_its_nodes_and_gets_no_capacity_closes_its_rung_and_is_requeued() -> None:
    """A Spot preemption: the job ran, its replacement pods are unschedulable and GKE says no capacity."""
    preempted = workload("job-1", "spot", admitted_since=T0, pods_started=True, pods_unschedulable=True,
                         stockout_event=T0 + 900)
    close, evict = d.decide(CONFIG, snap(T0 + 901, [preempted]))
    assert isinstance(close, d.ClosePlanA) and close.rung == "spot" and "lost their nodes" in close.why
    assert isinstance(evict, d.Evict) and evict.name == "job-1"
    # Without GKE's word it waits for the autoscaler (no backstop for a job that ran), and on two plans as before.
    waiting = workload("job-1", "spot", admitted_since=T0, pods_started=True, pods_unschedulable=True)
    assert d.decide(CONFIG, snap(T0 + 10_000, [waiting])) == []
    from tests.test_fallback import CONFIG as TWO_PLANS
    from tests.test_fallback import snap as two_plan_snap

    on_plan_a = workload("job-1", "on-demand", admitted_since=T0, pods_started=True, pods_unschedulable=True,
                         stockout_event=T0 + 900)
    assert d.decide(TWO_PLANS, two_plan_snap(T0 + 901, [on_plan_a])) == []


@pytest.mark.parametrize("in_flight", [
    {"active": False, "annotations": {d.MOVING_ANNOTATION: "2026-12-01T10:00:00Z to reservation"}},
    {"active": True, "annotations": {d.MOVED_ANNOTATION: "2026-12-01T10:00:00Z to reservation"}},
])
def test_no_second_move_goes_to_a_flavor_a_move_is_under_way_to(in_flight: dict[str, Any]) -> None:
    """While the first mover is released and not yet admitted there, the target's quota shows free."""
    mover = waiting_on_dws("first", created=T0, quota_reserved=False, tpu_flavor=None, **in_flight)
    second = waiting_on_dws("second", created=T0 + 1)
    actions = d.decide(CONFIG, snap(T0 + 5, [mover, second], nodes=[node("reservation-pool"), node("spot-pool")],
                                    free={"on-demand": FULL}))
    assert [(a.name, a.target) for a in of(d.Deactivate, actions)] == [("second", "spot")]


@pytest.mark.parametrize("reserved", [False, True])
def test_a_move_up_on_a_ladder_is_two_patches_with_the_ladders_events_and_counted_on_its_target_rung(
        reserved: bool) -> None:
    """To a rung with a Ready node; or, `reserved`, to a reservation's rung whose pool has no node at all."""
    kube = ladder_cluster()
    waiting = owned("job-2")  # reserved on dws (its Workload as Kueue keeps it), DWS not provisioned
    assignment = waiting["status"]["admission"]["podSetAssignments"][1]
    assignment["flavors"] = {k: "dws" for k in assignment["flavors"]}
    waiting["status"]["conditions"] = [c for c in waiting["status"]["conditions"] if c["type"] == "QuotaReserved"]
    waiting["metadata"]["resourceVersion"] = "77"
    kube.objects["/apis/kueue.x-k8s.io/v1beta2/workloads"] = [waiting]
    kube.objects["/api/v1/pods"] = []
    node = {"metadata": {"name": "n1", "labels": {POOL: "reservation-pool"},
                         "creationTimestamp": "2026-12-01T09:00:00Z"},
            "status": {"allocatable": {"google.com/tpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}}
    kube.objects["/api/v1/nodes"] = [] if reserved else [node]
    cq = {"metadata": {"name": "cluster-queue"}, "spec": {"resourceGroups": [{"flavors": [
        {"name": f, "resources": [{"name": "cpu", "nominalQuota": "40"}, {"name": "memory", "nominalQuota": "75Gi"},
                                  {"name": "google.com/tpu", "nominalQuota": "16"}]} for f in POOLS]}]}}
    kube.objects["/apis/kueue.x-k8s.io/v1beta2/clusterqueues"] = [cq]
    if reserved:  # without the flag nothing moves to a pool without a Ready node
        unflagged = Controller(kube, Settings(CONFIG, poll_interval=0.01), Metrics())  # type: ignore[arg-type]
        assert unflagged.reconcile(now=parse_now("2026-12-01T10:01:00Z")) == []
    metrics = Metrics()
    controller = Controller(kube, Settings(RESERVED if reserved else CONFIG, poll_interval=0.01),  # type: ignore[arg-type]
                            metrics)
    (move,) = controller.reconcile(now=parse_now("2026-12-01T10:01:00Z"))
    assert isinstance(move, d.Deactivate) and (move.target, move.rung) == ("reservation", "reservation")
    (patch,) = [c for c in kube.calls if c[0] == "PATCH"]
    assert patch[2]["spec"] == {"active": False} and patch[2]["metadata"]["resourceVersion"] == "77"
    assert patch[2]["metadata"]["annotations"][d.MOVING_ANNOTATION].endswith(" to reservation")
    # Kueue released it: the second half, counted on the target rung.
    waiting["spec"]["active"] = False
    waiting["status"] = {"conditions": []}
    waiting["metadata"]["annotations"] = dict(patch[2]["metadata"]["annotations"])
    (again,) = controller.reconcile(now=parse_now("2026-12-01T10:01:05Z"))
    assert isinstance(again, d.Reactivate) and again.rung == "reservation"
    reasons = [c[2]["reason"] for c in kube.calls if c[0] == "POST"]
    assert reasons == ["MovingUp", "MovedUp"]
    assert metrics.values['tpu_fallback_moves_up_total{rung="reservation"}'] == 1
    assert metrics.values['tpu_fallback_moves_up_total{rung="onDemand"}'] == 0
