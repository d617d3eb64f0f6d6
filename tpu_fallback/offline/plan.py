"""Offline plan: evaluate a stack without cloud credentials or the Pulumi CLI.

It runs the project's real `__main__.py` under Pulumi's mock runtime with the stack's config (as the
CLI would hand it over) and writes, into build/plan/<project>-<stack>/:

- summary.md: capacity and concurrency per cluster and plan, cost per hour at list prices (not a bill), a Mermaid
  diagram, the changes against a base (compare mode), every cloud resource with its settings, the stack outputs
  (secrets masked) and the resource tree as `pulumi preview` shows it;
- report.md: the same for a pull-request comment (capacity, cost, diagram, changes, the tree folded), within
  GitHub's comment size;
- kubernetes.yaml: every Kubernetes object, and with several clusters kubernetes/<cluster>.yaml, one file per
  target cluster that applies on its own.

It prints one screen (tpu_fallback.offline.screen: capacity, concurrency and cost per rung, warnings, what a
comparison changes) ending with those paths; `--full` prints summary.md instead, `--quiet` only the paths.

It renders the program; it is NOT a diff against live state: `pulumi preview` is still what tells you what would
change. Compare mode diffs two renders (two stacks, two stack files, or a stack file against a git revision): the
settings that differ (settings_view), then the resources, matched by role across two stacks (compare.Aliases), with
compare.md and compare.json (for tools/replacecheck.py) written beside the summary.

    python -m tpu_fallback.offline.plan dev                          # infra project, stack dev
    python -m tpu_fallback.offline.plan dev --project jobs           # the jobs project (infraStack rendered here)
    python -m tpu_fallback.offline.plan prod --compare-rev origin/main   # what this branch changes in prod
    python -m tpu_fallback.offline.plan dev --compare-stack prod     # dev against prod
    python -m tpu_fallback.offline.plan dev --stack-file new.yaml --compare-file old.yaml   # two config files
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tpu_fallback.model.jobs import JOBS_PROJECT
from tpu_fallback.model.settings import PROJECT
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline import compare, report, screen, settings_view, stacks
from tpu_fallback.offline.inputs import FORCES_REPLACEMENT, REPLACES_NOTE, flatten, mask, replacement_note
from tpu_fallback.offline.mockrun import (
    REPO_ROOT,
    SECRET_PLACEHOLDER,
    ProgramRun,
    RecordedResource,
    apply_order,
    infra_references,
    kubernetes_manifest,
    run_program,
    whole_numbers,
)
from tpu_fallback.offline.prices import PriceTable, PriceTableError
from tpu_fallback.offline.prices import load as load_prices
from tpu_fallback.offline.tree import UNKNOWN, clusters_of, computed_values, show_unknowns, tree_markdown

__all__ = ["FORCES_REPLACEMENT", "Review", "kubernetes_yaml", "kubernetes_yaml_by_cluster", "main", "pr_report",
           "summary"]

DEFAULT_OUT = REPO_ROOT / "build" / "plan"
COMMENT_LIMIT = 60000  # GitHub refuses comments over 65536 characters; leave room for a marker and a header
_SECRET_B64 = base64.b64encode(SECRET_PLACEHOLDER.encode()).decode()

# Kept under their old names: the summary's flags are the compare mode's (tpu_fallback.offline.inputs).
_mask, _flatten, _replacement_note = mask, flatten, replacement_note


def _short(urn: str) -> str:
    return urn.split("::")[-1]


def _kubernetes_resources(run: ProgramRun) -> list[RecordedResource]:
    """Kubernetes objects in apply order; the logical name breaks ties between clusters of one stack."""
    found = [r for r in run.resources
             if r.type.startswith("kubernetes:") and not r.type.startswith("kubernetes:helm.sh/")]
    return sorted(found, key=lambda r: (apply_order(kubernetes_manifest(r)), r.name))


def _target(resource: RecordedResource) -> str:
    """The Kubernetes provider (so the cluster) an object is applied with: `<urn>::<id>` -> its logical name."""
    return resource.provider.split("::")[-2] if resource.provider else "default provider"


# --------------------------------------------------------------------------------------------
# Kubernetes YAML
# --------------------------------------------------------------------------------------------


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (scripts, embedded YAML) as block scalars, so train.py reads as a file in a review."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_BlockDumper.add_representer(str, _represent_str)


def shown_manifest(resource: RecordedResource, computed: list[str]) -> dict[str, Any]:
    """The object as the plan writes it: secrets masked in a shape that is still valid, computed values unknown.

    A Secret keeps its keys: `data` values become base64 of "[secret]", `stringData` values "[secret]"; the
    provider treats both as secrets whether or not the program marked them.
    """
    manifest = kubernetes_manifest(resource)
    secret_fields = {}
    if manifest.get("kind") == "Secret" and manifest.get("apiVersion") == "v1":
        for key, placeholder in (("data", _SECRET_B64), ("stringData", SECRET_PLACEHOLDER)):
            if isinstance(manifest.get(key), dict):
                secret_fields[key] = {k: placeholder for k in manifest[key]}
    paths = [p for p in resource.secret_inputs
             if p.split(".")[0].split("[")[0] not in secret_fields and p != "."]
    shown = show_unknowns(_mask(manifest, paths), computed)
    shown.update(secret_fields)
    if "." in resource.secret_inputs and not secret_fields:  # a whole object as a secret: keep what names it
        shown = {k: (v if k in ("apiVersion", "kind", "metadata") else SECRET_PLACEHOLDER) for k, v in shown.items()}
    return dict(shown)


def _documents(run: ProgramRun, resources: list[RecordedResource], comment: bool) -> str:
    computed = computed_values(run)
    documents = [(f"# cluster: {_target(r)}\n" if comment else "")
                 + yaml.dump(shown_manifest(r, computed), Dumper=_BlockDumper, sort_keys=False)
                 for r in resources]
    return "---\n".join(documents)


def kubernetes_yaml(run: ProgramRun) -> str:
    return _documents(run, _kubernetes_resources(run), comment=True)


def kubernetes_yaml_by_cluster(run: ProgramRun) -> dict[str, str]:
    """One YAML document stream per target cluster (the cluster of each object's provider)."""
    where = clusters_of(run)
    by_cluster: dict[str, list[RecordedResource]] = {}
    for r in _kubernetes_resources(run):
        by_cluster.setdefault(where.get(r.urn, _target(r)), []).append(r)
    return {cluster: _documents(run, found, comment=False) for cluster, found in sorted(by_cluster.items())}


# --------------------------------------------------------------------------------------------
# Summary and report
# --------------------------------------------------------------------------------------------


@dataclass
class Review:
    """The reviewer's sections (capacity, cost, diagram, changes), computed from the stack's config."""

    sections: list[list[str]] = field(default_factory=list)  # each a list of markdown lines
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)  # the terminal's screen (tpu_fallback.offline.screen)
    compare_headline: screen.CompareHeadline | None = None
    compare_json: list[dict[str, Any]] | None = None  # compare.json (compare.to_json), for tools/replacecheck.py

    def lines(self) -> list[str]:
        out: list[str] = []
        for section in [*self.sections, self.changes]:
            if section:
                out += [*section, ""]
        for note in self.notes:
            out += [f"> {note}", ""]
        return out


