"""Policies of node profiles, EFA and tenant networks."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pulumi_policy import PolicyResource, ReportViolation, ResourceValidationArgs, StackValidationArgs

from components import labels
from fleet import sysctls
from fleet.catalog import INSTANCE_TYPES, MAX_HUGEPAGES_SHARE
from policy.capacity import tenant_namespaces
from policy.index import index
from policy.reading import (LAUNCH_TEMPLATE, PERFORMANCE_PROFILE, POD_SPEC_PATHS, describe, dig, items, kind, pod_spec,
                            whole)
from policy.resource_types import runs_pods, sets_sysctls


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


def hugepages_within_memory(args: StackValidationArgs, report: ReportViolation) -> None:
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


def node_sysctls_in_profiles(args: StackValidationArgs, report: ReportViolation) -> None:
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


def efa_on_capable_instances(args: ResourceValidationArgs, report: ReportViolation) -> None:
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


def tenant_networks_own_namespace(args: StackValidationArgs, report: ReportViolation) -> None:
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
