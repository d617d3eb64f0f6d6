"""tpu-fallback-jobs: submit RayJobs to the queues of a tpu-fallback infrastructure stack."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # share the project's code, no copies

import pulumi

from components.jobs_stack import submit_jobs

for name, value in submit_jobs().items():
    pulumi.export(name, value)
