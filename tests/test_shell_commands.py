"""Every shell command a user is shown runs as written in bash and in zsh: the commands of README.md and docs/*.md,
and every command the jobs and infra stacks export (`pulumi stack output commands`).

Which commands (the rule):
- README.md and docs/*.md: every command of a fenced block whose info string is `bash`, `sh`, `shell` or `console`
  (indented fences too, as inside a list item): each logical line, backslash continuations joined, with its
  trailing comment; blank and comment-only lines are not commands; in a `console` block only the `$ ` lines (and
  their continuations) are. Outside those blocks: every inline code span, and every line of a fenced block
  without an info string, whose first word is kubectl, gcloud, pulumi or helm, or starts with ./scripts/
  (`pulumi up`, not `pulumi.RunError`). Other blocks (yaml, markdown, mermaid, promql) hold no commands.
- The stacks: every string among the outputs of the jobs dev stack (against the infra dev stack's outputs, under
  the mock runtime as the other tests run it) and of the infra dev and global stacks (one cluster and
  multi-region mode; the outputs contract is the same for every stack of a mode) whose first word is a program
  stubbed below; every entry of the jobs stack's `commands` must be one.
- A placeholder in angle brackets (`<your-project-id>`, `<worker>`) is what the reader types a value in place of:
  it is replaced by its words joined with `-` before the checks (as written, bash would read it as redirections).
  Upper-case placeholders (NAMESPACE, POOL) are words already and stay.

What each command gets, in each shell:
1. `bash -n` and `zsh -n`: it parses.
2. a run as a script (`bash -O failglob -c`, `zsh -f -c` with zsh's default NOMATCH), trailing comment included,
   and a run as typed at an interactive prompt (`bash -i`, `zsh -f -i`, reading it from stdin: history expansion
   of `!` on), without its trailing comment (a plain interactive zsh, without `setopt interactivecomments`, would
   pass it to the command as arguments: the pages' comments are for reading). Every program that would reach a
   cluster, a cloud or a long build is a stub that records the arguments it gets: kubectl, gcloud, pulumi, helm,
   curl, pip and the status command (`tpu-fallback`, `kubectl-tpu_fallback`) on PATH, and `./scripts/*` and
   `venv/bin/python` in the empty directory the command runs in (with a `jobs/` to `cd` into and an empty file
   for each `< file` redirection). Everything else (cd, grep, wait) runs for real. A run must write nothing on
   stderr: no syntax error, no glob that failed to match (bash's failglob, zsh's "no matches found"), no
   "event not found", no "command not found"; and each stubbed program must get exactly the arguments the line
   means (read by Python's shlex, where the line has no `$`): a custom-columns or jsonpath spec arrives as one
   argument, unsplit and unglobbed.
3. every kubectl `-o custom-columns=` and `-o jsonpath=` argument a run recorded is split as kubectl splits it
   (k8s.io/kubectl/pkg/cmd/get/customcolumn.go: on `,`, then header and path on the first `:`, the path relaxed to
   `{.path}`), has balanced brackets and quotes and no backslash-escaped quote, and, where a kubectl is installed,
   parses with kubectl's own JSONPath parser (`kubectl create configmap --dry-run=client -o jsonpath=...`, which
   needs no cluster).

zsh is not on every machine: under CI (CI=true; .ci/system-packages installs it) a missing zsh fails these tests,
elsewhere they skip, saying so.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import infra
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun, run_program
from tpu_fallback.render.rayjob import STATUS_KEY

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_INFOS = {"bash", "sh", "shell", "console"}
COMMAND_WORDS = ("kubectl", "gcloud", "pulumi", "helm")  # an inline span or bare line starting so is a command
STUBS_ON_PATH = ("kubectl", "gcloud", "pulumi", "helm", "curl", "pip", "tpu-fallback", "kubectl-tpu_fallback")
STUBS_IN_DIR = ("venv/bin/python", "venv/bin/tpu-fallback",
                *(f"scripts/{p.name}" for p in sorted((REPO_ROOT / "scripts").iterdir()) if os.access(p, os.X_OK)))
SHELLS = ("bash", "zsh")
JOBS_INFRA_STACK = "organization/tpu-fallback/dev"
EXPORTING_INFRA_STACKS = ("dev", "global")
PLACEHOLDER = re.compile(r"<([A-Za-z][\w.-]*(?: [\w.-]+)*)>")
ZSH = shutil.which("zsh")
UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class Command:
    where: str  # page:line, or stack:output path
    text: str  # as shown: physical lines, continuations and trailing comment included

    @property
    def logical(self) -> str:
        """The command as the shell reads it: continuations joined, placeholders filled in."""
        return PLACEHOLDER.sub(lambda m: m[1].replace(" ", "-"), self.text.replace("\\\n", ""))

    @property
    def typed(self) -> str:
        """What a reader types at a prompt: the logical line without its trailing comment."""
        return split_comment(self.logical)[0]


# --- collecting ----------------------------------------------------------------------------------------------------

def split_comment(line: str) -> tuple[str, str]:
    """(command, trailing comment) of one logical line: a `#` outside quotes that starts a word begins the comment."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t;&|()<>"):
            return line[:i].rstrip(), line[i:]
        i += 1
    return line.rstrip(), ""


