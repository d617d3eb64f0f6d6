"""Compare two renders of a project: resources added, removed and changed, with the changed fields, and the changes
that force a replacement flagged (a TPU node pool or cluster replacement is what a reviewer must not miss).

Resources are matched by URN without the stack part (urn:pulumi:<stack>::<project>::<types>::<name>), so two
stacks, two config files, or a stack against a git revision of its stack file compare alike. A field forces a
replacement when the provider would replace the resource for it: inputs.FORCES_REPLACEMENT (the provider's ForceNew
fields, one by one), a ForceNew block that appears or disappears (inputs.FORCED_WHEN_ADDED_OR_REMOVED), the resource's
replaceOnChanges (what the plan's summary flags), and for Kubernetes objects a new name/namespace or an immutable
Job template. A field the provider can neither update nor replace for (inputs.NOT_UPDATED_IN_PLACE: a TPU pool's
topology) needs a new resource too; without replaceOnChanges the line says that `pulumi up` would not make one.
Fields the program ignores after creation (ignore_changes) are listed as ignored, not as changes.
It compares two renders; it is not `pulumi preview`, which diffs against the live state.

Two stacks are two deployments whose clusters usually have different names (dev's `tpu-cluster`, prod's `tpu-prod`),
so nothing would match by URN. With `Aliases` (compare mode across stacks) a resource is matched by its role: its
logical name with the cluster's name (and in values the project id) read as a placeholder of the cluster's role
(`<cluster>`, `<manager>`, `<worker us>`), so `tpu-cluster-plan-a-on-demand-pool` meets
`tpu-prod-plan-a-on-demand-pool`.

The replacement calls come from inputs.py's table, kept by hand beside the provider's source: advisory, see ADVISORY.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tpu_fallback.offline.inputs import (
    IGNORED_NOTE,
    REPLACES_NOTE,
    block_added_or_removed,
    has_block,
    mask,
    needs_replace_on_changes,
    replacement_note,
)
from tpu_fallback.offline.mockrun import (
    SECRET_PLACEHOLDER,
    ProgramRun,
    RecordedResource,
    kubernetes_manifest,
    whole_numbers,
)
from tpu_fallback.offline.tree import PROJECT_WIDE, UNKNOWN, clusters_of, computed_values, show_unknowns

# Kubernetes: another name or namespace is another object, and Kubernetes refuses updates to a Job's pod template
# and selector (immutable), so the provider replaces the object for these.
KUBERNETES_REPLACEMENT = ("metadata.name", "metadata.namespace", "apiVersion", "kind")
KUBERNETES_KIND_REPLACEMENT = {"Job": ("spec.template", "spec.selector")}
IGNORED = "ignored after creation (ignore_changes)"
# The provider plans an in-place update for it that never reaches GKE (inputs.NOT_UPDATED_IN_PLACE).
NOT_UPDATED = ("the provider neither updates it in place nor replaces the resource for it: without replaceOnChanges "
               "`pulumi up` reports an update and the live resource keeps the old value")


@dataclass(frozen=True)
class FieldChange:
    key: str
    before: Any  # the value shown (secrets masked, computed unknown); MISSING when absent
    after: Any
    replaces: bool = False
    ignored: bool = False
    why: str = ""  # said after "forces replacement" when it is not the field's own ForceNew


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Change:
    op: str  # create, delete, update, replace
    type: str
    name: str
    cluster: str
    fields: tuple[FieldChange, ...] = field(default_factory=tuple)

    @property
    def symbol(self) -> str:
        return {"create": "+", "delete": "-", "update": "~", "replace": "+-"}[self.op]


REPLACEMENT_TABLE = ("a table kept by hand beside the provider (`tpu_fallback/offline/inputs.py`, read from "
                     "terraform-provider-google-beta's source)")
ADVISORY = (f"Which changed fields replace a resource is read from {REPLACEMENT_TABLE}: advisory. `pulumi preview` "
            "has the last word.")


@dataclass(frozen=True)
class Aliases:
    """Names read as the same on both sides (compare mode across stacks): each side's real name -> a placeholder
    of its role (cluster names, the stack's cluster-name prefix, the project id)."""

    before: dict[str, str]
    after: dict[str, str]

    def name(self, name: str, side: dict[str, str]) -> str:
        """A logical name with its cluster-name prefix read as the role's placeholder."""
        for real in sorted(side, key=len, reverse=True):
            if name == real or name.startswith(f"{real}-"):
                return side[real] + name[len(real):]
        return name

    def value(self, value: Any, side: dict[str, str]) -> Any:
        """`value` with every real name in its strings read as its placeholder."""
        if isinstance(value, str):
            for real in sorted(side, key=len, reverse=True):
                value = re.sub(rf"(?<![A-Za-z0-9]){re.escape(real)}(?![A-Za-z0-9])", side[real], value)
            return value
        if isinstance(value, list):
            return [self.value(v, side) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v, side) for k, v in value.items()}
        return value


