"""What the scheduler and the autoscaler check for a pod: its requests, node selector and affinity, taints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from tests.e2e.gke_sim.messages import INSUFFICIENT, NODE_AFFINITY, UNTOLERATED_TAINT
from tests.e2e.gke_sim.pools import NodePool
from tpu_fallback.model.quantity import parse_quantity

Resources = dict[str, Decimal]


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler counts for a pod: the sum of its containers' requests (limits where a request is
    missing), at least each init container's, plus one pod."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> Resources:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_quantity(v) for k, v in merged.items()}

    total: Resources = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    total["pods"] = Decimal(1)
    return total


def fits(request: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> bool:
    return all(v <= free.get(k, Decimal(0)) for k, v in request.items() if v > 0)


def subtract(free: Resources, request: Mapping[str, Decimal]) -> None:
    for k, v in request.items():
        free[k] = free.get(k, Decimal(0)) - v


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels:
            return False
        have, want = int(labels[key]), int(values[0])
        return have > want if op == "Gt" else have < want
    raise ValueError(f"unknown node selector operator {op!r}")


def selector_matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """nodeSelector and required node affinity against a node's labels."""
    spec = pod.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms:
        return any(all(_expression_matches(e, labels) for e in term.get("matchExpressions") or []) for term in terms)
    return True


def untolerated(pod: Mapping[str, Any], taints: Iterable[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """The NoSchedule/NoExecute taints the pod does not tolerate."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []

    def tolerated(taint: Mapping[str, str]) -> bool:
        for tol in tolerations:
            if tol.get("effect") and tol["effect"] != taint["effect"]:
                continue
            if tol.get("operator") == "Exists":
                if not tol.get("key") or tol["key"] == taint["key"]:
                    return True
            elif tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
                return True
        return False

    return [t for t in taints if t["effect"] in ("NoSchedule", "NoExecute") and not tolerated(t)]


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Pending, not bound, and the scheduler said Unschedulable (what cluster-autoscaler acts on)."""
    if (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def predicate_reasons(pool: NodePool, pod: Mapping[str, Any], request: Mapping[str, Decimal]) -> list[str]:
    """Why the pool's template node cannot take the pod, as the autoscaler reports it for a node group (its
    scheduler simulation): the reasons of the first failing filter, in the default profile's order (TaintToleration,
    NodeAffinity, NodeResourcesFit: messages.py); [] if it fits."""
    taints = untolerated(pod, pool.node_taints())
    if taints:  # FindMatchingUntoleratedTaint: the first one
        return [UNTOLERATED_TAINT.format(key=taints[0]["key"], value=taints[0].get("value", ""))]
    if not selector_matches(pod, pool.node_labels()):
        return [NODE_AFFINITY]
    allocatable = pool.machine.allocatable()
    short = [k for k, v in request.items() if k != "pods" and v > 0 and v > allocatable.get(k, Decimal(0))]
    order = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}  # fitsRequest: these first, then extended resources
    return [INSUFFICIENT.format(resource=k) for k in sorted(short, key=lambda k: (order.get(k, 3), k))]


def why_not(pool: NodePool, pod: Mapping[str, Any], request: Mapping[str, Decimal]) -> str | None:
    """None if the pool's nodes could take the pod, else the autoscaler's reasons."""
    reasons = predicate_reasons(pool, pod, request)
    return ", ".join(reasons) if reasons else None
