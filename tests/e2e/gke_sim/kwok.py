"""KWOK, which plays the kubelets: the stages the sim runs it with, and the per-job annotations they honour."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # value "fake": KWOK manages the node and its pods
KWOK_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"  # per-pod override of the run time (a Go duration)
# A node of a multi-host slice that is still coming up (nodes.py): KWOK's node-initialize stage leaves it alone, so it
# stays NotReady, with the API server's not-ready taint, until the whole slice has registered and the sim removes it.
REGISTERING_ANNOTATION = "tpu-fallback.sim/registering"


def kwok_stage_files(stages_dir: Path) -> dict[str, dict[str, Any]]:
    """KWOK's own Stage manifests (copied from sigs.k8s.io/kwok's kustomize/stage by build_components.sh)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(stages_dir.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out[doc["metadata"]["name"]] = doc
    return out


# The stages the sim runs with, from KWOK's "fast" set: nodes Ready at once (node-initialize, with leases kept by
# node-heartbeat-with-lease), pods Running and Ready as soon as they are bound (pod-ready), pods with a
# deletionTimestamp removed at once (pod-delete), and pods owned by a Job (the Ray submitter, the readiness
# gate) Succeeded after the job's run time (pod-complete, with its per-pod annotation override kept).
KWOK_STAGE_FILES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")
# Two more of the sim's own, for pods that carry READY_AFTER_ANNOTATION (which pod-ready then leaves alone): bound,
# they stay Pending and not Ready on their node, with their IPs, their containers waiting (pod-starting:
# ContainerCreating, as while a large image is pulled, or ImagePullBackOff for "never"; its template uses the
# functions of KWOK v0.8.0's pod-ready); after the annotation's duration they turn Running and Ready as pod-ready
# makes them (pod-ready-late). `with_workers_ready_after` puts the annotation on a RayJob's workers.
KWOK_STAGES = (*KWOK_STAGE_FILES, "pod-starting", "pod-ready-late")
READY_AFTER_ANNOTATION = "tpu-fallback.sim/ready-after"  # a Go duration from binding to Ready, or "never"
NEVER = "never"
_READY_AFTER = f'.metadata.annotations["{READY_AFTER_ANNOTATION}"]'
_POD_STARTING_STATUS = """\
{{ $now := Now }}
{{ $never := eq (index .metadata.annotations "<annotation>") "<never>" }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  reason: ContainersNotReady
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      {{ if $never }}
      reason: ImagePullBackOff
      message: {{ printf "Back-off pulling image %q" .image | Quote }}
      {{ else }}
      reason: ContainerCreating
      {{ end }}
{{ end }}
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Pending
startTime: {{ $now | Quote }}
""".replace("<annotation>", READY_AFTER_ANNOTATION).replace("<never>", NEVER)
# Running and Ready, as KWOK's pod-ready makes a pod, keeping the IPs pod-starting gave it (a second allocation
# would add a second IP of the family, which the API server refuses).
_POD_READY_LATE_STATUS = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
{{ range .spec.readinessGates }}
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: {{ .conditionType | Quote }}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
phase: Running
"""


def kwok_stages(job_run_real_seconds: float, stages_dir: Path | None = None) -> list[dict[str, Any]]:
    """KWOK_STAGES: KWOK's (KWOK_STAGE_FILES) with pod-complete delayed by the job's run time (real seconds) and
    pod-ready leaving the pods with READY_AFTER_ANNOTATION to the sim's two stages."""
    if stages_dir is None:
        from tests.e2e.controlplane import build_components

        comps = build_components()
        if comps.kwok_stages_dir is None:
            raise RuntimeError("bin.env has no KWOK_STAGES_DIR; run tests/e2e/build_components.sh")
        stages_dir = comps.kwok_stages_dir
    found = kwok_stage_files(stages_dir)
    missing = [s for s in KWOK_STAGE_FILES if s not in found]
    if missing:
        raise FileNotFoundError(f"KWOK stages {', '.join(missing)} not in {stages_dir}")
    stages = [copy.deepcopy(found[s]) for s in KWOK_STAGE_FILES]
    for stage in stages:
        if stage["metadata"]["name"] == "pod-complete":
            stage["spec"]["delay"] = {
                "durationMilliseconds": max(1, int(job_run_real_seconds * 1000)),
                "durationFrom": {"expressionFrom": f'.metadata.annotations["{KWOK_COMPLETE_DELAY}"]'},
            }
    initialize = next(s for s in stages if s["metadata"]["name"] == "node-initialize")
    _match(initialize).append({"key": f'.metadata.annotations["{REGISTERING_ANNOTATION}"]', "operator": "DoesNotExist"})
    ready = next(s for s in stages if s["metadata"]["name"] == "pod-ready")
    _match(ready).append({"key": _READY_AFTER, "operator": "DoesNotExist"})
    starting = {"apiVersion": ready.get("apiVersion", "kwok.x-k8s.io/v1alpha1"), "kind": "Stage",
                "metadata": {"name": "pod-starting"},
                "spec": {"resourceRef": copy.deepcopy(ready["spec"]["resourceRef"]), "selector": {"matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.podIP", "operator": "DoesNotExist"},
                    {"key": _READY_AFTER, "operator": "Exists"},
                ]}, "next": {"statusTemplate": _POD_STARTING_STATUS}}}
    late = {"apiVersion": starting["apiVersion"], "kind": "Stage", "metadata": {"name": "pod-ready-late"},
            "spec": {"resourceRef": copy.deepcopy(ready["spec"]["resourceRef"]), "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                {"key": ".status.podIP", "operator": "Exists"},
                {"key": _READY_AFTER, "operator": "Exists"},
                {"key": _READY_AFTER, "operator": "NotIn", "values": [NEVER]},
            ]}, "delay": {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": _READY_AFTER}},
                "next": {"statusTemplate": _POD_READY_LATE_STATUS}}}
    return [*stages, starting, late]


