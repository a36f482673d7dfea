"""DevicePluginStack: the device plugin's configuration, which the ClusterPolicy hands to NVIDIA's device plugin."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import labels
from components.manifests import child_options, metadata

CONFIG_MAP = "device-plugin-config"
TIME_SLICING = "time-slicing"


def time_slicing_config(replicas: int) -> dict:
    """k8s-device-plugin's config (api/config/v1): every GPU shared by `replicas` pods, one share per request."""
    return {
        "version": "v1",
        "flags": {"migStrategy": "single"},
        "sharing": {"timeSlicing": {"failRequestsGreaterThanOne": True, "resources": [
            {"name": labels.GPU_RESOURCE, "replicas": replicas}]}},
    }


@dataclass(frozen=True)
class DevicePluginStackArgs:
    """GPU time-slicing (off when None) and the operator's namespace, where the device plugin reads its config."""

    namespace: str
    time_slicing_replicas: int | None = None


class DevicePluginStack(pulumi.ComponentResource):
    """The device plugin's config map; `config` is (config map, default config) for the ClusterPolicy, or None.

    NVIDIA's device plugin, GPU feature discovery and the container toolkit themselves run under the GPU Operator.
    """

    config: tuple[str, str] | None

    def __init__(self, name: str, args: DevicePluginStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DevicePluginStack", name, None, opts)
        self.config = None
        if args.time_slicing_replicas:
            k8s.core.v1.ConfigMap(
                f"{name}-config", metadata=metadata(CONFIG_MAP, args.namespace),
                data={TIME_SLICING: yaml.safe_dump(time_slicing_config(args.time_slicing_replicas), sort_keys=False)},
                opts=child_options(self, opts))
            self.config = (CONFIG_MAP, TIME_SLICING)
        self.register_outputs({"config": list(self.config) if self.config else None})
