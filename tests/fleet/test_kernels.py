"""fleet.kernels: kernel targets and their names, the driver image the GPU Operator pulls, and the inventory of
kernels that need a driver."""

from __future__ import annotations

import re

import pytest

from fleet.kernels import DriverRelease, KernelInventory, KernelTarget, ObservedNode

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
UBUNTU = "6.8.0-1021-aws"
RHCOS = "5.14.0-427.87.1.el9_4.x86_64"
LONG = "6.8.0-1021-aws" + "-custom" * 12


# -- slug and key -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("os", "kernel"), [
    ("ubuntu22.04", UBUNTU),
    ("ubuntu24.04", "6.8.0-1019-nvidia"),
    ("rhcos4.18", RHCOS),
    ("rhel9", "5.14.0-570.49.1.el9_6.aarch64"),
    ("ubuntu22.04", LONG),
    ("rhcos4.18", "5.14.0-427.87.1.el9_4.X86_64+DEBUG"),
])
def test_slug_is_a_short_dns_label(os: str, kernel: str) -> None:
    slug = KernelTarget(os, kernel).slug

    assert DNS_LABEL.match(slug), slug
    assert len(slug) <= 40
    # The NVIDIADriver name and the driver stack's logical names derive from it and stay DNS-1123 labels.
    assert len(f"nvidia-driver-{slug}") <= 63


def test_slug_is_readable_for_real_kernels() -> None:
    assert KernelTarget("ubuntu22.04", UBUNTU).slug == "ubuntu22-04-6-8-0-1021-aws"
    assert KernelTarget("rhcos4.18", RHCOS).slug == "rhcos4-18-5-14-0-427-87-1-el9-4-x86-64"


def test_slug_is_stable_across_processes_and_releases() -> None:
    """NVIDIADriver names derive from it: the same (os, kernel) must always give the same slug (a changed slug
    would replace every driver), so it cannot depend on Python's per-process string hash."""
    assert KernelTarget("ubuntu22.04", LONG).slug == "ubuntu22-04-6-8-0-1021-aws-cust-7b2bfcde"


def test_slug_is_distinct_for_distinct_targets() -> None:
    targets = {
        KernelTarget("ubuntu22.04", UBUNTU), KernelTarget("ubuntu24.04", UBUNTU),
        KernelTarget("ubuntu22.04", "6.8.0-1019-aws"), KernelTarget("ubuntu22.04", "6.8.0-1021-nvidia"),
        KernelTarget("rhcos4.18", RHCOS), KernelTarget("rhel9", RHCOS),
        KernelTarget("rhcos4.18", "5.14.0-427.65.1.el9_4.x86_64"),
        KernelTarget("rhcos4.18", "5.14.0-427.87.1.el9_4.aarch64"),
    }
    targets |= {KernelTarget("ubuntu22.04", f"{LONG}-{n}") for n in range(20)}

    assert len({target.slug for target in targets}) == len(targets)


def test_very_long_kernels_are_hashed() -> None:
    """Two long kernels that differ only at the end keep the readable start and differ by their hash."""
    first, second = KernelTarget("ubuntu22.04", f"{LONG}-1"), KernelTarget("ubuntu22.04", f"{LONG}-2")

    assert first.slug != second.slug
    assert first.slug.startswith("ubuntu22-04-6-8-0-1021-aws")
    assert re.search(r"-[0-9a-f]{8}$", first.slug)
    assert first.slug[:-9] == second.slug[:-9]


@pytest.mark.parametrize(("os", "kernel"), [("ubuntu22.04", UBUNTU), ("rhcos4.18", RHCOS), ("ubuntu24.04", LONG)])
def test_key_is_os_slash_kernel_unshortened(os: str, kernel: str) -> None:
    assert KernelTarget(os, kernel).key == f"{os}/{kernel}"


def test_targets_sort_by_os_then_kernel() -> None:
    targets = [KernelTarget("ubuntu22.04", "6.8.0-1021-aws"), KernelTarget("rhcos4.18", RHCOS),
               KernelTarget("ubuntu22.04", "6.8.0-1019-aws")]

    assert [t.key for t in sorted(targets)] == [
        f"rhcos4.18/{RHCOS}", "ubuntu22.04/6.8.0-1019-aws", "ubuntu22.04/6.8.0-1021-aws"]


# -- driver image -------------------------------------------------------------------------------------------------


PRECOMPILED = DriverRelease("nvcr.io/nvidia", "580", "580.95.05", precompiled=True)
BUILT = DriverRelease("nvcr.io/nvidia", "580", "580.95.05", precompiled=False)


@pytest.mark.parametrize(("os", "kernel", "image"), [
    ("ubuntu22.04", UBUNTU, "nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"),
    ("ubuntu24.04", "6.8.0-1019-nvidia", "nvcr.io/nvidia/driver:580-6.8.0-1019-nvidia-ubuntu24.04"),
    ("rhcos4.18", RHCOS, f"nvcr.io/nvidia/driver:580-{RHCOS}-rhcos4.18"),
])
def test_precompiled_image_is_branch_kernel_os(os: str, kernel: str, image: str) -> None:
    assert PRECOMPILED.image(KernelTarget(os, kernel)) == image


