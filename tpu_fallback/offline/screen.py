"""What `./scripts/plan` prints: one screen (about 40 lines) that a newcomer reads before anything scrolls away.

The headline of a stack: capacity and concurrency per rung (plan), what a job and the idle cluster cost per hour at
list prices, the warnings the full report holds, what a comparison changes; then where the full report is (the
summary's path last but one, the report paths last). `--full` prints the whole summary instead, as before; the
headline is computed from the same StackReport and price table as the summary's sections, so the two agree.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

from tpu_fallback.model import capacity
from tpu_fallback.model.ladder import RESERVATION
from tpu_fallback.offline import report
from tpu_fallback.offline.prices import PriceTable

WIDTH = 100  # lines are wrapped to this width, so a line of the screen is a line of a wide terminal
SCREEN_LINES = 40  # what the headline and the paths fit in; a comparison's settings list is cut to the rest


def wrap(text: str, indent: str = "", first: str = "") -> list[str]:
    """`text` wrapped to WIDTH, its first line starting with `first` and the others with `indent`."""
    return textwrap.wrap(text, WIDTH, initial_indent=first or indent, subsequent_indent=indent,
                         break_on_hyphens=False) or [first.rstrip()]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Rows of cells, each column padded to its widest cell (the last column left as is)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [(indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False))
             + "   " + r[-1]).rstrip() for r in rows]


def _job_cost(cluster: report.ClusterReport, cost: report.ClusterCost, plan: str) -> str:
    amount = cost.job.get(plan)
    if amount is None or cluster.job is None or cluster.job.slices is None:
        return "–"
    text = amount.text()
    kind = cluster.kind_of(plan)
    on_demand = next((a for p, a in cost.job.items() if cluster.kind_of(p) == capacity.ON_DEMAND), None)
    if kind == capacity.FLEX_START and amount.missing and on_demand is not None and not on_demand.missing:
        text += f" (at most {on_demand.text()})"
    if kind == RESERVATION:
        text += " (billed even idle)"
    return text


def _limit(cluster: report.ClusterReport) -> str:
    """What limits the cluster's jobs at once, without the per-rung sum the table above shows."""
    return re.sub(r"^TPU capacity \(.*?\)(?= and |$)", "TPU capacity", cluster.limit)


def _cluster_lines(cluster: report.ClusterReport, cost: report.ClusterCost, workers: int) -> list[str]:
    idle = f"idle {cost.idle.text()}, "
    if cluster.role == "existing cluster":
        idle = ""  # the cluster and its idle cost are not this stack's
    if cluster.settings is None:  # a MultiKueue manager
        kind = "Autopilot" if cluster.autopilot else f"Standard, {cluster.machine}"
        return wrap(f"{cluster.role.capitalize()} {cluster.name} ({cluster.location}): {kind}, no TPU pools; "
                    f"dispatches each job to one of its {_plural(workers, 'worker')}. Per hour: {idle.rstrip(', ')}.")
    tpu = cluster.settings.tpu
    lines = wrap(f"{cluster.role.capitalize()} {cluster.name} ({cluster.location}): TPU {tpu.family.name} "
                 f"{tpu.topology}, {tpu.chips_per_slice} chips a slice:")
    rows = [["rung" if cluster.ladder.explicit else "plan", "pools × slices", "chips", "jobs at once",
             "a job per hour"]]
    for plan in cluster.plans:
        pools = [p for p in cluster.pools if p.plan == plan.plan]
        slices = sorted({p.slices for p in pools})
        per_pool = _plural(slices[0], "slice") if len(slices) == 1 else "/".join(map(str, slices)) + " slices"
        at_once = f"{plan.runs}" + (" + DWS queue" if plan.admits is None else "")
        rows.append([cluster.plan_name(plan.plan), f"{_plural(len(pools), 'pool')} × {per_pool}",
                     str(plan.chips), at_once, _job_cost(cluster, cost, plan.plan)])
    lines += _table(rows) if len(rows) > 1 else []
    lines += wrap(f"{_plural(cluster.at_once, 'job')} at once, limited by {_limit(cluster)}. Per hour: {idle}all "
                  f"at full scale {cost.full.text()}.", indent="    ", first="  = ")
    return lines


def _origin(table: PriceTable) -> str:
    """"prices.yaml, checked 2026-12-01" of "tpu_fallback/offline/prices.yaml (checked 2026-12-01)"."""
    return table.origin.replace("tpu_fallback/offline/", "").replace(" (checked", ", checked").replace(")", "", 1)


