"""The component package (provider/) as the real CLI installs it, in a repository copy: its own virtualenv and the
plugin cache entries the CLI's install step insists on.

- The CLI creates provider/venv and installs provider/requirements.txt into it (pip upgrades itself first). The
  repository's ./venv must never be that venv, so the copy gets a clone of it: hard links for lib/ (pip only
  reinstalls the package, `-e ..`, the copy, and replaces files rather than writing into them), real copies of bin/
  and pyvenv.cfg, which `python -m venv` rewrites in place; so the original stays as it was
  (tests/e2e/engine/README.md, problem 14).
- Before it runs a Python component package, the CLI asks the Python host which provider plugins the SDKs in that
  venv need (pulumi-gcp's and pulumi-kubernetes' pulumi-plugin.json) and downloads each whose plugin cache entry is
  missing (pulumi/pulumi pkg/v3 v3.274.1 cmd/pulumi/packageinstallation/packageinstallation.go
  gatherPackageDependenciesStep); PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION does not stop it, and get.pulumi.com
  is out of reach here. The CLI counts a plugin as installed when its cache directory exists without a `.partial`
  file (sdk/v3 go/common/workspace/plugins.go HasPlugin), so the harness makes those directories, empty. Nothing
  these tests build runs the gcp provider (existing-cluster mode with a kubeconfig), and the Kubernetes provider
  runs from the engine's bin dir, as for the repository's own programs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

PROVIDER_DIR = "provider"
PROVIDER_SDKS = ("pulumi_gcp", "pulumi_kubernetes")


def prepare_provider(repo_copy: Path, venv: Path, pulumi_home: Path) -> Path:
    """The copy's provider/ directory, ready for `pulumi package add`: its venv cloned from `venv`, and the
    provider plugins its SDKs name marked installed in `pulumi_home`."""
    provider = repo_copy / PROVIDER_DIR
    target = provider / "venv"
    if not target.exists():
        # Hard links for the installed packages (pip replaces their files, never writes into them); copies of the
        # rest, which the host's `python -m venv` rewrites in place (bin/activate*, pyvenv.cfg).
        target.mkdir()
        for entry in venv.iterdir():
            subprocess.run(["cp", "-al" if entry.name == "lib" else "-a", str(entry), str(target / entry.name)],
                           check=True)
    site = next((target / "lib").glob("python3*/site-packages"))
    for sdk in PROVIDER_SDKS:
        meta = json.loads((site / sdk / "pulumi-plugin.json").read_text())
        (pulumi_home / "plugins" / f"resource-{meta['name']}-v{meta['version']}").mkdir(parents=True, exist_ok=True)
    return provider