def block_commands(lines: list[tuple[int, str]], console: bool) -> Iterator[tuple[int, str]]:
    """(line number, command text) of a shell block's lines."""
    pending: list[str] = []
    start = 0
    for number, line in lines:
        if not pending:
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not split_comment(line)[0].strip():
                continue
            start = number
        pending.append(line)
        if not line.endswith("\\"):
            yield start, "\n".join(pending)
            pending = []
    if pending:
        yield start, "\n".join(pending)


def is_command(text: str) -> bool:
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    return (first in COMMAND_WORDS and len(text.split()) > 1) or first.startswith("./scripts/")


def page_commands(page: Path) -> Iterator[Command]:
    name = str(page.relative_to(REPO_ROOT))
    lines = page.read_text().splitlines()
    prose: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(.*)$", lines[i])
        if not fence:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, info = fence[1], fence[2].strip()
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append((i + 1, lines[i].removeprefix(indent)))
            i += 1
        i += 1
        if info in SHELL_INFOS:
            for number, text in block_commands(body, console=info == "console"):
                yield Command(f"{name}:{number}", text)
        elif not info:
            for number, line in body:
                if is_command(line.strip()):
                    yield Command(f"{name}:{number}", line.strip())
    # Inline code spans, which may wrap across lines of a paragraph.
    text = "\n".join(line for _, line in prose)
    numbers = [number for number, _ in prose]
    for span in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        code = " ".join(span[1].split())
        if "\n\n" not in span[1] and is_command(code):
            yield Command(f"{name}:{numbers[text.count(chr(10), 0, span.start())]}", code)


def walk(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, f"{path}[{index}]")
    elif isinstance(value, str):
        yield path, value


def jobs_dev() -> ProgramRun:
    run = infra("dev")
    reference = {"outputs": copy.deepcopy(run.outputs), "secretOutputNames": sorted(run.secret_outputs)}
    return run_program(REPO_ROOT / "jobs", "dev", stack_references={JOBS_INFRA_STACK: reference})


def exported_commands() -> list[Command]:
    runs = [("jobs-dev", jobs_dev()), *((f"infra-{s}", infra(s)) for s in EXPORTING_INFRA_STACKS)]
    found: list[Command] = []
    for label, run in runs:
        for path, value in walk(run.outputs, label):
            words = value.split(maxsplit=1)
            if words and words[0] in STUBS_ON_PATH:
                found.append(Command(path, value))
            else:
                assert ".commands." not in path, f"{path}: an exported command this test cannot run: {value!r}"
    return found


# Found when the module is collected (reading the pages is cheap); the stacks' commands are found by a fixture, so
# that every pytest-xdist worker does not run the programs just to collect this module.
def unique(commands: Iterator[Command]) -> list[Command]:
    """The commands, each once; two different ones on one line told apart by a suffix."""
    found: dict[str, Command] = {}
    for command in commands:
        if command not in found.values():
            where = command.where
            while where in found:
                where += "'"
            found[where] = Command(where, command.text)
    return list(found.values())


PAGE_COMMANDS = unique(command for page in PAGES for command in page_commands(page))