def _header(run: ProgramRun) -> list[str]:
    return [
        f"# Offline plan of {run.project} stack {run.stack}",
        "",
        "Rendered from the program under Pulumi's mock runtime; NOT a diff against live state.",
        f"Values the cloud computes (endpoints, emails, ids) are shown as `{UNKNOWN}`, as `pulumi preview` shows "
        "them; secrets as `[secret]`.",
        "",
    ]


def summary(run: ProgramRun, review: Review | None = None) -> str:
    lines = _header(run)
    if review is not None:
        lines += review.lines()
    computed = computed_values(run)
    cloud = sorted((r for r in run.resources if r.custom and not r.type.startswith("kubernetes:")),
                   key=lambda r: (r.type, r.name))
    helm = sorted((r for r in run.resources if r.type.startswith("kubernetes:helm.sh/")), key=lambda r: r.name)
    kube = _kubernetes_resources(run)
    lines.append(f"## Cloud resources ({len(cloud)})")
    if any(_replacement_note(r, k) for r in cloud for k, _ in _flatten(r.inputs)):
        lines += ["", f"`{REPLACES_NOTE.strip()}` is advisory: it comes from {compare.REPLACEMENT_TABLE}; `pulumi "
                  "preview` has the last word.", ""]
    for resource in cloud:
        lines.extend(_describe(resource, computed))
    lines.append(f"## Helm releases ({len(helm)})")
    for resource in helm:
        lines.extend(_describe(resource, computed))
    lines.append(f"## Kubernetes objects ({len(kube)}), full YAML in kubernetes.yaml")
    for resource in kube:
        manifest = resource.inputs
        meta = manifest.get("metadata") or {}
        where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
        kind = manifest.get("kind") or resource.type.split(":")[-1]
        deps = ", ".join(sorted(_short(d) for d in resource.dependencies)) or "-"
        lines.append(f"- {kind} {where}{meta.get('name', resource.name)}  [{_target(resource)}]  (waits for: {deps})")
    lines.append("")
    lines.append("## Stack outputs")
    for name in sorted(run.outputs):
        shown = SECRET_PLACEHOLDER if name in run.secret_outputs else json.dumps(show_unknowns(run.outputs[name],
                                                                                               computed))
        lines.append(f"- {name}: {shown}")
    lines.append("")
    lines += tree_markdown(run)
    components = [r for r in run.resources if not r.custom]
    lines.append("")
    lines.append(f"Totals: {len(run.resources)} registrations ({len(components)} components, "
                 f"{len(cloud)} cloud resources, {len(helm)} Helm releases, {len(kube)} Kubernetes objects)")
    return "\n".join(lines) + "\n"


