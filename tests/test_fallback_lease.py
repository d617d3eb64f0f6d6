"""The controller's Lease (tpu_fallback/fallback/lease.py) on a fake API that keeps resourceVersions as the API
server does (a write with a stale one answers 409), with the clocks in the test's hands: no thread, no sleep.

Two controller processes against a real API server: tests/e2e/test_fallback_operations_e2e.py."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from tpu_fallback.fallback.kube import KubeError
from tpu_fallback.fallback.lease import DURATION, Lease, LeaseRef, live, micro_time, parse_micro_time

REF = LeaseRef("kueue-system", "tpu-fallback-controller")
T0 = 1_764_583_200.0  # 2025-12-01T10:00:00Z


class LeaseServer:
    """Objects by path, each write bumping its resourceVersion; a replace with another one answers 409, a create
    of what exists 409, a get of what does not 404. `failing` makes every call raise (the API unreachable)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.writes: list[tuple[str, str]] = []  # (verb, holderIdentity written)
        self.failing: Exception | None = None
        self.before_replace: list[Any] = []  # callables run once, just before the next replace lands

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def get(self, path: str) -> Any:
        if self.failing:
            raise self.failing
        if path not in self.objects:
            raise KubeError(404, "GET", path, "not found")
        return copy.deepcopy(self.objects[path])

    def create(self, path: str, obj: Any) -> Any:
        if self.failing:
            raise self.failing
        target = f"{path}/{obj['metadata']['name']}"
        if target in self.objects:
            raise KubeError(409, "POST", path, "already exists")
        self.objects[target] = self._bump(copy.deepcopy(obj))
        self.writes.append(("create", obj["spec"]["holderIdentity"]))
        return obj

    def replace(self, path: str, obj: Any) -> Any:
        while self.before_replace:
            self.before_replace.pop(0)()
        if self.failing:
            raise self.failing
        if obj["metadata"].get("resourceVersion") != self.objects[path]["metadata"]["resourceVersion"]:
            raise KubeError(409, "PUT", path, "the object has been modified")
        self.objects[path] = self._bump(copy.deepcopy(obj))
        self.writes.append(("update", obj["spec"]["holderIdentity"]))
        return obj

    def spec(self) -> dict[str, Any]:
        return dict(self.objects[REF.path]["spec"])


class Clocks:
    def __init__(self) -> None:
        self.wall, self.mono = T0, 100.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def replica(api: LeaseServer, clocks: Clocks, holder: str) -> Lease:
    return Lease(api, REF, holder, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono)


def test_the_first_replica_takes_the_lease_and_a_second_waits_while_it_is_renewed() -> None:
    api, clocks = LeaseServer(), Clocks()
    a, b = replica(api, clocks, "pod-a"), replica(api, clocks, "pod-b")
    assert a.try_acquire_or_renew() and a.held
    spec = api.spec()
    assert spec["holderIdentity"] == "pod-a" and spec["leaseDurationSeconds"] == DURATION
    assert spec["renewTime"] == micro_time(T0) == "2025-12-01T10:00:00.000000Z" and spec["leaseTransitions"] == 0
    for _ in range(20):  # 40 s of renewals every 2 s: b never gets it
        clocks.advance(2)
        assert a.renew() is None
        assert not b.try_acquire_or_renew() and b.other_holder == "pod-a"
    assert [w for w in api.writes if w[1] == "pod-b"] == []
    assert api.spec()["acquireTime"] == micro_time(T0)  # renewals keep the acquire time


def test_a_holder_that_stops_renewing_is_replaced_one_lease_duration_after_its_last_renewal_was_seen() -> None:
    api, clocks = LeaseServer(), Clocks()
    a, b = replica(api, clocks, "pod-a"), replica(api, clocks, "pod-b")
    a.try_acquire_or_renew()
    clocks.advance(2)
    a.renew()
    assert not b.try_acquire_or_renew()  # b sees the renewal now
    clocks.advance(DURATION - 0.5)  # a is gone (killed): no more renewals
    assert not b.try_acquire_or_renew() and not b.held
    clocks.advance(1)
    assert b.try_acquire_or_renew() and b.held
    spec = api.spec()
    assert spec["holderIdentity"] == "pod-b" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == micro_time(clocks.wall)
    # a comes back (it was only cut off): its renewal finds b holding it and it stops at once
    assert a.renew() == "pod-b holds it now" and not a.held


def test_expiry_is_judged_on_the_observers_clock_not_the_holders_stamps() -> None:
    """A renewTime far in the past (the holder's clock behind) does not let a newcomer in early: it waits a full
    duration from when it first saw the record, as client-go does."""
    api, clocks = LeaseServer(), Clocks()
    a = replica(api, clocks, "pod-a")
    a.try_acquire_or_renew()
    api.objects[REF.path]["spec"]["renewTime"] = micro_time(T0 - 3600)
    newcomer = replica(api, clocks, "pod-b")
    assert not newcomer.try_acquire_or_renew()
    clocks.advance(DURATION - 1)
    assert not newcomer.try_acquire_or_renew()
    clocks.advance(1)
    assert newcomer.try_acquire_or_renew()


