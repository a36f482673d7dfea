"""Fleet facts: what each AWS GPU instance type carries, and which node operating systems have drivers."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    """One AWS GPU instance type: the GPU it carries and the shape the autoscaler needs to scale from zero."""

    gpu_model: str
    gpus: int
    gpu_memory_gib: int
    vcpus: int
    memory_mib: int
    # Elastic Fabric Adapter interfaces the type takes (EC2 `NetworkInfo.EfaInfo.MaximumEfaInterfaces`; 0: no EFA).
    # The EFA device plugin chart lists the same types as EFA-capable (aws/eks-charts
    # stable/aws-efa-k8s-device-plugin values.yaml, supportedInstanceLabels).
    efa_interfaces: int = 0

    @property
    def efa(self) -> bool:
        return self.efa_interfaces > 0


INSTANCE_TYPES: dict[str, InstanceType] = {
    "g4dn.xlarge": InstanceType("Tesla-T4", 1, 16, 4, 16384),
    "g4dn.2xlarge": InstanceType("Tesla-T4", 1, 16, 8, 32768),
    "g4dn.12xlarge": InstanceType("Tesla-T4", 4, 16, 48, 196608, efa_interfaces=1),
    "g5.xlarge": InstanceType("NVIDIA-A10G", 1, 24, 4, 16384),
    "g5.12xlarge": InstanceType("NVIDIA-A10G", 4, 24, 48, 196608, efa_interfaces=1),
    "g5.48xlarge": InstanceType("NVIDIA-A10G", 8, 24, 192, 786432, efa_interfaces=1),
    "g6.xlarge": InstanceType("NVIDIA-L4", 1, 24, 4, 16384),
    "g6.12xlarge": InstanceType("NVIDIA-L4", 4, 24, 48, 196608, efa_interfaces=1),
    "g6e.xlarge": InstanceType("NVIDIA-L40S", 1, 48, 4, 32768),
    "g6e.12xlarge": InstanceType("NVIDIA-L40S", 4, 48, 48, 393216, efa_interfaces=1),
    "p4d.24xlarge": InstanceType("NVIDIA-A100-SXM4-40GB", 8, 40, 96, 1179648, efa_interfaces=4),
    "p4de.24xlarge": InstanceType("NVIDIA-A100-SXM4-80GB", 8, 80, 96, 1179648, efa_interfaces=4),
    "p5.48xlarge": InstanceType("NVIDIA-H100-80GB-HBM3", 8, 80, 192, 2097152, efa_interfaces=32),
    "p5e.48xlarge": InstanceType("NVIDIA-H200", 8, 141, 192, 2097152, efa_interfaces=32),
}

# Hugepages may take at most this share of a node's memory: the rest is the OS's, the kubelet's and other pods'.
MAX_HUGEPAGES_SHARE = 0.8
HUGEPAGE_SIZES_MIB = {"2Mi": 2, "1Gi": 1024}  # x86_64 huge page sizes, as Kubernetes names them


@dataclass(frozen=True)
class NodeOs:
    """A node operating system: NVIDIA's image tag suffix, its NFD os-release facts, its kernel naming."""

    tag_suffix: str
    os_release_id: str
    os_release_version: str
    kernel_pattern: re.Pattern[str]
    kernel_example: str
    openshift: bool

    def is_kernel(self, kernel: str) -> bool:
        """Whether `kernel`, whole (no trailing newline), is a kernel release (uname -r) of this OS."""
        return self.kernel_pattern.fullmatch(kernel) is not None


_UBUNTU_KERNEL = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-(aws|generic|nvidia)")


def _el9_kernel(minor: int) -> re.Pattern[str]:
    """Kernels of a RHEL 9 minor release: RHCOS of each OpenShift release is built on one (4.18 on RHEL 9.4, 4.19 and
    4.20 on RHEL 9.6, as Red Hat's RHCOS release notes list them), and its kernels carry that minor as el9_<minor>."""
    return re.compile(rf"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+(\.[0-9]+)*\.el9_{minor}\.(x86_64|aarch64)")


NODE_OSES: dict[str, NodeOs] = {
    "ubuntu22.04": NodeOs("ubuntu22.04", "ubuntu", "22.04", _UBUNTU_KERNEL, "6.8.0-1021-aws", False),
    "ubuntu24.04": NodeOs("ubuntu24.04", "ubuntu", "24.04", _UBUNTU_KERNEL, "6.8.0-1021-aws", False),
    "rhcos4.18": NodeOs("rhcos4.18", "rhcos", "4.18", _el9_kernel(4), "5.14.0-427.65.1.el9_4.x86_64", True),
    "rhcos4.19": NodeOs("rhcos4.19", "rhcos", "4.19", _el9_kernel(6), "5.14.0-570.28.1.el9_6.x86_64", True),
    "rhcos4.20": NodeOs("rhcos4.20", "rhcos", "4.20", _el9_kernel(6), "5.14.0-570.49.1.el9_6.x86_64", True),
}
KUBERNETES_OSES = tuple(name for name, node_os in NODE_OSES.items() if not node_os.openshift)

# OpenShift minor -> the Kubernetes minor it runs. From 4.18: the pinned GPU Operator's bundle supports 4.18 and later,
# and the tenant admission policy needs Kubernetes 1.30 or later.
OPENSHIFT_KUBERNETES: dict[str, str] = {"4.18": "1.31", "4.19": "1.32", "4.20": "1.33"}

OS_BY_RELEASE: dict[tuple[str, str], str] = {
    (node_os.os_release_id, node_os.os_release_version): name for name, node_os in NODE_OSES.items()
}
