"""fleet.partitioning: what a node advertises under each partitioning, by the device plugin's names."""

from __future__ import annotations

import itertools

import pytest

from fleet.catalog import INSTANCE_TYPES
from fleet.partitioning import (COMPUTE_SLICES, GPU, MIG_LAYOUTS, SHARED_GPU, Partitioning, _placeable,
                                custom_layout_problem, is_gpu_resource, kind_of, mig_resource, profiles_of)


def test_whole_gpus_are_advertised_as_gpus() -> None:
    assert Partitioning().advertised("NVIDIA-L4", 4) == {GPU: 4}


def test_shares_are_advertised_renamed_never_as_gpus() -> None:
    assert Partitioning(shares=4).advertised("NVIDIA-L4", 2) == {SHARED_GPU: 8}


@pytest.mark.parametrize(("model", "layout", "advertised"), [
    ("NVIDIA-A100-SXM4-40GB", "all-1g.5gb", {"nvidia.com/mig-1g.5gb": 56}),
    ("NVIDIA-A100-SXM4-40GB", "all-1g.10gb", {"nvidia.com/mig-1g.10gb": 32}),
    ("NVIDIA-A100-SXM4-80GB", "all-1g.10gb", {"nvidia.com/mig-1g.10gb": 56}),
    ("NVIDIA-H100-80GB-HBM3", "all-balanced",
     {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}),
    ("NVIDIA-H200", "all-1g.35gb", {"nvidia.com/mig-1g.35gb": 32}),
    ("NVIDIA-H100-80GB-HBM3", "all-1g.10gb.me", {"nvidia.com/mig-1g.10gb.me": 8}),
])
def test_mig_slices_are_advertised_per_profile_from_the_layout(model: str, layout: str,
                                                               advertised: dict[str, int]) -> None:
    assert Partitioning(mig_layout=layout).advertised(model, 8) == advertised


def test_a_mig_profile_with_a_plus_is_named_with_a_dot() -> None:
    assert mig_resource("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_every_mig_capable_gpu_of_the_catalog_has_layouts() -> None:
    catalog = {instance.gpu_model for instance in INSTANCE_TYPES.values()}

    assert set(MIG_LAYOUTS) <= catalog
    assert {"NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"} <= set(MIG_LAYOUTS)


@pytest.mark.parametrize("model", sorted(MIG_LAYOUTS))
def test_no_layout_uses_more_than_seven_compute_slices_of_a_gpu(model: str) -> None:
    for name, devices in MIG_LAYOUTS[model].items():
        assert sum(int(profile[0]) * count for profile, count in devices.items()) <= 7, name


def test_the_profiles_of_a_gpu_span_its_layouts() -> None:
    assert profiles_of("NVIDIA-A100-SXM4-40GB") == ["1g.10gb", "1g.5gb", "1g.5gb+me", "2g.10gb", "3g.20gb",
                                                    "4g.20gb", "7g.40gb"]
    assert profiles_of("NVIDIA-L4") == []


def test_gpu_kinds_are_told_apart_from_other_resources() -> None:
    assert all(map(is_gpu_resource, [GPU, SHARED_GPU, "nvidia.com/mig-3g.40gb"]))
    assert not any(map(is_gpu_resource, ["cpu", "vpc.amazonaws.com/efa", "nvidia.com/gpux"]))
    assert [kind_of(GPU), kind_of(SHARED_GPU), kind_of("nvidia.com/mig-3g.40gb")] == [
        "whole GPUs", "GPU shares", "MIG 3g.40gb"]


MEMORY_GIB = {"NVIDIA-A100-SXM4-40GB": 40, "NVIDIA-A100-SXM4-80GB": 80, "NVIDIA-H100-80GB-HBM3": 80, "NVIDIA-H200": 141}


@pytest.mark.parametrize("model", sorted(MIG_LAYOUTS))
def test_every_layout_of_nvidias_table_fits_the_gpus_placements(model: str) -> None:
    """all-balanced fits only with its 3g instance at memory slice 4 (at 0, the two 1g instances would need slice 7,
    where none may start): the check searches the placements, it does not take the first that is free."""
    for name, devices in MIG_LAYOUTS[model].items():
        assert custom_layout_problem(model, MEMORY_GIB[model], devices) is None, name


def test_instances_may_not_overlap_nor_start_where_the_gpu_forbids() -> None:
    assert _placeable([(3, 4), (2, 2), (1, 1), (1, 1)], frozenset())  # 3g at 4, 2g at 0, 1g at 2 and 3
    assert not _placeable([(1, 1)] * 8, frozenset())  # no 1g instance starts at memory slice 7
    assert not _placeable([(2, 2)] * 4, frozenset())  # 2g starts at 0, 2 or 4 only
    assert not _placeable([(4, 4), (4, 4)], frozenset())  # 4g starts at 0 only
    assert not _placeable([(3, 4), (3, 4), (1, 1)], frozenset())


@pytest.mark.parametrize("model", sorted(MIG_LAYOUTS))
def test_with_these_placements_a_layout_within_the_slice_counts_always_fits(model: str) -> None:
    """What the readings show: on these GPUs, every combination of profiles within 7 compute and 8 memory slices (and
    one media engine) also has a placement, so the placement check refuses no layout the counts allowed. A GPU whose
    placements differ (a new catalog entry) is checked exactly all the same."""
    profiles = profiles_of(model)
    most = [2 if profile.endswith("+me") else COMPUTE_SLICES // int(profile[0]) + 1 for profile in profiles]
    for counts in itertools.product(*(range(bound) for bound in most)):
        devices = {profile: count for profile, count in zip(profiles, counts) if count}
        problem = custom_layout_problem(model, MEMORY_GIB[model], devices) if devices else None
        assert problem is None or "placements" not in problem, devices
