"""tpu-fallback: GKE TPU training with on-demand (plan A) -> DWS flex-start (plan B) fallback, as Pulumi code.

Layers, each importing only the ones above it in this list:

    model/       pure: TPU catalog, capacity and quota arithmetic, settings and jobs config, outputs contract
    render/      pure: Kubernetes objects, Helm values, RayJobs, kubeconfigs (data in, dicts out)
    components/  Pulumi ComponentResources that register what render/ builds
    programs/    the two Pulumi programs' main logic (infra, jobs)
    offline/     the mock-runtime harness and the offline plan (no cloud, no CLI)
    policy/      the CrossGuard checks (pure) and their pulumi-policy adapter
    training/    the JAX + Ray Train script the RayJobs run
"""