def _key(resource: RecordedResource, aliases: Aliases | None = None, side: dict[str, str] | None = None) -> str:
    key = resource.urn.split("::", 1)[1] if "::" in resource.urn else resource.urn
    if aliases is None or side is None:
        return key
    head, _, name = key.rpartition("::")
    return f"{head}::{aliases.name(name, side)}"


def _inputs(resource: RecordedResource) -> dict[str, Any]:
    if resource.type.startswith("kubernetes:") and not resource.type.startswith("kubernetes:helm.sh/"):
        return kubernetes_manifest(resource)
    return {k: whole_numbers(v) for k, v in resource.inputs.items() if not k.startswith("__")}


def flatten_named(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """inputs.flatten, with the items of a list named by their `name` where each has a different one, so two renders
    compare item by item whatever the order (a ClusterQueue's flavors: `flavors[on-demand]`, not `flavors[1]`),
    and a reviewer reads spec.resourceGroups[0].flavors[on-demand].resources[cpu].nominalQuota."""
    if isinstance(value, dict) and value:
        rows: list[tuple[str, Any]] = []
        for k, v in value.items():
            rows.extend(flatten_named(v, f"{prefix}.{k}" if prefix else k))
        return rows
    if isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        names = [v.get("name") if isinstance(v, dict) else None for v in value]
        named = all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names)
        rows = []
        for i, v in enumerate(value):
            rows.extend(flatten_named(v, f"{prefix}[{names[i] if named else i}]"))
        return rows
    return [(prefix, value)]


def _fields(resource: RecordedResource, computed: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(raw flattened inputs, shown flattened inputs: secrets masked, computed values unknown)."""
    raw = _inputs(resource)
    shown = show_unknowns(mask(raw, resource.secret_inputs), computed)
    return dict(flatten_named(raw)), dict(flatten_named(shown))


def _forces(resource: RecordedResource, key: str, before: set[str], after: set[str]) -> tuple[bool, bool, str]:
    """(forces a replacement, ignored after creation, why when not the field itself) for a changed input; `before` and
    `after` are the resource's flattened input keys on each side."""
    note = replacement_note(resource, key)
    if note == IGNORED_NOTE:
        return False, True, ""
    if note == REPLACES_NOTE:
        return True, False, ""
    block = block_added_or_removed(resource.type, key, before, after)
    if block:  # a whole ForceNew block comes or goes: the provider replaces, whatever its fields say
        return True, False, f"the block `{block}` is {'added' if has_block(after, block) else 'removed'}"
    if needs_replace_on_changes(resource, key):
        return True, False, NOT_UPDATED
    if resource.type.startswith("kubernetes:") and not resource.type.startswith("kubernetes:helm.sh/"):
        kind = resource.type.split(":")[-1]
        forcing = KUBERNETES_REPLACEMENT + KUBERNETES_KIND_REPLACEMENT.get(kind, ())
        top = key.split("[")[0]
        return any(top == f or top.startswith(f"{f}.") or key.startswith(f"{f}[") for f in forcing), False, ""
    return False, False, ""



def diff(before: ProgramRun, after: ProgramRun, aliases: Aliases | None = None) -> list[Change]:
    """What changes from `before` to `after`, in a stable order: replacements first, then updates, creates, deletes.
    With `aliases`, resources are matched by role and values differing only in the aliased names are the same."""
    old = {_key(r, aliases, aliases.before if aliases else None): r for r in before.resources if r.custom}
    new = {_key(r, aliases, aliases.after if aliases else None): r for r in after.resources if r.custom}
    old_computed, new_computed = computed_values(before), computed_values(after)
    old_where, new_where = clusters_of(before), clusters_of(after)
    changes: list[Change] = []
    for key in sorted(set(old) | set(new)):
        if key not in old:
            r = new[key]
            changes.append(Change("create", r.type, r.name, new_where.get(r.urn, PROJECT_WIDE)))
            continue
        if key not in new:
            r = old[key]
            changes.append(Change("delete", r.type, r.name, old_where.get(r.urn, PROJECT_WIDE)))
            continue
        a, b = old[key], new[key]
        raw_a, shown_a = _fields(a, old_computed)
        raw_b, shown_b = _fields(b, new_computed)
        fields: list[FieldChange] = []
        for k in sorted(set(raw_a) | set(raw_b)):
            va, vb = raw_a.get(k, MISSING), raw_b.get(k, MISSING)
            if _same(va, vb) or (aliases is not None and va is not MISSING and vb is not MISSING
                                 and _same(aliases.value(va, aliases.before), aliases.value(vb, aliases.after))):
                continue
            sa, sb = shown_a.get(k, MISSING), shown_b.get(k, MISSING)
            if sa == sb == SECRET_PLACEHOLDER:
                sa, sb = SECRET_PLACEHOLDER, f"{SECRET_PLACEHOLDER} (changed)"
            if sa == sb == UNKNOWN:  # both computed: the cloud decides, nothing a reviewer can compare
                continue
            replaces, ignored, why = _forces(b, k, set(raw_a), set(raw_b))
            fields.append(FieldChange(k, sa, sb, replaces, ignored, why))
        if a.protect != b.protect:
            fields.append(FieldChange("(option) protect", a.protect, b.protect))
        real = [f for f in fields if not f.ignored]
        if not real:
            if fields:
                changes.append(Change("update", b.type, b.name, new_where.get(b.urn, PROJECT_WIDE), tuple(fields)))
            continue
        op = "replace" if any(f.replaces for f in real) else "update"
        changes.append(Change(op, b.type, b.name, new_where.get(b.urn, PROJECT_WIDE), tuple(fields)))
    order = {"replace": 0, "update": 1, "create": 2, "delete": 3}
    return sorted(changes, key=lambda c: (order[c.op], c.cluster, c.type, c.name))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):  # the mock runtime hands numbers over as floats
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return bool(a == b)


