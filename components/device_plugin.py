"""DevicePluginStack: the device plugin's configuration, which the ClusterPolicy hands to NVIDIA's device plugin."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import labels
from components.manifests import child_options, metadata
from fleet.partitioning import Partitioning

CONFIG_MAP = "device-plugin-config"
WHOLE = "whole"  # the default config, for GPU nodes no pool labels: every GPU whole, a pod may ask for several


def plugin_config(partitioning: Partitioning) -> dict:
    """k8s-device-plugin's config (api/config/v1) for a pool.

    MIG devices are advertised by profile (the mixed strategy: nvidia.com/mig-<profile>, whole GPUs of the node as
    nvidia.com/gpu). Time-sliced GPUs are advertised renamed, as nvidia.com/gpu.shared, so nothing counts a share as
    a GPU; one share per request (two could land on one GPU, so asking for more would promise what is not there:
    `failRequestsGreaterThanOne`, internal/rm/rm.go)."""
    config: dict = {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if partitioning.shares:
        config["sharing"] = {"timeSlicing": {"renameByDefault": True, "failRequestsGreaterThanOne": True,
                                             "resources": [{"name": labels.GPU_RESOURCE,
                                                            "replicas": partitioning.shares}]}}
    return config


@dataclass(frozen=True)
class DevicePluginStackArgs:
    """The operator's namespace, where the device plugin reads its configs, and each pool's partitioning."""

    namespace: str
    pools: Mapping[str, Partitioning]


class DevicePluginStack(pulumi.ComponentResource):
    """The device plugin's configs: one per pool, named after it, which its nodes select by the label
    labels.DEVICE_PLUGIN_CONFIG_LABEL, and whole GPUs for any other GPU node. `config` is (config map, default
    config) for the ClusterPolicy.

    The ConfigMap's name ends in a digest of its contents. The device plugin's config manager reloads only when its
    node's label changes (k8s-device-plugin cmd/config-manager/main.go), so a changed config under the same name
    would never reach running nodes; a new name changes the ClusterPolicy, whose operator then rolls the device
    plugin and GPU feature discovery DaemonSets that mount it (gpu-operator controllers/object_controls.go
    handleDevicePluginConfig), one node at a time, and the old ConfigMap goes only after that update.
    """

    config: tuple[str, str]

    def __init__(self, name: str, args: DevicePluginStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DevicePluginStack", name, None, opts)
        configs = {WHOLE: plugin_config(Partitioning()),
                   **{pool: plugin_config(partitioning) for pool, partitioning in args.pools.items()}}
        data = {key: yaml.safe_dump(config, sort_keys=False) for key, config in configs.items()}
        digest = hashlib.sha256(yaml.safe_dump(data, sort_keys=True).encode()).hexdigest()[:10]
        config_map = f"{CONFIG_MAP}-{digest}"
        k8s.core.v1.ConfigMap(f"{name}-config", metadata=metadata(config_map, args.namespace), data=data,
                              opts=child_options(self, opts))
        self.config = (config_map, WHOLE)
        self.register_outputs({"config": list(self.config)})
