"""The fallback controller's informers (tpu_fallback/fallback/watch.py) and the view that reads the cluster from them
(controller.WatchingView), against an in-process fake API: no TLS, no thread, no clock (each test drives
`Informer.step()` itself). Kube's WATCH over a real TLS connection: the last tests.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import infra
from tests.test_fallback import (
    ADMIN_TAINT,
    CONFIG,
    FLAVORS,
    OUT_OF_RESOURCES,
    POOL,
    event,
    kueue_workload,
    owned,
    pod,
    ray_cluster,
    taints,
)
from tests.test_fallback import FakeKube as _FakeKube
from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback import watch
from tpu_fallback.fallback.config import Settings
from tpu_fallback.fallback.controller import Controller
from tpu_fallback.fallback.kube import KubeError
from tpu_fallback.fallback.metrics import Metrics
from tpu_fallback.fallback.read import (
    ACTIVE_PODS,
    CLUSTER_QUEUES,
    PROVISIONING_REQUESTS,
    RAY_CLUSTERS,
    WORKLOADS,
    build_snapshot,
    nodes_path,
    scale_up_events_path,
)
from tpu_fallback.fallback.view import ListingView, NotSyncedError, WatchingView
from tpu_fallback.render import fallback as render

Obj = dict[str, Any]
PATH = "/apis/kueue.x-k8s.io/v1beta2/workloads"


def obj(name: str, rv: str, namespace: str = "default", **extra: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv}, **extra}


def bookmark(rv: str) -> tuple[str, Obj]:
    return "BOOKMARK", {"metadata": {"resourceVersion": rv}}


class FakeStream:
    """A scripted WATCH answer: events, then the end (the server's timeout); an exception in the script is raised
    where it stands (a connection dropped mid-stream)."""

    def __init__(self, script: list[tuple[str, Obj] | Exception]) -> None:
        self.script = script
        self.closed = False

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        for item in self.script:
            if isinstance(item, Exception):
                raise item
            yield item

    def interrupt(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeApi:
    """Collections by path (with their query): LISTs answer them at `version`, in pages of the limit asked for;
    each WATCH of a path plays the next script queued for it (none left: a watch that ends at once). Failures are
    queued per (verb, path), one per request (None: that one answers). Also answers `list(path)`, as Kube does,
    for a ListingView of the same cluster."""

    def __init__(self, collections: dict[str, list[Obj]] | None = None, version: str = "100") -> None:
        self.collections = collections or {}
        self.version = version
        self.scripts: dict[str, list[list[tuple[str, Obj] | Exception]]] = {}
        self.failures: dict[tuple[str, str], list[Exception | None]] = {}
        self.calls: list[tuple[str, str, str | None]] = []  # (verb, path, resourceVersion)
        self.streams: list[FakeStream] = []

    def _fail(self, verb: str, path: str) -> None:
        queued = self.failures.get((verb, path))
        failure = queued.pop(0) if queued else None
        if failure is not None:
            raise failure

    def list_pages(self, path: str, limit: int) -> Iterator[tuple[list[Obj], str]]:
        items = copy.deepcopy(self.collections.get(path, []))
        for start in range(0, max(len(items), 1), limit):
            self.calls.append(("LIST", path, None))
            self._fail("LIST", path)
            yield items[start:start + limit], self.version

    def list(self, path: str) -> list[Obj]:
        return [o for page, _ in self.list_pages(path, 10**9) for o in page]

    def watch(self, path: str, resource_version: str, timeout_seconds: int) -> FakeStream:
        self.calls.append(("WATCH", path, resource_version))
        self._fail("WATCH", path)
        queued = self.scripts.get(path) or []
        stream = FakeStream(copy.deepcopy(queued.pop(0)) if queued else [])
        self.streams.append(stream)
        return stream


class Highest(random.Random):
    """Draws the top of every range: the back-off's full delay."""

    def uniform(self, a: float, b: float) -> float:
        return b


def backed_off(delay: float, full: float) -> bool:
    """A jittered back-off of `full` seconds: between half of it and all of it."""
    return full / 2 <= delay <= full


def names(informer: watch.Informer) -> list[str]:
    return [o["metadata"]["name"] for o in informer.items()]


# --- the informer ---------------------------------------------------------------------------------------------------


def test_a_list_then_watch_events_are_applied_and_a_bookmark_moves_the_resource_version() -> None:
    api = FakeApi({PATH: [obj("a", "10"), obj("b", "11")]}, version="12")
    api.scripts[PATH] = [[("ADDED", obj("c", "13")), ("MODIFIED", obj("a", "14", spec={"active": False})),
                          ("DELETED", obj("b", "15")), bookmark("20")]]
    counted: list[str] = []
    informer = watch.Informer(api, PATH, count=counted.append)
    assert not informer.synced and informer.items() == []
    assert informer.step() == 0 and informer.synced and informer.resource_version == "12"
    assert names(informer) == ["a", "b"] and informer.changed.is_set()
    informer.changed.clear()
    assert informer.step() == 0
    assert api.calls[-1] == ("WATCH", PATH, "12")
    assert names(informer) == ["a", "c"]
    assert informer.items()[0]["spec"] == {"active": False}
    assert informer.resource_version == "20"  # the bookmark's, past the last event's 15
    assert informer.changed.is_set() and api.streams[-1].closed
    assert (informer.lists, informer.events, informer.errors) == (1, 3, 0)
    assert counted == ["lists", "events", "events", "events"]


def test_a_bookmark_alone_changes_nothing_the_loop_would_read() -> None:
    api = FakeApi({PATH: [obj("a", "10")]}, version="10")
    api.scripts[PATH] = [[bookmark("30")]]
    informer = watch.Informer(api, PATH)
    informer.step()
    informer.changed.clear()
    informer.step()
    assert informer.resource_version == "30" and not informer.changed.is_set() and informer.events == 0


def test_a_watch_that_ends_is_opened_again_from_the_last_resource_version_without_a_list() -> None:
    api = FakeApi({PATH: [obj("a", "10")]}, version="10")
    api.scripts[PATH] = [[("ADDED", obj("b", "11"))], [bookmark("17")], [("MODIFIED", obj("b", "18"))]]
    informer = watch.Informer(api, PATH)
    for _ in range(4):
        assert informer.step() == 0
    assert [c for c in api.calls] == [("LIST", PATH, None), ("WATCH", PATH, "10"), ("WATCH", PATH, "11"),
                                      ("WATCH", PATH, "17")]
    assert informer.resource_version == "18" and informer.lists == 1


def test_a_watch_broken_in_the_middle_keeps_what_it_applied_and_resumes_after_it() -> None:
    api = FakeApi({PATH: []}, version="10")
    api.scripts[PATH] = [[("ADDED", obj("a", "11")), ConnectionResetError("reset by peer")]]
    informer = watch.Informer(api, PATH)
    informer.step()
    delay = informer.step()
    assert backed_off(delay, watch.RETRY_FIRST) and names(informer) == ["a"]
    assert informer.error == "ConnectionResetError: reset by peer" and informer.errors == 1
    informer.step()
    assert api.calls[-1] == ("WATCH", PATH, "11") and informer.error is None


@pytest.mark.parametrize("gone", ["ERROR event", "HTTP 410"])
def test_410_gone_lists_again_and_the_new_list_replaces_the_store(gone: str) -> None:
    api = FakeApi({PATH: [obj("a", "10"), obj("b", "10")]}, version="10")
    if gone == "ERROR event":
        api.scripts[PATH] = [[("ADDED", obj("c", "11")), ("ERROR", {"kind": "Status", "code": 410,
                                                                      "reason": "Expired",
                                                                      "message": "too old resource version"})]]
    else:
        api.failures[("WATCH", PATH)] = [KubeError(410, "WATCH", PATH, "too old resource version")]
    informer = watch.Informer(api, PATH)
    informer.step()
    api.collections[PATH] = [obj("b", "40"), obj("d", "41")]  # what happened while the watch was behind
    api.version = "42"
    assert informer.step() == 0 and informer.resource_version is None and informer.error is None
    informer.step()
    assert [c[0] for c in api.calls] == ["LIST", "WATCH", "LIST"]
    assert names(informer) == ["b", "d"] and informer.resource_version == "42" and informer.lists == 2


def test_a_list_comes_in_pages_and_an_expired_continue_token_starts_it_over() -> None:
    api = FakeApi({PATH: [obj(name, "1") for name in "abcde"]}, version="9")
    api.failures[("LIST", PATH)] = [None, KubeError(410, "GET", PATH, "the continue token is too old")]
    informer = watch.Informer(api, PATH, page_size=2)
    assert informer.step() == 0 and not informer.synced and informer.items() == []  # the half list is not kept
    assert informer.resource_version is None and informer.error is None
    assert informer.step() == 0 and informer.synced and informer.resource_version == "9"
    assert names(informer) == ["a", "b", "c", "d", "e"] and informer.lists == 1
    assert [c[0] for c in api.calls] == ["LIST"] * 5  # two pages, then three


def test_a_failing_list_is_retried_with_a_growing_back_off_and_its_error_stays_visible_until_it_works() -> None:
    api = FakeApi({PATH: [obj("a", "10")]})
    api.failures[("LIST", PATH)] = [KubeError(403, "GET", PATH, "forbidden"), TimeoutError("timed out")]
    counted: list[str] = []
    informer = watch.Informer(api, PATH, count=counted.append)
    assert backed_off(informer.step(), watch.RETRY_FIRST)
    assert not informer.synced and informer.error is not None and "HTTP 403" in informer.error
    assert informer.failing_for() > 0
    assert backed_off(informer.step(), 2 * watch.RETRY_FIRST) and informer.error == "TimeoutError: timed out"
    assert informer.step() == 0 and informer.synced and informer.error is None and informer.failing_for() == 0
    assert names(informer) == ["a"] and informer.errors == 2 and counted == ["errors", "errors", "lists"]


def test_the_back_off_is_capped() -> None:
    api = FakeApi()
    api.failures[("LIST", PATH)] = [OSError("refused")] * 20
    informer = watch.Informer(api, PATH, rng=Highest())
    delays = [informer.step() for _ in range(20)]
    assert delays[-1] == watch.RETRY_MAX and delays == sorted(delays)
    assert delays[:3] == [watch.RETRY_FIRST, 2 * watch.RETRY_FIRST, 4 * watch.RETRY_FIRST]


def test_informers_failing_together_retry_apart() -> None:
    """The back-off is drawn between half the delay and all of it: two informers failing at the same moment (the
    API server restarting) do not come back at the same moment, and never sooner than half the delay."""
    api = FakeApi()
    api.failures[("LIST", PATH)] = [OSError("refused")] * 40
    one, two = watch.Informer(api, PATH, rng=random.Random(1)), watch.Informer(api, PATH, rng=random.Random(2))
    firsts = [(one.step(), two.step()) for _ in range(8)]
    assert all(a != b for a, b in firsts), firsts
    expected = [min(watch.RETRY_MAX, watch.RETRY_FIRST * 2 ** i) for i in range(8)]
    assert all(backed_off(a, e) and backed_off(b, e) for (a, b), e in zip(firsts, expected, strict=True)), firsts


def test_each_watch_asks_for_its_own_timeout_and_event_watches_end_before_a_read_times_out() -> None:
    """Watches end at timeoutSeconds drawn per watch (informers started together drift apart); a kind served
    without bookmarks (Events) asks for one shorter than the read timeout, so only a stalled watch times out."""
    from tpu_fallback.fallback.kube import WATCH_READ_TIMEOUT

    events = scale_up_events_path("FailedScaleUp")
    api = FakeApi({PATH: [], events: []})
    asked: dict[str, list[int]] = {PATH: [], events: []}
    plain_watch = api.watch

    def watching(path: str, resource_version: str, timeout_seconds: int) -> FakeStream:
        asked[path].append(timeout_seconds)
        return plain_watch(path, resource_version, timeout_seconds)

    api.watch = watching  # type: ignore[method-assign]
    for path in (PATH, events):
        informer = watch.Informer(api, path, rng=random.Random(7))
        for _ in range(12):
            informer.step()
    low, high = watch.WATCH_SECONDS_RANGE
    assert all(low <= s <= high for s in asked[PATH]) and len(set(asked[PATH])) > 1, asked
    assert high > WATCH_READ_TIMEOUT  # cached kinds rely on the bookmarks the server sends about every minute
    assert all(s < WATCH_READ_TIMEOUT for s in asked[events]) and len(set(asked[events])) > 1, asked
    assert watch.watch_seconds_range("/apis/events.k8s.io/v1/namespaces/x/events?fieldSelector=a") == \
        watch.UNCACHED_WATCH_SECONDS_RANGE
    assert watch.Informer(api, PATH, watch_seconds=7).watch_seconds == 7  # a fixed one for tests


def test_a_stalled_watch_is_a_failure_said_as_such_and_it_resumes_where_it_was() -> None:
    api = FakeApi({PATH: []}, version="10")
    api.scripts[PATH] = [[("ADDED", obj("a", "11")), TimeoutError("timed out")]]
    informer = watch.Informer(api, PATH)
    informer.step()
    assert backed_off(informer.step(), watch.RETRY_FIRST)
    assert informer.error is not None and "the watch stalled" in informer.error and informer.errors == 1
    informer.step()
    assert api.calls[-1] == ("WATCH", PATH, "11") and informer.error is None and names(informer) == ["a"]


def test_an_error_event_other_than_410_is_a_failure_and_the_watch_resumes_where_it_was() -> None:
    api = FakeApi({PATH: []}, version="10")
    api.scripts[PATH] = [[("ERROR", {"kind": "Status", "code": 500, "message": "internal error"})]]
    informer = watch.Informer(api, PATH)
    informer.step()
    assert backed_off(informer.step(), watch.RETRY_FIRST) and "internal error" in (informer.error or "")
    informer.step()
    assert api.calls[-1] == ("WATCH", PATH, "10")


def test_an_api_that_is_not_served_reads_as_empty_and_is_listed_again_now_and_then() -> None:
    api = FakeApi()
    api.failures[("LIST", RAY_CLUSTERS)] = [KubeError(404, "GET", RAY_CLUSTERS, "not found")]
    informer = watch.Informer(api, RAY_CLUSTERS, optional=True)
    assert informer.step() == watch.NOT_SERVED_RETRY
    assert informer.synced and not informer.served and informer.items() == [] and informer.error is None
    api.collections[RAY_CLUSTERS] = [ray_cluster("job-1")]  # KubeRay installed meanwhile
    assert informer.step() == 0 and informer.served and names(informer) == ["job-1-x7k2p"]
    required = watch.Informer(api, WORKLOADS)
    api.failures[("LIST", WORKLOADS)] = [KubeError(404, "GET", WORKLOADS, "not found")]
    assert backed_off(required.step(), watch.RETRY_FIRST) and not required.synced  # a kind the controller needs


def test_a_watch_that_ends_without_a_word_is_opened_again_after_a_pause_not_at_once() -> None:
    api = FakeApi({PATH: []})
    informer = watch.Informer(api, PATH)
    informer.step()
    assert informer.step() == watch.EMPTY_WATCH_PAUSE


def test_objects_are_stored_as_the_transform_slims_them() -> None:
    api = FakeApi({PATH: [obj("a", "1", spec={"podSets": ["big"], "active": True})]})
    api.scripts[PATH] = [[("MODIFIED", obj("a", "2", spec={"podSets": ["big"], "active": False}))]]

    def slim(o: Obj) -> Obj:
        return {"metadata": o["metadata"], "spec": {"active": o["spec"]["active"]}}

    informer = watch.Informer(api, PATH, transform=slim)
    informer.step()
    assert informer.items()[0]["spec"] == {"active": True}
    informer.step()
    assert informer.items()[0]["spec"] == {"active": False}


def test_a_bad_object_is_an_error_not_a_dead_thread() -> None:
    api = FakeApi({PATH: []})
    api.scripts[PATH] = [[("ADDED", {"metadata": {}})]]  # no name
    informer = watch.Informer(api, PATH)
    informer.step()
    assert backed_off(informer.step(), watch.RETRY_FIRST) and informer.error == "KeyError: 'name'"


def test_the_thread_follows_the_kind_and_stops_when_told() -> None:
    """The thread repeats step(); no timing: it is stopped from inside the fake once the second watch opened."""
    api = FakeApi({PATH: [obj("a", "10")]}, version="10")
    api.scripts[PATH] = [[("ADDED", obj("b", "11"))]]
    informer = watch.Informer(api, PATH)
    second_watch = threading.Event()
    plain_watch = api.watch

    def watching(path: str, resource_version: str, timeout_seconds: int) -> FakeStream:
        stream = plain_watch(path, resource_version, timeout_seconds)
        if resource_version == "11":
            informer.stop(timeout=0)
            second_watch.set()
        return stream

    api.watch = watching  # type: ignore[method-assign]
    informer.start()
    assert second_watch.wait(30)
    informer.stop()
    assert names(informer) == ["a", "b"]
    with pytest.raises(RuntimeError, match="stopped"):
        informer.start()


# --- the view the controller reads ------------------------------------------------------------------------------------

NODE_SELECTOR = "cloud.google.com/gke-nodepool in (on-demand-pool,on-demand-2-pool)"


def managed(o: Obj) -> Obj:
    """With what the API server adds that the controller never reads (the informers drop it)."""
    o = copy.deepcopy(o)
    o["metadata"]["managedFields"] = [{"manager": "kueue", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    return o


def cluster() -> dict[str, list[Obj]]:
    """Every collection the controller reads, by path: a job stuck on plan A with GKE's no-capacity Event, a Ready
    plan A node, a ClusterQueue, a Provisioned request."""
    flavors = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                "metadata": {"name": name, "resourceVersion": "7"},
                "spec": {"nodeLabels": {POOL: f"{name}-pool"}, "nodeTaints": [dict(ADMIN_TAINT)]}}
               for name in ("on-demand", "on-demand-2", "dws")]
    stuck = owned("job-1")
    stuck["metadata"]["resourceVersion"] = "42"
    stuck["spec"]["podSets"] = [{"name": "workers", "count": 4, "template": {"spec": {"containers": [
        {"name": "ray-worker", "image": "rayproject/ray:2.41.0", "args": ["x" * 2000]}]}}}]
    waiting = owned("job-2")
    waiting["metadata"].update(name="rayjob-job-2-fghij", resourceVersion="43")
    waiting["status"]["admissionChecks"] = [{"name": "dws-prov", "state": "Pending"}]
    booked = owned("job-3")  # its capacity arrived: the admission check says so, no ProvisioningRequest seen
    booked["metadata"].update(name="rayjob-job-3-klmno", resourceVersion="44")
    booked["status"]["admissionChecks"] = [{"name": "dws-prov", "state": "Ready"}]
    booked["spec"]["active"] = False
    node = {"metadata": {"name": "gke-on-demand-1", "creationTimestamp": "2026-12-01T09:00:00Z",
                         "labels": {POOL: "on-demand-pool"}},
            "spec": {"providerID": "kwok://x"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "images": [{"names": ["rayproject/ray:2.41.0"], "sizeBytes": 10**9}] * 50}}
    queue = {"metadata": {"name": "cluster-queue"}, "spec": {"resourceGroups": [
        {"coveredResources": ["cpu", "memory", "google.com/tpu"], "flavors": [
            {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "40"},
                                                {"name": "memory", "nominalQuota": "75Gi"},
                                                {"name": "google.com/tpu", "nominalQuota": "16"}]}]}]},
        "status": {"flavorsReservation": [{"name": "on-demand", "resources": [
            {"name": "cpu", "total": "32"}, {"name": "memory", "total": "64Gi"},
            {"name": "google.com/tpu", "total": "16"}]}]}}
    request = {"metadata": {"name": "rayjob-job-2-fghij-dws-prov-1", "namespace": "default",
                            "ownerReferences": [{"kind": "Workload", "name": "rayjob-job-2-fghij"}]},
               "spec": {"podSets": [{"count": 4}]},
               "status": {"conditions": [{"type": "Provisioned", "status": "True"}]}}
    no_capacity = event("job-1-worker-a", "FailedScaleUp", OUT_OF_RESOURCES)
    no_capacity["metadata"] = {"name": "job-1-worker-a.18c1d2e3f4", "namespace": "default"}
    worker = pod("job-1-worker-a", "job-1")
    worker["spec"]["containers"] = [{"name": "ray-worker", "image": "rayproject/ray:2.41.0",
                                     "resources": {"requests": {"google.com/tpu": "4"}}}]
    return {path: [managed(o) for o in objects] for path, objects in {
        FLAVORS: flavors, WORKLOADS: [stuck, waiting, booked], nodes_path(NODE_SELECTOR): [node],
        CLUSTER_QUEUES: [queue], PROVISIONING_REQUESTS: [request], ACTIVE_PODS: [worker],
        scale_up_events_path("FailedScaleUp"): [no_capacity],
        scale_up_events_path("NotTriggerScaleUp"): [],
        scale_up_events_path("TriggeredScaleUp"): [],
        RAY_CLUSTERS: [ray_cluster("job-1"), ray_cluster("job-2")],
    }.items()}


