"""Informers for the fallback controller: a kind kept in memory by one LIST, then a WATCH (client-go's reflector and
store, in small). Standard library only, like the rest of the controller.

The controller used to LIST seven kinds on every pass, so its cost grew with the cluster (every Workload decoded
again every few seconds), not with what changed. An informer pays for a kind once, then only for its changes:

- LIST (the items and the list's resourceVersion), then WATCH from that resourceVersion with bookmarks; each event
  is applied to the store and sets `changed` (one threading.Event may be shared by many informers: the loop wakes
  on any change). A watch that ends (the server's timeoutSeconds, a dropped connection) is opened again from the
  last resourceVersion seen, bookmarks included; a 410 Gone (the server's history no longer reaches back that
  far, as an HTTP status or an ERROR event) starts over with a LIST.
- Each WATCH asks the server to end it after a timeoutSeconds drawn at random per watch (WATCH_SECONDS_RANGE), so
  informers started together do not all reconnect in the same second ever after; and the connection's reads time
  out after kube.WATCH_READ_TIMEOUT, so a watch that stalled silently is noticed (a failure, retried) within two
  minutes. That needs a healthy watch to say something more often: the API server sends bookmarks about every
  minute from its watch cache, but Events are not cached by default (kubernetes pkg/kubeapiserver/
  default_storage_factory_builder.go@v1.36.3 DefaultWatchCacheSizes: events 0), and a watch served straight from
  etcd sends external clients no bookmarks (k8s.io/apiserver@v0.36.3 pkg/storage/etcd3/watcher.go), so an Event
  watch asks for a timeoutSeconds below the read timeout (UNCACHED_WATCH_SECONDS_RANGE) and ends on time instead.
- A failed LIST or WATCH is retried after a back-off (RETRY_FIRST doubling up to RETRY_MAX, each delay drawn
  between half of it and all of it, so informers that failed together do not retry together); the failure stays in
  `error` (None again once a LIST or WATCH works) for the controller to log, and `failing_for()` says how long the
  store has not been followed. `synced` is False until the first LIST answered: the store is empty, not "none".
- `optional`: a kind whose API may not be served (a CRD not installed: LIST answers 404) reads as empty, and the
  LIST is tried again every NOT_SERVED_RETRY seconds.
- `transform` slims each object as it is stored (the controller keeps the fields it reads: a Workload's pod
  templates would otherwise stay in memory for every Workload of the cluster). The LIST comes in pages of
  PAGE_SIZE, each slimmed before the next is decoded, so not every whole object of a kind is in memory at once.

`step()` is one round (a LIST, or one WATCH followed to its end) and returns how long to wait before the next;
the thread started by `start()` repeats it. Tests call it directly with a fake `Transport`, no thread, no clock.
"""

from __future__ import annotations

import http.client
import logging
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tpu_fallback.fallback.kube import WATCH_READ_TIMEOUT, KubeError

log = logging.getLogger("tpu-fallback")

# The server ends each watch after timeoutSeconds drawn from this range (it is opened again at once): client-go's
# reflector draws its own from [5, 10) minutes (k8s.io/client-go@v0.36.3 tools/cache/reflector.go minWatchTimeout).
WATCH_SECONDS_RANGE = (240, 360)
# For kinds the API server does not serve from its watch cache (no bookmarks): shorter than the read timeout.
UNCACHED_WATCH_SECONDS_RANGE = (60, 90)
RETRY_FIRST, RETRY_MAX = 0.5, 15.0  # seconds before retrying a failed LIST or WATCH: doubled per failure, capped
NOT_SERVED_RETRY = 60.0  # seconds between LISTs of an optional kind whose API is not served
EMPTY_WATCH_PAUSE = 1.0  # after a watch that ended without a single event or bookmark (a server or proxy closing it)
PAGE_SIZE = 500  # items per LIST page (client-go's pager default)
Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)


