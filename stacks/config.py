"""The whole stack configuration as strict pydantic models, and the one place that reads Pulumi config."""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

import pulumi
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, SecretStr, Strict,
                      StrictBool, ValidationError, model_validator)
from pydantic.alias_generators import to_camel, to_snake
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from components import labels
from fleet.catalog import (HUGEPAGE_SIZES_MIB, INSTANCE_TYPES, KUBERNETES_OSES, MAX_HUGEPAGES_SHARE, NODE_OSES,
                           OPENSHIFT_KUBERNETES, OPENSHIFT_RELEASES, InstanceType)
from fleet import sysctls
from fleet.partitioning import (SHARED_GPU, Partitioning, custom_layout_name, custom_layout_problem, kind_of,
                                layouts_for, mig_resource, profiles_of)
from fleet.cpusets import parse_cpuset
from fleet.kernels import DriverRelease, KernelTarget

PROJECT = "gpu-platform"
# From 1.30: tenant pods are fenced by a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30).
SUPPORTED_KUBERNETES_VERSIONS = tuple(f"1.{minor}" for minor in range(30, 38))
# Namespaces of the cluster itself and of the operators the platform installs (either flavor's); tenants take none.
# Queue mode adds Kueue's (the chart's kueue-system; on OpenShift openshift-kueue-operator) and cert-manager's (the
# cert-manager Operator's namespace, and cert-manager, which that operator creates for its operands).
QUEUE_NAMESPACES = (labels.KUEUE_NAMESPACE, labels.CERT_MANAGER_OLM.namespace, "cert-manager")
RESERVED_NAMESPACES = re.compile("|".join(["default", "kube-.*", "openshift.*", "gpu-system",
                                           *map(re.escape, (*labels.SYSTEM_NAMESPACES, *QUEUE_NAMESPACES,
                                                            *labels.ADMISSION_GATE_NAMESPACES))]))
PLATFORM_LABEL_PREFIX = "gpu-platform.io/"  # the platform's own labels (tenant, priority class, pool, ...)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL_VALUE = 63  # characters of a Kubernetes label value


# Sane upper bounds: far above any real pool or quota, low enough to catch a stray digit.
MAX_POOL_NODES = 1000
MAX_TENANT_GPUS = 100_000
_CPU = r"^([1-9][0-9]{0,5}|[1-9][0-9]{0,8}m)$"  # whole cores or millicores
_MEMORY = r"^[1-9][0-9]{0,6}(Mi|Gi|Ti)$"
_MIG_PROFILE = re.compile(r"[1-7]g\.[0-9]+gb(\+me)?")  # a MIG profile of fleet.partitioning.MIG_LAYOUTS


class ConfigError(ValueError):
    """A stack configuration mistake, already phrased as one line naming the field and the fix."""


MAX_ERROR_CHARACTERS = 600  # of one error line: a value quoted whole (30,000 x's) must not bury the field and the fix


def capped(message: str) -> str:
    """`message` cut in the middle to MAX_ERROR_CHARACTERS, keeping its start (the field) and its end (the fix)."""
    if len(message) <= MAX_ERROR_CHARACTERS:
        return message
    cut = f" ... ({len(message) - MAX_ERROR_CHARACTERS:,} characters left out) ... "
    head = (MAX_ERROR_CHARACTERS - len(cut)) * 2 // 3
    return message[:head] + cut + message[-(MAX_ERROR_CHARACTERS - len(cut) - head):]


def _whole(value: Any) -> Any:
    """A whole float as the integer it is: the Pulumi CLI reads an integer past int64 (a stray digit) as 1e+30."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Kubernetes label keys ([prefix/]name) and values, as the API server validates them (ASCII only).
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")


def _label_key(value: str) -> str:
    if not _LABEL_KEY.fullmatch(value):
        raise ValueError(f"{value!r} is not a label key: [prefix/]name, the name at most 63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit (the prefix a DNS name)")
    return value


def _label_value(value: str) -> str:
    if value and not re.fullmatch(_LABEL_NAME, value):
        raise ValueError(f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' or '.', starting and "
                         "ending with a letter or digit")
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]

# Integers as YAML writes them: never `true` (1), "2" nor 1.5.
Int = Annotated[int, Strict(), BeforeValidator(_whole)]


def _dns_label(max_length: int):
    def check(value: str) -> str:
        if len(value) > max_length or not _DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"{value!r} must be a DNS-1123 label: lowercase letters, digits and '-', "
                f"starting and ending with a letter or digit, at most {max_length} characters"
            )
        return value

    return AfterValidator(check)


def _tenant_namespace(name: str) -> str:
    if RESERVED_NAMESPACES.fullmatch(name):
        raise ValueError(f"{name!r} is a system namespace (default, kube-*, openshift*, or an operator's: "
                         f"{', '.join((*labels.SYSTEM_NAMESPACES, *QUEUE_NAMESPACES, *labels.ADMISSION_GATE_NAMESPACES))}); "
                         "choose a team name")
    return name


def _trusted_namespace(name: str) -> str:
    if name == "default":
        raise ValueError("'default' is where anyone's pods land when they name no namespace: trusting it would let "
                         "them take GPUs outside every quota; run the add-on in a namespace of its own")
    return name


def _rule_label(key: str) -> str:
    if key in labels.MANAGED_BY or key.startswith(PLATFORM_LABEL_PREFIX):
        raise ValueError(f"{key!r} is a label the platform sets and relies on; choose another key")
    return key


def _tenant_group(group: str) -> str:
    """A group to bind to the tenant's namespace: neither blank, spaced nor with control characters, nor system:*."""
    if not group.strip():
        raise ValueError(f"{group!r} is blank; name the team's group, or leave group out to bind the tenant's name")
    if " " in group or not group.isprintable():
        raise ValueError(f"{group!r} has whitespace or control characters; write the group name exactly as the "
                         "identity provider sends it")
    if group.startswith("system:"):
        raise ValueError(f"{group!r} is a Kubernetes system: group (e.g. every authenticated user), so binding it "
                         "would give its members edit in the tenant namespace; name the team's own group")
    return group


def _check_kernel(kernel: str, os_name: str, kind: str) -> None:
    """A kernel release of the OS, short enough to be NFD's kernel label value that drivers select nodes by."""
    if len(kernel) > MAX_LABEL_VALUE:
        raise ValueError(f"kernel {kernel!r} is {len(kernel)} characters long, over the {MAX_LABEL_VALUE} of a label "
                         f"value ({labels.KERNEL_LABEL}), so no node could match it; write the node's uname -r")
    node_os = NODE_OSES[os_name]
    if not node_os.is_kernel(kernel):
        raise ValueError(f"kernel {kernel!r} is not {kind} kernel release (uname -r) of {os_name}, e.g. "
                         f"{node_os.kernel_example!r}; write what uname -r prints on one of its nodes")


def _field_error(loc: tuple[str | int, ...], message: str) -> PydanticCustomError:
    """A mistake a model's validator finds in one of its fields, reported at that field (`loc`, from the model)."""
    return PydanticCustomError("field_error", "{message}", {"message": message, "loc": loc})


