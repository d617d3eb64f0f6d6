"""Kubeconfig documents. Pure Python; the callers wrap the results in Pulumi secrets."""

from __future__ import annotations

import yaml


def gke_exec_kubeconfig(context: str, endpoint: str, ca_certificate_b64: str) -> str:
    """A kubeconfig whose user runs gke-gcloud-auth-plugin, so no credential is ever stored in state."""
    return _kubeconfig(
        context,
        endpoint,
        ca_certificate_b64,
        {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "gke-gcloud-auth-plugin",
                "installHint": "Install gke-gcloud-auth-plugin: "
                "https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl",
                "provideClusterInfo": True,
                "interactiveMode": "Never",
            }
        },
    )


def token_kubeconfig(context: str, endpoint: str, ca_certificate_b64: str, token: str) -> str:
    """A kubeconfig with a bearer token and the cluster CA (no exec plugin, no insecure TLS)."""
    return _kubeconfig(context, endpoint, ca_certificate_b64, {"token": token})


def _kubeconfig(context: str, endpoint: str, ca_certificate_b64: str, user: dict[str, object]) -> str:
    server = endpoint if endpoint.startswith("https://") else f"https://{endpoint}"
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": context, "cluster": {"server": server, "certificate-authority-data": ca_certificate_b64}}
        ],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(document, sort_keys=False)
