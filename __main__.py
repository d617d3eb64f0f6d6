"""tpu-fallback infrastructure stack: a GKE cluster whose TPU jobs fall back from on-demand to DWS flex-start."""

import pulumi

from components.platform import TpuPlatform
from components.settings import load_settings

settings = load_settings()  # validates every key before any resource is registered
platform = TpuPlatform(settings.cluster_name, settings)
for name, value in platform.stack_outputs().items():
    pulumi.export(name, value)
