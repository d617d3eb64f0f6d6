"""Pulumi ComponentResources: each takes one args object and registers what tpu_fallback.render builds."""
