"""Kubernetes on AWS: a pool as a launch template and an Auto Scaling Group, rolled by instance refresh, each node
drained through a termination lifecycle hook."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from components import labels
from components.efa import efa_autoscaler_tags, efa_network_interfaces
from components.node_drain import drain_phrase
from components.node_profile import NodeProfile
from components.placements.base import GpuNodePoolArgs, kernel_annotations

# The cluster autoscaler's GPU label on AWS (cloudprovider/aws/aws_cloud_provider.go `GPULabel`): a node carrying it
# counts as a GPU node before the device plugin advertises its GPUs, so the autoscaler does not scale up twice.
AWS_ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# Its values, in the form of that file's `availableGPUTypes` ("nvidia-tesla-t4", "nvidia-a10g", "nvidia-l4", ...),
# per GPU model of fleet/catalog.py; H100 is not in that list, which only names GPU types in its metrics.
AWS_ACCELERATOR_TYPES = {
    "Tesla-T4": "nvidia-tesla-t4",
    "NVIDIA-A10G": "nvidia-a10g",
    "NVIDIA-L4": "nvidia-l4",
    "NVIDIA-L40S": "nvidia-l40s",
    "NVIDIA-A100-SXM4-40GB": "nvidia-tesla-a100",
    "NVIDIA-A100-SXM4-80GB": "nvidia-tesla-a100",
    "NVIDIA-H100-80GB-HBM3": "nvidia-h100",
    "NVIDIA-H200": "nvidia-h200",
}
TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
# On the group: the image its template boots, so an image change shows on the group that rolls, not only on the
# template (the group's new template version is known only once the template is updated).
IMAGE_TAG = "gpu-platform.io/image"


@dataclass(frozen=True)
class InstanceRefresh:
    """The rate of an Auto Scaling Group's instance refresh, and how long each node's drain may take."""

    min_healthy_percentage: int = 90
    max_healthy_percentage: int = 100
    checkpoints: tuple[int, ...] = (25, 50, 100)
    checkpoint_delay_seconds: int = 600
    instance_warmup_seconds: int = 300
    drain_timeout_seconds: int = 1800
    auto_rollback: bool = False


@dataclass(frozen=True)
class AutoScalingPlacement:
    """Kubernetes on AWS: the cluster the nodes join, where the Auto Scaling Group launches them, and how it rolls.

    `drain_permitted`: the stack grants the drain handler its IAM permission.
    """

    cluster: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    instance_profile: str
    refresh: InstanceRefresh = InstanceRefresh()
    drain_permitted: bool = False

    def declared(self, pool: GpuNodePoolArgs) -> dict[str, Any]:
        return {}

    def node_selector(self, pool: GpuNodePoolArgs) -> dict[str, str]:
        return {labels.POOL_LABEL: pool.name}

    def roll(self, pool: GpuNodePoolArgs) -> dict[str, object]:
        refresh = self.refresh
        return {"method": "instance-refresh", "minHealthyPercentage": refresh.min_healthy_percentage,
                "maxHealthyPercentage": refresh.max_healthy_percentage,
                "checkpoints": list(refresh.checkpoints),
                "checkpointDelaySeconds": refresh.checkpoint_delay_seconds,
                "instanceWarmupSeconds": refresh.instance_warmup_seconds,
                "autoRollback": refresh.auto_rollback,
                "drain": drain_phrase(refresh.drain_timeout_seconds, self.drain_permitted)}

    def provision(self, pool: GpuNodePoolArgs, name: str, node_labels: dict[str, str],
                  opts: pulumi.ResourceOptions) -> None:
        if pool.whole:
            node_labels = {**node_labels, AWS_ACCELERATOR_LABEL: AWS_ACCELERATOR_TYPES[pool.instance.gpu_model]}
        group_name = f"{group_prefix(self.cluster)}{pool.name}"
        template = aws.ec2.LaunchTemplate(
            f"{name}-launch-template",
            name=group_name,
            image_id=pool.image,
            instance_type=pool.instance_type,
            iam_instance_profile={"name": self.instance_profile},
            # With EFA, the security groups go on the network interfaces (EC2 refuses both).
            vpc_security_group_ids=None if pool.efa_interfaces else list(self.security_group_ids),
            network_interfaces=efa_network_interfaces(pool.efa_interfaces, self.security_group_ids) or None,
            block_device_mappings=[{"device_name": "/dev/sda1", "ebs": {
                "volume_size": pool.root_volume_gib, "volume_type": "gp3", "encrypted": "true",
                "delete_on_termination": "true"}}],
            # IMDSv2 only, and its token answers one hop: the node and host-network pods reach the metadata service,
            # pods behind the node's network namespace (a tenant's) cannot take the node role's credentials.
            metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 1},
            user_data=base64.b64encode(kubelet_user_data(self.cluster, node_labels, pool.profile,
                                                         pool.taints).encode()).decode(),
            tags=kernel_annotations(pool),
            tag_specifications=[{"resource_type": "instance", "tags": {"Name": group_name, **kernel_annotations(pool)}}],
            opts=opts,
        )
        autoscaler_tags = {
            labels.CA_ENABLED_TAG: "true",
            labels.CA_CLUSTER_TAG.format(cluster=self.cluster): "owned",
            f"kubernetes.io/cluster/{self.cluster}": "owned",
            # aws_manager.go extractTaintsFromAsg: node-template/taint/<key> = <value>:<effect>.
            **{labels.CA_TAINT_TAG.format(key=taint["key"]): f"{taint.get('value', '')}:{taint['effect']}"
               for taint in pool.taints},
            # aws_manager.go extractAllocatableResourcesFromAsg: node-template/resources/<name> = <quantity>, each kind
            # the pool's nodes advertise.
            **{labels.CA_RESOURCE_TAG.format(resource=resource): str(count)
               for resource, count in pool.advertised_per_node.items()},
            # aws_manager.go extractLabelsFromAsg: node-template/label/<key> = <value>, for scale from zero.
            **kernel_annotations(pool),
            IMAGE_TAG: pool.image,
            labels.CONFIGURED_NODES: str(pool.replicas),
            **{labels.CA_LABEL_TAG.format(key=key): value for key, value in node_labels.items()},
            labels.CA_LABEL_TAG.format(key=labels.NVIDIA_PCI_LABEL): "true",
            **efa_autoscaler_tags(pool.efa_interfaces),
        }
        refresh = self.refresh
        group = aws.autoscaling.Group(
            f"{name}-asg",
            name=group_name,
            min_size=pool.min_replicas,
            max_size=pool.max_replicas,
            desired_capacity=pool.replicas,
            # "0": `pulumi up` does not wait for instances to be healthy; GPU capacity may be unavailable for hours
            # (InsufficientInstanceCapacity), and the nodes' readiness is the autoscaler's and the operator's.
            wait_for_capacity_timeout="0",
            vpc_zone_identifiers=list(self.subnet_ids),
            placement_group=pool.placement_group,
            # A new template version (image, kernel, user data) starts a refresh; tags and sizes do not.
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            instance_refresh={"strategy": "Rolling", "preferences": {
                "min_healthy_percentage": refresh.min_healthy_percentage,
                "max_healthy_percentage": refresh.max_healthy_percentage,
                "checkpoint_percentages": list(refresh.checkpoints),
                "checkpoint_delay": str(refresh.checkpoint_delay_seconds),
                "instance_warmup": str(refresh.instance_warmup_seconds),
                "skip_matching": True,  # nodes already on the new template stay
                "auto_rollback": refresh.auto_rollback,
            }},
            tags=[{"key": key, "value": value, "propagate_at_launch": False}
                  for key, value in sorted(autoscaler_tags.items())],
            # `replicas` is the size the group is created with; the cluster autoscaler owns the count afterwards
            # (AWS keeps it within min..max when the bounds change), so `pulumi up` does not fight it.
            # Deleting a group scales it to zero and waits for its instances to terminate (terraform-provider-aws
            # autoscaling/group.go, resourceGroupDelete, default 10 minutes): each may sit in the drain hook for
            # its heartbeat first, so the delete gets the heartbeat plus 10 minutes.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                ignore_changes=["desiredCapacity"] if pool.autoscales else None,
                custom_timeouts=pulumi.CustomTimeouts(delete=f"{refresh.drain_timeout_seconds // 60 + 10}m"))),
        )
        # A separate resource: the group's `initial_lifecycle_hooks` is force-new, a change would replace the group.
        # A terminating instance (refresh, scale-in, rebalance) waits here until the node termination handler has
        # drained its node and completes the action, at most the heartbeat; then it terminates (CONTINUE).
        # The engine deletes dependents first, so it would delete the hook before the group and the group's
        # scale-to-zero would terminate its nodes undrained: the hook is retained on delete instead, and
        # DeleteAutoScalingGroup removes it with the group once every node has gone through it.
        aws.autoscaling.LifecycleHook(
            f"{name}-drain-hook",
            name=f"{group_name}-drain",
            autoscaling_group_name=group.name,
            lifecycle_transition=TERMINATING,
            heartbeat_timeout=refresh.drain_timeout_seconds,
            default_result="CONTINUE",
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(retain_on_delete=True)),
        )


def group_prefix(cluster: str) -> str:
    """What every pool's Auto Scaling Group name (and so its drain's rule and policy) starts with."""
    return f"{cluster}-gpu-"


def kubelet_user_data(cluster: str, node_labels: dict[str, str], profile: NodeProfile | None = None,
                      taints: list[dict[str, str]] | None = None) -> str:
    """Boot script that makes the kubelet register the GPU taint and pool labels before any pod lands.

    With a node profile, its sysctls and hugepages are set first and its kubelet flags follow the pool's; without
    one, the script is exactly the untuned pool's.
    """
    taint = ",".join(f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}"
                     for t in taints or [labels.GPU_TAINT])
    label_arg = ",".join(f"{key}={value}" for key, value in node_labels.items())
    tuned = f" {' '.join(profile.kubelet_flags())}" if profile else ""
    return (
        "#!/bin/bash\nset -euo pipefail\n"
        f"{profile.boot_script() if profile else ''}"
        f"/etc/eks/bootstrap.sh {cluster} --kubelet-extra-args "
        f"'--register-with-taints={taint} --node-labels={label_arg}{tuned}'\n"
    )
