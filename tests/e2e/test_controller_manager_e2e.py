"""The kube-controller-manager of the e2e control plane: each controller the harness runs does its job.

`ControlPlane` starts kube-controller-manager (built from the same k8s.io/kubernetes module as the API server)
with the garbage collector, namespace, job, serviceaccount and serviceaccount-token controllers. There is no
scheduler or kubelet, so Pods stay Pending. Selected by the `e2e` marker, like test_fallback_e2e.py. The last three
tests check the harness itself: a cluster started from a seed (controlplane.py) reaches its own Kueue for
conversions, and the informer that the simulated GKE and the scenarios' watches read (informer.py) follows the API
server.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.kube import KubeClient

if TYPE_CHECKING:
    from tests.e2e.controlplane import ControlPlane

pytestmark = pytest.mark.e2e

TIMEOUT = 60.0


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    from tests.e2e.controlplane import ControlPlane

    with ControlPlane() as cp:
        pids = cp.pids()
        assert set(pids) == {"etcd", "apiserver", "controller-manager", "kueue"}, pids
        yield cp
    # The harness stopped (and reaped) every child, the controller manager included.
    alive = {name: pid for name, pid in pids.items() if _alive(pid)}
    assert not alive, f"still running after the control plane stopped: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def namespace(client: KubeClient, name: str) -> str:
    """A fresh namespace, once the serviceaccount controller has given it its `default` ServiceAccount."""
    client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    client.wait_for(lambda: client.get("v1", "ServiceAccount", "default", name), TIMEOUT,
                    f"the default ServiceAccount in {name}")
    return name


def configmap(name: str, ns: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def test_namespace_deletion_completes(plane: ControlPlane) -> None:
    client = plane.client
    ns = namespace(client, "kcm-namespace")
    client.apply(configmap("content", ns))
    assert client.delete("v1", "Namespace", ns)
    # The namespace controller deletes the content (every namespaced kind, Kueue's and KubeRay's included),
    # then removes the `kubernetes` finalizer; without it the namespace would stay Terminating.
    client.wait_for(lambda: client.get("v1", "Namespace", ns) is None, TIMEOUT, f"namespace {ns} to be gone")
    assert client.get("v1", "ConfigMap", "content", ns) is None


def test_foreground_deletion_garbage_collects_the_dependent(plane: ControlPlane) -> None:
    client = plane.client
    ns = namespace(client, "kcm-gc")
    parent = client.apply(configmap("parent", ns))
    child = client.apply(configmap("child", ns, owner=parent))
    assert child["metadata"]["ownerReferences"][0]["uid"] == parent["metadata"]["uid"]
    assert client.delete("v1", "ConfigMap", "parent", ns, propagation_policy="Foreground")
    # The garbage collector deletes the child, then removes the parent's foregroundDeletion finalizer.
    client.wait_for(lambda: client.get("v1", "ConfigMap", "child", ns) is None, TIMEOUT, "the child to be collected")
    client.wait_for(lambda: client.get("v1", "ConfigMap", "parent", ns) is None, TIMEOUT, "the parent to be gone")


def test_service_account_token_secret_gets_a_token_the_api_server_accepts(plane: ControlPlane) -> None:
    client = plane.client
    ns = namespace(client, "kcm-token")
    client.apply({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "default-token", "namespace": ns,
                     "annotations": {"kubernetes.io/service-account.name": "default"}},
    })

    def with_token() -> dict[str, Any] | None:
        got = client.get("v1", "Secret", "default-token", ns)
        return got if got and "token" in (got.get("data") or {}) else None

    secret = client.wait_for(with_token, TIMEOUT, "the token in the service-account-token Secret")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data["namespace"] == ns.encode()
    assert data["ca.crt"] == plane.ca_file.read_bytes()  # --root-ca-file
    # Signed with --service-account-private-key-file: the API server verifies it with --service-account-key-file.
    as_sa = KubeClient(plane.server, plane.ca_file, data["token"].decode())
    review = as_sa.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:default"


def test_job_gets_a_pod_that_stays_pending(plane: ControlPlane) -> None:
    client = plane.client
    ns = namespace(client, "kcm-job")  # the Pod needs the default ServiceAccount (ServiceAccount admission)
    client.apply({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sleep", "namespace": ns},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        }}},
    })
    job = client.get("batch/v1", "Job", "sleep", ns) or {}
    assert not job["spec"].get("suspend")  # no queue-name label: Kueue leaves it alone
    (pod,) = client.wait_for(
        lambda: client.list("v1", "Pod", ns, label_selector="batch.kubernetes.io/job-name=sleep") or None,
        TIMEOUT, "the Job's Pod")
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "sleep", job["metadata"]["uid"])
    assert pod["status"].get("phase", "Pending") == "Pending"
    assert not pod["spec"].get("nodeName")  # no scheduler
    client.wait_for(lambda: (client.get("batch/v1", "Job", "sleep", ns) or {}).get("status", {}).get("active") == 1,
                    TIMEOUT, "the Job's status.active == 1")


def test_a_seeded_cluster_converts_through_its_own_kueue(plane: ControlPlane) -> None:
    """The cluster seed's CRDs name a placeholder conversion webhook; this cluster patched in its own Kueue's port, so
    a ClusterQueue stored at v1beta2 reads at v1beta1 (the API server calls Kueue's /convert for it)."""
    client = plane.client
    crd = client.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "clusterqueues.kueue.x-k8s.io") or {}
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == (
        f"https://127.0.0.1:{plane.webhook_port}/convert")
    client.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "seeded"},
                  "spec": {"namespaceSelector": {}}})
    try:
        old = client.request("GET", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/seeded")
        assert (old["apiVersion"], old["metadata"]["name"]) == ("kueue.x-k8s.io/v1beta1", "seeded")
    finally:
        client.delete("kueue.x-k8s.io/v1beta2", "ClusterQueue", "seeded")


def test_an_informer_follows_the_api_server_across_watch_restarts(plane: ControlPlane,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's informer (tests/e2e/informer.py): a LIST, then watches the server ends every second (opened again
    from the last resourceVersion, no second LIST); creates, updates and deletes arrive; a reader's own delete hides
    the object at once; stop() ends the thread."""
    from tests.e2e import informer as inf

    client = plane.client
    ns = namespace(client, "informer")
    client.apply(configmap("before", ns))
    monkeypatch.setattr(inf, "WATCH_SECONDS", 1)
    informer = inf.Informer(client, "v1", "ConfigMap").start()
    try:
        assert (informer.get("before", ns) or {}).get("data") == {"k": "v"}  # from the LIST
        # Two watches ended by the server (after its 1 s) and opened again from where they were, no LIST between.
        client.wait_for(lambda: informer.watches >= 3, TIMEOUT, "the server to end two watches and the informer to "
                        "open them again")
        assert informer.lists == 1
        client.apply({**configmap("after", ns), "data": {"k": "1"}})
        client.wait_for(lambda: informer.get("after", ns), TIMEOUT, "the new ConfigMap in the informer")
        client.apply({**configmap("after", ns), "data": {"k": "2"}})
        client.wait_for(lambda: (informer.get("after", ns) or {}).get("data") == {"k": "2"}, TIMEOUT, "the update")
        assert client.delete("v1", "ConfigMap", "after", ns)
        client.wait_for(lambda: informer.get("after", ns) is None, TIMEOUT, "the delete")
        assert [c["metadata"]["name"] for c in informer.items(ns)] == ["before"]
        informer.forget(client.get("v1", "ConfigMap", "before", ns) or {})  # as the sim does once it deleted one
        assert informer.get("before", ns) is None and client.get("v1", "ConfigMap", "before", ns) is not None
        assert (informer.lists, informer.error) == (1, None), informer.error
        assert informer.events >= 3
    finally:
        informer.stop()
    assert informer._thread is None
    with pytest.raises(RuntimeError, match="was stopped"):
        informer.start()


def test_an_informer_lists_again_when_its_watch_is_too_old(plane: ControlPlane) -> None:
    """A watch from a resourceVersion older than the API server's history is answered 410 Gone: the informer lists
    again and goes on from there."""
    from tests.e2e.informer import Informer

    client = plane.client
    ns = namespace(client, "informer-gone")
    client.apply(configmap("there", ns))

    class AncientFirstList(KubeClient):
        listed = 0

        def list_at(self, *args: Any, **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
            items, version = super().list_at(*args, **kwargs)
            self.listed += 1
            return items, ("1" if self.listed == 1 else version)

    informer = Informer(AncientFirstList(plane.server, plane.ca_file, plane.token), "v1", "ConfigMap").start()
    try:
        client.wait_for(lambda: informer.lists >= 2 or None, TIMEOUT, "a second LIST after the 410")
        client.apply(configmap("later", ns))
        client.wait_for(lambda: informer.get("later", ns), TIMEOUT, "a ConfigMap created after the second LIST")
        assert informer.get("there", ns) is not None and informer.lists == 2
    finally:
        informer.stop()
