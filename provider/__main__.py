"""Serves tpu_fallback.api's components to every Pulumi language (PulumiPlugin.yaml: the CLI runs this directory)."""

from importlib.metadata import version

from pulumi.provider.experimental import component_provider_host

from tpu_fallback.api import MultiRegionPlatform, Platform, TrainingJobs
from tpu_fallback.api.platform import PACKAGE

if __name__ == "__main__":
    component_provider_host(name=PACKAGE, version=version("tpu-fallback"),
                            components=[Platform, MultiRegionPlatform, TrainingJobs])
