"""The sweeper (tpu_fallback/fallback/sweep.py), the CronJob that undoes what a controller that is not running left
behind, on test_fallback's fake API (its objects, with merge patches applied here) and fixed clocks.

The sweep run as its CronJob runs it, after a killed and a crash-looping controller, against a real API server:
tests/e2e/test_fallback_operations_e2e.py."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from tests.test_fallback import ADMIN_TAINT, CONFIG, FakeKube, closed_cluster, owned, taints
from tpu_fallback.fallback import decide as d
from tpu_fallback.fallback import sweep
from tpu_fallback.fallback.config import Settings
from tpu_fallback.fallback.kube import Kube, KubeError
from tpu_fallback.fallback.lease import LeaseRef, micro_time
from tpu_fallback.model.queues import queue_plan
from tpu_fallback.model.settings import FallbackSettings, parse_settings
from tpu_fallback.render import fallback as render

REF = LeaseRef("kueue-system", "tpu-fallback-controller")
SETTINGS = Settings(CONFIG, poll_interval=5.0, deployment="kueue-system/tpu-fallback-controller")
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/workloads"
CLOSED_AT = 1_764_583_200.0  # 2025-12-01T10:00:00Z


class Cluster(FakeKube):
    """test_fallback's FakeKube, and: a GET of what is not there answers 404; a merge patch of a Workload is applied
    to the listed Workload, and refused with 409 when its resourceVersion is not the stored one."""

    def get(self, path: str) -> Any:
        if path not in self.objects and path.split("?")[0] not in self.objects:
            self.calls.append(("GET", path, None))
            raise KubeError(404, "GET", path, "not found")
        return super().get(path)

    def merge_patch(self, path: str, patch: Any) -> Any:
        super().merge_patch(path, patch)
        namespace, name = path.split("/namespaces/", 1)[1].split("/workloads/")
        for obj in self.objects[WORKLOADS]:
            meta = obj["metadata"]
            if (meta["namespace"], meta["name"]) != (namespace, name.split("?")[0]):
                continue
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != meta.get("resourceVersion"):
                raise KubeError(409, "PATCH", path, "the object has been modified")
            _merge(obj, {k: v for k, v in patch.items()})
            meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
            return obj
        raise KubeError(404, "PATCH", path, "not found")


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch (null removes a key)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            child = target.get(key)
            if not isinstance(child, dict):
                child = target[key] = {}
            _merge(child, value)
        else:
            target[key] = copy.deepcopy(value)


def as_kube(kube: FakeKube) -> Kube:
    return cast(Kube, kube)


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deactivated(name: str, annotations: dict[str, str], rv: str = "50") -> dict[str, Any]:
    obj = owned(name)
    obj["metadata"]["name"] = f"rayjob-{name}"
    obj["metadata"].update(annotations=dict(annotations), resourceVersion=rv)
    obj["spec"]["active"] = False
    return obj


def cluster(workloads: list[dict[str, Any]] | None = None, lease: dict[str, Any] | None = None) -> Cluster:
    """Plan A closed at CLOSED_AT (our taint beside an admin's), these Workloads, and the Lease if given."""
    base = closed_cluster(CLOSED_AT)
    kube = Cluster(base.objects)
    kube.objects[WORKLOADS] = workloads or []
    if lease is not None:
        kube.objects[REF.path] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": REF.name, "namespace": REF.namespace}, "spec": lease}
    return kube


def lease(renewed: float, holder: str = "tpu-fallback-controller-abc12") -> dict[str, Any]:
    return {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": micro_time(renewed)}


def writes(kube: FakeKube) -> list[tuple[str, str, Any]]:
    return [c for c in kube.calls if c[0] in ("PUT", "PATCH", "POST")]


def workload(kube: FakeKube, name: str) -> dict[str, Any]:
    return next(o for o in kube.objects[WORKLOADS] if o["metadata"]["name"] == f"rayjob-{name}")


AFTER_COOL_DOWN = CLOSED_AT + CONFIG.cool_down + 1


def test_a_live_controller_holds_the_lease_so_the_sweep_touches_nothing() -> None:
    ours = deactivated("job-1", {d.EVICTING_ANNOTATION: stamp(CLOSED_AT)})
    kube = cluster([ours], lease(renewed=AFTER_COOL_DOWN - 10))
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=AFTER_COOL_DOWN)
    assert swept.holder == "tpu-fallback-controller-abc12"
    assert writes(kube) == [] and [c[1] for c in kube.calls] == [REF.path]  # the Lease read, nothing else
    assert all(taints(kube, n)[-1]["key"] == CONFIG.taint_key for n in CONFIG.plan_a_flavors)
    assert workload(kube, "job-1")["spec"]["active"] is False


def test_an_expired_lease_and_an_expired_close_reopen_plan_a_keeping_the_admins_taint() -> None:
    kube = cluster([], lease(renewed=AFTER_COOL_DOWN - 15))  # renewed exactly one duration ago: expired
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=AFTER_COOL_DOWN)
    assert swept.holder is None and swept.reopened == list(CONFIG.plan_a_flavors) and swept.errors == []
    for name in CONFIG.plan_a_flavors:
        assert taints(kube, name) == [ADMIN_TAINT]
    assert taints(kube, "dws") == [ADMIN_TAINT]
    reopened = [c[2] for c in kube.calls if c[0] == "POST" and c[2]["reason"] == "PlanAReopened"]
    assert len(reopened) == len(CONFIG.plan_a_flavors)


