"""tpu-fallback infrastructure stack: a GKE cluster whose TPU jobs fall back from on-demand to DWS flex-start.

With `multikueue.enabled`, a MultiKueue manager in front of regional worker clusters instead.
"""

import pulumi

from components.multikueue import MultiKueuePlatform
from components.platform import TpuPlatform
from components.settings import load_settings

settings = load_settings()  # validates every key before any resource is registered
if settings.multikueue.enabled:
    platform: TpuPlatform | MultiKueuePlatform = MultiKueuePlatform(settings.cluster_name, settings)
else:
    platform = TpuPlatform(settings.cluster_name, settings)
for name, value in platform.stack_outputs().items():
    pulumi.export(name, value)
