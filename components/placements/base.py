"""What every placement shares: a pool's arguments, and the small interface each placement module implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pulumi

from components import labels
from components.node_profile import NodeProfile
from fleet.catalog import InstanceType
from fleet.kernels import KernelTarget
from fleet.partitioning import Partitioning


class Placement(Protocol):
    """One way of bringing a pool's nodes: what it provisions, the labels its nodes register with, what the pool
    component itself declares, and how its nodes roll."""

    def declared(self, pool: GpuNodePoolArgs) -> dict[str, Any]:
        """What the pool component carries as input and output itself (empty when a resource of its own says it)."""
        ...

    def node_selector(self, pool: GpuNodePoolArgs) -> dict[str, str]:
        """The labels that select the pool's nodes (pods, Kueue flavors and the driver roll read them)."""
        ...

    def roll(self, pool: GpuNodePoolArgs) -> dict[str, object]:
        """How the pool's nodes are replaced when what they boot changes, for the preview (`method` names it)."""
        ...

    def provision(self, pool: GpuNodePoolArgs, name: str, node_labels: dict[str, str],
                  opts: pulumi.ResourceOptions) -> None:
        """Register the resources that bring the nodes, their nodes labelled `node_labels` and tainted from boot."""
        ...


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """One pool: its machines, their size bounds and boot image, and where they go (`placement`).

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
    placement: Placement
    kernel: KernelTarget | None = None
    retired: bool = False  # unprotected: a later change may remove the pool
    profile: NodeProfile | None = None  # node tuning (OpenShift: the pool's node role; AWS: its boot configuration)
    efa_interfaces: int = 0  # EFA interfaces per node (fabric: efa), in the pool's cluster placement group
    placement_group: pulumi.Input[str] | None = None
    partitioning: Partitioning = Partitioning()  # whole GPUs, time-sliced shares or a MIG layout
    dedicated: bool = False  # reserved for some tenants: a second taint only their pods may tolerate

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
    def whole(self) -> bool:
        """Whether the pool's nodes advertise whole GPUs (nvidia.com/gpu), not shares or MIG slices."""
        return labels.GPU_RESOURCE in self.advertised_per_node

    @property
    def autoscales(self) -> bool:
        """The autoscaler moves the node count between the bounds: it, not `pulumi up`, owns the count."""
        return self.min_replicas < self.max_replicas

    def node_labels(self) -> dict[str, str]:
        """The labels every provisioned node of the pool registers with: the pool, its device plugin config (named
        after the pool, DevicePluginStack), its MIG layout, and on whole-GPU pools its GPU model.

        The cluster autoscaler takes a node with its GPU label but no allocatable nvidia.com/gpu for one whose driver
        is still installing, and keeps it unready (cluster-autoscaler processors/customresources/gpu_processor.go,
        FilterOutNodesWithUnreadyResources): only pools of whole GPUs carry it; shares and MIG slices are not
        nvidia.com/gpu, and their pools are bounded by their maximum node count instead.
        """
        node_labels = {labels.POOL_LABEL: self.name, labels.DEVICE_PLUGIN_CONFIG_LABEL: self.name,
                       **self.partition_labels}
        if self.whole:
            node_labels[labels.MACHINESET_GPU_TYPE_LABEL] = self.instance.gpu_model
        return node_labels


def kernel_annotations(pool: GpuNodePoolArgs) -> dict[str, str]:
    """The OS and kernel the pool's image boots: a kernel upgrade is a visible change of the pool itself."""
    return {labels.KERNEL_ANNOTATION: pool.kernel.kernel, labels.OS_ANNOTATION: pool.kernel.os}
