"""The training script the RayJobs run (mounted from a ConfigMap; standalone: imports nothing from the package)."""
