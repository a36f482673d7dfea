"""fleet.dra: the DeviceClasses of a fleet in allocation mode `dra`, and what each tenant may hold of each."""

from __future__ import annotations

from fleet.dra import (OPERATOR_CLASSES, DraPool, class_name, dedicated_model_clash, device_classes, pool_classes,
                       quota_key, tenant_devices)

H100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"
WHOLE = DraPool("train", H100, {"nvidia.com/gpu": 8}, {}, nodes=2)
MIG = DraPool("mig", H100, {"nvidia.com/mig-1g.10gb": 56, "nvidia.com/mig-1g.10gb.me": 8},
              {"1g.10gb": 7, "1g.10gb+me": 1}, nodes=1)
SEARCH = DraPool("search", L40S, {"nvidia.com/gpu": 4}, {}, nodes=1, dedicated_to=("search",))


def test_one_class_per_kind_and_one_per_dedicated_pool_counting_the_devices_it_covers() -> None:
    plans = {plan.name: plan for plan in device_classes([WHOLE, MIG, SEARCH])}
    assert {name: (plan.kind, plan.pool, plan.devices) for name, plan in plans.items()} == {
        "gpu.gpu-platform.io": ("nvidia.com/gpu", None, 16),
        "mig-1g.10gb.gpu-platform.io": ("nvidia.com/mig-1g.10gb", None, 56),
        "mig-1g.10gb-me.gpu-platform.io": ("nvidia.com/mig-1g.10gb.me", None, 8),
        "gpu.search.gpu-platform.io": ("nvidia.com/gpu", "search", 4),
    }


def test_a_class_selects_its_type_profile_and_models() -> None:
    plans = {plan.name: plan for plan in device_classes([WHOLE, MIG, SEARCH])}
    whole = plans["gpu.gpu-platform.io"].selector()
    assert "type == 'gpu'" in whole and f"['{H100}']" in whole and L40S not in whole
    mig = plans["mig-1g.10gb-me.gpu-platform.io"].selector()
    assert "type == 'mig'" in mig and "profile == '1g.10gb+me'" in mig


def test_a_grant_goes_to_the_tenants_dedicated_pool_first_and_sums_to_what_was_given() -> None:
    devices = tenant_devices([WHOLE, MIG, SEARCH], {"nvidia.com/gpu": 6}, "search")
    assert devices["gpu.search.gpu-platform.io"] == 4 and devices["gpu.gpu-platform.io"] == 2
    assert sum(devices.values()) == 6


def test_every_class_of_the_fleet_has_a_line_zero_where_not_given() -> None:
    devices = tenant_devices([WHOLE, MIG, SEARCH], {"nvidia.com/mig-1g.10gb": 7}, "research")
    assert set(devices) == {*OPERATOR_CLASSES, *(plan.name for plan in device_classes([WHOLE, MIG, SEARCH]))}
    assert {name: count for name, count in devices.items() if count} == {"mig-1g.10gb.gpu-platform.io": 7}


def test_a_dedicated_pool_sharing_a_model_and_kind_with_another_is_a_clash() -> None:
    twin = DraPool("twin", L40S, {"nvidia.com/gpu": 4}, {}, nodes=1)
    assert dedicated_model_clash([WHOLE, SEARCH, twin]) == ("search", "twin", "nvidia.com/gpu")
    assert dedicated_model_clash([WHOLE, MIG, SEARCH]) is None  # MIG slices of an H100 are another kind


def test_names_are_valid_quota_resource_names() -> None:
    name = class_name("nvidia.com/mig-1g.10gb.me", "1g.10gb+me", "pool-a")
    assert name == "mig-1g.10gb-me.pool-a.gpu-platform.io"
    assert quota_key(name) == f"{name}.deviceclass.resource.k8s.io/devices"


def test_each_kind_of_a_pool_has_its_class_a_dedicated_pools_its_own() -> None:
    assert pool_classes(MIG) == {"nvidia.com/mig-1g.10gb": "mig-1g.10gb.gpu-platform.io",
                                 "nvidia.com/mig-1g.10gb.me": "mig-1g.10gb-me.gpu-platform.io"}
    assert pool_classes(SEARCH) == {"nvidia.com/gpu": "gpu.search.gpu-platform.io"}
    names = {plan.name for plan in device_classes([WHOLE, MIG, SEARCH])}
    assert {name for pool in (WHOLE, MIG, SEARCH) for name in pool_classes(pool).values()} == names