def pr_report(run: ProgramRun, review: Review | None = None, limit: int = COMMENT_LIMIT) -> str:
    """The pull-request comment: the reviewer's sections and the folded tree, cut to GitHub's comment size."""
    head = _header(run) + (review.lines() if review is not None else [])
    tree = ["<details><summary>Resource tree (as <code>pulumi preview</code> shows it)</summary>", "",
            *tree_markdown(run)[1:], "", "</details>", ""]
    project = "" if run.project == PROJECT else " --project jobs"
    tail = [f"Full plan: `summary.md` of `./scripts/plan {run.stack}{project}` (every resource's settings, the "
            "outputs, the Kubernetes YAML)."]
    text = "\n".join(head + tree + tail) + "\n"
    if len(text) <= limit:
        return text
    text = "\n".join([*head, "_The resource tree did not fit in a comment; see the full plan._", "", *tail]) + "\n"
    if len(text) <= limit:
        return text
    cut = "\n\n_… cut to fit a pull-request comment; see the full plan._\n"
    return text[: limit - len(cut)] + cut


def _describe(resource: RecordedResource, computed: list[str]) -> list[str]:
    flags = []
    if resource.protect:
        flags.append("protect")
    head = f"### {resource.type}  {resource.name}" + (f"  [{', '.join(flags)}]" if flags else "")
    rows = [head]
    inputs = show_unknowns(_mask(whole_numbers(resource.inputs), resource.secret_inputs), computed)
    for key, value in _flatten(inputs):
        if key == "name" and value == resource.name:
            continue
        rows.append(f"    {key} = {json.dumps(value)}{_replacement_note(resource, key)}")
    if resource.dependencies:
        rows.append(f"    (waits for: {', '.join(sorted(_short(d) for d in resource.dependencies))})")
    rows.append("")
    return rows


def write_plan(run: ProgramRun, out_dir: Path, review: Review | None = None) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    kube_path, summary_path = out_dir / "kubernetes.yaml", out_dir / "summary.md"
    kube_path.write_text(kubernetes_yaml(run))
    split = kubernetes_yaml_by_cluster(run)
    if len(split) > 1:
        (out_dir / "kubernetes").mkdir(exist_ok=True)
        for cluster, text in split.items():
            (out_dir / "kubernetes" / f"{cluster}.yaml").write_text(text)
    summary_path.write_text(summary(run, review))
    (out_dir / "report.md").write_text(pr_report(run, review))
    if review is not None and review.changes:
        (out_dir / "compare.md").write_text("\n".join(review.changes) + "\n")
    if review is not None and review.compare_json is not None:
        (out_dir / "compare.json").write_text(json.dumps(review.compare_json, indent=1) + "\n")
    return kube_path, summary_path


