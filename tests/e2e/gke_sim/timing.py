"""Simulated time: TimeScale (simulated seconds to real ones) and the sim's delays (Timings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimeScale:
    """Simulated seconds to real seconds: real = simulated * real_per_sim.

    Waits that exist for the controllers' sake (a provisioned request's booking, nodes added by hand waiting for
    their pods) are never shorter than `min_real_wait` real seconds: Kueue, KubeRay and the scheduler run in real
    time, and on a loaded machine KubeRay alone can take over 10 s to create a RayCluster's pods. Scaled down to
    6 s, GKE's 10-minute booking would expire before the pods exist, which on GKE it never would.
    """

    real_per_sim: float = 0.01
    min_real_wait: float = 30.0

    def real(self, sim_seconds: float) -> float:
        return sim_seconds * self.real_per_sim

    def patience(self, sim_seconds: float) -> float:
        """A wait for the controllers, in real seconds (at least min_real_wait)."""
        return max(self.real(sim_seconds), self.min_real_wait)

    def sim(self, real_seconds: float) -> float:
        return real_seconds / self.real_per_sim


@dataclass(frozen=True)
class Timings:
    """Delays of the simulated GKE, in simulated seconds (GKE-like defaults; scenarios shorten some).

    The autoscaler's come from its flags (kubernetes-sigs/cluster-autoscaler@33c3f97b pkg/config/flags/flags.go) and
    GKE's own constants (GoogleCloudPlatform/cluster-autoscaler@7d250507 pkg/backoff/gke_mig_backoff.go,
    pkg/cloudprovider/gke/gke_cloud_provider_impl.go)."""

    scale_up: float = 180.0  # a TPU slice's VMs created and registered
    cpu_scale_up: float = 60.0  # a CPU node
    dws_provision: float = 300.0  # from Accepted to the slice's nodes (DWS found capacity at once)
    job_run: float = 600.0  # the Ray job: the submitter pod runs this long (KWOK stage)
    scale_down_unneeded: float = 600.0  # cluster-autoscaler's --scale-down-unneeded-time (10 min)
    booking: float = 600.0  # a provisioned request's nodes wait this long for its pods (10 min)
    # A node group's back-off after a failed scale-up: initial (--initial-node-group-backoff-duration, GKE's
    # InitialNodeGroupBackoffDuration: 5 min), doubled at each failure after one up to the max
    # (--max-node-group-backoff-duration, MaxNodeGroupBackoffDuration: 30 min), forgotten that long after the last
    # failure (--node-group-backoff-reset-timeout, NodeGroupBackoffResetTimeout: 3 h). backoff.py.
    backoff: float = 300.0
    max_backoff: float = 1800.0
    backoff_reset: float = 10800.0
    # How long the autoscaler waits for a scale-up's nodes before it gives up on them ("failed to appear in time"):
    # --max-node-provision-time (15 min) for CPU pools; GKE's TPU node groups get tpuMigMaxNodeProvisionTime (10 h;
    # for a multi-host one the capacity check wait time plus 15 min, whose failsafe is 10 h too).
    max_node_provision: float = 900.0
    tpu_max_node_provision: float = 36000.0



DEFAULT_SCALE = TimeScale()
DEFAULT_TIMINGS = Timings()