def test_a_close_still_in_its_cool_down_is_kept_even_with_no_controller() -> None:
    kube = cluster([])  # no Lease at all: no controller ever ran (or it was removed)
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=CLOSED_AT + CONFIG.cool_down - 1)
    assert swept.holder is None and swept.reopened == []
    assert all(taints(kube, n)[-1]["key"] == CONFIG.taint_key for n in CONFIG.plan_a_flavors)
    assert [c for c in writes(kube) if c[0] == "PUT"] == []


def test_our_deactivated_workloads_past_the_grace_are_queued_again_and_our_annotation_removed() -> None:
    now = CLOSED_AT + 60
    evicting = deactivated("job-1", {d.EVICTING_ANNOTATION: stamp(now - 30), "user.example/keep": "x"}, rv="51")
    moving = deactivated("job-2", {d.MOVING_ANNOTATION: f"{stamp(now - 11)} to on-demand"}, rv="52")
    fresh = deactivated("job-3", {d.EVICTING_ANNOTATION: stamp(now - 5)}, rv="53")  # within the grace (10 s)
    kube = cluster([evicting, moving, fresh], lease(renewed=now - 20))
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=now)
    assert swept.requeued == ["default/rayjob-job-1", "default/rayjob-job-2"] and swept.kept == ["default/rayjob-job-3"]
    one, two, three = workload(kube, "job-1"), workload(kube, "job-2"), workload(kube, "job-3")
    assert one["spec"]["active"] is True and one["metadata"]["annotations"] == {"user.example/keep": "x"}
    assert two["spec"]["active"] is True and two["metadata"]["annotations"] == {}
    assert three["spec"]["active"] is False and d.EVICTING_ANNOTATION in three["metadata"]["annotations"]
    patches = [c for c in kube.calls if c[0] == "PATCH"]
    assert [p[2]["metadata"]["resourceVersion"] for p in patches] == ["51", "52"]  # on the Workload as read
    assert patches[0][2] == {"metadata": {"annotations": {d.EVICTING_ANNOTATION: None}, "resourceVersion": "51"},
                             "spec": {"active": True}}
    events = [c[2] for c in kube.calls if c[0] == "POST" and c[2]["reason"] == "RequeuedBySweeper"]
    assert [e["involvedObject"]["name"] for e in events] == ["rayjob-job-1", "rayjob-job-2"]
    assert "an eviction" in events[0]["message"] and "a move" in events[1]["message"]


def test_someone_elses_deactivated_workload_and_an_active_one_of_ours_are_left_alone() -> None:
    users = deactivated("job-1", {"user.example/paused": "yes"})
    active = deactivated("job-2", {d.EVICTING_ANNOTATION: stamp(CLOSED_AT)})
    active["spec"]["active"] = True  # the controller got to finish it
    kube = cluster([users, active], lease(renewed=CLOSED_AT - 600))
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=CLOSED_AT + 60)
    assert swept.requeued == [] and swept.kept == []
    assert [c for c in kube.calls if c[0] == "PATCH"] == []
    assert workload(kube, "job-1")["spec"]["active"] is False


def test_a_workload_that_changed_since_it_was_read_is_left_for_the_next_sweep_and_the_run_fails() -> None:
    ours = deactivated("job-1", {d.EVICTING_ANNOTATION: "not a time"}, rv="60")  # an unreadable stamp: old
    kube = cluster([ours])
    kube.failures[("PATCH", "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/rayjob-job-1")] = [
        KubeError(409, "PATCH", "workloads/rayjob-job-1", "the object has been modified")]
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=CLOSED_AT + 60)
    assert swept.requeued == [] and len(swept.errors) == 1 and "409" in swept.errors[0]
    assert workload(kube, "job-1")["spec"]["active"] is False
    swept = sweep.sweep(as_kube(kube), SETTINGS, REF, now=CLOSED_AT + 120)  # the next minute's
    assert swept.requeued == ["default/rayjob-job-1"] and workload(kube, "job-1")["spec"]["active"] is True


def test_the_grace_is_two_passes_and_never_under_ten_seconds() -> None:
    assert sweep.grace(SETTINGS) == 10.0
    assert sweep.grace(Settings(CONFIG, poll_interval=30.0)) == 60.0
    assert sweep.stamp_of("2025-12-01T10:00:00Z to on-demand") == CLOSED_AT
    assert sweep.stamp_of("yes") is None


def render_config() -> dict[str, Any]:
    """The dev stack's config.json, as the infra program renders it."""
    return render.controller_config(queue_plan(parse_settings({}, "my-project")), FallbackSettings())


