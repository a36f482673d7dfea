"""MigPartedConfig: a pool's own MIG layout, in the stack's own mig-parted config, named by the ClusterPolicy and
counted by the capacity policy as the MIG manager would apply it."""

from __future__ import annotations

import pytest
import yaml

from fleet.partitioning import custom_layout_name
from gpuctl.check import check_plan
from tests.conftest import Plan, render_stack, stack_config

CUSTOM = {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}  # one A100 40GB: 7 compute slices, 8 memory slices
LAYOUT = custom_layout_name("a100-training", CUSTOM)


def with_custom_layout(vision_slices: dict[str, int]) -> Plan:
    """dev with its A100 pool cut by its own layout, the tenants given its slices."""
    config = stack_config("dev")
    config["gpu-platform:nodePools"][1]["migLayout"] = dict(CUSTOM)
    for tenant in config["gpu-platform:tenants"]:
        tenant["gpus"] = 0
    config["gpu-platform:tenants"][0]["migSlices"] = vision_slices
    return render_stack("dev", config)


@pytest.fixture(scope="module")
def custom() -> Plan:
    return with_custom_layout({"3g.20gb": 8, "1g.5gb": 16})


def test_the_pools_own_layout_is_in_the_config_the_cluster_policy_names(custom: Plan) -> None:
    [config_map] = [c for c in custom.kind("ConfigMap") if c["metadata"]["name"].startswith("mig-parted-config-")]
    document = yaml.safe_load(config_map["data"]["config.yaml"])
    assert document["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert document["mig-configs"][LAYOUT] == [{
        "device-filter": ["0x20B010DE"], "devices": "all", "mig-enabled": True, "mig-devices": CUSTOM}]
    assert custom.manifest("ClusterPolicy", "cluster-policy")["spec"]["migManager"]["config"] == {
        "default": "all-disabled", "name": config_map["metadata"]["name"]}
    [machine_set] = [m for m in custom.kind("MachineSet") if "a100" in m["metadata"]["name"]]
    assert machine_set["spec"]["template"]["spec"]["metadata"]["labels"]["nvidia.com/mig.config"] == LAYOUT


def test_the_pools_advertise_and_the_policy_counts_the_custom_slices(custom: Plan) -> None:
    assert custom.outputs["advertised"]["a100-training"] == {
        "nvidia.com/mig-1g.5gb": 16, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-3g.20gb": 8}
    assert check_plan(custom.document) == []
    [violation] = check_plan(with_custom_layout({"3g.20gb": 9}).document)
    assert "nvidia.com/mig-3g.20gb" in violation.message and "advertise 8" in violation.message


def test_without_a_custom_layout_the_operators_own_layouts_serve(dev_plan: Plan) -> None:
    assert not [c for c in dev_plan.kind("ConfigMap") if c["metadata"]["name"].startswith("mig-parted-config-")]
    assert "name" not in dev_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["migManager"]["config"]