class WatchStream(Protocol):
    def __iter__(self) -> Iterator[tuple[str, Obj]]: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What an informer needs of the API (kube.Kube has both; a test fakes them)."""

    def list_pages(self, path: str, limit: int) -> Iterator[tuple[list[Obj], str]]: ...

    def watch(self, path: str, resource_version: str, timeout_seconds: int) -> WatchStream: ...


def watch_seconds_range(path: str) -> tuple[int, int]:
    """The timeoutSeconds range for a watch of `path`: Events (core or events.k8s.io) are not in the API server's
    watch cache by default, so their watches get no bookmarks and must end before the read timeout."""
    resource = urllib.parse.urlsplit(path).path.rstrip("/").rsplit("/", 1)[-1]
    return UNCACHED_WATCH_SECONDS_RANGE if resource == "events" else WATCH_SECONDS_RANGE


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


class Informer:
    """One collection (`path`, with its selectors) kept up to date by a watch; see the module docstring."""

    def __init__(self, transport: Transport, path: str, *, name: str | None = None, optional: bool = False,
                 changed: threading.Event | None = None, count: Callable[[str], None] | None = None,
                 transform: Callable[[Obj], Obj] | None = None, watch_seconds: int | None = None,
                 page_size: int = PAGE_SIZE, rng: random.Random | None = None) -> None:
        self.transport = transport
        self.path = path
        self.name = name or path
        self.optional = optional
        self.changed = changed if changed is not None else threading.Event()
        self._count = count  # called with "lists", "events" or "errors" (the controller's metrics)
        self._transform = transform
        self.watch_seconds = watch_seconds  # None: drawn per watch from watch_seconds_range(path)
        self._rng = rng or random.Random()
        self.page_size = page_size
        self.lists = 0  # LISTs answered (1 unless a watch fell too far behind or the API was not served)
        self.events = 0  # ADDED, MODIFIED and DELETED events applied
        self.errors = 0  # LISTs and WATCHes that failed
        self.error: str | None = None  # the last failure; None once a LIST or WATCH works again
        self.served = True  # False while an optional kind's API answers 404
        self._synced = False
        self._version: str | None = None  # where the next watch starts; None: LIST first
        self._failing_since: float | None = None  # time.monotonic() of the first failure in a row
        self._failures = 0  # in a row, for the back-off
        self._store: dict[Key, Obj] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Informer({self.name})"

    # --- reading ------------------------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """A LIST has answered (the store holds the kind, not merely nothing yet)."""
        return self._synced

    @property
    def resource_version(self) -> str | None:
        """Where the next watch starts (None: the next round LISTs)."""
        return self._version

    def items(self) -> list[Obj]:
        """The objects as last seen, by namespace and name (a LIST's order): a new list each call, of objects the
        informer never changes (an event replaces one whole). Read them, do not change them."""
        with self._lock:
            return [self._store[k] for k in sorted(self._store)]

    def failing_for(self, now: float | None = None) -> float:
        """Seconds since LISTs and WATCHes started failing (0 while they work): how far behind the store may be."""
        since = self._failing_since
        return 0.0 if since is None else (time.monotonic() if now is None else now) - since

    # --- one round ----------------------------------------------------------------------------------------------

    def step(self) -> float:
        """A LIST when there is no resourceVersion to watch from, else one WATCH followed until it ends. Returns the
        seconds to wait before the next round (0: at once)."""
        try:
            if self._version is None:
                return self._relist()
            return self._follow(self._version)
        except KubeError as err:
            if err.status == 410 or (err.status == 404 and self.optional):
                self._version = None  # too old to resume (or the CRD went away): LIST again
                return 0.0
            return self._failed(err)
        except (OSError, http.client.HTTPException, ValueError) as err:
            return self._failed(err)
        except Exception as err:  # noqa: BLE001 -- an odd object must not end the thread unseen: kept as the error
            return self._failed(err)

    def _relist(self) -> float:
        store: dict[Key, Obj] = {}
        version = ""
        try:
            for items, page_version in self.transport.list_pages(self.path, self.page_size):
                store.update((key_of(o), self._slim(o)) for o in items)
                version = page_version  # every page carries the whole list's
        except KubeError as err:
            if err.status != 404 or not self.optional:
                raise
            with self._lock:
                self._store = {}
            self.served, self._synced = False, True
            self._healthy()
            self.changed.set()
            return NOT_SERVED_RETRY  # _version stays None: the next round LISTs again
        with self._lock:
            self._store = store
        self.served, self._synced, self._version = True, True, version
        self.lists += 1
        self._tell("lists")
        self._healthy()
        self.changed.set()
        return 0.0

    def _follow(self, version: str) -> float:
        lowest, highest = watch_seconds_range(self.path)
        seconds = self.watch_seconds if self.watch_seconds is not None else self._rng.randint(lowest, highest)
        stream = self.transport.watch(self.path, version, seconds)
        self._stream = stream
        received = False
        try:
            if self._stop.is_set():
                return 0.0
            for kind, obj in stream:
                received = True
                if kind == "ERROR":  # a Status
                    code = int(obj.get("code") or 0)
                    if code == 410:  # Expired: the watch cache's history starts after `version`
                        self._version = None
                        return 0.0
                    raise KubeError(code, "WATCH", self.path, str(obj.get("message") or obj))
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(kind, obj)
                elif kind != "BOOKMARK":
                    raise ValueError(f"watch event of unknown type {kind!r}")
                # Resume from here, so a watch that breaks in the middle loses and repeats nothing.
                self._version = str((obj.get("metadata") or {}).get("resourceVersion") or self._version)
        except TimeoutError as err:  # the read timeout: silent for longer than a healthy watch ever is
            raise TimeoutError(f"the watch stalled: nothing read for {WATCH_READ_TIMEOUT:.0f}s ({err})") from err
        finally:
            self._stream = None
            stream.close()
        self._healthy()
        return 0.0 if received else EMPTY_WATCH_PAUSE

    def _apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        with self._lock:
            if kind == "DELETED":  # also a pod leaving Pending on a watch selecting status.phase=Pending
                self._store.pop(key, None)
            else:
                self._store[key] = self._slim(obj)
        self.events += 1
        self._tell("events")
        self.changed.set()

    def _slim(self, obj: Obj) -> Obj:
        return self._transform(obj) if self._transform is not None else obj

    def _healthy(self) -> None:
        self.error, self._failing_since, self._failures = None, None, 0

    def _failed(self, err: Exception) -> float:
        self.error = str(err) if isinstance(err, KubeError) else f"{type(err).__name__}: {err}"
        self.errors += 1
        self._tell("errors")
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        self._failures += 1
        delay = float(min(RETRY_MAX, RETRY_FIRST * 2 ** (self._failures - 1)))
        return delay / 2 + self._rng.uniform(0, delay / 2)  # jittered: informers failing together spread out

    def _tell(self, what: str) -> None:
        if self._count is not None:
            self._count(what)

    # --- the thread ---------------------------------------------------------------------------------------------

    def start(self) -> Informer:
        if self._stop.is_set():
            raise RuntimeError(f"{self} was stopped; make a new one")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.interrupt()  # the thread wakes from its read and sees the stop
        if self._thread is not None and timeout > 0:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self.step()
            if delay and self._stop.wait(delay):
                return
