"""A stack's settings as a user reads them, side by side: one row per setting under its config key
(`deletionProtection`, `onDemand.maxSlices`, `queues.localQueues`, `ladder[spot].maxSlices`), with the value the
program uses (defaults applied, as the model's parser fills them in), so two stacks compare by what they mean.

Compare mode across stacks (`--compare-stack`) leads with these rows: two stacks are two deployments, so what a user
wants to see first is which settings differ, not which resources of one would be deleted to make the other.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from tpu_fallback.model.jobs import JobSpec
from tpu_fallback.model.ladder import CONFIG_KIND
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.settings import Settings

NOT_SET = "–"
# Settings fields the parser derives (never written in config), left out of the rows.
_DERIVED = {"node_account_id", "tpu", "ladder", "multikueue", "project", "existing_cluster", "allow_unlisted_zone"}
# Settings field paths whose config key is not the field's camelCase name.
_RENAMED = {"queues.system_quota": "queues.quotas.system", "queues.on_demand_quota": "queues.quotas.onDemand"}
_SECONDS = {"fallback.stockout_after", "fallback.cool_down", "fallback.requeue_backoff", "fallback.poll_interval"}
# A ladder rung's fields that are derived from its name (flavors, component, where it is configured).
_RUNG_DERIVED = {"flavor", "component", "key"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _key(path: str) -> str:
    return _RENAMED.get(path) or ".".join(_camel(p) for p in path.split("."))


def show(value: Any) -> str:
    """A value as a user wrote it: true/false, 10, 20Gi, `cpu 10, memory 20Gi`, `default/user-queue`, `k=v`."""
    if value is None:
        return NOT_SET
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Resources):
        return f"cpu {value.cpu}, memory {value.memory}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = [f.name for f in dataclasses.fields(value)]
        if names == ["namespace", "name"]:
            return f"{value.namespace}/{value.name}"  # type: ignore[attr-defined]
        return ", ".join(f"{_camel(n)} {show(getattr(value, n))}" for n in names if getattr(value, n) is not None)
    if isinstance(value, (tuple, list)):
        if not value:
            return NOT_SET
        if all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return ", ".join(f"{k}={show(v)}" for k, v in value)
        return ", ".join(show(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _rows_of(value: Any, path: str, rows: dict[str, str]) -> None:
    """Dataclass fields become rows of their own (dotted); anything else is one row."""
    if dataclasses.is_dataclass(value) and not isinstance(value, (type, Resources)) and path.count(".") < 2:
        for f in dataclasses.fields(value):
            _rows_of(getattr(value, f.name), f"{path}.{f.name}" if path else f.name, rows)
        return
    text = show(value)
    if path in _SECONDS and isinstance(value, int):
        text = f"{value}s"
    rows[_key(path)] = text


def cluster_rows(settings: Settings) -> dict[str, str]:
    """One cluster's settings (a stack's own, or a MultiKueue worker's), config key -> value."""
    rows: dict[str, str] = {}
    rows["clusterName"] = settings.cluster_name
    tpu = settings.tpu
    rows["tpu"] = f"{tpu.family.name} {tpu.topology} ({tpu.hosts_per_slice} × {tpu.machine_type})"
    for f in dataclasses.fields(settings):
        if f.name in _DERIVED or f.name == "cluster_name":
            continue
        if settings.ladder is not None and f.name in ("on_demand", "flex_start"):
            continue  # a ladder replaces them (the parser refuses both together)
        _rows_of(getattr(settings, f.name), f.name, rows)
    if settings.queues.on_demand_quota is None and settings.ladder is None:
        derived = settings.on_demand_quota
        rows["queues.quotas.onDemand"] = f"{show(derived)} (derived)"
    if settings.ladder is not None:
        rows["ladder"] = " → ".join(r.name for r in settings.ladder.rungs)
        for rung in settings.ladder.rungs:
            for f in dataclasses.fields(rung):
                if f.name in _RUNG_DERIVED or f.name == "name":
                    continue
                value = getattr(rung, f.name)
                text = CONFIG_KIND.get(value, value) if f.name == "kind" else show(value)
                rows[f"ladder[{rung.name}].{_camel(f.name)}"] = text
    return rows


