"""MigPartedConfig: the stack's own configuration of NVIDIA's MIG manager, for a fleet where a pool gives its own MIG
layout (the MIG manager then reads this configuration only, so it holds every layout the pools use)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.manifests import child_options, metadata
from fleet.partitioning import MIG_DISABLED, PCI_DEVICE_IDS

CONFIG_MAP = "mig-parted-config"
# The key the operator mounts a custom config by (controllers/object_controls.go TransformMigManager: CONFIG_FILE
# /mig-parted-config/config.yaml).
CONFIG_KEY = "config.yaml"


def mig_parted_document(layouts: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict:
    """mig-parted's configuration (version v1, as the operator's default-mig-parted-config writes it): MIG off by
    default, and per layout the MIG devices of one GPU of each model that uses it, by that GPU's device-filter."""
    configs: dict = {MIG_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for name, by_model in sorted(layouts.items()):
        configs[name] = [{"device-filter": [PCI_DEVICE_IDS[model]], "devices": "all", "mig-enabled": True,
                          "mig-devices": dict(sorted(devices.items()))} for model, devices in sorted(by_model.items())]
    return {"version": "v1", "mig-configs": configs}


@dataclass(frozen=True)
class MigPartedConfigArgs:
    """The operator's namespace, and each layout the pools use: GPU model -> the MIG devices of one GPU."""

    namespace: str
    layouts: Mapping[str, Mapping[str, Mapping[str, int]]]


class MigPartedConfig(pulumi.ComponentResource):
    """The ConfigMap the ClusterPolicy names for the MIG manager (`name`); like the device plugin's, its name ends in a
    digest of its contents, so a change is a new name and the operator rolls the MIG manager to read it."""

    name: str

    def __init__(self, name: str, args: MigPartedConfigArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:MigPartedConfig", name, None, opts)
        text = yaml.safe_dump(mig_parted_document(args.layouts), sort_keys=False)
        self.name = f"{CONFIG_MAP}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
        k8s.core.v1.ConfigMap(f"{name}-config", metadata=metadata(self.name, args.namespace), data={CONFIG_KEY: text},
                              opts=child_options(self, opts))
        self.register_outputs({"name": self.name})
