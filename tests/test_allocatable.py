"""GKE's allocatable CPU and memory in the worker-request checks (issue 28 item 8, issue 39 item 6).

The rule is the one GKE's cluster autoscaler predicts a new node with, since a pod that does not fit that prediction
never scales a pool up (GoogleCloudPlatform/cluster-autoscaler 7d250507339b3a7583b380349f217ea191ff15ff,
pkg/cloudprovider/gke/reserved.go and templates.go, config/os-reserved.yaml; see tpu_fallback/model/capacity.py):
allocatable memory = physical - the kernel's share (os-reserved.yaml, interpolated) - kube-reserved (GKE's tiers in
MiB with 1 GB read as 1000 MiB, plus 4% of each tier with image streaming) - the 100 MiB eviction threshold. The
expected values below are worked by hand from those sources, and the kube-reserved figures are checked against the
autoscaler's own test vectors (reserved_test.go TestPredictKubeReserved).
"""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tpu_fallback.model import capacity, catalog
from tpu_fallback.model.jobs import JobSpec
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.settings import parse_settings
from tpu_fallback.model.settings.queues import QueueSettings
from tpu_fallback.model.validation import ConfigError
from tpu_fallback.offline.mockrun import REPO_ROOT, infra_references, run_program

# What a jobs program registers before it refuses a job: the component and its StackReference, nothing else.
NOTHING_CREATED = ["tpu-fallback:index:TrainingJobs", "pulumi:pulumi:StackReference"]

GIB = 2**30
MIB = 2**20
EVICTION = 100 * MIB
# config/os-reserved.yaml (cos, amd64, not confidential), the largest value over node versions 1.34.0-gke.1477000 ..
# 1.36.0-gke.3712000, at the points around the TPU hosts' sizes (physical GiB -> reserved bytes).
KERNEL = {32: 701448192, 64: 1290866688, 256: 4427137024, 1922: 32385822720}


def kernel_by_hand(gib: Decimal, low: int, high: int) -> int:
    """system_reserved_config.go interpolate: y1 + int64((x - x1) / (x2 - x1) * (y2 - y1))."""
    return KERNEL[low] + int(float((gib - low) / (high - low)) * (KERNEL[high] - KERNEL[low]))


@pytest.mark.parametrize(("mib", "image_streaming", "reserved_mib"), [
    (600, False, 255), (600, True, 255), (2000, False, 500), (2000, True, 520), (8000, False, 1800),
    (8000, True, 1872), (200 * 1000, False, 10760), (200 * 1000, True, 11190), (0, False, 0),
])
def test_kube_reserved_memory_matches_the_autoscalers_own_test_vectors(
        mib: int, image_streaming: bool, reserved_mib: int) -> None:
    assert capacity.kube_reserved_memory(mib * MIB, image_streaming) == reserved_mib * MIB


def test_kube_reserved_cpu_matches_the_autoscalers_own_test_vector() -> None:
    assert capacity.gke_reserved_cpu(4) == Decimal("0.08")  # "cpu sanity check": 4000 millicores -> 80


def test_ct6e_standard_4t_worked_in_full() -> None:
    # 180 vCPU: 60m + 10m + 10m + 0.25% of 176000m = 520m reserved.
    # 720 GiB = 737280 MiB. kube-reserved: 25% of 4000 + 20% of 4000 + 10% of 8000 + 6% of 112000 + 2% of 609280 =
    # 1000 + 800 + 800 + 6720 + 12185.6 = 21505 MiB; image streaming 4% of each tier = 860 MiB. Kernel: between the
    # table's 256 GiB and 1922 GiB points.
    room = capacity.gke_allocatable(180, 720)
    assert room.cpu == Decimal("179.48")
    kernel = kernel_by_hand(Decimal(720), 256, 1922)
    assert room.memory == 720 * GIB - kernel - (21505 + 860) * MIB - EVICTION
    assert 686 * GIB < room.memory < 687 * GIB  # "about 687": what GKE's autoscaler predicts
    assert capacity.describe_host(catalog.FAMILIES["v6e"].machine_type("ct6e-standard-4t")) == (  # type: ignore[arg-type]
        "180 vCPU / 720 GiB, of which GKE leaves pods 179.48 CPU / 686.68 GiB allocatable")
    # Without image streaming GKE keeps its 860 MiB less; the page's table alone (no kernel share, GiB tiers) would say
    # 698.74 GiB, which GKE's autoscaler never gives a pod.
    assert capacity.gke_allocatable(180, 720, image_streaming=False).memory == room.memory + 860 * MIB


