"""Policies of tenants: host access only for the node agents, Pod Security, least-privileged RBAC, and no
system priority classes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs

from components import labels
from policy.capacity import quotas, tenant_namespaces
from policy.index import index
from policy.reading import (CLUSTER_ADMIN, POD_SECURITY_ENFORCE, SYSTEM_NAMESPACES, TENANT_POD_SECURITY, containers,
                            describe, dig, items, kind, pod_spec)
from policy.resource_types import is_role


_SYSTEM_NAMESPACE_TEXT = ", ".join(SYSTEM_NAMESPACES[:-1]) + f" or {SYSTEM_NAMESPACES[-1]}"


def host_access_in_system_namespaces(args: ResourceValidationArgs, report: ReportViolation) -> None:
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


def tenant_pod_security(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if kind(args.resource_type) != "Namespace" or not dig(args.props, "metadata", "labels", labels.TENANT_LABEL):
        return
    level = dig(args.props, "metadata", "labels", POD_SECURITY_ENFORCE)
    if level not in TENANT_POD_SECURITY:
        report(f"tenant namespace {dig(args.props, 'metadata', 'name')} enforces pod security "
               f"{level or 'not at all'}; label it {POD_SECURITY_ENFORCE}: baseline (or restricted) so tenant pods "
               "cannot run privileged or reach into the node", None)


def _excessive_grant(role_ref: Mapping[str, Any], namespace: str | None,
                     roles: Mapping[tuple[str, str | None, str], Mapping[str, Any]],
                     verdicts: dict[tuple[Any, ...], str | None]) -> str | None:
    """What is wrong with the role a binding grants: cluster-admin, or a role in the stack with '*' rules. Each
    role's rules are read once (`verdicts`): a thousand tenants' bindings grant the same ClusterRole."""
    ref_kind, name = role_ref.get("kind"), role_ref.get("name")
    key = (ref_kind, namespace if ref_kind == "Role" else None, name)
    if key not in verdicts:
        role = roles.get(key)
        verdicts[key] = CLUSTER_ADMIN if ref_kind == "ClusterRole" and name == CLUSTER_ADMIN else \
            f"{ref_kind} {name}, whose rules use '*'" if role is not None and any(
                "*" in items(rule.get("verbs")) or "*" in items(rule.get("resources"))
                for rule in items(role.get("rules"))) else None
    return verdicts[key]


def tenant_rbac(args: StackValidationArgs, report: ReportViolation) -> None:
    tenants = tenant_namespaces(args.resources)
    found = index(args.resources)
    roles = {(kind(r.resource_type), dig(r.props, "metadata", "namespace"), dig(r.props, "metadata", "name")): r.props
             for r in found.selected(is_role)}
    tenant_groups, verdicts = set(), {}
    for binding in found.of_kind("RoleBinding"):
        namespace = dig(binding.props, "metadata", "namespace")
        if namespace not in tenants:
            continue
        tenant_groups |= {(s.get("kind"), s.get("name")) for s in items(binding.props.get("subjects"))
                          if s.get("kind") != "ServiceAccount"}
        grant = _excessive_grant(binding.props.get("roleRef") or {}, namespace, roles, verdicts)
        if grant:
            report(f"{describe(binding.resource_type, binding.props)} grants tenant {namespace} {grant}; bind a "
                   "narrower role such as the platform's gpu-platform-tenant ClusterRole", binding.urn)
    for binding in found.of_kind("ClusterRoleBinding"):
        subjects = [s for s in items(binding.props.get("subjects"))
                    if (s.get("kind"), s.get("name")) in tenant_groups or s.get("namespace") in tenants]
        grant = _excessive_grant(binding.props.get("roleRef") or {}, None, roles, verdicts) if subjects else None
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


def tenant_no_system_priority(args: StackValidationArgs, report: ReportViolation) -> None:
    for namespace, resource in tenant_namespaces(args.resources).items():
        if not any(_denies_system_priority(q) for q in quotas(args.resources, namespace)):
            classes = ", ".join(labels.SYSTEM_PRIORITY_CLASSES)
            report(f"tenant namespace {namespace} does not block the priority classes {classes}, so its pods can "
                   "preempt the GPU node agents; add a ResourceQuota with hard pods: \"0\" and scopeSelector "
                   f"PriorityClass In [{classes}]", resource.urn)
