"""fleet.partitioning: what a node advertises under each partitioning, by the device plugin's names."""

from __future__ import annotations

import pytest

from fleet.catalog import INSTANCE_TYPES
from fleet.partitioning import (GPU, MIG_LAYOUTS, SHARED_GPU, Partitioning, is_gpu_resource, kind_of, mig_resource,
                                profiles_of)


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
