"""Informers for the end-to-end harness: a kind kept in memory by one LIST and then a WATCH (client-go's reflector
and store, in small), so that the simulated GKE and the scenarios' watches read the cluster without a request.

They polled with LISTs before, several kinds every 0.2 or 0.3 s. In the stock-out scenario (74 s) that was 2 600 of
the API server's 3 400 requests, and most of its CPU and of this process's (each LIST decoded every pod again).

- `Informer(client, api_version, kind).start()` lists the kind in every namespace, then follows a WATCH from that
  list's resourceVersion in a thread of its own; a watch that ends (the server's timeoutSeconds, a dropped
  connection) is opened again from the last resourceVersion seen (bookmarks included), and one the server answers
  410 Gone (its history no longer goes back that far) starts over with a new LIST. `items()` and `get()` read the
  store; an informer that cannot reach the server says so in `error`.
- The store follows the server moments late (a watch event's way from etcd to here). A reader that acts on what it
  reads (the sim) records its own writes: `observe(obj)` stores a write's answer at once, and `forget(obj)` drops a
  deleted object and ignores what the watch still brings for it until its DELETED event (or TOMBSTONE_SECONDS).
  An event never replaces a newer object: resourceVersions are opaque by the API's conventions, but with one API
  server on etcd they are etcd revisions and the API server's own watch cache orders by them, so they are compared
  here as numbers.
- `ClusterCache(client)`: the informers of one cluster by kind, each started on first use and shared by every
  reader (the sim, its Ray dashboard and the watches).
"""

from __future__ import annotations

import builtins
import http.client
import threading
import time
from collections.abc import Mapping
from typing import Any

from tests.e2e.kube import KubeClient, KubeError, Obj

WATCH_SECONDS = 60  # the server ends each watch after this (timeoutSeconds); it is opened again at once
RETRY_SECONDS = 0.5  # after a failed LIST or WATCH
TOMBSTONE_SECONDS = 10.0
Key = tuple[str, str]  # (namespace or "", name)


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _revision(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return 0


class Informer:
    """One kind in every namespace, kept up to date by a watch (see the module docstring)."""

    def __init__(self, client: KubeClient, api_version: str, kind: str) -> None:
        self.client = client
        self.api_version = api_version
        self.kind = kind
        self.lists = 0  # LISTs made (1 unless the watch fell too far behind)
        self.events = 0  # watch events applied
        self.watches = 0  # watches opened (one more each time the server ends one)
        self.error: str | None = None  # the last failure, None once a LIST or WATCH works again
        self._store: dict[Key, Obj] = {}
        self._tombstones: dict[Key, float] = {}  # key -> until when the watch's news of it are ignored
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream: Any = None  # the open WatchStream, so that stop() can end it at once
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Informer({self.api_version} {self.kind})"

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Informer:
        """Start the thread and wait for the first LIST (TimeoutError with the last error after `timeout`). Any
        thread may call it, any number of times: the first call starts the informer."""
        if self._stop.is_set():
            raise RuntimeError(f"{self} was stopped; make a new one")
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True)
                self._thread.start()
        if not self._synced.wait(timeout):
            raise TimeoutError(f"{self}: no LIST answered within {timeout:g} s (last error: {self.error})")
        return self

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.interrupt()
        thread = self._thread
        if thread is not None:
            thread.join(5)
        with self._lock:
            self._thread = None

    # --- reading ------------------------------------------------------------------------------------------------

    def items(self, namespace: str | None = None) -> builtins.list[Obj]:
        """The objects (of one namespace, or all), as last seen, in a LIST's order (by namespace and name). Read
        them, do not change them."""
        with self._lock:
            return [self._store[k] for k in sorted(self._store) if namespace is None or k[0] == namespace]

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        with self._lock:
            return self._store.get((namespace or "", name))

    # --- a reader's own writes ------------------------------------------------------------------------------------

    def observe(self, obj: Mapping[str, Any]) -> None:
        """Store the answer of a create or update now, ahead of its watch event."""
        with self._lock:
            self._put(dict(obj))

    def forget(self, obj: Mapping[str, Any]) -> None:
        """Drop an object the reader deleted; what the watch still brings of it, up to its DELETED event, is old."""
        key = key_of(obj)
        with self._lock:
            self._store.pop(key, None)
            self._tombstones[key] = time.monotonic() + TOMBSTONE_SECONDS

    # --- the thread -----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        version: str | None = None  # where the next watch starts; None: LIST first
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._follow(version)
                self.error = None
            except KubeError as err:
                if self._stop.is_set():
                    return
                if err.status == 410:
                    version = None
                self.error = str(err)
                self._stop.wait(RETRY_SECONDS)
            except (OSError, http.client.HTTPException, ValueError) as err:
                if self._stop.is_set():
                    return
                self.error = f"{type(err).__name__}: {err}"
                self._stop.wait(RETRY_SECONDS)

    def _relist(self) -> str:
        items, version = self.client.list_at(self.api_version, self.kind)
        now = time.monotonic()
        with self._lock:
            self._tombstones = {k: until for k, until in self._tombstones.items() if until > now}
            self._store = {key_of(o): o for o in items if key_of(o) not in self._tombstones}
        self.lists += 1
        self._synced.set()
        return version

    def _follow(self, version: str) -> str | None:
        """One watch from `version`: apply its events; returns where the next one starts (None: LIST again)."""
        stream = self.client.watch(self.api_version, self.kind, version, timeout_seconds=WATCH_SECONDS)
        self._stream = stream
        self.watches += 1
        try:
            if self._stop.is_set():
                return version
            for kind, obj in stream:
                if kind == "ERROR":
                    if obj.get("code") == 410:  # Expired: the watch cache's history starts after `version`
                        return None
                    raise KubeError(int(obj.get("code") or 0), str(obj.get("message")), method="WATCH",
                                    path=self.kind, reason=str(obj.get("reason") or ""))
                version = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                with self._lock:
                    self._apply(kind, obj)
                self.events += 1
            return version
        finally:
            self._stream = None
            stream.close()

    def _apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        if key in self._tombstones:
            if kind == "DELETED" or self._tombstones[key] <= time.monotonic():
                del self._tombstones[key]
            if kind == "DELETED" or key in self._tombstones:
                return
        if kind == "DELETED":
            current = self._store.get(key)
            if current is None or _revision(current) <= _revision(obj):
                self._store.pop(key, None)
            return
        self._put(obj)

    def _put(self, obj: Obj) -> None:
        key = key_of(obj)
        current = self._store.get(key)
        if current is None or _revision(current) <= _revision(obj):
            self._store[key] = obj


class ClusterCache:
    """The informers of one cluster, one per kind, each started on first use."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._informers: dict[tuple[str, str], Informer] = {}
        self._lock = threading.Lock()

    def informer(self, api_version: str, kind: str) -> Informer:
        with self._lock:
            found = self._informers.get((api_version, kind))
            if found is None:
                found = self._informers[(api_version, kind)] = Informer(self.client, api_version, kind)
        return found.start()  # outside the lock: the first LIST may take a moment

    def items(self, api_version: str, kind: str, namespace: str | None = None) -> builtins.list[Obj]:
        return self.informer(api_version, kind).items(namespace)

    def stop(self) -> None:
        with self._lock:
            informers, self._informers = list(self._informers.values()), {}
        for informer in informers:
            informer.stop()
