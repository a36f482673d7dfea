"""DevicePluginStack: the device plugin's per-pool configs, which the ClusterPolicy hands to NVIDIA's plugin."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from stacks.config import ConfigError
from tests.conftest import Plan, stack_config

CONFIG_MAP = "device-plugin-config"


def config_map(plan: Plan) -> dict[str, Any]:
    [found] = [cm for cm in plan.kind("ConfigMap") if cm["metadata"]["name"].startswith(f"{CONFIG_MAP}-")]
    return found


def test_each_pool_has_its_config_whole_gpus_the_default(dev_plan: Plan) -> None:
    """dev's t4-inference pool sets timeSlicingReplicas: 4; a100-training gives whole GPUs."""
    data = config_map(dev_plan)["data"]
    assert set(data) == {"whole", "t4-inference", "a100-training"}
    config = yaml.safe_load(data["t4-inference"])
    assert config["version"] == "v1"
    sharing = config["sharing"]["timeSlicing"]
    assert sharing["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    # shares advertised as nvidia.com/gpu.shared, never as GPUs, and one per request
    assert sharing["renameByDefault"] is True and sharing["failRequestsGreaterThanOne"] is True
    for whole in ("a100-training", "whole"):
        assert "sharing" not in yaml.safe_load(data[whole])
    assert {yaml.safe_load(text)["flags"]["migStrategy"] for text in data.values()} == {"mixed"}


def test_each_pool_selects_its_config_by_node_label(dev_plan: Plan) -> None:
    """The 8-GPU training pool's nodes select a config that does not share, so an 8-GPU pod fits its allocatable;
    k8s-device-plugin's config manager reads this node label."""
    node_labels = {ms["spec"]["template"]["spec"]["metadata"]["labels"]["gpu-platform.io/pool"]:
                   ms["spec"]["template"]["spec"]["metadata"]["labels"] for ms in dev_plan.kind("MachineSet")}
    for pool, labels in node_labels.items():
        assert labels["nvidia.com/device-plugin.config"] == pool


def test_the_cluster_policy_names_the_configs_with_whole_gpus_the_default(prod_plan: Plan) -> None:
    """No prod pool shares: every config gives whole GPUs."""
    found = config_map(prod_plan)
    assert all("sharing" not in yaml.safe_load(text) for text in found["data"].values())
    plugin = prod_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["devicePlugin"]
    assert plugin["config"] == {"name": found["metadata"]["name"], "default": "whole"}


def test_a_sharing_change_is_a_new_config_map_that_the_cluster_policy_names(render) -> None:
    """The config manager reloads only on a node label change, so a changed config under the same name would reach
    no running node: the name follows the contents, and the ClusterPolicy's new name rolls the operator's
    DaemonSets."""
    before = render("prod")
    config = stack_config("prod")
    config["gpu-platform:nodePools"][0]["timeSlicingReplicas"] = 8
    after = render("prod", config)

    names = [config_map(plan)["metadata"]["name"] for plan in (before, after)]
    policies = [plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["devicePlugin"]["config"]["name"]
                for plan in (before, after)]
    assert names[0] != names[1] and policies == names
    assert config_map(render("prod"))["metadata"]["name"] == names[0]  # the same contents, the same name


def test_the_old_fleet_wide_setting_says_where_it_went(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:devicePlugin"] = {"timeSlicingReplicas": 8}
    with pytest.raises(ConfigError, match=r"devicePlugin: timeSlicingReplicas is a pool's choice: move it to "
                                          r"nodePools\[\]\.timeSlicingReplicas"):
        render("prod", config)


def test_time_slicing_on_kubernetes_reaches_the_autoscalers_template_node(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:nodePools"][0]["timeSlicingReplicas"] = 8
    plan = render("prod", config)
    resources = yaml.safe_load(config_map(plan)["data"]["l4-inference"])["sharing"]["timeSlicing"]["resources"]
    assert resources == [{"name": "nvidia.com/gpu", "replicas": 8}]
    # the autoscaler's template node advertises what the device plugin will: 1 L4 shared 8 ways, as shares
    [group] = [g for g in plan.of_type("aws:autoscaling/group:Group") if g["inputs"]["name"].endswith("l4-inference")]
    tags = {tag["key"]: tag["value"] for tag in group["inputs"]["tags"]}
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu.shared"] == "8"
    assert "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu" not in tags
    assert tags["k8s.io/cluster-autoscaler/node-template/label/nvidia.com/device-plugin.config"] == "l4-inference"


def test_no_hand_written_node_agents(dev_plan: Plan, prod_plan: Plan) -> None:
    """The toolkit, device plugin, GFD and exporter are the operator's: the platform declares no DaemonSet."""
    for plan in (dev_plan, prod_plan):
        assert not plan.kind("DaemonSet") and not plan.kind("RuntimeClass")