class StrictModel(BaseModel):
    """Base for every config model: camelCase keys as in the stack files, unknown keys rejected, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class DiscoveryConfig(StrictModel):
    """Live read of the kernels running on the cluster's GPU nodes (NFD labels), through a kubeconfig.

    On by default: under `pulumi up` it is the evidence that lets a driver go when no node runs its kernel.
    """

    enabled: StrictBool = True
    kubeconfig: str | None = None
    context: str | None = None
    timeout_seconds: Annotated[float, Strict()] = Field(default=10.0, gt=0, le=120)


_TAGS = dict[Annotated[str, Field(min_length=1, max_length=128)], Annotated[str, Field(min_length=1, max_length=256)]]


class KarpenterClusterConfig(StrictModel):
    """Kubernetes on AWS: what every Karpenter pool's EC2NodeClass shares. Karpenter itself is the cluster's."""

    node_role: str = Field(pattern=r"^[A-Za-z0-9_+=,.@-]{1,64}$",
                           description="IAM role of the nodes Karpenter launches (its instance profile is Karpenter's)")
    subnet_tags: _TAGS | None = Field(default=None, max_length=20, description=(
        "tags that select the subnets nodes launch in; default karpenter.sh/discovery: <cluster name>"))
    security_group_tags: _TAGS | None = Field(default=None, max_length=20, description=(
        "tags that select the nodes' security groups; default karpenter.sh/discovery: <cluster name>"))


class ClusterConfig(StrictModel):
    """The cluster the platform lands on."""

    name: Annotated[str, _dns_label(40)]
    flavor: Literal["openshift", "kubernetes"]
    kubernetes_version: str | None = None
    release: str | None = Field(default=None, pattern=r"^4\.[0-9]+\.[0-9]+$",
                                description="OpenShift release, e.g. 4.18.21")
    kernel: str | None = Field(default=None, description="OpenShift: the RHCOS kernel the release ships (uname -r)")
    nfd_operator_csv: str | None = Field(default=None, pattern=r"^nfd\.4\.[0-9]+\.[0-9]+-[0-9]{12}$",
                                         description="OpenShift: the NFD operator CSV to pin (default per release)")
    region: str = Field(default="us-east-1", pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
    infrastructure_id: Annotated[str, _dns_label(MAX_LABEL_VALUE)] | None = Field(
        default=None, description="OpenShift infrastructure name (MachineSet prefix, and its machines' label value)")
    kubeconfig: str | None = Field(default=None, min_length=1,
                                   description="kubeconfig path of the provider and discovery; default $KUBECONFIG "
                                               "or ~/.kube/config")
    context: str | None = Field(default=None, min_length=1, description="its context; default its current context")
    subnet_ids: tuple[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")], ...] = ()
    security_group_ids: tuple[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")], ...] = ()
    instance_profile: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_+=,.@-]{1,128}$",
                                         description="Kubernetes: IAM instance profile name of the nodes")
    node_termination_handler_role: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_+=,.@-]{1,64}$",
        description="Kubernetes: IAM role of the nodes the node termination handler runs on; gets its policy")
    discovery: DiscoveryConfig = DiscoveryConfig()
    karpenter: KarpenterClusterConfig | None = Field(
        default=None, description="Kubernetes on AWS: the node role and selectors of the Karpenter pools")
    monitoring_namespaces: tuple[Annotated[str, _dns_label(63)], ...] | None = Field(
        default=None, description="namespaces whose Prometheus may scrape tenants; default by flavor")
    project_self_provisioning: StrictBool = Field(
        default=False, description="OpenShift: let every user create projects (namespaces outside the tenants' "
                                   "quotas); off by default on GPU clusters")
    trusted_namespaces: tuple[Annotated[str, _dns_label(63), AfterValidator(_trusted_namespace)], ...] = Field(
        default=(), description="namespaces of cluster add-ons whose node agents tolerate every taint (logging, "
                                "security); the GPU guard leaves them out as it does kube-system")

    @property
    def scrapers(self) -> tuple[str, ...]:
        """Namespaces allowed into tenant namespaces to scrape metrics: OpenShift's two monitoring stacks, or one."""
        if self.monitoring_namespaces is not None:
            return self.monitoring_namespaces
        if self.flavor == "openshift":
            return ("openshift-monitoring", "openshift-user-workload-monitoring")
        return ("monitoring",)

    @model_validator(mode="after")
    def _check(self) -> ClusterConfig:
        self._one_kubeconfig()
        if self.flavor == "openshift":
            self._check_openshift()
        else:
            if self.release or self.kernel:
                raise ValueError("release and kernel belong to OpenShift clusters; on Kubernetes each pool declares "
                                 "the kernel its image boots")
            if self.karpenter is not None and self.flavor == "kubernetes":
                tags = {"karpenter.sh/discovery": self.name}
                object.__setattr__(self, "karpenter", self.karpenter.model_copy(update={
                    "subnet_tags": self.karpenter.subnet_tags or tags,
                    "security_group_tags": self.karpenter.security_group_tags or tags}))
            if "project_self_provisioning" in self.model_fields_set:
                raise ValueError("projectSelfProvisioning applies to OpenShift (its self-provisioner role); on "
                                 "Kubernetes who may create namespaces is your RBAC's: remove it")
        if self.kubernetes_version is None:
            raise ValueError("kubernetesVersion is required on Kubernetes, as \"1.NN\"")
        if self.kubernetes_version not in SUPPORTED_KUBERNETES_VERSIONS:
            raise ValueError(
                f"kubernetesVersion {self.kubernetes_version!r} is not supported; use one of "
                f"{SUPPORTED_KUBERNETES_VERSIONS[0]}..{SUPPORTED_KUBERNETES_VERSIONS[-1]} as \"1.NN\" (tenant pods are "
                "fenced by a ValidatingAdmissionPolicy, GA in 1.30)"
            )
        return self

    def _one_kubeconfig(self) -> None:
        """The Kubernetes provider and live discovery reach the same cluster: cluster.kubeconfig and context, or
        (as older stack files set them) cluster.discovery's, copied to both."""
        for field in ("kubeconfig", "context"):
            own, discovery = getattr(self, field), getattr(self.discovery, field)
            if own and discovery and own != discovery:
                raise ValueError(f"{field} is set twice, {own!r} here and {discovery!r} in discovery; the provider and "
                                 f"discovery must reach the same cluster: keep cluster.{field} only")
            object.__setattr__(self, field, own or discovery)
        object.__setattr__(self, "discovery", self.discovery.model_copy(
            update={"kubeconfig": self.kubeconfig, "context": self.context}))

    def _check_openshift(self) -> None:
        if self.karpenter is not None:
            raise ValueError("karpenter applies to Kubernetes on AWS; OpenShift pools are MachineSets, scaled by the "
                             "cluster autoscaler: remove it")
        if self.node_termination_handler_role:
            raise ValueError("nodeTerminationHandlerRole applies to Kubernetes (Auto Scaling Group pools); OpenShift "
                             "drains machines itself: remove it")
        if not self.infrastructure_id:
            raise ValueError("infrastructureId is required on OpenShift "
                             "(oc get infrastructure cluster -o jsonpath='{.status.infrastructureName}')")
        if not self.release or not self.kernel:
            raise ValueError("release and kernel are required on OpenShift: the release (oc get clusterversion) and "
                             "the RHCOS kernel it ships (uname -r on a node), which every node runs")
        if self.minor not in OPENSHIFT_RELEASES:
            raise ValueError(f"release {self.release!r} is not supported; use OpenShift "
                             f"{', '.join(OPENSHIFT_RELEASES)}")
        openshift = OPENSHIFT_RELEASES[self.minor]
        if len(self.kernel) <= MAX_LABEL_VALUE and not openshift.is_kernel(self.kernel):
            raise ValueError(f"kernel {self.kernel!r} is not an RHCOS kernel release (uname -r) of OpenShift "
                             f"{self.minor}, whose RHCOS is built on RHEL 9.{openshift.rhel_minor} "
                             f"(el9_{openshift.rhel_minor} kernels, e.g. {openshift.kernel_example!r}); write what "
                             "uname -r prints on one of its nodes")
        _check_kernel(self.kernel, self.node_os, "an RHCOS")
        if self.nfd_operator_csv is None and self.minor not in labels.NFD_OLM_CSVS:
            raise ValueError(f"nfdOperatorCsv is required for OpenShift {self.minor}: the NFD operator version to pin, "
                             "as `oc get packagemanifest nfd -n openshift-marketplace -o jsonpath="
                             "'{.status.channels[?(@.name==\"stable\")].currentCSV}'` prints it")
        expected = OPENSHIFT_KUBERNETES[self.minor]
        if self.kubernetes_version is None:
            object.__setattr__(self, "kubernetes_version", expected)
        elif self.kubernetes_version != expected:
            raise ValueError(f"kubernetesVersion {self.kubernetes_version!r} does not match OpenShift {self.minor}, "
                             f"which runs Kubernetes {expected}; set {expected!r} or leave it out")

    @property
    def minor(self) -> str:
        """OpenShift: the release's minor, 4.NN."""
        return self.release.rsplit(".", 1)[0]

    @property
    def nfd_csv(self) -> str:
        """OpenShift: the pinned NFD operator CSV."""
        return self.nfd_operator_csv or labels.NFD_OLM_CSVS[self.minor]

    @property
    def node_os(self) -> str:
        """OpenShift: the node OS of the release as the GPU Operator keys it (rhcos4.18; rhel9 from 4.19)."""
        return OPENSHIFT_RELEASES[self.minor].node_os

    @property
    def kernel_target(self) -> KernelTarget | None:
        """OpenShift: the kernel every node runs once the Machine Config Operator has rolled the release."""
        return KernelTarget(self.node_os, self.kernel) if self.flavor == "openshift" else None


# What `sysctl -w` takes: numbers and words, single spaces between them (tcp_rmem's "4096 87380 6291456"); no quotes
# or shell text, which sysctl.conf and Tuned would take literally and every node's boot would then fail on.
_SYSCTL_VALUE = r"^[A-Za-z0-9_.:/,+%@-]+( [A-Za-z0-9_.:/,+%@-]+)*$"
_CPUSET = r"^[0-9]{1,3}(-[0-9]{1,3})?(,[0-9]{1,3}(-[0-9]{1,3})?)*$"


def _cpuset(value: str) -> str:
    """A cpuset list whose ranges run upwards."""
    parse_cpuset(value)
    return value


def _nodes_or_share(value: Any) -> int | str:
    """A number of nodes (at least 1) or a percentage of them ("10%")."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]?%|100%", value):
        return value
    raise ValueError(f"{_shown(value)} is not a number of nodes (at least 1) nor a percentage; write e.g. 1 or \"10%\"")


class NodeProfileConfig(StrictModel):
    """How a pool's nodes are tuned: CPU and topology managers, reserved CPUs, hugepages, sysctls."""

    cpu_manager_policy: Literal["none", "static"] = "static"
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = "single-numa-node"
    topology_manager_scope: Literal["container", "pod"] = "pod"
    reserved_cpus: Annotated[str, AfterValidator(_cpuset)] = Field(
        pattern=_CPUSET, description="CPUs for the OS and the kubelet, as a cpuset list")
    hugepages: dict[Literal["2Mi", "1Gi"], Annotated[Int, Field(ge=1, le=1_000_000)]] = {}
    pod_sysctls: tuple[str, ...] = Field(default=(), description="sysctls pods may set (safe or namespaced)")
    node_sysctls: dict[str, Annotated[str, Field(min_length=1, pattern=_SYSCTL_VALUE)]] = Field(
        default={}, description="node-level sysctls and their values")
    max_unavailable: Annotated[int | str, PlainValidator(_nodes_or_share)] = Field(
        default=1, description="OpenShift: nodes the Machine Config Operator reboots at once")

    @model_validator(mode="after")
    def _check(self) -> NodeProfileConfig:
        if self.cpu_manager_policy == "none" and self.topology_manager_policy != "none":
            raise ValueError("topologyManagerPolicy needs cpuManagerPolicy static to align CPUs with GPUs; "
                             "set cpuManagerPolicy: static or topologyManagerPolicy: none")
        return self

    @property
    def reserved(self) -> set[int]:
        return parse_cpuset(self.reserved_cpus)

    @property
    def hugepages_mib(self) -> int:
        return sum(HUGEPAGE_SIZES_MIB[size] * count for size, count in self.hugepages.items())

    def check_sysctls(self, kubernetes_version: str) -> None:
        """Each sysctl in its class: pods set safe and namespaced ones, only the node sets node-level ones."""
        for name in self.pod_sysctls:
            if not sysctls.is_name(name):
                raise ValueError(f"podSysctls: {name!r} is not a sysctl name (dotted, lowercase, e.g. "
                                 "net.core.somaxconn; a trailing * for a namespaced prefix)")
            if sysctls.classify(name, kubernetes_version) == "node":
                raise ValueError(f"podSysctls: {name!r} is node-level (not namespaced), so no pod may set it; "
                                 "move it to nodeSysctls with its value")
        for name in self.node_sysctls:
            if not sysctls.is_name(name) or name.endswith("*"):
                raise ValueError(f"nodeSysctls: {name!r} is not a sysctl name (dotted, lowercase, e.g. "
                                 "vm.max_map_count)")
            kind = sysctls.classify(name, kubernetes_version)
            if kind != "node":
                where = "any pod may set it" if kind == "safe" else "pods set it in their own namespace"
                raise ValueError(f"nodeSysctls: {name!r} is namespaced ({where}), so the node's value would not "
                                 "reach pods; list it in podSysctls and set it in the pod's securityContext")

    def check_instance(self, instance: InstanceType) -> None:
        """Reserved CPUs among the type's vCPUs, leaving some to pods; hugepages within its memory."""
        reserved = self.reserved
        if max(reserved) >= instance.vcpus or len(reserved) >= instance.vcpus:
            raise ValueError(f"profile.reservedCpus {self.reserved_cpus!r} does not fit the {instance.vcpus} vCPUs "
                             f"(0-{instance.vcpus - 1}) of the instance type, leaving CPUs to pods; reserve fewer")
        limit = int(instance.memory_mib * MAX_HUGEPAGES_SHARE)
        if self.hugepages_mib > limit:
            raise ValueError(f"profile.hugepages take {self.hugepages_mib} MiB, over {int(MAX_HUGEPAGES_SHARE * 100)}% "
                             f"of the instance type's {instance.memory_mib} MiB ({limit} MiB); declare fewer pages")