def test_main_reads_the_lease_named_in_the_config_and_exits_non_zero_on_an_error(tmp_path: Path) -> None:
    other = LeaseRef("elsewhere", "my-lease")
    kube = cluster([])
    kube.objects[other.path] = {"metadata": {"name": other.name}, "spec": lease(renewed=9e9)}  # live, far ahead
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**render_config(), "lease": {"namespace": other.namespace, "name": other.name}}))
    settings = Settings.from_file(path)
    assert settings.lease == other
    assert sweep.main(as_kube(kube), settings) == 0 and writes(kube) == []
    failing = cluster([])
    failing.failures[("PUT", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/on-demand")] = [
        KubeError(403, "PUT", "resourceflavors/on-demand", "forbidden")]
    assert sweep.main(as_kube(failing), replace(settings, lease=REF)) == 1


# --- what ships: the CronJob, its RBAC, the PriorityClass, the Deployment's lease and grace -------------------------


def test_the_sweeper_runs_every_minute_from_the_controllers_image_and_configmap_never_two_at_once() -> None:
    from tests.conftest import infra

    run = infra("dev")
    cron = run.one("kubernetes:batch/v1:CronJob").inputs
    deployment = run.one("kubernetes:apps/v1:Deployment").inputs
    spec = cron["spec"]
    assert spec["schedule"] == "* * * * *" and spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] >= 10  # below 10 s the CronJob controller may miss every run
    assert spec["successfulJobsHistoryLimit"] <= 3 and spec["failedJobsHistoryLimit"] <= 3
    job = spec["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] < 60 and job["backoffLimit"] == 0  # over before the next minute's
    pod, controller_pod = job["template"]["spec"], deployment["spec"]["template"]["spec"]
    (container,), (controller,) = pod["containers"], controller_pod["containers"]
    assert container["image"] == controller["image"] and container["command"] == [*controller["command"], "--sweep"]
    assert pod["volumes"] == controller_pod["volumes"] and pod["nodeSelector"] == controller_pod["nodeSelector"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "tpu-fallback-sweeper"
    assert pod["priorityClassName"] == controller_pod["priorityClassName"]
    # its pods are not the controller's: the PodMonitoring and the Deployment's selector leave them out
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= job["template"]["metadata"]["labels"].items()


def test_the_sweeper_may_do_only_what_the_sweep_does() -> None:
    from tests.conftest import infra

    run = infra("dev")
    cluster_role = run.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
                           "tpu-cluster-fallback-sweeper-clusterrole")
    role = run.one("kubernetes:rbac.authorization.k8s.io/v1:Role", "tpu-cluster-fallback-sweeper-role")
    rules = {(tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(r["verbs"]))
             for r in cluster_role.inputs["rules"] + role.inputs["rules"]}
    assert rules == {(("resourceflavors",), ("on-demand",), ("get", "update")),
                     (("workloads",), (), ("list", "patch")),
                     (("events",), (), ("create",)),
                     (("leases",), ("tpu-fallback-controller",), ("get",))}
    assert role.inputs["metadata"]["namespace"] == "kueue-system"
    bindings = [r.inputs for r in run.resources if r.type.endswith(("/v1:RoleBinding", "/v1:ClusterRoleBinding"))
                and r.inputs["metadata"]["name"] == "tpu-fallback-sweeper"]
    assert sorted(b["roleRef"]["kind"] for b in bindings) == ["ClusterRole", "Role"]
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "tpu-fallback-sweeper",
                                  "namespace": "kueue-system"}] for b in bindings)


def test_the_controller_pod_has_its_priority_its_pod_name_for_the_lease_and_time_for_its_way_out() -> None:
    from tests.conftest import infra
    from tpu_fallback.render import fallback as render

    run = infra("dev")
    priority = run.one("kubernetes:scheduling.k8s.io/v1:PriorityClass").inputs
    assert 0 < priority["value"] < 1_000_000_000 and priority["preemptionPolicy"] == "PreemptLowerPriority"
    assert priority["globalDefault"] is False
    pod = run.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == priority["metadata"]["name"] != "system-cluster-critical"
    assert pod["terminationGracePeriodSeconds"] == render.TERMINATION_GRACE_SECONDS > 30
    (container,) = pod["containers"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    config = json.loads(run.one("kubernetes:core/v1:ConfigMap", "tpu-cluster-fallback-config").inputs["data"][
        "config.json"])
    assert config["lease"] == {"namespace": "kueue-system", "name": "tpu-fallback-controller", "durationSeconds": 15}


def test_the_pod_monitoring_scrapes_the_controllers_metrics_port_only() -> None:
    from tpu_fallback.render import fallback as render

    monitoring = render.pod_monitoring()
    assert monitoring["apiVersion"] == "monitoring.googleapis.com/v1" and monitoring["kind"] == "PodMonitoring"
    assert monitoring["metadata"]["namespace"] == render.NAMESPACE
    assert monitoring["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": render.NAME}
    (endpoint,) = monitoring["spec"]["endpoints"]
    deployment = render.deployment(*_plan_and_settings(), "default-pool")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]}


def _plan_and_settings() -> tuple[Any, Any]:
    from tpu_fallback.model.queues import queue_plan
    from tpu_fallback.model.settings import FallbackSettings, parse_settings

    return queue_plan(parse_settings({}, "my-project")), FallbackSettings()
