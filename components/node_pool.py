"""GpuNodePool: a tainted pool of GPU machines, brought by its placement (components/placements)."""

from __future__ import annotations

import pulumi

from components.manifests import child_options
from components.placements.base import GpuNodePoolArgs


class GpuNodePool(pulumi.ComponentResource):
    """GPU machines booting one image (one kernel), tainted `nvidia.com/gpu:NoSchedule` from their first boot."""

    node_selector: dict[str, str]
    taints: list[dict[str, str]]
    gpu_capacity: int
    roll: dict[str, object]  # how the pool's nodes are replaced, for the preview

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None):
        placement = args.placement
        declared = placement.declared(args)
        super().__init__("gpu-platform:index:GpuNodePool", name, declared or None, opts)
        self.node_selector = placement.node_selector(args)
        self.taints = args.taints
        self.gpu_capacity = args.replicas * args.instance.gpus
        self.roll = placement.roll(args)
        # The engine refuses to delete (or replace) a protected resource: removing a pool takes `retired` first.
        placement.provision(args, name, args.node_labels(), pulumi.ResourceOptions.merge(
            child_options(self, opts), pulumi.ResourceOptions(protect=not args.retired)))
        self.register_outputs({"nodeSelector": self.node_selector, "taints": self.taints,
                               "gpuCapacity": self.gpu_capacity, **declared})
