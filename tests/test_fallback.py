"""The fallback controller without a cluster: its decisions, how it reads Kueue's objects, what ships to the cluster.

Against the real Kueue, scheduler and a simulated stock-out: tests/e2e/test_fallback_e2e.py.
"""

from __future__ import annotations

import ast
import json
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.metrics import Metrics
from tpu_fallback.fallback.read import free_quota, provisioned_owners, read_flavor, read_workload
from tpu_fallback.model.settings import COOL_DOWN, STOCKOUT_AFTER, FallbackSettings, parse_settings
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.render.files import CONTROLLER_SOURCES, PACKAGE

CONFIG = d.Config(plan_a_flavors=("on-demand", "on-demand-2"), plan_b_flavors=("dws",), stockout_after=600,
                  cool_down=1800)
T0 = 1_000_000.0
SLICE = {"cpu": Decimal(32), "memory": Decimal(64 * 2**30), "google.com/tpu": Decimal(16)}
POOL = "cloud.google.com/gke-nodepool"


def flavors(closed: dict[str, float] | None = None) -> dict[str, d.Flavor]:
    closed = closed or {}
    pools = {"on-demand": "on-demand-pool", "on-demand-2": "on-demand-pool-2", "dws": "dws-pool"}
    return {name: d.Flavor(name, {POOL: pool}, closed.get(name)) for name, pool in pools.items()}


def workload(name: str, flavor: str | None, **kw: Any) -> d.Workload:
    defaults: dict[str, Any] = {"namespace": "default", "name": name, "created": T0, "cluster_queue": "cq",
                                "tpu_flavor": flavor, "usage": dict(SLICE), "quota_reserved": flavor is not None}
    return d.Workload(**{**defaults, **kw})


def snap(now: float, workloads: list[d.Workload], closed: dict[str, float] | None = None,
         nodes: list[d.Node] | None = None, free: dict[str, dict[str, Decimal]] | None = None) -> d.Snapshot:
    return d.Snapshot(now=now, flavors=flavors(closed), workloads=tuple(workloads), nodes=tuple(nodes or ()),
                      free={"cq": free if free is not None else {"on-demand": dict(SLICE), "on-demand-2": dict(SLICE)}})


def node(pool: str, created: float = T0, ready: bool = True, tpu_free: Decimal = Decimal(4)) -> d.Node:
    return d.Node({POOL: pool}, created, ready, tpu_free=tpu_free)


# --- closing plan A ----------------------------------------------------------------------------------------------


def test_unschedulable_pods_without_an_event_close_every_plan_a_flavor_after_stockout_after_and_evict() -> None:
    stuck = workload("job-1", "on-demand", admitted_since=T0, pods_unschedulable=True)
    assert d.decide(CONFIG, snap(T0 + 599, [stuck])) == []
    close, evict = d.decide(CONFIG, snap(T0 + 600, [stuck]))
    assert isinstance(close, d.ClosePlanA)
    assert close.flavors == ("on-demand", "on-demand-2") and close.since == T0 + 600
    assert close.cause == "default/job-1" and "stockoutAfter (600s)" in close.why
    assert isinstance(evict, d.Evict) and (evict.namespace, evict.name) == ("default", "job-1")


def test_gkes_no_capacity_event_closes_plan_a_at_once_without_waiting_for_stockout_after() -> None:
    stuck = workload("job-1", "on-demand", admitted_since=T0, pods_unschedulable=True, stockout_event=T0 + 30)
    close, evict = d.decide(CONFIG, snap(T0 + 31, [stuck]))
    assert isinstance(close, d.ClosePlanA) and close.since == T0 + 31 and "GKE's autoscaler" in close.why
    assert isinstance(evict, d.Evict) and evict.name == "job-1"


@pytest.mark.parametrize("case", ["scheduled, not Ready", "on plan B", "finished", "not admitted", "no pods yet"])
def test_only_unschedulable_pods_of_an_admitted_plan_a_job_count_as_a_stock_out(case: str) -> None:
    # A crash loop or an image that does not pull: the pods are scheduled, plan A has capacity.
    w = {"scheduled, not Ready": workload("j", "on-demand", admitted_since=T0),
         "on plan B": workload("j", "dws", admitted_since=T0, pods_unschedulable=True, stockout_event=T0),
         "finished": workload("j", "on-demand", admitted_since=T0, finished=True, pods_unschedulable=True),
         "not admitted": workload("j", "on-demand", admitted_since=None, pods_unschedulable=True,
                                  stockout_event=T0),
         "no pods yet": workload("j", "on-demand", admitted_since=T0, stockout_event=T0)}[case]
    assert not any(isinstance(a, d.ClosePlanA | d.Evict) for a in d.decide(CONFIG, snap(T0 + 10_000, [w])))


def test_while_closed_every_job_stuck_on_plan_a_is_evicted_once_but_not_a_multikueue_copy() -> None:
    closed = {"on-demand": T0, "on-demand-2": T0}
    late = workload("late", "on-demand", admitted_since=T0 + 5, pods_unschedulable=True, stockout_event=T0 + 8)
    copy = workload("copy", "on-demand", admitted_since=T0 + 5, pods_unschedulable=True, stockout_event=T0 + 8,
                    multikueue_copy=True)
    evicting = workload("gone", "on-demand", admitted_since=T0, pods_unschedulable=True, stockout_event=T0,
                        annotations={d.EVICTING_ANNOTATION: "t"})
    (evict,) = d.decide(CONFIG, snap(T0 + 10, [late, copy, evicting], closed))
    assert isinstance(evict, d.Evict) and evict.name == "late"


