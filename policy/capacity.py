"""Pool and quota arithmetic: what each GPU pool advertises, and what each tenant namespace is promised."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import yaml
from pulumi_policy import PolicyResource

from components import labels
from fleet.catalog import INSTANCE_TYPES
from fleet.partitioning import GPU, PCI_DEVICE_IDS, Partitioning, is_gpu_resource, layouts_for
from policy.index import index
from policy.reading import (AUTO_SCALING_GROUP, MACHINE_SET, NODE_POOL, POOL_COMPONENT, REGISTER_TAINTS, asg_tags, dig,
                            items, whole)


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


def add(total: dict[str, int], more: Mapping[str, int]) -> dict[str, int]:
    for kind, count in more.items():
        total[kind] = total.get(kind, 0) + count
    return total


def registers_gpu_taint(template: PolicyResource) -> bool:
    """Whether a launch template's user data makes the kubelet register the GPU taint."""
    try:
        script = base64.b64decode(str(template.props.get("userData") or ""), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    for flag in REGISTER_TAINTS.findall(script):
        for taint in flag.split(","):
            key_value, _, effect = taint.rpartition(":")
            if key_value.partition("=")[0] == labels.GPU_TAINT["key"] and effect == labels.GPU_TAINT["effect"]:
                return True
    return False


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
