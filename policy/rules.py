"""The platform's policies as CrossGuard objects, shared by the pack (`policy/__main__.py`) and `gpuctl check`.

Importing this module only defines the policies; constructing a `PolicyPack` is what starts a server, and
only `policy/__main__.py` does that. Policies read resource properties through the mappings and sequences
pulumi-policy hands them, so a value that is unknown during preview surfaces as the SDK's own error.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import yaml

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from components import labels
from components.images import ImageName
from fleet import sysctls
from fleet.catalog import INSTANCE_TYPES, MAX_HUGEPAGES_SHARE
from fleet.partitioning import GPU, PCI_DEVICE_IDS, Partitioning, is_gpu_resource, kind_of, layouts_for
from policy.index import index

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
_DRIVER_BRANCH = re.compile(r"\d+")

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
_REGISTER_TAINTS = re.compile(r"--register-with-taints[= ]['\"]?([^\s'\"]+)")


# Reading resources ------------------------------------------------------------------------------------------


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


def tenant_namespaces(resources: Sequence[PolicyResource]) -> dict[str, PolicyResource]:
    """Namespaces labelled as a tenant's, by name (found once per resource list; callers only read it). The
    admission gate's probe namespace carries the label so the tenant policies bind it, but is no tenant's."""
    found = index(resources)
    return found.derived("tenant namespaces", lambda: {
        dig(r.props, "metadata", "name"): r for r in found.of_kind("Namespace")
        if dig(r.props, "metadata", "labels", labels.TENANT_LABEL)
        and not dig(r.props, "metadata", "labels", labels.ADMISSION_PROBE_LABEL)})


def quotas(resources: Sequence[PolicyResource], namespace: str) -> list[Mapping[str, Any]]:
    """The ResourceQuotas of a namespace."""
    return [r.props for r in index(resources).in_namespace("ResourceQuota", namespace)]


def gpu_quota(quota: Mapping[str, Any], kind: str = GPU) -> Any:
    """The cap on a kind of GPU of an unscoped quota (it counts every pod of the namespace), or None."""
    if dig(quota, "spec", "scopes") or dig(quota, "spec", "scopeSelector"):
        return None
    return dig(quota, "spec", "hard", f"requests.{kind}")


def tenant_gpu_quotas(resources: Sequence[PolicyResource]) -> dict[str, dict[str, int]]:
    """Each tenant's quota per kind of GPU (the tightest whole-number one), for the kinds its quotas cap."""
    result: dict[str, dict[str, int]] = {}
    for namespace in tenant_namespaces(resources):
        for quota in quotas(resources, namespace):
            for key in dig(quota, "spec", "hard") or {}:
                kind = str(key).removeprefix("requests.")
                cap = whole(gpu_quota(quota, kind)) if is_gpu_resource(kind) else None
                if cap is not None:
                    caps = result.setdefault(namespace, {})
                    caps[kind] = min(cap, caps.get(kind, cap))
    return result


def asg_tags(props: Mapping[str, Any]) -> dict[str, str]:
    """An Auto Scaling Group's tags as a mapping."""
    return {tag.get("key"): str(tag.get("value")) for tag in items(props.get("tags"))}


def gpus_per_node(pool: PolicyResource) -> int:
    """GPUs (or slices of them) one node of a pool advertises to the cluster autoscaler (0 when the pool does not
    say): a MachineSet's GPU annotation, an Auto Scaling Group's resource tags of every GPU kind."""
    if pool.resource_type == MACHINE_SET:
        return whole(dig(pool.props, "metadata", "annotations", labels.MACHINESET_CAPACITY_ANNOTATIONS["gpu"])) or 0
    if pool.resource_type == NODE_POOL:
        return sum(node_pool_limits(pool).values())
    prefix = labels.CA_RESOURCE_TAG.format(resource="")
    return sum(whole(value) or 0 for key, value in asg_tags(pool.props).items()
               if key.startswith(prefix) and is_gpu_resource(key.removeprefix(prefix)))


def node_pool_limits(pool: PolicyResource) -> dict[str, int]:
    """A Karpenter NodePool's limits on the kinds GPUs are advertised as: its ceiling per kind."""
    return {kind: whole(value) or 0 for kind, value in (dig(pool.props, "spec", "limits") or {}).items()
            if is_gpu_resource(kind)}


