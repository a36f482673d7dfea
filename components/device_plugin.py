"""DevicePluginStack: the device plugin's configuration, which the ClusterPolicy hands to NVIDIA's device plugin."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import labels
from components.manifests import child_options, metadata

CONFIG_MAP = "device-plugin-config"
WHOLE = "whole"  # the default config, for GPU nodes no pool labels: every GPU whole, a pod may ask for several


def plugin_config(replicas: int | None) -> dict:
    """k8s-device-plugin's config (api/config/v1): whole GPUs, or every GPU shared by `replicas` pods with one share
    per request (two shares could land on one GPU, so asking for more than one would promise what is not there)."""
    config: dict = {"version": "v1", "flags": {"migStrategy": "single"}}
    if replicas:
        config["sharing"] = {"timeSlicing": {"failRequestsGreaterThanOne": True, "resources": [
            {"name": labels.GPU_RESOURCE, "replicas": replicas}]}}
    return config


@dataclass(frozen=True)
class DevicePluginStackArgs:
    """The operator's namespace, where the device plugin reads its configs, and each pool's time-slicing replicas
    (None: whole GPUs)."""

    namespace: str
    pools: Mapping[str, int | None]


class DevicePluginStack(pulumi.ComponentResource):
    """The device plugin's configs: one per pool, named after it, which its nodes select by the label
    labels.DEVICE_PLUGIN_CONFIG_LABEL, and whole GPUs for any other GPU node. `config` is (config map, default
    config) for the ClusterPolicy.

    A pool's config keeps its name when its sharing changes, so the device plugin on its running nodes picks the
    change up; only a new pool's label waits for its machines. NVIDIA's device plugin, GPU feature discovery and
    the container toolkit themselves run under the GPU Operator.
    """

    config: tuple[str, str]

    def __init__(self, name: str, args: DevicePluginStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DevicePluginStack", name, None, opts)
        configs = {WHOLE: plugin_config(None),
                   **{pool: plugin_config(replicas) for pool, replicas in args.pools.items()}}
        k8s.core.v1.ConfigMap(
            f"{name}-config", metadata=metadata(CONFIG_MAP, args.namespace),
            data={key: yaml.safe_dump(config, sort_keys=False) for key, config in configs.items()},
            opts=child_options(self, opts))
        self.config = (CONFIG_MAP, WHOLE)
        self.register_outputs({"config": list(self.config)})
