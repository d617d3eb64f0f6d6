"""The fallback controller without a cluster: its decisions, how it reads Kueue's objects, what ships to the cluster.

Against the real Kueue, scheduler and a simulated stock-out: tests/e2e/test_fallback_e2e.py.
"""

from __future__ import annotations

import ast
import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback.controller import Metrics, free_quota, provisioned_owners, read_flavor, read_workload
from tpu_fallback.model.settings import FallbackSettings, parse_settings
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.render import fallback as render
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


def node(pool: str, created: float = T0, ready: bool = True) -> d.Node:
    return d.Node({POOL: pool}, created, ready)


# --- closing plan A ----------------------------------------------------------------------------------------------


def test_a_job_whose_pods_never_start_closes_every_plan_a_flavor_after_stockout_after() -> None:
    stuck = workload("job-1", "on-demand", admitted_since=T0)
    assert d.decide(CONFIG, snap(T0 + 599, [stuck])) == []
    (action,) = d.decide(CONFIG, snap(T0 + 600, [stuck]))
    assert isinstance(action, d.ClosePlanA)
    assert action.flavors == ("on-demand", "on-demand-2") and action.since == T0 + 600
    assert action.cause == "default/job-1" and "stockoutAfter 600s" in action.why


@pytest.mark.parametrize("case", ["started", "on plan B", "finished", "not admitted"])
def test_only_a_plan_a_job_that_never_started_counts_as_a_stock_out(case: str) -> None:
    w = {"started": workload("j", "on-demand", admitted_since=T0, pods_started=True),
         "on plan B": workload("j", "dws", admitted_since=T0),
         "finished": workload("j", "on-demand", admitted_since=T0, finished=True),
         "not admitted": workload("j", "on-demand", admitted_since=None)}[case]
    assert not any(isinstance(a, d.ClosePlanA) for a in d.decide(CONFIG, snap(T0 + 10_000, [w])))


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
    stuck = workload("job-1", "on-demand", admitted_since=T0 - 5000)
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
    config = d.Config(**{**CONFIG.__dict__, "reverse_move": case != "move back off"})
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
        {"key": render.TAINT_KEY, "value": "1764583202", "effect": "NoSchedule"}]}}
    assert read_flavor(flavor, render.TAINT_KEY).closed_since == 1764583202.0
    assert read_flavor({"metadata": {"name": "x"}, "spec": {}}, render.TAINT_KEY).closed_since is None


def test_health_fails_when_no_pass_finished_lately() -> None:
    metrics = Metrics()
    assert metrics.healthy(60, now=metrics.started + 59)
    assert not metrics.healthy(60, now=metrics.started + 61)
    metrics.set("tpu_fallback_last_reconcile_timestamp_seconds", metrics.started + 100)
    assert metrics.healthy(60, now=metrics.started + 150)
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
    assert config["stockoutAfterSeconds"] == 600 and config["coolDownSeconds"] == 1800
    role = run.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "tpu-cluster-fallback-role").inputs
    writes = [r for r in role["rules"] if set(r["verbs"]) - {"get", "list", "watch"}]
    assert {(tuple(r["resources"]), tuple(r.get("resourceNames", ()))) for r in writes} == {
        (("resourceflavors",), ("on-demand",)), (("workloads",), ()), (("events",), ())}
    assert not any({"create", "delete", "update"} & set(r["verbs"]) for r in writes if r["resources"] != ["events"])


def test_a_new_setting_restarts_the_controller_pod() -> None:
    def checksum(overrides: dict[str, Any]) -> str:
        pod = infra("dev", overrides).one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]
        return str(pod["metadata"]["annotations"]["tpu-fallback.dev/config-checksum"])

    assert checksum({}) != checksum({"fallback": {"coolDown": "1h"}})


def test_fallback_off_leaves_the_tutorials_kueue_and_no_controller() -> None:
    run = infra("dev", {"fallback": {"enabled": False}})
    assert run.of_type("kubernetes:apps/v1:Deployment") == []
    assert "managerConfig" not in run.one("kubernetes:helm.sh/v3:Release").inputs["values"]


# --- settings ----------------------------------------------------------------------------------------------------


def settings(fallback: Any, **raw: Any) -> FallbackSettings:
    return parse_settings({"fallback": fallback, **raw}, "my-project").fallback


def test_durations_read_like_kubectls() -> None:
    parsed = settings({"stockoutAfter": "1h30m", "coolDown": "0s", "pollInterval": "2s", "requeueBackoff": "90s"})
    assert (parsed.stockout_after, parsed.cool_down, parsed.poll_interval, parsed.requeue_backoff) == (5400, 0, 2, 90)
    assert parsed.pods_ready_timeout > parsed.stockout_after + parsed.poll_interval


@pytest.mark.parametrize(("fallback", "raw", "message"), [
    ({"stockoutAfter": "10"}, {}, 'fallback.stockoutAfter "10" is invalid: expected a duration'),
    ({"stockoutAfter": 600}, {}, "fallback.stockoutAfter 600 is invalid"),
    ({"stockoutAfter": "5s"}, {}, "must be between 10s"),
    ({"stockoutAfter": "12s", "pollInterval": "10s"}, {}, "at least twice fallback.pollInterval"),
    ({"coolDown": "-1m"}, {}, "fallback.coolDown"),
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

    from tpu_fallback.fallback.controller import Controller, Settings
    from tpu_fallback.fallback.kube import KubeError

    stop = threading.Event()
    errors = [KubeError(429, "GET", "/apis", "storage is (re)initializing"), KubeError(403, "GET", "/apis", "no")]

    class Failing(Controller):
        def reconcile(self, now: float | None = None) -> list[d.Action]:
            if errors:
                raise errors.pop(0)
            stop.set()
            return []

    controller = Failing(None, Settings(CONFIG, poll_seconds=0.01))  # type: ignore[arg-type]
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
