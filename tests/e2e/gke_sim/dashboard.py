"""The Ray dashboard's job API, which KubeRay polls, answered from the cluster's RayJobs and submitter Jobs."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse
from typing import Any

from tests.e2e.informer import ClusterCache


class RayDashboard:
    """Answers KubeRay's Ray job API calls, reached as KubeRay's HTTP proxy (`HTTP_PROXY=<url>`).

    GET /api/jobs/<submission id> on any `<head-svc>.<namespace>.svc.cluster.local:8265`: the RayJob whose
    status.jobId is that id is looked up in the namespace; the job is SUCCEEDED once the submitter Job (named
    like the RayJob) has condition Complete, FAILED once it has Failed, else RUNNING. Unknown ids get 404, which
    KubeRay reads as "not submitted yet". POST /api/jobs/<id>/stop answers {"stopped": true}.
    """

    def __init__(self) -> None:
        self._cache: ClusterCache | None = None
        # job id -> (start, end) in ms, fixed once seen, as Ray's own job API reports them (KubeRay copies them into
        # the RayJob's status.rayJobInfo); each answer runs in a thread of its own, hence the lock
        self._times: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self.requests = 0
        dashboard = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._answer(*dashboard.answer("GET", self.path, self.headers.get("Host", "")))

            def do_POST(self) -> None:
                self._answer(*dashboard.answer("POST", self.path, self.headers.get("Host", "")))

            def do_DELETE(self) -> None:
                self._answer(*dashboard.answer("DELETE", self.path, self.headers.get("Host", "")))

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="ray-dashboard", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def connect(self, cache: ClusterCache) -> None:
        """Read the RayJobs and the submitter Jobs from the cluster's informers (no request per call: KubeRay asks
        every few seconds per RayJob, each call in a thread of its own)."""
        self._cache = cache

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, method: str, raw_path: str, host_header: str) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(raw_path)
        host = url.hostname or host_header.split(":", 1)[0]
        parts = host.split(".")
        path = url.path if url.scheme else raw_path.split("?", 1)[0]
        self.requests += 1
        if len(parts) < 3 or parts[2] != "svc" or self._cache is None:
            return 404, {"error": f"not a Ray head service: {host}"}
        namespace = parts[1]
        match = re.fullmatch(r"/api/jobs/([^/]+)(/stop)?/?", path)
        if path.rstrip("/") == "/api/jobs":
            return 200, []
        if match is None:
            return 404, {"error": f"not simulated: {method} {path}"}
        job_id, stop = match.group(1), match.group(2)
        if stop:
            return 200, {"stopped": True}
        try:  # the informers are thread-safe: no lock for reading them
            rayjobs = self._cache.items("ray.io/v1", "RayJob", namespace)
            rayjob = next((r for r in rayjobs if (r.get("status") or {}).get("jobId") == job_id), None)
            if rayjob is None:
                return 404, {"error": f"job {job_id} not found"}
            if method == "DELETE":
                return 200, {"deleted": True}
            submitter = self._cache.informer("batch/v1", "Job").get(rayjob["metadata"]["name"], namespace)
        except TimeoutError as err:  # an informer that could not list
            return 500, {"error": str(err)}
        status = "RUNNING"
        for cond in ((submitter or {}).get("status") or {}).get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                status = "SUCCEEDED" if cond["type"] == "Complete" else "FAILED"
        with self._lock:
            now = int(time.time() * 1000)
            start, end = self._times.get(job_id, (now, 0))
            if status != "RUNNING" and not end:
                end = now
            self._times[job_id] = (start, end)
        return 200, {"job_id": job_id, "submission_id": job_id, "status": status,
                     "entrypoint": rayjob["spec"].get("entrypoint", ""), "message": f"simulated: {status}",
                     "start_time": start, "end_time": end}