class RollConfig(StrictModel):
    """Kubernetes: how an Auto Scaling Group replaces its nodes when its launch template changes (an instance refresh).

    Field meanings and AWS bounds: pulumi_aws autoscaling GroupInstanceRefreshPreferencesArgs (StartInstanceRefresh).
    Each node is drained before it terminates: the pool's termination lifecycle hook holds it for at most
    `drainTimeoutSeconds` (its heartbeat timeout, at most 7200 s) while the node termination handler drains it.
    """

    min_healthy_percentage: Int = Field(default=90, ge=0, le=100, description="capacity kept in service")
    max_healthy_percentage: Int = Field(default=100, ge=100, le=200, description="over 100: launch before terminate")
    checkpoints: tuple[Annotated[Int, Field(ge=1, le=100)], ...] = Field(
        default=(25, 50, 100), min_length=1, description="percentages replaced before each pause; ends at 100")
    checkpoint_delay_seconds: Int = Field(default=600, ge=0, le=172_800, description="pause at each checkpoint")
    instance_warmup_seconds: Int = Field(default=300, ge=0, le=3600, description="a new node's time to become ready")
    drain_timeout_seconds: Int = Field(default=1800, ge=60, le=7200, description="longest a node's drain may take")
    auto_rollback: StrictBool = Field(default=False, description="AWS rolls back to the previous template if it fails")

    @model_validator(mode="after")
    def _check(self) -> RollConfig:
        points = self.checkpoints
        if list(points) != sorted(set(points)) or points[-1] != 100:
            raise ValueError(f"checkpoints {list(points)} must rise strictly and end at 100 (every node replaced), "
                             "e.g. [25, 50, 100]")
        if not 0 < self.max_healthy_percentage - self.min_healthy_percentage <= 100:
            raise ValueError(f"maxHealthyPercentage {self.max_healthy_percentage} must exceed minHealthyPercentage "
                             f"{self.min_healthy_percentage} by 1 to 100 (AWS), or no node can be replaced")
        return self


_DURATION = r"^(([0-9]+(s|m|h))+|Never)$"  # Karpenter's NillableDuration (pkg/apis/v1/nodepool.go)
_GO_DURATION_NS = 2**63 - 1  # Go's time.ParseDuration: an int64 of nanoseconds, or "invalid duration"
MIN_EXPIRE_AFTER_S = 3600  # a GPU node boots and loads its driver for minutes before it runs a job
AWS_ZONE_LETTERS = "abcdef"  # an availability zone is its region and a letter; none past f (us-east-1 has six)


def _seconds(duration: str) -> int | None:
    """The seconds of a duration of the _DURATION format; None for Never."""
    units = {"s": 1, "m": 60, "h": 3600}
    return None if duration == "Never" else sum(int(count) * units[unit]
                                                for count, unit in re.findall(r"([0-9]+)([smh])", duration))


def _go_duration(duration: str) -> str:
    seconds = _seconds(duration)
    if seconds is not None and seconds * 10**9 > _GO_DURATION_NS:
        raise ValueError(f"{duration!r} is longer than Karpenter can read (Go's durations end at about 2562047h); "
                         "write a shorter duration, or Never")
    return duration


