"""GpuNodePool on both backends: OpenShift MachineSets (dev) and AWS launch template + Auto Scaling Group (prod)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from tests.conftest import Plan

MACHINE_SET = "kubernetes:machine.openshift.io/v1beta1:MachineSet"
MACHINE_AUTOSCALER = "kubernetes:autoscaling.openshift.io/v1beta1:MachineAutoscaler"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AUTO_SCALING_GROUP = "aws:autoscaling/group:Group"
LIFECYCLE_HOOK = "aws:autoscaling/lifecycleHook:LifecycleHook"
CLUSTER_AUTOSCALER = "kubernetes:autoscaling.openshift.io/v1:ClusterAutoscaler"
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}

T4_MACHINE_SET = "dev-ocp-7xk2p-gpu-t4-inference-us-east-1a"
A100_MACHINE_SET = "dev-ocp-7xk2p-gpu-a100-training-us-east-1b"


# -- OpenShift: MachineSet + MachineAutoscaler --------------------------------------------------------------------


def machine_set(plan: Plan, name: str) -> dict[str, Any]:
    return plan.manifest("MachineSet", name)


def test_one_machine_set_and_autoscaler_per_pool(dev_plan: Plan) -> None:
    assert sorted(ms["inputs"]["metadata"]["name"] for ms in dev_plan.of_type(MACHINE_SET)) == [
        A100_MACHINE_SET, T4_MACHINE_SET]
    assert sorted(a["inputs"]["metadata"]["name"] for a in dev_plan.of_type(MACHINE_AUTOSCALER)) == [
        A100_MACHINE_SET, T4_MACHINE_SET]
    assert dev_plan.of_type(LAUNCH_TEMPLATE) == [] and dev_plan.of_type(AUTO_SCALING_GROUP) == []


def test_a_parked_pool_keeps_its_machine_set_at_zero_without_an_autoscaler() -> None:
    # A MachineAutoscaler's maxReplicas must be at least 1: one for a parked pool would fail `pulumi up`.
    from tests.conftest import render_stack, stack_config

    config = stack_config("dev")
    t4 = next(pool for pool in config["gpu-platform:nodePools"] if pool["name"] == "t4-inference")
    t4.update(replicas=0, minReplicas=0)
    t4.pop("maxReplicas", None)
    plan = render_stack("dev", config)

    assert plan.manifest("MachineSet", T4_MACHINE_SET)["spec"]["replicas"] == 0
    assert [a["inputs"]["metadata"]["name"] for a in plan.of_type(MACHINE_AUTOSCALER)] == [A100_MACHINE_SET]


@pytest.mark.parametrize("name", [T4_MACHINE_SET, A100_MACHINE_SET])
def test_machine_set_nodes_are_tainted_from_first_boot(dev_plan: Plan, name: str) -> None:
    spec = machine_set(dev_plan, name)["spec"]["template"]["spec"]

    assert spec["taints"] == [GPU_TAINT]


def test_machine_set_is_in_the_machine_api_namespace_and_selects_its_machines(dev_plan: Plan) -> None:
    manifest = machine_set(dev_plan, T4_MACHINE_SET)

    assert manifest["apiVersion"] == "machine.openshift.io/v1beta1"
    assert manifest["metadata"]["namespace"] == "openshift-machine-api"
    selector = manifest["spec"]["selector"]["matchLabels"]
    assert selector == {"machine.openshift.io/cluster-api-cluster": "dev-ocp-7xk2p",
                        "machine.openshift.io/cluster-api-machineset": T4_MACHINE_SET}
    machine_labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= machine_labels.items()
    assert manifest["spec"]["replicas"] == 2


def test_machine_set_provider_spec(dev_plan: Plan) -> None:
    t4 = machine_set(dev_plan, T4_MACHINE_SET)["spec"]["template"]["spec"]["providerSpec"]["value"]
    a100 = machine_set(dev_plan, A100_MACHINE_SET)["spec"]["template"]["spec"]["providerSpec"]["value"]

    assert t4["kind"] == "AWSMachineProviderConfig"
    assert (t4["instanceType"], t4["ami"]["id"]) == ("g4dn.xlarge", "ami-0a6c2d1e5f3b7c9d1")
    assert (a100["instanceType"], a100["ami"]["id"]) == ("p4d.24xlarge", "ami-0b7d3e2f6a4c8e0f2")
    assert t4["blockDevices"][0]["ebs"]["volumeSize"] == 200  # the default root volume
    assert a100["blockDevices"][0]["ebs"]["volumeSize"] == 500  # rootVolumeGib
    assert a100["blockDevices"][0]["ebs"]["encrypted"] is True
    assert t4["placement"] == {"region": "us-east-1", "availabilityZone": "us-east-1a"}
    assert a100["placement"]["availabilityZone"] == "us-east-1b"


def test_machine_sets_require_imdsv2(dev_plan: Plan) -> None:
    """IMDSv1 would hand the node role's credentials to any pod that can reach the metadata service."""
    for name in (T4_MACHINE_SET, A100_MACHINE_SET):
        spec = machine_set(dev_plan, name)["spec"]["template"]["spec"]["providerSpec"]["value"]
        assert spec["metadataServiceOptions"] == {"authentication": "Required"}


