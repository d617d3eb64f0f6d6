"""The control-plane harness's pure parts (no cluster)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e import controlplane


def test_free_port_never_hands_out_a_port_twice_to_concurrent_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    # multikueue_e2e_support.start_pair starts two control planes in two threads: each picks its ports with
    # free_port() at the same moment. A port handed to both made the second etcd fail with "bind: address already
    # in use" (seen in a cold run).
    monkeypatch.setattr(controlplane, "_handed_out", set())  # the ports taken here stay free for this worker's clusters
    threads, per_thread = 8, 25
    barrier = threading.Barrier(threads)

    def take() -> list[int]:
        barrier.wait()
        return [controlplane.free_port() for _ in range(per_thread)]

    with ThreadPoolExecutor(threads) as pool:
        ports = [p for batch in pool.map(lambda _: take(), range(threads)) for p in batch]
    assert len(ports) == threads * per_thread
    duplicates = sorted({p for p in ports if ports.count(p) > 1})
    assert not duplicates, duplicates