def stack_rows(settings: Settings) -> dict[str, str]:
    """An infra stack's settings, config key -> value, in the order docs/configuration.md lists the keys."""
    rows = {"gcp:project": settings.project, **cluster_rows(settings)}
    rows["allowUnlistedZone"] = show(settings.allow_unlisted_zone)
    ec = settings.existing_cluster
    rows["existingCluster"] = (NOT_SET if ec is None else
                               f"{ec.name} in {ec.location}" + (" (kubeconfig secret)" if ec.kubeconfig else ""))
    mk = settings.multikueue
    rows["multikueue.enabled"] = show(mk.enabled)
    if mk.enabled and mk.manager is not None:
        manager = mk.manager
        rows["multikueue.manager"] = (f"{manager.cluster_name} in {manager.location}, "
                                      + ("Autopilot" if manager.autopilot else "Standard"))
        rows["multikueue.workers"] = ", ".join(w.name for w in mk.workers)
        for worker in mk.workers:  # where each worker is, and what it sets differently from the stack
            for key, value in cluster_rows(worker.settings).items():
                if key in ("clusterName", "location") or rows.get(key) != value:
                    rows[f"multikueue.workers[{worker.name}].{key}"] = value
    return rows


def jobs_rows(infra_stack: str | None, specs: tuple[JobSpec, ...]) -> dict[str, str]:
    """A jobs stack's settings: its infraStack and every job's fields, config key -> value."""
    rows = {"infraStack": infra_stack or NOT_SET}
    for spec in specs:
        for f in dataclasses.fields(spec):
            if f.name != "name":
                rows[f"jobs[{spec.name}].{_camel(f.name)}"] = show(getattr(spec, f.name))
    return rows


def cluster_roles(settings: Settings) -> dict[str, str]:
    """Each cluster's role -> its name: `cluster` for a single cluster (created or existing); `manager`, `worker
    <name>` and `stack` (the prefix of the stack-wide resources' names) in MultiKueue mode."""
    mk = settings.multikueue
    if mk.enabled and mk.manager is not None:
        return {"manager": mk.manager.cluster_name,
                **{f"worker {w.name}": w.settings.cluster_name for w in mk.workers},
                "stack": settings.cluster_name}
    if settings.existing_cluster is not None:
        return {"cluster": settings.existing_cluster.name}
    return {"cluster": settings.cluster_name}


def describe_clusters(roles: dict[str, str]) -> str:
    """`cluster tpu-prod`, or `manager tpu-global-manager and workers tpu-global-us, ...`."""
    if "cluster" in roles:
        return f"cluster `{roles['cluster']}`"
    workers = [name for role, name in roles.items() if role.startswith("worker ")]
    return (f"MultiKueue manager `{roles.get('manager')}` and workers "
            + ", ".join(f"`{w}`" for w in workers))


@dataclasses.dataclass(frozen=True)
class SettingChange:
    key: str
    before: str | None  # None: the setting does not exist on that side (another mode: a ladder, MultiKueue)
    after: str | None


def diff(before: dict[str, str], after: dict[str, str]) -> list[SettingChange]:
    """The rows that differ, in `after`'s order then `before`'s leftovers."""
    keys = list(dict.fromkeys([*after, *before]))
    return [SettingChange(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]


def _cell(value: str | None) -> str:
    return "(none: another mode)" if value is None else value


def markdown(changes: list[SettingChange], same: int, before: str, after: str) -> list[str]:
    """The settings table of a comparison."""
    if not changes:
        return [f"All {same} settings are the same."]
    lines = [f"| setting | {before} | {after} |", "|---|---|---|"]
    for c in changes:
        lines.append(f"| `{c.key}` | {_md(_cell(c.before))} | {_md(_cell(c.after))} |")
    lines += ["", f"{same} other setting{'s are' if same != 1 else ' is'} the same."]
    return lines


def _md(text: str) -> str:
    return re.sub(r"([|])", r"\\\1", text)