def test_machine_set_labels_its_nodes_with_pool_and_gpu_model(dev_plan: Plan) -> None:
    node_labels = machine_set(dev_plan, A100_MACHINE_SET)["spec"]["template"]["spec"]["metadata"]["labels"]

    assert node_labels["gpu-platform.io/pool"] == "a100-training"
    assert node_labels["cluster-api/accelerator"] == "NVIDIA-A100-SXM4-40GB"


@pytest.mark.parametrize(("name", "pool", "cpu", "memory", "gpus"), [
    (T4_MACHINE_SET, "t4-inference", "4", "16384", "1"),
    (A100_MACHINE_SET, "a100-training", "96", "1179648", "8"),
])
def test_machine_set_can_scale_from_zero(dev_plan: Plan, name: str, pool: str, cpu: str, memory: str,
                                         gpus: str) -> None:
    """The autoscaler sizes a node it has never seen from these annotations."""
    annotations = machine_set(dev_plan, name)["metadata"]["annotations"]

    assert annotations["machine.openshift.io/vCPU"] == cpu
    assert annotations["machine.openshift.io/memoryMb"] == memory
    assert annotations["machine.openshift.io/GPU"] == gpus
    labels = annotations["capacity.cluster-autoscaler.kubernetes.io/labels"].split(",")
    assert f"gpu-platform.io/pool={pool}" in labels


@pytest.mark.parametrize("name", [T4_MACHINE_SET, A100_MACHINE_SET])
def test_what_the_machine_set_controller_writes_is_no_drift(dev_plan: Plan, name: str) -> None:
    """machine-api-provider-aws writes the capacity annotations from the instance type and merges kubernetes.io/arch
    into the capacity labels: the labels already hold it, and the annotations are the controller's after creation."""
    resource = dev_plan.object("MachineSet", name)
    labels = resource["inputs"]["metadata"]["annotations"]["capacity.cluster-autoscaler.kubernetes.io/labels"]
    assert "kubernetes.io/arch=amd64" in labels.split(",")
    assert {f'metadata.annotations["machine.openshift.io/{key}"]' for key in ("vCPU", "memoryMb", "GPU")} <= set(
        resource["options"]["ignoreChanges"])