def test_an_evicted_job_is_reactivated_once_kueue_released_it() -> None:
    evicted = workload("job-1", None, active=False, quota_reserved=False, annotations={d.EVICTING_ANNOTATION: "t"})
    (action,) = d.decide(CONFIG, snap(T0, [evicted]))
    assert isinstance(action, d.Reactivate) and action.name == "job-1" and "plan B" in action.why
    held = workload("job-1", "on-demand", active=False, annotations={d.EVICTING_ANNOTATION: "t"})
    assert d.decide(CONFIG, snap(T0, [held])) == []


def test_plan_a_reopens_after_the_cool_down_and_not_before() -> None:
    closed = {"on-demand": T0, "on-demand-2": T0}
    assert d.decide(CONFIG, snap(T0 + 1799, [], closed)) == []
    (action,) = d.decide(CONFIG, snap(T0 + 1800, [], closed))
    assert isinstance(action, d.ReopenPlanA) and action.flavors == ("on-demand", "on-demand-2")


def test_a_new_ready_plan_a_node_reopens_plan_a_early_an_old_one_does_not() -> None:
    closed = {"on-demand": T0, "on-demand-2": T0}
    assert d.decide(CONFIG, snap(T0 + 60, [], closed, [node("on-demand-pool", created=T0 - 5)])) == []
    assert d.decide(CONFIG, snap(T0 + 60, [], closed, [node("on-demand-pool-2", T0 + 30, ready=False)])) == []
    (action,) = d.decide(CONFIG, snap(T0 + 60, [], closed, [node("on-demand-pool-2", created=T0 + 30)]))
    assert isinstance(action, d.ReopenPlanA) and "on-demand-2" in action.why


def test_while_closed_a_stuck_job_does_not_close_again_and_a_half_done_close_is_completed() -> None:
    stuck = workload("job-1", "on-demand", admitted_since=T0 - 5000, pods_unschedulable=True,
                     annotations={d.EVICTING_ANNOTATION: "t"})
    assert d.decide(CONFIG, snap(T0 + 10, [stuck], {"on-demand": T0, "on-demand-2": T0})) == []
    (action,) = d.decide(CONFIG, snap(T0 + 10, [stuck], {"on-demand": T0}))
    assert isinstance(action, d.ClosePlanA)
    assert action.flavors == ("on-demand-2",) and action.since == T0 and action.cause is None


# --- moving back to plan A ---------------------------------------------------------------------------------------


def waiting_on_dws(name: str = "job-2", **kw: Any) -> d.Workload:
    return workload(name, "dws", **kw)


def test_a_job_waiting_for_dws_moves_to_a_plan_a_flavor_with_room_and_ready_nodes() -> None:
    (action,) = d.decide(CONFIG, snap(T0, [waiting_on_dws()], nodes=[node("on-demand-pool-2")]))
    assert isinstance(action, d.Deactivate) and action.target == "on-demand-2"


@pytest.mark.parametrize("case", ["capacity arrived", "admitted", "moved before", "multikueue copy", "no nodes",
                                  "no room", "plan A closed", "move back off"])
def test_a_job_is_not_moved_back_when(case: str) -> None:
    job = {"capacity arrived": waiting_on_dws(capacity_arrived=True),
           "admitted": waiting_on_dws(admitted_since=T0),
           "moved before": waiting_on_dws(annotations={d.MOVED_ANNOTATION: "x"}),
           "multikueue copy": waiting_on_dws(multikueue_copy=True)}.get(case, waiting_on_dws())
    nodes = [] if case == "no nodes" else [node("on-demand-pool")]
    room = {"on-demand": {**SLICE, "google.com/tpu": Decimal(8)}} if case == "no room" else None
    closed = {"on-demand": T0, "on-demand-2": T0} if case == "plan A closed" else None
    config = d.Config(**{**CONFIG.__dict__, "move_back": case != "move back off"})
    actions = d.decide(config, snap(T0 + 1, [job], closed, nodes, room))
    assert not any(isinstance(a, d.Deactivate) for a in actions), actions


def test_two_waiting_jobs_and_room_for_one_move_the_older_one_only() -> None:
    older, newer = waiting_on_dws("job-2", created=T0), waiting_on_dws("job-3", created=T0 + 1)
    actions = d.decide(CONFIG, snap(T0 + 5, [newer, older], nodes=[node("on-demand-pool")],
                                    free={"on-demand": dict(SLICE)}))
    assert [(a.name, a.target) for a in actions if isinstance(a, d.Deactivate)] == [("job-2", "on-demand")]


def test_a_deactivated_move_is_reactivated_once_kueue_released_it_also_after_a_restart() -> None:
    moving = waiting_on_dws(active=False, annotations={d.MOVING_ANNOTATION: "t to on-demand"})
    assert d.decide(CONFIG, snap(T0, [moving])) == []  # Kueue still holds the plan B reservation
    released = waiting_on_dws(active=False, quota_reserved=False, tpu_flavor=None,
                              annotations={d.MOVING_ANNOTATION: "t to on-demand"})
    (action,) = d.decide(CONFIG, snap(T0, [released]))
    assert isinstance(action, d.Reactivate) and action.name == "job-2"
    user_stopped = waiting_on_dws(active=False, quota_reserved=False)  # deactivated by someone else: left alone
    assert d.decide(CONFIG, snap(T0, [user_stopped])) == []