# --- running -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    mode: str  # "syntax", "script" or "typed"
    stderr: str
    calls: list[tuple[str, ...]]  # (program, *arguments) of each stub call, sorted


STUB = """#!/bin/bash
# records its name and arguments, NUL-separated after their count, one file per call
printf '%s\\0' "$#" "${0##*/}" "$@" > "$SHELL_CHECK_LOG/$$.$RANDOM"
"""
# What an interactive shell reading stdin says besides errors: job control off, the `exit` at the end, a job started.
INTERACTIVE_NOISE = re.compile(r"^(bash: cannot set terminal process group .*|bash: no job control in this shell|"
                               r"exit|\[\d+\]\+?\s+(\d+|Done.*))$")


class Sandbox:
    """Stub programs on PATH and in the directory every command runs in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.work = root / "work"
        self.bin.mkdir()
        (self.work / "jobs").mkdir(parents=True)
        for path in [*(self.bin / p for p in STUBS_ON_PATH), *(self.work / p for p in STUBS_IN_DIR)]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(STUB)
            path.chmod(0o755)
        self.home = root / "home"
        self.home.mkdir()
        self.path = os.pathsep.join([str(self.bin), "/usr/local/bin", "/usr/bin", "/bin"])

    def env(self, log: Path) -> dict[str, str]:
        return {"PATH": self.path, "HOME": str(self.home), "LANG": "C.UTF-8", "TERM": "dumb", "PS1": "", "PS2": "",
                "PROMPT": "", "PROMPT2": "", "SHELL_CHECK_LOG": str(log)}

    def run(self, shell: str, mode: str, command: Command) -> Run:
        for redirected in re.findall(r"(?:^|\s)<\s*([\w./-]+)", command.typed):
            (self.work / redirected).touch()
        log = Path(tempfile.mkdtemp(dir=self.root, prefix="calls."))
        argv, stdin = invocation(shell, mode, command)
        proc = subprocess.run(argv, input=stdin, cwd=self.work, env=self.env(log), capture_output=True, text=True,
                              timeout=60)
        stderr = proc.stderr
        if mode == "typed":
            stderr = "\n".join(line for line in stderr.splitlines() if not INTERACTIVE_NOISE.match(line))
        if mode == "syntax" and proc.returncode and not stderr:
            stderr = f"exit status {proc.returncode}"
        return Run(mode, stderr.strip(), sorted(read_calls(log)))


def invocation(shell: str, mode: str, command: Command) -> tuple[list[str], str | None]:
    script = command.logical if mode == "syntax" else command.logical + "\nwait\n"
    if shell == "bash":
        if mode == "syntax":
            return ["bash", "--norc", "--noprofile", "-n"], script
        if mode == "script":
            return ["bash", "--norc", "--noprofile", "-O", "failglob", "-c", script], None
        typed = f"shopt -s failglob\n{command.typed}\nwait\n"
        return ["bash", "--norc", "--noprofile", "--noediting", "-i", "+m"], typed
    assert ZSH is not None
    if mode == "syntax":
        return [ZSH, "-f", "-n"], script
    if mode == "script":
        return [ZSH, "-f", "-c", script], None
    return [ZSH, "-f", "-i", "+m", "+o", "promptsp"], f"{command.typed}\nwait\n"


def read_calls(log: Path) -> Iterator[tuple[str, ...]]:
    for record in log.iterdir():
        fields = record.read_bytes().decode().split("\0")
        count = int(fields[0])
        yield tuple(fields[1:count + 2])


def expected_calls(command: Command) -> list[tuple[str, ...]] | None:
    """The stub calls the line means, read by shlex: (program, *arguments) of each simple command whose program is a
    stub. None where the line has a `$` (a substitution or a variable: the shell's answer is the only one)."""
    line = command.typed
    if "$" in line or "`" in line:
        return None
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    calls: list[tuple[str, ...]] = []
    words: list[str] = []
    tokens = list(lexer)
    i = 0
    while i <= len(tokens):
        token = tokens[i] if i < len(tokens) else ";"
        if token in {"|", "||", "&&", ";", "&", "|&"}:
            if words and (words[0] in STUBS_ON_PATH or words[0].removeprefix("./") in STUBS_IN_DIR):
                calls.append((words[0].rsplit("/", 1)[-1], *words[1:]))
            words = []
        elif token in {"<", ">", ">>", "<<", "<<<", ">&", "<&"}:
            i += 1  # the redirection's target
        else:
            words.append(token)
        i += 1
    return sorted(calls)


@pytest.fixture(scope="module")
def exported() -> list[Command]:
    return exported_commands()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, exported: list[Command]) -> dict[tuple[str, str, str], Run]:
    """(command's where, shell, mode) -> its run, every one of them side by side."""
    sandbox = Sandbox(tmp_path_factory.mktemp("shell-commands"))
    shells = [s for s in SHELLS if s == "bash" or ZSH]
    jobs = [(c, s, m) for c in PAGE_COMMANDS + exported for s in shells for m in ("syntax", "script", "typed")]
    with ThreadPoolExecutor(max_workers=8) as pool:
        done = pool.map(lambda job: sandbox.run(job[1], job[2], job[0]), jobs)
        return {(c.where, s, m): run for (c, s, m), run in zip(jobs, done, strict=True)}