# --------------------------------------------------------------------------------------------
# The reviewer's sections
# --------------------------------------------------------------------------------------------


def infra_review(project_dir: Path, stack: str, prices: PriceTable) -> Review:
    """Capacity, cost and the diagram of an infra stack, from the config the program just rendered."""
    settings = stacks.infra_settings(project_dir, stack)
    shapes = stacks.job_shapes(stack, settings)
    stack_report = report.stack_report(settings, shapes[0])
    review = Review([report.capacity_markdown(stack_report), report.cost_markdown(stack_report, prices),
                     ["## Diagram", "", report.diagram(stack_report).mermaid()]])
    if len(shapes) > 1:
        review.notes.append("The jobs stacks submit several job shapes; the concurrency above is for the first ("
                            + ", ".join(f"`{s.name}` ({s.source})" for s in shapes) + ").")
    review.headline = screen.infra_headline(stack_report, prices, review.notes)
    return review


def component_review(run: ProgramRun) -> Review:
    """A program of its own that builds with the public components (tpu_fallback.api): the render, without the
    capacity and cost report, which reads the settings from a stack's config (the component's args are not in it)."""
    platforms = [r.name for r in run.resources if r.type.startswith("tpu-fallback:index:")]
    note = (f"Project `{run.project}` builds {len(platforms)} tpu-fallback component(s) "
            f"({', '.join(platforms) or 'none'}): below are the resources it registers and its Kubernetes objects. "
            "Capacity, cost and the diagram come from a stack's config: write the same settings as an infra stack "
            "file (the args are its keys, camelCase) and run `./scripts/plan <stack> --stack-file <file>` "
            "(docs/components.md#the-offline-plan).")
    return Review(notes=[note], headline=screen.wrap(note.replace("`", "")))


def jobs_review(project_dir: Path, stack: str, references: dict[str, Any], prices: PriceTable,
                run: ProgramRun | None = None) -> Review:
    infra_stack, specs = stacks.jobs_config(project_dir, stack)
    outputs = dict((references.get(infra_stack or "") or {}).get("outputs") or {})
    lines, diagram = report.jobs_markdown(infra_stack or "?", specs, outputs, prices)
    objects = run.kubernetes_objects() if run is not None else []
    submitted = [f"{o['kind']} {(o.get('metadata') or {}).get('namespace', 'default')}/{o['metadata']['name']}"
                 for o in objects if o.get("kind") not in ("ConfigMap", "Secret")]
    headline = screen.jobs_headline(lines)
    if submitted:
        headline += ["", *screen.wrap("Submits " + ", ".join(submitted) + ".")]
    return Review([lines, ["## Diagram", "", diagram.mermaid()]], headline=headline)


@dataclass(frozen=True)
class Side:
    """One render to compare: where its project is and what to call it."""

    label: str
    project_dir: Path | None  # None: the stack does not exist there (everything is created)


@contextlib.contextmanager
def _side(project_dir: Path, stack: str, label: str, stack_text: str | None, project_text: str | None = None
          ) -> Iterator[Side]:
    if stack_text is None:
        yield Side(label, None)
        return
    with stacks.project_copy(project_dir, stack, stack_text, project_text) as copy:
        yield Side(label, copy)


def _references(project_dir: Path, stack: str, given: Path | None) -> dict[str, Any]:
    if given:
        loaded: dict[str, Any] = json.loads(given.read_text())
        return loaded
    return infra_references(project_dir, stack)  # a jobs stack: render its infraStack from this repository first


def _render(project_dir: Path, stack: str, stack_outputs: Path | None) -> ProgramRun:
    return run_program(project_dir, stack, stack_references=_references(project_dir, stack, stack_outputs),
                       raise_errors=False)