@pytest.mark.parametrize(("os", "kernel", "image"), [
    ("ubuntu22.04", UBUNTU, "nvcr.io/nvidia/driver:580.95.05-ubuntu22.04"),
    ("rhcos4.18", RHCOS, "nvcr.io/nvidia/driver:580.95.05-rhcos4.18"),
    ("rhel9", "5.14.0-570.49.1.el9_6.x86_64", "nvcr.io/nvidia/driver:580.95.05-rhel9"),
])
def test_built_image_is_version_os_whatever_the_kernel(os: str, kernel: str, image: str) -> None:
    assert BUILT.image(KernelTarget(os, kernel)) == image


def test_built_image_is_shared_by_kernels_of_one_os() -> None:
    """Built on the node: one image per OS, the node's kernel is not in the tag."""
    first = BUILT.image(KernelTarget("rhcos4.18", RHCOS))
    second = BUILT.image(KernelTarget("rhcos4.18", "5.14.0-427.65.1.el9_4.x86_64"))

    assert first == second
    assert PRECOMPILED.image(KernelTarget("rhcos4.18", RHCOS)) != \
        PRECOMPILED.image(KernelTarget("rhcos4.18", "5.14.0-427.65.1.el9_4.x86_64"))


def test_image_follows_repository_branch_and_version() -> None:
    target = KernelTarget("ubuntu22.04", UBUNTU)
    mirror = "registry.example.com:5000/mirror/nvidia"

    assert DriverRelease(mirror, "570", "570.172.08", True).image(target) == \
        f"{mirror}/driver:570-6.8.0-1021-aws-ubuntu22.04"
    assert DriverRelease(mirror, "570", "570.172.08", False).image(target) == f"{mirror}/driver:570.172.08-ubuntu22.04"


# -- KernelInventory ----------------------------------------------------------------------------------------------


T4 = KernelTarget("ubuntu22.04", "6.8.0-1021-aws")
H100 = KernelTarget("ubuntu22.04", "6.8.0-1019-aws")
OLD = KernelTarget("ubuntu22.04", "6.8.0-1017-aws")
GONE = KernelTarget("ubuntu22.04", "6.8.0-1015-aws")
DECLARED = (T4, H100)


def test_without_observation_or_previous_it_is_the_declared_kernels() -> None:
    inventory = KernelInventory.build(DECLARED)

    assert inventory.targets == (H100, T4)
    assert inventory.observed is False
    assert inventory.kept == ()
    assert all(inventory.running(target) == () for target in inventory.targets)


def test_declared_kernels_are_deduplicated_and_sorted() -> None:
    inventory = KernelInventory.build([T4, H100, T4, T4])

    assert inventory.targets == tuple(sorted({T4, H100}))


def test_inventory_is_declared_union_observed() -> None:
    observed = [ObservedNode("gpu-2", OLD), ObservedNode("gpu-1", OLD), ObservedNode("gpu-3", T4)]

    inventory = KernelInventory.build(DECLARED, observed)

    assert set(inventory.targets) == {T4, H100, OLD}
    assert len(inventory.targets) == 3  # no duplicates for a kernel both declared and observed
    assert inventory.targets == tuple(sorted(inventory.targets))
    assert inventory.running(OLD) == ("gpu-1", "gpu-2")
    assert inventory.running(T4) == ("gpu-3",)
    assert inventory.running(H100) == ()
    assert inventory.observed is True
    assert inventory.kept == ()


def test_empty_observation_still_counts_as_observed() -> None:
    inventory = KernelInventory.build(DECLARED, [])

    assert inventory.observed is True
    assert inventory.targets == (H100, T4)


def test_previous_kernels_are_kept_when_nothing_was_observed() -> None:
    """Offline, no evidence says a node left the old kernel: its driver stays."""
    inventory = KernelInventory.build([T4], None, previous=[OLD, T4, H100])

    assert inventory.targets == (OLD, H100, T4)
    assert inventory.kept == (OLD, H100)  # only the ones the config no longer declares
    assert inventory.observed is False


def test_observed_inventory_drops_previous_kernels_no_node_runs() -> None:
    observed = [ObservedNode("gpu-1", T4), ObservedNode("gpu-9", OLD)]

    inventory = KernelInventory.build([T4], observed, previous=[OLD, GONE])

    assert GONE not in inventory.targets  # previous, but no node runs it
    assert OLD in inventory.targets  # a node still runs it: kept as observed, not as previous
    assert inventory.targets == (OLD, T4)
    assert inventory.kept == ()
    assert inventory.running(OLD) == ("gpu-9",)


def test_empty_observation_drops_every_previous_kernel() -> None:
    inventory = KernelInventory.build([T4], [], previous=[OLD, GONE])

    assert inventory.targets == (T4,)
    assert inventory.kept == ()
