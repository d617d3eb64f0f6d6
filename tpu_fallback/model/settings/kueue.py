"""Kueue (the chart version, its feature gates, its metrics, whether this stack installs it) and the
capacity-aware fallback that runs beside it (tpu_fallback/fallback: plan A -> plan B on a stock-out, and back)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpu_fallback.model.kueue_features import FEATURE_GATES, VERIFIED_VERSIONS
from tpu_fallback.model.settings.common import duration
from tpu_fallback.model.validation import boolean, did_you_mean, fail, object_, string

# The Kueue chart this project is verified with by default (kueue_features.VERIFIED_VERSIONS lists every one).
KUEUE_VERSION = "0.19.2"
# Kueue's own default waitForPodsReady timeout, 30 min (on by default since Kueue 0.19.0;
# apis/config/v1beta2/defaults.go DefaultWaitForPodsReadyTimeout).
KUEUE_PODS_READY_TIMEOUT = 1800
# The shortest cool-down: a close must outlast the requeue of the jobs it evicts, and reopening a still-empty plan A
# more often than this only flaps (a 0 s cool-down closed plan A ~40 times in 200 s and no job reached plan B).
MIN_COOL_DOWN = 30
# The fallback's timers, in seconds (config: Go-style durations such as "10m").
STOCKOUT_AFTER = 600  # a job admitted to plan A whose pods have not started by then: plan A is stocked out
COOL_DOWN = 1800  # how long plan A stays closed to new jobs (unless a plan A node appears sooner)
REQUEUE_BACKOFF = 10  # Kueue's requeue delay after it evicts the stuck job (waitForPodsReady backoff base)
POLL_INTERVAL = 5  # how often the controller reads the cluster
MAX_COOL_DOWN = 7 * 24 * 3600
# Google's distroless Python on Debian 13 (trixie: Python 3.13, nonroot user; the debian12 images are no longer
# built), on gcr.io so private nodes reach it through Private Google Access. The controller needs only the
# standard library; its source comes from a ConfigMap. A tag, not a digest: no source for the digest is at hand
# here; pin one with fallback.image (…@sha256:…) where you mirror images. The e2e suite runs the ConfigMap's files
# with a plain Python of FALLBACK_IMAGE_PYTHON (tests/e2e/fallback_scenarios.py image_python).
DEFAULT_FALLBACK_IMAGE = "gcr.io/distroless/python3-debian13:nonroot"
FALLBACK_IMAGE_PYTHON = "3.13"

_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
_FEATURE_GATE = re.compile(r"^[A-Z][A-Za-z0-9]+$")
_IMAGE_REF = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::\d+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+"
                        r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


@dataclass(frozen=True)
class KueueSettings:
    version: str = KUEUE_VERSION
    feature_gates: tuple[tuple[str, bool], ...] = (("ElasticJobsViaWorkloadSlices", True),)
    pod_monitoring: bool = False  # a PodMonitoring for Kueue's metrics (Managed Service for Prometheus)
    install: bool = True  # False (existing clusters only): use the Kueue already running, after checking it

    @property
    def elastic_jobs(self) -> bool:
        return dict(self.feature_gates).get("ElasticJobsViaWorkloadSlices", False)


@dataclass(frozen=True)
class FallbackSettings:
    """Capacity-aware fallback (tpu_fallback/fallback): plan A -> plan B on a stock-out, and back. Seconds."""

    enabled: bool = True
    stockout_after: int = STOCKOUT_AFTER
    cool_down: int = COOL_DOWN
    requeue_backoff: int = REQUEUE_BACKOFF
    poll_interval: int = POLL_INTERVAL
    move_back: bool = True  # move a job waiting for DWS capacity to plan A when plan A has room and nodes
    image: str = DEFAULT_FALLBACK_IMAGE

    @property
    def pods_ready_timeout(self) -> int:
        """Kueue's waitForPodsReady timeout, a long backstop: the controller evicts a job stuck on a stocked-out
        plan A itself, at GKE's no-capacity Event or at stockoutAfter. Kueue's timeout applies to every admitted
        job, plan B included, so a short one evicted plan B jobs whose DWS nodes had arrived but whose pods took
        a while to start (large images, multi-host). Kueue's own default (30 min), and never less than
        stockoutAfter plus time for the controller to act first."""
        return max(KUEUE_PODS_READY_TIMEOUT, self.stockout_after + max(3 * self.poll_interval, 15))


def parse_kueue(value: Any) -> KueueSettings:
    d = KueueSettings()
    obj = object_("kueue", value, ("version", "featureGates", "podMonitoring", "install", "allowUnverifiedVersion"))
    version = string("kueue.version", obj.get("version", d.version), _SEMVER,
                     f"expected a Kueue chart version x.y.z such as {KUEUE_VERSION}")
    unverified = boolean("kueue.allowUnverifiedVersion", obj.get("allowUnverifiedVersion", False))
    if version not in VERIFIED_VERSIONS and not unverified:
        raise fail("kueue.version", version, f"this project is verified with Kueue {', '.join(VERIFIED_VERSIONS)} "
                   "(the manager config it writes and the fallback controller use Kueue's v1beta2 APIs); set "
                   "kueue.allowUnverifiedVersion: true to use another at your own risk")
    gates_raw = obj.get("featureGates", dict(d.feature_gates))
    if not isinstance(gates_raw, Mapping):
        raise fail("kueue.featureGates", gates_raw, "expected a map of gate name to true/false, "
                   "e.g. {ElasticJobsViaWorkloadSlices: true}")
    gates = []
    for name, enabled in gates_raw.items():
        if not isinstance(name, str) or not _FEATURE_GATE.match(name):
            raise fail("kueue.featureGates", name, "gate names are CamelCase such as ElasticJobsViaWorkloadSlices")
        enabled = boolean(f"kueue.featureGates.{name}", enabled)
        # An unverified version's gates are checked against the newest verified version's: unknown gates are
        # still refused (Kueue's controller would exit on one).
        checked = version if version in FEATURE_GATES else VERIFIED_VERSIONS[-1]
        known = FEATURE_GATES[checked]
        if name not in known:
            raise fail("kueue.featureGates", name, f"Kueue {checked} has no such feature gate"
                       f"{did_you_mean(name, known)} (its controller would exit with 'unrecognized feature gate')")
        gates.append((name, enabled))
    return KueueSettings(version=version, feature_gates=tuple(gates),
                         pod_monitoring=boolean("kueue.podMonitoring", obj.get("podMonitoring", d.pod_monitoring)),
                         install=boolean("kueue.install", obj.get("install", d.install)))


def parse_fallback(value: Any, kueue: KueueSettings, both_plans: bool) -> FallbackSettings:
    obj = object_("fallback", value, ("enabled", "stockoutAfter", "coolDown", "requeueBackoff", "pollInterval",
                                      "moveBack", "image"))
    d = FallbackSettings()
    # On by default where this stack installs Kueue (it must set Kueue's waitForPodsReady) and has both plans.
    enabled = boolean("fallback.enabled", obj.get("enabled", kueue.install and both_plans))
    if enabled and not kueue.install:
        raise fail("fallback.enabled", True, "needs Kueue's waitForPodsReady, which only a Kueue this stack installs "
                   "gets; with kueue.install false set fallback.enabled false (Kueue then falls back on quota only)")
    if enabled and not both_plans:
        raise fail("fallback.enabled", True, "needs both plans: onDemand.maxSlices >= 1 and flexStart enabled")
    day = 24 * 3600
    poll = duration("fallback.pollInterval", obj.get("pollInterval", f"{d.poll_interval}s"), 1, 60)
    stockout_after = duration("fallback.stockoutAfter", obj.get("stockoutAfter", f"{d.stockout_after}s"), 10, day)
    if stockout_after < 2 * poll:
        raise fail("fallback.stockoutAfter", obj.get("stockoutAfter"), f"must be at least twice fallback.pollInterval "
                   f"({poll}s)")
    image = string("fallback.image", obj.get("image", d.image), _IMAGE_REF,
                   f"expected an image reference such as {DEFAULT_FALLBACK_IMAGE} (Python 3.11+)")
    return FallbackSettings(
        enabled=enabled,
        stockout_after=stockout_after,
        cool_down=_cool_down(obj.get("coolDown", f"{d.cool_down}s"), poll),
        requeue_backoff=duration("fallback.requeueBackoff", obj.get("requeueBackoff", f"{d.requeue_backoff}s"), 1,
                                 3600),
        poll_interval=poll,
        move_back=boolean("fallback.moveBack", obj.get("moveBack", d.move_back)),
        image=image,
    )


def _cool_down(value: Any, poll: int) -> int:
    cool_down = duration("fallback.coolDown", value, 0, MAX_COOL_DOWN)
    least = max(MIN_COOL_DOWN, 5 * poll)
    if cool_down < least:
        raise fail("fallback.coolDown", value, f"must be at least {least}s ({MIN_COOL_DOWN}s, and 5 times "
                   f"fallback.pollInterval): a shorter close reopens plan A before the evicted jobs are requeued "
                   "past it, and plan A flaps")
    return cool_down
