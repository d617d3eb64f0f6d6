"""What a stack's config means, read as the offline plan renders it: infra Settings, the jobs of a jobs stack,
and throw-away project copies for rendering another stack file (a config file, or one from a git revision).

Pure reading: the same config the mock runtime hands the program (tpu_fallback.offline.mockrun.stack_config),
parsed by the model's own parsers, so the report's numbers come from exactly what the program rendered.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tpu_fallback.model import jobs as jobs_model
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.settings import PROJECT, Settings, decode_config, parse_settings
from tpu_fallback.offline import stackfile
from tpu_fallback.offline.mockrun import REPO_ROOT, stack_config

JOBS_DIR = REPO_ROOT / "jobs"


@dataclass(frozen=True)
class JobShape:
    """What one job asks for: its Ray head on the system pool and `hosts` TPU workers (None: one slice)."""

    name: str
    head: Resources
    worker: Resources
    hosts: int | None
    copies: int
    source: str  # where the shape comes from, for the report
    elastic: bool = False  # KubeRay's autoscaler sidecar in the head pod


def infra_settings(project_dir: Path, stack: str) -> Settings:
    """The infra project's Settings for `stack`, parsed exactly as the program parses them."""
    _, config, secret_keys = stack_config(project_dir, stack)
    secrets = frozenset(k.removeprefix(f"{PROJECT}:") for k in secret_keys)
    return parse_settings(decode_config(config), config.get("gcp:project"), secrets)


def jobs_config(project_dir: Path, stack: str) -> tuple[str | None, tuple[jobs_model.JobSpec, ...]]:
    """A jobs stack's infraStack and its jobs (the model's parser: defaults as the program applies them)."""
    project, config, _ = stack_config(project_dir, stack)
    raw = config.get(f"{project}:jobs")
    return config.get(f"{project}:infraStack"), jobs_model.parse_jobs(json.loads(raw) if raw else None)


def job_shapes(stack: str, settings: Settings) -> list[JobShape]:
    """The jobs the repository's jobs stacks submit to infra `stack`; without one, the queues' own per-host requests
    (`queues.headRequest`, `queues.workerRequest`) for a job of one slice."""
    found: list[JobShape] = []
    for path in sorted(JOBS_DIR.glob("Pulumi.*.yaml")):
        jobs_stack = path.name[len("Pulumi."):-len(".yaml")]
        try:
            infra_stack, specs = jobs_config(JOBS_DIR, jobs_stack)
        except (ValueError, FileNotFoundError):
            continue
        if not infra_stack or infra_stack.split("/")[-1] != stack:
            continue
        found += [JobShape(s.name, s.head_request, s.worker_request, s.workers, s.count, f"jobs stack {jobs_stack}",
                           s.elastic is not None) for s in specs]
    if found:
        return found
    q = settings.queues
    return [JobShape("job", q.head_request, q.worker_request, None, 1,
                     "no jobs stack submits to this stack: queues.headRequest / queues.workerRequest, one slice")]


@contextmanager
def project_copy(project_dir: Path, stack: str, stack_text: str, project_text: str | None = None) -> Iterator[Path]:
    """A temporary copy of a project (Pulumi.yaml, __main__.py) holding `stack_text` as Pulumi.<stack>.yaml."""
    with tempfile.TemporaryDirectory(prefix="tpu-fallback-plan-") as tmp:
        copy = Path(tmp) / project_dir.name
        copy.mkdir()
        (copy / "Pulumi.yaml").write_text(project_text or (project_dir / "Pulumi.yaml").read_text())
        shutil.copy(project_dir / "__main__.py", copy / "__main__.py")
        (copy / f"Pulumi.{stack}.yaml").write_text(stack_text)
        stackfile.read(copy / f"Pulumi.{stack}.yaml")  # refuse what the CLI would refuse, naming the file
        yield copy


class GitError(ValueError):
    """A revision or path git cannot show."""


def git_show(rev: str, path: Path) -> str | None:
    """`git show REV:path` (path relative to the repository); None if the file does not exist at REV."""
    relative = path.resolve().relative_to(REPO_ROOT).as_posix()
    check = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                           capture_output=True, text=True, check=False)
    if check.returncode != 0:
        raise GitError(f"git cannot find revision {rev!r} in {REPO_ROOT}")
    shown = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{rev}:{relative}"],
                           capture_output=True, text=True, check=False)
    return shown.stdout if shown.returncode == 0 else None