class KarpenterPoolConfig(StrictModel):
    """Kubernetes on AWS: the pool is a Karpenter NodePool and EC2NodeClass; Karpenter launches its nodes for pending
    pods, up to maxReplicas, and replaces them by drift when the image changes (components/placements/karpenter.py)."""

    capacity_types: tuple[Literal["on-demand", "spot", "reserved"], ...] = Field(
        default=("on-demand",), min_length=1, description="karpenter.sh/capacity-type values nodes may have")
    zones: tuple[Annotated[str, Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$")], ...] = Field(
        default=(), description="availability zones nodes may launch in; none: every zone of the selected subnets")
    consolidation: Literal["WhenEmpty", "WhenEmptyOrUnderutilized"] = Field(default="WhenEmpty", description=(
        "WhenEmpty: a node goes only once no pod runs on it; WhenEmptyOrUnderutilized also moves running jobs"))
    consolidate_after: Annotated[str, AfterValidator(_go_duration)] = Field(default="10m", pattern=_DURATION,
                                   description="how long a node stays empty (or underused) before it goes")
    disruption_budget: str = Field(default="1", pattern=r"^((100|[0-9]{1,2})%|[0-9]+)$",
                                   description="nodes (or a percentage) disrupted at once, drift replacement included")
    expire_after: Annotated[str, AfterValidator(_go_duration)] = Field(
        default="Never", pattern=_DURATION, description="replace every node this long after it launched; Never: keep it")

    @model_validator(mode="after")
    def _check_expiry(self) -> KarpenterPoolConfig:
        seconds = _seconds(self.expire_after)
        if seconds is not None and seconds < MIN_EXPIRE_AFTER_S:
            raise _field_error(("expireAfter",), (
                f"{self.expire_after!r} would replace each node about as soon as it has loaded its GPU driver, or "
                f"as it launches; use at least {MIN_EXPIRE_AFTER_S // 3600}h (e.g. 720h), or Never"))
        return self


class BringYourOwnConfig(StrictModel):
    """Nodes that join the cluster by other means (bare metal, a managed node group, another tool): the stack
    provisions nothing for them, declares their driver, checks live that they carry the GPU taint, and counts them."""

    node_selector: dict[Annotated[str, AfterValidator(_label_key)], Annotated[str, AfterValidator(_label_value)]] = \
        Field(min_length=1, description="labels that select the pool's nodes, and no other node")
    gpu_model: Annotated[str, AfterValidator(_label_value)] = Field(
        min_length=1, description="the GPU as GPU feature discovery names it (nvidia.com/gpu.product)")
    gpus_per_node: Int = Field(ge=1, le=64, description="physical GPUs in each node")


# Settings of pools this stack provisions, which a bring-your-own pool cannot have.
_PROVISIONING_FIELDS = ("instance_type", "image", "availability_zone", "root_volume_gib", "min_replicas",
                        "max_replicas", "profile", "fabric", "subnet_id", "roll", "retired", "karpenter")
# Settings of an Auto Scaling Group or MachineSet pool that a Karpenter pool does not take, and what it takes instead.
_NOT_KARPENTER = {
    "roll": "a Karpenter pool rolls by drift, karpenter.disruptionBudget nodes at a time: set that instead",
    "availability_zone": "set karpenter.zones instead",
    "subnet_id": "set karpenter.zones instead (subnets are selected by cluster.karpenter.subnetTags)",
    "fabric": "EFA pools need a cluster placement group in one subnet, which this platform sets up for Auto Scaling "
              "Group pools only: remove karpenter to make it one",
    "profile": "Karpenter writes a Karpenter pool's boot script, which a node profile tunes on Auto Scaling Group pools "
               "only: remove karpenter to make it one",
    "time_slicing_replicas": "Karpenter launches a node for a pending pod only from what its instance types offer, and "
                             "EC2's offer nvidia.com/gpu, not shares (aws/karpenter-provider-aws instancetype/types.go "
                             "computeCapacity): share GPUs on an Auto Scaling Group pool",
    "mig_layout": "Karpenter launches a node for a pending pod only from what its instance types offer, and EC2's offer "
                  "nvidia.com/gpu, not MIG slices (aws/karpenter-provider-aws instancetype/types.go computeCapacity): "
                  "slice GPUs on an Auto Scaling Group pool",
}


class NodePoolConfig(StrictModel):
    """A pool of identical GPU nodes booting one image, hence one kernel."""

    name: Annotated[str, _dns_label(30)]
    bring_your_own: BringYourOwnConfig | None = Field(
        default=None, description="Kubernetes: nodes from elsewhere, selected by labels; nothing is provisioned")
    karpenter: KarpenterPoolConfig | None = Field(
        default=None, description="Kubernetes on AWS: a Karpenter NodePool instead of an Auto Scaling Group")
    instance_type: str | None = None
    replicas: Int = Field(ge=0, le=MAX_POOL_NODES)
    min_replicas: Int = Field(default=0, ge=0, le=MAX_POOL_NODES)
    max_replicas: Int | None = Field(default=None, ge=0, le=MAX_POOL_NODES)
    os: str | None = None
    kernel: str | None = None
    image: str | None = Field(default=None, pattern=r"^ami-[0-9a-f]{8,17}$")
    availability_zone: str | None = Field(default=None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]([a-z]|(-[a-z0-9]+)+)$",
                                          description="OpenShift: the zone of the pool's machines, e.g. us-east-1a")
    root_volume_gib: Int = Field(default=200, ge=50, le=16384)
    profile: NodeProfileConfig | None = Field(default=None, description="node tuning; none: the image's defaults")
    fabric: Literal["efa"] | None = Field(default=None, description="Kubernetes: EFA interfaces for collectives")
    time_slicing_replicas: Int | None = Field(default=None, ge=2, le=64, description=(
        "share each GPU of the pool between this many pods, advertised as nvidia.com/gpu.shared (one per "
        "container); unset: whole GPUs"))
    mig_layout: str | dict[str, Annotated[Int, Field(ge=1, le=7)]] | None = Field(default=None, description=(
        "cut each GPU into MIG slices by this layout of NVIDIA's MIG manager (e.g. all-1g.10gb, all-balanced), or by "
        "the MIG devices of one GPU (e.g. {3g.40gb: 1, 1g.10gb: 4}), advertised as nvidia.com/mig-<profile>; unset: "
        "whole GPUs"))
    dedicated_to: tuple[str, ...] | None = Field(default=None, min_length=1, description=(
        "tenants the pool is reserved for: its nodes carry a second taint only their pods may tolerate"))
    subnet_id: str | None = Field(default=None, pattern=r"^subnet-[0-9a-f]{8,17}$",
                                  description="Kubernetes: the one subnet (one zone) of an EFA pool")
    roll: RollConfig = Field(default=RollConfig(), description="Kubernetes: how an image change replaces the nodes")
    retired: StrictBool = Field(default=False,
                                description="unprotect the pool's machines so a later change may remove it")

    # What an entry usually needs (a pool this stack provisions), for messages about a missing one.
    usual_keys: ClassVar[tuple[str, ...]] = ("name", "instanceType", "replicas", "image")

    @model_validator(mode="after")
    def _check(self) -> NodePoolConfig:
        if self.bring_your_own is not None:
            provisioned = [to_camel(field) for field in _PROVISIONING_FIELDS if field in self.model_fields_set]
            if provisioned:
                raise ValueError(f"{', '.join(provisioned)}: a bringYourOwn pool's nodes are provisioned outside this "
                                 "stack, which sets only its replicas (node count), os, kernel, "
                                 "timeSlicingReplicas, migLayout and dedicatedTo; remove them")
        else:
            missing = [to_camel(field) for field in ("instance_type", "image") if getattr(self, field) is None]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required: the AWS instance type and image (AMI) of the "
                                 "pool's machines, or bringYourOwn for nodes provisioned elsewhere")
            if self.instance_type not in INSTANCE_TYPES:
                close = difflib.get_close_matches(self.instance_type, INSTANCE_TYPES, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(INSTANCE_TYPES))}"
                raise ValueError(f"instanceType {self.instance_type!r} is not a known GPU instance type; {hint}")
        if self.os is not None:
            # Whether a pool may or must set os and kernel depends on the flavor: StackConfig checks that.
            node_os = NODE_OSES.get(self.os)
            if node_os is not None and node_os.openshift:
                raise ValueError(f"os {self.os!r} is an OpenShift node OS: OpenShift pools leave os and kernel out "
                                 "(nodes run the kernel of cluster.release); Kubernetes pools use one of "
                                 f"{', '.join(KUBERNETES_OSES)}")
            if node_os is None:
                raise ValueError(f"os {self.os!r} is not supported; use one of {', '.join(KUBERNETES_OSES)}")
            if self.kernel is not None:
                _check_kernel(self.kernel, self.os, f"a {self.os}")
        if self.max_replicas is not None and not self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError("replicas must lie within minReplicas..maxReplicas")
        if self.min_replicas > self.replicas:
            raise ValueError("minReplicas must not exceed replicas")
        if self.profile is not None:
            self.profile.check_instance(self.instance)
        self._check_partitioning()
        if self.fabric == "efa" and not self.instance.efa:
            capable = ", ".join(name for name, instance in INSTANCE_TYPES.items() if instance.efa)
            raise ValueError(f"fabric efa: instanceType {self.instance_type!r} has no EFA; use one of {capable} "
                             "or remove fabric")
        return self

    def karpenter_problem(self) -> tuple[str, str] | None:
        """(field, what is wrong and the fix) of a Karpenter pool's settings, or None: a maximum (its limit), no
        minimum, none of an Auto Scaling Group's or MachineSet's settings."""
        for field, fix in _NOT_KARPENTER.items():
            if getattr(self, field) is not None and field in self.model_fields_set:
                return to_camel(field), f"does not apply to a karpenter pool; {fix}"
        if self.min_replicas:
            return "minReplicas", ("a karpenter pool has no minimum: Karpenter launches nodes for pending pods and "
                                   "removes empty ones; set 0 or leave it out")
        if self.max_replicas is None:
            return "maxReplicas", ("is required for a karpenter pool: the most nodes Karpenter may launch (the "
                                   "NodePool's limits, and what quotas and Kueue count the pool at)")
        return None

    def _check_partitioning(self) -> None:
        """A pool shares its GPUs or slices them, not both; a MIG layout the pool's GPU can hold."""
        if len(set(self.dedicated_to or ())) != len(self.dedicated_to or ()):
            raise ValueError("dedicatedTo names a tenant twice; list each once")
        if self.mig_layout is None:
            return
        if self.time_slicing_replicas is not None:
            raise ValueError("timeSlicingReplicas and migLayout: a pool shares its GPUs by time or slices them with "
                             "MIG, not both; keep one (or make two pools)")
        model = self.instance.gpu_model
        layouts = layouts_for(model)
        if not layouts:
            capable = ", ".join(name for name, instance in INSTANCE_TYPES.items() if layouts_for(instance.gpu_model))
            raise ValueError(f"migLayout {self.mig_layout!r}: the pool's GPU {model} has no MIG; share it with "
                             f"timeSlicingReplicas instead, or use a MIG-capable type ({capable})")
        if isinstance(self.mig_layout, dict):
            problem = custom_layout_problem(model, self.instance.gpu_memory_gib, self.mig_layout)
            if problem:
                raise ValueError(f"migLayout {self.mig_layout}: {problem}; its profiles are "
                                 f"{', '.join(profiles_of(model))}")
        elif self.mig_layout not in layouts:
            offered = ", ".join(f"{name} ({', '.join(f'{count}x {profile}' for profile, count in devices.items())})"
                                for name, devices in layouts.items())
            raise ValueError(f"migLayout {self.mig_layout!r} is not a layout a {model} can hold; its profiles are "
                             f"{', '.join(profiles_of(model))}, in the layouts {offered}; or give the MIG devices of "
                             "one GPU, e.g. {" + f"{profiles_of(model)[0]}: 1" + "}")

    @property
    def partitioning(self) -> Partitioning:
        """A custom MIG layout is named after the pool and its contents (the label its nodes carry, and its entry in
        the stack's own mig-parted config): an edit is a new name, so it reaches the nodes as a layout change."""
        if isinstance(self.mig_layout, dict):
            return Partitioning(mig_layout=custom_layout_name(self.name, self.mig_layout),
                                mig_devices=tuple(sorted(self.mig_layout.items())))
        return Partitioning(shares=self.time_slicing_replicas, mig_layout=self.mig_layout)

    @property
    def advertised_per_node(self) -> dict[str, int]:
        """What the device plugin advertises on one node, by extended resource (fleet.partitioning)."""
        return self.partitioning.advertised(self.instance.gpu_model, self.instance.gpus)

    @property
    def advertised(self) -> dict[str, int]:
        """What the pool's nodes advertise together at its counted size, by extended resource."""
        return {name: count * self.counted_nodes for name, count in self.advertised_per_node.items()}

    @property
    def instance(self) -> InstanceType:
        """The machine: an AWS instance type, or what a bring-your-own pool declares of its nodes' GPUs."""
        if self.bring_your_own is not None:
            return InstanceType(self.bring_your_own.gpu_model, self.bring_your_own.gpus_per_node, 0, 0, 0)
        return INSTANCE_TYPES[self.instance_type]

    @property
    def kernel_target(self) -> KernelTarget | None:
        """Kubernetes: the (os, kernel) the pool's image boots."""
        return KernelTarget(self.os, self.kernel) if self.os and self.kernel else None

    @property
    def counted_nodes(self) -> int:
        """The nodes quotas, Kueue and the capacity policy count: a Karpenter pool's limit (it launches nodes for
        pending pods up to it), any other pool's configured size."""
        return self.max_replicas if self.karpenter is not None else self.replicas

    @property
    def gpu_capacity(self) -> int:
        return self.counted_nodes * self.instance.gpus

    @property
    def autoscaler_min(self) -> int:
        """Fewest nodes: a bring-your-own pool has the nodes it has, nothing scales it."""
        return self.replicas if self.bring_your_own is not None else self.min_replicas

    @property
    def autoscaler_max(self) -> int:
        return self.replicas if self.max_replicas is None else self.max_replicas

    def zone(self, cluster: ClusterConfig) -> str:
        """The availability zone of the pool's machines: the one set, or the region's first."""
        return self.availability_zone or f"{cluster.region}a"

    def machine_set_name(self, cluster: ClusterConfig) -> str:
        """OpenShift MachineSet name; its machines carry it as a label value, so it has at most 63 characters."""
        return f"{cluster.infrastructure_id}-gpu-{self.name}-{self.zone(cluster)}"


