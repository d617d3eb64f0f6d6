"""The end-to-end tests' Kubernetes client: a thin layer over the fallback controller's own HTTP client
(tpu_fallback/fallback/kube.py `Kube`: its transport, keep-alive connection and WATCH stream), with what the tests
need besides: discovery, server-side apply, deletes, and errors that carry the API server's message and reason.

It speaks to the throw-away kube-apiserver started by `tests.e2e.controlplane.ControlPlane` with a bearer
token and the control plane's CA. Objects are plain dicts, as decoded from the API server's JSON.

- Resource names come from discovery (GET /api/v1 and /apis/<group>/<version>), cached per group version and
  fetched again on a miss, because CRDs are installed while the client is in use.
- `apply` is server-side apply with field manager `tpu-fallback-e2e` and `force=true`: it creates or updates
  core objects and custom resources alike.
- Every non-2xx answer raises `KubeError` with the HTTP status and the API server's own message; `get` and
  `delete` answer 404 with None and False instead.
- `watch` opens a WATCH on a connection of its own; tests/e2e/informer.py keeps kinds in memory with it.
- One keep-alive HTTPS connection per thread (a `Kube.fork()` each): the tests poll several times a second, and a
  TLS handshake per request cost the API server (and this process) more CPU than the requests themselves. A request
  on a reused connection that the server has closed meanwhile is sent once more on a new one (by `Kube.send`).
"""

from __future__ import annotations

import builtins
import http.client
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tpu_fallback.fallback import kube as product

T = TypeVar("T")

FIELD_MANAGER = "tpu-fallback-e2e"
POLL_INTERVAL = 0.2

Obj = dict[str, Any]


