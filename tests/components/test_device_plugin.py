"""DevicePluginStack: container toolkit, RuntimeClass, device plugin (time-slicing or not), GFD, vectorAdd check."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.conftest import Plan

NAMESPACE = "gpu-system"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(plan: Plan, name: str) -> dict[str, Any]:
    return plan.manifest("DaemonSet", name, NAMESPACE)["spec"]["template"]["spec"]


def env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value") for item in container.get("env", [])}


# -- toolkit ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "runtime", "config_dir"), [("dev", "crio", "/etc/crio/crio.conf.d"),
                                                              ("prod", "containerd", "/etc/containerd")])
def test_toolkit_configures_the_nodes_container_runtime(dev_plan: Plan, prod_plan: Plan, stack: str,
                                                        runtime: str, config_dir: str) -> None:
    spec = pod(dev_plan if stack == "dev" else prod_plan, "nvidia-container-toolkit")
    [container] = spec["containers"]

    assert env(container)["RUNTIME"] == runtime
    assert env(container)["CONTAINERD_RUNTIME_CLASS"] == "nvidia"
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert config_dir in host_paths
    assert container["securityContext"]["privileged"] is True


def test_toolkit_waits_for_the_driver_on_its_node(dev_plan: Plan) -> None:
    spec = pod(dev_plan, "nvidia-container-toolkit")

    [init] = spec["initContainers"]
    assert "/run/nvidia/validations/.driver-ctr-ready" in " ".join(init["args"])
    assert spec["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert GPU_TOLERATION in spec["tolerations"]


# -- RuntimeClass -------------------------------------------------------------------------------------------------


def test_runtime_class_nvidia_schedules_onto_gpu_nodes(prod_plan: Plan) -> None:
    runtime_class = prod_plan.manifest("RuntimeClass", "nvidia")

    assert runtime_class["handler"] == "nvidia"
    assert runtime_class["scheduling"]["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert GPU_TOLERATION in runtime_class["scheduling"]["tolerations"]


# -- device plugin ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_device_plugin_runs_on_every_gpu_node(dev_plan: Plan, prod_plan: Plan, stack: str) -> None:
    spec = pod(dev_plan if stack == "dev" else prod_plan, "nvidia-device-plugin")
    [container] = spec["containers"]

    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.18.0"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["priorityClassName"] == "system-node-critical"
    assert GPU_TOLERATION in spec["tolerations"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/var/lib/kubelet/device-plugins" in mounts
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_time_slicing_shares_each_gpu(dev_plan: Plan) -> None:
    """dev sets devicePlugin.timeSlicingReplicas: 4."""
    config_map = dev_plan.manifest("ConfigMap", "nvidia-device-plugin-config", NAMESPACE)
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    spec = pod(dev_plan, "nvidia-device-plugin")
    [container] = spec["containers"]

    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    config_file = env(container)["CONFIG_FILE"]
    volume = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "nvidia-device-plugin-config")
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert config_file == f"{mount['mountPath']}/config.yaml"


def test_time_slicing_config_comes_before_the_plugin(dev_plan: Plan) -> None:
    plugin = dev_plan.object("DaemonSet", "nvidia-device-plugin", NAMESPACE)
    config_map = dev_plan.object("ConfigMap", "nvidia-device-plugin-config", NAMESPACE)

    assert config_map["urn"] in plugin["dependencies"]


def test_without_time_slicing_the_plugin_has_no_sharing_config(prod_plan: Plan) -> None:
    [container] = pod(prod_plan, "nvidia-device-plugin")["containers"]

    assert "CONFIG_FILE" not in env(container)
    assert not [cm for cm in prod_plan.kind("ConfigMap") if cm["metadata"]["name"] == "nvidia-device-plugin-config"]


# -- GPU feature discovery ----------------------------------------------------------------------------------------


def test_gpu_feature_discovery_publishes_through_nfd(prod_plan: Plan) -> None:
    spec = pod(prod_plan, "nvidia-gpu-feature-discovery")
    [container] = spec["containers"]

    assert container["command"] == ["gpu-feature-discovery"]
    assert env(container)["GFD_USE_NODE_FEATURE_API"] == "true"
    assert GPU_TOLERATION in spec["tolerations"]
    role = prod_plan.manifest("Role", "nvidia-gpu-feature-discovery", NAMESPACE)
    assert role["rules"] == [{"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"],
                              "verbs": ["create", "get", "update"]}]
    binding = prod_plan.manifest("RoleBinding", "nvidia-gpu-feature-discovery", NAMESPACE)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": NAMESPACE}]


# -- vectorAdd validation -----------------------------------------------------------------------------------------


def validation(plan: Plan) -> dict[str, Any]:
    return plan.manifest("Job", "nvidia-device-plugin-validation", NAMESPACE)


def test_validation_requests_one_gpu_and_runs_vector_add(prod_plan: Plan) -> None:
    spec = validation(prod_plan)["spec"]["template"]["spec"]
    [container] = spec["containers"]

    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "vectoradd" in container["image"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["restartPolicy"] in ("OnFailure", "Never")
    assert GPU_TOLERATION in spec["tolerations"]


def test_validation_waits_for_the_drivers(prod_plan: Plan) -> None:
    job = prod_plan.object("Job", "nvidia-device-plugin-validation", NAMESPACE)
    driver_validations = [r["urn"] for r in prod_plan.of_type("kubernetes:batch/v1:Job")
                          if r["inputs"]["metadata"]["name"].startswith("driver-validation-")]

    assert driver_validations
    assert set(driver_validations) <= set(job["dependencies"])


def test_validation_is_replaced_not_patched(prod_plan: Plan) -> None:
    options = prod_plan.object("Job", "nvidia-device-plugin-validation", NAMESPACE)["options"]

    assert options["deleteBeforeReplace"] is True
    assert "spec" in options["replaceOnChanges"]


def test_node_agents_may_run_privileged_on_openshift(dev_plan: Plan, prod_plan: Plan) -> None:
    scc = dev_plan.manifest("RoleBinding", "gpu-platform-privileged-scc", NAMESPACE)
    accounts = {subject["name"] for subject in scc["subjects"]}

    for agent in ("nvidia-container-toolkit", "nvidia-device-plugin", "nvidia-gpu-feature-discovery"):
        assert pod(dev_plan, agent)["serviceAccountName"] in accounts
    assert not [b for b in prod_plan.kind("RoleBinding") if b["metadata"]["name"] == "gpu-platform-privileged-scc"]