# --- reading Kueue's objects -------------------------------------------------------------------------------------


def kueue_workload(**status: Any) -> dict[str, Any]:
    """A Workload as Kueue 0.19.2 (kueue.x-k8s.io/v1beta2) stores one for a RayJob admitted to plan A."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "rayjob-job-1-abcde", "namespace": "default", "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"queueName": "user-queue", "podSets": []},
        "status": {
            "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [
                {"name": "head", "flavors": {"cpu": "default-cpu", "memory": "default-cpu"},
                 "resourceUsage": {"cpu": "2", "memory": "4Gi"}, "count": 1},
                {"name": "tpu-group", "flavors": {"cpu": "on-demand", "google.com/tpu": "on-demand",
                                                  "memory": "on-demand"},
                 "resourceUsage": {"cpu": "32", "google.com/tpu": "16", "memory": "64Gi"}, "count": 4},
                {"name": "submitter", "flavors": {"cpu": "default-cpu", "memory": "default-cpu"},
                 "resourceUsage": {"cpu": "500m", "memory": "200Mi"}, "count": 1}]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "lastTransitionTime": "2026-12-01T10:00:01Z"},
                {"type": "Admitted", "status": "True", "reason": "Admitted",
                 "lastTransitionTime": "2026-12-01T10:00:02Z"},
                {"type": "PodsReady", "status": "False", "reason": "WaitForStart",
                 "lastTransitionTime": "2026-12-01T10:00:02Z"}],
            **status,
        },
    }


def test_a_workload_reads_as_its_tpu_flavor_usage_and_kueues_own_clock() -> None:
    w = read_workload(kueue_workload(), set())
    assert w.tpu_flavor == "on-demand" and w.cluster_queue == "cluster-queue"
    assert w.usage == {"cpu": Decimal(32), "google.com/tpu": Decimal(16), "memory": Decimal(64 * 2**30)}
    assert w.admitted_since == datetime(2026, 12, 1, 10, 0, 2, tzinfo=UTC).timestamp()
    assert w.quota_reserved and not w.pods_started and w.active
    started = kueue_workload()
    started["status"]["conditions"][2] = {"type": "PodsReady", "status": "False", "reason": "WaitForRecovery"}
    assert read_workload(started, set()).pods_started  # it ran once: a lost pod is no stock-out


def test_capacity_arrived_from_the_admission_check_or_the_provisioning_request() -> None:
    pending = kueue_workload(admissionChecks=[{"name": "dws-prov", "state": "Pending"}])
    assert not read_workload(pending, set()).capacity_arrived
    ready = kueue_workload(admissionChecks=[{"name": "dws-prov", "state": "Ready"}])
    assert read_workload(ready, set()).capacity_arrived
    request = {"metadata": {"name": "rayjob-job-1-abcde-dws-prov-1", "namespace": "default",
                            "ownerReferences": [{"kind": "Workload", "name": "rayjob-job-1-abcde"}]},
               "status": {"conditions": [{"type": "Provisioned", "status": "True"}]}}
    assert read_workload(pending, provisioned_owners([request])).capacity_arrived


def test_free_quota_is_nominal_minus_reserved() -> None:
    cq = {"spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", "google.com/tpu"], "flavors": [
        {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "40"}, {"name": "memory",
                                                                                    "nominalQuota": "75Gi"},
                                            {"name": "google.com/tpu", "nominalQuota": "16"}]}]}]},
          "status": {"flavorsReservation": [{"name": "on-demand", "resources": [
              {"name": "cpu", "total": "32"}, {"name": "memory", "total": "64Gi"}, {"name": "google.com/tpu",
                                                                                   "total": "16"}]}]}}
    assert free_quota(cq) == {"on-demand": {"cpu": Decimal(8), "memory": Decimal(11 * 2**30),
                                            "google.com/tpu": Decimal(0)}}


def test_the_taint_value_is_when_plan_a_closed() -> None:
    flavor = {"metadata": {"name": "on-demand"}, "spec": {"nodeLabels": {POOL: "p"}, "nodeTaints": [
        {"key": "other", "value": "1", "effect": "NoSchedule"},
        {"key": d.TAINT_KEY, "value": "1764583202", "effect": "NoSchedule"}]}}
    assert read_flavor(flavor, d.TAINT_KEY).closed_since == 1764583202.0
    assert read_flavor({"metadata": {"name": "x"}, "spec": {}}, d.TAINT_KEY).closed_since is None


def test_health_is_the_loops_heartbeat() -> None:
    metrics = Metrics()
    start = time.monotonic()
    assert metrics.healthy(60, now=start + 59)
    assert not metrics.healthy(60, now=start + 61)
    metrics.beat()
    beat = time.monotonic()
    assert metrics.healthy(60, now=beat + 59) and not metrics.healthy(60, now=beat + 61)
    # Wall time in the exported series; the age is not read from it (a stepped wall clock changes nothing).
    assert abs(metrics.values["tpu_fallback_loop_heartbeat_timestamp_seconds"] - time.time()) < 60
    metrics.set("tpu_fallback_loop_heartbeat_timestamp_seconds", 0)
    assert metrics.healthy(60, now=beat + 59)
    assert "tpu_fallback_plan_a_closes_total 0" in metrics.text()


# --- what ships to the cluster -----------------------------------------------------------------------------------


def test_the_shipped_sources_import_only_the_standard_library_and_each_other() -> None:
    shipped = {"tpu_fallback." + p.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
               for p in CONTROLLER_SOURCES} | {"tpu_fallback"}
    for path in CONTROLLER_SOURCES:
        tree = ast.parse((PACKAGE / path).read_text(), path, feature_version=(3, 11))  # the image's Python
        for n in ast.walk(tree):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else (
                [n.module or ""] if isinstance(n, ast.ImportFrom) and n.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                assert name in shipped or (top in sys.stdlib_module_names and top != "tpu_fallback") or (
                    path == "fallback/kube.py" and name == "yaml"), f"{path} imports {name}"


def test_the_controller_objects() -> None:
    run = infra("dev")
    deployment = run.one("kubernetes:apps/v1:Deployment").inputs
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {POOL: "default-pool"} and pod["securityContext"]["runAsNonRoot"]
    mounted = {item["path"] for item in pod["volumes"][0]["configMap"]["items"]}
    assert mounted == {"config.json", *(f"tpu_fallback/{p}" for p in CONTROLLER_SOURCES)}
    configmap = run.one("kubernetes:core/v1:ConfigMap", "tpu-cluster-fallback-config").inputs
    config = json.loads(configmap["data"]["config.json"])
    assert config["planAFlavors"] == ["on-demand"] and config["planBFlavors"] == ["dws"]
    assert config["stockoutAfterSeconds"] == STOCKOUT_AFTER and config["coolDownSeconds"] == COOL_DOWN
    role = run.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "tpu-cluster-fallback-role").inputs
    writes = [r for r in role["rules"] if set(r["verbs"]) - {"get", "list", "watch"}]
    assert {(tuple(r["resources"]), tuple(r.get("resourceNames", ()))) for r in writes} == {
        (("resourceflavors",), ("on-demand",)), (("workloads",), ()), (("workloads/status",), ()), (("events",), ())}
    # Writes: update only the plan A flavors named (the taint's read-modify-write), patch Workloads (and the Requeued
    # condition of one Kueue left unqueued), create Events.
    assert not any({"create", "delete", "update"} & set(r["verbs"]) for r in writes
                   if r["resources"] not in (["events"], ["resourceflavors"]))
    (flavors_rule,) = [r for r in writes if r["resources"] == ["resourceflavors"]]
    assert flavors_rule["verbs"] == ["get", "update"] and flavors_rule["resourceNames"] == ["on-demand"]


def test_a_new_setting_restarts_the_controller_pod() -> None:
    def checksum(overrides: dict[str, Any]) -> str:
        pod = infra("dev", overrides).one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]
        return str(pod["metadata"]["annotations"]["tpu-fallback.dev/config-checksum"])

    assert checksum({}) != checksum({"fallback": {"coolDown": "1h"}})


def test_fallback_off_leaves_the_tutorials_kueue_and_no_controller() -> None:
    run = infra("dev", {"fallback": {"enabled": False}})
    assert run.of_type("kubernetes:apps/v1:Deployment") == []
    assert "managerConfig" not in run.one("kubernetes:helm.sh/v3:Release").inputs["values"]


FLAVOR_PATCH = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavorPatch"


def test_fallback_off_takes_plan_as_flavor_taints_back_so_no_close_outlives_a_controller_that_never_ran() -> None:
    """The controller removes its taint on its way out; one that was not running when the fallback was turned off
    (crash looping, unschedulable) cannot, so the stack resets plan A's taints with a forced server-side apply."""
    off = infra("dev", {"fallback": {"enabled": False}})
    (patch,) = off.of_type(FLAVOR_PATCH)
    assert patch.inputs["metadata"] == {"name": "on-demand", "annotations": {"pulumi.com/patchForce": "true"}}
    assert patch.inputs["spec"] == {"nodeTaints": []}
    flavor = off.one("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor", "tpu-cluster-queues-flavor-on-demand")
    assert flavor.urn in patch.dependencies
    assert infra("dev").of_type(FLAVOR_PATCH) == []  # with the fallback on the controller owns its taint


