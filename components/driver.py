"""DriverStack: one precompiled NVIDIA driver DaemonSet per (os, kernel), each with its validation Job."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, daemonset_spec, host_path, metadata, node_agent_pod
from stacks.catalog import NODE_OSES
from stacks.inventory import KernelInventory, KernelTarget

SERVICE_ACCOUNT = "nvidia-driver"
# The driver container touches this file once `nvidia-smi` works; node agents wait for it.
READY_FILE = "/run/nvidia/validations/.driver-ctr-ready"


@dataclass(frozen=True)
class DriverStackArgs:
    """The kernel inventory and the driver release to build images for."""

    inventory: KernelInventory
    repository: str
    branch: str
    version: str
    validator_image: str
    namespace: str = labels.GPU_SYSTEM_NAMESPACE
    pull_secret: str | None = None


def kernel_node_selector(target: KernelTarget) -> dict[str, str]:
    """Pins a pod to GPU nodes that boot exactly this OS release and kernel."""
    node_os = NODE_OSES[target.os]
    return {
        **labels.GPU_NODE_SELECTOR,
        labels.KERNEL_LABEL: target.kernel,
        labels.OS_ID_LABEL: node_os.os_release_id,
        labels.OS_VERSION_LABEL: node_os.os_release_version,
    }


class DriverStack(pulumi.ComponentResource):
    """Drivers for every kernel in the inventory, so a node never boots a kernel whose driver is not scheduled.

    The DaemonSets use the OnDelete update strategy. Pulumi awaits a RollingUpdate DaemonSet until every pod
    runs the new template, so a driver bump would unload the kernel module under running GPU jobs, node after
    node, inside `pulumi up`. With OnDelete the new template is in place at once and each node picks it up
    when it is drained or replaced (a kernel change always means a new DaemonSet, hence new pods).
    """

    daemonsets: dict[KernelTarget, k8s.apps.v1.DaemonSet]
    validations: dict[KernelTarget, k8s.batch.v1.Job]
    images: dict[str, str]

    def __init__(self, name: str, args: DriverStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DriverStack", name, None, opts)
        child = child_options(self, opts)
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=metadata(SERVICE_ACCOUNT, args.namespace),
                                             automount_service_account_token=False, opts=child)
        self.daemonsets, self.validations, self.images = {}, {}, {}
        for target in args.inventory.targets:
            image = target.driver_image(args.repository, args.branch)
            self.images[f"{target.os}/{target.kernel}"] = image
            daemonset = self._daemonset(name, target, image, args,
                                        child_options(self, opts, account))
            self.daemonsets[target] = daemonset
            self.validations[target] = self._validation(
                name, target, args, child_options(self, opts, daemonset))
        self.register_outputs({"images": self.images})

    def _daemonset(self, name: str, target: KernelTarget, image: str, args: DriverStackArgs,
                   opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
        container = {
            "name": "nvidia-driver",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["nvidia-driver"],
            "args": ["init"],
            "env": [{"name": "DRIVER_VERSION", "value": args.version}],
            "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
            "volumeMounts": [
                {"name": "run-nvidia", "mountPath": "/run/nvidia", "mountPropagation": "Bidirectional"},
                {"name": "var-log", "mountPath": "/var/log"},
                {"name": "dev-log", "mountPath": "/dev/log"},
                {"name": "host-os-release", "mountPath": "/host-etc/os-release", "readOnly": True},
                {"name": "firmware", "mountPath": "/lib/firmware"},
            ],
            "startupProbe": {
                "exec": {"command": ["sh", "-c", f"nvidia-smi && touch {READY_FILE}"]},
                "initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 60, "failureThreshold": 120,
            },
            "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", f"rm -f {READY_FILE}"]}}},
            "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
        }
        pod = node_agent_pod(
            "nvidia-driver", service_account=SERVICE_ACCOUNT, containers=[container],
            node_selector=kernel_node_selector(target), hostPID=True,
            volumes=[host_path("run-nvidia", "/run/nvidia", "DirectoryOrCreate"), host_path("var-log", "/var/log"),
                     host_path("dev-log", "/dev/log"), host_path("host-os-release", "/etc/os-release"),
                     host_path("firmware", "/lib/firmware", "DirectoryOrCreate")],
            **({"imagePullSecrets": [{"name": args.pull_secret}]} if args.pull_secret else {}),
        )
        target_labels = {labels.DRIVER_TARGET_LABEL: target.slug}
        return k8s.apps.v1.DaemonSet(
            f"{name}-{target.slug}",
            metadata=metadata(f"nvidia-driver-{target.slug}", args.namespace, extra_labels={
                **target_labels, "app.kubernetes.io/version": args.version},
                annotations={labels.KERNEL_ANNOTATION: target.kernel, labels.OS_ANNOTATION: target.os}),
            spec=daemonset_spec("nvidia-driver", pod, strategy={"type": "OnDelete"}, extra_labels=target_labels),
            opts=opts,
        )

    def _validation(self, name: str, target: KernelTarget, args: DriverStackArgs,
                    opts: pulumi.ResourceOptions) -> k8s.batch.v1.Job:
        running = args.inventory.running(target)
        annotations = {labels.KERNEL_ANNOTATION: target.kernel, labels.OS_ANNOTATION: target.os}
        if not running:
            # No node boots this kernel yet: the Job stays pending until one does, and must not block `pulumi up`.
            annotations[labels.SKIP_AWAIT] = "true"
        container = {
            "name": "driver-validation",
            "image": args.validator_image,
            "command": ["sh", "-c"],
            "args": ["nvidia-validator"],
            "env": [{"name": "COMPONENT", "value": "driver"}, {"name": "WITH_WAIT", "value": "true"},
                    {"name": "DRIVER_VERSION", "value": args.version}],
            "securityContext": {"privileged": True},
            "volumeMounts": [{"name": "driver-root", "mountPath": "/run/nvidia/driver",
                              "mountPropagation": "HostToContainer", "readOnly": True}],
        }
        pod = node_agent_pod("driver-validation", service_account=SERVICE_ACCOUNT, containers=[container],
                             node_selector=kernel_node_selector(target), restartPolicy="OnFailure",
                             volumes=[host_path("driver-root", "/run/nvidia/driver")])
        return k8s.batch.v1.Job(
            f"{name}-validation-{target.slug}",
            metadata=metadata(f"driver-validation-{target.slug}", args.namespace, annotations=annotations),
            spec={"backoffLimit": 6,
                  "template": {"metadata": {"labels": {labels.DRIVER_TARGET_LABEL: target.slug}}, "spec": pod}},
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                replace_on_changes=["spec"], delete_before_replace=True)),
        )