@pytest.mark.parametrize(("name", "minimum", "maximum"), [(T4_MACHINE_SET, 0, 4), (A100_MACHINE_SET, 0, 2)])
def test_machine_autoscaler_targets_its_machine_set(dev_plan: Plan, name: str, minimum: int, maximum: int) -> None:
    autoscaler = dev_plan.manifest("MachineAutoscaler", name)

    assert autoscaler["apiVersion"] == "autoscaling.openshift.io/v1beta1"
    assert autoscaler["metadata"]["namespace"] == "openshift-machine-api"
    assert autoscaler["spec"]["scaleTargetRef"] == {
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet", "name": name}
    assert (autoscaler["spec"]["minReplicas"], autoscaler["spec"]["maxReplicas"]) == (minimum, maximum)


def test_machine_set_names_fit_a_label_value(dev_plan: Plan) -> None:
    for resource in dev_plan.of_type(MACHINE_SET):
        assert len(resource["inputs"]["metadata"]["name"]) <= 63


# -- Kubernetes on AWS: launch template + Auto Scaling Group ------------------------------------------------------


def aws_resource(plan: Plan, type_: str, pool: str) -> dict[str, Any]:
    [resource] = [r["inputs"] for r in plan.of_type(type_) if r["inputs"]["name"] == f"prod-gpu-gpu-{pool}"]
    return resource


def user_data(plan: Plan, pool: str) -> str:
    return base64.b64decode(aws_resource(plan, LAUNCH_TEMPLATE, pool)["userData"]).decode()


def asg_tags(plan: Plan, pool: str) -> dict[str, str]:
    return {tag["key"]: tag["value"] for tag in aws_resource(plan, AUTO_SCALING_GROUP, pool)["tags"]}


def test_one_launch_template_and_group_per_pool(prod_plan: Plan) -> None:
    for type_ in (LAUNCH_TEMPLATE, AUTO_SCALING_GROUP):
        assert sorted(r["inputs"]["name"] for r in prod_plan.of_type(type_)) == [
            "prod-gpu-gpu-a10g-batch", "prod-gpu-gpu-h100-training", "prod-gpu-gpu-l4-inference"]
    assert prod_plan.of_type(MACHINE_SET) == []


def test_launch_template_boots_the_pools_image_and_instance_type(prod_plan: Plan) -> None:
    template = aws_resource(prod_plan, LAUNCH_TEMPLATE, "h100-training")

    assert template["imageId"] == "ami-0f2a3b4c5d6e7f809"
    assert template["instanceType"] == "p5.48xlarge"
    assert template["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 1000
    assert template["iamInstanceProfile"] == {"name": "prod-gpu-node"}
    # an EFA pool (fabric: efa) puts the security groups on its network interfaces
    assert {tuple(i["securityGroups"]) for i in template["networkInterfaces"]} == {("sg-0d4e5f60718293a4b",)}
    assert aws_resource(prod_plan, LAUNCH_TEMPLATE, "a10g-batch")["vpcSecurityGroupIds"] == ["sg-0d4e5f60718293a4b"]



@pytest.mark.parametrize("pool", ["l4-inference", "a10g-batch", "h100-training"])
def test_launch_templates_keep_pods_from_the_metadata_service(prod_plan: Plan, pool: str) -> None:
    """IMDSv2 only, with a token that answers one hop: a pod in its own network namespace is a second hop."""
    options = aws_resource(prod_plan, LAUNCH_TEMPLATE, pool)["metadataOptions"]
    assert options == {"httpTokens": "required", "httpPutResponseHopLimit": 1}


@pytest.mark.parametrize(("pool", "model"), [("l4-inference", "NVIDIA-L4"), ("h100-training", "NVIDIA-H100-80GB-HBM3")])
def test_kubelet_registers_the_taint_and_labels_at_boot(prod_plan: Plan, pool: str, model: str) -> None:
    script = user_data(prod_plan, pool)

    assert script.startswith("#!/bin/bash")
    assert "--register-with-taints=nvidia.com/gpu:NoSchedule" in script
    node_labels = script.split("--node-labels=", 1)[1].split("'", 1)[0].split(",")
    assert f"gpu-platform.io/pool={pool}" in node_labels
    assert f"cluster-api/accelerator={model}" in node_labels
    assert "prod-gpu" in script  # joins this cluster


@pytest.mark.parametrize(("pool", "desired", "minimum", "maximum"), [
    ("l4-inference", 8, 4, 16), ("a10g-batch", 4, 0, 8), ("h100-training", 2, 0, 4),
])
def test_group_size_follows_the_pool(prod_plan: Plan, pool: str, desired: int, minimum: int, maximum: int) -> None:
    group = aws_resource(prod_plan, AUTO_SCALING_GROUP, pool)

    assert (group["desiredCapacity"], group["minSize"], group["maxSize"]) == (desired, minimum, maximum)
    # an EFA pool launches in its one subnet (its cluster placement group lives in one zone)
    assert group["vpcZoneIdentifiers"] == (["subnet-0a1b2c3d4e5f60718"] if pool == "h100-training" else [
        "subnet-0a1b2c3d4e5f60718", "subnet-0b2c3d4e5f6071829", "subnet-0c3d4e5f607182930"])


def test_group_launches_its_own_template(prod_plan: Plan) -> None:
    templates = {r["inputs"]["name"]: r["name"] for r in prod_plan.of_type(LAUNCH_TEMPLATE)}
    for group in prod_plan.of_type(AUTO_SCALING_GROUP):
        # Offline, the template id is its logical name (the mock assigns ids from names).
        assert group["inputs"]["launchTemplate"]["id"] == templates[group["inputs"]["name"]]


def test_group_is_discoverable_by_the_cluster_autoscaler(prod_plan: Plan) -> None:
    tags = asg_tags(prod_plan, "a10g-batch")

    assert tags["k8s.io/cluster-autoscaler/enabled"] == "true"
    assert tags["k8s.io/cluster-autoscaler/prod-gpu"] == "owned"


@pytest.mark.parametrize(("pool", "gpus", "model"), [
    ("l4-inference", "1", "NVIDIA-L4"), ("a10g-batch", "4", "NVIDIA-A10G"), ("h100-training", "8", "NVIDIA-H100-80GB-HBM3"),
])
def test_group_describes_its_nodes_for_scale_from_zero(prod_plan: Plan, pool: str, gpus: str, model: str) -> None:
    tags = asg_tags(prod_plan, pool)
    template = "k8s.io/cluster-autoscaler/node-template"

    assert tags[f"{template}/label/gpu-platform.io/pool"] == pool
    assert tags[f"{template}/label/cluster-api/accelerator"] == model
    assert tags[f"{template}/label/feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert tags[f"{template}/taint/nvidia.com/gpu"] == ":NoSchedule"
    assert tags[f"{template}/resources/nvidia.com/gpu"] == gpus


def test_group_replaces_instances_gradually(prod_plan: Plan) -> None:
    refresh = aws_resource(prod_plan, AUTO_SCALING_GROUP, "l4-inference")["instanceRefresh"]

    assert refresh["strategy"] == "Rolling"
    # The defaults: 90% stays in service, pauses of 10 minutes at a quarter and a half, unchanged nodes stay.
    assert refresh["preferences"] == {
        "minHealthyPercentage": 90, "maxHealthyPercentage": 100, "checkpointPercentages": [25, 50, 100],
        "checkpointDelay": "600", "instanceWarmup": "300", "skipMatching": True, "autoRollback": False}


@pytest.mark.parametrize("pool", ["l4-inference", "a10g-batch", "h100-training"])
def test_each_group_drains_a_node_before_terminating_it(prod_plan: Plan, pool: str) -> None:
    [hook] = [r for r in prod_plan.of_type(LIFECYCLE_HOOK) if r["name"] == f"pool-{pool}-drain-hook"]

    assert hook["inputs"] == {"name": f"prod-gpu-gpu-{pool}-drain", "autoscalingGroupName": f"prod-gpu-gpu-{pool}",
                              "lifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
                              "defaultResult": "CONTINUE", "heartbeatTimeout": 1800}
    assert prod_plan.depends_on(hook, f"pool-{pool}-asg")
    # The group is not created before the handler that drains its nodes runs.
    group = prod_plan.named(f"pool-{pool}-asg")
    assert prod_plan.depends_on(group, "node-drain-handler")
    # Deleting the group waits for its instances, each held by the hook up to its heartbeat (30 min) first.
    assert group["options"]["customTimeouts"] == {"delete": "40m"}


def test_the_autoscaler_owns_the_node_count_between_updates(prod_plan: Plan, dev_plan: Plan) -> None:
    for group in prod_plan.of_type(AUTO_SCALING_GROUP):
        assert group["options"]["ignoreChanges"] == ["desiredCapacity"]
    for machine_set in dev_plan.of_type(MACHINE_SET):
        assert "spec.replicas" in machine_set["options"]["ignoreChanges"]


def test_a_fixed_size_pool_keeps_its_count_under_pulumi(render) -> None:
    from tests.conftest import stack_config

    config = stack_config("dev")
    config["gpu-platform:nodePools"][1].update(replicas=1, minReplicas=1, maxReplicas=1)
    plan = render("dev", config)
    assert "spec.replicas" not in plan.object("MachineSet", A100_MACHINE_SET)["options"]["ignoreChanges"]
    assert "spec.replicas" in plan.object("MachineSet", T4_MACHINE_SET)["options"]["ignoreChanges"]


@pytest.mark.parametrize(("pool", "accelerator"), [
    ("l4-inference", "nvidia-l4"), ("a10g-batch", "nvidia-a10g"), ("h100-training", "nvidia-h100")])
def test_nodes_carry_the_aws_autoscalers_gpu_label(prod_plan: Plan, pool: str, accelerator: str) -> None:
    """Set by the kubelet at boot and declared for scale from zero, so the autoscaler knows a GPU node early."""
    tags = asg_tags(prod_plan, pool)
    assert tags["k8s.io/cluster-autoscaler/node-template/label/k8s.amazonaws.com/accelerator"] == accelerator
    node_labels = user_data(prod_plan, pool).split("--node-labels=", 1)[1].split("'", 1)[0].split(",")
    assert f"k8s.amazonaws.com/accelerator={accelerator}" in node_labels


def test_pools_are_protected_until_retired(prod_plan: Plan, dev_plan: Plan, render) -> None:
    from tests.conftest import stack_config

    for plan, types in ((prod_plan, (LAUNCH_TEMPLATE, AUTO_SCALING_GROUP, LIFECYCLE_HOOK)),
                        (dev_plan, (MACHINE_SET, MACHINE_AUTOSCALER))):
        for type_ in types:
            assert plan.of_type(type_) and all(r["options"]["protect"] for r in plan.of_type(type_)), type_
    config = stack_config("dev")
    config["gpu-platform:nodePools"][0]["retired"] = True
    plan = render("dev", config)
    assert not plan.object("MachineSet", T4_MACHINE_SET)["options"]["protect"]
    assert not plan.object("MachineAutoscaler", T4_MACHINE_SET)["options"]["protect"]
    assert plan.object("MachineSet", A100_MACHINE_SET)["options"]["protect"]


# -- OpenShift: the one ClusterAutoscaler ---------------------------------------------------------------------------


def test_autoscaling_pools_get_the_clusters_autoscaler(dev_plan: Plan) -> None:
    autoscaler = dev_plan.manifest("ClusterAutoscaler", "default")

    assert autoscaler["apiVersion"] == "autoscaling.openshift.io/v1"
    assert "namespace" not in autoscaler["metadata"]  # cluster-scoped
    # GPU caps per type, matched on the nodes' cluster-api/accelerator label: the maxima of the pools of whole GPUs
    # (the shared T4s advertise no nvidia.com/gpu, carry no GPU label, and are bounded by their MachineAutoscaler).
    assert autoscaler["spec"]["resourceLimits"]["gpus"] == [{"type": "NVIDIA-A100-SXM4-40GB", "min": 0, "max": 16}]
    assert autoscaler["spec"]["scaleDown"]["enabled"] is True
    assert dev_plan.of_type(CLUSTER_AUTOSCALER)[0]["options"]["protect"] is False


def test_the_autoscaler_may_scale_every_pool_to_its_maximum(dev_plan: Plan) -> None:
    """The autoscaler's view, from the rendered objects: a node with the GPU label counts its nvidia.com/gpu (the
    MachineSet's GPUs, on a pool whose device plugin config does not rename them as shares), and a scale-up is
    refused once the GPUs of a type would pass the ClusterAutoscaler's limit. Every pool at its maximum fits, and a
    pool of shares has no GPU label (the autoscaler would take its nodes for ones whose driver never came up)."""
    [config_map] = [c for c in dev_plan.kind("ConfigMap") if c["metadata"]["name"].startswith("device-plugin-config-")]
    configs = {key: yaml.safe_load(text) for key, text in config_map["data"].items()}

    def sharing(config: dict) -> int:
        resources = config.get("sharing", {}).get("timeSlicing", {}).get("resources", [])
        return next((r["replicas"] for r in resources if r["name"] == "nvidia.com/gpu"), 1)

    limits = {limit["type"]: limit["max"] for limit in
              dev_plan.manifest("ClusterAutoscaler", "default")["spec"]["resourceLimits"]["gpus"]}
    maxima = {a["spec"]["scaleTargetRef"]["name"]: a["spec"]["maxReplicas"] for a in dev_plan.kind("MachineAutoscaler")}
    at_maximum: dict[str, int] = {}
    for machine_set in dev_plan.kind("MachineSet"):
        node_labels = machine_set["spec"]["template"]["spec"]["metadata"]["labels"]
        if sharing(configs[node_labels["nvidia.com/device-plugin.config"]]) > 1:
            assert "cluster-api/accelerator" not in node_labels
            continue
        allocatable = int(machine_set["metadata"]["annotations"]["machine.openshift.io/GPU"])
        gpu_type = node_labels["cluster-api/accelerator"]
        at_maximum[gpu_type] = at_maximum.get(gpu_type, 0) + maxima[machine_set["metadata"]["name"]] * allocatable
    assert at_maximum == {"NVIDIA-A100-SXM4-40GB": 16}
    assert all(at_maximum[gpu_type] <= limit for gpu_type, limit in limits.items())


def test_no_cluster_autoscaler_when_no_pool_autoscales(render) -> None:
    from tests.conftest import stack_config

    config = stack_config("dev")
    for entry in config["gpu-platform:nodePools"]:
        entry.update(minReplicas=entry["replicas"], maxReplicas=entry["replicas"])
    assert render("dev", config).of_type(CLUSTER_AUTOSCALER) == []


# -- kernels and the drivers pools wait for -------------------------------------------------------------------------


def test_machine_set_carries_no_kernel_annotation(dev_plan: Plan) -> None:
    """OpenShift nodes run the release's kernel, whatever the boot image: the pool does not name one."""
    for resource in dev_plan.of_type(MACHINE_SET):
        manifest = resource["inputs"]
        annotations = manifest["metadata"].get("annotations", {})
        assert "gpu-platform.io/kernel" not in annotations and "gpu-platform.io/os" not in annotations
        template = manifest["spec"]["template"]
        assert "gpu-platform.io/kernel" not in template["spec"]["metadata"].get("annotations", {})


@pytest.mark.parametrize(("pool", "kernel"), [("l4-inference", "6.8.0-1021-aws"), ("a10g-batch", "6.8.0-1021-aws"),
                                              ("h100-training", "6.8.0-1019-aws")])
def test_group_and_template_name_the_kernel_they_boot(prod_plan: Plan, pool: str, kernel: str) -> None:
    tags = asg_tags(prod_plan, pool)
    assert (tags["gpu-platform.io/kernel"], tags["gpu-platform.io/os"]) == (kernel, "ubuntu22.04")
    template = aws_resource(prod_plan, LAUNCH_TEMPLATE, pool)
    assert template["tags"]["gpu-platform.io/kernel"] == kernel
    [instance_tags] = [spec["tags"] for spec in template["tagSpecifications"] if spec["resourceType"] == "instance"]
    assert instance_tags["gpu-platform.io/kernel"] == kernel


@pytest.mark.parametrize(("pool", "driver"), [
    ("l4-inference", "driver-ubuntu22-04-6-8-0-1021-aws"),
    ("a10g-batch", "driver-ubuntu22-04-6-8-0-1021-aws"),
    ("h100-training", "driver-ubuntu22-04-6-8-0-1019-aws"),
])
def test_pool_waits_for_the_driver_of_its_kernel(prod_plan: Plan, pool: str, driver: str) -> None:
    """Nodes never join before the NVIDIADriver for their kernel exists, and only that one."""
    for resource in (prod_plan.named(f"pool-{pool}-launch-template"), prod_plan.named(f"pool-{pool}-asg")):
        assert prod_plan.depends_on(resource, driver)
        other_drivers = {prod_plan.by_urn[urn]["name"] for urn in resource["dependencies"]
                         if prod_plan.by_urn[urn]["type"].endswith(":NVIDIADriver")}
        assert other_drivers == {driver}


def test_openshift_pools_wait_for_the_release_kernels_driver(dev_plan: Plan) -> None:
    [driver] = dev_plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    for resource in dev_plan.of_type(MACHINE_SET) + dev_plan.of_type(MACHINE_AUTOSCALER):
        assert driver["urn"] in resource["dependencies"]


def test_a_kernel_upgrade_adds_a_driver_before_the_pool_moves(render) -> None:
    from tests.conftest import stack_config

    config = stack_config("prod")
    [h100] = [p for p in config["gpu-platform:nodePools"] if p["name"] == "h100-training"]
    h100["kernel"] = "6.8.0-1024-aws"
    plan = render("prod", config)
    assert plan.depends_on(plan.named("pool-h100-training-asg"), "driver-ubuntu22-04-6-8-0-1024-aws")
    assert asg_tags(plan, "h100-training")["gpu-platform.io/kernel"] == "6.8.0-1024-aws"
    # Offline, with no base revision and no observed nodes, the old kernel has no pool and no driver.
    assert "ubuntu22.04/6.8.0-1019-aws" not in plan.outputs["kernels"]
