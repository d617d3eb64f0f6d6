"""The infrastructure stack's settings: raw config values in, typed and validated frozen dataclasses out.

`parse_settings` is pure (a dict of config values in, `Settings` out) so every rule is testable
without Pulumi; the infra program (tpu_fallback.programs.infra) hands it the CLI's config. Each rule
raises one `ConfigError` naming the key, the bad value and what is allowed, before the program
registers any resource. The defaults are the GKE tutorial's values, each written once, in the module of its part:

- stack: `Settings`, `parse_settings`, `decode_config`, the top-level keys (CONFIG_KEYS)
- pools: the system pool, plan A (onDemand), plan B (flexStart), the TPU slice, zone and pool-name checks
- kueue: Kueue and the capacity-aware fallback
- queues: the ClusterQueue, LocalQueues, quotas and per-host requests
- cluster: GKE version, maintenance, network, existingCluster
- multikueue: the manager, the workers, the node service account ids
- common: the config namespace, shared patterns and readers (durations, pool names)
"""

from tpu_fallback.model.settings.cluster import (
    EXCLUSION_SCOPES,
    GKE_VERSION,
    OLDEST_GKE_MINOR,
    ExistingClusterSettings,
    MaintenanceSettings,
    NetworkSettings,
)
from tpu_fallback.model.settings.common import PROJECT, duration
from tpu_fallback.model.settings.kueue import (
    COOL_DOWN,
    DEFAULT_FALLBACK_IMAGE,
    FALLBACK_IMAGE_PYTHON,
    KUEUE_PODS_READY_TIMEOUT,
    KUEUE_VERSION,
    MIN_COOL_DOWN,
    POLL_INTERVAL,
    REQUEUE_BACKOFF,
    STOCKOUT_AFTER,
    FallbackSettings,
    KueueSettings,
)
from tpu_fallback.model.settings.multikueue import (
    MAX_WORKERS,
    ManagerSettings,
    MultiKueueSettings,
    WorkerSettings,
    node_account_ids,
)
from tpu_fallback.model.settings.pools import (
    MAX_FLAVORS,
    MAX_POOL_NAME,
    MAX_RUN_DURATION_SECONDS,
    TPU_TOPOLOGY,
    TPU_TYPE,
    FlexStartSettings,
    OnDemandSettings,
    SystemPoolSettings,
)
from tpu_fallback.model.settings.queues import LocalQueueSettings, QueueSettings
from tpu_fallback.model.settings.stack import CONFIG_KEYS, SECRET_CONFIG_KEYS, Settings, decode_config, parse_settings

__all__ = [
    "CONFIG_KEYS", "COOL_DOWN", "DEFAULT_FALLBACK_IMAGE", "EXCLUSION_SCOPES", "FALLBACK_IMAGE_PYTHON", "GKE_VERSION",
    "KUEUE_PODS_READY_TIMEOUT", "KUEUE_VERSION", "MAX_FLAVORS", "MAX_POOL_NAME", "MAX_RUN_DURATION_SECONDS",
    "MAX_WORKERS", "MIN_COOL_DOWN", "OLDEST_GKE_MINOR", "POLL_INTERVAL", "PROJECT", "REQUEUE_BACKOFF",
    "SECRET_CONFIG_KEYS", "STOCKOUT_AFTER", "TPU_TOPOLOGY", "TPU_TYPE", "ExistingClusterSettings", "FallbackSettings",
    "FlexStartSettings", "KueueSettings", "LocalQueueSettings", "MaintenanceSettings", "ManagerSettings",
    "MultiKueueSettings", "NetworkSettings", "OnDemandSettings", "QueueSettings", "Settings", "SystemPoolSettings",
    "WorkerSettings", "decode_config", "duration", "node_account_ids", "parse_settings",
]
