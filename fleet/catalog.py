"""Fleet facts: what each AWS GPU instance type carries, and which node operating systems have drivers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleet.labels import OS_ID_LABEL, OS_VERSION_LABEL, OS_VERSION_MAJOR_LABEL


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
    # Not read from a pinned source: the product name assumes GFD's rule for the H100's ("NVIDIA H200" with the space
    # replaced), and the shape is AWS's published one; check both before relying on an H200 pool.
    "p5e.48xlarge": InstanceType("NVIDIA-H200", 8, 141, 192, 2097152, efa_interfaces=32),
}

# Hugepages may take at most this share of a node's memory: the rest is the OS's, the kubelet's and other pods'.
MAX_HUGEPAGES_SHARE = 0.8
HUGEPAGE_SIZES_MIB = {"2Mi": 2, "1Gi": 1024}  # x86_64 huge page sizes, as Kubernetes names them


@dataclass(frozen=True)
class NodeOs:
    """A node operating system as the GPU Operator keys it: the OS tag of its driver images (and of the driver's
    name), the NFD os-release labels that select its nodes, and its kernel naming.

    The operator's key (NVIDIA gpu-operator v26.7.0 `internal/state/nodepool.go`, `getOSTag` and `getNodePools`): the
    NFD label `system-os_release.ID` followed by `VERSION_ID`, except for `rhel` (and `ol`, `rocky`), where only the
    major version is kept; the nodes of such a tag are then selected by `system-os_release.VERSION_ID.major`.
    """

    tag_suffix: str
    os_release_id: str
    os_release_version: str  # the value nodes of this OS carry in `version_label`
    kernel_pattern: re.Pattern[str]
    kernel_example: str
    openshift: bool
    major_only: bool = False  # keyed by VERSION_ID.major (RHEL), not by the whole VERSION_ID

    def is_kernel(self, kernel: str) -> bool:
        """Whether `kernel`, whole (no trailing newline), is a kernel release (uname -r) of this OS."""
        return self.kernel_pattern.fullmatch(kernel) is not None

    @property
    def version_label(self) -> str:
        """The NFD os-release label this OS is selected by: `VERSION_ID`, or `VERSION_ID.major` (NFD's
        `source/system/system.go` `GetLabels` splits VERSION_ID into `.major` and `.minor`)."""
        return OS_VERSION_MAJOR_LABEL if self.major_only else OS_VERSION_LABEL

    def node_labels(self) -> dict[str, str]:
        """The NFD os-release labels every node of this OS carries and its driver selects."""
        return {OS_ID_LABEL: self.os_release_id, self.version_label: self.os_release_version}

    def runs(self, os_id: str | None, version_id: str | None) -> bool:
        """Whether a node whose NFD labels show this os-release ID and VERSION_ID runs this OS (as the operator
        keys it: for `major_only`, any minor of the major)."""
        if os_id != self.os_release_id or not version_id:
            return False
        return (version_id.split(".")[0] if self.major_only else version_id) == self.os_release_version


_UBUNTU_KERNEL = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+-(aws|generic|nvidia)")


def _el9_kernel(*minors: int) -> re.Pattern[str]:
    """Kernels of RHEL 9 minor releases: they carry the minor as el9_<minor>."""
    alternatives = "|".join(str(minor) for minor in minors)
    return re.compile(rf"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+(\.[0-9]+)*\.el9_({alternatives})\.(x86_64|aarch64)")


NODE_OSES: dict[str, NodeOs] = {
    "ubuntu22.04": NodeOs("ubuntu22.04", "ubuntu", "22.04", _UBUNTU_KERNEL, "6.8.0-1021-aws", False),
    "ubuntu24.04": NodeOs("ubuntu24.04", "ubuntu", "24.04", _UBUNTU_KERNEL, "6.8.0-1021-aws", False),
    # RHCOS of OpenShift 4.18 rewrites os-release as ID="rhcos", VERSION_ID=<OpenShift minor> (openshift/os
    # release-4.18, manifest-ocp-rhel-9.4.yaml, its os-release postprocess script).
    "rhcos4.18": NodeOs("rhcos4.18", "rhcos", "4.18", _el9_kernel(4), "5.14.0-427.65.1.el9_4.x86_64", True),
    # From OpenShift 4.19 the node image is layered on RHEL CoreOS and keeps RHEL's os-release, ID="rhel" and
    # VERSION_ID=9.<minor> (openshift/os release-4.19 .. release-4.22, build-node-image.sh applies
    # packages-openshift.yaml with osversion=${ID}-${VERSION_ID}, whose postprocess only appends OPENSHIFT_VERSION).
    # The operator tags and selects them by the major alone: one OS, rhel9, for 4.19 to 4.22.
    "rhel9": NodeOs("rhel9", "rhel", "9", _el9_kernel(6, 8), "5.14.0-570.49.1.el9_6.x86_64", True, major_only=True),
}
KUBERNETES_OSES = tuple(name for name, node_os in NODE_OSES.items() if not node_os.openshift)


@dataclass(frozen=True)
class OpenShiftRelease:
    """What the nodes of one OpenShift minor run: its Kubernetes, its node OS (as the operator keys it) and the
    os-release VERSION_ID and RHEL minor its RHCOS is built on."""

    kubernetes: str
    node_os: str
    version_id: str
    rhel_minor: int
    kernel_example: str

    def nfd_labels(self) -> dict[str, str]:
        """The os-release labels NFD sets on this release's nodes."""
        return nfd_os_release_labels(NODE_OSES[self.node_os].os_release_id, self.version_id)

    def is_kernel(self, kernel: str) -> bool:
        """Whether `kernel` is a kernel of this release's RHEL minor (el9_<minor>)."""
        return _el9_kernel(self.rhel_minor).fullmatch(kernel) is not None