def infra_headline(stack_report: report.StackReport, table: PriceTable, notes: Iterable[str] = ()) -> list[str]:
    """Capacity, concurrency and cost per cluster and rung, then the warnings."""
    shape = stack_report.shape
    costs = [report.cluster_cost(c, table) for c in stack_report.clusters]
    hosts = "one slice" if shape.hosts is None else _plural(shape.hosts, "TPU host")
    if shape.source.startswith("no jobs stack"):
        who = f"a job of {hosts} (no jobs stack submits to this stack)"
    else:
        who = (f"`{shape.name}`" + (f" ×{shape.copies}" if shape.copies > 1 else "")
               + f" of {shape.source} ({hosts} a job)")
    lines = [*wrap(f"Capacity and concurrency for {who}."),
             *wrap(f"List prices ({_origin(table)}), not a bill; idle: the GKE fee and system pool."), ""]
    workers = len(stack_report.tpu_clusters)
    for cluster, cost in zip(stack_report.clusters, costs, strict=True):
        lines += _cluster_lines(cluster, cost, workers)
    if stack_report.multikueue:
        idle, full = report.Amount(), report.Amount()
        for cost in costs:
            idle, full = idle.plus(cost.idle), full.plus(cost.full)
        lines += wrap(f"Stack: {_plural(stack_report.at_once, 'job')} at once across {_plural(workers, 'worker')}. "
                      f"Per hour: idle {idle.text()}, all at full scale {full.text()}.")
    warnings = [*stack_warnings(stack_report, costs), *notes]
    if warnings:
        lines += ["", "Warnings:"]
        for warning in warnings:
            lines += wrap(warning, indent="    ", first="  ! ")
    return lines


def stack_warnings(stack_report: report.StackReport, costs: list[report.ClusterCost]) -> list[str]:
    """The full report's caveats a newcomer should not miss."""
    found: list[str] = []
    for cluster in stack_report.tpu_clusters:
        job = cluster.job
        settings = cluster.settings
        assert settings is not None
        if job is not None and job.slices is None:
            found.append(f"A job of {job.hosts} hosts is not a whole number of {settings.tpu.topology} slices "
                         f"({settings.tpu.hosts_per_slice} hosts) on {cluster.name}: the jobs stack refuses it.")
        elif cluster.at_once < sum(p.runs for p in cluster.plans):
            found.append(f"{cluster.name} runs {_plural(cluster.at_once, 'job')} at once, limited by "
                         f"{cluster.limit}: its TPUs are never all busy at once.")
        for rung in cluster.ladder.rungs:
            if rung.reservation is not None and cluster.ladder.explicit:
                found.append(f"Rung `{rung.name}` consumes reservation `{rung.reservation.affinity_value}`: whether "
                             "it exists, is shared with this project and is covered by TPU quota is yours to check.")
    found += [n for n in stack_report.notes if n.startswith("An existing cluster")]
    missing = sorted({m for c in costs for m in c.idle.missing + [x for a in c.plans.values() for x in a.missing]})
    if missing:
        found.append("No verified list price for " + "; ".join(missing) + ": n/a or ≥ above (`--prices FILE`).")
    return found


def jobs_headline(lines: list[str]) -> list[str]:
    """The jobs project's headline: its Jobs section (a table of a few rows), wrapped."""
    out: list[str] = []
    for line in lines:
        if line.startswith("## "):
            continue
        out += [line] if line.startswith("|") or not line else wrap(line)
    while out and not out[0]:
        out.pop(0)
    return out


@dataclass
class CompareHeadline:
    """What a comparison shows on the screen: its head, one entry per differing setting (cut to what fits, each
    a line or a few wrapped ones), and its tail (the resources' counts, warnings)."""

    head: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)


def render(title: str, headline: list[str], compare: CompareHeadline | None, trailer: list[str]) -> str:
    """The screen: title, headline, the comparison with its settings cut to what fits, and the trailer (where the
    report is)."""
    lines = [title, "", *headline]
    if compare is not None:
        room = SCREEN_LINES - len(lines) - len(trailer) - len(compare.head) - len(compare.tail) - 2
        lines += ["", *compare.head, *cut(compare.rows, max(room, 4)), *compare.tail]
    return "\n".join([*lines, "", *trailer]) + "\n"


def cut(rows: list[list[str]], room: int) -> list[str]:
    """Whole rows within `room` lines; what does not fit is counted in a last line pointing at compare.md."""
    if sum(len(r) for r in rows) <= room:
        return [line for r in rows for line in r]
    kept: list[str] = []
    shown = 0
    for row in rows:
        if len(kept) + len(row) > room - 1:
            break
        kept += row
        shown += 1
    return [*kept, f"    … {len(rows) - shown} more in compare.md"]
