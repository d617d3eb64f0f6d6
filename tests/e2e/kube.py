"""A tiny Kubernetes REST client for the end-to-end tests (standard library only).

It speaks to the throw-away kube-apiserver started by `tests.e2e.controlplane.ControlPlane` with a bearer
token and the control plane's CA. Objects are plain dicts, as decoded from the API server's JSON.

- Resource names come from discovery (GET /api/v1 and /apis/<group>/<version>), cached per group version and
  fetched again on a miss, because CRDs are installed while the client is in use.
- `apply` is server-side apply with field manager `tpu-fallback-e2e` and `force=true`: it creates or updates
  core objects and custom resources alike.
- Every non-2xx answer raises `KubeError` with the HTTP status and the API server's own message; `get` and
  `delete` answer 404 with None and False instead.
- `watch` opens a WATCH on a connection of its own; tests/e2e/informer.py keeps kinds in memory with it.
- One keep-alive HTTPS connection per thread: the tests poll several times a second, and a TLS handshake per
  request cost the API server (and this process) more CPU than the requests themselves. A request on a reused
  connection that the server has closed meanwhile is sent once more on a new one.
"""

from __future__ import annotations

import builtins
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

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
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        url = urllib.parse.urlsplit(self.server)
        if url.scheme != "https" or not url.hostname:
            raise ValueError(f"server {server!r}: expected https://host[:port]")
        self._host, self._port = url.hostname, url.port or 443
        self._local = threading.local()  # .conn: this thread's keep-alive connection
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
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = content_type
        wait = self.timeout if timeout is None else timeout
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                conn.timeout = wait  # for a new connection's connect()
                if conn.sock is not None:
                    conn.sock.settimeout(wait)
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                raw: bytes = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as err:
                self._drop()
                if reused and attempt == 1:
                    continue  # the server closed the idle connection: once more on a new one
                raise KubeError(0, f"cannot reach {self.server}: {err}", method=method, path=path) from err
            except (OSError, http.client.HTTPException) as err:
                self._drop()
                raise KubeError(0, f"cannot reach {self.server}: {err}", method=method, path=path) from err
            if resp.will_close:
                self._drop()
            if not 200 <= resp.status < 300:
                raise _http_error(method, path, resp.status, raw)
            break
        return _decode(raw)

    def _connection(self) -> tuple[http.client.HTTPSConnection, bool]:
        """This thread's connection, and whether it was used before (it may have been closed by the server)."""
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        conn = self._local.conn = self._new_connection()
        return conn, False

    def _new_connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, context=self._ssl, timeout=self.timeout)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

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
        res = self.resource(api_version, kind)
        query = urllib.parse.urlencode({"watch": "true", "resourceVersion": resource_version,
                                        "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)})
        path = f"{res.path()}?{query}"
        conn = self._new_connection()
        try:
            conn.request("GET", path, headers=self._headers())
            resp = conn.getresponse()
            if not 200 <= resp.status < 300:
                raise _http_error("WATCH", path, resp.status, resp.read())
            if conn.sock is not None:
                conn.sock.settimeout(timeout_seconds + self.timeout)  # a server that went silent, not an idle kind
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise KubeError(0, f"cannot reach {self.server}: {err}", method="WATCH", path=path) from err
        except KubeError:
            conn.close()
            raise
        return WatchStream(conn, resp, api_version, kind)

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
    """An open WATCH: iterating yields (event type, object) until the server ends it. `interrupt()`, from another
    thread, ends it at once (the iteration then stops or raises OSError); the reading thread then `close()`s it."""

    def __init__(self, conn: http.client.HTTPSConnection, resp: http.client.HTTPResponse, api_version: str,
                 kind: str) -> None:
        self._conn = conn
        self._resp = resp
        self._api_version = api_version
        self._kind = kind

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        while True:
            line = self._resp.readline()
            if not line:
                return
            if not line.strip():
                continue
            event = json.loads(line)
            obj: Obj = event.get("object") or {}
            if event.get("type") != "ERROR":
                obj.setdefault("apiVersion", self._api_version)
                obj.setdefault("kind", self._kind)
            yield str(event.get("type")), obj

    def interrupt(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it; the socket stays its own

    def close(self) -> None:
        self.interrupt()
        self._conn.close()


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