def need(shell: str) -> None:
    if shell == "zsh" and ZSH is None:
        if UNDER_CI:
            pytest.fail("zsh is not installed: CI must check every command in zsh too (.ci/system-packages)")
        pytest.skip("zsh is not installed (apt-get install zsh, or .ci/system-packages): the zsh checks did not run")


# --- the checks ----------------------------------------------------------------------------------------------------

def test_zsh_is_there_under_ci() -> None:
    need("zsh")


def problems(command: Command, shell: str, runs: dict[tuple[str, str, str], Run]) -> list[str]:
    found = []
    expected = expected_calls(command)
    for mode in ("syntax", "script", "typed"):
        run = runs[command.where, shell, mode]
        if run.stderr:
            found.append(f"{command.where}: {shell} ({mode}) on {command.text!r}:\n{run.stderr}")
        elif mode != "syntax" and expected is None and not run.calls:
            found.append(f"{command.where}: {shell} ({mode}) on {command.text!r} called no stubbed program")
        elif mode != "syntax" and expected is not None and run.calls != expected:
            found.append(f"{command.where}: {shell} ({mode}) on {command.text!r}: the programs got {run.calls}, "
                         f"not {expected}")
    return found


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("command", PAGE_COMMANDS, ids=[c.where for c in PAGE_COMMANDS])
def test_page_command_runs_as_written(command: Command, shell: str, runs: dict[tuple[str, str, str], Run]) -> None:
    need(shell)
    found = problems(command, shell, runs)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("shell", SHELLS)
def test_exported_commands_run_as_written(shell: str, exported: list[Command],
                                          runs: dict[tuple[str, str, str], Run]) -> None:
    need(shell)
    found = [problem for command in exported for problem in problems(command, shell, runs)]
    assert not found, "\n".join(found)


def printer_specs(runs: dict[tuple[str, str, str], Run]) -> dict[str, str]:
    """kubectl output spec (`custom-columns=...`, `jsonpath=...`) -> where it was recorded first."""
    specs: dict[str, str] = {}
    for (where, _, mode), run in runs.items():
        for call in run.calls if mode == "script" else ():
            if call[0] != "kubectl":
                continue
            args = list(call[1:])
            for i, arg in enumerate(args):
                value = None
                if arg in {"-o", "--output"} and i + 1 < len(args):
                    value = args[i + 1]
                elif arg.startswith(("-o=", "--output=")):
                    value = arg.split("=", 1)[1]
                elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-o="):
                    value = arg[2:]
                if value and value.startswith(("custom-columns=", "jsonpath=")):
                    specs.setdefault(value, where)
    return specs


JSON_RELAXED = re.compile(r"^\{\.?([^{}]+)\}$|^\.?([^{}]+)$")


