"""Issue 38's "done when" for `tpu-fallback status` on the simulated GKE with the real Kueue, KubeRay's part played
by the sim, and the fallback controller as shipped (dev stack: plan A on-demand, plan B DWS, one slice each).

The command runs as a user runs it: the installed console script, reading the API server through a kubeconfig file,
its JSON and its text asserted at each moment of three scenarios:

1. **The tutorial's two jobs, then a queue**: job 1 runs on plan A; job 2 goes to plan B and waits for DWS (its
   ProvisioningRequest accepted, DWS out of capacity); jobs 3 and 4 wait for quota (plan B's quota cut to one slice
   in this cluster), 1st and 2nd in line; job 2's request fails and is retried without limit; capacity comes, job 2
   runs on plan B and finishes.
2. **A plan A stock-out**: plan A has no capacity; the job admitted there gets GKE's FailedScaleUp, the controller
   closes plan A and evicts it, and it runs on plan B: status shows the closed rung (since, reopens at), the
   eviction and the controller's words on the job, and where it went.
3. **A deactivated Workload**: GKE revokes a running DWS job's capacity, Kueue deactivates the Workload; status
   says so and what happens next; the controller revives it after the cool-down and status shows that.

And its errors: a user without permission gets one line naming the verb and the resource; no cluster, one line.

Run it alone with `venv/bin/python -m pytest tests/e2e/test_status_e2e.py -m e2e -p no:xdist -s`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import fallback_scenarios as fs
from tests.e2e import scenario
from tests.e2e.gke_sim import with_run_time
from tpu_fallback.render.rayjob import status_command

pytestmark = pytest.mark.e2e

STATUS = Path(sys.executable).parent / "tpu-fallback"  # the console script the package installs
PLAN_A, PLAN_B = "on-demand", "dws"


@pytest.fixture(scope="module")
def box() -> Iterator[fs.FallbackBox]:
    with fs.FallbackBox() as cluster_box:
        yield cluster_box


def status(kubeconfig: Path, *args: str, output: str = "json", check: bool = True) -> subprocess.CompletedProcess[str]:
    answer = subprocess.run([str(STATUS), "status", "--kubeconfig", str(kubeconfig), "-o", output, *args],
                            capture_output=True, text=True, timeout=60, check=False)
    if check and answer.returncode != 0:
        raise AssertionError(f"status exited {answer.returncode}: {answer.stderr}")
    return answer


def token_of(client: Any, namespace: str, account: str) -> str:
    """A short-lived token of a ServiceAccount (created if need be), from the TokenRequest API."""
    client.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})
    answer = client.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                             "spec": {"expirationSeconds": 600}})
    return str(answer["status"]["token"])


def kubeconfig_file(path: Path, server: str, ca_file: Path, user: dict[str, Any], namespace: str | None = None
                    ) -> Path:
    """A one-context kubeconfig as a user's: the server, its CA, a user entry (token or exec), a namespace."""
    context: dict[str, Any] = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "u", "user": user}], "contexts": [{"name": "ctx", "context": context}]}))
    return path


def jobs(kubeconfig: Path) -> dict[str, dict[str, Any]]:
    """The status command's JSON, by job name."""
    return {j["job"]["name"]: j for j in json.loads(status(kubeconfig, "-n", "default").stdout)["jobs"]}


def until(watch: fs.FallbackWatch, kubeconfig: Path, predicate: Callable[[dict[str, dict[str, Any]]], bool],
          timeout: float, what: str) -> dict[str, dict[str, Any]]:
    """The status command's answer once `predicate` holds of it (the cluster polled meanwhile)."""
    seen: list[dict[str, dict[str, Any]]] = []

    def answered() -> dict[str, dict[str, Any]] | None:
        watch.poll()
        now = jobs(kubeconfig)
        seen[:] = [now]
        return now if predicate(now) else None

    try:
        return watch.wait(answered, timeout, what, interval=1.0)
    except AssertionError as err:
        err.add_note(f"status said last: {json.dumps(seen[-1] if seen else None, indent=1)[:4000]}")
        raise


