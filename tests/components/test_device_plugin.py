"""DevicePluginStack: the device plugin's time-slicing config, which the ClusterPolicy hands to NVIDIA's plugin."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from stacks.config import ConfigError
from tests.conftest import Plan, stack_config

CONFIG_MAP = "device-plugin-config"


def config_maps(plan: Plan) -> list[dict[str, Any]]:
    return [cm for cm in plan.kind("ConfigMap") if cm["metadata"]["name"] == CONFIG_MAP]


def test_each_pool_has_its_config_whole_gpus_the_default(dev_plan: Plan) -> None:
    """dev's t4-inference pool sets timeSlicingReplicas: 4; a100-training gives whole GPUs."""
    config_map = dev_plan.manifest("ConfigMap", CONFIG_MAP, "nvidia-gpu-operator")
    assert set(config_map["data"]) == {"whole", "t4-inference", "a100-training"}
    config = yaml.safe_load(config_map["data"]["t4-inference"])
    assert config["version"] == "v1"
    sharing = config["sharing"]["timeSlicing"]
    assert sharing["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert sharing["failRequestsGreaterThanOne"] is True  # one share per request: no one takes a GPU by asking for 4
    for whole in ("a100-training", "whole"):
        assert "sharing" not in yaml.safe_load(config_map["data"][whole])


def test_each_pool_selects_its_config_by_node_label(dev_plan: Plan) -> None:
    """The 8-GPU training pool's nodes select a config that does not share, so an 8-GPU pod fits its allocatable;
    k8s-device-plugin's config manager reads this node label."""
    node_labels = {ms["spec"]["template"]["spec"]["metadata"]["labels"]["gpu-platform.io/pool"]:
                   ms["spec"]["template"]["spec"]["metadata"]["labels"] for ms in dev_plan.kind("MachineSet")}
    for pool, labels in node_labels.items():
        assert labels["nvidia.com/device-plugin.config"] == pool


def test_the_cluster_policy_names_the_configs_with_whole_gpus_the_default(prod_plan: Plan) -> None:
    """No prod pool shares: every config gives whole GPUs."""
    config_map = prod_plan.manifest("ConfigMap", CONFIG_MAP, "gpu-operator")
    assert all("sharing" not in yaml.safe_load(text) for text in config_map["data"].values())
    plugin = prod_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["devicePlugin"]
    assert plugin["config"] == {"name": CONFIG_MAP, "default": "whole"}


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
    config_map = plan.manifest("ConfigMap", CONFIG_MAP, "gpu-operator")
    resources = yaml.safe_load(config_map["data"]["l4-inference"])["sharing"]["timeSlicing"]["resources"]
    assert resources == [{"name": "nvidia.com/gpu", "replicas": 8}]
    # the autoscaler's template node advertises what the device plugin will: 1 L4 shared 8 ways
    [group] = [g for g in plan.of_type("aws:autoscaling/group:Group") if g["inputs"]["name"].endswith("l4-inference")]
    tags = {tag["key"]: tag["value"] for tag in group["inputs"]["tags"]}
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "8"
    assert tags["k8s.io/cluster-autoscaler/node-template/label/nvidia.com/device-plugin.config"] == "l4-inference"


def test_no_hand_written_node_agents(dev_plan: Plan, prod_plan: Plan) -> None:
    """The toolkit, device plugin, GFD and exporter are the operator's: the platform declares no DaemonSet."""
    for plan in (dev_plan, prod_plan):
        assert not plan.kind("DaemonSet") and not plan.kind("RuntimeClass")
