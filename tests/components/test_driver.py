"""DriverStack: one precompiled driver DaemonSet per (os, kernel), with the pod a driver container needs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Plan, render_stack, stack_config

NAMESPACE = "gpu-system"
KERNEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
GPU_NODE = "feature.node.kubernetes.io/pci-10de.present"


def driver_daemonsets(plan: Plan) -> list[dict[str, Any]]:
    return [r["inputs"] for r in plan.of_type("kubernetes:apps/v1:DaemonSet")
            if r["inputs"]["metadata"]["name"].startswith("nvidia-driver-")]


def validation_jobs(plan: Plan) -> list[dict[str, Any]]:
    return [r["inputs"] for r in plan.of_type("kubernetes:batch/v1:Job")
            if r["inputs"]["metadata"]["name"].startswith("driver-validation-")]


@pytest.fixture(scope="module", params=["dev", "prod"])
def daemonsets(request, dev_plan: Plan, prod_plan: Plan) -> list[dict[str, Any]]:
    plan = dev_plan if request.param == "dev" else prod_plan
    found = driver_daemonsets(plan)
    assert found
    return found


def pod_of(daemonset: dict[str, Any]) -> dict[str, Any]:
    return daemonset["spec"]["template"]["spec"]


def container_of(daemonset: dict[str, Any]) -> dict[str, Any]:
    [container] = pod_of(daemonset)["containers"]
    return container


def test_driver_daemonsets_live_in_gpu_system(daemonsets) -> None:
    assert all(ds["metadata"]["namespace"] == NAMESPACE for ds in daemonsets)


def test_driver_container_is_privileged_with_host_pid(daemonsets) -> None:
    for daemonset in daemonsets:
        assert container_of(daemonset)["securityContext"]["privileged"] is True
        assert pod_of(daemonset)["hostPID"] is True


@pytest.mark.parametrize(("host_path", "mount_path", "propagation"), [
    ("/run/nvidia", "/run/nvidia", "Bidirectional"),   # the driver root other agents mount
    ("/var/log", "/var/log", None),
    ("/dev/log", "/dev/log", None),
    ("/lib/firmware", "/lib/firmware", None),           # GSP firmware
    ("/etc/os-release", "/host-etc/os-release", None),
])
def test_driver_mounts_the_host_paths_it_uses(daemonsets, host_path: str, mount_path: str,
                                              propagation: str | None) -> None:
    for daemonset in daemonsets:
        volume = next(v for v in pod_of(daemonset)["volumes"] if v.get("hostPath", {}).get("path") == host_path)
        mount = next(m for m in container_of(daemonset)["volumeMounts"] if m["name"] == volume["name"])
        assert mount["mountPath"] == mount_path
        if propagation:
            assert mount["mountPropagation"] == propagation


def test_driver_is_node_critical_and_tolerates_the_gpu_taint(daemonsets) -> None:
    for daemonset in daemonsets:
        spec = pod_of(daemonset)
        assert spec["priorityClassName"] == "system-node-critical"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_driver_startup_probe_runs_nvidia_smi_with_room_to_compile(daemonsets) -> None:
    for daemonset in daemonsets:
        probe = container_of(daemonset)["startupProbe"]
        assert "nvidia-smi" in " ".join(probe["exec"]["command"])
        # Loading a driver takes minutes on a cold node: the probe must allow for it.
        budget = probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]
        assert budget >= 600


def test_driver_updates_only_when_a_node_is_recycled(daemonsets) -> None:
    """OnDelete: `pulumi up` never unloads a driver under running GPU jobs, and never waits on a rollout."""
    for daemonset in daemonsets:
        assert daemonset["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_driver_is_pinned_to_its_kernel_and_os(dev_plan: Plan, prod_plan: Plan) -> None:
    for plan, os_id, version in ((dev_plan, "rhcos", "4.16"), (prod_plan, "ubuntu", "22.04")):
        for daemonset in driver_daemonsets(plan):
            selector = pod_of(daemonset)["nodeSelector"]
            kernel = daemonset["metadata"]["annotations"]["gpu-platform.io/kernel"]
            assert selector == {GPU_NODE: "true", KERNEL: kernel, OS_ID: os_id, OS_VERSION: version}
            assert f"-{kernel}-" in container_of(daemonset)["image"]


def test_driver_selector_matches_its_pods(daemonsets) -> None:
    for daemonset in daemonsets:
        selector = daemonset["spec"]["selector"]["matchLabels"]
        assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()


def test_driver_selectors_are_distinct(daemonsets) -> None:
    """Two driver DaemonSets selecting the same pods would fight over them."""
    selectors = [tuple(sorted(ds["spec"]["selector"]["matchLabels"].items())) for ds in daemonsets]
    assert len(set(selectors)) == len(selectors)


def test_driver_carries_its_version(dev_plan: Plan) -> None:
    for daemonset in driver_daemonsets(dev_plan):
        env = {e["name"]: e.get("value") for e in container_of(daemonset)["env"]}
        assert env["DRIVER_VERSION"] == "580.95.05"
        assert container_of(daemonset)["image"].startswith("nvcr.io/nvidia/driver:580-")


@pytest.fixture(scope="module")
def prod_with_pull_secret() -> Plan:
    """prod as a team runs it after `pulumi config set --secret registryPullSecret ...` (an encrypted value)."""
    config = stack_config("prod")
    config["gpu-platform:registryPullSecret"] = {"secure": "v1:ciphertext-the-secrets-provider-decrypts"}
    return render_stack("prod", config)


def test_driver_pulls_with_the_registry_secret_when_one_is_set(prod_with_pull_secret: Plan, prod_plan: Plan) -> None:
    secret = prod_with_pull_secret.manifest("Secret", "nvidia-registry", NAMESPACE)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert all(pod_of(ds)["imagePullSecrets"] == [{"name": "nvidia-registry"}]
               for ds in driver_daemonsets(prod_with_pull_secret))
    assert all("imagePullSecrets" not in pod_of(ds) for ds in driver_daemonsets(prod_plan))
    assert not prod_plan.of_type("kubernetes:core/v1:Secret")


def test_registry_secret_value_never_reaches_the_plan(prod_with_pull_secret: Plan) -> None:
    secret = prod_with_pull_secret.manifest("Secret", "nvidia-registry", NAMESPACE)
    assert set(secret["stringData"].values()) == {"[secret]"}


# -- validation Jobs ----------------------------------------------------------------------------------------------


def test_one_validation_job_per_driver(dev_plan: Plan, prod_plan: Plan) -> None:
    for plan in (dev_plan, prod_plan):
        kernels = {ds["metadata"]["annotations"]["gpu-platform.io/kernel"] for ds in driver_daemonsets(plan)}
        jobs = validation_jobs(plan)
        assert sorted(job["spec"]["template"]["spec"]["nodeSelector"][KERNEL] for job in jobs) == sorted(kernels)


def test_validation_runs_on_its_kernels_nodes(dev_plan: Plan) -> None:
    by_kernel = {ds["metadata"]["annotations"]["gpu-platform.io/kernel"]: ds for ds in driver_daemonsets(dev_plan)}
    for job in validation_jobs(dev_plan):
        spec = job["spec"]["template"]["spec"]
        kernel = spec["nodeSelector"][KERNEL]
        assert spec["nodeSelector"] == pod_of(by_kernel[kernel])["nodeSelector"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["restartPolicy"] in ("OnFailure", "Never")
        [container] = spec["containers"]
        assert container["image"] == "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.10.0"
        assert {"name": "COMPONENT", "value": "driver"} in container["env"]


def test_validation_is_replaced_not_patched(dev_plan: Plan) -> None:
    """A Job's pod template is immutable: a change must replace the Job, deleting the old one first."""
    for job in dev_plan.of_type("kubernetes:batch/v1:Job"):
        if job["inputs"]["metadata"]["name"].startswith("driver-validation-"):
            assert job["options"]["deleteBeforeReplace"] is True
            assert "spec" in job["options"]["replaceOnChanges"]


def test_driver_names_are_short_dns_labels(dev_plan: Plan, prod_plan: Plan) -> None:
    for plan in (dev_plan, prod_plan):
        for manifest in driver_daemonsets(plan) + validation_jobs(plan):
            name = manifest["metadata"]["name"]
            assert len(name) <= 63 and name == name.lower() and name.replace("-", "").isalnum(), name