class DriverConfig(StrictModel):
    """The NVIDIA data-center driver: branch and version, where its images live, and how nodes take a new one."""

    branch: str = Field(default="580", pattern=r"^[0-9]{3}$")
    version: str = Field(default="580.95.05", pattern=r"^[0-9]{3}\.[0-9]+(\.[0-9]+)?$")
    repository: str = Field(default=labels.NVIDIA_REGISTRY, pattern=r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$")
    precompiled: StrictBool | None = Field(default=None, description="precompiled images (default on Kubernetes); else "
                                                               "built on the node (OpenShift: Driver Toolkit)")
    max_parallel_upgrades: Int = Field(default=1, ge=1, le=100)
    max_unavailable: str = Field(default="25%", pattern=r"^([1-9][0-9]{0,3}|[1-9][0-9]?%|100%)$")
    drain: StrictBool = Field(default=False, description="drain every pod off a node, not only GPU pods, before its "
                                                   "driver is reloaded")

    @model_validator(mode="after")
    def _check(self) -> DriverConfig:
        if "version" in self.model_fields_set and not self.version.startswith(f"{self.branch}."):
            raise ValueError(f"version {self.version!r} is not on branch {self.branch!r}; set both together")
        return self

    def check_for(self, precompiled: bool) -> None:
        """A precompiled driver is the newest build of its branch NVIDIA publishes for each kernel (the operator's
        tag rule): a version set for one would change nothing, silently. A driver built on the node is one version."""
        if precompiled and "version" in self.model_fields_set:
            raise ValueError("driver.version changes nothing for precompiled drivers, which run the newest build of "
                             "driver.branch published for each kernel; remove version, or set driver.precompiled: "
                             "false to build that version on the nodes")
        if not precompiled and not self.version.startswith(f"{self.branch}."):
            raise ValueError(f"driver.version: a driver built on the node is one version of branch {self.branch!r}; "
                             f"set driver.version to it (e.g. {self.branch}.xx.yy)")

    def release(self, flavor: str) -> DriverRelease:
        """The driver images: precompiled by default on Kubernetes, built on the node (Driver Toolkit) on OpenShift."""
        precompiled = self.precompiled if self.precompiled is not None else flavor == "kubernetes"
        return DriverRelease(self.repository, self.branch, self.version, precompiled)


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise ValueError(f"{value!r} is not a network in CIDR form with its host bits zero, e.g. 10.20.0.0/24") from None
    return value


class IpamConfig(StrictModel):
    """Addresses on a secondary network: whereabouts (cluster-wide, no duplicates across nodes) or host-local."""

    type: Literal["whereabouts", "host-local"] = "whereabouts"
    range: Annotated[str, AfterValidator(_cidr)]
    gateway: str | None = None

    @model_validator(mode="after")
    def _check(self) -> IpamConfig:
        if self.gateway is not None:
            try:
                inside = ipaddress.ip_address(self.gateway) in ipaddress.ip_network(self.range)
            except ValueError:
                inside = False
            if not inside:
                raise ValueError(f"gateway {self.gateway!r} must be an address inside range {self.range!r}")
        return self

    @property
    def subnet(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.range)


class TenantNetworkConfig(StrictModel):
    """A secondary network a tenant's pods may attach to (Multus): macvlan on a host interface, or SR-IOV."""

    name: Annotated[str, _dns_label(63)]
    type: Literal["macvlan", "sriov"]
    master: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9._-]{1,15}$", description="macvlan: host interface")
    mode: Literal["bridge", "private", "vepa", "passthru"] = "bridge"
    resource_name: str | None = Field(default=None, pattern=r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$",
                                      description="sriov: the device plugin resource of the VFs")
    vlan: Int | None = Field(default=None, ge=0, le=4094)
    ipam: IpamConfig
    retired: StrictBool = Field(default=False, description="unprotect the attachment so a later change may remove it")

    @model_validator(mode="after")
    def _check(self) -> TenantNetworkConfig:
        if self.type == "macvlan" and (self.master is None or self.resource_name or self.vlan is not None):
            raise ValueError("a macvlan network needs master (the host interface, e.g. ens5) and takes no "
                             "resourceName or vlan")
        if self.type == "sriov" and (self.resource_name is None or self.master):
            raise ValueError("an sriov network needs resourceName (the SR-IOV device plugin resource, e.g. "
                             "openshift.io/mlxnics) and takes no master")
        return self

    @property
    def segment(self) -> str:
        """The layer-2 segment the network's pods share: its host interface, or its VFs' resource and VLAN."""
        if self.type == "macvlan":
            return f"host interface {self.master}"
        return f"SR-IOV resource {self.resource_name} on {f'VLAN {self.vlan}' if self.vlan is not None else 'no VLAN'}"


class TenantQueueConfig(StrictModel):
    """Tenancy mode `queue`: where a tenant's guaranteed GPUs live and how it shares them (Kueue ClusterQueue)."""

    pools: tuple[str, ...] | None = Field(default=None, min_length=1, description=(
        "pools whose GPUs the tenant may use, its guarantee taken from them in this order; unset: every pool"))
    borrowing_limit: Int | None = Field(default=None, ge=0, le=MAX_TENANT_GPUS, description=(
        "GPUs it may borrow beyond its guarantee in each pool while others leave theirs idle; unset: no limit"))
    lending_limit: Int | None = Field(default=None, ge=0, le=MAX_TENANT_GPUS, description=(
        "GPUs of its guarantee in each pool it may lend out while idle; unset: all of them"))
    weight: Int = Field(default=1, ge=0, le=1000, description="fair-sharing weight against the other tenants")


class TenancyConfig(StrictModel):
    """How tenants share the GPUs: a hard quota each (`quota`) or guarantees in a Kueue cohort (`queue`)."""

    mode: Literal["quota", "queue"] = "quota"
    cohort: Annotated[str, _dns_label(63)] = "gpu-tenants"
    cert_manager: Literal["install", "existing"] = Field(
        default="install", description="OpenShift, queue mode: install the cert-manager Operator the Red Hat build "
                                       "of Kueue needs, or use the cert-manager the cluster already runs")


class TenantConfig(StrictModel):
    """A team with its own namespace and a GPU quota."""

    name: Annotated[str, _dns_label(50), AfterValidator(_tenant_namespace)]
    gpus: Int = Field(default=0, ge=0, le=MAX_TENANT_GPUS, description="whole GPUs (nvidia.com/gpu)")
    gpu_shares: Int = Field(default=0, ge=0, le=MAX_TENANT_GPUS, description=(
        "time-sliced GPU shares (nvidia.com/gpu.shared) of the pools that share their GPUs"))
    mig_slices: dict[str, Annotated[Int, Field(ge=0, le=MAX_TENANT_GPUS)]] = Field(default_factory=dict, description=(
        "MIG slices by profile (e.g. 1g.10gb: 7; nvidia.com/mig-<profile>) of the pools with a MIG layout"))
    priority_class: Literal["gpu-high", "gpu-low"] = labels.LOW_PRIORITY_CLASS
    group: Annotated[str, AfterValidator(_tenant_group)] | None = Field(default=None, min_length=1)
    retired: StrictBool = Field(default=False, description="unprotect the namespace so a later change may remove it")
    cpu: str = Field(default="64", pattern=_CPU, description="quota on the sum of CPU requests")
    memory: str = Field(default="256Gi", pattern=_MEMORY, description="quota on the sum of memory requests")
    pods: Int = Field(default=200, ge=1, le=10_000)
    networks: tuple[TenantNetworkConfig, ...] = Field(default=(), description="secondary networks (Multus)")
    queue: TenantQueueConfig = Field(default=TenantQueueConfig(), description="tenancy.mode queue: its sharing")

    # What an entry usually has, for messages about a missing one.
    usual_keys: ClassVar[tuple[str, ...]] = ("name", "gpus")

    @model_validator(mode="after")
    def _check(self) -> TenantConfig:
        for profile in self.mig_slices:
            if not _MIG_PROFILE.fullmatch(profile):
                raise ValueError(f"migSlices: {profile!r} is not a MIG profile; name one as the device plugin does "
                                 "after nvidia.com/mig-, e.g. 1g.10gb or 3g.40gb")
        names = [network.name for network in self.networks]
        if len(set(names)) != len(names):
            raise ValueError("networks: each network name may appear once")
        return self

    @property
    def rbac_group(self) -> str:
        return self.group or self.name

    @property
    def grants(self) -> dict[str, int]:
        """What the tenant was given, by extended resource: whole GPUs always (0 is a grant of none), the rest when
        given."""
        return {labels.GPU_RESOURCE: self.gpus, **({SHARED_GPU: self.gpu_shares} if self.gpu_shares else {}),
                **{mig_resource(profile): count for profile, count in sorted(self.mig_slices.items()) if count}}


class DevicePluginConfig(StrictModel):
    """Device plugin options. `timeSlicingReplicas` was the whole fleet's; it is each pool's now (refused here)."""

    time_slicing_replicas: Int | None = Field(default=None, ge=2, le=64)

    @model_validator(mode="after")
    def _check(self) -> DevicePluginConfig:
        if self.time_slicing_replicas is not None:
            raise ValueError("timeSlicingReplicas is a pool's choice: move it to nodePools[].timeSlicingReplicas of "
                             "the pools that share their GPUs (the others then take multi-GPU requests)")
        return self