def test_the_same_pod_restarted_takes_its_lease_back_at_once() -> None:
    """holderIdentity is the pod's name: a container restart (a crash, an OOM kill) in the same pod is the same
    holder and need not wait for its own lease to expire."""
    api, clocks = LeaseServer(), Clocks()
    replica(api, clocks, "pod-a").try_acquire_or_renew()
    clocks.advance(1)
    again = replica(api, clocks, "pod-a")
    assert again.try_acquire_or_renew()
    assert api.spec()["leaseTransitions"] == 0 and api.spec()["acquireTime"] == micro_time(T0)


def test_two_replicas_racing_for_a_free_lease_one_wins_the_other_gets_a_conflict() -> None:
    api, clocks = LeaseServer(), Clocks()
    a, b = replica(api, clocks, "pod-a"), replica(api, clocks, "pod-b")
    a.try_acquire_or_renew()
    assert a.release()  # free now
    # b reads the free Lease; a takes it back before b's write lands: b's write carries a stale resourceVersion
    order: list[str] = []

    def a_first() -> None:
        order.append("a")
        assert a.try_acquire_or_renew()

    api.before_replace.append(a_first)
    assert not b.try_acquire_or_renew() and not b.held
    assert order == ["a"] and api.spec()["holderIdentity"] == "pod-a"
    # and a race to create it: the second create answers 409
    api2 = LeaseServer()
    c, d = replica(api2, clocks, "pod-c"), replica(api2, clocks, "pod-d")
    assert c.try_acquire_or_renew() and not d.try_acquire_or_renew()


def test_renewals_that_fail_are_tolerated_until_the_renew_deadline_then_the_lease_is_lost() -> None:
    api, clocks = LeaseServer(), Clocks()
    a = replica(api, clocks, "pod-a")
    a.try_acquire_or_renew()
    api.failing = OSError("connection refused")
    for _ in range(4):  # 8 s of failures: within the 10 s deadline
        clocks.advance(2)
        assert a.renew() is None and a.held
    clocks.advance(2)
    why = a.renew()
    assert why is not None and "not renewed for 10s" in why and "connection refused" in why and not a.held
    assert a.renew_deadline < DURATION  # it stops before another replica may take over


def test_a_released_lease_is_free_at_once_and_not_live() -> None:
    api, clocks = LeaseServer(), Clocks()
    a, b = replica(api, clocks, "pod-a"), replica(api, clocks, "pod-b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release() and not a.held
    assert api.spec()["holderIdentity"] == "" and not live(api.spec(), clocks.wall)
    assert b.try_acquire_or_renew()  # no wait for the expiry
    assert not a.release()  # not ours any more: nothing written
    assert api.spec()["holderIdentity"] == "pod-b"


def test_live_means_renewed_within_its_duration_by_the_wall_clock() -> None:
    spec = {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "renewTime": micro_time(T0)}
    assert live(spec, T0 + 14.9) and not live(spec, T0 + 15)
    assert not live({**spec, "holderIdentity": ""}, T0) and not live({**spec, "renewTime": None}, T0)
    assert parse_micro_time("2025-12-01T10:00:00Z") == T0 == parse_micro_time("2025-12-01T10:00:00.000000Z")


def test_keep_renews_until_done_and_reports_a_lost_lease_once() -> None:
    api, clocks = LeaseServer(), Clocks()
    a = Lease(api, REF, "pod-a", clock=lambda: clocks.wall, monotonic=lambda: clocks.mono, renew_every=0.001,
              renew_deadline=0.0)
    a.try_acquire_or_renew()
    api.objects[REF.path]["spec"]["holderIdentity"] = "pod-b"  # someone else took it
    lost: list[str] = []
    a.keep(threading.Event(), lost.append)
    assert lost == ["pod-b holds it now"] and not a.held
    done = threading.Event()
    done.set()
    b = replica(api, clocks, "pod-b")
    b.keep(done, lost.append)  # done at once: no renewal, nothing lost
    assert lost == ["pod-b holds it now"]


def test_the_lease_is_named_by_the_config_or_the_deployment() -> None:
    assert LeaseRef.from_config({"lease": {"namespace": "ns", "name": "l", "durationSeconds": 20}}, None) == \
        LeaseRef("ns", "l", 20)
    assert LeaseRef.from_config({}, "kueue-system/tpu-fallback-controller") == REF
    assert LeaseRef.from_config({}, None) is None
    with pytest.raises(ValueError, match="durationSeconds"):
        LeaseRef.from_config({"lease": {"namespace": "ns", "name": "l", "durationSeconds": 1}}, None)
    with pytest.raises(ValueError, match="shorter than the lease"):
        Lease(LeaseServer(), LeaseRef("ns", "l", 5), "x")