# OpenShift minor -> what its nodes run. From 4.18: the pinned GPU Operator's bundle supports 4.18 and later, and the
# tenant admission policy needs Kubernetes 1.30 or later. RHEL minors: openshift/os release-4.NN, 4.18 builds
# manifest-ocp-rhel-9.4.yaml; 4.19 to 4.21 packages-openshift.yaml for osversion rhel-9.6, 4.22 for rhel-9.8.
OPENSHIFT_RELEASES: dict[str, OpenShiftRelease] = {
    "4.18": OpenShiftRelease("1.31", "rhcos4.18", "4.18", 4, "5.14.0-427.65.1.el9_4.x86_64"),
    "4.19": OpenShiftRelease("1.32", "rhel9", "9.6", 6, "5.14.0-570.28.1.el9_6.x86_64"),
    "4.20": OpenShiftRelease("1.33", "rhel9", "9.6", 6, "5.14.0-570.49.1.el9_6.x86_64"),
    "4.21": OpenShiftRelease("1.34", "rhel9", "9.6", 6, "5.14.0-570.49.1.el9_6.x86_64"),
    "4.22": OpenShiftRelease("1.35", "rhel9", "9.8", 8, "5.14.0-687.35.1.el9_8.x86_64"),
}
OPENSHIFT_KUBERNETES: dict[str, str] = {minor: release.kubernetes for minor, release in OPENSHIFT_RELEASES.items()}


def node_os_of(os_id: str | None, version_id: str | None) -> str | None:
    """The node OS (its operator key) of a node whose NFD labels show this os-release ID and VERSION_ID, or None."""
    return next((name for name, node_os in NODE_OSES.items() if node_os.runs(os_id, version_id)), None)


def nfd_os_release_labels(os_id: str, version_id: str) -> dict[str, str]:
    """The os-release labels NFD sets on a node whose /etc/os-release says ID and VERSION_ID (source/system/system.go,
    GetLabels: ID, VERSION_ID, and VERSION_ID's numeric major and minor as splitVersion splits them)."""
    split = re.fullmatch(r"(?P<major>[0-9]+)(\.(?P<minor>[0-9]+))?(\..*)?", version_id)
    parts = {f"{OS_VERSION_LABEL}.{name}": value for name, value in (split.groupdict() if split else {}).items()
             if value}
    return {OS_ID_LABEL: os_id, OS_VERSION_LABEL: version_id, **parts}
