"""GpuNodePool: a tainted pool of GPU machines, as an OpenShift MachineSet or an AWS Auto Scaling Group."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components import labels
from components.efa import efa_autoscaler_tags, efa_network_interfaces
from components.machine_labels import machine_labels
from components.manifests import child_options, metadata
from components.node_profile import NodeProfile
from components.node_drain import drain_phrase
from fleet.catalog import InstanceType
from fleet.kernels import KernelTarget
from fleet.partitioning import Partitioning

MACHINE_API_NAMESPACE = "openshift-machine-api"
CAPACITY_LABELS = "capacity.cluster-autoscaler.kubernetes.io/labels"
# The MachineSet controller (machine-api-provider-aws) writes a MachineSet's vCPU, memory and GPU annotations from
# its instance type: the program sets them too (scale from zero before the controller runs, and the capacity
# policy reads them), and leaves them to the controller afterwards.
CONTROLLER_ANNOTATIONS = [f'metadata.annotations["{key}"]' for key in labels.MACHINESET_CAPACITY_ANNOTATIONS.values()]
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
BRING_YOUR_OWN = "bringYourOwn"
BRING_YOUR_OWN_ROLL = ("nodes are provisioned outside this stack: it declares their kernel's driver before they need "
                       "it, and you roll them")
MACHINESET_ROLL = ("template changes reach new machines only; kernels roll with the cluster release through the "
                   "Machine Config Operator")


@dataclass(frozen=True)
class MachineSetPlacement:
    """OpenShift: where the MachineSet's machines go (the infrastructure name prefixes the installer's AWS names)."""

    infrastructure_id: str
    machine_set: str
    region: str
    zone: str
    cli_image: str = ""  # `oc`, for the Job that brings a partitioning change to the running machines


@dataclass(frozen=True)
class AutoScalingPlacement:
    """Kubernetes on AWS: the cluster the nodes join and where the Auto Scaling Group launches them."""

    cluster: str
    subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    instance_profile: str


@dataclass(frozen=True)
class BringYourOwnPlacement:
    """Nodes that join the cluster by other means, selected by their labels: the stack provisions none of them."""

    node_selector: dict[str, str]


@dataclass(frozen=True)
class InstanceRefresh:
    """Kubernetes: the rate of an Auto Scaling Group's instance refresh, and how long each node's drain may take."""

    min_healthy_percentage: int = 90
    max_healthy_percentage: int = 100
    checkpoints: tuple[int, ...] = (25, 50, 100)
    checkpoint_delay_seconds: int = 600
    instance_warmup_seconds: int = 300
    drain_timeout_seconds: int = 1800
    auto_rollback: bool = False


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """One pool: its machines, their size bounds and boot image, and where they go.

    `kernel` is what the image boots (Kubernetes); None on OpenShift, where nodes run the release's kernel.
    """

    name: str
    instance_type: str | None  # None: a bring-your-own pool
    instance: InstanceType
    replicas: int
    min_replicas: int
    max_replicas: int
    image: str | None  # None: a bring-your-own pool
    root_volume_gib: int
    placement: MachineSetPlacement | AutoScalingPlacement | BringYourOwnPlacement
    kernel: KernelTarget | None = None
    refresh: InstanceRefresh = InstanceRefresh()
    retired: bool = False  # unprotected: a later change may remove the pool
    profile: NodeProfile | None = None  # node tuning (OpenShift: the pool's node role; AWS: its boot configuration)
    efa_interfaces: int = 0  # EFA interfaces per node (fabric: efa), in the pool's cluster placement group
    placement_group: pulumi.Input[str] | None = None
    partitioning: Partitioning = Partitioning()  # whole GPUs, time-sliced shares or a MIG layout
    dedicated: bool = False  # reserved for some tenants: a second taint only their pods may tolerate
    drain_permitted: bool = False  # Kubernetes: the stack grants the drain handler its IAM permission

    @property
    def advertised_per_node(self) -> dict[str, int]:
        """What one node advertises, by extended resource (whole GPUs, shares or MIG slices)."""
        return self.partitioning.advertised(self.instance.gpu_model, self.instance.gpus)

    @property
    def taints(self) -> list[dict[str, str]]:
        """The GPU taint, and a dedicated pool's own (labels.dedicated_taint)."""
        return [dict(labels.GPU_TAINT), *([labels.dedicated_taint(self.name)] if self.dedicated else [])]

    @property
    def partition_labels(self) -> dict[str, str]:
        """Node labels of the pool's partitioning: a MIG layout, which NVIDIA's MIG manager applies."""
        layout = self.partitioning.mig_layout
        return {labels.MIG_CONFIG_LABEL: layout} if layout else {}

    @property
    def autoscales(self) -> bool:
        """The autoscaler moves the node count between the bounds: it, not `pulumi up`, owns the count."""
        return self.min_replicas < self.max_replicas


