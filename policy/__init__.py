"""tpu-fallback's CrossGuard policy pack: plain checks (tpu_policies) and their pulumi-policy wrappers (pack)."""