class KubeError(Exception):
    """A request the API server answered with a non-2xx status (or that could not reach it: status 0)."""

    def __init__(self, status: int, message: str, *, method: str = "", path: str = "", reason: str = "") -> None:
        self.status = status
        self.message = message
        self.method = method
        self.path = path
        self.reason = reason
        where = f"{method} {path}: " if method else ""
        why = f" {reason}" if reason else ""
        super().__init__(f"{where}HTTP {status}{why}: {message}")


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def base(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"

    def path(self, name: str | None = None, namespace: str | None = None, subresource: str | None = None) -> str:
        if self.namespaced and namespace:
            url = f"{self.base}/namespaces/{urllib.parse.quote(namespace)}/{self.plural}"
        else:
            url = f"{self.base}/{self.plural}"
        if name is not None:
            url += f"/{urllib.parse.quote(name)}"
            if subresource:
                url += f"/{subresource}"
        return url


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = POLL_INTERVAL) -> T:
    """Call `predicate` every `interval` seconds until it returns something other than None or False.

    Returns that value; raises TimeoutError naming `what` after `timeout` seconds. Exceptions from the
    predicate propagate (catch them inside it if they mean "not yet").
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


class KubeClient:
    """Bearer-token client for one API server. Not thread-safe for discovery refreshes (harmless races only)."""

    def __init__(self, server: str, ca_file: Path, token: str, *, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.ca_file = Path(ca_file)
        self.token = token
        self.timeout = timeout
        self._kube = product.Kube(self.server, ssl.create_default_context(cafile=str(self.ca_file)),
                                  lambda: token, timeout)
        self._local = threading.local()  # .kube: this thread's fork of it (its own keep-alive connection)
        # group version -> kind -> Resource
        self._discovery: dict[str, dict[str, Resource]] = {}

    # --- raw requests -------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request; returns the decoded JSON answer (or the text if it is not JSON).

        `body` is JSON-encoded unless it is bytes or str already.
        """
        url = path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        try:
            raw = self._thread_kube().send(method, url, data, content_type if data is not None else None,
                                           verb=method.lower(), timeout=timeout)
        except product.KubeError as err:
            raise _http_error(method, path, err.status, err.body.encode()) from None
        except (OSError, http.client.HTTPException) as err:
            raise KubeError(0, f"cannot reach {self.server}: {err}", method=method, path=path) from err
        return _decode(raw)

    def _thread_kube(self) -> product.Kube:
        kube: product.Kube | None = getattr(self._local, "kube", None)
        if kube is None:
            kube = self._local.kube = self._kube.fork()
        return kube

    # --- discovery ------------------------------------------------------------------------------------------

    def resource(self, api_version: str, kind: str) -> Resource:
        """(plural, namespaced) of a kind, from discovery; refreshes the group version once on a miss."""
        cached = self._discovery.get(api_version, {}).get(kind)
        if cached is not None:
            return cached
        found = self._discover(api_version).get(kind)
        if found is None:
            raise KubeError(404, f"the server does not serve kind {kind!r} in {api_version}",
                            method="GET", path=Resource(api_version, kind, "", False).base, reason="NotFound")
        return found

    def serves(self, api_version: str, kind: str) -> bool:
        """True if discovery lists the kind (refreshing on a miss)."""
        try:
            self.resource(api_version, kind)
        except KubeError as err:
            if err.status == 404:
                return False
            raise
        return True

    def invalidate_discovery(self) -> None:
        self._discovery.clear()

    def _discover(self, api_version: str) -> dict[str, Resource]:
        base = Resource(api_version, "", "", False).base
        doc = self.request("GET", base)
        kinds: dict[str, Resource] = {}
        for item in doc.get("resources", []):
            name: str = item["name"]
            if "/" in name:  # subresource such as jobs/status
                continue
            kinds[item["kind"]] = Resource(api_version, item["kind"], name, bool(item["namespaced"]))
        self._discovery[api_version] = kinds
        return kinds

    def _locate(self, obj: Mapping[str, Any], *, need_name: bool = True) -> tuple[Resource, str, str | None]:
        try:
            api_version: str = obj["apiVersion"]
            kind: str = obj["kind"]
            name: str = obj["metadata"]["name"] if need_name else obj["metadata"].get("name", "")
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"object needs apiVersion, kind and metadata.name: missing {err}") from None
        res = self.resource(api_version, kind)
        namespace: str | None = None
        if res.namespaced:
            namespace = obj["metadata"].get("namespace") or "default"
        return res, name, namespace

    # --- verbs ----------------------------------------------------------------------------------------------

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        """Server-side apply (create or update); namespaced objects without a namespace go to `default`."""
        res, name, namespace = self._locate(obj)
        body = _with_namespace(obj, namespace)
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        result: Obj = self.request("PATCH", res.path(name, namespace), body,
                                   content_type="application/apply-patch+yaml", query=query)
        return result

    def apply_status(self, obj: Mapping[str, Any]) -> Obj:
        """Server-side apply to the status subresource (nothing here runs the controllers that own status)."""
        res, name, namespace = self._locate(obj)
        body = _with_namespace(obj, namespace)
        result: Obj = self.request("PATCH", res.path(name, namespace, "status"), body,
                                   content_type="application/apply-patch+yaml",
                                   query={"fieldManager": FIELD_MANAGER, "force": "true"})
        return result

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> Obj:
        """POST (metadata.generateName works). dry_run=True runs admission, webhooks included, and stores nothing."""
        res, _, namespace = self._locate(obj, need_name=False)
        body = _with_namespace(obj, namespace)
        query = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            query["dryRun"] = "All"
        result: Obj = self.request("POST", res.path(None, namespace), body, query=query)
        return result

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None if it does not exist."""
        res = self.resource(api_version, kind)
        try:
            result: Obj = self.request("GET", res.path(name, _ns(res, namespace)))
        except KubeError as err:
            if err.status == 404:
                return None
            raise
        return result

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None,
    ) -> builtins.list[Obj]:
        """Items of a kind (all namespaces if `namespace` is None), with apiVersion and kind filled in."""
        return self.list_at(api_version, kind, namespace, label_selector)[0]

    def list_at(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None,
    ) -> tuple[builtins.list[Obj], str]:
        """`list`, and the resourceVersion the list is at (where a watch of what changed since starts)."""
        res = self.resource(api_version, kind)
        query = {"labelSelector": label_selector} if label_selector else None
        doc = self.request("GET", res.path(None, namespace if res.namespaced else None), query=query)
        items: list[Obj] = doc.get("items") or []
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items, str((doc.get("metadata") or {}).get("resourceVersion", ""))

    def watch(self, api_version: str, kind: str, resource_version: str, *, timeout_seconds: int) -> WatchStream:
        """Open a WATCH of a kind in every namespace from `resource_version`, bookmarks included; the server ends
        it after `timeout_seconds`. On its own connection (it stays open): see WatchStream."""
        path = self.resource(api_version, kind).path()
        try:
            stream = self._kube.watch(path, resource_version, timeout_seconds)
        except product.KubeError as err:
            raise _http_error("WATCH", path, err.status, err.body.encode()) from None
        except (OSError, http.client.HTTPException) as err:
            raise KubeError(0, f"cannot reach {self.server}: {err}", method="WATCH", path=path) from err
        return WatchStream(stream, api_version, kind)

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str = "Background",
    ) -> bool:
        """Delete; False if it was not there.

        There is no garbage collector in this control plane: dependents (a Job's Workload, say) stay behind,
        and "Foreground" would leave the owner stuck with a foregroundDeletion finalizer.
        """
        res = self.resource(api_version, kind)
        try:
            self.request("DELETE", res.path(name, _ns(res, namespace)),
                         {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation_policy})
        except KubeError as err:
            if err.status == 404:
                return False
            raise
        return True

    def wait_for(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        """See the module-level `wait_for` (polls every 0.2 s)."""
        return wait_for(predicate, timeout, what)


class WatchStream:
    """An open WATCH (the product's `kube.WatchStream`): iterating yields (event type, object), each object with its
    apiVersion and kind, until the server ends it. `interrupt()`, from another thread, ends it at once (the iteration
    then stops or raises OSError); the reading thread then `close()`s it."""

    def __init__(self, stream: product.WatchStream, api_version: str, kind: str) -> None:
        self._stream = stream
        self._api_version = api_version
        self._kind = kind

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        for kind, obj in self._stream:
            if kind != "ERROR":
                obj.setdefault("apiVersion", self._api_version)
                obj.setdefault("kind", self._kind)
            yield kind, obj

    def interrupt(self) -> None:
        self._stream.interrupt()

    def close(self) -> None:
        self._stream.close()


def _ns(res: Resource, namespace: str | None) -> str | None:
    if not res.namespaced:
        return None
    return namespace or "default"


def _with_namespace(obj: Mapping[str, Any], namespace: str | None) -> Obj:
    body = dict(obj)
    if namespace is not None:
        body["metadata"] = {**obj["metadata"], "namespace": namespace}
    return body


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _http_error(method: str, path: str, status: int, payload: bytes) -> KubeError:
    message = payload.decode(errors="replace").strip()
    reason = ""
    try:
        doc = json.loads(payload)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        message = str(doc.get("message") or message)
        reason = str(doc.get("reason") or "")
    return KubeError(status, message or "(no message)", method=method, path=path, reason=reason)
