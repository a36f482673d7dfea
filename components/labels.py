"""Well-known keys, names and images: the one source of truth shared by components, policies and tests."""

# Extended resource advertised by the device plugin, and the quota key that caps it.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_QUOTA_KEY = f"requests.{GPU_RESOURCE}"

# Every GPU node carries this taint. The key equals the extended resource name, so the
# ExtendedResourceToleration admission plugin adds the toleration to any pod requesting GPUs.
GPU_TAINT = {"key": GPU_RESOURCE, "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# Node Feature Discovery labels.
NFD_PREFIX = "feature.node.kubernetes.io"
NFD_API_GROUP = "nfd.k8s-sigs.io"
NVIDIA_PCI_LABEL = f"{NFD_PREFIX}/pci-10de.present"
KERNEL_LABEL = f"{NFD_PREFIX}/kernel-version.full"
OS_ID_LABEL = f"{NFD_PREFIX}/system-os_release.ID"
OS_VERSION_LABEL = f"{NFD_PREFIX}/system-os_release.VERSION_ID"

# Labels the platform puts on its own nodes and objects.
POOL_LABEL = "gpu-platform.io/pool"
GPU_NODE_SELECTOR = {NVIDIA_PCI_LABEL: "true"}
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-platform"}
TENANT_LABEL = "gpu-platform.io/tenant"
TENANT_PRIORITY_LABEL = "gpu-platform.io/priority-class"  # on a tenant namespace: the highest class it may use
DRIVER_TARGET_LABEL = "gpu-platform.io/driver-target"
KERNEL_ANNOTATION = "gpu-platform.io/kernel"
OS_ANNOTATION = "gpu-platform.io/os"

# Namespaces.
GPU_SYSTEM_NAMESPACE = "gpu-system"
NFD_NAMESPACE = "node-feature-discovery"
MONITORING_NAMESPACE = GPU_SYSTEM_NAMESPACE

# Priority classes.
NODE_CRITICAL_PRIORITY = "system-node-critical"
# Priority classes reserved for the cluster's own components; tenant namespaces admit none of them.
SYSTEM_PRIORITY_CLASSES = [NODE_CRITICAL_PRIORITY, "system-cluster-critical"]
HIGH_PRIORITY_CLASS = "gpu-high"
LOW_PRIORITY_CLASS = "gpu-low"

# Pulumi-kubernetes annotation: do not wait for the object to become ready.
SKIP_AWAIT = "pulumi.com/skipAwait"

# Cluster-autoscaler discovery and scale-from-zero node-template tags (ASG) and annotations (MachineSet).
CA_ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
CA_CLUSTER_TAG = "k8s.io/cluster-autoscaler/{cluster}"
CA_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/{key}"
CA_TAINT_TAG = "k8s.io/cluster-autoscaler/node-template/taint/{key}"
CA_RESOURCE_TAG = "k8s.io/cluster-autoscaler/node-template/resources/{resource}"
MACHINESET_CAPACITY_ANNOTATIONS = {
    "cpu": "machine.openshift.io/vCPU",
    "memory": "machine.openshift.io/memoryMb",
    "gpu": "machine.openshift.io/GPU",
}
MACHINESET_GPU_TYPE_LABEL = "cluster-api/accelerator"

# Images: NVIDIA's current releases (GPU Operator 25.10 line) and upstream NFD.
NVIDIA_REGISTRY = "nvcr.io/nvidia"
IMAGES = {
    "nfd": "registry.k8s.io/nfd/node-feature-discovery:v0.18.2",
    "toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0",
    "devicePlugin": "nvcr.io/nvidia/k8s-device-plugin:v0.18.0",
    "dcgmExporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04",
    "validator": "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.10.0",
    "cudaSample": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
}
