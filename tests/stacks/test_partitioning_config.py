"""stacks.config: a pool's partitioning and a tenant's grants per kind, and every mistake in them in one line."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.config import parse_stack_config
from tests.conftest import config_values
from tests.stacks.test_config import config_error, pool

PARTITIONED = "partitioned"


def example() -> dict[str, Any]:
    return config_values(PARTITIONED)


def test_the_example_counts_each_pool_as_what_it_advertises() -> None:
    config = parse_stack_config(example())
    advertised = {p.name: p.advertised for p in config.node_pools}

    assert advertised == {"a100-mig": {"nvidia.com/mig-1g.10gb": 56}, "l4-shared": {"nvidia.com/gpu.shared": 8},
                          "h100-training": {"nvidia.com/gpu": 8}, "a10g-search": {"nvidia.com/gpu": 4}}
    assert config.tenants[2].grants == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 6,
                                        "nvidia.com/mig-1g.10gb": 42}


def test_a_mig_layout_on_a_gpu_without_mig_names_the_types_that_have_it() -> None:
    def mutate(values: dict) -> None:
        pool(values, 3)["migLayout"] = "all-1g.10gb"

    message = config_error(mutate, PARTITIONED)

    assert "nodePools[3]" in message and "NVIDIA-A10G has no MIG" in message
    assert "p4de.24xlarge" in message and "p5e.48xlarge" in message


def test_a_layout_the_gpu_cannot_hold_names_the_profiles_it_can() -> None:
    def mutate(values: dict) -> None:
        pool(values, 0)["migLayout"] = "all-1g.5gb"  # an A100 40GB layout, on an A100 80GB

    message = config_error(mutate, PARTITIONED)

    assert "'all-1g.5gb' is not a layout a NVIDIA-A100-SXM4-80GB can hold" in message
    assert "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in message


def test_a_pool_shares_or_slices_not_both() -> None:
    def mutate(values: dict) -> None:
        pool(values, 0)["timeSlicingReplicas"] = 2

    assert "not both" in config_error(mutate, PARTITIONED)


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("gpuShares", 2, "no pool this tenant may use advertises nvidia.com/gpu.shared; set timeSlicingReplicas"),
    ("migSlices", {"1g.10gb": 1}, "no pool this tenant may use advertises nvidia.com/mig-1g.10gb"),
])
def test_a_kind_no_pool_advertises_is_refused(field: str, value: Any, expected: str) -> None:
    def mutate(values: dict) -> None:
        values["tenants"][0][field] = value

    message = config_error(mutate, "staging")

    assert f"tenants[0].{field}" in message and expected in message


def test_a_mig_profile_must_look_like_one() -> None:
    def mutate(values: dict) -> None:
        values["tenants"][1]["migSlices"] = {"big": 1}

    assert "tenants[1]: migSlices: 'big' is not a MIG profile" in config_error(mutate, PARTITIONED)


def test_a_dedicated_pool_names_tenants_of_the_stack() -> None:
    def mutate(values: dict) -> None:
        pool(values, 3)["dedicatedTo"] = ["serach-ranking"]

    message = config_error(mutate, PARTITIONED)

    assert "nodePools[3].dedicatedTo" in message and "'serach-ranking' is not a tenant" in message


def test_a_tenant_cannot_count_on_a_pool_dedicated_to_another() -> None:
    def mutate(values: dict) -> None:
        values["tenants"][1]["gpus"] = 0
        pool(values, 2)["dedicatedTo"] = ["search-ranking"]  # the H100s too: llm-training's 8 GPUs have no pool
        values["tenants"][0]["gpus"] = 12
        values["tenants"][2]["gpus"] = 1

    message = config_error(mutate, PARTITIONED)

    assert "tenants[2].gpus" in message and "no pool this tenant may use advertises nvidia.com/gpu" in message


def test_a_queue_may_not_list_a_pool_dedicated_to_another() -> None:
    def mutate(values: dict) -> None:
        pool(values, 1)["dedicatedTo"] = ["llm-training"]  # a10g-batch, which analytics lists

    message = config_error(mutate, "queue")

    assert "tenants[2].queue.pools" in message and "'a10g-batch' is dedicated to llm-training" in message


def test_bring_your_own_pools_whose_selectors_nest_are_refused() -> None:
    def mutate(values: dict) -> None:
        pool(values, 1)["bringYourOwn"]["nodeSelector"] = {"example.com/gpu-pool": "dgx-a100", "rack": "r7"}

    message = config_error(mutate, "onprem")

    assert "nodePools[1].bringYourOwn.nodeSelector" in message and "'dgx-a100'" in message


@pytest.mark.parametrize(("layout", "expected"), [
    ({"3g.40gb": 2, "1g.10gb": 1}, "takes 7 compute slices, 9 memory slices"),
    ({"1g.10gb+me": 2}, "2 media engines"),
    ({"1g.5gb": 1}, "1g.5gb is not a profile of NVIDIA-A100-SXM4-80GB"),
    ({}, "names no MIG profile"),
])
def test_a_custom_layout_the_gpu_cannot_hold_says_why(layout: dict, expected: str) -> None:
    def mutate(values: dict) -> None:
        pool(values, 0)["migLayout"] = layout

    message = config_error(mutate, PARTITIONED)

    assert "nodePools[0]" in message and expected in message


def test_a_custom_layout_is_named_after_its_pool_and_advertised_per_profile() -> None:
    values = example()
    pool(values, 0)["migLayout"] = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    values["tenants"][1]["migSlices"] = {"3g.40gb": 8}
    values["tenants"][2]["migSlices"] = {"1g.10gb": 16}
    mig = parse_stack_config(values).node_pools[0]

    assert mig.partitioning.mig_layout.startswith("custom-a100-mig-")
    pool(values, 0)["migLayout"] = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    edited = parse_stack_config(values).node_pools[0]
    assert edited.partitioning.mig_layout.startswith("custom-a100-mig-")
    assert edited.partitioning.mig_layout != mig.partitioning.mig_layout  # an edit is a new name: it reaches nodes
    assert mig.advertised == {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}