def limit_plan_b_to_one_slice(client: Any) -> None:
    """Plan B's quota is the tutorial's unlimited one; one slice here, so that jobs 3 and 4 wait for quota (as on a
    stack whose rungs all have a finite quota). Only this cluster's ClusterQueue changes."""
    queue = client.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cluster-queue")
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            if flavor["name"] == PLAN_B:
                quota = {r["name"]: r["nominalQuota"] for r in next(
                    f for f in group["flavors"] if f["name"] == PLAN_A)["resources"]}
                for resource in flavor["resources"]:
                    resource["nominalQuota"] = quota[resource["name"]]
    client.apply({"apiVersion": queue["apiVersion"], "kind": "ClusterQueue", "metadata": {"name": "cluster-queue"},
                  "spec": queue["spec"]})


def test_the_tutorials_jobs_a_queue_a_retried_request_and_a_finished_job(box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim, kubeconfig = env.client, env.sim, Path(env.plane.kubeconfig)
        watch = env.watch()
        scenario.apply_infra(client, env.infra)
        limit_plan_b_to_one_slice(client)
        watch.poll()
        sim.set_capacity(fs.PLAN_B_POOL, False)  # DWS keeps job 2's request queued until capacity comes
        # Job 1 holds plan A throughout; job 2 runs long enough for a status read to see it running, beside a CPU
        # busy loop (each read is a process start and nine requests).
        objects = fs._jobs(env, 4, "st", {1: 300, 2: 30, 3: 5, 4: 5})
        first = fs._submit_one(watch, objects, "st-1")
        watch.wait_running([first], 60)
        running = until(watch, kubeconfig, lambda s: s.get("st-1", {}).get("state") == "running", 30,
                        "status: job 1 running")["st-1"]
        fs._submit_one(watch, objects, "st-2")
        waiting_dws = until(watch, kubeconfig, lambda s: ((s.get("st-2") or {}).get("provisioningRequest") or {})
                            .get("state") == "accepted", 60, "status: job 2's request accepted by DWS")["st-2"]
        text_dws = status(kubeconfig, "st-2", "-n", "default", output="text").stdout
        for name in ("st-3", "st-4"):
            fs._submit_one(watch, objects, name)
        queue = until(watch, kubeconfig, lambda s: all(s.get(n, {}).get("position") for n in ("st-3", "st-4")), 60,
                      "status: jobs 3 and 4 in line")
        text_queue = status(kubeconfig, "-n", "default", output="text").stdout
        request = next(k for k in sim.requests() if k.startswith("default/rayjob-st-2-"))
        sim.inject_condition(request, "Failed", "simulated failure: no capacity in the zone within the deadline")
        retried = until(watch, kubeconfig, lambda s: ((s.get("st-2") or {}).get("provisioningRequest") or {})
                        .get("state") == "failed" or ((s.get("st-2") or {}).get("provisioningRequest") or {})
                        .get("attempt", 0) >= 2, 60, "status: job 2's failed request")["st-2"]
        sim.set_capacity(fs.PLAN_B_POOL, True)
        # Its failed request released its quota (Kueue's Retry state), so jobs 3 and 4 may run on plan B first.
        on_b = until(watch, kubeconfig, lambda s: s.get("st-2", {}).get("state") == "running", 240,
                     "status: job 2 running on plan B")["st-2"]
        finished = until(watch, kubeconfig, lambda s: s.get("st-2", {}).get("state") == "finished", 120,
                         "status: job 2 finished")["st-2"]
        missing = status(kubeconfig, "no-such-job", "-n", "default", output="text", check=False)
    print(f"  job 2 waiting for DWS:\n{text_dws}\n  the queue:\n{text_queue}")

    assert running["where"]["rung"] == "plan A (on-demand)" and running["where"]["flavor"] == PLAN_A, running
    assert running["where"]["pool"] == fs.PLAN_A_POOL, running
    assert running["job"]["kind"] == "RayJob" and running["workload"].startswith("rayjob-st-1-"), running

    assert waiting_dws["state"] == "provisioning", waiting_dws
    assert waiting_dws["where"]["flavor"] == PLAN_B and waiting_dws["where"]["pool"] == fs.PLAN_B_POOL, waiting_dws
    assert waiting_dws["provisioningRequest"]["retriesLeft"] is None, waiting_dws  # the stack's: no limit
    assert "whole slice at once" in waiting_dws["next"], waiting_dws
    assert "st-2 (RayJob): waiting for capacity" in text_dws and "DWS accepted it" in text_dws, text_dws

    third, fourth = queue["st-3"], queue["st-4"]
    assert (third["state"], fourth["state"]) == ("waiting", "waiting"), (third, fourth)
    assert (third["position"]["inClusterQueue"], fourth["position"]["inClusterQueue"]) == (1, 2), (third, fourth)
    assert third["position"]["source"] == "estimated", third  # no visibility API served by this test cluster
    # Plan A's and plan B's chips all reserved, in the status's own words (Kueue's message names one pod set only).
    assert third["why"][0] == "TPU quota in use: on-demand 16 of 16 chips, dws 16 of 16 chips", third
    assert "st-3 (RayJob): waiting for quota" in text_queue and "1st in line (estimated)" in text_queue, text_queue
    assert "visibility API" in text_queue, text_queue  # the note on how positions were found

    said = retried["provisioningRequest"]
    assert said["attempt"] >= 2 or said["state"] == "failed", retried
    if said["state"] == "failed":
        assert "no capacity in the zone" in said["message"] and any("retried without limit" in w
                                                                    for w in retried["why"]), retried

    assert on_b["where"]["rung"] == "plan B (DWS flex-start)" and on_b["where"]["flavor"] == PLAN_B, on_b
    assert on_b["provisioningRequest"]["state"] == "provisioned", on_b
    assert finished["state"] == "finished" and finished["since"], finished
    assert finished["next"].startswith("nothing"), finished
    assert missing.returncode == 3 and "no job or Workload named no-such-job" in missing.stdout, missing


def test_a_plan_a_stockout_shows_the_closed_rung_the_eviction_and_where_the_job_went(box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim, kubeconfig = env.client, env.sim, Path(env.plane.kubeconfig)
        watch = env.watch()
        bound = env.bounds()
        scenario.apply_infra(client, env.infra)
        watch.poll()
        sim.set_capacity(fs.PLAN_A_POOL, False)
        objects = fs._jobs(env, 1, "so", {1: 30})
        first = fs._submit_one(watch, objects, "so-1")
        watch.wait(lambda: watch.tainted(), bound.to_plan_b() + 30, "plan A closed")
        closed = json.loads(status(kubeconfig, "-n", "default").stdout)
        moved = until(watch, kubeconfig, lambda s: s.get("so-1", {}).get("where", {}).get("flavor") == PLAN_B
                      and s["so-1"]["evictions"] >= 1, 90, "status: the job on plan B after its eviction")["so-1"]
        text = status(kubeconfig, "so-1", "-n", "default", output="text").stdout
        # The command the jobs stack exports for this job, as written (then this cluster's kubeconfig).
        exported = shlex.split(status_command("default", "so-1"))
        as_exported = subprocess.run([str(STATUS), *exported[1:], "--kubeconfig", str(kubeconfig)],
                                     capture_output=True, text=True, timeout=60, check=False)
        watch.wait_running([first], 90)
    print(f"  after the stock-out:\n{text}")
    (rung,) = closed["closedRungs"]
    assert rung["flavor"] == PLAN_A and rung["since"] and rung["reopensAt"] > rung["since"], closed
    reasons = [e["reason"] for e in moved["fallback"]]
    assert "EvictedFromPlanA" in reasons, moved
    assert moved["where"]["rung"] == "plan B (DWS flex-start)", moved
    assert text.startswith("closed: plan A (on-demand), flavor on-demand, since "), text
    assert "EvictedFromPlanA" in text and "evicted   1 time" in text, text
    assert exported[0] == "tpu-fallback" and as_exported.returncode == 0, as_exported
    assert "default/so-1 (RayJob): " in as_exported.stdout, as_exported.stdout


def test_a_deactivated_workload_says_so_and_then_that_it_was_revived(box: fs.FallbackBox) -> None:
    with box.scenario() as env:
        client, sim, kubeconfig = env.client, env.sim, Path(env.plane.kubeconfig)
        watch = env.watch()
        bound = env.bounds()
        scenario.apply_infra(client, env.infra)
        watch.poll()
        objects = fs._jobs(env, 2, "dz", {1: 150})
        objects = [with_run_time(o, 60) if o["metadata"]["name"] == "dz-2" else o for o in objects]
        first = fs._submit_one(watch, objects, "dz-1")
        second = fs._submit_one(watch, objects, "dz-2")
        watch.wait_running([first, second], 90)
        (request,) = [k for k in sim.requests() if k.startswith("default/rayjob-dz-2-")]
        sim.inject_condition(request, "CapacityRevoked")
        deactivated = until(watch, kubeconfig, lambda s: s.get("dz-2", {}).get("state") == "deactivated", 60,
                            "status: job 2 deactivated")["dz-2"]
        text = status(kubeconfig, "dz-2", "-n", "default", output="text").stdout
        revived = until(watch, kubeconfig, lambda s: any(e["reason"] == "Revived" for e in s["dz-2"]["fallback"]),
                        bound.cool_down + fs.CONTROLLER_LATENCY + 30, "status: job 2 revived")["dz-2"]
    print(f"  deactivated:\n{text}")
    assert any("Kueue deactivated it" in w for w in deactivated["why"]), deactivated
    assert "queues it again after its cool-down" in deactivated["next"], deactivated
    assert "dz-2 (RayJob): deactivated" in text, text
    assert revived["state"] != "deactivated", revived


def test_errors_are_one_line(box: fs.FallbackBox, tmp_path: Path) -> None:
    with box.scenario(controller=False) as env:
        client, plane = env.client, env.plane
        token = token_of(client, "default", "nobody")
        nobody = kubeconfig_file(tmp_path / "nobody.json", plane.server, plane.ca_file, {"token": token}, "team-a")
        forbidden = status(nobody, output="text", check=False)
        unreachable = kubeconfig_file(tmp_path / "unreachable.json", "https://127.0.0.1:9", plane.ca_file,
                                      {"token": "t"})
        gone = status(unreachable, output="text", check=False)
    assert forbidden.returncode == 1 and forbidden.stdout == "", forbidden
    assert forbidden.stderr.strip() == ("tpu-fallback status: no permission to list workloads.kueue.x-k8s.io in "
                                        "namespace team-a: ask your cluster admin for a Role that allows it"), forbidden
    assert gone.returncode == 1 and len(gone.stderr.strip().splitlines()) == 1, gone
    assert "cannot reach the cluster at https://127.0.0.1:9" in gone.stderr and "Traceback" not in gone.stderr, gone


def test_an_exec_credential_plugin_supplies_the_token_as_for_kubectl(box: fs.FallbackBox, tmp_path: Path) -> None:
    """GKE's kubeconfigs get their token from gke-gcloud-auth-plugin (an exec credential plugin): the status command
    runs the kubeconfig's plugin as kubectl does. Here the plugin prints a ServiceAccount's token that may list
    Workloads and LocalQueues in team-b only, so an answer there (and a 403 for anyone else, the anonymous user
    included) proves the plugin's token was used."""
    with box.scenario(controller=False) as env:
        client, plane = env.client, env.plane
        client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
        token = token_of(client, "team-b", "reader")
        client.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                      "metadata": {"name": "queue-reader", "namespace": "team-b"},
                      "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"],
                                 "verbs": ["list"]}]})
        client.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                      "metadata": {"name": "queue-reader", "namespace": "team-b"},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "queue-reader"},
                      "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "team-b"}]})
        plugin = tmp_path / "fake-auth-plugin"
        plugin.write_text("#!/bin/sh\n" "cat <<'EOF'\n" + json.dumps({
            "apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
            "status": {"token": token}}) + "\nEOF\n")
        plugin.chmod(0o755)
        kubeconfig = kubeconfig_file(tmp_path / "exec.json", plane.server, plane.ca_file, {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin),
            "interactiveMode": "Never", "provideClusterInfo": True}}, "team-b")
        allowed = status(kubeconfig, output="text", check=False)
        elsewhere = status(kubeconfig, "-n", "default", output="text", check=False)
    assert allowed.returncode == 0, allowed
    assert allowed.stdout.splitlines()[-1] == "no jobs in Kueue's queues in namespace team-b", allowed.stdout
    assert any(line.startswith("note: ") for line in allowed.stdout.splitlines()), allowed.stdout  # optional reads
    assert elsewhere.returncode == 1 and "no permission to list workloads.kueue.x-k8s.io in namespace default" in (
        elsewhere.stderr), elsewhere
