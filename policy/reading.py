"""Reading resources as pulumi-policy hands them: the kinds and paths policies look at, and the values at
them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from components import labels
from fleet.partitioning import is_gpu_resource


DEFAULT_OVERCOMMIT = 1.0
# NVIDIA's operands, NFD, and (OpenShift) the CLI image of the job that approves a pinned operator's install plan.
DEFAULT_REGISTRIES = ("nvcr.io", "registry.k8s.io", "registry.redhat.io")
SYSTEM_NAMESPACES = labels.SYSTEM_NAMESPACES
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
TENANT_POD_SECURITY = ("baseline", "restricted")
CLUSTER_ADMIN = "cluster-admin"
GPU_TAINT_TEXT = f"{labels.GPU_TAINT['key']}:{labels.GPU_TAINT['effect']}"

POOL_COMPONENT = "gpu-platform:index:GpuNodePool"
MACHINE_SET = "kubernetes:machine.openshift.io/v1beta1:MachineSet"
AUTO_SCALING_GROUP = "aws:autoscaling/group:Group"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
# A Karpenter pool (components/placements/karpenter.py): counted at its limits, its nodes' labels and taints those of
# its template (sigs.k8s.io/karpenter v1.15.0 pkg/apis/v1/nodepool.go NodePoolSpec, NodeClaimTemplate).
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
CLUSTER_POLICY = "kubernetes:nvidia.com/v1:ClusterPolicy"
NVIDIA_DRIVER = "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"
# Where each GPU Operator resource keeps the tolerations of the operand DaemonSets it creates.
OPERAND_TOLERATIONS = {CLUSTER_POLICY: ("spec", "daemonsets", "tolerations"), NVIDIA_DRIVER: ("spec", "tolerations")}
DRIVER_BRANCH = re.compile(r"\d+")

# Where each workload kind keeps the pod spec it runs.
_TEMPLATE = ("spec", "template", "spec")
POD_SPEC_PATHS = {
    "Pod": ("spec",),
    "DaemonSet": _TEMPLATE,
    "Deployment": _TEMPLATE,
    "StatefulSet": _TEMPLATE,
    "ReplicaSet": _TEMPLATE,
    "Job": _TEMPLATE,
    "CronJob": ("spec", "jobTemplate", *_TEMPLATE),
}
REGISTER_TAINTS = re.compile(r"--register-with-taints[= ]['\"]?([^\s'\"]+)")

# Operand images the GPU Operator's own resources name as repository, image and version: any section of a
# ClusterPolicy (toolkit, devicePlugin, gfd, dcgmExporter, migManager, validator, ...) and of an NVIDIADriver (the
# driver is its spec itself; manager, gds, gdrcopy, ...) that carries them.
OPERAND_IMAGE_RESOURCES = (CLUSTER_POLICY, NVIDIA_DRIVER)

PERFORMANCE_PROFILE = "kubernetes:performance.openshift.io/v2:PerformanceProfile"


def dig(value: Any, *path: str) -> Any:
    """The value at `path` inside nested mappings, or None where a step is missing."""
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def items(value: Any) -> Sequence[Any]:
    """A list property as a sequence; empty when it is absent."""
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def kind(resource_type: str) -> str:
    """The Kubernetes kind of a `kubernetes:<group/version>:<Kind>` type, or '' for other providers."""
    return resource_type.rsplit(":", 1)[-1] if resource_type.startswith("kubernetes:") else ""


def describe(resource_type: str, props: Mapping[str, Any]) -> str:
    """`Kind namespace/name` of a Kubernetes object, for messages."""
    namespace, name = dig(props, "metadata", "namespace"), dig(props, "metadata", "name")
    return f"{kind(resource_type)} {namespace}/{name}" if namespace else f"{kind(resource_type)} {name}"


def pod_spec(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod spec a workload runs: a Pod's own spec or its controller's pod template; None for other kinds."""
    path = POD_SPEC_PATHS.get(kind(resource_type))
    spec = dig(props, *path) if path else None
    return spec if isinstance(spec, Mapping) else None


def containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init, regular and ephemeral containers of a pod spec."""
    return [c for key in ("initContainers", "containers", "ephemeralContainers") for c in items(spec.get(key))]


def whole(value: Any) -> int | None:
    """A whole-number quantity ("4", 4, or 4.0: the engine hands policies every number as a float), or None when it
    is not one."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value))
    except ValueError:
        return None


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, str]) -> bool:
    """Kubernetes' toleration matching (k8s.io/api core/v1 toleration.go ToleratesTaint)."""
    if toleration.get("effect") and toleration.get("effect") != taint["effect"]:
        return False
    key = toleration.get("key")
    if toleration.get("operator", "Equal") == "Exists":
        return not key or key == taint["key"]
    return key == taint["key"] and (toleration.get("value") or "") == (taint.get("value") or "")


def requests_gpus(spec: Mapping[str, Any]) -> bool:
    """Whether any container of a pod spec asks for a GPU of any kind (whole, a share, a MIG slice)."""
    return any(is_gpu_resource(name) and whole(amount) not in (None, 0)
               for c in containers(spec) for section in ("limits", "requests")
               for name, amount in (dig(c, "resources", section) or {}).items())


def asg_tags(props: Mapping[str, Any]) -> dict[str, str]:
    """An Auto Scaling Group's tags as a mapping."""
    return {tag.get("key"): str(tag.get("value")) for tag in items(props.get("tags"))}
