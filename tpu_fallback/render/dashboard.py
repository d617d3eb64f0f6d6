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
COLUMNS, WIDTH, HEIGHT = 48, 24, 16  # two charts per row on the dashboard's 48-column grid


def kueue_dashboard(title: str, multikueue: bool = False) -> dict[str, Any]:
    tiles = []
    for i, (chart, query, unit) in enumerate((*CHARTS, *(MULTIKUEUE_CHARTS if multikueue else ()))):
        # The Dashboards API leaves zero-valued fields out of what it returns (proto3 JSON), so a tile at
        # xPos 0 or yPos 0 read back differs from the one sent and every preview showed a change: zeros left out.
        position = {k: v for k, v in (("xPos", (i % 2) * WIDTH), ("yPos", (i // 2) * HEIGHT)) if v}
        tiles.append({
            **position, "width": WIDTH, "height": HEIGHT,
            "widget": {
                "title": chart,
                "xyChart": {
                    "dataSets": [{"timeSeriesQuery": {"prometheusQuery": query}, "plotType": "LINE"}],
                    "yAxis": {"label": unit, "scale": "LINEAR"},
                },
            },
        })
    return {"displayName": title, "mosaicLayout": {"columns": COLUMNS, "tiles": tiles}}
