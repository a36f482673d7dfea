"""The Pulumi program: the same code path under `pulumi up` and under gpuctl's mock runtime."""

from __future__ import annotations

from collections.abc import Iterable

import pulumi

from fleet.kernels import KernelInventory, KernelTarget, ObservedNode
from stacks.config import ConfigError, StackConfig, load_stack_config
from stacks.discovery import read_live_nodes
from stacks.gpu_platform import GpuPlatform
from stacks.preflight import check_driver_images


def build(config: StackConfig, observed: Iterable[ObservedNode] | None = None, *, discover: bool = False,
          preflight: bool = False, previous: Iterable[KernelTarget] = ()) -> GpuPlatform:
    """Compose the platform for a validated config and the nodes observed on the cluster, and export outputs.

    Args:
        config: the validated stack config.
        observed: GPU nodes already read (a `kubectl get nodes -o json` file); None when not known.
        discover: read the nodes live when the stack enables discovery and none were given.
        preflight: check every driver image exists before any resource is registered.
        previous: kernels that had a driver before this change; kept while no node inventory says otherwise.
    """
    if observed is None and discover and config.cluster.discovery.enabled:
        observed = read_live_nodes(config.cluster.discovery)
    inventory = KernelInventory.build(config.declared_kernels, observed, previous)
    if preflight:
        check_driver_images({target: config.driver_release.image(target) for target in inventory.targets})
    platform = GpuPlatform("gpu-platform", config, inventory)
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    return platform


def run() -> None:
    """Entry point under the Pulumi CLI: config, discovery and preflight errors become one-line run errors."""
    try:
        config = load_stack_config()
        if not config.cluster.discovery.enabled:
            pulumi.log.warn("live discovery is off (gpu-platform:cluster.discovery.enabled: false): a driver whose "
                            "kernel leaves the stack config is deleted even if nodes still run it")
        build(config, discover=True, preflight=config.preflight)
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