def _image():
    return Field(default=None, pattern=r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+"
                                       r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$")


class ImagesConfig(StrictModel):
    """Overrides of operand images; each one unset is the image the pinned GPU Operator (or NFD) release ships."""

    nfd: str | None = _image()
    toolkit: str | None = _image()
    device_plugin: str | None = _image()
    dcgm_exporter: str | None = _image()
    validator: str | None = _image()
    driver_manager: str | None = _image()
    mig_manager: str | None = _image()

    def operands(self) -> dict[str, str]:
        """The GPU Operator operand images set here, by ClusterPolicy section (toolkit, devicePlugin, ...).

        GPU feature discovery ships in the device plugin's image (k8s-device-plugin), so it follows that override.
        """
        images = {to_camel(name): image for name, image in self.model_dump().items()
                  if image is not None and name != "nfd"}
        if "devicePlugin" in images:
            images["gfd"] = images["devicePlugin"]
        return images


class ChartsConfig(StrictModel):
    """Where the pinned Helm charts come from (Kubernetes): their public repositories, or one mirror that serves the
    same charts at the same versions (an air-gapped cluster's Harbor, ChartMuseum or OCI registry)."""

    mirror: str | None = Field(default=None, pattern=r"^(oci|https?)://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?$",
                               description="a Helm repository URL (https://...) or an OCI path (oci://host/path)")


class MonitoringConfig(StrictModel):
    """Whether the cluster runs the Prometheus Operator (built into OpenShift; optional on Kubernetes)."""

    prometheus_operator: StrictBool | None = Field(default=None, description="create ServiceMonitor and PrometheusRule")
    rule_labels: dict[Annotated[LabelKey, AfterValidator(_rule_label)], LabelValue] = Field(
        default_factory=dict, description="labels the Prometheus that should load the alerts and scrape the exporter "
                                          "selects PrometheusRules and ServiceMonitors by (e.g. release: <name>)")

    def enabled(self, flavor: str) -> bool:
        return self.prometheus_operator if self.prometheus_operator is not None else flavor == "openshift"


def docker_config_json(secret: SecretStr) -> SecretStr:
    """A `.dockerconfigjson` document: {"auths": {registry: {"auth": ...} | {"username", "password"}}}."""
    try:
        document = json.loads(secret.get_secret_value())
    except (ValueError, RecursionError):  # a document nested thousands deep is not one either
        document = None
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict) or not auths or not all(
            isinstance(entry, dict) and ("auth" in entry or {"username", "password"} <= set(entry))
            for entry in auths.values()):
        # The value is never shown: it is a credential.
        raise ValueError('is not a .dockerconfigjson document ({"auths": {"<registry>": {"auth": "<base64>"}}}); '
                         "set it from the file: pulumi config set --secret registryPullSecret < config.json")
    return secret


