"""Progress on the long builds: go_build.sh's build_component says what it builds, what a cold build is expected
to take and how long it took, one line as each component starts and one as it ends; scripts/steps.sh streams a
long step's lines as they come (scripts/test runs both Go build scripts so, side by side) and keeps its log."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import threading
from pathlib import Path

from tpu_fallback.offline.mockrun import REPO_ROOT

GO_BUILD = REPO_ROOT / "tests" / "e2e" / "go_build.sh"
STEPS = REPO_ROOT / "scripts" / "steps.sh"
# Long enough never to be hit by a step that streams; only a step whose output is held back until it ends (the
# old runner) waits here, and then the test fails instead of hanging.
DEADLOCK_GUARD = 60


def bash(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # A stand-in `go` first on PATH: sourcing go_build.sh needs a toolchain, the helpers only ask its version.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    (fake_bin / "go").write_text("#!/bin/sh\necho go0.0-test\n")
    (fake_bin / "go").chmod(0o755)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, cwd=REPO_ROOT,
                          env={**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", **env})


BUILD_TWICE = """
set -euo pipefail
BUILD_NAME=test_build CACHE=$CACHE_DIR
source tests/e2e/go_build.sh
fake_build() { printf '#!/bin/sh\\n' > "$1/$BINARY"; chmod +x "$1/$BINARY"; }
BINARY=kube-apiserver build_component kube-apiserver v9.9.9 kube-apiserver fake_build
BINARY=kube-apiserver build_component kube-apiserver v9.9.9 kube-apiserver fake_build
BINARY=tool build_component unmeasured-tool v1.0.0 tool fake_build
"""


def test_build_component_says_what_it_builds_how_long_it_should_take_and_took(tmp_path: Path) -> None:
    out = bash(BUILD_TWICE, tmp_path, CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 5, lines
    start, end, cached, other_start, other_end = lines
    assert re.fullmatch(r"\[test_build\] building kube-apiserver v9\.9\.9 \(a cold build took about \d+ min \d+ s "
                        r"on 2 cores\) -> .*/kube-apiserver-v9\.9\.9/kube-apiserver \(with go0\.0-test\)", start), start
    assert re.fullmatch(r"\[test_build\] built kube-apiserver v9\.9\.9 in \d+ s "
                        r"\(a cold build took about \d+ min \d+ s on 2 cores; \S+\)", end), end
    # The expected figure is the same on both lines.
    assert re.search(r"about [^)]*on 2 cores", start)[0] == re.search(r"about [^;]*on 2 cores", end)[0]  # type: ignore[index]
    assert cached.startswith("[test_build] reusing kube-apiserver v9.9.9: ") and "(cached;" in cached
    assert "unmeasured-tool v1.0.0 (no measured cold build time)" in other_start
    assert other_end.startswith("[test_build] built unmeasured-tool v1.0.0 in ")
    assert (tmp_path / "cache" / "kube-apiserver-v9.9.9" / ".complete").exists()


def test_every_component_the_build_scripts_build_has_an_expected_duration(tmp_path: Path) -> None:
    names = set()
    for script in ("build_components.sh", "build_engine.sh"):
        text = (REPO_ROOT / "tests" / "e2e" / script).read_text()
        names |= set(re.findall(r"^\s*build_component (\S+) ", text, re.MULTILINE))
    assert len(names) == 13, names  # seven in build_components.sh, six in build_engine.sh
    listed = bash('set -eu; BUILD_NAME=t CACHE=/nonexistent; source tests/e2e/go_build.sh; '
                  'printf "%s\\n" "${!EXPECTED_SECONDS[@]}"', tmp_path)
    assert set(listed.stdout.split()) == names, listed.stderr


def test_human_duration(tmp_path: Path) -> None:
    out = bash('set -eu; BUILD_NAME=t CACHE=/nonexistent; source tests/e2e/go_build.sh; '
               'for s in 0 59 60 358 3601; do human_duration "$s"; echo; done', tmp_path)
    assert out.stdout.splitlines() == ["0 s", "59 s", "1 min 0 s", "5 min 58 s", "60 min 1 s"]


def read_lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def next_line(lines: queue.Queue[str | None]) -> str | None:
    try:
        return lines.get(timeout=DEADLOCK_GUARD)
    except queue.Empty:
        raise AssertionError(f"no line within {DEADLOCK_GUARD} s: the step's output is held back") from None


def test_a_live_step_streams_its_lines_while_it_runs(tmp_path: Path) -> None:
    # Each step prints a line, then waits for a flag file that the test creates only once it has seen that line:
    # a runner that printed a step's output only when the step ended would never let it end.
    flag_a, flag_b = tmp_path / "a", tmp_path / "b"
    script = f"""
set -euo pipefail
STEP_LOGS={tmp_path}/logs; mkdir -p "$STEP_LOGS"
source {STEPS}
wait_for() {{ echo "[build_a] $2 started"; while [ ! -e "$1" ]; do sleep 0.05; done; echo "go: compiling $2"; }}
start_live build_a wait_for {flag_a} alpha
start_live build_b wait_for {flag_b} beta
finish
echo after
"""
    proc = subprocess.Popen(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = read_lines(proc)
    seen = {next_line(lines), next_line(lines)}
    assert seen == {"[build_a] alpha started", "[build_a] beta started"}, seen
    flag_b.touch()  # the second step first: its lines come while the first still runs
    assert next_line(lines) == "[build_b] go: compiling beta"  # an untagged line gets the step's tag
    flag_a.touch()
    rest = []
    while (line := next_line(lines)) is not None:
        rest.append(line)
    assert proc.wait() == 0
    assert rest[0] == "[build_a] go: compiling alpha"
    assert re.fullmatch(r"== build_a: done after \d+ s", rest[1]) and re.fullmatch(r"== build_b: done after \d+ s",
                                                                                   rest[2]), rest
    assert rest[3:] == ["after"]
    # The log keeps the step's own lines, untagged.
    assert (tmp_path / "logs" / "build_b").read_text() == "[build_a] beta started\ngo: compiling beta\n"


def test_a_failed_live_step_fails_the_run_and_shows_its_whole_output_again(tmp_path: Path) -> None:
    script = f"""
set -euo pipefail
STEP_LOGS={tmp_path}; source {STEPS}
start_live ok true
start_live broken bash -c 'echo "compile error"; exit 3'
finish
echo "not reached"
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 1 and out.stderr == "FAILED: broken\n"
    lines = out.stdout.splitlines()
    verdicts = [line for line in lines if line.startswith("== ")]
    assert [re.sub(r"after \d+ s", "after N s", v) for v in verdicts] == [
        "== ok: done after N s", "== broken: FAILED (exit 3) after N s", "== broken: its whole output again"]
    # Its line as it came (tagged), before its verdict; then its whole output again, untagged; nothing after.
    assert lines.index("[broken] compile error") < lines.index(verdicts[1])
    assert lines[lines.index(verdicts[-1]) + 1:] == ["compile error"]