def gpu_pools(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    """MachineSets, Auto Scaling Groups and Karpenter NodePools that are GPU pools: children of a GpuNodePool, or
    advertising GPUs."""
    return [r for r in resources if r.resource_type in (MACHINE_SET, AUTO_SCALING_GROUP, NODE_POOL)
            and ((r.parent is not None and r.parent.resource_type == POOL_COMPONENT) or gpus_per_node(r) > 0)]


def device_plugin_sharing(resources: Iterable[PolicyResource]) -> dict[str, int]:
    """Time-slicing replicas of nvidia.com/gpu by device-plugin config name, from the ConfigMap the ClusterPolicy
    names (spec.devicePlugin.config.name); configs that do not share are left out. A share is advertised as
    nvidia.com/gpu.shared (the configs rename it by default)."""
    found = index(resources)
    names = {dig(policy.props, "spec", "devicePlugin", "config", "name") for policy in found.of_kind("ClusterPolicy")}
    sharing = {}
    for config_map in found.of_kind("ConfigMap"):
        if dig(config_map.props, "metadata", "name") not in names:
            continue
        for key, text in (config_map.props.get("data") or {}).items():
            try:
                config = yaml.safe_load(text) if isinstance(text, str) else None
            except yaml.YAMLError:
                continue
            for entry in items(dig(config, "sharing", "timeSlicing", "resources")):
                if isinstance(entry, Mapping) and entry.get("name") == labels.GPU_RESOURCE and whole(entry.get("replicas")):
                    sharing[key] = whole(entry["replicas"])
    return sharing


def mig_parted_layouts(resources: Iterable[PolicyResource]) -> dict[str, list[Mapping[str, Any]]]:
    """The entries of each layout of the stack's own mig-parted config, the one the ClusterPolicy names for the MIG
    manager (spec.migManager.config.name); empty where it names none (the operator's own layouts)."""
    found = index(resources)
    names = {dig(policy.props, "spec", "migManager", "config", "name") for policy in found.of_kind("ClusterPolicy")}
    layouts: dict[str, list[Mapping[str, Any]]] = {}
    for config_map in found.of_kind("ConfigMap"):
        if dig(config_map.props, "metadata", "name") not in names - {None}:
            continue
        try:
            document = yaml.safe_load(str((config_map.props.get("data") or {}).get("config.yaml") or ""))
        except yaml.YAMLError:
            continue
        for name, entries in (dig(document, "mig-configs") or {}).items():
            layouts[name] = [entry for entry in items(entries) if isinstance(entry, Mapping)]
    return layouts


def layout_devices(layout: str | None, model: str, own: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, int]:
    """The MIG devices one GPU of `model` gets from `layout`: the stack's own config's entry for the GPU's device ID
    where it has the layout, else NVIDIA's table; none for an unknown layout."""
    for entry in own.get(layout or "", []):
        device_filter = entry.get("device-filter")
        filters = [device_filter] if isinstance(device_filter, str) else list(items(device_filter))
        if entry.get("mig-enabled") and (not filters or PCI_DEVICE_IDS.get(model) in filters):
            return {str(profile): whole(count) or 0 for profile, count in (entry.get("mig-devices") or {}).items()}
    return dict(layouts_for(model).get(layout or "", {}))


def pool_capacity(pool: PolicyResource, sharing: Mapping[str, int],
                  own_layouts: Mapping[str, list[Mapping[str, Any]]] = MappingProxyType({})) -> dict[str, int]:
    """What a pool advertises at its configured size, per kind: an Auto Scaling Group's node template says it (one
    resource tag per kind); a MachineSet's GPU annotation counts physical GPUs, which the config its nodes select
    shares or the MIG layout they carry slices (fleet.partitioning).

    The size is the configured one the program records (labels.CONFIGURED_NODES), which stack policies see alike
    under `pulumi up` (outputs: the live size the autoscaler moved) and gpuctl (inputs); the size fields only
    where a pool does not record it. A Karpenter NodePool counts at its limits: Karpenter launches nodes for
    pending pods up to them."""
    if pool.resource_type == NODE_POOL:
        return {kind: count for kind, count in node_pool_limits(pool).items() if count}
    if pool.resource_type == MACHINE_SET:
        configured = dig(pool.props, "metadata", "annotations", labels.CONFIGURED_NODES)
        nodes = configured if configured is not None else dig(pool.props, "spec", "replicas")
        node_labels = pool_node_labels(pool)
        layout = node_labels.get(labels.MIG_CONFIG_LABEL)
        instance = INSTANCE_TYPES.get(str(dig(pool.props, "spec", "template", "spec", "providerSpec", "value",
                                              "instanceType")))
        model = instance.gpu_model if instance else node_labels.get(labels.MACHINESET_GPU_TYPE_LABEL, "")
        devices = layout_devices(layout, model, own_layouts)
        partitioning = Partitioning(shares=sharing.get(node_labels.get(labels.DEVICE_PLUGIN_CONFIG_LABEL)),
                                    mig_layout=layout if devices else None, mig_devices=tuple(sorted(devices.items())))
        per_node = partitioning.advertised(model, gpus_per_node(pool))
    else:
        configured = asg_tags(pool.props).get(labels.CONFIGURED_NODES)
        nodes = configured if configured is not None else pool.props.get("desiredCapacity", pool.props.get("minSize"))
        prefix = labels.CA_RESOURCE_TAG.format(resource="")
        per_node = {key.removeprefix(prefix): whole(value) or 0 for key, value in asg_tags(pool.props).items()
                    if key.startswith(prefix) and is_gpu_resource(key.removeprefix(prefix))}
    return {kind: (whole(nodes) or 0) * count for kind, count in per_node.items() if count}


def byo_capacity(pool: PolicyResource) -> dict[str, int]:
    """What a bring-your-own pool advertises per kind: what its component declares (it provisions nothing)."""
    brought = pool.props.get("bringYourOwn")
    if not isinstance(brought, Mapping):
        return {}
    nodes = whole(brought.get("nodes")) or 0
    return {kind: nodes * (whole(count) or 0) for kind, count in (brought.get("advertisedPerNode") or {}).items()
            if is_gpu_resource(kind) and whole(count)}


def _add(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    for kind, count in more.items():
        total[kind] = total.get(kind, 0) + count
    return total


def registers_gpu_taint(template: PolicyResource) -> bool:
    """Whether a launch template's user data makes the kubelet register the GPU taint."""
    try:
        script = base64.b64decode(str(template.props.get("userData") or ""), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    for flag in _REGISTER_TAINTS.findall(script):
        for taint in flag.split(","):
            key_value, _, effect = taint.rpartition(":")
            if key_value.partition("=")[0] == labels.GPU_TAINT["key"] and effect == labels.GPU_TAINT["effect"]:
                return True
    return False


# Which resource types a policy reads ------------------------------------------------------------------------
# Module-level predicates, so a resource index selects the resources of each once.


def every_type(resource_type: str) -> bool:
    return True


def runs_pods(resource_type: str) -> bool:
    """Workloads with a pod spec (POD_SPEC_PATHS)."""
    return kind(resource_type) in POD_SPEC_PATHS


def names_images(resource_type: str) -> bool:
    """Workloads, and the GPU Operator resources that name operand images."""
    return runs_pods(resource_type) or resource_type in OPERAND_IMAGE_RESOURCES


def is_pool(resource_type: str) -> bool:
    return resource_type in (MACHINE_SET, AUTO_SCALING_GROUP, NODE_POOL)


def is_pool_part(resource_type: str) -> bool:
    return resource_type in (MACHINE_SET, AUTO_SCALING_GROUP, LAUNCH_TEMPLATE, NODE_POOL)


def is_role(resource_type: str) -> bool:
    return kind(resource_type) in ("Role", "ClusterRole")


def sets_sysctls(resource_type: str) -> bool:
    """Workloads, and the node settings that allow or set sysctls (see _unsafe_allowed and Tuned)."""
    return (runs_pods(resource_type) or resource_type in (PERFORMANCE_PROFILE, LAUNCH_TEMPLATE)
            or kind(resource_type) in ("KubeletConfig", "Tuned"))


def is_nvidia_driver(resource_type: str) -> bool:
    return resource_type == NVIDIA_DRIVER


def tolerates_operands(resource_type: str) -> bool:
    return resource_type in OPERAND_TOLERATIONS


def is_cluster_policy(resource_type: str) -> bool:
    return resource_type == CLUSTER_POLICY


def is_namespace(resource_type: str) -> bool:
    return kind(resource_type) == "Namespace"


def is_launch_template(resource_type: str) -> bool:
    return resource_type == LAUNCH_TEMPLATE


_APPLIES_TO: dict[str, Callable[[str], bool]] = {}


def resource_policy(*, applies_to: Callable[[str], bool], validate: Callable[[ResourceValidationArgs, ReportViolation],
                    None], **kwargs: Any) -> ResourceValidationPolicy:
    """A ResourceValidationPolicy whose validation returns at once for resource types `applies_to` rejects, so a
    runner holding the resources by type may skip those without building their arguments (`applies_to`)."""
    def validate_applicable(args: ResourceValidationArgs, report: ReportViolation) -> None:
        if applies_to(args.resource_type):
            validate(args, report)

    policy = ResourceValidationPolicy(validate=validate_applicable, **kwargs)
    _APPLIES_TO[policy.name] = applies_to
    return policy


def applies_to(policy: ResourceValidationPolicy) -> Callable[[str], bool]:
    """The resource types a resource policy can report on (its validation does nothing for the others)."""
    return _APPLIES_TO.get(policy.name, every_type)


# Policies ---------------------------------------------------------------------------------------------------


def _in_pool(parent: str | None) -> bool:
    """Whether a resource's parent (a URN) is a GpuNodePool: the URN's type chain ends in the component's type."""
    return bool(parent) and parent.split("::")[-2].rsplit("$", 1)[-1] == POOL_COMPONENT


def _pools_tainted(args: ResourceValidationArgs, report: ReportViolation) -> None:
    """One pool resource at a time, so `pulumi up` stops before it creates or changes an untainted pool."""
    key, effect = labels.GPU_TAINT["key"], labels.GPU_TAINT["effect"]
    in_pool = _in_pool(args.opts.parent if args.opts else None)
    if args.resource_type == MACHINE_SET and (in_pool or gpus_per_node(args) > 0):
        taints = items(dig(args.props, "spec", "template", "spec", "taints"))
        if not any(t.get("key") == key and t.get("effect") == effect for t in taints):
            report(f"{describe(args.resource_type, args.props)} does not taint its nodes {GPU_TAINT_TEXT}, so "
                   f"CPU pods can fill them; add {{key: {key}, effect: {effect}}} to spec.template.spec.taints", None)
    elif args.resource_type == AUTO_SCALING_GROUP and (in_pool or gpus_per_node(args) > 0):
        tag = labels.CA_TAINT_TAG.format(key=key)
        if not asg_tags(args.props).get(tag, "").endswith(f":{effect}"):
            report(f"Auto Scaling Group {args.props.get('name') or args.name} lacks the tag {tag}=:{effect} (the "
                   "autoscaler's template node when scaling from zero), so the autoscaler plans CPU pods onto its "
                   f"nodes; add it", None)
    elif args.resource_type == NODE_POOL and (in_pool or gpus_per_node(args) > 0):
        taints = items(dig(args.props, "spec", "template", "spec", "taints"))
        if not any(t.get("key") == key and t.get("effect") == effect for t in taints):
            report(f"{describe(args.resource_type, args.props)} does not taint its nodes {GPU_TAINT_TEXT}, so "
                   f"CPU pods can fill them; add {{key: {key}, effect: {effect}}} to spec.template.spec.taints", None)
    elif args.resource_type == LAUNCH_TEMPLATE and in_pool and not registers_gpu_taint(args):
        report(f"launch template {args.props.get('name') or args.name} of a GPU pool does not start the kubelet with "
               f"--register-with-taints={GPU_TAINT_TEXT}, so its nodes are not tainted and CPU pods can fill them; "
               "add the flag to its user data", None)


def queued_namespaces(resources: Sequence[PolicyResource]) -> set[str]:
    """Namespaces whose GPU work Kueue governs: a LocalQueue there feeds a ClusterQueue of the stack, and the
    policy that refuses GPU work outside the queues is in the stack."""
    found = index(resources)
    fenced = any(dig(r.props, "metadata", "name") == labels.QUEUE_POLICY_NAME
                 for r in found.of_kind("ValidatingAdmissionPolicy"))
    cluster_queues = {dig(r.props, "metadata", "name") for r in found.of_kind("ClusterQueue")}
    return {dig(r.props, "metadata", "namespace") for r in found.of_kind("LocalQueue")
            if fenced and dig(r.props, "spec", "clusterQueue") in cluster_queues}


def _tenant_gpu_quota(args: StackValidationArgs, report: ReportViolation) -> None:
    kinds = sorted({GPU, *(kind for pool in queue_pools(args.resources) for kind in pool.capacity)})
    for namespace, resource in tenant_namespaces(args.resources).items():
        caps = {kind: [cap for cap in (gpu_quota(q, kind) for q in quotas(args.resources, namespace))
                       if cap is not None] for kind in kinds}
        missing = [kind for kind, found in caps.items() if not found]
        if missing:
            report(f"tenant namespace {namespace} has no ResourceQuota on {', '.join(missing)}, so its pods can take "
                   "every one the pools advertise (in tenancy mode queue too: Kueue does not see every path); add an "
                   "unscoped ResourceQuota with spec.hard requests.<kind>: \"<count>\" for each (0 where not given)",
                   resource.urn)
        for kind, found in caps.items():
            if any(whole(cap) is None for cap in found):
                report(f"tenant namespace {namespace} caps requests.{kind} at {', '.join(map(str, found))}; "
                       "use a whole number", resource.urn)


def _quota_within_capacity(args: StackValidationArgs, report: ReportViolation) -> None:
    """Per kind: every tenant's quota together within what the pools advertise; and what tenants cannot place on
    pools dedicated to them within the pools dedicated to no one (a dedicated pool counts toward its owners only)."""
    ratio = float(args.get_config().get("maxOvercommit", DEFAULT_OVERCOMMIT))
    # A queued tenant's quota is its ceiling, guarantee plus borrowing: its guarantee is held to capacity by
    # queue-guarantee-within-capacity.
    queued = queued_namespaces(args.resources)
    promised = {name: caps for name, caps in tenant_gpu_quotas(args.resources).items() if name not in queued}
    pools = queue_pools(args.resources)
    namespaces = tenant_namespaces(args.resources)
    capacity: dict[str, int] = {}
    for pool in pools:
        _add(capacity, pool.capacity)
    for kind in sorted({kind for caps in promised.values() for kind in caps} | {GPU}):
        quotas_of = {name: caps[kind] for name, caps in promised.items() if kind in caps}
        total, advertised = sum(quotas_of.values()), capacity.get(kind, 0)
        tenants = ", ".join(f"{name} {amount}" for name, amount in sorted(quotas_of.items()))
        what = "GPU quotas" if kind == GPU else f"quotas of {kind_of(kind)} ({kind})"
        unit = " GPUs" if kind == GPU else ""
        if total > advertised * ratio:
            report(f"tenant {what} add up to {total}{unit} ({tenants}) but the GPU pools advertise {advertised}; "
                   f"with maxOvercommit {ratio:g} at most {advertised * ratio:g} may be promised. Lower the tenants' "
                   "quotas, add pool replicas, or raise maxOvercommit in the pack config", None)
            continue
        open_capacity = sum(pool.capacity.get(kind, 0) for pool in pools if pool.dedicated_to is None)
        beyond = {name: amount - sum(pool.capacity.get(kind, 0) for pool in pools if pool.dedicated_to is not None
                                     and pool.owned_by(namespaces.get(name)))
                  for name, amount in quotas_of.items()}
        spill = sum(max(0, amount) for amount in beyond.values())
        if spill > open_capacity * ratio:
            dedicated = ", ".join(sorted(str(pool.dedicated_to) for pool in pools if pool.dedicated_to is not None))
            report(f"tenant {what} beyond what their dedicated pools hold add up to {spill}{unit} ({tenants}) but "
                   f"the pools dedicated to no one advertise {open_capacity} (dedicated: {dedicated}, counted "
                   "toward their owners only); lower the quotas of tenants without a dedicated pool, or add "
                   "capacity", None)


def pool_node_labels(pool: PolicyResource) -> dict[str, str]:
    """The labels a pool's nodes register with: a MachineSet's or NodePool's template, an Auto Scaling Group's
    node-template tags."""
    if pool.resource_type == MACHINE_SET:
        return dict(dig(pool.props, "spec", "template", "spec", "metadata", "labels") or {})
    if pool.resource_type == NODE_POOL:
        return dict(dig(pool.props, "spec", "template", "metadata", "labels") or {})
    prefix = labels.CA_LABEL_TAG.format(key="")
    return {key.removeprefix(prefix): value for key, value in asg_tags(pool.props).items() if key.startswith(prefix)}


def pool_taints(pool: PolicyResource) -> list[dict[str, str]]:
    """The taints a pool's nodes register with: a MachineSet's or NodePool's template, an Auto Scaling Group's taint
    tags."""
    if pool.resource_type in (MACHINE_SET, NODE_POOL):
        return [dict(taint) for taint in items(dig(pool.props, "spec", "template", "spec", "taints"))]
    prefix = labels.CA_TAINT_TAG.format(key="")
    return [{"key": key.removeprefix(prefix), "effect": value.rpartition(":")[2],
             **({"value": value.rpartition(":")[0]} if value.rpartition(":")[0] else {})}
            for key, value in asg_tags(pool.props).items() if key.startswith(prefix)]


@dataclass(frozen=True)
class PoolView:
    """A GPU pool as quotas and Kueue's flavors meet it: what it is, its nodes' labels and taints, what it
    advertises per kind."""

    resource: PolicyResource
    what: str
    node_labels: dict[str, str]
    taints: list[dict[str, str]]
    capacity: dict[str, int]

    @property
    def dedicated_to(self) -> str | None:
        """The pool a dedicated taint reserves (its value), or None for a pool any tenant may use."""
        return next((str(taint.get("value") or "") for taint in self.taints
                     if taint.get("key") == labels.DEDICATED_TAINT_KEY), None)

    def owned_by(self, namespace: PolicyResource | None) -> bool:
        """Whether a tenant namespace carries the label that lets its pods onto this dedicated pool."""
        label = labels.DEDICATED_POOL_LABEL.format(pool=self.dedicated_to)
        return namespace is not None and bool(dig(namespace.props, "metadata", "labels", label))


def queue_pools(resources: Sequence[PolicyResource]) -> list[PoolView]:
    """MachineSet, Auto Scaling Group and Karpenter NodePool pools, and bring-your-own pools by what their component declares (their
    nodes' GPU taint is checked live under `pulumi up`)."""
    found = index(resources)
    sharing = device_plugin_sharing(resources)
    own_layouts = mig_parted_layouts(resources)
    views = [PoolView(pool, describe(pool.resource_type, pool.props), pool_node_labels(pool), pool_taints(pool),
                      pool_capacity(pool, sharing, own_layouts)) for pool in gpu_pools(found.selected(is_pool))]
    for pool in found.of_type(POOL_COMPONENT):
        brought = pool.props.get("bringYourOwn")
        if isinstance(brought, Mapping):
            views.append(PoolView(pool, f"bring-your-own pool {pool.name}", dict(brought.get("nodeSelector") or {}),
                                  [dict(taint) for taint in items(brought.get("taints"))] or [dict(labels.GPU_TAINT)],
                                  byo_capacity(pool)))
    return views


def flavor_pools(flavor: Mapping[str, Any], pools: Iterable[PoolView]) -> list[PoolView]:
    """The GPU pools whose nodes a ResourceFlavor's nodeLabels select."""
    wanted = dig(flavor, "spec", "nodeLabels") or {}
    return [pool for pool in pools if wanted and wanted.items() <= pool.node_labels.items()]


def queue_quotas(cluster_queue: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(flavor, quota) of each quota of a kind of GPU of a ClusterQueue."""
    return [(flavor.get("name"), quota) for group in items(dig(cluster_queue, "spec", "resourceGroups"))
            for flavor in items(group.get("flavors")) for quota in items(flavor.get("resources"))
            if is_gpu_resource(str(quota.get("name")))]


def _lendable(quota: Mapping[str, Any]) -> int:
    nominal = whole(quota.get("nominalQuota")) or 0
    limit = whole(quota.get("lendingLimit"))
    return nominal if limit is None else min(limit, nominal)


def _queue_within_capacity(args: StackValidationArgs, report: ReportViolation) -> None:
    found = index(args.resources)
    flavors = {dig(r.props, "metadata", "name"): r for r in found.of_kind("ResourceFlavor")}
    pools = queue_pools(args.resources)
    promised: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for queue in found.of_kind("ClusterQueue"):
        for flavor, quota in queue_quotas(queue.props):
            if flavor not in flavors:
                report(f"ClusterQueue {dig(queue.props, 'metadata', 'name')} guarantees GPUs of flavor {flavor}, "
                       "which is not a ResourceFlavor of this stack; name a pool's flavor", queue.urn)
                continue
            promised.setdefault((flavor, str(quota.get("name"))), []).append(
                (dig(queue.props, "metadata", "name"), whole(quota.get("nominalQuota")) or 0))
    for (flavor, kind), shares in promised.items():
        capacity = sum(pool.capacity.get(kind, 0) for pool in flavor_pools(flavors[flavor].props, pools))
        total = sum(gpus for _, gpus in shares)
        if total > capacity:
            who = ", ".join(f"{name} {gpus}" for name, gpus in shares)
            what = "GPUs" if kind == GPU else kind_of(kind)
            report(f"ClusterQueues guarantee {total} {what} of flavor {flavor} ({who}) but its pool advertises "
                   f"{capacity}; lower the tenants' quotas, let them use other pools, or add replicas",
                   flavors[flavor].urn)


def _queue_borrowing_within_cohort(args: StackValidationArgs, report: ReportViolation) -> None:
    queues = index(args.resources).of_kind("ClusterQueue")
    for queue in queues:
        cohort = dig(queue.props, "spec", "cohortName")
        for flavor, quota in queue_quotas(queue.props):
            limit = whole(quota.get("borrowingLimit"))
            if limit is None:
                continue
            lendable = sum(_lendable(other_quota) for other in queues if other is not queue and cohort
                           and dig(other.props, "spec", "cohortName") == cohort
                           for other_flavor, other_quota in queue_quotas(other.props)
                           if other_flavor == flavor and other_quota.get("name") == quota.get("name"))
            if limit > lendable:
                report(f"ClusterQueue {dig(queue.props, 'metadata', 'name')} may borrow {limit} GPUs of flavor "
                       f"{flavor}, but the rest of cohort {cohort or '(none)'} can lend at most {lendable} there; "
                       f"lower its borrowingLimit to {lendable} or raise the others' lendingLimit", queue.urn)


def _queue_flavors_tolerate_pools(args: StackValidationArgs, report: ReportViolation) -> None:
    found = index(args.resources)
    pools = queue_pools(args.resources)
    gpu_flavors = {flavor for queue in found.of_kind("ClusterQueue") for flavor, _ in queue_quotas(queue.props)}
    for flavor in found.of_kind("ResourceFlavor"):
        name = dig(flavor.props, "metadata", "name")
        selected = flavor_pools(flavor.props, pools)
        if not selected and (name in gpu_flavors or dig(flavor.props, "spec", "nodeLabels")):
            report(f"ResourceFlavor {name} selects no GPU pool's nodes by its nodeLabels, so workloads admitted to it "
                   f"wait forever; set nodeLabels {{{labels.POOL_LABEL}: <pool>}}", flavor.urn)
        tolerations = items(dig(flavor.props, "spec", "tolerations"))
        for pool in selected:
            for taint in pool.taints:
                if not any(tolerates(toleration, taint) for toleration in tolerations):
                    report(f"ResourceFlavor {name} does not tolerate the taint {taint['key']}:{taint['effect']} of "
                           f"{pool.what}, so workloads admitted to it stay Pending; "
                           f"add {{key: {taint['key']}, operator: Exists, effect: {taint['effect']}}} to its "
                           "tolerations", flavor.urn)


def _gpu_pods_tolerate_taint(args: StackValidationArgs, report: ReportViolation) -> None:
    runtime_classes = {dig(r.props, "metadata", "name"): r.props for r in index(args.resources).of_kind("RuntimeClass")}
    for resource in index(args.resources).selected(runs_pods):
        spec = pod_spec(resource.resource_type, resource.props)
        if spec is None or not requests_gpus(spec):
            continue
        runtime_class = spec.get("runtimeClassName")
        tolerations = [*items(spec.get("tolerations")),
                       *items(dig(runtime_classes.get(runtime_class), "scheduling", "tolerations"))]
        if not any(tolerates(t, labels.GPU_TAINT) for t in tolerations):
            via = (f"nor does RuntimeClass {runtime_class} add it" if runtime_class in runtime_classes else
                   f"and RuntimeClass {runtime_class} is not in this stack" if runtime_class else
                   "and it sets no runtimeClassName")
            report(f"{describe(resource.resource_type, resource.props)} requests {labels.GPU_RESOURCE} but does not "
                   f"tolerate the taint {GPU_TAINT_TEXT} ({via}), so it stays Pending; add the toleration "
                   f"{{key: {labels.GPU_RESOURCE}, operator: Exists, effect: NoSchedule}} or a RuntimeClass that "
                   "adds it", resource.urn)


def _driver_pinned_to_kernel(args: ResourceValidationArgs, report: ReportViolation) -> None:
    # The operator names a precompiled driver <repository>/<image>:<version>-<kernel>-<os> and refuses digests
    # there (gpu-operator api/nvidia/v1alpha1/nvidiadriver_types.go, GetPrecompiledImagePath).
    if args.resource_type != NVIDIA_DRIVER:
        return
    name = describe(args.resource_type, args.props)
    spec = dig(args.props, "spec")
    kernel = dig(spec, "nodeSelector", labels.KERNEL_LABEL)
    if dig(spec, "usePrecompiled") is True and not kernel:
        report(f"{name} runs a precompiled driver but is not pinned to a kernel, so the operator runs it on nodes of "
               f"any kernel; set spec.nodeSelector {labels.KERNEL_LABEL}: <kernel>, one NVIDIADriver per kernel", None)
    # The OS as the operator keys it: VERSION_ID, or for RHEL its major alone (gpu-operator v26.7.0
    # internal/state/nodepool.go, getOSTag and getNodePools).
    release = [dig(spec, "nodeSelector", labels.OS_ID_LABEL), dig(spec, "nodeSelector", labels.OS_VERSION_LABEL)
               or dig(spec, "nodeSelector", labels.OS_VERSION_MAJOR_LABEL)]
    if not all(release):
        report(f"{name} is not pinned to an OS release, so the operator may run it on nodes of another OS; set "
               f"spec.nodeSelector {labels.OS_ID_LABEL} and {labels.OS_VERSION_LABEL} (for RHEL "
               f"{labels.OS_VERSION_MAJOR_LABEL})", None)
    version = str(dig(spec, "version") or "")
    image = str(dig(spec, "image") or "")
    if dig(spec, "usePrecompiled") is True and not _DRIVER_BRANCH.fullmatch(version):
        shown = repr(version) if version else "not set"
        report(f"{name} uses precompiled drivers, whose tag the operator builds as <version>-<kernel>-<os> (digests "
               f"are refused), but spec.version is {shown}; set spec.version to the driver branch (digits only, "
               'e.g. "580")', None)
    tag = ImageName.parse(image).tag if ":" in image.rsplit("/", 1)[-1] else None
    if kernel and tag is not None and not re.search(rf"(^|-){re.escape(str(kernel))}(-|$)", tag):
        report(f"{name} runs on kernel {kernel} but spec.image {image} is tagged for another; drop the tag from "
               f"spec.image (the operator derives it from spec.version) or tag it <branch>-{kernel}-<os>", None)


def _operands_tolerate_gpu_taint(args: ResourceValidationArgs, report: ReportViolation) -> None:
    path = OPERAND_TOLERATIONS.get(args.resource_type)
    if path is None:
        return
    if not any(isinstance(t, Mapping) and tolerates(t, labels.GPU_TAINT) for t in items(dig(args.props, *path))):
        report(f"{describe(args.resource_type, args.props)} does not tolerate the taint {GPU_TAINT_TEXT} in "
               f"{'.'.join(path)}, so the operator's pods never land on the tainted GPU nodes; add the toleration "
               f"{{key: {labels.GPU_TAINT['key']}, operator: Exists, effect: {labels.GPU_TAINT['effect']}}}", None)


# NVIDIA's configuration for shared clusters: the container toolkit takes the device list only from the device
# plugin (volume mounts or CDI), never from an unprivileged container's NVIDIA_VISIBLE_DEVICES.
HARDENED_TOOLKIT_ENV = {"ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
                        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}
DEVICE_LIST_STRATEGIES = frozenset({"volume-mounts", "cdi-annotations", "cdi-cri"})


def _env(spec: Any) -> dict[str, str]:
    return {str(entry.get("name")): str(entry.get("value")) for entry in items(dig(spec, "env"))
            if isinstance(entry, Mapping)}


def _gpu_access_through_device_plugin(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != CLUSTER_POLICY:
        return
    name = describe(args.resource_type, args.props)
    toolkit = _env(dig(args.props, "spec", "toolkit"))
    wrong = [f"{key}={value}" for key, value in HARDENED_TOOLKIT_ENV.items() if toolkit.get(key) != value]
    strategy = _env(dig(args.props, "spec", "devicePlugin")).get("DEVICE_LIST_STRATEGY", "")
    if not strategy or not set(strategy.split(",")) <= DEVICE_LIST_STRATEGIES:
        wrong.append("devicePlugin DEVICE_LIST_STRATEGY=volume-mounts (or CDI)")
    if wrong:
        report(f"{name} lets any container that sets NVIDIA_VISIBLE_DEVICES reach every GPU of its node, outside "
               f"the GPU quota; set {', '.join(wrong)}", None)


# Operand images the GPU Operator's own resources name as repository, image and version: any section of a
# ClusterPolicy (toolkit, devicePlugin, gfd, dcgmExporter, migManager, validator, ...) and of an NVIDIADriver (the
# driver is its spec itself; manager, gds, gdrcopy, ...) that carries them.
OPERAND_IMAGE_RESOURCES = (CLUSTER_POLICY, NVIDIA_DRIVER)
_OPERAND_FIELDS = ("repository", "image", "version")


def operand_sections(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The image-carrying sections of a ClusterPolicy or NVIDIADriver, as (dotted path, section).

    An NVIDIADriver's spec is always one (its driver needs a version even where the operator defaults the image);
    other sections count when they set a repository or an image.
    """
    if resource_type not in OPERAND_IMAGE_RESOURCES:
        return []
    spec = dig(props, "spec")
    if not isinstance(spec, Mapping):
        return [("spec", {})] if resource_type == NVIDIA_DRIVER else []
    found: list[tuple[str, Mapping[str, Any]]] = []

    def walk(section: Mapping[str, Any], path: str) -> None:
        if (resource_type == NVIDIA_DRIVER and path == "spec") or section.get("repository") or section.get("image"):
            found.append((path, section))
        for key, value in section.items():
            if isinstance(value, Mapping):
                walk(value, f"{path}.{key}")

    walk(spec, "spec")
    return found


def operand_reference(section: Mapping[str, Any]) -> str:
    """The reference the operator joins from a section: `<repository>/<image>:<version>`, `@<version>` for a
    `sha256:` digest, or the image alone when neither repository nor version is set (the reverse of
    components.images.operand_image). An NVIDIADriver's real tag adds `-<kernel>-<os>` or `-<os>`."""
    repository, image, version = (str(section.get(field) or "") for field in _OPERAND_FIELDS)
    if not repository and not version:
        return image
    base = f"{repository.rstrip('/')}/{image}" if repository else image
    if not version:
        return base
    return f"{base}{'@' if version.startswith('sha256:') else ':'}{version}"


def _driver_tag(spec: Mapping[str, Any], version: str) -> str:
    """The tag the operator pulls for an NVIDIADriver whose spec.version is `version`."""
    selector = dig(spec, "nodeSelector") or {}
    os_id = selector.get(labels.OS_ID_LABEL)
    # RHEL is selected by its major alone, and tagged by it (gpu-operator v26.7.0 internal/state/nodepool.go, getOSTag).
    os_version = selector.get(labels.OS_VERSION_LABEL) or selector.get(labels.OS_VERSION_MAJOR_LABEL)
    node_os = f"{os_id}{os_version}" if os_id and os_version else "<os>"
    if dig(spec, "usePrecompiled") is True:
        return f"{version}-{selector.get(labels.KERNEL_LABEL) or '<kernel>'}-{node_os}"
    return f"{version}-{node_os}"


def _no_latest_operand_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    sections = operand_sections(args.resource_type, args.props)
    name = describe(args.resource_type, args.props) if sections else ""
    for path, section in sections:
        version = str(section.get("version") or "")
        if path == "spec" and args.resource_type == NVIDIA_DRIVER:
            if version and version != "latest":
                continue
            shown = (f"spec.version latest, so the operator pulls {section.get('repository') or '<repository>'}/"
                     f"{section.get('image') or 'driver'}:{_driver_tag(section, 'latest')}" if version
                     else "no spec.version")
            report(f"{name} sets {shown}, and a driver without a pinned version changes under a running cluster; "
                   'set spec.version to the driver branch (precompiled, e.g. "580") or the full driver version '
                   '(e.g. "580.95.05")', None)
            continue
        reference = operand_reference(section)
        image = ImageName.parse(reference)
        if image.digest or (image.tag and image.tag != "latest"):
            continue
        why = "the :latest tag" if image.tag == "latest" else "no version"
        report(f"{name} section {path} runs {reference} with {why}, which changes under a running cluster; set "
               f"{path}.version to a release tag or a sha256: digest", None)


def _no_latest_images(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for container in containers(pod_spec(args.resource_type, args.props) or {}):
        image = str(container.get("image"))
        name = ImageName.parse(image)
        if name.tag == "latest" or not (name.tag or name.digest):
            why = "the :latest tag" if name.tag == "latest" else "no tag"
            report(f"container {container.get('name')} of {describe(args.resource_type, args.props)} runs {image} "
                   f"with {why}, which changes under a running cluster; pin a version tag or an @sha256 digest", None)
    _no_latest_operand_images(args, report)


def _registry_allowed(image: ImageName, allowed: Sequence[str]) -> bool:
    repository = f"{image.registry}/{image.repository}"
    return any(image.registry == entry or repository.startswith(f"{entry}/") for entry in allowed)


def _allowed_registries(args: ResourceValidationArgs, report: ReportViolation) -> None:
    allowed = [str(entry).rstrip("/") for entry in args.get_config().get("allowedRegistries", DEFAULT_REGISTRIES)]
    for container in containers(pod_spec(args.resource_type, args.props) or {}):
        image = str(container.get("image"))
        name = ImageName.parse(image)
        if not _registry_allowed(name, allowed):
            report(f"container {container.get('name')} of {describe(args.resource_type, args.props)} pulls {image} "
                   f"from {name.registry}, which is not allowed ({', '.join(allowed)}); mirror the image into an "
                   "allowed registry or add the registry to allowedRegistries in the pack config", None)
    for path, section in operand_sections(args.resource_type, args.props):
        if not (section.get("repository") or section.get("image")):
            continue  # the operator's default image for its release
        reference = operand_reference(section)
        name = ImageName.parse(reference)
        if not _registry_allowed(name, allowed):
            field = f"{path}.repository" if section.get("repository") else f"{path}.image"
            report(f"{describe(args.resource_type, args.props)} section {path} pulls {reference} from "
                   f"{name.registry}, which is not allowed ({', '.join(allowed)}); point {field} at an allowed "
                   "registry (mirror the image there) or add the registry to allowedRegistries in the pack config",
                   None)


_SYSTEM_NAMESPACE_TEXT = ", ".join(SYSTEM_NAMESPACES[:-1]) + f" or {SYSTEM_NAMESPACES[-1]}"


def _host_access_in_system_namespaces(args: ResourceValidationArgs, report: ReportViolation) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None or (dig(args.props, "metadata", "namespace") or "default") in SYSTEM_NAMESPACES:
        return
    uses = [field for field in ("hostPID", "hostIPC", "hostNetwork") if spec.get(field)]
    uses += [f"privileged container {c.get('name')}" for c in containers(spec)
             if dig(c, "securityContext", "privileged")]
    uses += [f"hostPath volume {v.get('name')}" for v in items(spec.get("volumes")) if v.get("hostPath")]
    if uses:
        report(f"{describe(args.resource_type, args.props)} uses {', '.join(uses)}; only the GPU Operator's and "
               f"NFD's pods, in {_SYSTEM_NAMESPACE_TEXT}, may reach into the host. Drop them, or have the GPU "
               "Operator or NFD run the agent", None)


def _tenant_pod_security(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if kind(args.resource_type) != "Namespace" or not dig(args.props, "metadata", "labels", labels.TENANT_LABEL):
        return
    level = dig(args.props, "metadata", "labels", POD_SECURITY_ENFORCE)
    if level not in TENANT_POD_SECURITY:
        report(f"tenant namespace {dig(args.props, 'metadata', 'name')} enforces pod security "
               f"{level or 'not at all'}; label it {POD_SECURITY_ENFORCE}: baseline (or restricted) so tenant pods "
               "cannot run privileged or reach into the node", None)


def _excessive_grant(role_ref: Mapping[str, Any], namespace: str | None,
                     roles: Mapping[tuple[str, str | None, str], Mapping[str, Any]]) -> str | None:
    """What is wrong with the role a binding grants: cluster-admin, or a role in the stack with '*' rules."""
    ref_kind, name = role_ref.get("kind"), role_ref.get("name")
    if ref_kind == "ClusterRole" and name == CLUSTER_ADMIN:
        return CLUSTER_ADMIN
    role = roles.get((ref_kind, namespace if ref_kind == "Role" else None, name))
    if role is not None and any("*" in items(rule.get("verbs")) or "*" in items(rule.get("resources"))
                                for rule in items(role.get("rules"))):
        return f"{ref_kind} {name}, whose rules use '*'"
    return None


def _tenant_rbac(args: StackValidationArgs, report: ReportViolation) -> None:
    tenants = tenant_namespaces(args.resources)
    found = index(args.resources)
    roles = {(kind(r.resource_type), dig(r.props, "metadata", "namespace"), dig(r.props, "metadata", "name")): r.props
             for r in found.selected(is_role)}
    tenant_groups = set()
    for binding in found.of_kind("RoleBinding"):
        namespace = dig(binding.props, "metadata", "namespace")
        if namespace not in tenants:
            continue
        tenant_groups |= {(s.get("kind"), s.get("name")) for s in items(binding.props.get("subjects"))
                          if s.get("kind") != "ServiceAccount"}
        grant = _excessive_grant(binding.props.get("roleRef") or {}, namespace, roles)
        if grant:
            report(f"{describe(binding.resource_type, binding.props)} grants tenant {namespace} {grant}; bind a "
                   "narrower role such as the platform's gpu-platform-tenant ClusterRole", binding.urn)
    for binding in found.of_kind("ClusterRoleBinding"):
        subjects = [s for s in items(binding.props.get("subjects"))
                    if (s.get("kind"), s.get("name")) in tenant_groups or s.get("namespace") in tenants]
        grant = _excessive_grant(binding.props.get("roleRef") or {}, None, roles) if subjects else None
        if grant:
            names = ", ".join(f"{s.get('kind')} {s.get('name')}" for s in subjects)
            report(f"{describe(binding.resource_type, binding.props)} grants tenant subjects ({names}) {grant} across "
                   "the cluster; grant tenants roles in their own namespace only", binding.urn)


def _denies_system_priority(quota: Mapping[str, Any]) -> bool:
    """Whether a quota admits no pods of the system-* priority classes (one PriorityClass scope, hard pods 0)."""
    expressions = items(dig(quota, "spec", "scopeSelector", "matchExpressions"))
    return (str(dig(quota, "spec", "hard", "pods")) == "0" and not dig(quota, "spec", "scopes")
            and len(expressions) == 1 and expressions[0].get("scopeName") == "PriorityClass"
            and expressions[0].get("operator") == "In"
            and set(labels.SYSTEM_PRIORITY_CLASSES) <= set(items(expressions[0].get("values"))))


def _tenant_no_system_priority(args: StackValidationArgs, report: ReportViolation) -> None:
    for namespace, resource in tenant_namespaces(args.resources).items():
        if not any(_denies_system_priority(q) for q in quotas(args.resources, namespace)):
            classes = ", ".join(labels.SYSTEM_PRIORITY_CLASSES)
            report(f"tenant namespace {namespace} does not block the priority classes {classes}, so its pods can "
                   "preempt the GPU node agents; add a ResourceQuota with hard pods: \"0\" and scopeSelector "
                   f"PriorityClass In [{classes}]", resource.urn)


# Node profiles, EFA and tenant networks -------------------------------------------------------------------

PERFORMANCE_PROFILE = "kubernetes:performance.openshift.io/v2:PerformanceProfile"
NODE_TUNING_COMPONENT = "gpu-platform:index:NodeTuning"
KUBELET_SNIPPET_ANNOTATION = "kubeletconfig.experimental"
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# Multus swaps the pod's cluster network for this one, looked up in Multus's own namespace, not the tenant's.
DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"
EFA_INTERFACE_TYPES = ("efa", "efa-only")
_PROFILE_PAGE_MIB = {"2M": 2, "1G": 1024}
_BOOT_PAGES = re.compile(r"^echo (\d+) > /sys/kernel/mm/hugepages/hugepages-(\d+)kB/nr_hugepages$", re.MULTILINE)
_UNSAFE_FLAG = re.compile(r"--allowed-unsafe-sysctls[= ]['\"]?([^\s'\"]+)")
_TUNED_SYSCTL = re.compile(r"^\[sysctl\]\s*$(.*?)(?=^\[|\Z)", re.MULTILINE | re.DOTALL)


def user_data(template: PolicyResource | Mapping[str, Any]) -> str:
    """A launch template's user data script, decoded ('' when it is not base64 text)."""
    props = template.props if isinstance(template, PolicyResource) else template
    try:
        return base64.b64decode(str(props.get("userData") or ""), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _machine_sets_selected(resources: Sequence[PolicyResource], selector: Mapping[str, Any]) -> list[PolicyResource]:
    """MachineSets whose nodes carry every label of a node selector."""
    return [r for r in index(resources).of_kind("MachineSet")
            if selector and all((dig(r.props, "spec", "template", "spec", "metadata", "labels") or {}).get(key) == value
                                for key, value in selector.items())]


def _hugepages_within_memory(args: StackValidationArgs, report: ReportViolation) -> None:
    limit_text = f"{int(MAX_HUGEPAGES_SHARE * 100)}%"
    for profile in index(args.resources).of_kind("PerformanceProfile"):
        pages = items(dig(profile.props, "spec", "hugepages", "pages"))
        mib = sum((whole(page.get("count")) or 0) * _PROFILE_PAGE_MIB.get(str(page.get("size")), 0) for page in pages)
        for machine_set in _machine_sets_selected(args.resources, dig(profile.props, "spec", "nodeSelector") or {}):
            memory = whole(dig(machine_set.props, "metadata", "annotations",
                               labels.MACHINESET_CAPACITY_ANNOTATIONS["memory"])) or 0
            if mib > memory * MAX_HUGEPAGES_SHARE:
                report(f"{describe(profile.resource_type, profile.props)} asks for {mib} MiB of hugepages on the nodes "
                       f"of {describe(machine_set.resource_type, machine_set.props)}, which have {memory} MiB; keep "
                       f"hugepages within {limit_text} of memory (lower spec.hugepages.pages counts)", profile.urn)
    for template in index(args.resources).of_type(LAUNCH_TEMPLATE):
        mib = sum(int(count) * int(kib) // 1024 for count, kib in _BOOT_PAGES.findall(user_data(template)))
        instance = INSTANCE_TYPES.get(str(template.props.get("instanceType")))
        if mib and instance and mib > instance.memory_mib * MAX_HUGEPAGES_SHARE:
            report(f"launch template {template.props.get('name') or template.name} allocates {mib} MiB of hugepages "
                   f"at boot on {template.props.get('instanceType')} ({instance.memory_mib} MiB); keep hugepages within "
                   f"{limit_text} of memory", template.urn)


def _unsafe_allowed(resource: PolicyResource) -> list[str]:
    """The sysctls a kubelet setting lets pods set: PerformanceProfile snippet, KubeletConfig, kubelet flag."""
    if resource.resource_type == PERFORMANCE_PROFILE:
        snippet = dig(resource.props, "metadata", "annotations", KUBELET_SNIPPET_ANNOTATION)
        try:
            names = json.loads(snippet).get("allowedUnsafeSysctls") if snippet else None
        except (ValueError, AttributeError):
            names = None
        return [str(name) for name in items(names)]
    if kind(resource.resource_type) == "KubeletConfig":
        return [str(name) for name in items(dig(resource.props, "spec", "kubeletConfig", "allowedUnsafeSysctls"))]
    if resource.resource_type == LAUNCH_TEMPLATE:
        return [name for flag in _UNSAFE_FLAG.findall(user_data(resource)) for name in flag.split(",")]
    return []


def _node_sysctls_in_profiles(args: StackValidationArgs, report: ReportViolation) -> None:
    for resource in index(args.resources).selected(sets_sysctls):
        what = describe(resource.resource_type, resource.props) if kind(resource.resource_type) else resource.name
        spec = pod_spec(resource.resource_type, resource.props)
        if spec is not None:
            names = [str(s.get("name")) for s in items(dig(spec, "securityContext", "sysctls"))]
            if node_level := [name for name in names if sysctls.is_node_level(name)]:
                report(f"{what} sets the node-level sysctls {', '.join(node_level)} in its pod securityContext; they "
                       "are not namespaced, so only a node profile (nodeSysctls) may set them", resource.urn)
        if node_level := [name for name in _unsafe_allowed(resource) if sysctls.is_node_level(name)]:
            report(f"{what} lets pods set the node-level sysctls {', '.join(node_level)} (allowedUnsafeSysctls); only "
                   "namespaced sysctls may be allowed to pods: set node-level ones in a node profile's nodeSysctls",
                   resource.urn)
        if kind(resource.resource_type) == "Tuned" and (
                resource.parent is None or resource.parent.resource_type != NODE_TUNING_COMPONENT):
            data = "".join(str(profile.get("data") or "") for profile in items(dig(resource.props, "spec", "profile")))
            if any(section.strip() for section in _TUNED_SYSCTL.findall(data)):
                report(f"{what} sets sysctls outside a pool's node profile; declare them as nodeSysctls of the pool's "
                       "profile, whose Tuned profile extends its PerformanceProfile", resource.urn)


def _efa_on_capable_instances(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    efa = [i for i in items(args.props.get("networkInterfaces")) if i.get("interfaceType") in EFA_INTERFACE_TYPES]
    if not efa:
        return
    instance_type = str(args.props.get("instanceType"))
    instance = INSTANCE_TYPES.get(instance_type)
    allowed = instance.efa_interfaces if instance else 0
    if len(efa) > allowed:
        capable = ", ".join(name for name, known in INSTANCE_TYPES.items() if known.efa)
        report(f"launch template {args.props.get('name') or args.name} attaches {len(efa)} EFA interfaces to "
               f"{instance_type}, which takes {allowed}; use an EFA-capable type ({capable}) or fewer interfaces")


def network_references(annotation: str, namespace: str) -> list[tuple[str, str]]:
    """(namespace, name) of each network a `k8s.v1.cni.cncf.io/networks` value names, as Multus reads it:
    `[<namespace>/]<name>[@<interface>]`, comma-separated, or a JSON list of {"name", "namespace", ...}."""
    text = annotation.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            entries = json.loads(text)
        except ValueError:
            return [("?", text)]
        return [(str(entry.get("namespace") or namespace), str(entry.get("name", ""))) if isinstance(entry, dict)
                else ("?", str(entry)) for entry in (entries if isinstance(entries, list) else [entries])]
    references = []
    for item in text.split(","):
        space, _, name = item.strip().split("@", 1)[0].rpartition("/")
        references.append((space or namespace, name))
    return references


def _tenant_networks_own_namespace(args: StackValidationArgs, report: ReportViolation) -> None:
    tenants = tenant_namespaces(args.resources)
    for resource in index(args.resources).selected(runs_pods):
        path = POD_SPEC_PATHS.get(kind(resource.resource_type))
        namespace = dig(resource.props, "metadata", "namespace")
        if path is None or namespace not in tenants:
            continue
        annotations = dig(resource.props, *path[:-1], "metadata", "annotations") or {}
        if not isinstance(annotations, Mapping):
            continue
        foreign = [f"{space}/{name}" for space, name in network_references(
            str(annotations.get(NETWORKS_ANNOTATION) or ""), namespace) if space != namespace]
        if DEFAULT_NETWORK_ANNOTATION in annotations:
            foreign.append(f"{annotations[DEFAULT_NETWORK_ANNOTATION]} (as {DEFAULT_NETWORK_ANNOTATION})")
        if foreign:
            report(f"{describe(resource.resource_type, resource.props)} attaches to {', '.join(foreign)}, outside its "
                   f"tenant namespace {namespace}; a tenant's pods attach only to its own networks", resource.urn)


POLICIES: list[ResourceValidationPolicy | StackValidationPolicy] = [
    resource_policy(
        applies_to=is_pool_part,
        name="gpu-pool-tainted",
        description=f"Every GPU pool taints its nodes {GPU_TAINT_TEXT}: a MachineSet or Karpenter NodePool in its "
                    "template, an Auto Scaling Group in the autoscaler's taint tag, a pool's launch template in the kubelet's flags.",
        validate=_pools_tainted,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-gpu-quota",
        description="Every tenant namespace has an unscoped ResourceQuota on every kind of GPU the pools advertise "
                    "(whole GPUs, shares, MIG slices), in tenancy mode queue too, where it is the ceiling Kueue "
                    "admits within.",
        validate=_tenant_gpu_quota,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="gpu-quota-within-capacity",
        description="The tenants' GPU quotas add up to no more than the pools' GPUs times the allowed overcommit.",
        validate=_quota_within_capacity,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties={"maxOvercommit": {
            "type": "number", "exclusiveMinimum": 0, "default": DEFAULT_OVERCOMMIT,
            "description": "GPUs that may be promised per GPU in the pools (1.0: none beyond capacity)",
        }}),
    ),
    StackValidationPolicy(
        name="queue-guarantee-within-capacity",
        description="The GPUs the ClusterQueues guarantee in each ResourceFlavor add up to no more than its pool "
                    "advertises (time-slicing counts each share).",
        validate=_queue_within_capacity,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="queue-borrowing-within-cohort",
        description="A ClusterQueue's borrowing limit in a flavor is no more than the rest of its cohort may lend "
                    "there.",
        validate=_queue_borrowing_within_cohort,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="queue-flavors-tolerate-pools",
        description="Every ResourceFlavor selects a GPU pool's nodes and tolerates every taint of those pools.",
        validate=_queue_flavors_tolerate_pools,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="gpu-pods-tolerate-taint",
        description=f"Every pod template requesting {labels.GPU_RESOURCE} tolerates {GPU_TAINT_TEXT}, itself or "
                    "through its RuntimeClass.",
        validate=_gpu_pods_tolerate_taint,
        enforcement_level=EnforcementLevel.ADVISORY,
    ),
    resource_policy(
        applies_to=is_nvidia_driver,
        name="driver-pinned-to-kernel",
        description=f"Each NVIDIADriver pins one OS release in spec.nodeSelector, and a precompiled one also one "
                    f"kernel ({labels.KERNEL_LABEL}); with usePrecompiled its spec.version is a driver branch (digits "
                    "only), and a tag in spec.image names the pinned kernel.",
        validate=_driver_pinned_to_kernel,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=tolerates_operands,
        name="operands-tolerate-gpu-taint",
        description=f"The ClusterPolicy (spec.daemonsets.tolerations) and every NVIDIADriver (spec.tolerations) "
                    f"tolerate {GPU_TAINT_TEXT}, so the operator's pods run on the GPU nodes.",
        validate=_operands_tolerate_gpu_taint,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=is_cluster_policy,
        name="gpu-access-only-through-device-plugin",
        description="The ClusterPolicy makes the container toolkit ignore NVIDIA_VISIBLE_DEVICES from unprivileged "
                    "containers and the device plugin pass devices as volume mounts or CDI.",
        validate=_gpu_access_through_device_plugin,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=names_images,
        name="no-latest-images",
        description="Every container image, and every operand image of the ClusterPolicy and the NVIDIADrivers "
                    "(sections with repository/image/version), is pinned to a version tag or digest, never :latest "
                    "or untagged; an NVIDIADriver always sets spec.version.",
        validate=_no_latest_images,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=names_images,
        name="allowed-image-registries",
        description="Every container image, and every operand image the ClusterPolicy and the NVIDIADrivers name "
                    "(<repository>/<image>), comes from an allowed registry or registry path.",
        validate=_allowed_registries,
        enforcement_level=EnforcementLevel.MANDATORY,
        config_schema=PolicyConfigSchema(properties={"allowedRegistries": {
            "type": "array", "items": {"type": "string", "minLength": 1}, "default": list(DEFAULT_REGISTRIES),
            "description": "registry hosts, or host/path prefixes, that images may come from",
        }}),
    ),
    resource_policy(
        applies_to=runs_pods,
        name="host-access-only-in-gpu-system",
        description="Privileged containers, host namespaces and hostPath volumes only in the GPU Operator's and NFD's "
                    f"namespaces ({', '.join(SYSTEM_NAMESPACES)}).",
        validate=_host_access_in_system_namespaces,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=is_namespace,
        name="tenant-pod-security",
        description="Tenant namespaces enforce the baseline or restricted pod security standard.",
        validate=_tenant_pod_security,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-rbac-least-privilege",
        description="No binding grants a tenant cluster-admin or a role with wildcard rules.",
        validate=_tenant_rbac,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-no-system-priority",
        description=f"Tenant namespaces admit no pods of the {' or '.join(labels.SYSTEM_PRIORITY_CLASSES)} priority class.",
        validate=_tenant_no_system_priority,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="hugepages-within-memory",
        description=f"Hugepages of a PerformanceProfile or a launch template's boot take at most "
                    f"{int(MAX_HUGEPAGES_SHARE * 100)}% of the memory of the nodes they land on.",
        validate=_hugepages_within_memory,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="node-sysctls-only-in-profiles",
        description="Node-level (not namespaced) sysctls are set only by a pool's node profile: never in a pod's "
                    "securityContext, never allowed to pods (allowedUnsafeSysctls), never by a Tuned profile of "
                    "its own.",
        validate=_node_sysctls_in_profiles,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    resource_policy(
        applies_to=is_launch_template,
        name="efa-only-on-capable-instances",
        description="A launch template attaches EFA interfaces only to an EFA-capable instance type, at most as many "
                    "as it takes.",
        validate=_efa_on_capable_instances,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
    StackValidationPolicy(
        name="tenant-networks-own-namespace",
        description=f"Tenant pods attach ({NETWORKS_ANNOTATION}) only to networks of their own namespace.",
        validate=_tenant_networks_own_namespace,
        enforcement_level=EnforcementLevel.MANDATORY,
    ),
]
