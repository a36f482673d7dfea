"""GpuNodePool: a tainted pool of GPU machines, as an OpenShift MachineSet or an AWS Auto Scaling Group."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata
from fleet.catalog import InstanceType
from fleet.kernels import KernelTarget

MACHINE_API_NAMESPACE = "openshift-machine-api"


@dataclass(frozen=True)
class MachineSetPlacement:
    """OpenShift: where the MachineSet's machines go (the infrastructure name prefixes the installer's AWS names)."""

    infrastructure_id: str
    machine_set: str
    region: str
    zone: str


@dataclass(frozen=True)
class AutoScalingPlacement:
    """Kubernetes on AWS: the cluster the nodes join and where the Auto Scaling Group launches them."""

    cluster: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    instance_profile: str


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """One pool: its machines, their size bounds and boot image, and where they go.

    `kernel` is what the image boots (Kubernetes); None on OpenShift, where nodes run the release's kernel.
    """

    name: str
    instance_type: str
    instance: InstanceType
    replicas: int
    min_replicas: int
    max_replicas: int
    image: str
    root_volume_gib: int
    placement: MachineSetPlacement | AutoScalingPlacement
    kernel: KernelTarget | None = None


class GpuNodePool(pulumi.ComponentResource):
    """GPU machines booting one image (one kernel), tainted `nvidia.com/gpu:NoSchedule` from their first boot."""

    node_selector: dict[str, str]
    taints: list[dict[str, str]]
    gpu_capacity: int

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:GpuNodePool", name, None, opts)
        self.node_selector = {labels.POOL_LABEL: args.name}
        self.taints = [dict(labels.GPU_TAINT)]
        self.gpu_capacity = args.replicas * args.instance.gpus
        child = child_options(self, opts)
        node_labels = {**self.node_selector, labels.MACHINESET_GPU_TYPE_LABEL: args.instance.gpu_model}
        if isinstance(args.placement, MachineSetPlacement):
            self._machine_set(name, args, args.placement, node_labels, child)
        else:
            self._auto_scaling_group(name, args, args.placement, node_labels, child)
        self.register_outputs({"nodeSelector": self.node_selector, "taints": self.taints,
                               "gpuCapacity": self.gpu_capacity})

    def _machine_set(self, name: str, pool: GpuNodePoolArgs, placement: MachineSetPlacement,
                     node_labels: dict[str, str], opts: pulumi.ResourceOptions) -> None:
        infra, zone, machine_set = placement.infrastructure_id, placement.zone, placement.machine_set
        selector = {"machine.openshift.io/cluster-api-cluster": infra,
                    "machine.openshift.io/cluster-api-machineset": machine_set}
        instance = pool.instance
        annotations = {
            labels.MACHINESET_CAPACITY_ANNOTATIONS["cpu"]: str(instance.vcpus),
            labels.MACHINESET_CAPACITY_ANNOTATIONS["memory"]: str(instance.memory_mib),
            labels.MACHINESET_CAPACITY_ANNOTATIONS["gpu"]: str(instance.gpus),
            "capacity.cluster-autoscaler.kubernetes.io/labels": ",".join(f"{k}={v}" for k, v in node_labels.items()),
        }
        k8s.apiextensions.CustomResource(
            name,
            api_version="machine.openshift.io/v1beta1",
            kind="MachineSet",
            metadata={**metadata(machine_set, MACHINE_API_NAMESPACE, extra_labels=selector, annotations=annotations)},
            spec={
                "replicas": pool.replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**selector, "machine.openshift.io/cluster-api-machine-role": "worker",
                                            "machine.openshift.io/cluster-api-machine-type": "worker"}},
                    "spec": {
                        "metadata": {"labels": {**node_labels, "node-role.kubernetes.io/gpu": ""}},
                        "taints": self.taints,
                        "providerSpec": {"value": {
                            "apiVersion": "machine.openshift.io/v1beta1",
                            "kind": "AWSMachineProviderConfig",
                            "ami": {"id": pool.image},
                            "instanceType": pool.instance_type,
                            "blockDevices": [{"ebs": {"volumeSize": pool.root_volume_gib, "volumeType": "gp3",
                                                      "encrypted": True}}],
                            "credentialsSecret": {"name": "aws-cloud-credentials"},
                            "iamInstanceProfile": {"id": f"{infra}-worker-profile"},
                            "placement": {"availabilityZone": zone, "region": placement.region},
                            "securityGroups": [{"filters": [{"name": "tag:Name", "values": [f"{infra}-node"]}]}],
                            "subnet": {"filters": [{"name": "tag:Name",
                                                    "values": [f"{infra}-subnet-private-{zone}"]}]},
                            "tags": [{"name": f"kubernetes.io/cluster/{infra}", "value": "owned"}],
                            "userDataSecret": {"name": "worker-user-data"},
                        }},
                    },
                },
            },
            opts=opts,
        )
        k8s.apiextensions.CustomResource(
            f"{name}-autoscaler",
            api_version="autoscaling.openshift.io/v1beta1",
            kind="MachineAutoscaler",
            metadata=metadata(machine_set, MACHINE_API_NAMESPACE),
            spec={
                "minReplicas": pool.min_replicas,
                "maxReplicas": pool.max_replicas,
                "scaleTargetRef": {"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                                   "name": machine_set},
            },
            opts=opts,
        )

    def _auto_scaling_group(self, name: str, pool: GpuNodePoolArgs, cluster: AutoScalingPlacement,
                            node_labels: dict[str, str], opts: pulumi.ResourceOptions) -> None:
        group_name = f"{cluster.cluster}-gpu-{pool.name}"
        template = aws.ec2.LaunchTemplate(
            f"{name}-launch-template",
            name=group_name,
            image_id=pool.image,
            instance_type=pool.instance_type,
            iam_instance_profile={"name": cluster.instance_profile},
            vpc_security_group_ids=list(cluster.security_group_ids),
            block_device_mappings=[{"device_name": "/dev/sda1", "ebs": {
                "volume_size": pool.root_volume_gib, "volume_type": "gp3", "encrypted": "true",
                "delete_on_termination": "true"}}],
            metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 2},
            user_data=base64.b64encode(kubelet_user_data(cluster.cluster, node_labels).encode()).decode(),
            tags=kernel_annotations(pool),
            tag_specifications=[{"resource_type": "instance", "tags": {"Name": group_name, **kernel_annotations(pool)}}],
            opts=opts,
        )
        instance = pool.instance
        autoscaler_tags = {
            labels.CA_ENABLED_TAG: "true",
            labels.CA_CLUSTER_TAG.format(cluster=cluster.cluster): "owned",
            f"kubernetes.io/cluster/{cluster.cluster}": "owned",
            labels.CA_TAINT_TAG.format(key=labels.GPU_TAINT["key"]): f":{labels.GPU_TAINT['effect']}",
            labels.CA_RESOURCE_TAG.format(resource=labels.GPU_RESOURCE): str(instance.gpus),
            **kernel_annotations(pool),
            **{labels.CA_LABEL_TAG.format(key=key): value for key, value in node_labels.items()},
            labels.CA_LABEL_TAG.format(key=labels.NVIDIA_PCI_LABEL): "true",
        }
        aws.autoscaling.Group(
            f"{name}-asg",
            name=group_name,
            min_size=pool.min_replicas,
            max_size=pool.max_replicas,
            desired_capacity=pool.replicas,
            vpc_zone_identifiers=list(cluster.subnet_ids),
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            instance_refresh={"strategy": "Rolling", "preferences": {"min_healthy_percentage": 90}},
            tags=[{"key": key, "value": value, "propagate_at_launch": False}
                  for key, value in sorted(autoscaler_tags.items())],
            opts=opts,
        )


def kernel_annotations(pool: GpuNodePoolArgs) -> dict[str, str]:
    """The OS and kernel the pool's image boots: a kernel upgrade is a visible change of the pool itself."""
    return {labels.KERNEL_ANNOTATION: pool.kernel.kernel, labels.OS_ANNOTATION: pool.kernel.os}


def kubelet_user_data(cluster: str, node_labels: dict[str, str]) -> str:
    """Boot script that makes the kubelet register the GPU taint and pool labels before any pod lands."""
    taint = f"{labels.GPU_TAINT['key']}:{labels.GPU_TAINT['effect']}"
    label_arg = ",".join(f"{key}={value}" for key, value in node_labels.items())
    return (
        "#!/bin/bash\nset -euo pipefail\n"
        f"/etc/eks/bootstrap.sh {cluster} --kubelet-extra-args "
        f"'--register-with-taints={taint} --node-labels={label_arg}'\n"
    )
