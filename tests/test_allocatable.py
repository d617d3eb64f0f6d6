"""GKE's allocatable CPU and memory in the worker-request checks (issue 28, item 8).

The expected values are worked by hand from GKE's table ("Plan GKE Standard node sizes", Memory and CPU reservations,
https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations): CPU 6% of the
first core, 1% of the next, 0.5% of the next 2, 0.25% above 4; memory 25% of the first 4 GiB, 20% of the next 4,
10% of the next 8, 6% of the next 112, 2% above 128 (255 MiB below 1 GiB); and a 100 MiB eviction threshold.
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

GIB = Decimal(2**30)
MIB = Decimal(2**20)
EVICTION = 100 * MIB
# Reserved below 128 GiB, in GiB: 25% of 4 + 20% of 4 + 10% of 8 + 6% of 112 = 1 + 0.8 + 0.8 + 6.72.
FIRST_128_GIB = Decimal("0.25") * 4 + Decimal("0.20") * 4 + Decimal("0.10") * 8 + Decimal("0.06") * 112
# Reserved for the first 4 cores: 6% of 1 + 1% of 1 + 0.5% of 2 = 0.08.
FIRST_4_CORES = Decimal("0.06") + Decimal("0.01") + Decimal("0.005") * 2


def cpu_by_hand(vcpus: int) -> Decimal:
    return vcpus - FIRST_4_CORES - Decimal("0.0025") * (vcpus - 4)


def memory_above_128_by_hand(gib: int) -> Decimal:
    return gib * GIB - (FIRST_128_GIB + Decimal("0.02") * (gib - 128)) * GIB - EVICTION


@pytest.mark.parametrize(("vcpus", "gib"), [(180, 720), (180, 1440), (224, 384), (240, 407)])
def test_large_tpu_hosts_lose_the_tiers_and_two_percent_above_128_gib(vcpus: int, gib: int) -> None:
    room = capacity.gke_allocatable(vcpus, gib)
    assert room.cpu == cpu_by_hand(vcpus)
    assert room.memory == int(memory_above_128_by_hand(gib))  # floor of a fraction of a byte at most


def test_ct6e_standard_4t_worked_in_full() -> None:
    # 180 vCPU: 0.08 + 0.25% of 176 = 0.52 reserved. 720 GiB: 9.32 + 2% of 592 (11.84) = 21.16 GiB + 100 MiB.
    room = capacity.gke_allocatable(180, 720)
    assert room.cpu == Decimal("179.48")
    assert room.memory == int(Decimal("698.84") * GIB - 100 * MIB)


def test_a_host_below_128_gib_has_no_two_percent_tier() -> None:
    # ct5lp-hightpu-1t, 24 vCPU / 48 GiB: 0.08 + 0.25% of 20 = 0.13; 1 + 0.8 + 0.8 + 6% of 32 (1.92) = 4.52 GiB.
    room = capacity.gke_allocatable(24, 48)
    assert room.cpu == Decimal("23.87")
    assert room.memory == int(Decimal("43.48") * GIB - 100 * MIB)


def test_the_worked_example_of_a_small_vm() -> None:
    # n1-standard-2 (2 vCPU, 7.5 GiB), the example learnk8s.io/allocatable-resources works from GKE's table:
    # 70 millicores reserved; 25% of 4 + 20% of 3.5 = 1.7 GiB reserved, then the 100 MiB eviction threshold.
    room = capacity.gke_allocatable(2, Decimal("7.5"))
    assert room.cpu == Decimal("1.93")
    assert room.memory == int(Decimal("5.8") * GIB - 100 * MIB)


def test_below_1_gib_the_reservation_is_255_mib() -> None:
    room = capacity.gke_allocatable(1, Decimal("0.5"))
    assert room.cpu == Decimal("0.94")
    assert room.memory == 512 * MIB - 255 * MIB - 100 * MIB


def test_cpu_is_rounded_down_to_a_millicore() -> None:
    # 5 vCPU: 0.08 + 0.0025 = 0.0825 reserved, 4.9175 left: 4.917 is what a pod can be sure to get.
    assert capacity.gke_allocatable(5, 16).cpu == Decimal("4.917")


def test_a_vm_size_of_zero_is_an_error() -> None:
    with pytest.raises(ValueError, match="above 0"):
        capacity.gke_allocatable(0, 16)


# A request between GKE's allocatable and the VM's size: it would stay Pending forever on GKE.
BETWEEN = [({"cpu": 180, "memory": "16Gi"}, "cpu=180"), ({"cpu": 8, "memory": "700Gi"}, "memory=700Gi")]
MESSAGE = "ct6e-standard-4t host: 180 vCPU / 720 GiB, of which GKE leaves pods 179.48 CPU / 698.74 GiB allocatable"
BIG_QUOTA = {"cpu": 1000, "memory": "4000Gi"}


@pytest.mark.parametrize(("request_", "shown"), BETWEEN)
def test_queues_refuse_a_request_between_allocatable_and_the_vm(request_: dict[str, Any], shown: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_settings({"queues": {"workerRequest": request_, "quotas": {"onDemand": BIG_QUOTA}}}, "my-project")
    message = str(err.value)
    assert message.startswith("queues.workerRequest") and shown in message
    assert f"one TPU worker runs on one {MESSAGE}" in message


def test_queues_take_a_request_of_exactly_the_figures_the_message_gives() -> None:
    settings = parse_settings({"queues": {"workerRequest": {"cpu": "179.48", "memory": "698.74Gi"},
                                          "quotas": {"onDemand": BIG_QUOTA}}}, "my-project")
    assert settings.queues.worker_request == Resources("179.48", "698.74Gi")


@pytest.mark.parametrize(("request_", "shown"), BETWEEN)
def test_jobs_refuse_a_request_between_allocatable_and_the_vm(request_: dict[str, Any], shown: str) -> None:
    jobs = [{"name": "j", "workerRequest": {key: str(value) for key, value in request_.items()}}]
    refs = infra_references(REPO_ROOT / "jobs", "dev")
    run = run_program(REPO_ROOT / "jobs", "dev", {"jobs": jobs}, stack_references=refs, raise_errors=False)
    assert isinstance(run.error, ConfigError), run.error
    message = str(run.error)
    assert message.startswith("jobs[0].workerRequest") and shown in message and f"exceeds one {MESSAGE}" in message
    assert [r.type for r in run.resources] == ["pulumi:pulumi:StackReference"]  # nothing created


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
    unknown = catalog.resolve_slice("tpu7x", "2x2x4").machine
    assert not unknown.size_known and capacity.fits_host(Resources(10000, "10000Gi"), unknown)
    sized = catalog.resolve_slice("tpu7x", "2x2x4", host_size=(224, 960)).machine
    # 224 vCPU: 0.08 + 0.25% of 220 = 0.63 reserved.
    assert capacity.fits_host(Resources("223.37", "16Gi"), sized)
    assert not capacity.fits_host(Resources("223.371", "16Gi"), sized)
