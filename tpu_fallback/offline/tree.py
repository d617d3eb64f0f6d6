"""The resource tree as `pulumi preview` shows it, grouped by cluster, with each object's key settings.

Parents come from the recorded registrations (RecordedResource.parent). Each resource belongs to a cluster:
a Kubernetes object to the cluster of its provider, a node pool to its `cluster`, a cluster to itself, and anything
else to the one cluster its enclosing component works on (or to the project, like the APIs). Values the cloud
computes (the mock runtime's endpoint, CA, service-account emails and ids) are shown as `(known after apply)`,
as `pulumi preview` shows them, never as the mock's plausible fakes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from tpu_fallback.offline.mockrun import (
    MOCK_CA,
    MOCK_ENDPOINT,
    SECRET_PLACEHOLDER,
    ProgramRun,
    RecordedResource,
    kubernetes_manifest,
    whole_numbers,
)

UNKNOWN = "(known after apply)"
PROJECT_WIDE = "project-wide (no cluster)"
MANY = "several clusters"  # a component whose children are on more than one cluster
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
K8S_PROVIDER = "pulumi:providers:kubernetes"


# --------------------------------------------------------------------------------------------
# Values computed by the cloud
# --------------------------------------------------------------------------------------------


def computed_values(run: ProgramRun) -> list[str]:
    """Every value the mock runtime made up for an output the cloud computes (mockrun._Mocks): the cluster
    endpoint and CA, service-account emails and resource ids."""
    found = {MOCK_ENDPOINT, MOCK_CA}
    for r in run.resources:
        if not r.custom or r.options.get("read") or r.type.startswith("pulumi:pulumi:"):
            continue
        project, name = r.inputs.get("project"), r.inputs.get("name", r.name)
        if r.type == CLUSTER:
            found.add(f"projects/{project}/locations/{r.inputs.get('location')}/clusters/{name}")
        else:
            found.add(f"{r.name}-id")
        if r.type == "gcp:serviceaccount/account:Account":
            found.add(f"{r.inputs.get('accountId')}@{project}.iam.gserviceaccount.com")
    return sorted(found, key=len, reverse=True)


def _pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    parts = [re.escape(v) for v in values if v]
    # A computed value inside a longer string (serviceAccount:<email>, https://<endpoint>) makes the whole string
    # unknown, as an Output derived from an unknown is; ids only as whole tokens, so names ending in "-id" survive.
    return re.compile(r"(?<![A-Za-z0-9_.-])(?:" + "|".join(parts) + r")(?![A-Za-z0-9_-])") if parts else None


def show_unknowns(value: Any, computed: list[str]) -> Any:
    """`value` with every string holding a computed value replaced by `(known after apply)`."""
    pattern = _pattern(computed)
    if pattern is None:
        return value

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return UNKNOWN if pattern.search(v) else v
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


# --------------------------------------------------------------------------------------------
# Which cluster a resource is on
# --------------------------------------------------------------------------------------------


def _provider_cluster(provider: RecordedResource) -> str:
    identifier = provider.inputs.get("clusterIdentifier")
    if isinstance(identifier, str) and identifier:
        return identifier.rsplit("/clusters/", 1)[-1]  # a cluster id (projects/.../clusters/<name>) or a name
    return provider.name.removesuffix("-k8s")


def clusters_of(run: ProgramRun) -> dict[str, str]:
    """URN -> the cluster a resource is on (PROJECT_WIDE for project-level resources such as the APIs)."""
    by_urn = {r.urn: r for r in run.resources}
    provider_ref = {f"{r.urn}::{r.name}-id": r for r in run.resources if r.type == K8S_PROVIDER}
    own: dict[str, str] = {}
    for r in run.resources:
        if r.type == CLUSTER and not r.options.get("read"):  # a cluster read, not managed, has no inputs
            own[r.urn] = str(r.inputs.get("name", r.name))
        elif r.type == NODE_POOL and r.inputs.get("cluster"):
            own[r.urn] = str(r.inputs["cluster"])
        elif r.type == K8S_PROVIDER:
            own[r.urn] = _provider_cluster(r)
        elif r.type.startswith("kubernetes:") and r.provider:
            provider = provider_ref.get(r.provider) or by_urn.get(r.provider.rsplit("::", 1)[0])
            if provider is not None:
                own[r.urn] = _provider_cluster(provider)
    children: dict[str, list[RecordedResource]] = {}
    for r in run.resources:
        children.setdefault(r.parent, []).append(r)

    def below(urn: str) -> set[str]:
        found: set[str] = set()
        for child in children.get(urn, []):
            if child.urn in own:
                found.add(own[child.urn])
            found |= below(child.urn)
        return found

    result: dict[str, str] = {}
    for r in run.resources:
        if r.urn in own:
            result[r.urn] = own[r.urn]
            continue
        if not r.custom:  # a component: the cluster it works on, if only one; none: the project's (the APIs)
            under = below(r.urn)
            result[r.urn] = next(iter(under)) if len(under) == 1 else MANY if under else PROJECT_WIDE
            continue
        # A resource of its own: the cluster its enclosing component works on (several: none of them).
        under = below(r.parent) if r.parent in by_urn else set()
        result[r.urn] = next(iter(under)) if len(under) == 1 else PROJECT_WIDE
    return result


# --------------------------------------------------------------------------------------------
# Key settings of each resource
# --------------------------------------------------------------------------------------------


def _v(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _quotas(run: ProgramRun, provider: str) -> dict[str, str]:
    """flavor -> its nominal quotas in the ClusterQueue of the same cluster."""
    found: dict[str, str] = {}
    for r in run.resources:
        if r.provider == provider and r.type.endswith(":ClusterQueue"):
            for group in _get(kubernetes_manifest(r), "spec.resourceGroups") or []:
                for flavor in group.get("flavors", []):
                    found[flavor["name"]] = ", ".join(f"{res['name']}={res['nominalQuota']}"
                                                      for res in flavor.get("resources", []))
    return found


def key_settings(run: ProgramRun, r: RecordedResource, computed: list[str]) -> list[str]:
    """The few settings a reviewer looks at first, as `key=value` strings (secrets masked, computed unknown)."""
    inputs = show_unknowns(whole_numbers(r.inputs), computed)
    kind = r.type.split(":")[-1]
    out: list[str] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            out.append(f"{label}={_v(value)}")

    if r.type == CLUSTER:
        add("location", inputs.get("location"))
        add("minMasterVersion", inputs.get("minMasterVersion"))
        add("autopilot", inputs.get("enableAutopilot"))
        add("deletionProtection", inputs.get("deletionProtection"))
        if not r.options.get("read"):
            out.append(f"endpoint={UNKNOWN}")
    elif r.type == NODE_POOL:
        config = inputs.get("nodeConfig") or {}
        add("machineType", config.get("machineType"))
        scaling = inputs.get("autoscaling") or {}
        if scaling:
            add("nodes", f"{scaling.get('minNodeCount', 0)}..{scaling.get('maxNodeCount', '?')}")
        add("nodeCount", inputs.get("nodeCount"))
        add("tpuTopology", _get(inputs, "placementPolicy.tpuTopology"))
        add("queuedProvisioning", _get(inputs, "queuedProvisioning.enabled"))
        add("flexStart", config.get("flexStart"))
        add("reservation", _get(config, "reservationAffinity.consumeReservationType"))
        add("serviceAccount", config.get("serviceAccount"))
    elif r.type == "gcp:serviceaccount/account:Account":
        add("accountId", inputs.get("accountId"))
        out.append(f"email={UNKNOWN}")
    elif r.type == "gcp:projects/iAMMember:IAMMember":
        add("role", inputs.get("role"))
        add("member", inputs.get("member"))
    elif r.type == "gcp:projects/service:Service":
        add("service", inputs.get("service"))
    elif r.type == K8S_PROVIDER:
        add("clusterIdentifier", inputs.get("clusterIdentifier"))
        if "kubeconfig" in inputs:
            out.append(f"kubeconfig={SECRET_PLACEHOLDER}")
    elif r.type.startswith("kubernetes:helm.sh/"):
        add("chart", inputs.get("chart"))
        add("version", inputs.get("version"))
        add("namespace", inputs.get("namespace"))
    elif r.type.startswith("kubernetes:"):
        out += _kubernetes_settings(run, r, show_unknowns(kubernetes_manifest(r), computed), kind)
    if r.protect:
        out.append("protect")
    if r.options.get("replaceOnChanges"):
        out.append(f"replaceOnChanges={','.join(r.options['replaceOnChanges'])}")
    return out


def _kubernetes_settings(run: ProgramRun, r: RecordedResource, m: dict[str, Any], kind: str) -> list[str]:
    spec = m.get("spec") or {}
    meta = m.get("metadata") or {}
    out: list[str] = []
    if kind == "ResourceFlavor":
        out += [f"nodeLabels={_v(spec.get('nodeLabels') or {})}"]
        quota = _quotas(run, r.provider).get(str(meta.get("name")))
        if quota:
            out.append(f"quota: {quota}")
    elif kind == "ClusterQueue":
        flavors = [f["name"] for g in spec.get("resourceGroups", []) for f in g.get("flavors", [])]
        out.append("flavors in order: " + " → ".join(flavors))
        checks = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        for check in checks:
            out.append(f"check {check['name']} on {','.join(check.get('onFlavors', [])) or 'all flavors'}")
        for check in spec.get("admissionChecks") or []:
            out.append(f"check {check} on all flavors")
        out.append(f"namespaceSelector={_v(spec.get('namespaceSelector'))}")
    elif kind == "LocalQueue":
        out.append(f"clusterQueue={spec.get('clusterQueue')}")
    elif kind == "AdmissionCheck":
        out.append(f"controller={spec.get('controllerName')}")
        if spec.get("parameters"):
            out.append(f"parameters={spec['parameters'].get('kind')}/{spec['parameters'].get('name')}")
    elif kind == "ProvisioningRequestConfig":
        out.append(f"class={spec.get('provisioningClassName')}")
        out.append(f"managedResources={_v(spec.get('managedResources'))}")
        if spec.get("parameters"):
            out.append(f"parameters={_v(spec['parameters'])}")
    elif kind == "MultiKueueConfig":
        out.append(f"clusters={_v(spec.get('clusters'))}")
    elif kind == "MultiKueueCluster":
        out.append(f"kubeConfig={_v(spec.get('clusterSource', spec).get('kubeConfig'))}")
    elif kind == "Namespace":
        if meta.get("labels"):
            out.append(f"labels={_v(meta['labels'])}")
    elif kind == "Job":
        containers = _get(spec, "template.spec.containers") or []
        out += [f"image={c.get('image')}" for c in containers]
        out.append(f"backoffLimit={spec.get('backoffLimit')}")
    elif kind in ("ConfigMap", "Secret"):
        keys = sorted(set(m.get("data") or {}) | set(m.get("stringData") or {}))
        if keys:
            out.append(f"keys={','.join(keys)}")
        if m.get("type"):
            out.append(f"type={m['type']}")
    elif kind == "RayJob":
        labels = meta.get("labels") or {}
        out.append(f"queue={labels.get('kueue.x-k8s.io/queue-name')}")
        for group in _get(spec, "rayClusterSpec.workerGroupSpecs") or []:
            limits = _get(group, "template.spec.containers") or [{}]
            tpu = _get(limits[0], "resources.limits") or {}
            out.append(f"workers {group.get('groupName')}: replicas={group.get('replicas')} "
                       f"numOfHosts={group.get('numOfHosts')} google.com/tpu={tpu.get('google.com/tpu')}")
    elif kind == "ResourceQuota":
        out.append(f"hard={_v(spec.get('hard'))}")
    elif kind == "PodMonitoring":
        out.append(f"endpoints={','.join(str(e.get('port')) for e in spec.get('endpoints', []))}")
    return out


# --------------------------------------------------------------------------------------------
# The tree
# --------------------------------------------------------------------------------------------


def _title(r: RecordedResource, run: ProgramRun) -> str:
    if r.type.startswith("kubernetes:") and not r.type.startswith("kubernetes:helm.sh/"):
        meta = kubernetes_manifest(r).get("metadata") or {}
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"{r.type}  {r.name}  ({where}{meta.get('name', r.name)})"
    return f"{r.type}  {r.name}"


def tree_lines(run: ProgramRun, cluster: str, computed: list[str] | None = None) -> list[str]:
    """The registrations of one cluster (PROJECT_WIDE: of none) under their parents, with the ancestors that
    hold them, in `pulumi preview`'s tree drawing."""
    computed = computed if computed is not None else computed_values(run)
    where = clusters_of(run)
    by_urn = {r.urn: r for r in run.resources}
    keep: set[str] = set()
    for r in run.resources:
        if where.get(r.urn) == cluster and (r.custom or not any(c.parent == r.urn for c in run.resources)):
            urn: str | None = r.urn
            while urn and urn in by_urn and urn not in keep:
                keep.add(urn)
                urn = by_urn[urn].parent
    children: dict[str, list[RecordedResource]] = {}
    for r in run.resources:
        if r.urn in keep:
            children.setdefault(r.parent, []).append(r)
    roots = [u for u in children if u not in by_urn]
    lines: list[str] = []

    def walk(urn: str, prefix: str) -> None:
        kids = sorted(children.get(urn, []), key=lambda r: (r.custom, r.name, r.type))
        for i, r in enumerate(kids):
            last = i == len(kids) - 1
            settings = key_settings(run, r, computed) if r.custom else []
            elsewhere = " (spans several clusters)" if where.get(r.urn) == MANY else ""
            lines.append(f"{prefix}{'└─ ' if last else '├─ '}{_title(r, run)}{elsewhere}")
            pad = prefix + ("   " if last else "│  ")
            lines.extend(f"{pad}{'│' if children.get(r.urn) else ' '}    {s}" for s in settings)
            walk(r.urn, pad)

    for root in sorted(roots):
        lines.append(f"pulumi:pulumi:Stack  {run.project}-{run.stack}")
        walk(root, "")
    return lines


def tree_markdown(run: ProgramRun) -> list[str]:
    computed = computed_values(run)
    where = clusters_of(run)
    clusters = sorted({c for c in where.values() if c != PROJECT_WIDE})
    lines = ["## Resource tree (as `pulumi preview` shows it), by cluster", "",
             "Each component with its children; under each resource its key settings. Values the cloud computes "
             f"show as `{UNKNOWN}`, secrets as `{SECRET_PLACEHOLDER}`."]
    for cluster in [*clusters, PROJECT_WIDE]:
        body = tree_lines(run, cluster, computed)
        if not body:
            continue
        count = sum(1 for r in run.resources if r.custom and where.get(r.urn) == cluster)
        title = f"Cluster `{cluster}`" if cluster != PROJECT_WIDE else "Project-wide (no cluster)"
        lines += ["", f"### {title} ({count} resources)", "", "```text", *body, "```"]
    return lines
