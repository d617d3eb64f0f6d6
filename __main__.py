"""tpu-fallback infrastructure stack: a GKE cluster whose TPU jobs fall back from on-demand to DWS flex-start.

With `multikueue.enabled`, a MultiKueue manager in front of regional worker clusters instead.
The program lives in tpu_fallback.programs.infra.
"""

from tpu_fallback.programs import infra

infra.main()
