"""Entry point the Pulumi CLI runs for `--policy-pack policy`: the tpu-fallback CrossGuard pack.

The checks live in the installed package (tpu_fallback.policy); this directory only holds the pack's
PulumiPolicy.yaml and this file, which the CLI runs with the repository's venv (see PulumiPolicy.yaml).
"""

from pulumi_policy import PolicyPack

from tpu_fallback.policy.pack import ENFORCEMENT_LEVEL, PACK_NAME, build_policies, install_secret_markers

install_secret_markers()
PolicyPack(PACK_NAME, enforcement_level=ENFORCEMENT_LEVEL, policies=build_policies())
