"""Names GKE, Kueue and KubeRay give meaning to: node labels, taints, resources, annotations. Pure Python."""

# GKE node labels (set on every node of a pool) and the TPU resource its device plugin exposes.
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
QUEUED_LABEL = "cloud.google.com/gke-queued"  # label and taint of queued-provisioning (DWS) nodes
# GKE labels Spot VM nodes cloud.google.com/gke-spot=true ("Use Spot VMs", Standard:
# https://cloud.google.com/kubernetes-engine/docs/how-to/spot-vms). Autopilot also taints its Spot nodes with that key
# ("GKE automatically taints nodes that run Spot Pods": https://cloud.google.com/kubernetes-engine/docs/how-to/
# autopilot-spot-pods); a Standard pool gets the taint only if it asks, and this project's spot pools do.
SPOT_LABEL = "cloud.google.com/gke-spot"
TPU_RESOURCE = "google.com/tpu"

# This project's own node label: which plan a TPU pool belongs to, so one flavor can select several pools.
PLAN_LABEL = "tpu-fallback/plan"
ROLE_LABEL = "tpu-fallback/role"  # "system" on the CPU pool

# Kueue's job labels and annotations.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
