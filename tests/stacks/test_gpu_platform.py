"""stacks.gpu_platform: GpuPlatform's dependency graph, its stack outputs, and how kernels become driver DaemonSets."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.kernels import KernelTarget, ObservedNode
from tests.conftest import Plan, render_stack, stack_config

KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
SKIP_AWAIT = "pulumi.com/skipAwait"
DAEMONSET = "kubernetes:apps/v1:DaemonSet"
JOB = "kubernetes:batch/v1:Job"
MACHINE_SET = "kubernetes:machine.openshift.io/v1beta1:MachineSet"
MACHINE_AUTOSCALER = "kubernetes:autoscaling.openshift.io/v1beta1:MachineAutoscaler"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AUTO_SCALING_GROUP = "aws:autoscaling/group:Group"

DEV_T4_KERNEL = "5.14.0-427.50.1.el9_4.x86_64"
DEV_A100_KERNEL = "5.14.0-427.42.1.el9_4.x86_64"
NEW_KERNEL = "5.14.0-427.55.1.el9_4.x86_64"


def drivers(plan: Plan) -> dict[str, dict[str, Any]]:
    """Driver DaemonSets by kernel (from their nodeSelector)."""
    found = {}
    for resource in plan.of_type(DAEMONSET):
        manifest = resource["inputs"]
        if manifest["metadata"]["name"].startswith("nvidia-driver-"):
            kernel = manifest["spec"]["template"]["spec"]["nodeSelector"][KERNEL_LABEL]
            assert kernel not in found, f"two driver DaemonSets for {kernel}"
            found[kernel] = resource
    return found


def driver_validations(plan: Plan) -> dict[str, dict[str, Any]]:
    """Driver validation Jobs by kernel (from their pod's nodeSelector)."""
    return {job["inputs"]["spec"]["template"]["spec"]["nodeSelector"][KERNEL_LABEL]: job
            for job in plan.of_type(JOB) if job["inputs"]["metadata"]["name"].startswith("driver-validation-")}


def depends(resource: dict[str, Any], other: dict[str, Any]) -> bool:
    return other["urn"] in resource["dependencies"]


def pool_kernels(stack: str) -> dict[str, str]:
    return {pool["name"]: pool["kernel"] for pool in stack_config(stack)["gpu-platform:nodePools"]}


def with_pool_kernel(stack: str, pool: str, kernel: str) -> dict[str, Any]:
    config = stack_config(stack)
    for entry in config["gpu-platform:nodePools"]:
        if entry["name"] == pool:
            entry["kernel"] = kernel
    return config


def annotations(resource: dict[str, Any]) -> dict[str, str]:
    return resource["inputs"]["metadata"].get("annotations") or {}


# -- edges --------------------------------------------------------------------------------------------------------


def test_each_machine_set_waits_for_its_kernels_driver_only(dev_plan: Plan) -> None:
    by_kernel = drivers(dev_plan)
    machine_sets = {ms["inputs"]["metadata"]["name"]: ms for ms in dev_plan.of_type(MACHINE_SET)}
    assert len(machine_sets) == 2

    for pool, kernel in pool_kernels("dev").items():
        [machine_set] = [ms for name, ms in machine_sets.items() if f"-gpu-{pool}-" in name]
        assert depends(machine_set, by_kernel[kernel]), pool
        others = [ds for k, ds in by_kernel.items() if k != kernel]
        assert not any(depends(machine_set, ds) for ds in others), f"{pool} waits for another kernel's driver"


def test_machine_autoscalers_wait_for_their_pools_driver(dev_plan: Plan) -> None:
    by_kernel = drivers(dev_plan)
    for pool, kernel in pool_kernels("dev").items():
        [autoscaler] = [a for a in dev_plan.of_type(MACHINE_AUTOSCALER) if f"-gpu-{pool}-" in a["inputs"]["metadata"]["name"]]
        assert depends(autoscaler, by_kernel[kernel])


@pytest.mark.parametrize("type_", [LAUNCH_TEMPLATE, AUTO_SCALING_GROUP])
def test_each_aws_pool_resource_waits_for_its_kernels_driver_only(prod_plan: Plan, type_: str) -> None:
    by_kernel = drivers(prod_plan)
    resources = {r["inputs"]["name"]: r for r in prod_plan.of_type(type_)}
    assert len(resources) == 3

    for pool, kernel in pool_kernels("prod").items():
        resource = resources[f"prod-gpu-gpu-{pool}"]
        assert depends(resource, by_kernel[kernel]), pool
        assert not any(depends(resource, ds) for k, ds in by_kernel.items() if k != kernel)


def test_auto_scaling_group_uses_its_launch_template(prod_plan: Plan) -> None:
    templates = {r["inputs"]["name"]: r for r in prod_plan.of_type(LAUNCH_TEMPLATE)}
    for group in prod_plan.of_type(AUTO_SCALING_GROUP):
        assert depends(group, templates[group["inputs"]["name"]])


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_driver_daemonsets_wait_for_nfd(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    nfd_worker = plan.object("DaemonSet", "nfd-worker")
    nfd_master = plan.object("Deployment", "nfd-master")
    rule = plan.object("NodeFeatureRule", "nvidia-gpu")

    for daemonset in drivers(plan).values():
        assert depends(daemonset, nfd_worker) and depends(daemonset, nfd_master) and depends(daemonset, rule)


@pytest.mark.parametrize("name", ["nvidia-container-toolkit", "nvidia-device-plugin", "nvidia-gpu-feature-discovery"])
def test_node_agents_wait_for_every_driver_validation(dev_plan: Plan, name: str) -> None:
    agent = dev_plan.object("DaemonSet", name)
    validations = driver_validations(dev_plan)
    assert len(validations) == 2

    assert all(depends(agent, job) for job in validations.values())


def test_driver_validation_waits_for_its_driver(dev_plan: Plan) -> None:
    by_kernel = drivers(dev_plan)
    for kernel, job in driver_validations(dev_plan).items():
        assert depends(job, by_kernel[kernel])


def test_device_plugin_waits_for_the_toolkit(dev_plan: Plan) -> None:
    plugin = dev_plan.object("DaemonSet", "nvidia-device-plugin")

    assert depends(plugin, dev_plan.object("DaemonSet", "nvidia-container-toolkit"))
    assert depends(plugin, dev_plan.object("RuntimeClass", "nvidia"))


def test_device_plugin_validation_waits_for_the_plugin_and_the_drivers(dev_plan: Plan) -> None:
    validation = dev_plan.object("Job", "nvidia-device-plugin-validation")

    assert depends(validation, dev_plan.object("DaemonSet", "nvidia-device-plugin"))
    assert all(depends(validation, job) for job in driver_validations(dev_plan).values())


@pytest.mark.parametrize(("kind", "name"), [
    ("DaemonSet", "nvidia-dcgm-exporter"), ("Service", "nvidia-dcgm-exporter"),
    ("ServiceMonitor", "nvidia-dcgm-exporter"), ("PrometheusRule", "gpu-alerts"),
])
def test_monitoring_waits_for_the_device_plugin_validation(dev_plan: Plan, kind: str, name: str) -> None:
    assert depends(dev_plan.object(kind, name), dev_plan.object("Job", "nvidia-device-plugin-validation"))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_tenant_objects_wait_for_the_priority_classes(stack: str, dev_plan: Plan, prod_plan: Plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    classes = [plan.object("PriorityClass", "gpu-high"), plan.object("PriorityClass", "gpu-low")]
    tenants = [t["name"] for t in stack_config(stack)["gpu-platform:tenants"]]

    for tenant in tenants:
        namespace = plan.object("Namespace", tenant)
        quota = plan.object("ResourceQuota", "gpu-quota", tenant)
        for resource in (namespace, quota):
            assert all(depends(resource, cls) for cls in classes), tenant
        assert depends(quota, namespace)


def test_every_child_has_a_parent_in_the_plan(dev_plan: Plan) -> None:
    platform = next(r for r in dev_plan.resources if r["type"] == "gpu-platform:index:GpuPlatform")
    for resource in dev_plan.resources:
        if resource is not platform:
            assert resource["parent"] in dev_plan.by_urn, resource["urn"]
        assert all(dep in dev_plan.by_urn for dep in resource["dependencies"]), resource["urn"]


# -- outputs ------------------------------------------------------------------------------------------------------


def test_dev_outputs(dev_plan: Plan) -> None:
    outputs = dev_plan.outputs

    assert outputs["capacity"] == {"t4-inference": 2, "a100-training": 8}
    assert outputs["totalGpus"] == 10
    assert sorted(outputs["kernels"]) == sorted([f"rhcos4.16/{DEV_T4_KERNEL}", f"rhcos4.16/{DEV_A100_KERNEL}"])
    assert outputs["driverImages"] == {
        f"rhcos4.16/{kernel}": f"nvcr.io/nvidia/driver:580-{kernel}-rhcos4.16"
        for kernel in (DEV_T4_KERNEL, DEV_A100_KERNEL)
    }
    assert outputs["tenants"]["vision"]["gpus"] == 6
    assert outputs["tenants"]["vision"]["priorityClass"] == "gpu-high"
    assert outputs["tenants"]["nlp-research"]["gpus"] == 4
    assert outputs["tenants"]["nlp-research"]["priorityClass"] == "gpu-low"
    assert outputs["kubernetesVersion"] == "1.31"


def test_prod_outputs(prod_plan: Plan) -> None:
    outputs = prod_plan.outputs

    assert outputs["capacity"] == {"l4-inference": 8 * 1, "a10g-batch": 4 * 4, "h100-training": 2 * 8}
    assert outputs["totalGpus"] == 40
    assert sorted(outputs["kernels"]) == ["ubuntu22.04/6.8.0-1019-aws", "ubuntu22.04/6.8.0-1021-aws"]
    assert outputs["driverImages"]["ubuntu22.04/6.8.0-1019-aws"] == "nvcr.io/nvidia/driver:580-6.8.0-1019-aws-ubuntu22.04"
    assert set(outputs["tenants"]) == {"search-ranking", "llm-training", "analytics"}
    assert outputs["tenants"]["llm-training"]["gpus"] == 16


def test_driver_images_output_matches_the_daemonsets(prod_plan: Plan) -> None:
    images = {kernel: ds["inputs"]["spec"]["template"]["spec"]["containers"][0]["image"]
              for kernel, ds in drivers(prod_plan).items()}

    assert sorted(images.values()) == sorted(prod_plan.outputs["driverImages"].values())


# -- kernels -> driver DaemonSets ---------------------------------------------------------------------------------


def test_one_driver_daemonset_per_distinct_kernel(prod_plan: Plan, dev_plan: Plan) -> None:
    # prod: three pools, two of them on the same kernel.
    assert set(drivers(prod_plan)) == set(pool_kernels("prod").values())
    assert len(drivers(prod_plan)) == 2
    assert set(drivers(dev_plan)) == {DEV_T4_KERNEL, DEV_A100_KERNEL}
    assert len(driver_validations(prod_plan)) == 2


def test_driver_daemonset_image_carries_its_kernel(dev_plan: Plan) -> None:
    for kernel, daemonset in drivers(dev_plan).items():
        image = daemonset["inputs"]["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == f"nvcr.io/nvidia/driver:580-{kernel}-rhcos4.16"
        assert daemonset["inputs"]["metadata"]["name"] == f"nvidia-driver-{KernelTarget('rhcos4.16', kernel).slug}"


@pytest.fixture(scope="module")
def dev_kernel_bump() -> Plan:
    """dev with the t4-inference pool moved to a new kernel."""
    return render_stack("dev", with_pool_kernel("dev", "t4-inference", NEW_KERNEL))


def test_kernel_change_replaces_only_that_kernels_driver(dev_plan: Plan, dev_kernel_bump: Plan) -> None:
    before, after = drivers(dev_plan), drivers(dev_kernel_bump)

    assert set(after) == {NEW_KERNEL, DEV_A100_KERNEL}
    # The other pool's driver is untouched: same logical resource, same inputs.
    assert after[DEV_A100_KERNEL]["urn"] == before[DEV_A100_KERNEL]["urn"]
    assert after[DEV_A100_KERNEL]["inputs"] == before[DEV_A100_KERNEL]["inputs"]
    # The bumped pool gets a new driver: new name, nodeSelector and image, all carrying the new kernel.
    new = after[NEW_KERNEL]["inputs"]
    old = before[DEV_T4_KERNEL]["inputs"]
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["metadata"]["name"] == f"nvidia-driver-{KernelTarget('rhcos4.16', NEW_KERNEL).slug}"
    assert new["spec"]["template"]["spec"]["nodeSelector"][KERNEL_LABEL] == NEW_KERNEL
    assert new["spec"]["template"]["spec"]["containers"][0]["image"] == f"nvcr.io/nvidia/driver:580-{NEW_KERNEL}-rhcos4.16"


def test_kernel_change_moves_the_pool_to_the_new_driver(dev_kernel_bump: Plan) -> None:
    by_kernel = drivers(dev_kernel_bump)
    [machine_set] = [ms for ms in dev_kernel_bump.of_type(MACHINE_SET) if "-gpu-t4-inference-" in ms["inputs"]["metadata"]["name"]]

    assert depends(machine_set, by_kernel[NEW_KERNEL])
    assert not depends(machine_set, by_kernel[DEV_A100_KERNEL])


def test_kernel_change_leaves_a_shared_kernels_driver_in_place(prod_plan: Plan) -> None:
    """prod: l4-inference leaves the kernel a10g-batch still boots; that driver stays exactly as it was."""
    bumped = render_stack("prod", with_pool_kernel("prod", "l4-inference", "6.8.0-1024-aws"))
    before, after = drivers(prod_plan), drivers(bumped)

    assert set(after) == {"6.8.0-1024-aws", "6.8.0-1021-aws", "6.8.0-1019-aws"}
    for kernel in ("6.8.0-1021-aws", "6.8.0-1019-aws"):
        assert after[kernel]["inputs"] == before[kernel]["inputs"]


def test_driver_for_a_kernel_nodes_still_run_is_kept() -> None:
    """A kernel upgrade removes the old driver only once no observed node runs the old kernel."""
    config = with_pool_kernel("dev", "t4-inference", NEW_KERNEL)
    still_old = [ObservedNode("gpu-node-1", KernelTarget("rhcos4.16", DEV_T4_KERNEL))]

    plan = render_stack("dev", config, observed=still_old)

    assert set(drivers(plan)) == {NEW_KERNEL, DEV_T4_KERNEL, DEV_A100_KERNEL}
    assert set(driver_validations(plan)) == {NEW_KERNEL, DEV_T4_KERNEL, DEV_A100_KERNEL}


# -- validations that must not block `pulumi up` ------------------------------------------------------------------


def test_without_observed_nodes_no_validation_blocks(dev_plan: Plan) -> None:
    for job in driver_validations(dev_plan).values():
        assert annotations(job).get(SKIP_AWAIT) == "true"
    assert annotations(dev_plan.object("Job", "nvidia-device-plugin-validation")).get(SKIP_AWAIT) == "true"


@pytest.fixture(scope="module")
def observed_t4() -> Plan:
    """dev where one live node runs the t4-inference kernel and none runs the a100-training one."""
    return render_stack("dev", observed=[ObservedNode("gpu-node-1", KernelTarget("rhcos4.16", DEV_T4_KERNEL))])


def test_validation_for_an_observed_kernel_is_awaited(observed_t4: Plan) -> None:
    validations = driver_validations(observed_t4)

    assert SKIP_AWAIT not in annotations(validations[DEV_T4_KERNEL])
    assert annotations(validations[DEV_A100_KERNEL]).get(SKIP_AWAIT) == "true"


def test_device_plugin_validation_is_awaited_once_a_gpu_node_runs(observed_t4: Plan) -> None:
    assert SKIP_AWAIT not in annotations(observed_t4.object("Job", "nvidia-device-plugin-validation"))


def test_observed_kernel_outside_the_pools_gets_a_driver() -> None:
    old = "5.14.0-427.40.1.el9_4.x86_64"
    plan = render_stack("dev", observed=[ObservedNode("gpu-node-9", KernelTarget("rhcos4.16", old))])

    by_kernel = drivers(plan)
    assert set(by_kernel) == {old, DEV_T4_KERNEL, DEV_A100_KERNEL}
    assert SKIP_AWAIT not in annotations(driver_validations(plan)[old])
    assert f"rhcos4.16/{old}" in plan.outputs["kernels"]