class GpuNodePool(pulumi.ComponentResource):
    """GPU machines booting one image (one kernel), tainted `nvidia.com/gpu:NoSchedule` from their first boot."""

    node_selector: dict[str, str]
    taints: list[dict[str, str]]
    gpu_capacity: int
    roll: dict[str, object]  # how the pool's nodes are replaced, for the preview

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        own = isinstance(args.placement, BringYourOwnPlacement)
        # A bring-your-own pool has no resource saying what it brings: the component itself carries it, as input
        # and output, so the capacity policy counts it whichever of the two a runtime shows it.
        brought = {BRING_YOUR_OWN: {"nodes": args.replicas, "gpusPerNode": args.instance.gpus,
                                    "advertisedPerNode": args.advertised_per_node,
                                    "nodeSelector": dict(args.placement.node_selector),
                                    "taints": args.taints}} if own else {}
        super().__init__("gpu-platform:index:GpuNodePool", name, brought or None, opts)
        self.node_selector = dict(args.placement.node_selector) if own else {labels.POOL_LABEL: args.name}
        self.taints = args.taints
        self.gpu_capacity = args.replicas * args.instance.gpus
        if own:
            self.roll = {"method": "bring-your-own", "note": BRING_YOUR_OWN_ROLL}
            self.register_outputs({"nodeSelector": self.node_selector, "taints": self.taints,
                                   "gpuCapacity": self.gpu_capacity, **brought})
            return
        # The engine refuses to delete (or replace) a protected resource: removing a pool takes `retired` first.
        child = pulumi.ResourceOptions.merge(child_options(self, opts), pulumi.ResourceOptions(
            protect=not args.retired))
        # The device plugin config of the pool's nodes is named after the pool (DevicePluginStack).
        node_labels = {**self.node_selector, labels.DEVICE_PLUGIN_CONFIG_LABEL: args.name, **args.partition_labels}
        # The cluster autoscaler takes a node with its GPU label but no allocatable nvidia.com/gpu for one whose driver
        # is still installing, and keeps it unready (cluster-autoscaler processors/customresources/gpu_processor.go,
        # FilterOutNodesWithUnreadyResources): only pools of whole GPUs carry it; shares and MIG slices are not
        # nvidia.com/gpu, and their pools are bounded by their maximum node count instead.
        whole = labels.GPU_RESOURCE in args.advertised_per_node
        if whole:
            node_labels[labels.MACHINESET_GPU_TYPE_LABEL] = args.instance.gpu_model
        if isinstance(args.placement, MachineSetPlacement):
            self.roll = {"method": "machineset", "note": MACHINESET_ROLL}
            self._machine_set(name, args, args.placement, node_labels, child)
        else:
            refresh = args.refresh
            self.roll = {"method": "instance-refresh", "minHealthyPercentage": refresh.min_healthy_percentage,
                         "maxHealthyPercentage": refresh.max_healthy_percentage,
                         "checkpoints": list(refresh.checkpoints),
                         "checkpointDelaySeconds": refresh.checkpoint_delay_seconds,
                         "instanceWarmupSeconds": refresh.instance_warmup_seconds,
                         "autoRollback": refresh.auto_rollback,
                         "drain": drain_phrase(refresh.drain_timeout_seconds, args.drain_permitted)}
            if whole:
                node_labels[AWS_ACCELERATOR_LABEL] = AWS_ACCELERATOR_TYPES[args.instance.gpu_model]
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
            # The MachineSet controller (machine-api-provider-aws) merges kubernetes.io/arch into this list; holding it
            # already (every catalog type is x86_64), the merge changes nothing and `pulumi up` sees no drift.
            CAPACITY_LABELS: ",".join(f"{k}={v}" for k, v in {**node_labels, "kubernetes.io/arch": "amd64"}.items()),
            # `pulumi up` waits neither for machines (capacity may be unavailable) nor, on delete, for their drain.
            labels.SKIP_AWAIT: "true",
            labels.DELETION_PROPAGATION: "background",
            labels.CONFIGURED_NODES: str(pool.replicas),
        }
        machine_set_resource = k8s.apiextensions.CustomResource(
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
                        "metadata": {"labels": {**node_labels, "node-role.kubernetes.io/gpu": "",
                                                # a tuned pool's role, which its MachineConfigPool selects
                                                **({pool.profile.node_role_label: ""} if pool.profile else {})}},
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
                            # IMDSv2 only (EC2 HttpTokens=required); EC2's default hop limit of 1 keeps pods out.
                            "metadataServiceOptions": {"authentication": "Required"},
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
            # `replicas` is the size the MachineSet is created with; the MachineAutoscaler's cluster autoscaler
            # moves it between the bounds afterwards, and `pulumi up` does not set it back.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                ignore_changes=[*(["spec.replicas"] if pool.autoscales else []), *CONTROLLER_ANNOTATIONS])),
        )
        if pool.partition_labels:
            # The MIG layout reaches the running machines too (the template only new ones): the MIG manager then
            # re-partitions each node's GPUs.
            machine_labels(f"{name}-partition-labels", machine_set, pool.partition_labels, placement.cli_image,
                           pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                               depends_on=[machine_set_resource], protect=False)))
        if pool.max_replicas < 1:
            return  # a parked pool has nothing to scale, and a MachineAutoscaler's maxReplicas must be at least 1
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
        group_name = f"{group_prefix(cluster.cluster)}{pool.name}"
        template = aws.ec2.LaunchTemplate(
            f"{name}-launch-template",
            name=group_name,
            image_id=pool.image,
            instance_type=pool.instance_type,
            iam_instance_profile={"name": cluster.instance_profile},
            # With EFA, the security groups go on the network interfaces (EC2 refuses both).
            vpc_security_group_ids=None if pool.efa_interfaces else list(cluster.security_group_ids),
            network_interfaces=efa_network_interfaces(pool.efa_interfaces, cluster.security_group_ids) or None,
            block_device_mappings=[{"device_name": "/dev/sda1", "ebs": {
                "volume_size": pool.root_volume_gib, "volume_type": "gp3", "encrypted": "true",
                "delete_on_termination": "true"}}],
            # IMDSv2 only, and its token answers one hop: the node and host-network pods reach the metadata service,
            # pods behind the node's network namespace (a tenant's) cannot take the node role's credentials.
            metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 1},
            user_data=base64.b64encode(kubelet_user_data(cluster.cluster, node_labels, pool.profile, pool.taints).encode()).decode(),
            tags=kernel_annotations(pool),
            tag_specifications=[{"resource_type": "instance", "tags": {"Name": group_name, **kernel_annotations(pool)}}],
            opts=opts,
        )
        autoscaler_tags = {
            labels.CA_ENABLED_TAG: "true",
            labels.CA_CLUSTER_TAG.format(cluster=cluster.cluster): "owned",
            f"kubernetes.io/cluster/{cluster.cluster}": "owned",
            # aws_manager.go extractTaintsFromAsg: node-template/taint/<key> = <value>:<effect>.
            **{labels.CA_TAINT_TAG.format(key=taint["key"]): f"{taint.get('value', '')}:{taint['effect']}"
               for taint in pool.taints},
            # aws_manager.go extractAllocatableResourcesFromAsg: node-template/resources/<name> = <quantity>, each kind
            # the pool's nodes advertise.
            **{labels.CA_RESOURCE_TAG.format(resource=name): str(count)
               for name, count in pool.advertised_per_node.items()},
            # aws_manager.go extractLabelsFromAsg: node-template/label/<key> = <value>, for scale from zero.
            **kernel_annotations(pool),
            IMAGE_TAG: pool.image,
            labels.CONFIGURED_NODES: str(pool.replicas),
            **{labels.CA_LABEL_TAG.format(key=key): value for key, value in node_labels.items()},
            labels.CA_LABEL_TAG.format(key=labels.NVIDIA_PCI_LABEL): "true",
            **efa_autoscaler_tags(pool.efa_interfaces),
        }
        refresh = pool.refresh
        group = aws.autoscaling.Group(
            f"{name}-asg",
            name=group_name,
            min_size=pool.min_replicas,
            max_size=pool.max_replicas,
            desired_capacity=pool.replicas,
            # "0": `pulumi up` does not wait for instances to be healthy; GPU capacity may be unavailable for hours
            # (InsufficientInstanceCapacity), and the nodes' readiness is the autoscaler's and the operator's.
            wait_for_capacity_timeout="0",
            vpc_zone_identifiers=list(cluster.subnet_ids),
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


# cluster-autoscaler-operator pkg/operator/config.go DefaultClusterAutoscalerName: the operator deploys an
# autoscaler only for the ClusterAutoscaler of this name, and without one a MachineAutoscaler does nothing.
CLUSTER_AUTOSCALER_NAME = "default"


def cluster_autoscaler(name: str, pools: list[GpuNodePoolArgs],
                       opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource | None:
    """OpenShift: the cluster's ClusterAutoscaler when a pool autoscales, capping GPUs per type at the maxima of the
    pools of whole GPUs (pools of shares or MIG slices are bounded by their MachineAutoscaler's maximum).

    `resourceLimits.gpus[].type` is matched against the nodes' `cluster-api/accelerator` label
    (pkg/apis/autoscaling/v1/clusterautoscaler_types.go GPULimit), which every MachineSet sets to its GPU model.
    The resource is cluster-wide and a singleton: on a cluster that already has one, import it first.
    """
    if not any(pool.autoscales for pool in pools):
        return None
    gpus: dict[str, int] = {}
    for pool in pools:
        if labels.GPU_RESOURCE not in pool.advertised_per_node:
            continue  # not a GPU node to the autoscaler (its nodes carry no GPU label, see GpuNodePool)
        model = pool.instance.gpu_model
        # The autoscaler counts a node's nvidia.com/gpu, which a MachineSet's node template takes from its GPU
        # annotation: the physical GPUs, whatever the pool's partitioning (shares and MIG slices are advertised under
        # other names, so they neither raise nor lower the count).
        gpus[model] = gpus.get(model, 0) + pool.max_replicas * pool.instance.gpus
    return k8s.apiextensions.CustomResource(
        name,
        api_version="autoscaling.openshift.io/v1",
        kind="ClusterAutoscaler",
        metadata=metadata(CLUSTER_AUTOSCALER_NAME),
        spec={
            "resourceLimits": {"gpus": [{"type": model, "min": 0, "max": total}
                                        for model, total in sorted(gpus.items()) if total > 0]},
            # GPU nodes run a dozen operator DaemonSets: without this they never look idle enough to go.
            "ignoreDaemonsetsUtilization": True,
            "scaleDown": {"enabled": True, "delayAfterAdd": "10m", "unneededTime": "10m",
                          "utilizationThreshold": "0.5"},
        },
        opts=opts,
    )


def group_prefix(cluster: str) -> str:
    """What every pool's Auto Scaling Group name (and so its drain's rule and policy) starts with."""
    return f"{cluster}-gpu-"


def kernel_annotations(pool: GpuNodePoolArgs) -> dict[str, str]:
    """The OS and kernel the pool's image boots: a kernel upgrade is a visible change of the pool itself."""
    return {labels.KERNEL_ANNOTATION: pool.kernel.kernel, labels.OS_ANNOTATION: pool.kernel.os}


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
