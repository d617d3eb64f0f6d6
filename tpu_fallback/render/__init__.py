"""Pure renderers: plain dicts for Kubernetes objects, Helm values, RayJobs and kubeconfigs. Never import Pulumi."""
