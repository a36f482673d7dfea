"""DevicePluginStack: the device plugin's time-slicing config, which the ClusterPolicy hands to NVIDIA's plugin."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import Plan, stack_config

CONFIG_MAP = "device-plugin-config"


def config_maps(plan: Plan) -> list[dict[str, Any]]:
    return [cm for cm in plan.kind("ConfigMap") if cm["metadata"]["name"] == CONFIG_MAP]


def test_time_slicing_shares_each_gpu(dev_plan: Plan) -> None:
    """dev sets devicePlugin.timeSlicingReplicas: 4."""
    config_map = dev_plan.manifest("ConfigMap", CONFIG_MAP, "nvidia-gpu-operator")
    assert set(config_map["data"]) == {"time-slicing"}
    config = yaml.safe_load(config_map["data"]["time-slicing"])
    assert config["version"] == "v1"
    sharing = config["sharing"]["timeSlicing"]
    assert sharing["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert sharing["failRequestsGreaterThanOne"] is True  # one share per request: no one takes a GPU by asking for 4


def test_cluster_policy_points_the_plugin_at_its_config(dev_plan: Plan) -> None:
    plugin = dev_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["devicePlugin"]
    config_map = dev_plan.manifest("ConfigMap", CONFIG_MAP, "nvidia-gpu-operator")
    assert plugin["config"]["name"] == config_map["metadata"]["name"]
    assert plugin["config"]["default"] in config_map["data"]


def test_time_slicing_config_comes_before_the_policy(dev_plan: Plan) -> None:
    policy = dev_plan.object("ClusterPolicy", "cluster-policy")
    config_map = dev_plan.object("ConfigMap", CONFIG_MAP, "nvidia-gpu-operator")
    assert config_map["urn"] in policy["dependencies"]
    assert dev_plan.depends_on(config_map, "gpu-operator-olm-approve-install-plan")  # its namespace exists


def test_without_time_slicing_there_is_no_sharing_config(prod_plan: Plan) -> None:
    assert not config_maps(prod_plan)
    assert "config" not in prod_plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["devicePlugin"]


def test_time_slicing_on_kubernetes_lands_in_the_operator_namespace(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:devicePlugin"] = {"timeSlicingReplicas": 8}
    plan = render("prod", config)
    config_map = plan.manifest("ConfigMap", CONFIG_MAP, "gpu-operator")
    resources = yaml.safe_load(config_map["data"]["time-slicing"])["sharing"]["timeSlicing"]["resources"]
    assert resources == [{"name": "nvidia.com/gpu", "replicas": 8}]
    plugin = plan.manifest("ClusterPolicy", "cluster-policy")["spec"]["devicePlugin"]
    assert plugin["config"] == {"name": CONFIG_MAP, "default": "time-slicing"}


def test_no_hand_written_node_agents(dev_plan: Plan, prod_plan: Plan) -> None:
    """The toolkit, device plugin, GFD and exporter are the operator's: the platform declares no DaemonSet."""
    for plan in (dev_plan, prod_plan):
        assert not plan.kind("DaemonSet") and not plan.kind("RuntimeClass")