def _settings_rows(project_dir: Path, stack: str, infra: bool) -> dict[str, str] | None:
    """The stack's settings as rows (settings_view), or None when they cannot be read (the render says why)."""
    try:
        if not infra:
            return settings_view.jobs_rows(*stacks.jobs_config(project_dir, stack))
        return settings_view.stack_rows(stacks.infra_settings(project_dir, stack))
    except (ConfigError, ValueError, FileNotFoundError):
        return None


def _aliases(before_dir: Path, before_stack: str, after_dir: Path, after_stack: str
             ) -> tuple[compare.Aliases | None, str]:
    """How two stacks' resources are matched by role: (aliases, a sentence saying so); (None, why) when their
    clusters have no role in common (a single cluster against MultiKueue's manager and workers)."""
    try:
        a, b = stacks.infra_settings(before_dir, before_stack), stacks.infra_settings(after_dir, after_stack)
    except (ConfigError, ValueError, FileNotFoundError):
        return None, ""
    roles_a, roles_b = settings_view.cluster_roles(a), settings_view.cluster_roles(b)
    common = [r for r in roles_a if r in roles_b and r != "stack"]
    there, here = settings_view.describe_clusters(roles_a), settings_view.describe_clusters(roles_b)
    if not common:
        return None, (f"`{before_stack}` has {there} and `{after_stack}` has {here}: different clusters of different "
                      "kinds, so their resources are not matched one to one; the settings above are what differs.")
    placeholders = {r: f"<{r}>" for r in common}
    if "stack" in roles_a and "stack" in roles_b:
        placeholders["stack"] = "<stack>"
    before = {roles_a[r]: p for r, p in placeholders.items()}
    after = {roles_b[r]: p for r, p in placeholders.items()}
    if a.project != b.project:
        before[a.project], after[b.project] = "<project>", "<project>"
    renamed = [r for r in common if roles_a[r] != roles_b[r]]
    if not renamed and a.project == b.project:
        return compare.Aliases(before, after), "Resources are matched by URN (the same cluster names)."
    pairs = ", ".join(f"`{roles_a[r]}` ↔ `{roles_b[r]}`" for r in renamed)
    project = f" and project `{a.project}` ↔ `{b.project}`" if a.project != b.project else ""
    return compare.Aliases(before, after), (
        f"`{before_stack}` and `{after_stack}` are two deployments: {there} and {here} are different clusters. "
        f"Their resources are matched by role, reading {pairs or 'the cluster names'}{project} as the same in names "
        f"and values; a change below is what turning `{before_stack}`'s settings into `{after_stack}`'s would do "
        f"to `{before_stack}`.")


@dataclass
class Comparison:
    """The Changes section (markdown) and its few lines for the screen."""

    markdown: list[str]
    headline: screen.CompareHeadline
    json: list[dict[str, Any]] | None = None  # the resources' changes, matched by URN only (compare.to_json)


