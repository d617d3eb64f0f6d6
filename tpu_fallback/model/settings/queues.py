"""The Kueue queue objects' settings: the ClusterQueue, its LocalQueues and namespaces, the quotas, and the
per-host requests every quota must admit a whole slice of."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.quantity import Resources, parse_quantity
from tpu_fallback.model.validation import DNS_LABEL, boolean, fail, object_, plain, resources, string

DEFAULT_NAMESPACE = "default"

_DNS_LABEL_RULE = "expected a lowercase DNS label: letters, digits and hyphens, at most 63 characters"
_NAMESPACE_RULE = "expected a Kubernetes namespace name: lowercase letters, digits and hyphens, at most 63 characters"
_LABEL_KEY = re.compile(r"^(?:[a-z0-9.-]{1,253}/)?[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class LocalQueueSettings:
    namespace: str
    name: str


@dataclass(frozen=True)
class QueueSettings:
    cluster_queue: str = "cluster-queue"
    local_queues: tuple[LocalQueueSettings, ...] = (LocalQueueSettings(DEFAULT_NAMESPACE, "user-queue"),)
    # None admits every namespace (namespaceSelector: {}); labels restrict the queue to labelled namespaces.
    namespace_labels: tuple[tuple[str, str], ...] | None = None
    system_quota: Resources = Resources(10, "20Gi")
    # None: derived from plan A's size, capacity.ON_DEMAND_QUOTA_PER_HOST per TPU host (the tutorial's
    # 40 cpu / 75Gi for 4 hosts).
    on_demand_quota: Resources | None = None
    # False: the tutorial's unlimited dws flavor; True: capped at the plan B pool's capacity.
    cap_flex_start: bool = False
    # The per-host request of one TPU worker and of one Ray head; quotas must admit a whole slice of them.
    worker_request: Resources = Resources(8, "16Gi")
    head_request: Resources = Resources(2, "4Gi")


def parse_queues(value: Any) -> QueueSettings:
    d = QueueSettings()
    obj = object_("queues", value, (
        "clusterQueue", "localQueues", "namespaceLabels", "quotas", "capFlexStart", "workerRequest", "headRequest",
    ))
    cluster_queue = string("queues.clusterQueue", obj.get("clusterQueue", d.cluster_queue), DNS_LABEL,
                           _DNS_LABEL_RULE)
    local_raw = obj.get("localQueues")
    local_queues = d.local_queues
    if local_raw is not None:
        if not isinstance(local_raw, list) or not local_raw:
            raise fail("queues.localQueues", local_raw, "expected a non-empty list of {namespace, name}")
        parsed: list[LocalQueueSettings] = []
        for i, entry in enumerate(local_raw):
            key = f"queues.localQueues[{i}]"
            item = object_(key, entry, ("namespace", "name"))
            queue = LocalQueueSettings(
                namespace=string(f"{key}.namespace", item.get("namespace", DEFAULT_NAMESPACE), DNS_LABEL,
                                 _NAMESPACE_RULE),
                name=string(f"{key}.name", item.get("name"), DNS_LABEL, _DNS_LABEL_RULE),
            )
            if queue in parsed:
                raise fail(key, f"{queue.namespace}/{queue.name}", "local queues must be unique")
            parsed.append(queue)
        local_queues = tuple(parsed)
    labels_raw = obj.get("namespaceLabels")
    namespace_labels = d.namespace_labels
    if labels_raw is not None:
        if not isinstance(labels_raw, Mapping) or not labels_raw:
            raise fail("queues.namespaceLabels", labels_raw,
                       "expected a non-empty map of label to value (leave it out to admit every namespace)")
        for k, v in labels_raw.items():
            string("queues.namespaceLabels", k, _LABEL_KEY, "expected a Kubernetes label key")
            string(f"queues.namespaceLabels.{k}", v, _LABEL_VALUE, "expected a Kubernetes label value (a string)")
        namespace_labels = tuple(sorted(labels_raw.items()))
    quotas = object_("queues.quotas", obj.get("quotas"), ("system", "onDemand"))
    return QueueSettings(
        cluster_queue=cluster_queue,
        local_queues=local_queues,
        namespace_labels=namespace_labels,
        system_quota=resources("queues.quotas.system", quotas.get("system"), d.system_quota),
        on_demand_quota=(resources("queues.quotas.onDemand", quotas["onDemand"], Resources(0, 0))
                         if quotas.get("onDemand") is not None else d.on_demand_quota),
        cap_flex_start=boolean("queues.capFlexStart", obj.get("capFlexStart", d.cap_flex_start)),
        worker_request=resources("queues.workerRequest", obj.get("workerRequest"), d.worker_request),
        head_request=resources("queues.headRequest", obj.get("headRequest"), d.head_request),
    )


def check_quotas(q: QueueSettings, tpu: catalog.TpuSlice, on_demand_slices: int) -> None:
    """Every quota must admit at least one slice of the configured per-host requests."""
    machine = tpu.machine
    if not capacity.fits_host(q.worker_request, machine):
        raise fail("queues.workerRequest", f"cpu={q.worker_request.cpu}, memory={q.worker_request.memory}",
                   f"one TPU worker runs on one {machine.name} host: {capacity.describe_host(machine)}")
    head_cpu, head_mem = capacity.system_pods_per_job(q.head_request)
    sys_cpu, sys_mem = parse_quantity(q.system_quota.cpu), parse_quantity(q.system_quota.memory)
    if sys_cpu < head_cpu or sys_mem < head_mem:
        raise fail("queues.quotas.system", f"cpu={q.system_quota.cpu}, memory={q.system_quota.memory}",
                   f"must admit one Ray job's CPU pods: its head (cpu={q.head_request.cpu}, "
                   f"memory={q.head_request.memory}) plus KubeRay's submitter "
                   f"= cpu {plain(head_cpu)}, memory {plain(head_mem / 2**20)}Mi")
    if on_demand_slices > 0:
        need_cpu, need_mem = capacity.slice_requests(q.worker_request, tpu)
        quota = capacity.on_demand_quota(q.on_demand_quota, tpu, on_demand_slices)
        od_cpu, od_mem = parse_quantity(quota.cpu), parse_quantity(quota.memory)
        if od_cpu < need_cpu or od_mem < need_mem:
            raise fail(
                "queues.quotas.onDemand", f"cpu={quota.cpu}, memory={quota.memory}",
                f"must admit one {tpu.topology} slice: {tpu.hosts_per_slice} workers x "
                f"(cpu={q.worker_request.cpu}, memory={q.worker_request.memory}) = cpu {plain(need_cpu)}, "
                f"memory {plain(need_mem / 2**30)}Gi",
            )
