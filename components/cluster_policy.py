"""ClusterPolicyStack: the one ClusterPolicy that tells NVIDIA's GPU Operator which operands to run, and how."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.images import operand_image
from components.manifests import child_options, metadata
from fleet.partitioning import MIG_DISABLED

CLUSTER_POLICY = "cluster-policy"
# NVIDIA's configuration for shared clusters: the container toolkit takes the device list only from the device
# plugin's volume mounts, never from an unprivileged container's NVIDIA_VISIBLE_DEVICES (nvidia-container-toolkit
# cmd/nvidia-ctk-installer/toolkit/toolkit.go; k8s-device-plugin DEVICE_LIST_STRATEGY).
TOOLKIT_ENV = {"ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
               "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}
DEVICE_PLUGIN_ENV = {"DEVICE_LIST_STRATEGY": "volume-mounts"}
# Readiness needs GPU nodes and is the operator's to report: `pulumi up` never waits for it, not even with
# PULUMI_K8S_AWAIT_ALL=true (which would wait for the policy's Ready condition).
NO_AWAIT = {labels.SKIP_AWAIT: "true"}


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in values.items()]


@dataclass(frozen=True)
class ClusterPolicyStackArgs:
    """What the ClusterPolicy turns on.

    Attributes:
        flavor: `kubernetes` or `openshift` (drivers built with the Driver Toolkit unless precompiled).
        images: operand images by ClusterPolicy section (labels.OPERAND_IMAGES with the stack's overrides).
        device_plugin_config: the ConfigMap of device-plugin configs and the name of the default one.
        service_monitor: the cluster runs the Prometheus Operator, so the operator creates the exporter's
            ServiceMonitor.
        service_monitor_labels: labels on that ServiceMonitor, which the Prometheus that scrapes it selects by.
    """

    flavor: str
    images: dict[str, str]
    device_plugin_config: tuple[str, str]
    service_monitor: bool = False
    service_monitor_labels: dict[str, str] = field(default_factory=dict)
    mig_config: str | None = None  # the stack's own mig-parted config (MigPartedConfig), where a pool needs one
    mig_reboot: bool = False  # the MIG manager may reboot a node whose MIG mode needs it (cloud instances)


class ClusterPolicyStack(pulumi.ComponentResource):
    """The ClusterPolicy `cluster-policy`: container toolkit, device plugin, GPU feature discovery, DCGM exporter,
    MIG manager and validator pinned to one GPU Operator release, on every GPU node (they tolerate the GPU taint).

    Drivers are not in it: it hands them to NVIDIADriver resources, one per kernel (DriverStack). `pulumi up`
    does not wait for the policy to become ready: that needs GPU nodes, and the operator reports it.
    """

    policy: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: ClusterPolicyStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:ClusterPolicyStack", name, None, opts)
        self.policy = k8s.apiextensions.CustomResource(
            f"{name}-cluster-policy", api_version="nvidia.com/v1", kind="ClusterPolicy",
            metadata=metadata(CLUSTER_POLICY, annotations=NO_AWAIT), spec=self._spec(args),
            opts=child_options(self, opts))
        self.register_outputs({"name": CLUSTER_POLICY})

    @staticmethod
    def _spec(args: ClusterPolicyStackArgs) -> dict:
        images = {section: operand_image(image) for section, image in args.images.items()}
        config_map, default = args.device_plugin_config
        device_plugin = {"enabled": True, **images["devicePlugin"], "env": _env(DEVICE_PLUGIN_ENV),
                         "config": {"name": config_map, "default": default}}
        return {
            "operator": {"use_ocp_driver_toolkit": args.flavor == "openshift"},
            "daemonsets": {"priorityClassName": labels.NODE_CRITICAL_PRIORITY,
                           "tolerations": [dict(labels.GPU_TOLERATION)],
                           "updateStrategy": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "1"}},
            # Drivers come from NVIDIADriver resources; none is managed by the ClusterPolicy itself.
            "driver": {"enabled": True, "useNvidiaDriverCRD": True},
            "toolkit": {"enabled": True, **images["toolkit"], "env": _env(TOOLKIT_ENV)},
            "devicePlugin": device_plugin,
            "gfd": {"enabled": True, **images["gfd"]},
            "dcgm": {"enabled": False},  # the exporter embeds its own DCGM host engine
            "dcgmExporter": {"enabled": True, **images["dcgmExporter"],
                             # honorLabels keeps the exporter's namespace/pod labels (the GPU's user), not the exporter's own.
                             "serviceMonitor": {"enabled": args.service_monitor, "interval": "15s",
                                                "honorLabels": True,
                                                **({"additionalLabels": args.service_monitor_labels}
                                                   if args.service_monitor_labels else {})}},
            # MIG-capable nodes that no pool gives a layout get MIG off (the operator labels them with this default,
            # the CRD's migManager.config.default); the layouts themselves are the MIG manager's own (generated from
            # the hardware, the shipped default-mig-parted-config its fallback: controllers/object_controls.go
            # TransformMigManager), unless a pool gives its own layout: then the stack's config, named here.
            "migManager": {"enabled": True, **images["migManager"], "config": {
                "default": MIG_DISABLED, **({"name": args.mig_config} if args.mig_config else {})},
                # On a cloud instance the GPU is passed through to the VM, which may not expose its reset: NVML then
                # answers that changing MIG mode needs a VM reboot (nvmlDeviceSetMigMode, NVML_ERROR_RESET_REQUIRED),
                # and without WITH_REBOOT the MIG manager goes on to the layout and ends `failed`; with it, it marks
                # the node `rebooting` and reboots it once (mig-parted v0.15.0 cmd/nvidia-mig-manager/main.go
                # --with-reboot, pkg/mig/reconfigure/reconfigure.go Run). NVIDIA's GPU Operator MIG guide asks for it
                # in a CSP environment.
                **({"env": [{"name": "WITH_REBOOT", "value": "true"}]} if args.mig_reboot else {})},
            # Mixed: each MIG profile under its own name (nvidia.com/mig-<profile>), whole GPUs as nvidia.com/gpu.
            "mig": {"strategy": "mixed"},
            "nodeStatusExporter": {"enabled": False},
            "validator": images["validator"],
            # Device lists as volume mounts, which only the device plugin sets up (see TOOLKIT_ENV).
            "cdi": {"enabled": False},
        }
