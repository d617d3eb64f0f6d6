"""The TPU catalog against GKE's TPU documentation: every family and topology, and what each implies."""

from __future__ import annotations

import math

import pytest

from tpu_fallback.model import catalog
from tpu_fallback.model.capacity import pool_layout, tpu_chips
from tpu_fallback.model.quantity import Resources
from tpu_fallback.model.queues import plan_flavors

# (family, topology, machine type or None, expected machine type, chips/VM, multi-host) - from GKE's TPU tables.
TABLE = [
    ("v6e", "1x1", None, "ct6e-standard-1t", 1, False),
    ("v6e", "2x2", None, "ct6e-standard-4t", 4, False),
    ("v6e", "2x4", None, "ct6e-standard-4t", 4, True),
    ("v6e", "2x4", "ct6e-standard-8t", "ct6e-standard-8t", 8, False),
    ("v6e", "4x4", None, "ct6e-standard-4t", 4, True),
    ("v6e", "4x8", None, "ct6e-standard-4t", 4, True),
    ("v6e", "8x8", None, "ct6e-standard-4t", 4, True),
    ("v6e", "8x16", None, "ct6e-standard-4t", 4, True),
    ("v6e", "16x16", None, "ct6e-standard-4t", 4, True),
    ("v5e", "1x1", None, "ct5lp-hightpu-1t", 1, False),
    ("v5e", "2x2", None, "ct5lp-hightpu-4t", 4, False),
    ("v5e", "2x4", None, "ct5lp-hightpu-4t", 4, True),
    ("v5e", "2x4", "ct5lp-hightpu-8t", "ct5lp-hightpu-8t", 8, False),
    ("v5e", "4x4", None, "ct5lp-hightpu-4t", 4, True),
    ("v5e", "16x16", None, "ct5lp-hightpu-4t", 4, True),
    ("v5p", "2x2x1", None, "ct5p-hightpu-4t", 4, False),
    ("v5p", "2x2x2", None, "ct5p-hightpu-4t", 4, True),
    ("v5p", "2x2x4", None, "ct5p-hightpu-4t", 4, True),
    ("v5p", "2x4x4", None, "ct5p-hightpu-4t", 4, True),
    ("v5p", "4x4x4", None, "ct5p-hightpu-4t", 4, True),
    ("v4", "2x2x1", None, "ct4p-hightpu-4t", 4, False),
    ("v4", "2x2x2", None, "ct4p-hightpu-4t", 4, True),
    ("v4", "4x4x4", None, "ct4p-hightpu-4t", 4, True),
]


@pytest.mark.parametrize(("family", "topology", "machine", "expected_machine", "chips_per_vm", "multi"), TABLE)
def test_slice_derivation(family: str, topology: str, machine: str | None, expected_machine: str,
                          chips_per_vm: int, multi: bool) -> None:
    s = catalog.resolve_slice(family, topology, machine)
    chips = math.prod(int(d) for d in topology.split("x"))
    assert s.machine_type == expected_machine
    assert s.chips_per_slice == chips
    assert s.chips_per_host == chips_per_vm
    assert s.hosts_per_slice == chips // chips_per_vm
    assert s.multi_host is multi
    assert (s.hosts_per_slice > 1) is multi


def test_accelerator_labels() -> None:
    expected = {"v6e": "tpu-v6e-slice", "v5e": "tpu-v5-lite-podslice", "v5p": "tpu-v5p-slice", "v4": "tpu-v4-podslice",
                "tpu7x": "tpu7x"}
    assert {name: fam.accelerator_label for name, fam in catalog.FAMILIES.items()} == expected


def test_tutorial_slice() -> None:
    s = catalog.resolve_slice("v6e", "4x4")
    assert (s.machine_type, s.chips_per_slice, s.hosts_per_slice, s.chips_per_host) == ("ct6e-standard-4t", 16, 4, 4)


