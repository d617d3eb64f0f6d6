"""`tpu-fallback status` without a cluster: the explanation (tpu_fallback/status/explain.py) of Workloads, requests
and Events shaped as Kueue v0.19.2, the autoscaler's ProvisioningRequest API and the fallback controller write them,
the renderings, and the command line. tests/e2e/test_status_e2e.py runs it against the real Kueue."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tpu_fallback.fallback import decide
from tpu_fallback.render import fallback as render_fallback
from tpu_fallback.status import explain as ex
from tpu_fallback.status import read, render
from tpu_fallback.status.cli import main

NOW = 1_800_000_000.0
REPO = Path(__file__).resolve().parents[1]
TWO_PLANS = {"planAFlavors": ["on-demand"], "planBFlavors": ["dws"], "coolDownSeconds": 1800,
             "taintKey": decide.TAINT_KEY}


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(kind: str, status: str, at: float, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "lastTransitionTime": stamp(at), "reason": reason, "message": message}


def workload(name: str, *, created: float = NOW - 600, conditions: list[dict[str, Any]] | None = None,
             flavor: str | None = None, active: bool = True, priority: int = 0, checks: list[dict[str, Any]] = (),  # type: ignore[assignment]
             cluster: str | None = None, uid: str | None = None, queue: str = "user-queue") -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions or []}
    if flavor:
        status["admission"] = {"clusterQueue": "cluster-queue", "podSetAssignments": [
            {"name": "head", "flavors": {"cpu": "system"}},
            {"name": "workers", "flavors": {"google.com/tpu": flavor, "cpu": flavor}}]}
    if checks:
        status["admissionChecks"] = checks
    if cluster:
        status["clusterName"] = cluster
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"rayjob-{name}-abcde", "namespace": "default", "uid": uid or f"uid-{name}",
                         "creationTimestamp": stamp(created),
                         "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name,
                                              "uid": f"job-{name}", "controller": True}]},
            "spec": {"queueName": queue, "priority": priority, "active": active}, "status": status}


LOCAL_QUEUE = {"metadata": {"name": "user-queue", "namespace": "default"}, "spec": {"clusterQueue": "cluster-queue"}}
FLAVORS = [{"metadata": {"name": "on-demand"}, "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": "od-pool"}}},
           {"metadata": {"name": "dws"}, "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": "dws-pool"}}}]
NO_QUOTA = ("couldn't assign flavors to pod set workers: insufficient unused quota for google.com/tpu in flavor "
            "on-demand, 16 more needed")


def request(wl: dict[str, Any], attempt: int, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": f"{wl['metadata']['name']}-dws-prov-{attempt}", "namespace": "default",
                         "ownerReferences": [{"kind": "Workload", "name": wl["metadata"]["name"],
                                              "uid": wl["metadata"]["uid"]}]},
            "status": {"conditions": list(conditions)}}


def cluster(*workloads: dict[str, Any], now: float = NOW, **more: Any) -> ex.Cluster:
    return ex.Cluster(now=now, workloads=workloads, flavors=more.pop("flavors", FLAVORS),
                      local_queues=[LOCAL_QUEUE], controller=more.pop("controller", TWO_PLANS), **more)


def one(c: ex.Cluster, name: str) -> ex.JobStatus:
    return next(s for s in ex.explain(c) if s.job_name == name)


def test_the_names_status_shares_with_the_controller_agree() -> None:
    """status may not import the controller (layers); what it repeats must match it."""
    assert decide.TAINT_KEY == ex.TAINT_KEY
    words = {getattr(w, f) for w in (decide.PLAN_WORDS, decide.LADDER_WORDS)
             for f in ("stock_out", "reopened", "evicted", "moving", "moved")}
    controller = (REPO / "tpu_fallback" / "fallback" / "controller.py").read_text()
    told = set(re.findall(r'_event_on_workload\([^)]*?"([A-Z][A-Za-z]+)"', controller, re.S))
    told -= {"Normal", "Warning"}  # the Event types in its signature
    assert told, "no Event reasons found in the controller"
    assert words | told <= ex.FALLBACK_REASONS, (words | told) - ex.FALLBACK_REASONS
    assert read.CONTROLLER_CONFIG == (render_fallback.NAMESPACE, render_fallback.NAME)


def test_running_on_plan_a_says_where() -> None:
    wl = workload("job1", flavor="on-demand", conditions=[cond("QuotaReserved", "True", NOW - 500),
                                                          cond("Admitted", "True", NOW - 500),
                                                          cond("PodsReady", "True", NOW - 300)])
    s = one(cluster(wl), "job1")
    assert (s.state, s.rung, s.flavor, s.pool, s.since) == (ex.State.RUNNING, "plan A (on-demand)", "on-demand",
                                                            "od-pool", NOW - 300)
    assert (s.job_kind, s.cluster_queue, s.position) == ("RayJob", "cluster-queue", None)


def test_waiting_for_quota_says_what_each_tpu_flavor_has_in_use() -> None:
    queue = {"metadata": {"name": "cluster-queue"},
             "spec": {"resourceGroups": [
                 {"coveredResources": ["cpu"], "flavors": [{"name": "default-cpu", "resources": [
                     {"name": "cpu", "nominalQuota": "10"}]}]},
                 {"coveredResources": ["cpu", "google.com/tpu"], "flavors": [
                     {"name": "default-cpu", "resources": [{"name": "google.com/tpu", "nominalQuota": "0"}]},
                     {"name": "on-demand", "resources": [{"name": "google.com/tpu", "nominalQuota": "16"}]},
                     {"name": "dws", "resources": [{"name": "google.com/tpu", "nominalQuota": "1G"}]}]}]},
             "status": {"flavorsReservation": [{"name": "on-demand", "resources": [
                 {"name": "google.com/tpu", "total": "16"}]}]}}
    wl = workload("q", conditions=[cond("QuotaReserved", "False", NOW - 10, "Pending", NO_QUOTA)])
    s = one(cluster(wl, cluster_queues=[queue]), "q")
    assert s.why[0] == "TPU quota in use: on-demand 16 of 16 chips, dws 0 of no limit", s.why
    assert one(cluster(wl), "q").why[0] == f"Kueue: {NO_QUOTA}"  # the queue not read: no line


def test_waiting_for_quota_in_kueue_order_priority_then_age() -> None:
    older = workload("old", created=NOW - 900, conditions=[cond("QuotaReserved", "False", NOW - 800, "Pending",
                                                                NO_QUOTA)])
    newer = workload("new", created=NOW - 100, conditions=[cond("QuotaReserved", "False", NOW - 90, "Pending",
                                                                NO_QUOTA)])
    urgent = workload("urgent", created=NOW - 50, priority=100)
    found = {s.job_name: s for s in ex.explain(cluster(older, newer, urgent))}
    assert [found[n].position for n in ("urgent", "old", "new")] == [1, 2, 3]
    assert found["old"].position_source == "estimated" and found["old"].state == ex.State.WAITING
    assert f"Kueue: {NO_QUOTA}" in found["old"].why
    served = {("default", "rayjob-old-abcde"): 7}
    assert one(cluster(older, positions=served), "old").position == 7
    assert one(cluster(older, positions=served), "old").position_source == "visibility API"


def test_waiting_for_dws_with_a_request_kueue_retries() -> None:
    check = {"name": "dws-prov", "state": "Pending", "message": ""}
    wl = workload("job2", flavor="dws", conditions=[cond("QuotaReserved", "True", NOW - 200)], checks=[check])
    accepted = request(wl, 1, cond("Accepted", "True", NOW - 190),
                       cond("Provisioned", "False", NOW - 190, "Waiting", "Waiting for resources. ETA unknown"))
    s = one(cluster(wl, provisioning_requests=[accepted]), "job2")
    assert s.state == ex.State.PROVISIONING and s.rung == "plan B (DWS flex-start)"
    assert s.provisioning is not None and s.provisioning.state == "accepted"
    assert s.provisioning.message == "Waiting for resources. ETA unknown" and s.provisioning.retries_left is None
    failed = request(wl, 2, cond("Failed", "True", NOW - 10, "Failed", "no capacity in us-east5-b"))
    limited = {"metadata": {"name": "dws-config"}, "spec": {"retryStrategy": {"backoffLimitCount": 3}}}
    ac = {"metadata": {"name": "dws-prov"}, "spec": {"parameters": {"name": "dws-config"}}}
    s = one(cluster(wl, provisioning_requests=[accepted, failed], provisioning_configs=[limited],
                    admission_checks=[ac]), "job2")
    assert s.provisioning is not None and (s.provisioning.attempt, s.provisioning.retries_left) == (2, 2)
    assert any("failed: no capacity in us-east5-b; 2 retries left" in w for w in s.why), s.why
    assert "new ProvisioningRequest" in s.next
    unlimited = {"metadata": {"name": "dws-config"}, "spec": {"retryStrategy": {"backoffLimitCount": 2**31 - 1}}}
    s = one(cluster(wl, provisioning_requests=[failed], provisioning_configs=[unlimited], admission_checks=[ac]),
            "job2")
    assert any("retried without limit" in w for w in s.why), s.why


def test_a_request_of_another_workload_is_not_this_ones() -> None:
    wl = workload("job2", flavor="dws", conditions=[cond("QuotaReserved", "True", NOW - 200)],
                  checks=[{"name": "dws-prov", "state": "Pending"}])
    other = workload("job2x", uid="uid-other")
    stray = request(other, 1, cond("Failed", "True", NOW - 5))
    stray["metadata"]["name"] = "rayjob-job2-abcde-dws-prov-1"  # the right name, another owner
    assert one(cluster(wl, provisioning_requests=[stray]), "job2").provisioning is None


def test_deactivated_by_kueue_and_what_the_fallback_does_next() -> None:
    wl = workload("job3", active=False, conditions=[
        cond("Evicted", "True", NOW - 60, "DeactivatedDueToAdmissionCheck",
             "The workload is deactivated due to admission check dws-prov: capacity revoked")])
    told = {"involvedObject": {"kind": "Workload", "name": "rayjob-job3-abcde", "namespace": "default"},
            "metadata": {"namespace": "default"}, "reason": "DeactivatedByKueue", "message": "queues it again in 30m",
            "lastTimestamp": stamp(NOW - 55)}
    s = one(cluster(wl, events=[told]), "job3")
    assert s.state == ex.State.DEACTIVATED and s.since == NOW - 60
    assert "Kueue deactivated it (DeactivatedDueToAdmissionCheck)" in s.why
    # deactivated 60 s before NOW (08:00:00Z), a cool-down of 1800 s
    assert s.next == "the fallback controller queues it again after its cool-down (at 08:29:00Z), up to 3 times"
    assert [e.reason for e in s.fallback] == ["DeactivatedByKueue"]
    no_fallback = one(cluster(wl, controller=None), "job3")
    assert "until someone sets spec.active to true" in no_fallback.next


def test_a_closed_rung_is_shown_with_its_reopening_time() -> None:
    closed = {"metadata": {"name": "on-demand"}, "spec": {
        "nodeLabels": {"cloud.google.com/gke-nodepool": "od-pool"},
        "nodeTaints": [{"key": decide.TAINT_KEY, "value": str(int(NOW - 100)), "effect": "NoSchedule"}]}}
    tainted = [closed, FLAVORS[1]]
    waiting = workload("job4", conditions=[cond("QuotaReserved", "False", NOW - 10, "Pending", NO_QUOTA)])
    s = one(cluster(waiting, flavors=tainted), "job4")
    (rung,) = s.closed_rungs
    assert (rung.flavor, rung.closed_since, rung.reopens_at) == ("on-demand", NOW - 100, NOW - 100 + 1800)
    assert any(w.startswith("plan A (on-demand) (on-demand) is closed since") for w in s.why), s.why


def test_finished_failed_evicted_and_multikueue() -> None:
    done = workload("ok", conditions=[cond("Finished", "True", NOW - 5, "Succeeded", "Job finished successfully")])
    bad = workload("bad", conditions=[cond("Finished", "True", NOW - 5, "Failed", "BackoffLimitExceeded")])
    evicted = workload("ev", conditions=[cond("Evicted", "True", NOW - 3, "PodsReadyTimeout", "Exceeded timeout")])
    remote = workload("far", flavor="on-demand", cluster="worker-us-east5",
                      conditions=[cond("Admitted", "True", NOW - 30), cond("PodsReady", "True", NOW - 20)])
    found = {s.job_name: s for s in ex.explain(cluster(done, bad, evicted, remote))}
    assert found["ok"].state == ex.State.FINISHED and found["bad"].state == ex.State.FAILED
    assert found["ev"].state == ex.State.EVICTED and "Exceeded timeout (PodsReadyTimeout)" in found["ev"].why[0]
    assert found["far"].worker_cluster == "worker-us-east5"


def test_text_and_json() -> None:
    wl = workload("job1", created=NOW - 190, conditions=[cond("QuotaReserved", "False", NOW - 185, "Pending",
                                                              NO_QUOTA)])
    statuses = ex.explain(cluster(wl))
    out = render.text(statuses, NOW, ["queue positions estimated"], "namespace default")
    assert out.splitlines()[0] == "note: queue positions estimated"
    assert "default/job1 (RayJob): waiting for quota for 3m5s, 1st in line (estimated)" in out
    assert "  workload  rayjob-job1-abcde, queue user-queue -> cluster-queue" in out
    data = json.loads(render.as_json(statuses, NOW))
    (job,) = data["jobs"]
    assert (job["state"], job["seconds"], job["position"]) == ("waiting", 185, {"inClusterQueue": 1,
                                                                                "source": "estimated"})
    assert render.text([], NOW, scope="namespace x") == "no jobs in Kueue's queues in namespace x\n"


@pytest.mark.parametrize(("seconds", "shown"), [(5, "5s"), (185, "3m5s"), (7500, "2h5m"), (90000, "1d1h")])
def test_ages_as_kubectl_shows_them(seconds: int, shown: str) -> None:
    assert ex.age(seconds) == shown


def test_a_forbidden_list_names_the_verb_and_the_resource() -> None:
    body = json.dumps({"kind": "Status", "reason": "Forbidden", "details": {"group": "kueue.x-k8s.io",
                                                                          "kind": "workloads"}})
    assert read._forbidden("/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads", body) == (
        "no permission to list workloads.kueue.x-k8s.io in namespace team-a: ask your cluster admin for a Role "
        "that allows it")
    assert read._forbidden("/apis/kueue.x-k8s.io/v1beta2/resourceflavors", "{}").startswith(
        "no permission to list resourceflavors.kueue.x-k8s.io (cluster-wide)")


def test_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["status", "--interval", "0"])
    assert usage.value.code == 2 and "--interval 0 is invalid" in capsys.readouterr().err
    assert main(["status", "--kubeconfig", str(tmp_path / "none.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tpu-fallback status: no cluster to read: ") and len(err.splitlines()) == 1, err
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")
               if e.value.startswith("tpu_fallback.")}
    assert scripts == {"tpu-fallback": "tpu_fallback.status.cli:main",
                       "kubectl-tpu_fallback": "tpu_fallback.status.cli:main"}


def test_watch_redraws_on_change_only(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """--watch reads every interval and prints again only when something but the ages changed."""
    from tpu_fallback.status import cli

    waiting = workload("job1", conditions=[cond("QuotaReserved", "False", NOW - 10, "Pending", NO_QUOTA)])
    running = workload("job1", flavor="on-demand", conditions=[cond("Admitted", "True", NOW - 1),
                                                                cond("PodsReady", "True", NOW - 1)])
    reads = iter([cluster(waiting), cluster(waiting, now=NOW + 5), cluster(running, now=NOW + 7)])

    class FakeReader:
        namespace = "default"

        def __init__(self, *_: object) -> None:
            pass

    def read_once(_reader: object, _namespace: str | None) -> ex.Cluster:
        try:
            return next(reads)
        except StopIteration:
            raise KeyboardInterrupt from None

    monkeypatch.setattr(cli, "Reader", FakeReader)
    monkeypatch.setattr(cli, "read_cluster", read_once)
    monkeypatch.setattr("tpu_fallback.status.cli.time.sleep", lambda _s: None)
    assert main(["status", "--watch"]) == 0
    out = capsys.readouterr().out
    assert out.count("default/job1 (RayJob)") == 2, out  # the first read and the change, not the age-only one
    assert "waiting for quota for 10s" in out and "---" in out and "running for 8s" in out, out


class CannedReader(read.Reader):
    """Answers GETs from a dict of path -> body (None: not served; an exception: raised), as the API server would."""

    def __init__(self, answers: dict[str, Any]) -> None:  # no kubeconfig: the answers stand in for the server
        self.answers, self.namespace, self.host = answers, "default", "https://test"
        self.asked: list[str] = []

    def get(self, path: str, query: Any = None) -> dict[str, Any] | None:
        self.asked.append(path)
        answer = self.answers.get(path)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_reading_the_cluster_places_from_the_visibility_api_and_notes_what_it_may_not_read() -> None:
    waiting = workload("w", conditions=[cond("QuotaReserved", "False", NOW - 10, "Pending", NO_QUOTA)])
    kueue = "/apis/kueue.x-k8s.io/v1beta2"
    answers: dict[str, Any] = {
        f"{kueue}/namespaces/default/workloads": {"items": [waiting]},
        f"{kueue}/namespaces/default/localqueues": {"items": [LOCAL_QUEUE]},
        f"{kueue}/resourceflavors": read.ForbiddenError("no permission to list resourceflavors.kueue.x-k8s.io"),
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/default/localqueues/user-queue/pendingworkloads": {
            "items": [{"metadata": {"name": "rayjob-w-abcde"}, "positionInClusterQueue": 4}]},
    }
    reader = CannedReader(answers)
    got = read.read_cluster(reader, "default")
    assert got.positions == {("default", "rayjob-w-abcde"): 5}  # Kueue counts from 0
    assert got.notes == ("closed rungs not shown: no permission to list resourceflavors.kueue.x-k8s.io",)
    assert one(got, "w").position == 5 and one(got, "w").position_source == "visibility API"
    del answers["/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/default/localqueues/user-queue/pendingworkloads"]
    got = read.read_cluster(CannedReader(answers), "default")
    assert got.positions is None and any("is not served here" in n for n in got.notes), got.notes
    assert one(got, "w").position_source == "estimated"
    with pytest.raises(read.StatusError, match="Kueue is not installed"):
        read.read_cluster(CannedReader({}), "default")
