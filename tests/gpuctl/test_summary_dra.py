"""Allocation mode dra in the review: the devices per DeviceClass against the quotas (summary and capacity policy
agree with the quota lines), and a switch of allocation mode listed as destructive, naming what restarts."""

from __future__ import annotations

import copy

import pytest

from gpuctl.check import check_plan
from gpuctl.diff import diff_plans
from gpuctl.report import capacity_rows
from gpuctl.summary import summarize
from tests.conftest import render_stack, stack_config

MODE = "gpu-platform:allocationMode"


@pytest.fixture(scope="module")
def dra() -> dict:
    return render_stack("dra").document


def quota_lines(plan: dict, device_class: str) -> int:
    """What the rendered ResourceQuotas give all tenants of a class."""
    key = f"{device_class}.deviceclass.resource.k8s.io/devices"
    return sum(int(resource["inputs"]["spec"]["hard"].get(key, 0)) for resource in plan["resources"]
               if resource["type"] == "kubernetes:core/v1:ResourceQuota"
               and resource["inputs"]["metadata"]["name"] == "gpu-quota")


def test_the_summary_counts_devices_per_class_as_the_quotas_do(dra: dict) -> None:
    summary = summarize(dra, dra, diff_plans(dra, dra))
    classes = summary.capacity.classes_after
    assert classes == {"gpu.gpu-platform.io": (8, 8), "gpu.l40s-search.gpu-platform.io": (4, 4),
                       "mig-1g.10gb.gpu-platform.io": (21, 56)}
    assert all(quota_lines(dra, name) == quota for name, (quota, _) in classes.items())
    rows = {row[""]: row["value"] for row in capacity_rows(summary)}
    assert rows["quota / devices of DeviceClass mig-1g.10gb.gpu-platform.io"] == "21 / 56"
    assert summary.destructive == []


def test_the_capacity_policy_holds_each_class_to_its_devices(dra: dict) -> None:
    assert [v for v in check_plan(dra) if v.policy == "gpu-quota-within-capacity"] == []
    config = stack_config("dra")
    next(t for t in config["gpu-platform:tenants"] if t["name"] == "training")["gpus"] = 8
    [violation] = [v for v in check_plan(render_stack("dra", config).document)
                   if v.policy == "gpu-quota-within-capacity"]
    assert "DeviceClass gpu.gpu-platform.io add up to 10 devices" in violation.message
    assert "covers 8" in violation.message
    assert not [v for v in check_plan(render_stack("dra", config).document, {
        "gpu-quota-within-capacity": {"maxOvercommit": 1.25}}) if v.policy == "gpu-quota-within-capacity"]


def test_a_switch_of_allocation_mode_is_destructive_and_names_what_restarts(dra: dict) -> None:
    config = copy.deepcopy(stack_config("dra"))
    config[MODE] = "devicePlugin"
    plugin = render_stack("dra", config).document
    [switch] = [item for item in summarize(dra, plugin, diff_plans(dra, plugin)).destructive
                if item.what.startswith("allocation mode")]
    assert switch.what == "allocation mode dra -> devicePlugin"
    assert "DRA driver" in switch.takes_away and "device plugin" in switch.takes_away
    [back] = [item for item in summarize(plugin, dra, diff_plans(plugin, dra)).destructive
              if item.what.startswith("allocation mode")]
    assert back.what == "allocation mode devicePlugin -> dra" and "claims" in back.takes_away
