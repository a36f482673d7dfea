"""DriverStack: one NVIDIADriver per (os, kernel) of the inventory, each pinned to the nodes of that kernel; or, where
the operator builds the driver on each node with the Driver Toolkit (OpenShift), one per OS release."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.images import operand_image
from components.manifests import child_options, metadata
from fleet.catalog import NODE_OSES
from fleet.kernels import DriverRelease, KernelInventory, KernelTarget

# How long the operator waits for GPU pods to leave a node (and for a drain) before it reloads the driver there.
EVICTION_TIMEOUT_SECONDS = 300
# The NVIDIADriver CRD refuses a change of these (x-kubernetes-validations `self == oldSelf`: "Please create a new
# NvidiaDriver"), which pulumi-kubernetes would try in place: replace the object instead, deleting it first (the
# old and the new select the same nodes), so toggling precompiled drivers deploys instead of failing at the API server.
IMMUTABLE = pulumi.ResourceOptions(replace_on_changes=["spec.usePrecompiled", "spec.driverType"],
                                   delete_before_replace=True)


@dataclass(frozen=True)
class DriverStackArgs:
    """The kernels that need a driver, the driver release, and how nodes take a new driver."""

    inventory: KernelInventory
    release: DriverRelease
    manager_image: str
    max_parallel_upgrades: int = 1
    max_unavailable: str = "25%"
    drain: bool = False
    pull_secret: str | None = None


def kernel_node_selector(target: KernelTarget) -> dict[str, str]:
    """Pins a driver to GPU nodes whose NFD labels show exactly this kernel and OS, the OS selected the way the GPU
    Operator keys it (gpu-operator v26.7.0 internal/state/nodepool.go, getNodePools: `VERSION_ID`, or
    `VERSION_ID.major` for RHEL), so the driver's nodes are the nodes of the operator's pools and image tags."""
    return {**labels.GPU_NODE_SELECTOR, labels.KERNEL_LABEL: target.kernel, **NODE_OSES[target.os].node_labels()}


def by_os_release(target: KernelTarget, release: DriverRelease) -> bool:
    """Whether the target's driver is keyed by OS rather than kernel: on OpenShift, unless precompiled, the
    operator builds the driver with the Driver Toolkit on each node, one DaemonSet per RHCOS build (OSTREE_VERSION)
    of whatever kernel it boots (gpu-operator v26.7.0 internal/state/nodepool.go, getNodePools). One driver then
    serves every release of the OS: rhel9 serves OpenShift 4.19 to 4.22, whose nodes the operator tells apart by
    OSTREE_VERSION itself; a driver per release would select the same nodes twice, which the operator refuses
    (internal/validator/validator.go, nodeSelectorValidator.Validate). A kernel selector there would drop every node of a z-stream whose kernel the stack
    has not declared yet (the operator's AssignOwners), leaving it without a driver."""
    return NODE_OSES[target.os].openshift and not release.precompiled


def driver_node_selector(target: KernelTarget, release: DriverRelease) -> dict[str, str]:
    """The nodes the target's driver selects: its OS release, and its kernel unless keyed by OS release."""
    selector = kernel_node_selector(target)
    if by_os_release(target, release):
        del selector[labels.KERNEL_LABEL]
    return selector


def driver_slug(target: KernelTarget, release: DriverRelease) -> str:
    return re.sub(r"[^a-z0-9]+", "-", target.os).strip("-") if by_os_release(target, release) else target.slug


def driver_name(target: KernelTarget, release: DriverRelease) -> str:
    """The NVIDIADriver's name: stable for one (os, kernel), or one OS release, a DNS-1123 label.

    A driver built on the node for one kernel (Kubernetes, precompiled off) is named apart from the precompiled one:
    toggling `driver.precompiled` then replaces it under a new name. Under the same name the engine's preview of
    the new object (a server-side dry run) meets the old one and the API server refuses the immutable change, so
    the preview fails although the delete-first replace would deploy.
    """
    built = "" if release.precompiled or by_os_release(target, release) else "-built"
    return f"nvidia-driver-{driver_slug(target, release)}{built}"


class DriverStack(pulumi.ComponentResource):
    """Drivers for every kernel in the inventory, so a node never boots a kernel that has no driver declared.

    Each NVIDIADriver selects only the nodes of its kernel (or OS release: by_os_release), so the operator never finds
    two drivers for one node.
    Upgrades are the operator's: a driver change rolls node by node (`maxParallelUpgrades`, `maxUnavailable`),
    each node cordoned and its GPU pods evicted (the whole node drained when `drain` is set) before the module
    is reloaded. `pulumi up` does not wait for that roll: readiness needs GPU nodes and is the operator's business.
    """

    drivers: dict[KernelTarget, k8s.apiextensions.CustomResource]
    images: dict[str, str]

    def __init__(self, name: str, args: DriverStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DriverStack", name, None, opts)
        child = child_options(self, opts)
        self.drivers, self.images = {}, {}
        resources: dict[str, k8s.apiextensions.CustomResource] = {}
        for target in args.inventory.targets:
            self.images[target.key] = args.release.image(target)
            slug = driver_slug(target, args.release)
            if slug not in resources:
                # The kernel annotation only where the driver is the kernel's (what gpuctl's removal check reads).
                kernel = {} if by_os_release(target, args.release) else {labels.KERNEL_ANNOTATION: target.kernel}
                resources[slug] = k8s.apiextensions.CustomResource(
                    f"{name}-{slug}", api_version="nvidia.com/v1alpha1", kind="NVIDIADriver",
                    metadata=metadata(driver_name(target, args.release), annotations={
                        **kernel, labels.OS_ANNOTATION: target.os,
                        # Ready only once GPU nodes of this kernel run the driver: the operator's to report.
                        labels.SKIP_AWAIT: "true"}),
                    spec=self._spec(target, args), opts=pulumi.ResourceOptions.merge(child, IMMUTABLE))
            self.drivers[target] = resources[slug]
        self.register_outputs({"images": self.images})

    @staticmethod
    def _spec(target: KernelTarget, args: DriverStackArgs) -> dict:
        release = args.release
        timeout = {"timeoutSeconds": EVICTION_TIMEOUT_SECONDS}
        spec = {
            "driverType": "gpu",
            "default": False,
            "usePrecompiled": release.precompiled,
            "repository": release.repository,
            "image": "driver",
            # The operator's tag rule: precompiled tags start with the branch, others with the full version.
            "version": release.branch if release.precompiled else release.version,
            "nodeSelector": driver_node_selector(target, release),
            "tolerations": [dict(labels.GPU_TOLERATION)],
            "priorityClassName": labels.NODE_CRITICAL_PRIORITY,
            "manager": {**operand_image(args.manager_image), "env": [
                {"name": "ENABLE_GPU_POD_EVICTION", "value": "true"},
                {"name": "ENABLE_AUTO_DRAIN", "value": str(args.drain).lower()},
                {"name": "DRAIN_USE_FORCE", "value": "false"},
                {"name": "DRAIN_TIMEOUT_SECONDS", "value": f"{EVICTION_TIMEOUT_SECONDS}s"},
                {"name": "DRAIN_DELETE_EMPTYDIR_DATA", "value": "false"},
            ]},
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": args.max_parallel_upgrades,
                "maxUnavailable": args.max_unavailable,
                "podDeletion": {"force": False, "deleteEmptyDir": False, **timeout},
                "drain": {"enable": args.drain, "force": False, "deleteEmptyDir": False, **timeout},
            },
        }
        if args.pull_secret:
            spec["imagePullSecrets"] = [args.pull_secret]
        return spec
