"""The Cloud Monitoring dashboard of Kueue's metrics, as the JSON the Dashboards API takes. Pure Python.

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
COLUMNS, WIDTH, HEIGHT = 48, 24, 16  # two charts per row on the dashboard's 48-column grid


def kueue_dashboard(title: str) -> dict[str, Any]:
    tiles = []
    for i, (chart, query, unit) in enumerate(CHARTS):
        tiles.append({
            "xPos": (i % 2) * WIDTH, "yPos": (i // 2) * HEIGHT, "width": WIDTH, "height": HEIGHT,
            "widget": {
                "title": chart,
                "xyChart": {
                    "dataSets": [{"timeSeriesQuery": {"prometheusQuery": query}, "plotType": "LINE"}],
                    "yAxis": {"label": unit, "scale": "LINEAR"},
                },
            },
        })
    return {"displayName": title, "mosaicLayout": {"columns": COLUMNS, "tiles": tiles}}
