"""Kueue: the kueue-system namespace, the pinned Helm release, and a readiness gate for its webhooks.

Why a gate: Kueue's webhooks (failurePolicy Fail) keep refusing requests for 10-30 s after the
controller reports Ready (kubernetes-sigs/kueue#13036), and pulumi-kubernetes does not retry webhook
errors (pulumi-kubernetes#3429). So on a brand-new cluster the first `pulumi up` would fail creating
the queue objects. The gate is a Job that submits a probe ResourceFlavor with a server-side dry run:
the request goes through Kueue's mutating and validating webhooks but stores nothing. A failing probe
fails the pod; the Job retries it with Kubernetes' exponential back-off until the webhooks answer.
Pulumi waits for the Job to complete, and every queue object depends on the Job. The Job's pod
template carries the Kueue version, so an upgrade replaces the Job and the gate runs again.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from tpu_fallback.model.labels import NODEPOOL_LABEL
from tpu_fallback.model.settings import FallbackSettings, KueueSettings
from tpu_fallback.render.kueue import KUEUE_CHART, KUEUE_NAMESPACE, kueue_helm_values, readiness_probe_flavor

VISIBILITY_GATE = "VisibilityOnDemand"
DEFAULT_GATE_IMAGE = "registry.k8s.io/kubectl:v1.34.1"  # distroless kubectl, entrypoint kubectl
GATE_TIMEOUT = "15m"


@dataclass(frozen=True)
class KueueArgs:
    kueue: KueueSettings
    system_pool: str | None  # pin Kueue (and its gate) to this node pool; None on Autopilot
    gate_image: str = DEFAULT_GATE_IMAGE
    fallback: FallbackSettings | None = None  # enabled: Kueue's waitForPodsReady for the fallback controller
    # What the release waits for besides the cluster: the system pool its pods are pinned to. Without it, on a
    # first `pulumi up` the release's --wait starts while GKE is still creating the pool (its pods Pending).
    after: Sequence[pulumi.Resource] = ()
    # An Autopilot cluster (the MultiKueue manager) refuses every create in kube-system, its managed namespace
    # ("GKE Warden authz [denied by managed-namespaces-limitation]"; GKE Autopilot overview, managed namespaces,
    # https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-overview), so the chart's one object there
    # must go (autopilot_values).
    autopilot: bool = False


class Kueue(pulumi.ComponentResource):
    """With `kueue.install` false (an existing cluster's own Kueue) there is no namespace or release: the
    readiness gate alone checks that a Kueue serving kueue.x-k8s.io/v1beta2 with its webhooks is there."""

    namespace: k8s.core.v1.Namespace | None
    release: k8s.helm.v3.Release | None
    ready: k8s.batch.v1.Job  # depend on this, not on the release

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tpu-fallback:kueue:Kueue", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.namespace = self.release = None
        if args.kueue.install:
            self._install(name, args, child)
        self.ready = self._readiness_gate(name, args)
        self.register_outputs({"version": args.kueue.version, "namespace": KUEUE_NAMESPACE,
                               "installed": args.kueue.install})

    def _install(self, name: str, args: KueueArgs, child: pulumi.ResourceOptions) -> None:
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata={"name": KUEUE_NAMESPACE}, opts=child
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="kueue",
            chart=KUEUE_CHART,
            version=args.kueue.version,
            namespace=self.namespace.metadata["name"],
            values=autopilot_values(kueue_helm_values(args.kueue, args.system_pool, args.fallback))
            if args.autopilot else kueue_helm_values(args.kueue, args.system_pool, args.fallback),
            # Wait for the controller's Deployment to be Ready (helm --wait); the gate covers the rest.
            skip_await=False,
            timeout=600,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(args.after))),
        )

    def _readiness_gate(self, name: str, args: KueueArgs) -> k8s.batch.v1.Job:
        gate = "kueue-readiness-gate"
        after_release = pulumi.ResourceOptions(parent=self, depends_on=[self.release] if self.release else [])
        namespace = self.namespace.metadata["name"] if self.namespace else KUEUE_NAMESPACE
        account = k8s.core.v1.ServiceAccount(
            f"{name}-gate-account", metadata={"name": gate, "namespace": namespace},
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Least privilege: a dry-run create of ResourceFlavors, nothing else.
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-gate-role",
            metadata={"name": gate},
            rules=[{"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors"], "verbs": ["create"]}],
            opts=pulumi.ResourceOptions(parent=self),
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-gate-binding",
            metadata={"name": gate},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": gate},
            subjects=[{"kind": "ServiceAccount", "name": gate, "namespace": KUEUE_NAMESPACE}],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        probe = k8s.core.v1.ConfigMap(
            f"{name}-gate-probe",
            metadata={"name": "kueue-readiness-probe", "namespace": namespace},
            data={"flavor.yaml": yaml.safe_dump(readiness_probe_flavor(), sort_keys=False)},
            opts=pulumi.ResourceOptions(parent=self),
        )
        return k8s.batch.v1.Job(
            f"{name}-ready",
            metadata={"name": "kueue-webhooks-ready", "namespace": namespace},
            spec={
                "backoffLimit": 12,
                "activeDeadlineSeconds": 900,
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": gate}},
                    "spec": {
                        "serviceAccountName": gate,
                        "restartPolicy": "Never",
                        "nodeSelector": {NODEPOOL_LABEL: args.system_pool} if args.system_pool else {},
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{
                            "name": "probe",
                            "image": args.gate_image,
                            "args": ["create", "--dry-run=server", "-f", "/probe/flavor.yaml", "-o", "name"],
                            # Part of the pod template, so a Kueue upgrade replaces the Job and re-runs the gate.
                            "env": [{"name": "KUEUE_VERSION", "value": args.kueue.version}],
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                          "limits": {"memory": "64Mi"}},
                            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                "capabilities": {"drop": ["ALL"]}},
                            "volumeMounts": [{"name": "probe", "mountPath": "/probe", "readOnly": True}],
                        }],
                        "volumes": [{"name": "probe", "configMap": {"name": "kueue-readiness-probe"}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(
                after_release,
                pulumi.ResourceOptions(
                    depends_on=[binding, probe],
                    custom_timeouts=pulumi.CustomTimeouts(create=GATE_TIMEOUT, update=GATE_TIMEOUT),
                ),
            ),
        )


def autopilot_values(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's values for an Autopilot cluster. Kueue 0.19.2's chart creates one object in kube-system, the
    visibility server's RoleBinding to extension-apiserver-authentication-reader
    (templates/visibility/role_binding.yaml, enableVisibilityAuthReaderRoleBinding), which Autopilot refuses and
    with it the whole release. Without that binding the visibility server cannot read its authentication
    ConfigMap and the controller exits (cmd/kueue/main.go: os.Exit(1) when CreateAndStartVisibilityServer fails;
    k8s.io/apiserver delegating authentication does not tolerate the lookup failure by default), so its feature
    gate VisibilityOnDemand (beta, on by default since 0.9) is turned off too: the manager then serves no
    pending-workloads visibility API (`kubectl get --raw /apis/visibility.kueue.x-k8s.io/...`); the workers,
    on Standard clusters, still do."""
    out = copy.deepcopy(values)
    out["enableVisibilityAuthReaderRoleBinding"] = False
    manager = out.setdefault("controllerManager", {})
    gates = [g for g in manager.get("featureGates", []) if g["name"] != VISIBILITY_GATE]
    manager["featureGates"] = [*gates, {"name": VISIBILITY_GATE, "enabled": False}]
    return out
