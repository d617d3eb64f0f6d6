"""MultiKueue: a manager cluster in front of regional worker clusters, each worker a full plan A / plan B stack
of its own; and the node service account ids, unique among all the clusters of a stack."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tpu_fallback.model.settings.common import CLUSTER_NAME, REGION, ZONE
from tpu_fallback.model.validation import DNS_LABEL, ConfigError, boolean, fail, object_, string

if TYPE_CHECKING:
    from tpu_fallback.model.settings.stack import Settings

MAX_WORKERS = 20  # MultiKueueConfig.spec.clusters allows 1..20
MANAGER_AUTOPILOT = True  # the manager runs no TPU jobs: an Autopilot cluster by default
# The keys a worker entry may set for itself; every other key comes from the stack.
WORKER_OVERRIDES = ("tpu", "onDemand", "flexStart", "ladder")


@dataclass(frozen=True)
class ManagerSettings:
    cluster_name: str
    location: str  # a region for Autopilot, a zone for a Standard manager
    autopilot: bool = MANAGER_AUTOPILOT
    node_account_id: str = ""  # set by the parser: unique among the stack's clusters


@dataclass(frozen=True)
class WorkerSettings:
    name: str
    settings: Settings  # a full plan A / plan B cluster of its own


@dataclass(frozen=True)
class MultiKueueSettings:
    enabled: bool = False
    manager: ManagerSettings | None = None
    workers: tuple[WorkerSettings, ...] = ()


def parse_multikueue(raw: Mapping[str, Any], stack: Settings,
                     parse_worker: Callable[[Mapping[str, Any]], Settings]) -> MultiKueueSettings:
    """Manager and workers; each worker is the stack's settings with its own name, zone and optional overrides,
    parsed by `parse_worker` (the stack's own parser)."""
    obj = object_("multikueue", raw.get("multikueue"), ("enabled", "manager", "workers"))
    if not boolean("multikueue.enabled", obj.get("enabled", MultiKueueSettings().enabled)):
        return MultiKueueSettings()
    if stack.kueue.elastic_jobs:
        raise fail("kueue.featureGates.ElasticJobsViaWorkloadSlices", True,
                   "MultiKueue does not support elastic jobs; set it to false in a multikueue stack")

    manager_raw = object_("multikueue.manager", obj.get("manager"), ("clusterName", "location", "autopilot"))
    autopilot = boolean("multikueue.manager.autopilot", manager_raw.get("autopilot", MANAGER_AUTOPILOT))
    manager_location = manager_raw.get("location", stack.region)
    pattern, allowed = ((REGION, "an Autopilot manager needs a region such as europe-west4") if autopilot else
                        (ZONE, "a Standard manager needs a zone such as europe-west4-a"))
    manager = ManagerSettings(
        cluster_name=string("multikueue.manager.clusterName",
                            manager_raw.get("clusterName", f"{stack.cluster_name[:32]}-manager"), CLUSTER_NAME,
                            "a GKE cluster name (lowercase letters, digits, hyphens, at most 40 characters)"),
        location=string("multikueue.manager.location", manager_location, pattern, allowed),
        autopilot=autopilot,
    )

    workers_raw = obj.get("workers")
    if not isinstance(workers_raw, list) or not workers_raw:
        raise fail("multikueue.workers", workers_raw, "expected a list of {name, location} (1 to 20 workers)")
    if len(workers_raw) > MAX_WORKERS:
        raise fail("multikueue.workers", f"{len(workers_raw)} workers",
                   f"MultiKueueConfig accepts at most {MAX_WORKERS} clusters")
    workers: list[WorkerSettings] = []
    for i, entry in enumerate(workers_raw):
        key = f"multikueue.workers[{i}]"
        item = object_(key, entry, ("name", "location", *WORKER_OVERRIDES))
        name = string(f"{key}.name", item.get("name"), DNS_LABEL, "expected a short lowercase name such as us")
        if any(w.name == name for w in workers):
            raise fail(f"{key}.name", name, "worker names must be unique")
        cluster_name = f"{stack.cluster_name}-{name}"
        if not CLUSTER_NAME.match(cluster_name):
            room = 40 - len(stack.cluster_name) - 1
            raise fail(f"{key}.name", name, f"names the worker's cluster {cluster_name} ({len(cluster_name)} "
                       f"characters; GKE allows 40): at most {room} characters with clusterName {stack.cluster_name}"
                       if room > 0 else f"clusterName {stack.cluster_name} leaves no room for a worker's name")
        worker_raw = {k: v for k, v in raw.items() if k != "multikueue"}
        worker_raw.update({k: item[k] for k in WORKER_OVERRIDES if k in item})
        worker_raw["clusterName"] = cluster_name
        worker_raw["location"] = item.get("location")
        try:
            worker = parse_worker(worker_raw)
        except ConfigError as err:
            message = str(err)
            root = re.split(r"[ .\[]", message, maxsplit=1)[0]
            if root in ("location", *WORKER_OVERRIDES):  # a key of the worker's entry: name its full path
                raise ConfigError(f"{key}.{message} (worker {name})") from None
            raise ConfigError(f"{key} ({name}): {message}") from None
        workers.append(WorkerSettings(name, worker))
    names = [manager.cluster_name, *(w.settings.cluster_name for w in workers)]
    if len(set(names)) != len(names):
        raise fail("multikueue.manager.clusterName", manager.cluster_name,
                   "must differ from every worker's cluster name")
    manager_id, *worker_ids = node_account_ids(names)
    return MultiKueueSettings(
        enabled=True,
        manager=replace(manager, node_account_id=manager_id),
        workers=tuple(WorkerSettings(w.name, replace(w.settings, node_account_id=account))
                      for w, account in zip(workers, worker_ids, strict=True)),
    )


def node_account_ids(cluster_names: list[str]) -> list[str]:
    """The node service account id of each cluster of a stack (ids: 6-30 characters, unique per project).

    `<clusterName[:23]>-nodes` as before, so existing stacks keep their accounts; where that collides between
    two clusters of the stack (names sharing their first 23 characters, which no stack could deploy), the
    colliding ones get a short hash of the whole cluster name instead.
    """
    legacy = [f"{name[:23].rstrip('-')}-nodes" for name in cluster_names]
    out = []
    for name, account in zip(cluster_names, legacy, strict=True):
        if legacy.count(account) > 1:
            digest = hashlib.sha256(name.encode()).hexdigest()[:5]
            account = f"{name[:17].rstrip('-')}-{digest}-nodes"
        out.append(account)
    return out