class StackConfig(StrictModel):
    """Everything one environment declares."""

    cluster: ClusterConfig
    node_pools: tuple[NodePoolConfig, ...] = Field(min_length=1)
    driver: DriverConfig = DriverConfig()
    tenants: tuple[TenantConfig, ...] = ()
    tenancy: TenancyConfig = TenancyConfig()
    device_plugin: DevicePluginConfig = DevicePluginConfig()
    images: ImagesConfig = ImagesConfig()
    charts: ChartsConfig = ChartsConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    registry_pull_secret: Annotated[SecretStr, AfterValidator(docker_config_json)] | None = None
    preflight: StrictBool = True

    @model_validator(mode="after")
    def _check(self) -> StackConfig:
        for field, items in (("nodePools", self.node_pools), ("tenants", self.tenants)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{field}: name {item.name!r} appears twice; names must be unique")
                seen.add(item.name)
        openshift = self.cluster.flavor == "openshift"
        self._check_placement()
        for pool in self.node_pools:
            if openshift and (pool.os or pool.kernel):
                raise ValueError(f"nodePools: pool {pool.name!r} sets os or kernel, but OpenShift nodes run the kernel "
                                 "of the cluster release (a pool's image is only its boot image); remove them and set "
                                 "cluster.release and cluster.kernel")
            if openshift and "roll" in pool.model_fields_set:
                raise ValueError(f"nodePools: pool {pool.name!r} sets roll, which applies to Kubernetes pools (an Auto "
                                 "Scaling Group's instance refresh); on OpenShift a MachineSet's template reaches new "
                                 "machines only and kernels roll with the release: remove roll")
            if not openshift and pool.kernel_target is None:
                missing = " and ".join(name for name in ("os", "kernel") if getattr(pool, name) is None)
                raise ValueError(f"nodePools: pool {pool.name!r} needs os and kernel: the OS and kernel its image "
                                 f"boots; set {missing}")
            self._check_tuning(pool)
            if pool.availability_zone and not pool.availability_zone.startswith(self.cluster.region):
                raise ValueError(f"nodePools: pool {pool.name!r} availabilityZone {pool.availability_zone!r} is not "
                                 f"in cluster.region {self.cluster.region!r}; use one of its zones, e.g. "
                                 f"{self.cluster.region}a")
            if openshift and len(name := pool.machine_set_name(self.cluster)) > MAX_LABEL_VALUE:
                raise ValueError(
                    f"nodePools: pool {pool.name!r} makes the MachineSet name {name!r} {len(name)} characters long, "
                    f"over the {MAX_LABEL_VALUE} of a label value; shorten the pool name"
                )
        for index, tenant in enumerate(self.tenants):
            if tenant.name in self.cluster.trusted_namespaces:
                raise _field_error(("tenants", index, "name"), (
                    f"{tenant.name!r} is in cluster.trustedNamespaces, which the GPU guard leaves out; remove it "
                    "there or choose another team name"))
            if tenant.name in self.cluster.scrapers:
                raise _field_error(("tenants", index, "name"), (
                    f"{tenant.name!r} is a monitoring namespace (cluster.monitoringNamespaces: its Prometheus may "
                    "scrape every tenant); choose another team name"))
        self._check_networks_carry_traffic()
        self._check_network_isolation()
        self._check_tenancy()
        self._check_partitions()
        self.driver.check_for(self.driver_release.precompiled)
        if self.images.nfd and "@" in self.images.nfd:
            raise ValueError("images.nfd: the NFD chart takes a tag, not a digest; use registry/repository:tag")
        if self.images.nfd and openshift:
            raise ValueError("images: nfd applies to Kubernetes; on OpenShift the NFD operator runs the NFD image "
                             "of the cluster release")
        if self.charts.mirror and openshift:
            raise ValueError("charts.mirror applies to Kubernetes: on OpenShift the operators come through OLM from "
                             "the cluster's catalogs (mirror those with oc-mirror); remove it")
        return self

    def _check_placement(self) -> None:
        """Bring-your-own pools on Kubernetes only; what Auto Scaling Group pools need, when the stack has one."""
        cluster = self.cluster
        for index, pool in enumerate(self.node_pools):
            if pool.bring_your_own is not None and cluster.flavor == "openshift":
                raise _field_error(("nodePools", index, "bringYourOwn"), (
                    "applies to Kubernetes clusters; OpenShift pools are MachineSets of this stack: remove it and "
                    "set instanceType and image"))
            if pool.karpenter is not None and cluster.flavor == "openshift":
                raise _field_error(("nodePools", index, "karpenter"), (
                    "applies to Kubernetes clusters on AWS; OpenShift pools are MachineSets, scaled by the cluster "
                    "autoscaler: remove it"))
            if pool.karpenter is not None and (problem := pool.karpenter_problem()):
                raise _field_error(("nodePools", index, problem[0]), problem[1])
            for number, zone in enumerate(pool.karpenter.zones if pool.karpenter is not None else ()):
                region, letter = zone[:-1], zone[-1]
                if region != cluster.region or letter not in AWS_ZONE_LETTERS:
                    problem = (f"is in {region}, not in cluster.region {cluster.region}" if region != cluster.region
                               else f"is not an availability zone of {region}")
                    raise _field_error(("nodePools", index, "karpenter", "zones", number), (
                        f"{zone!r} {problem}; use zones of {cluster.region} (from {cluster.region}a to "
                        f"{cluster.region}{AWS_ZONE_LETTERS[-1]}, as the region has them)"))
            if pool.karpenter is not None and cluster.karpenter is None:
                raise _field_error(("cluster", "karpenter"), (
                    f"is required: pool {pool.name!r} is a Karpenter NodePool; set cluster.karpenter.nodeRole to the "
                    "IAM role of the nodes Karpenter launches"))
        if cluster.karpenter is not None and not self.karpenter_pools:
            raise _field_error(("cluster", "karpenter"), "configures Karpenter pools, and no pool is one; remove it")
        if cluster.flavor == "kubernetes" and self.aws_pools and not (
                cluster.subnet_ids and cluster.security_group_ids and cluster.instance_profile):
            missing = ", ".join(name for name in ("subnetIds", "securityGroupIds", "instanceProfile")
                                if not getattr(cluster, to_snake(name)))
            raise _field_error(("cluster",), (
                f"{missing} required: pool {self.aws_pools[0].name!r} is an Auto Scaling Group launched into them "
                "(set them, or make every pool bringYourOwn)"))
        brought = [(index, pool) for index, pool in enumerate(self.node_pools) if pool.bring_your_own is not None]
        for index, pool in brought:
            mine = pool.bring_your_own.node_selector.items()
            for _, other in brought:
                theirs = other.bring_your_own.node_selector.items()
                if other is not pool and theirs <= mine:
                    raise _field_error(("nodePools", index, "bringYourOwn", "nodeSelector"), (
                        f"every node it selects is also selected by pool {other.name!r} (its selector "
                        f"{dict(theirs)} is a subset), so a node would belong to two pools; give each pool a "
                        "label of its own"))
        if cluster.node_termination_handler_role and not self.aws_pools:
            raise _field_error(("cluster", "nodeTerminationHandlerRole"), (
                "drains Auto Scaling Group nodes, and no pool is one; remove it"))

    @property
    def aws_pools(self) -> tuple[NodePoolConfig, ...]:
        """Kubernetes pools this stack provisions as AWS resources: Auto Scaling Groups (every pool but bring-your-own
        and Karpenter's, which are Kubernetes objects)."""
        if self.cluster.flavor != "kubernetes":
            return ()
        return tuple(pool for pool in self.node_pools if pool.bring_your_own is None and pool.karpenter is None)

    @property
    def karpenter_pools(self) -> tuple[NodePoolConfig, ...]:
        return tuple(pool for pool in self.node_pools if pool.karpenter is not None)

    def _check_networks_carry_traffic(self) -> None:
        """Tenant networks only where their frames reach the wire: AWS drops the extra MAC addresses macvlan gives
        pods and exposes no SR-IOV functions, so a Multus network there attaches and carries nothing."""
        on_aws = [pool.name for pool in self.node_pools if pool.bring_your_own is None]
        for index, tenant in enumerate(self.tenants):
            if tenant.networks and on_aws:
                raise _field_error(("tenants", index, "networks"), (
                    f"{tenant.networks[0].type} network {tenant.networks[0].name!r} would carry no traffic: pools "
                    f"{', '.join(on_aws)} run on AWS, whose network drops the extra MAC addresses macvlan gives pods "
                    "and has no SR-IOV functions to hand out; use EFA for collectives on AWS (a Kubernetes pool's "
                    "fabric: efa), and tenant networks on a stack whose pools are all bringYourOwn"))

    def _check_tenancy(self) -> None:
        """Queue settings only in `queue` mode, naming pools that exist; `queue` only where Kueue is installed."""
        queue = self.tenancy.mode == "queue"
        red_hat_build = queue and self.cluster.flavor == "openshift"
        if red_hat_build and self.cluster.minor not in labels.KUEUE_OLM_MINORS:
            raise _field_error(("tenancy", "mode"), (
                f"queue needs the Red Hat build of Kueue, whose pinned {labels.KUEUE_OLM.csv} is not published "
                f"for OpenShift {self.cluster.minor} (only {', '.join(labels.KUEUE_OLM_MINORS)}); use quota"))
        if "cert_manager" in self.tenancy.model_fields_set and not red_hat_build:
            raise _field_error(("tenancy", "certManager"), (
                "applies to tenancy.mode queue on OpenShift, where the Red Hat build of Kueue needs cert-manager; "
                "remove it"))
        pools = [pool.name for pool in self.node_pools]
        for index, tenant in enumerate(self.tenants):
            if "queue" in tenant.model_fields_set and not queue:
                raise _field_error(("tenants", index, "queue"), (
                    "applies to tenancy.mode queue; set tenancy.mode: queue or remove it"))
            chosen = tenant.queue.pools or ()
            if len(set(chosen)) != len(chosen):
                raise _field_error(("tenants", index, "queue", "pools"), "names a pool twice; list each once")
            for name in chosen:
                if name not in pools:
                    raise _field_error(("tenants", index, "queue", "pools"), (
                        f"{name!r} is not a pool of nodePools; use one of {', '.join(pools)}"))

    def _check_partitions(self) -> None:
        """Dedicated pools name tenants of the stack; each kind a tenant is given is advertised by a pool it may
        use; a tenant's queue lists no pool dedicated to others."""
        names = [tenant.name for tenant in self.tenants]
        for index, pool in enumerate(self.node_pools):
            for owner in pool.dedicated_to or ():
                if owner not in names:
                    raise _field_error(("nodePools", index, "dedicatedTo"), (
                        f"{owner!r} is not a tenant of this stack; use one of {', '.join(names) or '(none yet)'}"))
        queued = self.tenancy.mode == "queue"
        for index, tenant in enumerate(self.tenants):
            listed = tenant.queue.pools if queued and tenant.queue.pools else None
            for name in tenant.queue.pools or ():
                pool = next(pool for pool in self.node_pools if pool.name == name)
                if not self.may_use(tenant, pool):
                    raise _field_error(("tenants", index, "queue", "pools"), (
                        f"{name!r} is dedicated to {', '.join(pool.dedicated_to)}; remove it, or add "
                        f"{tenant.name!r} to its dedicatedTo"))
            usable = [pool for pool in self.node_pools if self.may_use(tenant, pool)
                      and (listed is None or pool.name in listed)]
            offered = {name for pool in usable for name in pool.advertised_per_node}
            for name, amount in tenant.grants.items():
                if amount and name not in offered:
                    field, hint = _GRANT_FIELDS[kind_of(name).split()[0]]
                    raise _field_error(("tenants", index, field), (
                        f"{amount} {kind_of(name)}, but no pool this tenant may use advertises {name}; {hint}"))

    @staticmethod
    def may_use(tenant: TenantConfig, pool: NodePoolConfig) -> bool:
        """Whether a tenant's pods may run on a pool: any pool not dedicated, or one dedicated to it."""
        return pool.dedicated_to is None or tenant.name in pool.dedicated_to

    def _check_network_isolation(self) -> None:
        """No two tenants share a layer-2 segment (a macvlan host interface, or SR-IOV VFs of one resource on one
        VLAN) or an address range: NetworkPolicies do not reach Multus networks, so only separation isolates."""
        seen: list[tuple[str, TenantNetworkConfig]] = []
        for tenant in self.tenants:
            for network in tenant.networks:
                for owner, other in seen:
                    if owner == tenant.name:
                        continue
                    where = f"networks {owner}/{other.name} and {tenant.name}/{network.name}"
                    if network.segment == other.segment:
                        raise ValueError(f"tenants: {where} share {network.segment}, one layer-2 segment between "
                                         "two tenants; give each tenant its own interface or VLAN")
                    if network.ipam.subnet.overlaps(other.ipam.subnet):
                        raise ValueError(f"tenants: {where} overlap ({other.ipam.range}, {network.ipam.range}); "
                                         "give each tenant its own address range")
                seen.append((tenant.name, network))

    def _check_tuning(self, pool: NodePoolConfig) -> None:
        """A pool's profile and fabric against the flavor and the cluster's Kubernetes version."""
        openshift = self.cluster.flavor == "openshift"
        if pool.profile is not None:
            if not openshift and "max_unavailable" in pool.profile.model_fields_set:
                raise ValueError(f"nodePools: pool {pool.name!r} profile.maxUnavailable paces the Machine Config "
                                 "Operator's reboots on OpenShift; a Kubernetes pool rolls by instance refresh: "
                                 "remove it and set roll.minHealthyPercentage instead")
            try:
                pool.profile.check_sysctls(self.cluster.kubernetes_version)
            except ValueError as error:
                raise ValueError(f"nodePools: pool {pool.name!r} profile.{error}") from None
            if openshift and pool.profile.cpu_manager_policy != "static":
                raise ValueError(f"nodePools: pool {pool.name!r} profile.cpuManagerPolicy: OpenShift tunes pools with a "
                                 "PerformanceProfile, which always sets the static CPU manager; set static")
        if pool.fabric == "efa" and openshift:
            raise ValueError(f"nodePools: pool {pool.name!r} sets fabric efa, which this platform sets up on Kubernetes "
                             "pools only; remove it")
        if pool.subnet_id is not None and openshift:
            raise ValueError(f"nodePools: pool {pool.name!r} sets subnetId, a Kubernetes setting; OpenShift pools "
                             "use availabilityZone")
        if pool.fabric == "efa" and pool.subnet_id is None:
            raise ValueError(f"nodePools: pool {pool.name!r} sets fabric efa and needs subnetId: one of "
                             "cluster.subnetIds, since its cluster placement group lives in one availability zone")
        if pool.subnet_id is not None and pool.subnet_id not in self.cluster.subnet_ids:
            raise ValueError(f"nodePools: pool {pool.name!r} subnetId {pool.subnet_id!r} is not one of "
                             "cluster.subnetIds; pick one of them")

    @property
    def gpu_capacity(self) -> int:
        return sum(pool.gpu_capacity for pool in self.node_pools)

    def kernel_target(self, pool: NodePoolConfig) -> KernelTarget:
        """The kernel a pool's nodes run: its image's on Kubernetes, the cluster release's on OpenShift."""
        return self.cluster.kernel_target or pool.kernel_target

    @property
    def declared_kernels(self) -> set[KernelTarget]:
        return {self.kernel_target(pool) for pool in self.node_pools}

    @property
    def driver_release(self) -> DriverRelease:
        return self.driver.release(self.cluster.flavor)

    @property
    def prometheus_operator(self) -> bool:
        return self.monitoring.enabled(self.cluster.flavor)


# A grant's field by its kind's first word (fleet.partitioning.kind_of), and how to offer that kind.
_GRANT_FIELDS = {
    "whole": ("gpus", "give a pool whole GPUs (no timeSlicingReplicas or migLayout), or set gpus: 0"),
    "GPU": ("gpuShares", "set timeSlicingReplicas on a pool, or remove gpuShares"),
    "MIG": ("migSlices", "give a pool a migLayout with that profile, or remove it from migSlices"),
}

CONFIG_KEYS = {to_camel(name): name for name in StackConfig.model_fields}
SECRET_KEYS = frozenset({"registryPullSecret"})


def parse_stack_config(values: dict[str, Any]) -> StackConfig:
    """Validate the project's config values (camelCase key -> value); raise ConfigError naming the field."""
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], CONFIG_KEYS, n=1)
        hint = f"did you mean {PROJECT}:{close[0]}?" if close else f"known keys: {', '.join(CONFIG_KEYS)}"
        raise ConfigError(f"{PROJECT}:{unknown[0]}: unknown config key; {hint}")
    try:
        return StackConfig.model_validate(values)
    except ValidationError as error:
        raise ConfigError(capped(_describe(error))) from None


