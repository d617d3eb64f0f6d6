"""KueueDashboard: a Cloud Monitoring dashboard of the stack's Kueue metrics (all clusters), and of the fallback
controller's with `fallback`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from tpu_fallback.render.dashboard import kueue_dashboard


@dataclass(frozen=True)
class KueueDashboardArgs:
    project: str
    title: str
    apis: Sequence[pulumi.Resource] = ()
    multikueue: bool = False  # charts of the manager's dispatches per worker
    # Charts of the fallback controller (closes per rung, evictions and moves, errors, heartbeat age); its metrics
    # come from the PodMonitoring the FallbackController renders with kueue.podMonitoring.
    fallback: bool = False


class KueueDashboard(pulumi.ComponentResource):
    dashboard: gcp.monitoring.Dashboard

    def __init__(self, name: str, args: KueueDashboardArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:monitoring:KueueDashboard", name, None, opts)
        self.dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard",
            project=args.project,
            dashboard_json=json.dumps(kueue_dashboard(args.title, args.multikueue, args.fallback)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.apis)),
        )
        self.register_outputs({"dashboard": self.dashboard.id})