def test_v4_has_no_flex_start() -> None:
    assert not catalog.FAMILIES["v4"].supports_flex_start
    assert all(catalog.FAMILIES[f].supports_flex_start for f in ("v6e", "v5e", "v5p"))


@pytest.mark.parametrize(("family", "topology", "machine"), [
    ("v6e", "3x3", None), ("v6e", "4x4x4", None), ("v5p", "2x2", None), ("v6e", "4x4", "ct6e-standard-8t"),
    ("v6e", "4x4", "ct5p-hightpu-4t"), ("v9", "4x4", None),
])
def test_invalid_combinations(family: str, topology: str, machine: str | None) -> None:
    with pytest.raises(catalog.CatalogError) as err:
        catalog.resolve_slice(family, topology, machine)
    assert (topology in str(err.value)) or (family in str(err.value)) or (machine and machine in str(err.value))


def test_multi_host_plans_get_one_pool_per_slice() -> None:
    s = catalog.resolve_slice("v6e", "4x4")
    layout = pool_layout("on-demand-pool", s, 3)
    assert [p.name for p in layout] == ["on-demand-pool", "on-demand-pool-2", "on-demand-pool-3"]
    assert all(p.max_nodes == 4 for p in layout)
    assert tpu_chips(s, 3) == 48


def test_each_pool_of_a_plan_gets_its_own_flavor() -> None:
    # A multi-host slice must run in one pool: Kueue pins each job to one pool through its flavor.
    s = catalog.resolve_slice("v6e", "4x4")
    layout = pool_layout("on-demand-pool", s, 2)
    flavors = plan_flavors("on-demand", "on-demand", layout, s, Resources(80, "150Gi"))
    assert [(f.name, f.node_labels) for f in flavors] == [
        ("on-demand", {"cloud.google.com/gke-nodepool": "on-demand-pool"}),
        ("on-demand-2", {"cloud.google.com/gke-nodepool": "on-demand-pool-2"})]
    assert [f.quota for f in flavors] == [{"cpu": "40", "memory": "75Gi", "google.com/tpu": 16}] * 2
    unlimited = plan_flavors("flex-start", "dws", pool_layout("dws-pool", s, 2), s, None)
    assert unlimited[0].quota == {"cpu": 4 * 180, "memory": f"{4 * 720}Gi", "google.com/tpu": 16}  # its own size
    assert unlimited[1].quota["google.com/tpu"] == 1000000000  # the rest wait for DWS in the last pool


def test_single_host_plans_share_one_pool() -> None:
    s = catalog.resolve_slice("v5e", "2x2")
    layout = pool_layout("pool", s, 3)
    assert [(p.name, p.max_nodes) for p in layout] == [("pool", 3)]
    assert pool_layout("pool", s, 0) == ()


# --- TPU7x (Ironwood): the rules GKE gives it -----------------------------------------------------------------------


def test_tpu7x_slices_are_whole_hosts_of_four_chips_and_at_most_a_pod() -> None:
    fam = catalog.FAMILIES["tpu7x"]
    one_chip, machine = fam.machine_types
    assert (one_chip.name, one_chip.chips_per_vm, one_chip.topologies) == ("tpu7x-standard-1t", 1, ("1x1x1",))
    assert machine.chips_per_vm == 4
    assert machine.single_host_topologies == ("2x2x1",)  # one host: exactly its chips
    for topology in machine.topologies:
        sides = [int(d) for d in topology.split("x")]
        chips = math.prod(sides)
        assert len(sides) == 3 and chips % machine.chips_per_vm == 0, topology
        assert chips <= 9216, topology  # a TPU7x pod
        assert sides == sorted(sides) or topology in machine.single_host_topologies, topology
        if chips > 32:  # past 2x4x4, whole 4x4x4 cubes
            assert all(side % 4 == 0 for side in sides), topology
    assert {"2x2x2", "4x4x4"} <= set(machine.multi_host_topologies)
    assert "8x4x4" not in fam.topologies and "3x3x3" not in fam.topologies
    one = catalog.resolve_slice("tpu7x", "1x1x1")
    assert (one.machine_type, one.hosts_per_slice, one.chips_per_host, one.multi_host) == (
        "tpu7x-standard-1t", 1, 1, False)
    assert catalog.workload_policy(fam, "1x1x1") is None
    assert fam.describe_topologies().startswith("1x1x1 (tpu7x-standard-1t), 2x2x1 (one host)")


