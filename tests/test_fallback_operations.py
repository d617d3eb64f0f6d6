"""Watching the fallback controller: the dashboard's charts of its metrics and the alerts the docs recommend name
series it really exports (a renamed metric fails here, not on an empty chart)."""

from __future__ import annotations

import re
from pathlib import Path

from tpu_fallback.fallback.metrics import Metrics
from tpu_fallback.render.dashboard import CHARTS, FALLBACK_CHARTS, kueue_dashboard

DOC = Path(__file__).resolve().parent.parent / "docs" / "fallback-operations.md"


def exported() -> set[str]:
    metrics = Metrics()
    return {key.split("{", 1)[0] for key in metrics.values} | set(Metrics.LABELLED) | set(Metrics.PLAN_A)


def series(text: str) -> set[str]:
    return set(re.findall(r"\btpu_fallback_[a-z_]+\b", text))


def test_the_fallback_charts_are_added_only_when_asked_and_draw_exported_series() -> None:
    plain, with_fallback = kueue_dashboard("t"), kueue_dashboard("t", fallback=True)
    tiles = with_fallback["mosaicLayout"]["tiles"]
    assert len(plain["mosaicLayout"]["tiles"]) == len(CHARTS)
    assert len(tiles) == len(CHARTS) + len(FALLBACK_CHARTS)
    titles = [t["widget"]["title"] for t in tiles[len(CHARTS):]]
    assert any("closes per rung" in t for t in titles) and any("heartbeat" in t for t in titles)
    assert any("evictions and moves" in t for t in titles) and any("errors" in t for t in titles)
    queries = [d["timeSeriesQuery"]["prometheusQuery"] for t in tiles for d in t["widget"]["xyChart"]["dataSets"]]
    used = set().union(*(series(q) for q in queries))
    assert "tpu_fallback_action_conflicts_total" in used and "tpu_fallback_rung_closes_total" in used
    assert used <= exported(), used - exported()


def test_the_recommended_alerts_query_exported_series() -> None:
    text = DOC.read_text()
    alerts = re.findall(r"```promql\n(.*?)```", text, re.S)
    assert len(alerts) >= 2, "the docs recommend a heartbeat alert and a closed-too-long alert"
    used = set().union(*(series(a) for a in alerts))
    assert {"tpu_fallback_loop_heartbeat_timestamp_seconds", "tpu_fallback_rung_closed"} <= used
    assert used <= exported(), used - exported()


def test_conflicts_and_the_lease_are_exported_from_the_start() -> None:
    values = Metrics().values
    assert values["tpu_fallback_action_conflicts_total"] == 0 and values["tpu_fallback_lease_held"] == 0
    text = Metrics().text()
    assert "# TYPE tpu_fallback_action_conflicts_total counter" in text
    assert "# TYPE tpu_fallback_lease_held gauge" in text