def _compare(args: argparse.Namespace, project_dir: Path, render_dir: Path, after: ProgramRun) -> Comparison:
    """The Changes section against the base the arguments name: the settings that differ, then the resources."""
    stack = args.stack
    here = f"`{stack}`" + (f" ({args.stack_file})" if args.stack_file else " (this tree)")
    aliases, matched = None, ""
    with contextlib.ExitStack() as scope:
        if args.compare_stack:
            side = Side(f"stack `{args.compare_stack}`", project_dir)
            base_stack = args.compare_stack
        elif args.compare_file:
            side = scope.enter_context(_side(project_dir, stack, f"`{args.compare_file}`",
                                             Path(args.compare_file).read_text()))
            base_stack = stack
        else:
            rev = args.compare_rev
            text = stacks.git_show(rev, project_dir / f"Pulumi.{stack}.yaml")
            side = scope.enter_context(_side(project_dir, stack, f"`{stack}` at `{rev}`", text,
                                             stacks.git_show(rev, project_dir / "Pulumi.yaml")))
            base_stack = stack
        title = f"## Changes from {side.label} to {here}"
        if side.project_dir is None:
            before = ProgramRun(after.project, base_stack, [], {}, set())
            rows_before = None
            note = [f"(Pulumi.{stack}.yaml does not exist at the base: every resource is new.)"]
        else:
            before = _render(side.project_dir, base_stack, args.stack_outputs)
            note = []
            if before.error is not None:
                why = f"The base could not be rendered: {type(before.error).__name__}: {before.error}"
                return Comparison([title, "", why], screen.CompareHeadline(
                    screen.wrap(f"Compared with {side.label.replace('`', '')}: {why}")))
            rows_before = _settings_rows(side.project_dir, base_stack, after.project == PROJECT)
            if args.compare_stack and after.project == PROJECT:
                aliases, matched = _aliases(side.project_dir, base_stack, render_dir, stack)
        rows_after = _settings_rows(render_dir, stack, after.project == PROJECT)
    lines = [title, ""]
    headline = screen.CompareHeadline([f"Compared with {side.label.replace('`', '')}:"])
    if rows_before is not None and rows_after is not None:
        settings = settings_view.diff(rows_before, rows_after)
        same = len(set(rows_before) | set(rows_after)) - len(settings)
        names = (base_stack, stack) if args.compare_stack else ("base", "this")
        lines += [f"### Settings that differ ({len(settings)})", "",
                  *settings_view.markdown(settings, same, side.label if not args.compare_stack else f"`{base_stack}`",
                                          here if not args.compare_stack else f"`{stack}`"), ""]
        _settings_headline(headline, settings, same, *names)
    different_kinds = bool(args.compare_stack and after.project == PROJECT and aliases is None and matched)
    if different_kinds:
        lines += ["### Resources", "", matched, "",
                  f"`{base_stack}` renders {sum(r.custom for r in before.resources)} resources, `{stack}` "
                  f"{sum(r.custom for r in after.resources)}."]
        headline.tail += screen.wrap(matched.replace("`", ""), indent="    ", first="  ")
        return Comparison(lines, headline)
    changes = compare.diff(before, after, aliases)
    heading = "### Resources" + (" matched by their role" if aliases is not None and "by role" in matched else "")
    section = compare.markdown(changes, side.label, here, heading=heading,
                               matched="resources matched by role" if "by role" in matched else
                               "resources matched by URN")
    lines += ([matched, ""] if matched else []) + section[:2] + note + section[2:]
    how = "by role" if "by role" in matched else "by URN"
    headline.tail += screen.wrap(f"Resources {how}: {compare.counts_line(changes)[:-1]}; replacements advisory.",
                                 indent="    ", first="  ")
    for warning in [] if args.compare_stack else compare.watched_lines(changes, short=True):
        headline.tail += screen.wrap(warning, indent="      ", first="    ! ")
    return Comparison(lines, headline, None if args.compare_stack else compare.to_json(changes, before, after))


