"""The Cloud Monitoring dashboard of Kueue's metrics (and the fallback controller's), as the JSON the Dashboards API
takes. Pure Python.

Managed Service for Prometheus stores Kueue's metrics under their Prometheus names with a `cluster` label, so
each chart is a PromQL query (widget timeSeriesQuery.prometheusQuery) across every cluster of the stack.
Metric names and labels: Kueue 0.19 "Prometheus metrics" reference; the quota charts need the manager
config's metrics.enableClusterQueueResources (render/kueue.py turns it on with kueue.podMonitoring).
"""

from __future__ import annotations

from typing import Any

# (title, PromQL, y-axis label) in reading order: what a platform team watches.
CHARTS: tuple[tuple[str, str, str], ...] = (
    ("Pending workloads per ClusterQueue",
     "sum by (cluster, cluster_queue, status) (kueue_pending_workloads)", "workloads"),
    ("Admission wait time, p95",
     "histogram_quantile(0.95, sum by (cluster, cluster_queue, le) "
     "(rate(kueue_admission_wait_time_seconds_bucket[10m])))", "seconds"),
    ("TPU chips in use per flavor (plan A on-demand, plan B dws)",
     'sum by (cluster, cluster_queue, flavor) (kueue_cluster_queue_resource_usage{resource="google.com/tpu"})',
     "chips"),
    ("TPU quota per flavor",
     'sum by (cluster, cluster_queue, flavor) (kueue_cluster_queue_nominal_quota{resource="google.com/tpu"})',
     "chips"),
    ("Evictions per reason",
     "sum by (cluster, cluster_queue, reason) (rate(kueue_evicted_workloads_total[10m]))", "per second"),
    ("Admitted workloads per ClusterQueue",
     "sum by (cluster, cluster_queue) (kueue_admitted_active_workloads)", "workloads"),
)
# MultiKueue's dispatches per worker (Kueue 0.19 pkg/metrics: multikueue_workloads_dispatched_total{cluster_queue,
# cluster}, cluster the worker's name). Managed Prometheus sets `cluster` itself (the GKE cluster scraped, here the
# manager), and a scraped label that collides with a target label is renamed exported_<name> (Prometheus
# scrape_config honor_labels false, https://prometheus.io/docs/prometheus/latest/configuration/configuration/
# #scrape_config; GMP's PodMonitoring targets carry project_id, location, cluster, namespace, job, instance).
MULTIKUEUE_CHARTS: tuple[tuple[str, str, str], ...] = (
    ("MultiKueue: workloads dispatched per worker",
     "sum by (exported_cluster, cluster_queue) (rate(multikueue_workloads_dispatched_total[10m]))", "per second"),
    ("MultiKueue: workloads admitted per worker",
     "sum by (exported_cluster, cluster_queue) (rate(multikueue_workloads_admitted_total[10m]))", "per second"),
)
# The fallback controller's own series (tpu_fallback/fallback/metrics.py, scraped by render/fallback.py's
# PodMonitoring): a chart may draw several queries. Two plans count under plan A's names, a ladder per `rung`; both
# are drawn, plan A's labelled rung="plan-a" (label_replace with an empty source label sets the label:
# https://prometheus.io/docs/prometheus/latest/querying/functions/#label_replace).
def _per_rung(ladder: str, plan_a: str, window: str) -> str:
    return (f"sum by (cluster, rung) (increase({ladder}[{window}])) or "
            f'label_replace(sum by (cluster) (increase({plan_a}[{window}])), "rung", "plan-a", "", "")')


FALLBACK_CHARTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("Fallback: closes per rung (1h)",
     (_per_rung("tpu_fallback_rung_closes_total", "tpu_fallback_plan_a_closes_total", "1h"),), "closes"),
    ("Fallback: rungs closed now",
     ("max by (cluster, rung) (tpu_fallback_rung_closed) or "
      'label_replace(max by (cluster) (tpu_fallback_plan_a_closed), "rung", "plan-a", "", "")',), "closed (1)"),
    ("Fallback: evictions and moves (1h)",
     ("sum by (cluster) (increase(tpu_fallback_evictions_total[1h]))",
      _per_rung("tpu_fallback_moves_up_total", "tpu_fallback_moves_to_plan_a_total", "1h")), "jobs"),
    ("Fallback: reconcile errors, action errors and write conflicts",
     ("sum by (cluster) (rate(tpu_fallback_reconcile_errors_total[10m]))",
      "sum by (cluster) (rate(tpu_fallback_action_errors_total[10m]))",
      "sum by (cluster) (rate(tpu_fallback_action_conflicts_total[10m]))"), "per second"),
    # The newest heartbeat of any replica (a standby beats too while it waits); the alert in
    # docs/fallback-operations.md fires on the same expression.
    ("Fallback: heartbeat age",
     ("time() - max by (cluster) (tpu_fallback_loop_heartbeat_timestamp_seconds)",), "seconds"),
)
COLUMNS, WIDTH, HEIGHT = 48, 24, 16  # two charts per row on the dashboard's 48-column grid


def kueue_dashboard(title: str, multikueue: bool = False, fallback: bool = False) -> dict[str, Any]:
    """Kueue's charts, MultiKueue's with `multikueue`, the fallback controller's with `fallback`."""
    charts: list[tuple[str, tuple[str, ...], str]] = [
        (chart, (query,), unit) for chart, query, unit in (*CHARTS, *(MULTIKUEUE_CHARTS if multikueue else ()))]
    charts += FALLBACK_CHARTS if fallback else ()
    tiles = []
    for i, (chart, queries, unit) in enumerate(charts):
        # The Dashboards API leaves zero-valued fields out of what it returns (proto3 JSON), so a tile at
        # xPos 0 or yPos 0 read back differs from the one sent and every preview showed a change: zeros left out.
        position = {k: v for k, v in (("xPos", (i % 2) * WIDTH), ("yPos", (i // 2) * HEIGHT)) if v}
        tiles.append({
            **position, "width": WIDTH, "height": HEIGHT,
            "widget": {
                "title": chart,
                "xyChart": {
                    "dataSets": [{"timeSeriesQuery": {"prometheusQuery": query}, "plotType": "LINE"}
                                 for query in queries],
                    "yAxis": {"label": unit, "scale": "LINEAR"},
                },
            },
        })
    return {"displayName": title, "mosaicLayout": {"columns": COLUMNS, "tiles": tiles}}