# --- settings ----------------------------------------------------------------------------------------------------


def settings(fallback: Any, **raw: Any) -> FallbackSettings:
    return parse_settings({"fallback": fallback, **raw}, "my-project").fallback


def test_durations_read_like_kubectls() -> None:
    parsed = settings({"stockoutAfter": "1h30m", "coolDown": "1m", "pollInterval": "2s", "requeueBackoff": "90s"})
    assert (parsed.stockout_after, parsed.cool_down, parsed.poll_interval, parsed.requeue_backoff) == (5400, 60, 2, 90)
    assert parsed.pods_ready_timeout > parsed.stockout_after + parsed.poll_interval


def test_kueues_pods_ready_timeout_is_a_long_backstop_never_shorter_than_kueues_default() -> None:
    from tpu_fallback.model.settings import KUEUE_PODS_READY_TIMEOUT

    short = settings({"stockoutAfter": "20s", "pollInterval": "1s", "coolDown": "45s"})
    assert short.pods_ready_timeout == KUEUE_PODS_READY_TIMEOUT == 30 * 60
    assert settings({"stockoutAfter": "1h"}).pods_ready_timeout > 3600


@pytest.mark.parametrize(("fallback", "raw", "message"), [
    ({"stockoutAfter": "10"}, {}, 'fallback.stockoutAfter "10" is invalid: expected a duration'),
    ({"stockoutAfter": 600}, {}, "fallback.stockoutAfter 600 is invalid"),
    ({"stockoutAfter": "5s"}, {}, "must be between 10s"),
    ({"stockoutAfter": "12s", "pollInterval": "10s"}, {}, "at least twice fallback.pollInterval"),
    ({"coolDown": "-1m"}, {}, "fallback.coolDown"),
    ({"coolDown": "0s"}, {}, 'fallback.coolDown "0s" is invalid: must be at least 30s'),
    ({"coolDown": "40s", "pollInterval": "10s"}, {}, "must be at least 50s"),
    ({"stockOutAfter": "10m"}, {}, "did you mean stockoutAfter"),
    ({"image": "Python:3"}, {}, "fallback.image"),
    ({"enabled": True}, {"flexStart": {"enabled": False}}, "needs both plans"),
])
def test_bad_fallback_settings_are_refused(fallback: Any, raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        settings(fallback, **raw)


def test_fallback_is_off_by_default_with_the_clusters_own_kueue_and_refused_on() -> None:
    existing = {"existingCluster": {"name": "c"}, "kueue": {"install": False}}
    assert settings(None, **existing).enabled is False
    with pytest.raises(ConfigError, match="needs Kueue's waitForPodsReady"):
        settings({"enabled": True}, **existing)


def test_a_failed_pass_is_counted_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    import threading

    from tpu_fallback.fallback.config import Settings
    from tpu_fallback.fallback.controller import Controller
    from tpu_fallback.fallback.kube import KubeError

    stop = threading.Event()
    errors = [KubeError(429, "GET", "/apis", "storage is (re)initializing"), KubeError(403, "GET", "/apis", "no")]

    class Failing(Controller):
        def reconcile(self, now: float | None = None) -> list[d.Action]:
            if errors:
                raise errors.pop(0)
            stop.set()
            return []

    controller = Failing(None, Settings(CONFIG, poll_interval=0.01))  # type: ignore[arg-type]
    controller.run(stop)
    assert controller.metrics.values["tpu_fallback_reconcile_errors_total"] == 2
    busy, denied = (r for r in caplog.records if "reconcile" in r.getMessage())
    assert busy.levelname == "WARNING" and busy.exc_info is None  # a busy API server: one line
    assert denied.levelname == "ERROR" and denied.exc_info is not None  # anything else: the traceback


def test_the_controller_keeps_one_connection_and_sends_again_once_the_server_closed_it(tmp_path: Any) -> None:
    """Kube's calls share one keep-alive HTTPS connection; one the server closed while idle is replaced, and the call
    on it is sent again (a real TLS server here: openssl's certificate, the standard library's server)."""
    import http.server
    import ssl
    import subprocess
    import threading

    from tpu_fallback.fallback.kube import Kube, KubeError

    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    seen: list[tuple[int, str]] = []  # (client port, path) per request

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive unless a handler closes

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            seen.append((self.client_address[1], self.path))
            if self.path.endswith("/missing"):
                self.send_response(404)
                body = b'{"reason": "NotFound"}'
            else:
                self.send_response(200)
                body = json.dumps({"items": [{"call": len(seen)}]}).encode()
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            # Closed after answering, without a "Connection: close": the client learns it on its next call.
            self.close_connection = self.path.endswith("then-close")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        kube = Kube(f"https://127.0.0.1:{server.server_address[1]}/prefix",
                    ssl.create_default_context(cafile=str(cert)), lambda: "t0ken")
        assert kube.list("/a") == [{"call": 1}]
        assert kube.list("/b-then-close") == [{"call": 2}]
        with pytest.raises(KubeError, match="HTTP 404"):
            kube.get("/missing")  # on a new connection: the server closed the first one
        assert kube.list("/c") == [{"call": 4}]
        kube.close()
    finally:
        server.shutdown()
        server.server_close()
    ports = [port for port, _ in seen]
    assert [path for _, path in seen] == ["/prefix/a", "/prefix/b-then-close", "/prefix/missing", "/prefix/c"]
    assert ports[0] == ports[1] != ports[2] == ports[3], seen  # two connections for four calls


# --- GKE's evidence, and acting against a fake API ------------------------------------------------------------------


# GKE's cluster autoscaler's words (tpu_fallback/fallback/read.py quotes their source).
OUT_OF_RESOURCES = ("Node scale up in zones us-east5-b associated with this pod failed: GCE out of resources. Pod is "
                    "at risk of not being scheduled.")
IN_BACKOFF = ("pod didn't trigger scale-up: 1 in backoff after failed scale-up, 2 node(s) didn't match Pod's node "
              "affinity")


def pod(name: str, job: str, *, scheduled: bool = False, pool: str = "on-demand-pool") -> dict[str, Any]:
    """A RayJob's TPU worker pod as KubeRay labels it (with its RayCluster's name, ray_cluster(job)) and as Kueue
    starts it (the flavor's node labels in its nodeSelector)."""
    cond = {"type": "PodScheduled", "status": "True"} if scheduled else {
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    spec: dict[str, Any] = {"nodeSelector": {POOL: pool},
                            "containers": [{"resources": {"requests": {"google.com/tpu": "4"}}}]}
    if scheduled:
        spec["nodeName"] = "n1"
    return {"metadata": {"name": name, "namespace": "default",
                         "labels": {"ray.io/cluster": f"{job}-x7k2p", "ray.io/node-type": "worker"}},
            "spec": spec, "status": {"phase": "Pending", "conditions": [cond]}}


def ray_cluster(job: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{job}-x7k2p", "namespace": "default", "ownerReferences": [
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": job, "controller": True}]}}


def event(pod_name: str, reason: str, message: str, at: str = "2026-12-01T10:00:32Z") -> dict[str, Any]:
    return {"involvedObject": {"kind": "Pod", "namespace": "default", "name": pod_name}, "reason": reason,
            "message": message, "firstTimestamp": at, "lastTimestamp": "2026-12-01T10:05:00Z"}


def owned(job: str) -> dict[str, Any]:
    obj = kueue_workload()
    obj["metadata"]["name"] = f"rayjob-{job}-abcde"
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": job,
                                           "controller": True}]
    return obj


def test_a_workload_reads_its_pods_unschedulable_and_the_first_no_capacity_event_on_them() -> None:
    from tpu_fallback.fallback import evidence as ev

    now = ev.parse_time("2026-12-01T10:06:00Z") or 0.0
    evidence = ev.read(
        now=now, pods=[pod("job-1-worker-a", "job-1"), pod("job-2-worker-a", "job-2", scheduled=True)],
        events=[event("job-1-worker-a", "FailedScaleUp", OUT_OF_RESOURCES),
                event("job-1-worker-a", "NotTriggerScaleUp", IN_BACKOFF, at="2026-12-01T10:01:00Z"),
                event("job-2-worker-a", "FailedScaleUp", OUT_OF_RESOURCES)],  # scheduled since: no evidence
        workloads=[owned("job-1"), owned("job-2")], ray_clusters=[ray_cluster("job-1"), ray_cluster("job-2")],
        flavors={"on-demand": {POOL: "on-demand-pool"}})
    one, two = read_workload(owned("job-1"), set(), evidence), read_workload(owned("job-2"), set(), evidence)
    assert one.pods_unschedulable and one.stockout_event == ev.parse_time("2026-12-01T10:00:32Z")
    assert not two.pods_unschedulable and two.stockout_event is None


class FakeKube:
    """An API server's answers for the controller's calls: objects by path, failures queued per (method, path)."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.failures: dict[tuple[str, str], list[Exception]] = {}
        self.calls: list[tuple[str, str, Any]] = []

    def _fail(self, method: str, path: str) -> None:
        queued = self.failures.get((method, path))
        if queued:
            raise queued.pop(0)

    def get(self, path: str) -> Any:
        self.calls.append(("GET", path, None))
        self._fail("GET", path)
        return json.loads(json.dumps(self.objects[path]))

    def list(self, path: str) -> list[Any]:
        self.calls.append(("LIST", path, None))
        self._fail("LIST", path)
        return list(json.loads(json.dumps(self.objects.get(path.split("?")[0], []))))

    def replace(self, path: str, obj: Any) -> Any:
        self.calls.append(("PUT", path, obj))
        self._fail("PUT", path)
        self.objects[path] = obj
        return obj

    def merge_patch(self, path: str, patch: Any) -> Any:
        self.calls.append(("PATCH", path, patch))
        self._fail("PATCH", path)
        return {}

    def create(self, path: str, obj: Any) -> Any:
        self.calls.append(("POST", path, obj))
        self._fail("POST", path)
        return obj


FLAVORS = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
ADMIN_TAINT = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}


def fake_cluster() -> FakeKube:
    flavor_objects = {name: {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                             "metadata": {"name": name, "resourceVersion": "7"},
                             "spec": {"nodeLabels": {POOL: f"{name}-pool"}, "nodeTaints": [dict(ADMIN_TAINT)]}}
                      for name in ("on-demand", "on-demand-2", "dws")}
    stuck = owned("job-1")
    stuck["metadata"]["resourceVersion"] = "42"
    objects: dict[str, Any] = {f"{FLAVORS}/{n}": o for n, o in flavor_objects.items()}
    objects.update({
        FLAVORS: list(flavor_objects.values()),
        "/apis/kueue.x-k8s.io/v1beta2/workloads": [stuck],
        "/api/v1/pods": [pod("job-1-worker-a", "job-1")],
        "/apis/ray.io/v1/rayclusters": [ray_cluster("job-1")],
        "/api/v1/events": [event("job-1-worker-a", "FailedScaleUp", OUT_OF_RESOURCES)],
    })
    return FakeKube(objects)


def controller_on(kube: FakeKube) -> Any:
    from tpu_fallback.fallback.config import Settings
    from tpu_fallback.fallback.controller import Controller

    return Controller(kube, Settings(CONFIG, poll_interval=0.01))  # type: ignore[arg-type]


def taints(kube: FakeKube, flavor: str) -> list[dict[str, Any]]:
    return list(kube.objects[f"{FLAVORS}/{flavor}"]["spec"]["nodeTaints"])


def test_close_and_reopen_keep_an_admins_taint_and_write_with_the_resource_version_read() -> None:
    kube = fake_cluster()
    controller = controller_on(kube)
    actions = controller.reconcile(now=parse_now("2026-12-01T10:00:40Z"))
    assert [type(a).__name__ for a in actions] == ["ClosePlanA", "Evict"]
    for flavor in ("on-demand", "on-demand-2"):
        assert taints(kube, flavor)[0] == ADMIN_TAINT and taints(kube, flavor)[1]["key"] == CONFIG.taint_key
    assert taints(kube, "dws") == [ADMIN_TAINT]
    puts = [c for c in kube.calls if c[0] == "PUT"]
    assert all(c[2]["metadata"]["resourceVersion"] == "7" for c in puts), puts
    controller.set_taint("on-demand", None)
    assert taints(kube, "on-demand") == [ADMIN_TAINT]


def test_a_conflicting_write_reads_the_flavor_again_and_keeps_what_the_other_writer_added() -> None:
    from tpu_fallback.fallback.kube import KubeError

    kube = fake_cluster()
    path = f"{FLAVORS}/on-demand"
    other = {"key": "late", "value": "x", "effect": "NoSchedule"}

    def conflict() -> KubeError:  # meanwhile an admin added a taint
        kube.objects[path]["spec"]["nodeTaints"].append(other)
        return KubeError(409, "PUT", path, "the object has been modified")

    kube.failures[("PUT", path)] = [conflict()]
    controller_on(kube).set_taint("on-demand", "1764583202")
    assert taints(kube, "on-demand") == [ADMIN_TAINT, other, {"key": CONFIG.taint_key, "value": "1764583202",
                                                              "effect": "NoSchedule"}]
    assert [c[0] for c in kube.calls] == ["GET", "PUT", "GET", "PUT"]


@pytest.mark.parametrize("failure", [403, 500, "timeout"])
def test_a_rejected_workload_patch_does_not_stop_the_close_and_is_counted(failure: Any) -> None:
    from tpu_fallback.fallback.kube import KubeError

    kube = fake_cluster()
    path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/rayjob-job-1-abcde"
    error: Exception = TimeoutError("timed out") if failure == "timeout" else KubeError(failure, "PATCH", path, "no")
    kube.failures[("PATCH", path)] = [error]
    controller = controller_on(kube)
    actions = controller.reconcile(now=parse_now("2026-12-01T10:00:40Z"))
    assert [type(a).__name__ for a in actions] == ["ClosePlanA"]
    assert taints(kube, "on-demand")[-1]["key"] == CONFIG.taint_key
    assert controller.metrics.values["tpu_fallback_action_errors_total"] == 1
    (patch,) = [c for c in kube.calls if c[0] == "PATCH"]
    assert patch[2]["metadata"]["resourceVersion"] == "42" and patch[2]["spec"] == {"active": False}


def parse_now(stamp: str) -> float:
    from tpu_fallback.fallback.evidence import parse_time

    value = parse_time(stamp)
    assert value is not None
    return value


# --- no taint outlives the controller ------------------------------------------------------------------------------


def closed_cluster(closed_at: float) -> FakeKube:
    """A cluster whose plan A flavors carry our taint (closed at `closed_at`) beside an admin's."""
    kube = fake_cluster()
    for name in CONFIG.plan_a_flavors:
        kube.objects[f"{FLAVORS}/{name}"]["spec"]["nodeTaints"].append(
            {"key": CONFIG.taint_key, "value": str(int(closed_at)), "effect": "NoSchedule"})
    return kube


def test_passes_that_keep_failing_still_reopen_plan_a_once_its_cool_down_passed() -> None:
    import threading

    from tpu_fallback.fallback.config import Settings
    from tpu_fallback.fallback.controller import Controller
    from tpu_fallback.fallback.kube import KubeError

    kube = closed_cluster(closed_at=time.time() - CONFIG.cool_down - 1)
    workloads = "/apis/kueue.x-k8s.io/v1beta2/workloads"
    kube.failures[("LIST", workloads)] = [KubeError(403, "GET", workloads, "forbidden")] * 3
    stop = threading.Event()

    class FailingPasses(Controller):
        def reconcile(self, now: float | None = None) -> list[d.Action]:
            try:
                return super().reconcile(now)
            finally:
                if not kube.failures[("LIST", workloads)]:
                    stop.set()

    controller = FailingPasses(kube, Settings(CONFIG, poll_interval=0.01))  # type: ignore[arg-type]
    controller.run(stop)
    assert controller.metrics.values["tpu_fallback_reconcile_errors_total"] == 3
    for name in CONFIG.plan_a_flavors:
        assert taints(kube, name) == [ADMIN_TAINT]


def test_the_sweep_keeps_a_close_within_its_cool_down_so_a_restart_carries_it_on() -> None:
    closed_at = time.time() - 60
    kube = closed_cluster(closed_at)
    assert controller_on(kube).sweep(now=closed_at + CONFIG.cool_down - 1) == []
    assert all(taints(kube, n)[-1]["key"] == CONFIG.taint_key for n in CONFIG.plan_a_flavors)
    assert controller_on(kube).sweep(now=closed_at + CONFIG.cool_down) == list(CONFIG.plan_a_flavors)
    assert all(taints(kube, n) == [ADMIN_TAINT] for n in CONFIG.plan_a_flavors)


DEPLOYMENT = "/apis/apps/v1/namespaces/kueue-system/deployments/tpu-fallback-controller"


@pytest.mark.parametrize("state, reopens", [
    ("restarted", False), ("deleting", True), ("gone", True), ("scaled to zero", True), ("rolled out", True),
    ("own Deployment unread at start", False)])
def test_on_its_way_out_the_controller_releases_plan_a_unless_the_same_deployment_restarts_it(
        state: str, reopens: bool) -> None:
    from tpu_fallback.fallback.config import Settings
    from tpu_fallback.fallback.controller import Controller
    from tpu_fallback.fallback.kube import KubeError

    kube = closed_cluster(closed_at=time.time())
    deployment: dict[str, Any] = {"metadata": {"name": "tpu-fallback-controller", "generation": 3},
                                  "spec": {"replicas": 1}}
    kube.objects[DEPLOYMENT] = deployment
    # A Workload the controller deactivated (an eviction from plan A in progress), and one a user deactivated.
    evicting, users = owned("job-1"), owned("job-2")
    evicting["metadata"].update(annotations={d.EVICTING_ANNOTATION: "2026-12-01T10:00:00Z"}, resourceVersion="51")
    users["metadata"]["name"] = "rayjob-job-2-fghij"
    for obj in (evicting, users):
        obj["spec"]["active"] = False
    kube.objects["/apis/kueue.x-k8s.io/v1beta2/workloads"] = [evicting, users]
    controller = Controller(kube, Settings(CONFIG, poll_interval=0.01,  # type: ignore[arg-type]
                                           deployment="kueue-system/tpu-fallback-controller"))
    if state == "own Deployment unread at start":
        kube.failures[("GET", DEPLOYMENT)] = [KubeError(503, "GET", DEPLOYMENT, "unavailable")]
        with pytest.raises(KubeError):
            controller.remember_deployment()
        deployment["metadata"]["generation"] = 4  # a rollout it cannot tell from a restart: the close is kept
    else:
        controller.remember_deployment()
    if state == "deleting":
        deployment["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    elif state == "scaled to zero":
        deployment["spec"]["replicas"] = 0
    elif state == "rolled out":
        deployment["metadata"]["generation"] = 4
    elif state == "gone":
        kube.failures[("GET", DEPLOYMENT)] = [KubeError(404, "GET", DEPLOYMENT, "not found")]
    why = controller.release_unless_restarted()
    assert (why is not None) is reopens, why
    for name in CONFIG.plan_a_flavors:
        assert (taints(kube, name) == [ADMIN_TAINT]) is reopens
    assert any(c[2]["reason"] == "PlanAReopened" for c in kube.calls if c[0] == "POST") is reopens
    patches = [c for c in kube.calls if c[0] == "PATCH"]
    if reopens:  # only the controller's own deactivation is undone, on the Workload as read
        assert patches == [("PATCH", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/"
                                     f"{evicting['metadata']['name']}",
                            {"metadata": {"annotations": {d.EVICTING_ANNOTATION: None}, "resourceVersion": "51"},
                             "spec": {"active": True}})], patches
    else:
        assert patches == [], patches


def test_the_controller_can_read_its_own_deployment_and_nothing_else_in_its_namespace() -> None:
    run = infra("dev")
    deployment = run.one("kubernetes:apps/v1:Deployment").inputs
    configmap = run.one("kubernetes:core/v1:ConfigMap", "tpu-cluster-fallback-config").inputs
    own = f"{deployment['metadata']['namespace']}/{deployment['metadata']['name']}"
    assert json.loads(configmap["data"]["config.json"])["deployment"] == own
    role = run.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "tpu-cluster-fallback-deployment-role").inputs
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    # ... and its Lease (by name; create takes no resourceName): tests/test_fallback_lease.py
    lease = json.loads(configmap["data"]["config.json"])["lease"]
    assert lease["namespace"] == deployment["metadata"]["namespace"]
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments"],
                              "resourceNames": [deployment["metadata"]["name"]], "verbs": ["get"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "resourceNames": [lease["name"]], "verbs": ["get", "update"]},
                             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    binding = run.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
                      "tpu-cluster-fallback-deployment-binding").inputs
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"][0]["name"] == account and binding["roleRef"]["name"] == role["metadata"]["name"]


def test_without_an_unschedulable_pod_the_controller_lists_no_events_or_ray_clusters() -> None:
    kube = fake_cluster()
    kube.objects["/api/v1/pods"] = [pod("job-1-worker-a", "job-1", scheduled=True)]
    controller_on(kube).reconcile(now=parse_now("2026-12-01T10:00:40Z"))
    listed = [c[1] for c in kube.calls if c[0] == "LIST"]
    assert not any(p.startswith(("/api/v1/events", "/apis/ray.io/")) for p in listed), listed
    kube = fake_cluster()
    controller_on(kube).reconcile(now=parse_now("2026-12-01T10:00:40Z"))
    events = [c[1] for c in kube.calls if c[0] == "LIST" and c[1].startswith("/api/v1/events")]
    assert len(events) == 3 and all("reason%3D" in p for p in events), events  # GKE's three scale-up reasons
