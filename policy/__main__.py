"""Entry point the Pulumi CLI runs for `--policy-pack policy`: the tpu-fallback CrossGuard pack.

The CLI runs this file with the pack's directory as the working directory and sys.path[0]. The
checks live in the `policy` package (so tests and mypy import them as `policy.*`), hence the
repository root on sys.path: keep this directory named `policy`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import PolicyPack

from policy.pack import ENFORCEMENT_LEVEL, PACK_NAME, build_policies, install_secret_markers

install_secret_markers()
PolicyPack(PACK_NAME, enforcement_level=ENFORCEMENT_LEVEL, policies=build_policies())
