"""Read what `tpu-fallback status` explains, through the user's kubeconfig as kubectl does.

Kubernetes' own Python client loads the kubeconfig (KUBECONFIG or ~/.kube/config, a context), client certificates,
tokens and exec credential plugins such as GKE's gke-gcloud-auth-plugin. Objects are read as JSON (plain dicts), as
the API server serves them: the explanation (explain.py) needs no generated models, and Kueue's and the
autoscaler's custom resources have none in the client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from tpu_fallback.status.explain import Cluster

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
PROVISIONING = "/apis/autoscaling.x-k8s.io/v1"
# The fallback controller's ConfigMap (tpu_fallback/render/fallback.py NAME and NAMESPACE; tests check they agree).
CONTROLLER_CONFIG = ("kueue-system", "tpu-fallback-controller")
TIMEOUT = 15.0  # seconds per request: a status command must answer or say why


class StatusError(Exception):
    """One line for the user: what could not be read, and why."""


class ForbiddenError(StatusError):
    """403: the user may not read it."""


class Reader:
    """GET requests through a kubeconfig's context; JSON bodies as dicts."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        # Imported here: the client takes a second to import, and `--help` or a usage error should not wait for it.
        from kubernetes import client, config

        try:
            self.api = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except (config.ConfigException, FileNotFoundError, OSError) as err:
            raise StatusError(f"no cluster to read: {_first_line(err)} (set KUBECONFIG or --kubeconfig, or run "
                              "`gcloud container clusters get-credentials <cluster> --location <region>`)") from err
        chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
        self.namespace = str(((chosen or {}).get("context") or {}).get("namespace") or "default")
        self.host = str(self.api.configuration.host)
        self._client = client

    def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """The object or list at `path`; None when the server does not serve it (404, or an unavailable
        aggregated API: 503). ForbiddenError on 403, StatusError on anything else."""
        from urllib3.exceptions import HTTPError

        params = list((query or {}).items())
        try:
            method, url, headers, body, post = self.api.param_serialize(
                method="GET", resource_path=path, query_params=params, auth_settings=["BearerToken"])
            response = self.api.call_api(method, url, headers, body, post, _request_timeout=TIMEOUT)
            response.read()
        except HTTPError as err:
            raise StatusError(f"cannot reach the cluster at {self.host}: {_first_line(err)}") from err
        except self._client.exceptions.ApiException as err:  # exec plugins and TLS setup raise it too
            raise StatusError(f"cannot read {path} from {self.host}: {_first_line(err)}") from err
        status = int(response.status)
        if status in (404, 503):
            return None
        if status == 401:
            raise StatusError(f"the cluster at {self.host} refused the credentials of your kubeconfig (401): "
                              "log in again (for GKE: `gcloud auth login`)")
        if status == 403:
            raise ForbiddenError(_forbidden(path, response.data))
        if status >= 400:
            raise StatusError(f"GET {path} failed ({status}): {_message(response.data)}")
        data: dict[str, Any] = json.loads(response.data)
        return data


def _message(data: bytes | str | None) -> str:
    try:
        return str(json.loads(data or b"{}").get("message") or data)
    except ValueError:
        return str(data)[:200]


def _forbidden(path: str, data: bytes | str | None) -> str:
    """`no permission to list workloads.kueue.x-k8s.io in namespace team-a` from the API server's Status."""
    try:
        details = json.loads(data or b"{}").get("details") or {}
    except ValueError:
        details = {}
    parts = [p for p in path.split("/") if p]
    group = details.get("group") or (parts[1] if parts[0] == "apis" else "")
    kind = details.get("kind") or parts[-1]
    namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
    verb = "get" if "name" in details and details.get("name") else "list"
    where = f" in namespace {namespace}" if namespace else " (cluster-wide)"
    resource = f"{kind}.{group}" if group else kind
    return f"no permission to {verb} {resource}{where}: ask your cluster admin for a Role that allows it"


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0][:300]


def _items(data: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return list((data or {}).get("items") or [])


def read_cluster(reader: Reader, namespace: str | None) -> Cluster:
    """One snapshot: `namespace` None reads every namespace. Missing optional pieces become notes, never errors:
    only the Workloads themselves are required."""
    scope = f"/namespaces/{namespace}" if namespace else ""
    notes: list[str] = []
    workloads = reader.get(f"{KUEUE}{scope}/workloads")
    if workloads is None:
        raise StatusError(f"Kueue is not installed on the cluster at {reader.host}: it serves no "
                          "kueue.x-k8s.io/v1beta2 Workloads")

    def optional(path: str, what: str, query: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        try:
            return reader.get(path, query)
        except ForbiddenError as err:
            notes.append(f"{what} not shown: {err}")
            return None

    local_queues = optional(f"{KUEUE}{scope}/localqueues", "queues")
    flavors = optional(f"{KUEUE}/resourceflavors", "closed rungs")
    cluster_queues = optional(f"{KUEUE}/clusterqueues", "TPU quota in use")
    checks = optional(f"{KUEUE}/admissionchecks", "admission checks")
    configs = optional(f"{KUEUE}/provisioningrequestconfigs", "DWS retry limits")
    requests = optional(f"{PROVISIONING}{scope}/provisioningrequests", "ProvisioningRequests")
    events = optional(f"/api/v1{scope}/events", "the fallback's Events",
                      {"fieldSelector": "involvedObject.kind=Workload"})
    ns, name = CONTROLLER_CONFIG
    config_map = optional(f"/api/v1/namespaces/{ns}/configmaps/{name}", "the fallback's cool-down")
    controller = None
    if config_map is not None:
        try:
            controller = json.loads((config_map.get("data") or {}).get("config.json") or "null")
        except ValueError:
            notes.append(f"the fallback's config ({ns}/{name} config.json) is not JSON: its cool-down not shown")
    positions = _positions(reader, _items(workloads), notes)
    return Cluster(now=time.time(), workloads=_items(workloads), flavors=_items(flavors),
                   local_queues=_items(local_queues), cluster_queues=_items(cluster_queues),
                   provisioning_requests=_items(requests),
                   provisioning_configs=_items(configs), admission_checks=_items(checks), events=_items(events),
                   controller=controller, positions=positions, notes=tuple(notes))


def _positions(reader: Reader, workloads: list[dict[str, Any]], notes: list[str]
               ) -> dict[tuple[str, str], int] | None:
    """Places in the ClusterQueue from Kueue's visibility API (pendingworkloads of each LocalQueue that has a
    waiting Workload); None when the API is not served, so that explain.py estimates them."""
    wanted = sorted({(str(w["metadata"].get("namespace")), str((w.get("spec") or {}).get("queueName") or ""))
                     for w in workloads if not (w.get("status") or {}).get("admission")})
    positions: dict[tuple[str, str], int] = {}
    for namespace, queue in wanted:
        if not queue:
            continue
        try:
            data = reader.get(f"{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads")
        except ForbiddenError as err:
            notes.append(f"queue positions estimated: {err}")
            return None
        except StatusError as err:
            notes.append(f"queue positions estimated: Kueue's visibility API failed: {err}")
            return None
        if data is None:
            notes.append("queue positions estimated from the Workloads (priority, then age): Kueue's visibility API "
                         "(visibility.kueue.x-k8s.io/v1beta2) is not served here; Kueue's Helm chart installs it with "
                         "the VisibilityOnDemand feature, on by default since Kueue v0.9")
            return None
        for item in data.get("items") or []:
            positions[(namespace, str(item["metadata"]["name"]))] = int(item.get("positionInClusterQueue", 0)) + 1
    return positions
