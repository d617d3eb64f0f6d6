"""tpu-fallback-jobs: submit RayJobs to the queues of a tpu-fallback infrastructure stack.

The program lives in tpu_fallback.programs.jobs.
"""

from tpu_fallback.programs import jobs

jobs.main()