def test_a_host_below_128_gib_has_no_two_percent_tier() -> None:
    # ct5lp-hightpu-1t, 24 vCPU / 48 GiB: 80m + 0.25% of 20000m = 130m. 49152 MiB: 1000 + 800 + 800 + 6% of 33152
    # (1989.12) = 4589 MiB, image streaming 40 + 32 + 32 + 79.56 = 183 MiB; kernel between 32 and 64 GiB.
    room = capacity.gke_allocatable(24, 48)
    assert room.cpu == Decimal("23.87")
    assert room.memory == 48 * GIB - kernel_by_hand(Decimal(48), 32, 64) - (4589 + 183) * MIB - EVICTION


def test_tpu7x_hosts() -> None:
    # tpu7x-standard-4t, 224 vCPU / 992 GiB (1015808 MiB): 80m + 0.25% of 220000m = 630m. 9320 MiB below 128000 MiB,
    # 2% of 887808 = 17756.16: 27076 MiB, image streaming 4%: 1083 MiB.
    room = capacity.gke_allocatable(224, 992)
    assert room.cpu == Decimal("223.37")
    assert room.memory == 992 * GIB - kernel_by_hand(Decimal(992), 256, 1922) - (27076 + 1083) * MIB - EVICTION


def test_the_smallest_vms() -> None:
    # 7.5 GiB (7680 MiB): 1000 + 20% of 3680 = 1736 MiB, image streaming 40 + 29.44 = 69 MiB; kernel between the
    # table's 4 GiB (185987072) and 8 GiB (259383296) points.
    room = capacity.gke_allocatable(2, Decimal("7.5"))
    assert room.cpu == Decimal("1.93")
    assert room.memory == int(Decimal("7.5") * GIB) - (185987072 + int(3.5 / 4 * (259383296 - 185987072))) - (
        1736 + 69) * MIB - EVICTION
    # At or below 1000 MiB the reservation is 255 MiB (no image streaming share); the kernel's is half the 1 GiB point.
    room = capacity.gke_allocatable(1, Decimal("0.5"))
    assert room.cpu == Decimal("0.94")
    assert room.memory == 512 * MIB - 63029248 // 2 - 255 * MIB - EVICTION


def test_cpu_is_reserved_in_whole_millicores() -> None:
    # 5 vCPU: 60 + 10 + 10 + 2.5 = 82.5 millicores, truncated to 82 (reserved.go calculateReserved): 4.918 left.
    assert capacity.gke_allocatable(5, 16).cpu == Decimal("4.918")


def test_the_kernel_table_is_read_as_the_autoscaler_reads_it() -> None:
    assert capacity.kernel_reserved(256 * GIB) == KERNEL[256]  # a point of the table
    assert capacity.kernel_reserved(1922 * GIB) == KERNEL[1922]
    # beyond the last point: the line through the last two
    assert capacity.kernel_reserved(2000 * GIB) == KERNEL[256] + int(
        (2000 - 256) / (1922 - 256) * (KERNEL[1922] - KERNEL[256]))


def test_a_vm_size_of_zero_is_an_error() -> None:
    with pytest.raises(ValueError, match="above 0"):
        capacity.gke_allocatable(0, 16)


# A request between GKE's allocatable and the VM's size: it would stay Pending forever on GKE.
# 690Gi is between what GKE's autoscaler predicts (686.68 GiB) and what the docs' table alone gives (698.74 GiB): such
# a request never scales a pool up.
BETWEEN = [({"cpu": 180, "memory": "16Gi"}, "cpu=180"), ({"cpu": 8, "memory": "700Gi"}, "memory=700Gi"),
           ({"cpu": 8, "memory": "690Gi"}, "memory=690Gi")]
