"""The CrossGuard policy pack: pure checks (checks.py) and the pulumi-policy adapter (pack.py)."""