def _settings_headline(headline: screen.CompareHeadline, settings: list[settings_view.SettingChange], same: int,
                       base: str, stack: str) -> None:
    """The settings that differ, a row each (`key  before → after`), into `headline`."""
    if not settings:
        headline.head.append(f"  Settings: all {same} the same.")
        return
    width = min(max(len(c.key) for c in settings), 30)
    headline.head.append(f"  {len(settings)} setting{'s differ' if len(settings) != 1 else ' differs'} "
                         f"({base} → {stack}; {same} the same):")
    for c in settings:
        old = c.before if c.before is not None else "(none)"
        new = c.after if c.after is not None else "(none)"
        headline.rows.append(screen.wrap(f"{c.key.ljust(width)}   {old} → {new}", indent=" " * (width + 7),
                                         first="    "))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stack", help="stack name (reads Pulumi.<stack>.yaml)")
    parser.add_argument("--project", default=".", help="project directory relative to the repository (default: .)")
    parser.add_argument("--out", type=Path, help="output directory (default: build/plan/<project>-<stack>)")
    parser.add_argument(
        "--stack-outputs", type=Path,
        help="JSON file of mocked outputs for StackReferences: {stackName: {outputs, secretOutputNames}}",
    )
    parser.add_argument("--stack-file", type=Path, help="render this stack file instead of Pulumi.<stack>.yaml")
    parser.add_argument("--prices", type=Path,
                        help="a price file merged over tpu_fallback/offline/prices.yaml (same layout)")
    base = parser.add_mutually_exclusive_group()
    base.add_argument("--compare-stack", metavar="STACK", help="compare against another stack of the project")
    base.add_argument("--compare-file", metavar="FILE", help="compare against another stack file")
    base.add_argument("--compare-rev", metavar="REV",
                      help="compare against the stack file at a git revision (git show REV:Pulumi.<stack>.yaml)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--full", action="store_true",
                       help="print the whole summary (every resource, the tree) instead of the one-screen headline")
    shown.add_argument("--quiet", action="store_true", help="print only where the plan was written")
    args = parser.parse_args(argv)

    project_dir = (REPO_ROOT / args.project).resolve()
    name = "infra" if args.project in (".", "") else Path(args.project).name
    out_dir = args.out or DEFAULT_OUT / f"{name}-{args.stack}"
    shutil.rmtree(out_dir, ignore_errors=True)  # a failed render must not leave an earlier plan looking current
    started = time.perf_counter()
    with contextlib.ExitStack() as scope:
        try:
            prices = load_prices(args.prices)
            render_dir = project_dir
            if args.stack_file:
                render_dir = scope.enter_context(stacks.project_copy(project_dir, args.stack,
                                                                     args.stack_file.read_text()))
            references = _references(render_dir, args.stack, args.stack_outputs)
            run = run_program(render_dir, args.stack, stack_references=references, raise_errors=False)
        except (FileNotFoundError, ValueError, yaml.YAMLError) as err:  # PriceTableError, StackFileError: ValueError
            what = "read the price file" if isinstance(err, PriceTableError) else f"read stack {args.stack!r}"
            print(f"offline plan: cannot {what}: {err}", file=sys.stderr)
            return 2
        if run.error is not None:
            kind = "configuration error" if isinstance(run.error, ConfigError) else type(run.error).__name__
            print(f"offline plan of stack {args.stack!r} failed: {kind}: {run.error}", file=sys.stderr)
            print(f"({len(run.resources)} resources were registered before the failure)", file=sys.stderr)
            return 2
        elapsed = time.perf_counter() - started
        review = (infra_review(render_dir, args.stack, prices) if run.project == PROJECT
                  else jobs_review(render_dir, args.stack, references, prices, run) if run.project == JOBS_PROJECT
                  else component_review(run))
        if args.compare_stack or args.compare_file or args.compare_rev:
            try:
                comparison = _compare(args, project_dir, render_dir, run)
                review.changes, review.compare_headline = comparison.markdown, comparison.headline
                review.compare_json = comparison.json
            except (FileNotFoundError, ValueError, yaml.YAMLError) as err:
                print(f"offline plan: cannot compare: {err}", file=sys.stderr)
                return 2
    kube_path, summary_path = write_plan(run, out_dir, review)
    trailer = [f"Rendered {len(run.resources)} registrations in {elapsed:.2f}s (a render of the program, not a diff "
               "against live state)."]
    if not args.full and not args.quiet:
        trailer.append("The rest (the diagram, price sources, every resource and the tree): --full, or the files:")
    trailer += [f"Kubernetes objects: {_relative(kube_path)}", f"Summary:            {_relative(summary_path)}"]
    if review.changes:
        trailer.append(f"Compare:            {_relative(out_dir / 'compare.md')}")
    trailer.append(f"PR report:          {_relative(out_dir / 'report.md')}")
    if args.full:
        print(summary_path.read_text())
        print("\n".join(trailer))
    elif args.quiet:
        print("\n".join(trailer))
    else:
        title = f"Offline plan of {run.project} stack {args.stack}"
        print(screen.render(title, review.headline, review.compare_headline, trailer), end="")
    return 0


def _relative(path: Path) -> Path:
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


if __name__ == "__main__":
    code = main()
    # The mock monitor's worker threads each opened an asyncio loop that is never closed; skip the
    # interpreter's teardown so their garbage collection does not print tracebacks after a clean run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