def synced_view(api: FakeApi, metrics: Metrics | None = None, **kw: Any) -> WatchingView:
    view = WatchingView(None, metrics, NODE_SELECTOR, transport=lambda: api, **kw)
    for informer in view.informers.values():
        informer.step()
    return view


NOW = 1_764_583_240.0  # 2026-12-01T10:00:40Z, 8 s after the FailedScaleUp Event


def test_the_watching_view_reads_what_listing_every_kind_reads_from_slimmed_objects() -> None:
    api = FakeApi(cluster())
    listed = ListingView(api, NODE_SELECTOR).snapshot(CONFIG, NOW)  # type: ignore[arg-type]
    watched = synced_view(api).snapshot(CONFIG, NOW)
    assert watched == listed
    (stuck, waiting, booked) = watched.workloads  # the facts decisions hang on: the equality is not of nothing
    assert stuck.pods_unschedulable and stuck.stockout_event is not None and stuck.resource_version == "42"
    assert waiting.capacity_arrived and booked.capacity_arrived and not stuck.capacity_arrived
    assert waiting.active and not booked.active and watched.nodes[0].ready and watched.free["cluster-queue"]
    assert [type(a).__name__ for a in d.decide(CONFIG, watched)] == ["ClosePlanA", "Evict"]


def test_the_informers_keep_no_managed_fields_pod_templates_or_node_images() -> None:
    view = synced_view(FakeApi(cluster()))
    stored = json.dumps({name: i.items() for name, i in view.informers.items()})
    assert "managedFields" not in stored and "x" * 2000 not in stored and "sizeBytes" not in stored
    # Of pod templates and containers, only their resources are kept (what the evidence and the moves need).
    assert "rayproject/ray" not in stored and '"image"' not in stored


