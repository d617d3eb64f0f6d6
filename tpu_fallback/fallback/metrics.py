"""The controller's Prometheus metrics and its /metrics and /healthz endpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Metrics:
    """Prometheus text counters and gauges, served on /metrics. `values` is keyed by series: the name, and for a
    labelled family its labels too (`tpu_fallback_watch_events_total{resource="workloads"}`)."""

    # Series of these appear as they are first counted, one per label value.
    LABELLED = ("tpu_fallback_api_requests_total",  # {verb}: every request the controller sent
                "tpu_fallback_watch_lists_total", "tpu_fallback_watch_events_total",  # {resource}: per informer
                "tpu_fallback_watch_errors_total",
                # {rung}: a capacity ladder's, in place of the plan A series (use_rungs)
                "tpu_fallback_rung_closed", "tpu_fallback_rung_closes_total", "tpu_fallback_rung_reopens_total",
                "tpu_fallback_moves_up_total")
    PLAN_A = ("tpu_fallback_plan_a_closed", "tpu_fallback_plan_a_closes_total", "tpu_fallback_plan_a_reopens_total",
              "tpu_fallback_moves_to_plan_a_total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        # The heartbeat's age is measured on the monotonic clock: a wall clock stepped back or forth (NTP) must
        # neither fail the liveness probe nor hide a stalled loop. The exported timestamp stays wall time.
        self._started_mono = time.monotonic()
        self._beat_mono: float | None = None
        self.values: dict[str, float] = {
            "tpu_fallback_plan_a_closed": 0, "tpu_fallback_plan_a_closes_total": 0,
            "tpu_fallback_plan_a_reopens_total": 0, "tpu_fallback_moves_to_plan_a_total": 0,
            "tpu_fallback_reconcile_passes_total": 0,
            "tpu_fallback_reconcile_errors_total": 0, "tpu_fallback_action_errors_total": 0,
            # Writes answered 409 (another writer changed the object since it was read): retried on the next pass
            # from what the cluster holds then, so counted apart from the errors that need a look.
            "tpu_fallback_action_conflicts_total": 0,
            # 1 while this replica holds the Lease and acts; a standby (or one that lost it) says 0.
            "tpu_fallback_lease_held": 0,
            "tpu_fallback_evictions_total": 0, "tpu_fallback_last_reconcile_timestamp_seconds": 0,
            "tpu_fallback_loop_heartbeat_timestamp_seconds": 0,
        }

    def use_rungs(self, closable: Iterable[str], rungs: Iterable[str]) -> None:
        """A capacity ladder: per-rung series (`rung` label) instead of plan A's, at zero from the start."""
        with self._lock:
            for name in self.PLAN_A:
                self.values.pop(name, None)
            for rung in closable:
                for name in ("tpu_fallback_rung_closed", "tpu_fallback_rung_closes_total",
                             "tpu_fallback_rung_reopens_total"):
                    self.values.setdefault(self.key(name, rung=rung), 0)
            for rung in rungs:
                self.values.setdefault(self.key("tpu_fallback_moves_up_total", rung=rung), 0)

    @staticmethod
    def key(name: str, **labels: str) -> str:
        return name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")

    def add(self, name: str, amount: float = 1, **labels: str) -> None:
        key = self.key(name, **labels)
        with self._lock:
            if key not in self.values and not (labels and name in self.LABELLED):
                raise KeyError(f"no metric {key}")  # a typo, not a new series
            self.values[key] = self.values.get(key, 0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self.values[self.key(name, **labels)] = value

    def beat(self) -> None:
        """The loop went round (or a standby waited for the Lease): the heartbeat, on both clocks."""
        with self._lock:
            self._beat_mono = time.monotonic()
            self.values["tpu_fallback_loop_heartbeat_timestamp_seconds"] = time.time()

    def healthy(self, max_age: float, now: float | None = None) -> bool:
        """The loop went round within `max_age` seconds (or the process is younger than that), by the monotonic
        clock (`now`: a monotonic reading, for tests). A heartbeat, not the API server's health: a control-plane
        upgrade makes passes fail, and restarting the pod would not help."""
        now = time.monotonic() if now is None else now
        last = self._beat_mono if self._beat_mono is not None else self._started_mono
        return now - last <= max_age

    def text(self) -> str:
        with self._lock:
            families: dict[str, list[tuple[str, float]]] = {}
            for key, value in self.values.items():
                families.setdefault(key.split("{", 1)[0], []).append((key, value))
        lines = []
        for name, series in families.items():  # one TYPE line per family, as the text format requires
            lines.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
            # Whole numbers in full: ":g" would print a counter past a million as 1.23457e+06.
            lines += [f"{key} {int(value) if value == int(value) else repr(value)}" for key, value in series]
        return "\n".join(lines) + "\n"


def serve_metrics(metrics: Metrics, port: int, max_age: float) -> ThreadingHTTPServer:
    """/metrics (Prometheus text) and /healthz (fails once no pass has finished for `max_age` seconds)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                status, body = 200, metrics.text().encode()
            elif self.path == "/healthz":
                status, body = (200, b"ok\n") if metrics.healthy(max_age) else (500, b"no reconcile pass lately\n")
            else:
                status, body = 404, b"not found\n"
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server

