"""The lock files pin every package the requirement files name, at the same version, with hashes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpu_fallback.offline.mockrun import REPO_ROOT

PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)")


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line, following `-r` includes."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line.startswith("-r "):
            out |= pins(path.parent / line[3:].strip())
        elif match := PIN.match(line):
            out[re.sub(r"\[.*\]", "", match[1]).lower().replace("_", "-")] = match[2]
    return out


@pytest.mark.parametrize(("requirements", "lock"), [("requirements.txt", "requirements.lock"),
                                                     ("requirements-dev.txt", "requirements-dev.lock")])
def test_the_lock_matches_the_requirements(requirements: str, lock: str) -> None:
    wanted, locked = pins(REPO_ROOT / requirements), pins(REPO_ROOT / lock)
    stale = {name: (version, locked.get(name)) for name, version in wanted.items() if locked.get(name) != version}
    assert not stale, f"{lock} is stale (run scripts/lock): {stale}"
    assert len(locked) > len(wanted)  # the transitive ones are there too
    lines = (REPO_ROOT / lock).read_text().splitlines()
    unhashed = [line for i, line in enumerate(lines)
                if PIN.match(line) and not (i + 1 < len(lines) and "--hash=sha256:" in lines[i + 1])]
    assert not unhashed, f"{lock}: pins without hashes: {unhashed}"
