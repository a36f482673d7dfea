"""Stand-ins for NVIDIA's DRA driver, which cannot run here (no GPU, no kubelet): the ResourceSlices its kubelet
plugin would publish for each kwok node, and a permissive stand-in for the GPUCluster CRD.

The slices follow kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0 (cmd/gpu-kubelet-plugin): driver `gpu.nvidia.com`,
one pool per node named after the node, on that node (driver.go, the kubelet plugin helper's per-node publishing);
a whole GPU named `gpu-<minor>` (deviceinfo.go, GpuInfo.CanonicalName) with the attributes of partitions.go
(GpuInfo.PartDevAttributes) and its `memory` capacity (GpuInfo.GetDevice); a MIG device named
`gpu-<minor>-mig-<profile without dots>-<profile ID>-<placement start>` (mig.go, MigSpecTuple.ToCanonicalName) with
`type` "mig", `profile`, `parentUUID` and its parent's attributes (deviceinfo.go, MigDeviceInfo.GetDevice). The values
an H100 reports are read from ../shared/notes/gpu-readings.md; attributes whose values we have not read (brand,
architecture, CUDA driver version, PCIe root), and a model's compute capability and memory where not read, are left
out; a GPU whose NVML name we have not read gets GPU feature discovery's form of it (the classes compare that form).
What a stand-in cannot show: the driver preparing a device (CDI), its health checks, and DynamicMIG.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from e2e import kueue
from e2e.cluster import KWOK_STAGES, ControlPlane
from e2e.conftest import Applied, apply_stack, prepare_cluster, tenants_ready
from e2e.kube import Kube, apply_crds
from e2e.stack import Stack

DRIVER = "gpu.nvidia.com"
STANDARD_PREFIX = "resource.kubernetes.io/"  # k8s.io/dynamic-resource-allocation deviceattribute
# ../shared/notes/gpu-readings.md: NVML product name, compute capability, memory (MiB), driver 580.159.04; and per MIG
# profile its NVML profile ID, memory (MiB) and the placements it may start at.
NVML_NAMES = {"NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3"}
# The compute capability and memory (MiB) read for a model; a model not read (the example's L40S) publishes neither.
READINGS = {"NVIDIA-H100-80GB-HBM3": {"computeCapability": "9.0.0", "memoryMiB": 81559}}
DRIVER_VERSION = "580.159.4"  # 580.159.04 as a semantic version
MIG_PROFILES = {"1g.10gb": (19, 9984, range(7))}


def _uuid(*parts: str) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, '/'.join(parts))}"


def _common(model: str, bus: str) -> dict[str, Any]:
    read = READINGS.get(model, {})
    return {"productName": {"string": NVML_NAMES.get(model, model)},
            **({"cudaComputeCapability": {"version": read["computeCapability"]}} if read else {}),
            "driverVersion": {"version": DRIVER_VERSION},
            f"{STANDARD_PREFIX}pciBusID": {"string": bus}}


def devices(node: str, model: str, gpus: int, mig: dict[str, int]) -> list[dict[str, Any]]:
    """The devices one node publishes: its GPUs whole, or (MIG mode) the MIG devices each is cut into."""
    result = []
    for minor in range(gpus):
        parent, bus = _uuid(node, str(minor)), f"0000:{0x18 + minor:02x}:00.0"
        if not mig:
            result.append({"name": f"gpu-{minor}", "attributes": {
                "type": {"string": "gpu"}, "uuid": {"string": parent}, **_common(model, bus)},
                **({"capacity": {"memory": {"value": f"{READINGS[model]['memoryMiB']}Mi"}}} if model in READINGS
                   else {})})
            continue
        for profile, count in mig.items():
            profile_id, memory, starts = MIG_PROFILES[profile]
            for start in list(starts)[:count]:
                result.append({"name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{profile_id}-{start}",
                               "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                                              "uuid": {"string": _uuid(node, str(minor), profile, str(start)).replace(
                                                  "GPU-", "MIG-")},
                                              "parentUUID": {"string": parent}, **_common(model, bus)},
                               "capacity": {"memory": {"value": f"{memory}Mi"}}})
    return result


def resource_slices(stack: Stack) -> list[dict[str, Any]]:
    """One ResourceSlice per GPU node of the stack's kwok nodes, as the driver's kubelet plugin would publish it."""
    pools = {pool.name: pool for pool in stack.config.node_pools}
    slices = []
    for node in stack.nodes():
        name = node["metadata"]["name"]
        pool = pools.get(name.rsplit("-", 1)[0])
        if pool is None:
            continue  # a CPU node: no driver runs there
        mig = pool.partitioning.devices(pool.instance.gpu_model) if pool.partitioning.kind == "mig" else {}
        slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                       "metadata": {"name": f"{name}-{DRIVER}"},
                       "spec": {"driver": DRIVER, "nodeName": name,
                                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                                "devices": devices(name, pool.instance.gpu_model, pool.instance.gpus, mig)}})
    return slices


# A stand-in for the GPUCluster CRD (nvidia.com/v1alpha1, cluster-scoped), which is not in ../shared/reference/crds and
# which the Go module proxy does not serve for GPU Operator v26.7.0: it stores any spec, so the API server accepts the
# stack's GPUCluster, but nothing of the real CRD's schema is checked here.
GPU_CLUSTER_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "gpuclusters.nvidia.com"},
    "spec": {"group": "nvidia.com", "scope": "Cluster",
             "names": {"kind": "GPUCluster", "listKind": "GPUClusterList", "plural": "gpuclusters",
                       "singular": "gpucluster"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@contextmanager
def dra_plane(stack: Stack, folder: Path, stages: tuple[str, ...] = KWOK_STAGES,
              queued: bool = False) -> Iterator[Applied]:
    """A control plane in `folder` with the stand-in GPUCluster CRD, `stack` applied (`queued`: after Kueue, counting
    the stack's DeviceClasses), its tenants ready and the stand-in slices published."""
    with ControlPlane.start(folder, stages=stages) as plane:
        first = Kube(plane.kubeconfig)  # the stand-in CRD first: discovery then knows its group as a whole
        apply_crds(first, [GPU_CLUSTER_CRD])
        first.close()
        admin = prepare_cluster(stack, plane)
        if queued:
            kueue.start(plane, admin, device_classes=tuple(
                obj["metadata"]["name"] for obj in stack.objects() if obj["kind"] == "DeviceClass"))
        applied = Applied(stack, plane, admin)
        apply_stack(applied)
        tenants_ready(stack, admin)
        for slice_ in resource_slices(stack):
            admin.create(slice_)
        try:
            yield applied
        finally:
            for client in [admin, *applied.users.values()]:
                client.close()
