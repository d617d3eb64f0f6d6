"""Cross-check the offline plan's replacement calls against `pulumi preview --json` (issue 39 item 2).

Compare mode decides which changes replace a resource from a table kept by hand beside the provider
(tpu_fallback/offline/inputs.py), so its calls are advisory. The preview workflow runs this after `pulumi preview`:
for every resource both saw change, it compares the offline comparison's call (replace or update, and the top-level
inputs it replaces for: compare.json) with the engine's (`replace` steps and their `replaceReasons`), and reports
where they disagree. A disagreement is a warning, never a failure: the preview diffs against the live state, the
offline comparison against the base commit's render, and the two differ when the stack's state is not the base's.

    python -m tools.replacecheck build/plan/infra-dev/compare.json preview.json [--github] [--summary FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The steps of a replacement (pkg/display/json.go's previewStep.Op): `replace` is the one that carries the reasons;
# create-replacement and delete-replaced accompany it.
REPLACE_OPS = {"replace", "create-replacement", "delete-replaced"}
CHANGE_OPS = {"update", *REPLACE_OPS}


@dataclass(frozen=True)
class Finding:
    urn: str
    text: str
    disagree: bool  # the two calls differ on a resource both changed; False: only one of them saw a change


def _key(urn: str) -> str:
    """A URN without its stack: urn:pulumi:<stack>::<project>::<types>::<name> -> <project>::<types>::<name>."""
    return urn.split("::", 1)[1] if "::" in urn else urn


def _top(keys: list[str] | None) -> set[str]:
    return {k.split(".")[0].split("[")[0] for k in keys or []}


def preview_calls(preview: dict[str, Any]) -> dict[str, tuple[str, set[str]]]:
    """URN without stack -> (replace or update, the top-level inputs the engine replaces for or diffs on)."""
    calls: dict[str, tuple[str, set[str]]] = {}
    for step in preview.get("steps") or []:
        op, key = step.get("op"), _key(str(step.get("urn", "")))
        if op not in CHANGE_OPS:
            continue
        if op in REPLACE_OPS:
            reasons = _top(step.get("replaceReasons")) | calls.get(key, ("", set()))[1]
            calls[key] = ("replace", reasons)
        elif key not in calls:
            calls[key] = ("update", _top(step.get("diffReasons")))
    return calls


def check(offline: list[dict[str, Any]], preview: dict[str, Any]) -> list[Finding]:
    """Where compare mode's replacement calls and `pulumi preview`'s differ."""
    engine = preview_calls(preview)
    mine = {c["urn"]: c for c in offline if c.get("op") in ("replace", "update") and c.get("urn")}
    found: list[Finding] = []
    for urn, change in sorted(mine.items()):
        op, reasons = engine.get(urn, ("", set()))
        called = set(change.get("replacedFor") or [])
        if not op:
            if change["op"] == "replace":
                found.append(Finding(urn, f"compare mode calls {change['name']} replaced (for "
                                          f"{', '.join(sorted(called))}); `pulumi preview` sees no change to it: the "
                                          "stack's state is not the base's render", False))
            continue
        if op == "replace" and change["op"] != "replace":
            found.append(Finding(urn, f"`pulumi preview` replaces {change['name']} for {', '.join(sorted(reasons))}; "
                                      "compare mode calls it an update: tpu_fallback/offline/inputs.py lacks "
                                      f"{', '.join(sorted(reasons - called)) or 'a field'}", True))
        elif op == "update" and change["op"] == "replace":
            found.append(Finding(urn, f"compare mode calls {change['name']} replaced for {', '.join(sorted(called))}; "
                                      "`pulumi preview` updates it in place: tpu_fallback/offline/inputs.py lists a "
                                      "field the provider updates", True))
        elif op == "replace" and reasons and called and not reasons & called:
            found.append(Finding(urn, f"{change['name']} is replaced by both, `pulumi preview` for "
                                      f"{', '.join(sorted(reasons))}, compare mode for {', '.join(sorted(called))}",
                                 True))
    for urn, (op, reasons) in sorted(engine.items()):
        if op == "replace" and urn not in mine:
            found.append(Finding(urn, f"`pulumi preview` replaces {urn.rsplit('::', 1)[-1]} for "
                                      f"{', '.join(sorted(reasons)) or '?'}; the offline comparison saw no change to "
                                      "it: the stack's state is not the base's render", False))
    return found


def report(findings: list[Finding]) -> list[str]:
    lines = ["### Replacement calls: compare mode against `pulumi preview`", ""]
    if not findings:
        return [*lines, "They agree on every resource both saw change."]
    return lines + [f"- {'**disagree**' if f.disagree else 'note'}: {f.text}." for f in findings]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("compare", type=Path, help="the offline plan's compare.json (--compare-rev or --compare-file)")
    parser.add_argument("preview", type=Path, help="the output of `pulumi preview --json`")
    parser.add_argument("--github", action="store_true",
                        help="print each disagreement as a GitHub Actions ::warning:: annotation")
    parser.add_argument("--summary", type=Path, help="append the findings as markdown to this file")
    args = parser.parse_args(argv)
    offline = json.loads(args.compare.read_text()) if args.compare.exists() else []  # no changes: no compare.json
    try:
        preview = json.loads(args.preview.read_text())
    except (OSError, json.JSONDecodeError) as err:
        print(f"replacement cross-check not run: cannot read {args.preview}: {err}")
        return 0
    findings = check(offline, preview)
    lines = report(findings)
    print("\n".join(lines))
    if args.github:
        for finding in findings:
            if finding.disagree:
                print(f"::warning title=Replacement table::{finding.text}")
    if args.summary:
        with args.summary.open("a") as summary:
            summary.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
