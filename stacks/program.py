"""The Pulumi program: the same code path under `pulumi up` and under gpuctl's mock runtime."""

from __future__ import annotations

from collections.abc import Iterable

import pulumi

from stacks.config import ConfigError, StackConfig, load_stack_config
from stacks.inventory import KernelInventory, ObservedNode
from stacks.platform import GpuPlatform


def build(config: StackConfig, observed: Iterable[ObservedNode] | None = None) -> GpuPlatform:
    """Compose the platform for a validated config and the nodes observed on the cluster, and export outputs."""
    platform = GpuPlatform("gpu-platform", config, KernelInventory.build(config, observed))
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    return platform


def run() -> None:
    """Entry point under the Pulumi CLI: config errors become one-line run errors, without a traceback."""
    try:
        config = load_stack_config()
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    build(config)