def jsonpath_templates(spec: str) -> list[str]:
    """The JSONPath templates kubectl makes of an output spec (customcolumn.go's split, RelaxedJSONPathExpression)."""
    kind, _, value = spec.partition("=")
    if kind == "jsonpath":
        return [value]
    templates = []
    for part in value.split(","):
        header, colon, path = part.partition(":")
        assert colon and header, f"custom-columns part {part!r}: kubectl expects <header>:<json-path-expr>"
        relaxed = JSON_RELAXED.match(path)
        assert relaxed, f"custom-columns path {path!r}: kubectl expects name1.name2, .name1.name2 or {{...}}"
        templates.append("{.%s}" % (relaxed[1] or relaxed[2]))
    return templates


def balanced(template: str) -> bool:
    stack: list[str] = []
    quote = ""
    for c in template:
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            stack.append({"(": ")", "[": "]", "{": "}"}[c])
        elif c in ")]}" and (not stack or stack.pop() != c):
            return False
    return not stack and not quote


def test_kubectl_gets_well_formed_printer_specs(runs: dict[tuple[str, str, str], Run]) -> None:
    specs = printer_specs(runs)
    assert any(s.startswith("custom-columns=") for s in specs) and any(s.startswith("jsonpath=") for s in specs)
    kubectl = shutil.which("kubectl")
    bad = {}
    for spec, where in specs.items():
        for template in jsonpath_templates(spec):
            if not balanced(template) or re.search(r"\\[\"']", template):
                bad[where] = f"{template}: unbalanced, or a backslash before a quote"
            elif kubectl:
                proc = subprocess.run([kubectl, "create", "configmap", "shell-check", "--dry-run=client",
                                       f"--output=jsonpath={template}"], capture_output=True, text=True,
                                      env={"PATH": os.environ["PATH"], "HOME": tempfile.gettempdir(),
                                           "KUBECONFIG": os.devnull}, timeout=60)
                if proc.returncode:
                    bad[where] = f"{template}: {proc.stderr.strip()}"
    assert not bad, bad
    if not kubectl:
        pytest.skip("no kubectl installed: the printer specs were checked for balance only, not by kubectl's parser")


# --- the collector and the exported commands -----------------------------------------------------------------------

def test_the_collector_finds_every_kind_of_command(exported: list[Command]) -> None:
    commands = PAGE_COMMANDS + exported
    where = {c.where.split(":")[0].split(".")[0] for c in commands}
    texts = {c.logical for c in commands}
    assert {"README", "docs/fallback", "docs/multikueue", "docs/hardened-projects", "jobs-dev"} <= where
    assert "./scripts/plan dev --project jobs           # the jobs project, against the infra dev stack rendered " \
           "here" in texts  # a shell block, with its comment
    assert "gcloud container node-pools update POOL --enable-private-nodes" in texts  # an inline span
    assert "pulumi up -s global --replace 'that-URN'" in texts  # an indented fence, a placeholder filled in
    assert any(c.text.startswith("kubectl -n default get workloads.kueue.x-k8s.io \\\n") for c in commands)
    assert split_comment("a '#x' \"y # z\" b#c # d") == ("a '#x' \"y # z\" b#c", "# d")
    assert list(block_commands([(1, "$ a \\"), (2, "  b"), (3, "out"), (4, "$ c")], console=True)) == [
        (1, "a \\\n  b"), (4, "c")]


def test_every_exported_command_is_checked_and_leads_with_the_status_command(exported: list[Command]) -> None:
    commands = jobs_dev().outputs["commands"]
    checked = {c.where for c in exported}
    for job, entries in commands.items():
        assert next(iter(entries)) == STATUS_KEY, job
        # `pulumi stack output commands` prints an object's keys sorted: the status command comes first there too.
        assert sorted(entries)[0] == STATUS_KEY, job
        assert entries[STATUS_KEY].startswith("tpu-fallback status ")
        assert {f"jobs-dev.commands.{job}.{key}" for key in entries} <= checked


def test_the_status_command_is_asked_about_each_job() -> None:
    commands = jobs_dev().outputs["commands"]
    assert {job: entries[STATUS_KEY] for job, entries in commands.items()} == {
        job: f"tpu-fallback status {job} --namespace default" for job in commands}


if __name__ == "__main__":  # list what is checked: python -m tests.test_shell_commands
    for found in PAGE_COMMANDS + exported_commands():
        sys.stdout.write(f"{found.where}\t{found.logical}\n")