def test_a_pass_on_the_watching_view_lists_nothing_and_writes_with_the_resource_versions_read() -> None:
    api = FakeApi(cluster())
    kube = _FakeKube({f"{FLAVORS}/{o['metadata']['name']}": o for o in copy.deepcopy(api.collections[FLAVORS])})
    controller = Controller(kube, Settings(CONFIG, poll_interval=0.01), view=synced_view(api))  # type: ignore[arg-type]
    actions = controller.reconcile(now=NOW)
    assert [type(a).__name__ for a in actions] == ["ClosePlanA", "Evict"]
    assert not [c for c in kube.calls if c[0] == "LIST"], kube.calls
    assert taints(kube, "on-demand")[-1]["key"] == CONFIG.taint_key
    (patch,) = [c for c in kube.calls if c[0] == "PATCH"]
    assert patch[2]["metadata"]["resourceVersion"] == "42"
    assert controller.metrics.values["tpu_fallback_reconcile_passes_total"] == 1


def test_a_watch_event_reaches_the_next_snapshot_and_wakes_the_loop() -> None:
    api = FakeApi(cluster())
    view = synced_view(api)
    view.snapshot(CONFIG, NOW)
    assert not view.changed.is_set()
    api.scripts[ACTIVE_PODS] = [[("DELETED", managed(pod("job-1-worker-a", "job-1")))]]  # it left Pending
    view.informers["pods"].step()
    assert view.changed.is_set()
    (stuck, *_) = view.snapshot(CONFIG, NOW).workloads
    assert not stuck.pods_unschedulable and stuck.stockout_event is None