def _show(value: Any) -> str:
    return "(absent)" if value is MISSING else json.dumps(value)


_WATCHED = {"gcp:container/nodePool:NodePool": "node pool", "gcp:container/cluster:Cluster": "cluster"}


def to_json(changes: list[Change], before: ProgramRun, after: ProgramRun) -> list[dict[str, Any]]:
    """The changes as compare.json holds them, for tools/replacecheck.py: each with the URN without its stack (as
    `pulumi preview --json` names the resource, less the stack) and the top-level inputs it is replaced for."""
    urns = {(r.type, r.name): r.urn for r in [*before.resources, *after.resources] if r.custom}
    out = []
    for c in changes:
        urn = urns.get((c.type, c.name), "")
        out.append({"op": c.op, "type": c.type, "name": c.name, "cluster": c.cluster,
                    "urn": urn.split("::", 1)[1] if "::" in urn else urn,
                    "replacedFor": sorted({top_level(f.key) for f in c.fields if f.replaces}),
                    "changed": sorted({top_level(f.key) for f in c.fields if not f.ignored})})
    return out


def top_level(key: str) -> str:
    """The top-level input of a flattened key (`placementPolicy` of `placementPolicy.tpuTopology`), as Pulumi's
    diffReasons and replaceReasons name it."""
    return re.split(r"[.\[]", key, maxsplit=1)[0]


def counts_line(changes: list[Change]) -> str:
    counts = {op: sum(1 for c in changes if c.op == op) for op in ("replace", "update", "create", "delete")}
    return (f"{counts['replace']} to replace, {counts['update']} to update, {counts['create']} to create, "
            f"{counts['delete']} to delete.")


def watched_lines(changes: list[Change], short: bool = False) -> list[str]:
    """The warnings a reviewer must not miss: a node pool or cluster replaced or deleted (`short`: without what it
    means, for the terminal)."""
    lines = []
    for c in changes:
        if c.op in ("replace", "delete") and c.type in _WATCHED:
            why = ", ".join(f.key for f in c.fields if f.replaces) or "removed"
            verb = "REPLACED" if c.op == "replace" else "DELETED"
            where = "" if c.type == "gcp:container/cluster:Cluster" else f" (cluster `{c.cluster}`)"
            if short:
                only = " only through replaceOnChanges, which it does not set" if c.op == "replace" and all(
                    f.why == NOT_UPDATED for f in c.fields if f.replaces) else ""
                lines.append(f"{_WATCHED[c.type]} `{c.name}`{where} is {verb}{only} ({why})")
                continue
            if c.op == "replace" and all(f.why == NOT_UPDATED for f in c.fields if f.replaces):
                # Nothing the provider replaces for: the change needs a new resource the program does not ask for.
                lines.append(f"**⚠ {_WATCHED[c.type]} `{c.name}`{where} is REPLACED only through replaceOnChanges, "
                             f"which it does not set** ({why}): `pulumi up` would report an in-place update and the "
                             "live resource would keep its old value.")
                continue
            lines.append(f"**⚠ {_WATCHED[c.type]} `{c.name}`{where} is {verb}** ({why}): on a deployed stack "
                         "its running TPU slices (or the whole cluster) go away with it.")
    return lines


def markdown(changes: list[Change], before: str, after: str, heading: str | None = None,
             matched: str = "resources matched by URN") -> list[str]:
    """The Changes section; `heading` replaces its title (None: "## Changes from <before> to <after>")."""
    lines = [heading or f"## Changes from {before} to {after}", "",
             f"A comparison of two offline renders ({matched}), not `pulumi preview` against live state. `+-` "
             f"replace, `~` update, `+` create, `-` delete. {ADVISORY}"]
    lines += ["", f"**{counts_line(changes)}**"]
    if not changes:
        return [*lines, "", "No differences."]
    watched = watched_lines(changes)
    if watched:
        lines.append("")
        lines += [f"> {w}" for w in watched]
    for c in changes:
        lines += ["", f"### {c.symbol} {c.op} `{c.type}` `{c.name}` ({c.cluster})"]
        if c.fields:
            lines.append("")
            for f in c.fields:
                note = ("  **forces replacement**" + (f" ({f.why})" if f.why else "") if f.replaces
                        else ("  (" + IGNORED + ")" if f.ignored else ""))
                lines.append(f"- `{f.key}`: {_show(f.before)} → {_show(f.after)}{note}")
    return lines
