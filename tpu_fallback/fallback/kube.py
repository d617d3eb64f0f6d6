"""The few Kubernetes API calls the fallback controller makes, over HTTPS with the standard library only.

In a pod it uses its ServiceAccount's projected token (re-read for every request: the kubelet rotates it) and the
cluster CA; outside (tests, a laptop) a kubeconfig with a server, a CA and a token or client certificate.

One keep-alive connection for every call of one thread (the loop makes its reads and writes from one thread): a
TLS handshake per request cost the API server more than the requests did (with a connection per request, the
handshakes were 12 % of kube-apiserver's CPU in the end-to-end stock-out scenario). A call on a reused connection
that the server closed meanwhile is sent once more on a new one. Another thread takes a `fork()` (its own
connection); a WATCH (`watch()`) streams on a connection of its own, closed with the stream.

`on_request` is called with the verb of every request sent (get, list, watch, create, update, patch), forks and
watches included: the controller counts them (tpu_fallback_api_requests_total).

`send()` is the transport under every call (any method, the raw answer): the end-to-end tests' client
(tests/e2e/kube.py) is a thin layer on it, so that one HTTP client serves the controller and the tests.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
FIELD_MANAGER = "tpu-fallback-controller"
# Seconds a WATCH may stay silent before it counts as stalled (a connection dropped without a FIN or RST: a NAT or
# load balancer forgetting it, a control-plane VM gone). A healthy watch is never silent that long: the API server
# sends a BOOKMARK about every minute on watches served from its watch cache (k8s.io/apiserver@v0.36.3
# pkg/storage/cacher/cacher.go defaultBookmarkFrequency = time.Minute, cache_watcher.go nextBookmarkTime), and
# ends each watch after its timeoutSeconds, which the informers keep below this for kinds served without the
# cache, hence without bookmarks (watch.py watch_seconds_range). So a stall is noticed within two minutes.
WATCH_READ_TIMEOUT = 110.0


class KubeError(Exception):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body  # the API server's answer (a Status object's JSON, as a rule)


class Kube:
    def __init__(self, server: str, context: ssl.SSLContext, token: Callable[[], str | None],
                 timeout: float = 30.0, on_request: Callable[[str], None] | None = None) -> None:
        self.server = server.rstrip("/")
        url = urllib.parse.urlsplit(self.server)
        if url.scheme != "https" or not url.hostname:
            raise ValueError(f"server {server!r}: expected https://host[:port]")
        self._host, self._port = url.hostname, url.port or 443
        self._base = url.path.rstrip("/")  # a server URL may carry a path prefix
        self._context = context
        self._token = token
        self._timeout = timeout
        self._conn: http.client.HTTPSConnection | None = None
        self.on_request = on_request

    def fork(self) -> Kube:
        """The same server, credentials and request counter on a connection of its own, for another thread."""
        return Kube(self.server, self._context, self._token, self._timeout, self.on_request)

    @classmethod
    def in_cluster(cls) -> Kube:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
        token_file = SERVICE_ACCOUNT / "token"
        return cls(f"https://{host}:{port}", context, lambda: token_file.read_text().strip())

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Kube:
        """The current context of a kubeconfig (JSON, or YAML when PyYAML is installed). No exec plugins."""
        text = path.read_text()
        try:
            config = json.loads(text)
        except json.JSONDecodeError:
            import yaml  # only outside the cluster; the image has no PyYAML and needs none

            config = yaml.safe_load(text)
        context_name = config["current-context"]
        context = _named(config, "contexts", context_name)["context"]
        cluster = _named(config, "clusters", context["cluster"])["cluster"]
        user = _named(config, "users", context["user"]).get("user") or {}
        ssl_context = ssl.create_default_context(
            cafile=_file(cluster, "certificate-authority"),
        )
        cert = _file(user, "client-certificate")
        if cert:
            ssl_context.load_cert_chain(cert, _file(user, "client-key"))
        token = user.get("token")
        return cls(cluster["server"], ssl_context, lambda: token)

    # --- calls -----------------------------------------------------------------------------------------------

    def get(self, path: str) -> Any:
        return self._call("GET", path, verb="get")

    def list(self, path: str) -> list[Any]:
        return self.list_at(path)[0]

    def list_at(self, path: str) -> tuple[builtins.list[Any], str]:
        """The items, and the resourceVersion the list is at (where a watch of what changed since starts)."""
        answer = self._call("GET", path, verb="list")
        return list(answer.get("items") or []), str((answer.get("metadata") or {}).get("resourceVersion") or "")

    def list_pages(self, path: str, limit: int) -> Iterator[tuple[builtins.list[Any], str]]:
        """One LIST in pages of up to `limit` items (limit and continue): each page's items and the resourceVersion
        of the whole list. A reader can drop what it does not keep of a page before the next is decoded. A continue
        token the server no longer honours answers 410 (KubeError): list again from the start."""
        token: str | None = None
        while True:
            query = urllib.parse.urlencode({"limit": str(limit), **({"continue": token} if token else {})})
            answer = self._call("GET", f"{path}{'&' if '?' in path else '?'}{query}", verb="list")
            meta = answer.get("metadata") or {}
            yield list(answer.get("items") or []), str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if token is None:
                return

    def watch(self, path: str, resource_version: str, timeout_seconds: int,
              read_timeout: float = WATCH_READ_TIMEOUT) -> WatchStream:
        """A WATCH of `path` (a collection, with its selectors) from `resource_version`, bookmarks included, on a new
        connection of its own (it stays open for up to `timeout_seconds`, when the server ends it). A read that
        waits longer than `read_timeout` raises TimeoutError (an OSError): the watch stalled (see
        WATCH_READ_TIMEOUT)."""
        query = urllib.parse.urlencode({"watch": "true", "resourceVersion": resource_version,
                                        "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)})
        conn = self._new_connection()
        try:
            self._count("watch")
            conn.request("GET", f"{self._base}{path}{'&' if '?' in path else '?'}{query}", headers=self._headers())
            response = conn.getresponse()
            if not 200 <= response.status < 300:
                raise KubeError(response.status, "WATCH", path, response.read().decode(errors="replace"))
            if conn.sock is not None:
                conn.sock.settimeout(read_timeout)
        except BaseException:
            conn.close()
            raise
        return WatchStream(conn, response)

    def create(self, path: str, obj: Mapping[str, Any]) -> Any:
        return self._call("POST", self._managed(path), obj, "application/json", verb="create")

    def replace(self, path: str, obj: Mapping[str, Any]) -> Any:
        """PUT: fails with 409 when obj's metadata.resourceVersion is no longer the stored one."""
        return self._call("PUT", self._managed(path), obj, "application/json", verb="update")

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        return self._call("PATCH", self._managed(path), patch, "application/merge-patch+json", verb="patch")

    @staticmethod
    def _managed(path: str) -> str:
        """Writes name this controller as their field manager (managedFields say who changed what)."""
        return f"{path}{'&' if '?' in path else '?'}fieldManager={FIELD_MANAGER}"

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _count(self, verb: str) -> None:
        if self.on_request is not None:
            self.on_request(verb)

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None,
              content_type: str | None = None, *, verb: str) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        return json.loads(self.send(method, path, data, content_type, verb=verb) or b"{}")

    def send(self, method: str, path: str, data: bytes | None = None, content_type: str | None = None, *,
             verb: str, timeout: float | None = None) -> bytes:
        """One request on this thread's keep-alive connection; the answer's body as it came. A non-2xx answer
        raises KubeError; a connection that fails raises OSError or http.client.HTTPException. `timeout`: this
        request's, instead of the client's."""
        headers = self._headers(content_type)
        for attempt in (1, 2):
            reused = self._conn is not None
            conn = self._connection()
            try:
                self._count(verb)
                wait = self._timeout if timeout is None else timeout
                conn.timeout = wait  # for a new connection's connect()
                if conn.sock is not None:
                    conn.sock.settimeout(wait)
                conn.request(method, self._base + path, body=data, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if reused and attempt == 1:
                    continue  # the server closed the idle connection: once more on a new one
                raise
            except (OSError, http.client.HTTPException):
                self.close()
                raise
            if response.will_close:
                self.close()
            if not 200 <= response.status < 300:
                raise KubeError(response.status, method, path, payload.decode(errors="replace"))
            return payload
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPSConnection:
        if self._conn is None:
            self._conn = self._new_connection()
        return self._conn

    def _new_connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, context=self._context, timeout=self._timeout)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class WatchStream:
    """An open WATCH: iterating yields (event type, object) until the server ends it (then the iteration stops) or
    the connection fails (OSError). `interrupt()`, from another thread, ends it at once; `close()` frees it."""

    def __init__(self, conn: http.client.HTTPSConnection, response: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._response = response

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        while True:
            line = self._response.readline()  # one JSON event per line
            if not line:
                return
            if line.strip():
                event = json.loads(line)
                yield str(event.get("type")), event.get("object") or {}

    def interrupt(self) -> None:
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it

    def close(self) -> None:
        self.interrupt()
        self._conn.close()


def _named(config: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return entry  # type: ignore[no-any-return]
    raise KeyError(f"kubeconfig has no {section[:-1]} named {name!r}")


def _file(section: Mapping[str, Any], key: str) -> str | None:
    """A kubeconfig file reference (`key`) or inline data (`key-data`, base64) as a path."""
    if section.get(key):
        return str(section[key])
    data = section.get(f"{key}-data")
    if not data:
        return None
    handle = tempfile.NamedTemporaryFile(prefix="kubeconfig-", delete=False)  # noqa: SIM115 - kept for ssl
    with handle:
        handle.write(base64.b64decode(data))
    return handle.name
