"""The README and the docs/ pages hold together: every relative link reaches a file, every #anchor a heading of the
page it names, every docs page can be reached from the README by its links, and the package drawing of
docs/development.md names every folder of the repository and of the package, and only files that exist."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

from tpu_fallback.offline.mockrun import REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code taken out (links in code are not links)."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "``", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (inline code keeps its content, links their text) lowercased, every
    character but letters, digits, spaces, hyphens and underscores dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [m.group(1) for line in prose_lines(page.read_text()) for m in LINK.finditer(line)]


def test_the_pages_are_found_and_have_links() -> None:
    # Guards against a checker that finds nothing: the README links the docs index and the fallback page.
    readme = links(REPO_ROOT / "README.md")
    assert "docs/README.md" in readme and any(link.startswith("docs/fallback.md") for link in readme)
    assert len(PAGES) >= 10


def test_slugs_are_githubs() -> None:
    assert slug("When plan A has no capacity (stock-out fallback)") == "when-plan-a-has-no-capacity-stock-out-fallback"
    assert slug('The simulated GKE ("GKE in a box")') == "the-simulated-gke-gke-in-a-box"
    assert slug("Cluster `tpu-cluster` (us-east5-b)") == "cluster-tpu-cluster-us-east5-b"
    assert slug("Quick start — no cloud account") == "quick-start--no-cloud-account"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    broken: list[str] = []
    for link in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, ...
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading with that anchor in {target.relative_to(REPO_ROOT)}")
    assert not broken, f"{page.relative_to(REPO_ROOT)}: {broken}"


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    """Following relative links from README.md through the pages reaches every page of docs/."""
    seen: set[Path] = set()
    todo = [(REPO_ROOT / "README.md").resolve()]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / link.partition("#")[0]).resolve() for link in links(page)
                 if not re.match(r"^[a-z][a-z0-9+.-]*:", link) and link.partition("#")[0]]
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in seen] == []


def drawing() -> list[str]:
    text = (DOCS / "development.md").read_text()
    block = text.split("\n```\ntpu_fallback/\n", 1)[1].split("\n```", 1)[0]
    return ["tpu_fallback/", *block.splitlines()]


def test_the_drawing_names_every_folder_of_the_package_and_the_repository() -> None:
    lines = drawing()
    package_folders = {m.group(1) for line in lines if (m := re.match(r"^  (\w+)/", line))}
    top = {m.group(1) for line in lines if (m := re.match(r"^([\w.]+/?)\s", line + " "))}
    real_package = {p.name for p in (REPO_ROOT / "tpu_fallback").iterdir() if (p / "__init__.py").exists()}
    assert package_folders == real_package
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    real_top = {path.split("/")[0] + "/" for path in tracked.splitlines() if "/" in path}
    assert real_top - top == set(), "folders of the repository the drawing leaves out"
    assert "tpu_fallback/fallback/" not in real_top  # the parse splits on the first slash


def test_the_drawing_names_only_files_that_exist() -> None:
    folder: Path | None = None
    missing: list[str] = []
    for line in drawing()[1:]:
        if match := re.match(r"^  (\w+)/", line):
            folder = REPO_ROOT / "tpu_fallback" / match.group(1)
        elif not line.startswith(" "):
            folder = None
            name = line.split()[0]
            if not (REPO_ROOT / name.rstrip("/")).exists():
                missing.append(name)
            continue
        if folder is not None:
            for name in re.findall(r"\b([\w-]+\.(?:py|yaml))\b", line):
                if not any(folder.rglob(name)):  # in the folder or one below it (templates/, settings/)
                    missing.append(f"{folder.relative_to(REPO_ROOT)}/{name}")
    assert not missing