def test_quota_kueue_has_not_yet_reported_reserved_is_not_free_so_no_second_job_moves_onto_it() -> None:
    """Kueue writes a ClusterQueue's flavorsReservation a second or more after an admission: in between, the
    Workloads say plan A is full while the ClusterQueue still says it is free. (Seen in the move-back e2e scenario
    once passes ran on changes: a job on plan B was moved onto the quota of the job moved just before.)"""
    holder = kueue_workload()  # admitted on on-demand: 32 cpu, 64Gi, 16 chips of cluster-queue
    waiting = kueue_workload(admissionChecks=[{"name": "dws-prov", "state": "Pending"}])
    waiting["metadata"]["name"] = "rayjob-job-2-fghij"
    waiting["status"]["conditions"] = waiting["status"]["conditions"][:1]  # QuotaReserved, not Admitted
    for assignment in waiting["status"]["admission"]["podSetAssignments"][1:2]:
        assignment["flavors"] = {r: "dws" for r in assignment["flavors"]}
    lagging = {"metadata": {"name": "cluster-queue"}, "spec": {"resourceGroups": [{"flavors": [
        {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "40"}, {"name": "memory",
                                                                                "nominalQuota": "75Gi"},
                                            {"name": "google.com/tpu", "nominalQuota": "16"}]}]}]},
               "status": {"flavorsReservation": []}}  # not yet written since the admission
    flavors = [{"metadata": {"name": n}, "spec": {"nodeLabels": {POOL: f"{n}-pool"}}} for n in ("on-demand", "dws")]
    node = {"metadata": {"name": "n", "labels": {POOL: "on-demand-pool"}, "creationTimestamp": "2026-12-01T09:00:00Z"},
            "status": {"allocatable": {"google.com/tpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}}

    def moves(*workloads: Obj) -> list[d.Deactivate]:
        snap = build_snapshot(CONFIG, NOW, flavors=flavors, workloads=workloads, nodes=[node],
                              cluster_queues=[lagging], provisioning_requests=[])
        return [a for a in d.decide(CONFIG, snap) if isinstance(a, d.Deactivate)]

    assert moves(holder, waiting) == []
    holder["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    (move,) = moves(holder, waiting)  # a finished Workload holds nothing: the move happens
    assert move.name == "rayjob-job-2-fghij" and move.target == "on-demand"


def test_a_kind_not_listed_yet_skips_the_pass_counts_it_and_the_sweep_still_reopens_an_expired_close() -> None:
    import time

    api = FakeApi(cluster())
    api.failures[("LIST", WORKLOADS)] = [KubeError(403, "GET", WORKLOADS, "workloads is forbidden")]
    view = synced_view(api)
    with pytest.raises(NotSyncedError, match=r"workloads not listed yet .*forbidden"):
        view.snapshot(CONFIG, NOW)
    closed_at = time.time() - CONFIG.cool_down - 1
    kube = _FakeKube({})
    for o in copy.deepcopy(api.collections[FLAVORS]):
        if o["metadata"]["name"] in CONFIG.plan_a_flavors:
            o["spec"]["nodeTaints"].append({"key": CONFIG.taint_key, "value": str(int(closed_at)),
                                            "effect": "NoSchedule"})
        kube.objects[f"{FLAVORS}/{o['metadata']['name']}"] = o
    stop = threading.Event()

    class OnePass(Controller):
        def reconcile(self, now: float | None = None) -> list[d.Action]:
            stop.set()  # the loop ends after this pass
            return super().reconcile(now)

    controller = OnePass(kube, Settings(CONFIG, poll_interval=0.01), view=view)  # type: ignore[arg-type]
    controller.run(stop)
    assert controller.metrics.values["tpu_fallback_reconcile_errors_total"] == 1
    assert controller.metrics.values["tpu_fallback_reconcile_passes_total"] == 0
    assert all(taints(kube, n) == [ADMIN_TAINT] for n in CONFIG.plan_a_flavors)  # the sweep reopened plan A


def test_a_kind_not_followed_for_longer_than_stale_after_skips_the_pass() -> None:
    api = FakeApi(cluster())
    view = synced_view(api, stale_after=0.0)
    view.snapshot(CONFIG, NOW)  # every kind listed and working: a pass
    api.failures[("WATCH", WORKLOADS)] = [OSError("connection refused")]
    view.informers["workloads"].step()
    with pytest.raises(NotSyncedError, match=r"workloads not followed for \d+s \(OSError: connection refused\)"):
        view.snapshot(CONFIG, NOW)


def test_an_informers_failure_is_logged_once_and_its_end_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "tpu-fallback")
    api = FakeApi(cluster())
    view = synced_view(api)
    api.failures[("WATCH", CLUSTER_QUEUES)] = [OSError("connection refused"), OSError("connection refused")]
    informer = view.informers["clusterqueues"]
    informer.step()
    view.snapshot(CONFIG, NOW)
    informer.step()
    view.snapshot(CONFIG, NOW)
    informer.step()
    view.snapshot(CONFIG, NOW)
    lines = [r.getMessage() for r in caplog.records if "clusterqueues" in r.getMessage()]
    assert lines == ["reading clusterqueues failed (retrying): OSError: connection refused",
                     "reading clusterqueues works again"]


def test_the_watch_metrics_count_per_informer() -> None:
    api = FakeApi(cluster())
    api.scripts[WORKLOADS] = [[("MODIFIED", cluster()[WORKLOADS][0]), bookmark("200")]]
    api.failures[("WATCH", ACTIVE_PODS)] = [OSError("refused")]
    metrics = Metrics()
    view = synced_view(api, metrics)
    view.informers["workloads"].step()
    view.informers["pods"].step()
    values = metrics.values
    assert values['tpu_fallback_watch_lists_total{resource="workloads"}'] == 1
    assert values['tpu_fallback_watch_events_total{resource="workloads"}'] == 1
    assert values['tpu_fallback_watch_errors_total{resource="pods"}'] == 1
    assert len([k for k in values if k.startswith("tpu_fallback_watch_lists_total")]) == len(view.informers)


def test_metrics_text_has_one_type_line_per_family_and_whole_numbers_in_full() -> None:
    metrics = Metrics()
    metrics.add("tpu_fallback_api_requests_total", 1_234_567, verb="list")
    metrics.add("tpu_fallback_api_requests_total", verb="watch")
    metrics.set("tpu_fallback_last_reconcile_timestamp_seconds", 1764583240.25)
    text = metrics.text()
    assert text.count("# TYPE tpu_fallback_api_requests_total counter") == 1
    assert 'tpu_fallback_api_requests_total{verb="list"} 1234567\n' in text
    assert 'tpu_fallback_api_requests_total{verb="watch"} 1\n' in text
    assert "tpu_fallback_last_reconcile_timestamp_seconds 1764583240.25\n" in text
    with pytest.raises(KeyError):
        metrics.add("tpu_fallback_api_request_total", verb="list")  # a typo is no new family
    with pytest.raises(KeyError):
        metrics.add("tpu_fallback_api_requests_total")  # a labelled family needs its labels


# --- what ships to the cluster ----------------------------------------------------------------------------------------


def test_the_cluster_role_lets_the_controller_watch_exactly_what_it_watches() -> None:
    role = infra("dev").one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "tpu-cluster-fallback-role").inputs
    watched = {(r["apiGroups"][0], res) for r in role["rules"] if "watch" in r["verbs"] for res in r["resources"]}
    listed = {(r["apiGroups"][0], res) for r in role["rules"] if "list" in r["verbs"] for res in r["resources"]}
    view = WatchingView(None, transport=FakeApi)

    def resource(path: str) -> tuple[str, str]:
        parts = path.split("?")[0].strip("/").split("/")  # api/v1/<plural> or apis/<group>/<version>/<plural>
        return ("" if parts[0] == "api" else parts[1]), parts[-1]

    assert watched == listed == {resource(i.path) for i in view.informers.values()}
    assert not any("watch" in r["verbs"] for r in role["rules"] if r.get("resourceNames"))


def test_the_controller_reads_only_plan_as_nodes_when_every_plan_a_flavor_selects_its_pool_by_one_label() -> None:
    from tpu_fallback.model.queues import Flavor, QueuePlan

    def plan(*labels: dict[str, str]) -> QueuePlan:
        flavors = [Flavor(f"on-demand-{i}", dict(one), {}, "on-demand") for i, one in enumerate(labels)]
        return QueuePlan("cq", (*flavors, Flavor("dws", {POOL: "dws-pool"}, {}, "flex-start")), False, None, ())

    assert render.plan_a_node_selector(plan({POOL: "b"}, {POOL: "a"})) == f"{POOL} in (a,b)"
    assert render.plan_a_node_selector(plan({POOL: "a"}, {"other": "b"})) is None
    assert render.plan_a_node_selector(plan({POOL: "a", "zone": "z"})) is None
    config = json.loads(infra("dev").one("kubernetes:core/v1:ConfigMap", "tpu-cluster-fallback-config")
                        .inputs["data"]["config.json"])
    assert config["planANodeSelector"] == f"{POOL} in (on-demand-pool)"
    assert nodes_path(config["planANodeSelector"]) == \
        "/api/v1/nodes?labelSelector=cloud.google.com%2Fgke-nodepool%20in%20%28on-demand-pool%29"


# --- Kube's WATCH over TLS ------------------------------------------------------------------------------------------


def test_kube_watches_on_a_connection_of_its_own_and_counts_every_request(tmp_path: Any) -> None:
    import http.server
    import ssl
    import subprocess

    from tpu_fallback.fallback.kube import Kube

    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    seen: list[tuple[int, str]] = []  # (client port, path)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            seen.append((self.client_address[1], self.path))
            if "watch=true" not in self.path:
                page: Obj = {"metadata": {"resourceVersion": "10"}, "items": [obj("a", "9")]}
                if "continue=tok" in self.path:
                    page["items"] = [obj("z", "9")]
                elif "limit=" in self.path:
                    page["metadata"]["continue"] = "tok"
                body = json.dumps(page).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if "resourceVersion=3" in self.path:
                body = b'{"kind": "Status", "code": 410, "reason": "Expired"}'
                self.send_response(410)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in (json.dumps({"type": "ADDED", "object": obj("b", "11")}) + "\n",
                         json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}) + "\n"):
                data = line.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")  # the server's timeoutSeconds ran out

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    verbs: list[str] = []
    try:
        kube = Kube(f"https://127.0.0.1:{server.server_address[1]}/prefix",
                    ssl.create_default_context(cafile=str(cert)), lambda: "t0ken", on_request=verbs.append)
        items, version = kube.list_at(f"{PATH}?labelSelector=x")
        assert [o["metadata"]["name"] for o in items] == ["a"] and version == "10"
        stream = kube.watch(f"{PATH}?labelSelector=x", version, timeout_seconds=7)
        assert [(kind, o["metadata"]["resourceVersion"]) for kind, o in stream] == [("ADDED", "11"), ("BOOKMARK", "12")]
        stream.close()
        with pytest.raises(KubeError, match="HTTP 410") as gone:
            kube.watch(PATH, "3", timeout_seconds=7)
        assert gone.value.status == 410
        informer = watch.Informer(kube.fork(), PATH, page_size=1)
        informer.step()
        assert names(informer) == ["a", "z"]  # two pages
        informer.step()
        assert names(informer) == ["a", "b", "z"] and informer.resource_version == "12"
        kube.close()
    finally:
        server.shutdown()
        server.server_close()
    assert seen[1][1] == (f"/prefix{PATH}?labelSelector=x&watch=true&resourceVersion=10&allowWatchBookmarks=true"
                          "&timeoutSeconds=7")
    assert seen[3][1] == f"/prefix{PATH}?limit=1" and seen[4][1] == f"/prefix{PATH}?limit=1&continue=tok"
    assert seen[0][0] != seen[1][0] != seen[2][0] != seen[3][0]  # each watch on a connection of its own ...
    assert seen[3][0] == seen[4][0]  # ... and an informer's pages on its own keep-alive one
    assert verbs == ["list", "watch", "watch", "list", "list", "watch"]


def test_kube_a_watch_silent_past_its_read_timeout_raises_timeout_error(tmp_path: Any) -> None:
    """A server that answers a WATCH and then says nothing (a stalled connection): the read times out instead of
    blocking for the watch's whole timeoutSeconds, and the informer counts it as a stall."""
    import http.server
    import ssl
    import subprocess

    from tpu_fallback.fallback.kube import Kube

    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    release = threading.Event()

    class Silent(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            release.wait(30)  # then nothing: the stall

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kube = Kube(f"https://127.0.0.1:{server.server_address[1]}", ssl.create_default_context(cafile=str(cert)),
                    lambda: None)
        stream = kube.watch(PATH, "10", timeout_seconds=300, read_timeout=0.3)
        with pytest.raises(TimeoutError):
            list(stream)
        stream.close()
    finally:
        release.set()
        server.shutdown()
        server.server_close()