def test_tpu7x_multi_host_pools_take_a_workload_policy_not_a_tpu_topology() -> None:
    tpu7x = catalog.FAMILIES["tpu7x"]
    assert tpu7x.multi_host_placement == catalog.WORKLOAD_POLICY
    assert all(f.multi_host_placement == catalog.TPU_TOPOLOGY for f in catalog.FAMILIES.values() if f is not tpu7x)
    for topology in ("2x2x2", "4x4x8"):
        assert catalog.workload_policy(tpu7x, topology) == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": topology}
    assert catalog.workload_policy(tpu7x, "2x2x1") is None  # one host: no placement at all
    assert catalog.workload_policy(catalog.FAMILIES["v5p"], "2x2x2") is None  # v5p: placementPolicy.tpuTopology
    with pytest.raises(catalog.CatalogError, match="not a valid tpu7x topology"):
        catalog.workload_policy(tpu7x, "4x4")


def test_tpu7x_needs_a_gke_version_this_project_already_requires() -> None:
    from tpu_fallback.model.settings.cluster import OLDEST_GKE_MINOR

    version = catalog.FAMILIES["tpu7x"].min_gke_version
    assert version is not None
    major, minor = (int(part) for part in version.split("-")[0].split(".")[:2])
    assert (major, minor) <= OLDEST_GKE_MINOR


def test_tpu7x_has_flex_start_where_googles_blueprints_run_it_and_zones_of_its_own() -> None:
    # cluster-toolkit 1047080: examples/gke-consumption-options/dws-flex-start{,-queued-provisioning}/gke-tpu-7x, whose
    # deployment files give us-central1-c as the zone.
    tpu7x = catalog.FAMILIES["tpu7x"]
    assert tpu7x.supports_flex_start and tpu7x.flex_start_zones == frozenset({"us-central1-c"})
    assert tpu7x.flex_start_zones <= tpu7x.known_zones
    assert tpu7x.known_zones and tpu7x.known_zones <= catalog.ALL_KNOWN_ZONES
    assert not tpu7x.known_zones & catalog.FAMILIES["v6e"].known_zones  # TPU7x is not where v6e is


def test_tpu7x_host_sizes_are_gkes_autoscaler_machine_table() -> None:
    # GoogleCloudPlatform/cluster-autoscaler 7d25050, pkg/cloudprovider/gke/machinetypes/
    # deprecated_machine_types_config.go: NewMachineTypeInfo("tpu7x-standard-1t", 56, 248), ("tpu7x-standard-4t", 224,
    # 992), memory in GiB.
    sizes = {m.name: (m.vcpus, m.memory_gib) for m in catalog.FAMILIES["tpu7x"].machine_types}
    assert sizes == {"tpu7x-standard-1t": (56, 248), "tpu7x-standard-4t": (224, 992)}
    tpu = catalog.resolve_slice("tpu7x", "2x2x2")
    assert (tpu.hosts_per_slice, tpu.multi_host, tpu.machine.size_known) == (2, True, True)
    sized = catalog.resolve_slice("tpu7x", "2x2x2", host_size=(224, 960))  # the override the API still takes
    assert (sized.machine.vcpus, sized.machine.memory_gib, sized.machine.size_known) == (224, 960, True)
    assert catalog.FAMILIES["tpu7x"].machine_types[1].memory_gib == 992  # the catalog itself is left as it was
    assert all(f.unsupported is None for f in catalog.FAMILIES.values())
    assert all(m.size_known for f in catalog.FAMILIES.values() for m in f.machine_types)
