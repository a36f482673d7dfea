"""DraStack: allocation mode `dra`, GPU Operator v26.7.0's GPUCluster and the DeviceClasses tenants may name.

The GPUCluster (api/nvidia/v1alpha1/gpucluster_types.go) is the operator's DRA stack and a singleton named
`gpu-cluster` (its CRD's XValidation). It takes the place of the ClusterPolicy: the operator refuses to run it while
a ClusterPolicy exists (controllers/gpucluster_controller.go, validatePrerequisites: "a ClusterPolicy CR and
GPUCluster CR may not exist at the same time"). It runs NVIDIA's DRA driver, DCGM, the DCGM exporter and the DRA
validator (internal/state/manager.go, newGPUClusterStates), and no device plugin, GPU feature discovery, container
toolkit or MIG manager; drivers still come from NVIDIADriver resources (controllers/nvidiadriver_controller.go
resolves either CR). The operator creates the DeviceClasses gpu.nvidia.com, mig.nvidia.com and vfio.gpu.nvidia.com
itself (fleet.dra.OPERATOR_CLASSES); the stack's own classes (fleet.dra) narrow those to its pools.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.images import operand_image
from components.manifests import child_options, metadata
from components.cluster_policy import NO_AWAIT
from fleet.dra import DEVICES_ANNOTATION, DeviceClassPlan

GPU_CLUSTER = "gpu-cluster"
# The DRA driver the chart of v26.7.0 names (deployments/gpu-operator/values.yaml, draDriver).
DRA_DRIVER_IMAGE = "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0"


@dataclass(frozen=True)
class DraStackArgs:
    """The DRA driver's and the DCGM exporter's images, and the stack's DeviceClasses."""

    dcgm_exporter_image: str
    classes: tuple[DeviceClassPlan, ...]
    driver_image: str = DRA_DRIVER_IMAGE


class DraStack(pulumi.ComponentResource):
    """The GPUCluster `gpu-cluster` and one DeviceClass per kind of device the pools offer (per dedicated pool too).

    Compute domains (multi-node NVLink through IMEX) are off: no pool of the stack declares an NVLink fabric, and
    they would add two more classes and a controller. `pulumi up` does not wait for the GPUCluster to be ready:
    that needs GPU nodes, and the operator reports it.
    """

    cluster: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: DraStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DraStack", name, None, opts)
        self.cluster = k8s.apiextensions.CustomResource(
            f"{name}-gpu-cluster", api_version="nvidia.com/v1alpha1", kind="GPUCluster",
            metadata=metadata(GPU_CLUSTER, annotations=NO_AWAIT), spec={
                "draDriver": {**operand_image(args.driver_image), "computeDomains": {"enabled": False}},
                # The exporter embeds its own DCGM host engine (the CR's default: dcgm off).
                "dcgm": {"enabled": False},
                "dcgmExporter": {"enabled": True, **operand_image(args.dcgm_exporter_image)},
            }, opts=child_options(self, opts))
        for plan in args.classes:
            # resource.k8s.io/v1 (GA in Kubernetes 1.34) has no typed class in pulumi-kubernetes 4.25's SDK.
            k8s.apiextensions.CustomResource(
                f"{name}-{plan.name}", api_version="resource.k8s.io/v1", kind="DeviceClass",
                metadata=metadata(plan.name, annotations={DEVICES_ANNOTATION: str(plan.devices)}),
                spec={"selectors": [{"cel": {"expression": plan.selector()}}]}, opts=child_options(self, opts))
        self.register_outputs({"classes": [plan.name for plan in args.classes]})