def _match(stage: dict[str, Any]) -> list[dict[str, Any]]:
    expressions: list[dict[str, Any]] = stage["spec"].setdefault("selector", {}).setdefault("matchExpressions", [])
    return expressions


def with_workers_ready_after(rayjob: Mapping[str, Any], real_seconds: float | None) -> dict[str, Any]:
    """The RayJob with worker pods that start slowly: bound to their node, they stay Pending and not Ready (their
    containers waiting: ContainerCreating, as while a large image is pulled) for `real_seconds`, then run; None:
    never (ImagePullBackOff, as for an image that cannot be pulled). The head and the submitter start as before.
    KWOK's stages honour READY_AFTER_ANNOTATION on the workers' pod templates (see KWOK_STAGES)."""
    out = copy.deepcopy(dict(rayjob))
    value = NEVER if real_seconds is None else f"{max(1, int(real_seconds * 1000))}ms"
    for group in out["spec"]["rayClusterSpec"].get("workerGroupSpecs") or []:
        group["template"].setdefault("metadata", {}).setdefault("annotations", {})[READY_AFTER_ANNOTATION] = value
    return out


def with_run_time(rayjob: Mapping[str, Any], real_seconds: float) -> dict[str, Any]:
    """The RayJob with its own run time: KWOK's pod-complete delay annotation on its submitter pod template (the
    project's one, or KubeRay's default, as Kueue copies it, when the RayJob has none). Other objects come back
    unchanged."""
    out = copy.deepcopy(dict(rayjob))
    if out.get("kind") != "RayJob":
        return out
    head = out["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    template = out["spec"].setdefault("submitterPodTemplate", {"spec": {"restartPolicy": "Never", "containers": [{
        "name": "ray-job-submitter", "image": head["image"],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}},
    }]}})
    template.setdefault("metadata", {}).setdefault("annotations", {})[KWOK_COMPLETE_DELAY] = (
        f"{max(1, int(real_seconds * 1000))}ms")
    return out