MESSAGE = "ct6e-standard-4t host: 180 vCPU / 720 GiB, of which GKE leaves pods 179.48 CPU / 686.68 GiB allocatable"
BIG_QUOTA = {"cpu": 1000, "memory": "4000Gi"}


@pytest.mark.parametrize(("request_", "shown"), BETWEEN)
def test_queues_refuse_a_request_between_allocatable_and_the_vm(request_: dict[str, Any], shown: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"queues": {"workerRequest": request_, "quotas": {"onDemand": BIG_QUOTA}}}, "my-project")
    message = str(err.value)
    assert message.startswith("queues.workerRequest") and shown in message
    assert f"one TPU worker runs on one {MESSAGE}" in message


def test_queues_take_a_request_of_exactly_the_figures_the_message_gives() -> None:
    settings = parse_settings({"queues": {"workerRequest": {"cpu": "179.48", "memory": "686.68Gi"},
                                          "quotas": {"onDemand": BIG_QUOTA}}}, "my-project")
    assert settings.queues.worker_request == Resources("179.48", "686.68Gi")


@pytest.mark.parametrize(("request_", "shown"), BETWEEN)
def test_jobs_refuse_a_request_between_allocatable_and_the_vm(request_: dict[str, Any], shown: str) -> None:
    jobs = [{"name": "j", "workerRequest": {key: str(value) for key, value in request_.items()}}]
    refs = infra_references(REPO_ROOT / "jobs", "dev")
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": jobs}, stack_references=refs, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    message = str(run.error)
    assert message.startswith("jobs[0].workerRequest") and shown in message and f"exceeds one {MESSAGE}" in message
    assert [r.type for r in run.resources] == NOTHING_CREATED  # nothing created


def test_the_cli_exits_2_without_a_traceback(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        (project / name).write_text((REPO_ROOT / name).read_text())
    (project / "Pulumi.bad.yaml").write_text("config:\n  gcp:project: my-project\n  tpu-fallback:queues:\n"
                                             "    workerRequest: {cpu: 180, memory: 16Gi}\n"
                                             "    quotas: {onDemand: {cpu: 1000, memory: 4000Gi}}\n")
    plan = [sys.executable, "-m", "tpu_fallback.offline.plan", "bad", "--project", str(project),
            "--out", str(tmp_path / "out")]
    result = subprocess.run(plan, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert "queues.workerRequest" in result.stderr and MESSAGE in result.stderr, result.stderr


SIZED = [m for f in catalog.FAMILIES.values() for m in f.machine_types if m.size_known]


@pytest.mark.parametrize("machine", SIZED, ids=[m.name for m in SIZED])
def test_the_default_worker_requests_fit_every_catalog_machine(machine: catalog.MachineType) -> None:
    assert capacity.fits_host(QueueSettings().worker_request, machine)
    assert capacity.fits_host(JobSpec(name="j").worker_request, machine)
    # and the check is against allocatable: the VM's whole vCPU count never fits
    assert not capacity.fits_host(Resources(machine.vcpus, "1Gi"), machine)
    assert not capacity.fits_host(Resources(1, f"{machine.memory_gib}Gi"), machine)


def test_an_unknown_host_size_is_left_to_kueue_and_a_configured_one_is_checked() -> None:
    unknown = catalog.MachineType("future-standard-4t", 4, 0, 0, ("2x2x1",), ())  # no source for its size
    assert not unknown.size_known and capacity.fits_host(Resources(10000, "10000Gi"), unknown)
    sized = catalog.resolve_slice("tpu7x", "2x2x4", host_size=(224, 960)).machine
    # 224 vCPU: 0.08 + 0.25% of 220 = 0.63 reserved.
    assert capacity.fits_host(Resources("223.37", "16Gi"), sized)
    assert not capacity.fits_host(Resources("223.371", "16Gi"), sized)
