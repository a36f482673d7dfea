"""ClusterPolicyStack: the one ClusterPolicy that runs every GPU operand except the drivers."""

from __future__ import annotations

from typing import Any

import pytest

from components import labels
from tests.conftest import Plan, stack_config

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SECTIONS = ("toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator", "migManager")


@pytest.fixture(scope="module", params=["dev", "prod"])
def plan(request, dev_plan: Plan, prod_plan: Plan) -> Plan:
    return dev_plan if request.param == "dev" else prod_plan


def spec(plan: Plan) -> dict[str, Any]:
    return plan.manifest("ClusterPolicy", "cluster-policy")["spec"]


def image_of(section: dict[str, Any]) -> str:
    return f"{section['repository']}/{section['image']}:{section['version']}"


def env(section: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in section.get("env", [])}


def test_exactly_one_cluster_policy(plan: Plan) -> None:
    [policy] = plan.kind("ClusterPolicy")
    assert policy["apiVersion"] == "nvidia.com/v1"
    assert policy["metadata"]["name"] == "cluster-policy"


def test_drivers_come_from_nvidia_driver_resources(plan: Plan) -> None:
    assert spec(plan)["driver"] == {"enabled": True, "useNvidiaDriverCRD": True}


def test_driver_toolkit_only_on_openshift(dev_plan: Plan, prod_plan: Plan) -> None:
    assert spec(dev_plan)["operator"]["use_ocp_driver_toolkit"] is True
    assert spec(prod_plan)["operator"]["use_ocp_driver_toolkit"] is False


def test_toolkit_ignores_visible_devices_env_of_unprivileged_pods(plan: Plan) -> None:
    """A tenant cannot reach GPUs it was not allocated by setting NVIDIA_VISIBLE_DEVICES=all."""
    toolkit = env(spec(plan)["toolkit"])
    assert toolkit["ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED"] == "false"
    assert toolkit["ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"] == "true"
    assert env(spec(plan)["devicePlugin"])["DEVICE_LIST_STRATEGY"] == "volume-mounts"
    assert spec(plan)["cdi"]["enabled"] is False


def test_operands_run_on_tainted_gpu_nodes(plan: Plan) -> None:
    daemonsets = spec(plan)["daemonsets"]
    assert GPU_TOLERATION in daemonsets["tolerations"]
    assert daemonsets["priorityClassName"] == "system-node-critical"
    assert daemonsets["updateStrategy"] == "RollingUpdate"


def test_operand_images_are_the_pinned_release(plan: Plan) -> None:
    policy = spec(plan)
    for section in SECTIONS:
        assert image_of(policy[section]) == labels.OPERAND_IMAGES[section], section
    for section in ("toolkit", "devicePlugin", "gfd", "dcgmExporter", "migManager"):
        assert policy[section]["enabled"] is True, section


def test_images_config_overrides_operands(render) -> None:
    config = stack_config("prod")
    config["gpu-platform:images"] = {
        "toolkit": "registry.example.com/nvidia/k8s/container-toolkit:v1.20.1",
        "devicePlugin": "registry.example.com/nvidia/k8s-device-plugin@sha256:" + "a" * 64,
        "dcgmExporter": "registry.example.com/nvidia/k8s/dcgm-exporter:4.6.0-4.8.4-distroless",
    }
    policy = spec(render("prod", config))
    assert image_of(policy["toolkit"]) == "registry.example.com/nvidia/k8s/container-toolkit:v1.20.1"
    assert (policy["devicePlugin"]["repository"], policy["devicePlugin"]["image"], policy["devicePlugin"]["version"]) \
        == ("registry.example.com/nvidia", "k8s-device-plugin", "sha256:" + "a" * 64)
    assert policy["dcgmExporter"]["version"] == "4.6.0-4.8.4-distroless"
    # GPU feature discovery runs from the device plugin's image, so it follows that override.
    assert image_of(policy["gfd"]) == image_of(policy["devicePlugin"]) != labels.OPERAND_IMAGES["gfd"]
    # Sections not overridden keep the pinned release's images.
    assert image_of(policy["validator"]) == labels.OPERAND_IMAGES["validator"]
    assert image_of(policy["migManager"]) == labels.OPERAND_IMAGES["migManager"]


def test_device_plugin_configs_per_pool_whole_gpus_the_default(dev_plan: Plan, prod_plan: Plan) -> None:
    for plan in (dev_plan, prod_plan):
        [config_map] = [c for c in plan.kind("ConfigMap") if c["metadata"]["name"].startswith("device-plugin-config-")]
        assert spec(plan)["devicePlugin"]["config"] == {"name": config_map["metadata"]["name"], "default": "whole"}


def test_service_monitor_follows_the_prometheus_operator_switch(dev_plan: Plan, prod_plan: Plan, render) -> None:
    assert spec(dev_plan)["dcgmExporter"]["serviceMonitor"]["enabled"] is True  # OpenShift default
    assert spec(prod_plan)["dcgmExporter"]["serviceMonitor"]["enabled"] is True  # prod sets it
    config = stack_config("prod")
    del config["gpu-platform:monitoring"]
    assert spec(render("prod", config))["dcgmExporter"]["serviceMonitor"]["enabled"] is False  # Kubernetes default


def test_cluster_policy_waits_for_the_operator(dev_plan: Plan, prod_plan: Plan) -> None:
    assert dev_plan.depends_on(dev_plan.object("ClusterPolicy", "cluster-policy"),
                               "gpu-operator-olm-approve-install-plan")
    assert prod_plan.depends_on(prod_plan.object("ClusterPolicy", "cluster-policy"), "gpu-operator-release")


def test_cluster_policy_waits_for_its_device_plugin_config(dev_plan: Plan) -> None:
    policy = dev_plan.object("ClusterPolicy", "cluster-policy")
    [config_map] = [r for r in dev_plan.of_type("kubernetes:core/v1:ConfigMap")
                    if r["inputs"]["metadata"]["name"].startswith("device-plugin-config-")]
    assert config_map["urn"] in policy["dependencies"]