# The fix of each format a config value must have, by its pattern.
PATTERN_FIXES = {
    ClusterConfig.model_fields["release"].metadata[0].pattern: "write the release as 4.<minor>.<patch>, as "
    "`oc get clusterversion` prints it, e.g. 4.18.24",
    ClusterConfig.model_fields["nfd_operator_csv"].metadata[0].pattern: "write the CSV name as nfd.4.<minor>.<patch>-"
    "<12-digit build>, as the packagemanifest's currentCSV prints it",
    ClusterConfig.model_fields["region"].metadata[0].pattern: "write an AWS region code, e.g. us-east-1",
    r"^subnet-[0-9a-f]{8,17}$": "write a subnet ID, subnet- and 8 or 17 hex digits (aws ec2 describe-subnets)",
    r"^sg-[0-9a-f]{8,17}$": "write a security group ID, sg- and 8 or 17 hex digits (aws ec2 describe-security-groups)",
    r"^[A-Za-z0-9_+=,.@-]{1,128}$": "write the instance profile's name (not its ARN): at most 128 letters, digits "
    "and _+=,.@-",
    r"^[A-Za-z0-9_+=,.@-]{1,64}$": "write the IAM role's name (not its ARN): at most 64 letters, digits and _+=,.@-",
    _CPUSET: "write a cpuset list of CPU numbers and ranges, e.g. 0-1,48-49",
    _SYSCTL_VALUE: "write the plain value sysctl -w takes: numbers or words with single spaces between them, no "
    "quotes or shell characters",
    r"^ami-[0-9a-f]{8,17}$": "write an AMI ID, ami- and 8 or 17 hex digits (aws ec2 describe-images)",
    NodePoolConfig.model_fields["availability_zone"].metadata[0].pattern: "write an availability zone name of the "
    "cluster's region, e.g. us-east-1a",
    r"^[0-9]{3}$": "write the driver branch as its 3 digits, e.g. 580",
    r"^[0-9]{3}\.[0-9]+(\.[0-9]+)?$": "write the driver version as NVIDIA numbers it, e.g. 580.95.05",
    r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$": "write a registry host and repository path in lower case, without "
    "a tag, e.g. nvcr.io/nvidia",
    r"^([1-9][0-9]{0,3}|[1-9][0-9]?%|100%)$": "write a node count (1-9999) or a percentage (1%-100%), e.g. 25%",
    r"^[a-zA-Z0-9._-]{1,15}$": "write the host interface name as `ip link` shows it (at most 15 characters), e.g. ens5",
    r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$": "write the resource name the SR-IOV device plugin advertises for the VFs, "
    "<domain>/<name>",
    _CPU: "write whole cores (e.g. 64) or millicores (e.g. 500m)",
    _DURATION: "write a duration in hours, minutes and seconds, e.g. 10m or 720h, or Never",
    r"^((100|[0-9]{1,2})%|[0-9]+)$": "write a number of nodes (e.g. 1) or a percentage of them (e.g. 10%), quoted",
    r"^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]$": "write an availability zone name, e.g. us-east-1a",
    _MEMORY: "write a size in Mi, Gi or Ti, e.g. 256Gi",
    ChartsConfig.model_fields["mirror"].metadata[0].pattern: "write a Helm repository URL (https://charts.example."
    "com/stable) or an OCI path (oci://registry.example.com/charts), without credentials or a query",
    ImagesConfig.model_fields["nfd"].metadata[0].pattern: "write <registry>/<repository>:<tag> or "
    "<registry>/<repository>@sha256:<digest>, e.g. registry.k8s.io/nfd/node-feature-discovery:v0.17.3",
}


def _dotted(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker of a mapping's key, after the key itself
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


SHOWN_CHARACTERS = 80  # of a value an error quotes: enough to recognise it, never a page of it


def _shown(value: Any) -> str:
    """A value as a stack file writes it: null, true and false as YAML spells them, anything else quoted (cut to
    SHOWN_CHARACTERS)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):  # a URL's user:password is a credential: never shown
        value = re.sub(r"(?<=://)[^/@\s]*@", "***@", value)
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else f"{text[:SHOWN_CHARACTERS - 5]}...{text[-2:]}"


# The tag pydantic puts in an error's location for each member of a union (`str`, `dict[str,constrained-int]`):
# not a key of the stack file.
_UNION_TAG = re.compile(r"str|int|float|bool|none|[a-z-]+\[.*\]")
_KINDS = {"string_type": "text", "dict_type": "a mapping", "int_type": "a number", "list_type": "a list",
          "tuple_type": "a list", "bool_type": "true or false", "float_type": "a number"}


def _untagged(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(part for part in loc if not (isinstance(part, str) and _UNION_TAG.fullmatch(part)))


def _model_in(annotation: Any) -> type[StrictModel] | None:
    """The config model an annotation holds, itself or as the items of a tuple (`tuple[TenantConfig, ...] | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, StrictModel):
        return annotation
    return next((model for arg in get_args(annotation) if (model := _model_in(arg)) is not None), None)


def _field_at(loc: tuple[Any, ...]) -> FieldInfo | None:
    """The config field an error location names (list indexes step into the items); None past a mapping's keys."""
    model, field = StackConfig, None
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {info.alias or name: info for name, info in model.model_fields.items()} if model else {}
        if (field := fields.get(part)) is None:
            return None
        model = _model_in(field.annotation)
    return field


def _model_at(loc: tuple[Any, ...]) -> type[StrictModel] | None:
    """The config model of the mapping at `loc` (or of each item of a list there); None if it is not one."""
    if not loc:
        return StackConfig
    field = _field_at(loc)
    return _model_in(field.annotation) if field else None


def _keys_of(loc: tuple[Any, ...]) -> list[str]:
    """Every key the mapping at `loc` (or each item of a list there) takes."""
    model = _model_at(loc)
    return [info.alias or name for name, info in model.model_fields.items()] if model else []


def _shape(loc: tuple[Any, ...]) -> str:
    """The keys an entry at `loc` (or each item of a list there) needs, as " {name, gpus}"; empty if not a mapping."""
    model = _model_at(loc) if loc else None
    if model is None:
        return ""
    keys = getattr(model, "usual_keys", None) or [info.alias or name for name, info in model.model_fields.items()
                                                    if info.is_required()]
    return " {" + ", ".join(keys) + "}"


def _describe(error: ValidationError) -> str:
    """One line for the most useful error: a misspelt key first (it explains a missing one), then the rest."""
    # Of a union's members (migLayout: a layout's name or a mapping), the one that came furthest names the problem.
    errors = sorted(error.errors(), key=lambda item: (item["type"] != "extra_forbidden",
                                                      -len(item["loc"]) if _untagged(item["loc"]) != item["loc"] else 0))
    first = errors[0]
    message = first["msg"].removeprefix("Value error, ")
    loc, kind, shown = _untagged(first["loc"]), first["type"], _shown(first["input"])
    alternatives = [_KINDS.get(item["type"]) for item in errors if _untagged(item["loc"]) == loc]
    if len(alternatives) > 1 and all(alternatives):
        return f"{PROJECT}:{_dotted(loc)}: must be {' or '.join(dict.fromkeys(alternatives))}, not {shown}"
    if loc and loc[0] in SECRET_KEYS:
        # A credential: say what is wrong without showing any of it.
        fix = message if kind == "value_error" else "must be the text of a .dockerconfigjson document"
        return f"{PROJECT}:{loc[0]}: {fix}"
    if kind == "field_error":
        loc = (*loc, *first["ctx"]["loc"])
    elif kind == "extra_forbidden":
        missing = [item["loc"][-1] for item in errors if item["type"] == "missing" and item["loc"][:-1] == loc[:-1]]
        close = (difflib.get_close_matches(str(loc[-1]), [str(name) for name in missing], n=1)
                 or difflib.get_close_matches(str(loc[-1]), _keys_of(loc[:-1]), n=1))
        message = f"unknown key; did you mean {close[0]!r}?" if close else "unknown key; remove it or check its spelling"
    elif kind == "missing":
        message = "is required"
    elif kind == "string_type":
        message = f"must be text, not {shown}; quote it in the stack file"
    elif kind in ("int_parsing", "int_type", "int_from_float", "float_parsing", "float_type"):
        message = f"must be a number, not {shown}; write digits only"
    elif kind in ("bool_type", "bool_parsing"):
        message = f"must be true or false, not {shown}; write true or false, unquoted"
    elif kind in ("greater_than_equal", "greater_than"):
        message = f"{shown} is too small; use at least {next(iter(first['ctx'].values()))}"
    elif kind in ("less_than_equal", "less_than"):
        message = f"{shown} is too large; use at most {next(iter(first['ctx'].values()))}"
    elif kind == "string_pattern_mismatch":
        message = f"{shown} is not in the expected format; {PATTERN_FIXES[first['ctx']['pattern']]}"
    elif kind in ("tuple_type", "list_type"):
        field, shape = _field_at(loc), _shape(loc)
        message = f"must be a list{f' of{shape} entries' if shape else ''}, not {shown}"
        message += "; write [] for none" if field and not field.is_required() else "; write one `- ` item per line"
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = f"must be a mapping{_shape(loc)}, not {shown}"
        item = bool(loc) and isinstance(loc[-1], int)
        message += "; fill the item in or remove it" if item else "; write its keys below it"
    elif kind == "too_short":
        count = first["ctx"]["min_length"]
        shape = _shape(loc)
        message = (f"must list at least {count} item{'s' if count > 1 else ''}; "
                   f"add {'one' if count == 1 else 'more'}{f' with{shape}' if shape else ''}")
    path = _dotted(loc)
    return f"{PROJECT}:{path}: {message}" if path else f"{PROJECT}: {message}"


def load_stack_config() -> StackConfig:
    """Read every `gpu-platform:*` key from the Pulumi runtime config once and validate it."""
    raw = pulumi.runtime.config.CONFIG.get()
    for full_key in raw:
        key = full_key.removeprefix(f"{PROJECT}:")
        if key == full_key:
            continue
        if key in SECRET_KEYS and not pulumi.runtime.is_config_secret(full_key):
            raise ConfigError(f"{full_key}: must be a secret; set it with `pulumi config set --secret {key}`")
        if key not in SECRET_KEYS and pulumi.runtime.is_config_secret(full_key):  # e.g. a `secure:` nested in it
            raise ConfigError(f"{full_key}: holds a `secure:` value, but the program keeps no field of it secret, so "
                              "it would show in plain text in resources and outputs; only registryPullSecret takes "
                              "a secret: remove the `secure:` value")
    return config_from_stack_file(raw)


def config_from_stack_file(values: Mapping[str, Any]) -> StackConfig:
    """The project's config values (full keys, as a stack file or the engine holds them) validated as the program
    reads them: structured values and `true`/`false` arrive as text under the engine (`pulumi config set preflight
    false`); a secret stays the text the user set (a JSON document is not decoded, so no error can echo it)."""
    prefix = f"{PROJECT}:"
    return parse_stack_config({key.removeprefix(prefix): value if key.removeprefix(prefix) in SECRET_KEYS
                               else _decode(value) for key, value in values.items() if key.startswith(prefix)})


def _decode(value: Any) -> Any:
    """Structured stack values reach the program as JSON text, and a top-level `true` or `false` as that text;
    other scalars stay as they are."""
    if value in ("true", "false"):
        return value == "true"
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value
