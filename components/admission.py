"""TenantAdmission: a ValidatingAdmissionPolicy, enforced by the API server, that keeps tenant pods to their quota."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata
from fleet.partitioning import MIG_PREFIX, SHARED_GPU

POLICY_NAME = "gpu-platform-tenant-pods"
GUARD_POLICY_NAME = "gpu-platform-gpu-guard"
GPU = labels.GPU_RESOURCE


def _gpus_in(field: str) -> str:
    # Any kind of GPU (whole, a share, a MIG slice), as a quantity (Kubernetes CEL's quantity library): "0m" or 0 is
    # no GPU, raw or normalised.
    return (f"(has(c.resources.{field}) && c.resources.{field}.exists(k, (k == '{GPU}' || k == '{SHARED_GPU}'"
            f" || k.startsWith('{MIG_PREFIX}')) && quantity(string(c.resources.{field}[k])).isGreaterThan(quantity('0'))))")


def _more_than_one_share(field: str) -> str:
    return (f"(has(c.resources.{field}) && '{SHARED_GPU}' in c.resources.{field}"
            f" && quantity(string(c.resources.{field}['{SHARED_GPU}'])).isGreaterThan(quantity('1')))")


# k8s-device-plugin v0.20.0 internal/rm/rm.go: with failRequestsGreaterThanOne the kubelet's allocation of more than
# one share fails, after the scheduler placed the pod.
ONE_SHARE_PER_CONTAINER = (
    f"!variables.containers.exists(c, has(c.resources) && ({_more_than_one_share('limits')}"
    f" || {_more_than_one_share('requests')}))",
    f"a container may ask for one {SHARED_GPU}: a share is a time slice of one GPU, and the device plugin refuses "
    f"more than one per container; ask for whole GPUs ({GPU}) or a MIG slice for more")
# CEL, as the API server evaluates it (Kubernetes CEL: `has`, macros, `quantity`, `namespaceObject`, `variables`).
VARIABLES = {
    "podSpec": "object.spec",
    "containers": "object.spec.containers"
                  " + (has(object.spec.initContainers) ? object.spec.initContainers : [])",
    "requestsGpu": "variables.containers.exists(c, has(c.resources)"
                   f" && ({_gpus_in('limits')} || {_gpus_in('requests')}))",
    # The GPU taint's key, or no key (an empty one too) with Exists: that tolerates every taint.
    "toleratesGpuTaint": f"has(object.spec.tolerations) && object.spec.tolerations.exists(t,"
                         f" (has(t.key) && t.key == '{GPU}')"
                         " || ((!has(t.key) || t.key == '') && has(t.operator) && t.operator == 'Exists'))",
    # A pod created on a named node skips the scheduler, and the kubelet re-checks only NoExecute taints. The
    # scheduler binds through pods/binding, which these policies do not match; nodeName is fixed after creation.
    "namesNode": "request.operation == 'CREATE' && has(object.spec.nodeName) && object.spec.nodeName != ''",
    "tenantClass": f"has(namespaceObject.metadata.labels) && '{labels.TENANT_PRIORITY_LABEL}' in"
                   f" namespaceObject.metadata.labels ? namespaceObject.metadata.labels['{labels.TENANT_PRIORITY_LABEL}']"
                   " : ''",
    "namespaceLabels": "has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {}",
    "tolerations": "has(object.spec.tolerations) ? object.spec.tolerations : []",
    # An update that leaves the tolerations as they were (most do: a controller removing its finalizer) is not
    # checked again against rules that came after the pod.
    "tolerationsKept": "request.operation == 'UPDATE' && variables.tolerations"
                       " == (has(oldObject.spec.tolerations) ? oldObject.spec.tolerations : [])",
}
# A cordon (kubectl cordon, every drain and re-cut) is the taint node.kubernetes.io/unschedulable:NoSchedule, which
# the scheduler holds a pod to like any other (NodeUnschedulable filter, pkg/scheduler/framework/plugins/
# nodeunschedulable): a tenant pod may tolerate neither it nor every taint at once. Checked on pods, and in tenancy
# mode queue on Jobs' templates too (by `variables.podSpec` and `variables.tolerations`).
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
CORDON_RULES = [
    ("variables.tolerationsKept || !variables.tolerations.exists(t, (!has(t.key) || t.key == '') && has(t.operator)"
     " && t.operator == 'Exists')",
     f"tolerating every taint would tolerate a cordoned node and pools dedicated to other tenants; tolerate {GPU} "
     "by its key"),
    (f"variables.tolerationsKept || !variables.tolerations.exists(t, has(t.key) && t.key == '{UNSCHEDULABLE_TAINT}')",
     f"a cordoned node takes no new tenant pod: do not tolerate {UNSCHEDULABLE_TAINT}"),
]
# (expression that must hold, message when it does not)
VALIDATIONS = [
    ("variables.requestsGpu || !variables.toleratesGpuTaint",
     f"a pod that tolerates the GPU taint must request {GPU}: GPU nodes are for GPU work"),
    ("!variables.namesNode",
     "tenant pods are placed by the scheduler: spec.nodeName skips the GPU taint; use a nodeSelector instead"),
    ("!has(object.spec.priorityClassName) || !(object.spec.priorityClassName.startsWith('system-')"
     " || object.spec.priorityClassName.startsWith('openshift-'))",
     "system-* and openshift-* priority classes are for the platform, not tenants"),
    (f"!has(object.spec.priorityClassName) || object.spec.priorityClassName != '{labels.HIGH_PRIORITY_CLASS}'"
     f" || variables.tenantClass == '{labels.HIGH_PRIORITY_CLASS}'",
     f"this tenant may not use priority class {labels.HIGH_PRIORITY_CLASS}"),
    ("!variables.containers.exists(c, has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES'))",
     f"NVIDIA_VISIBLE_DEVICES is set by the device plugin; request {GPU} instead"),
    # The operator's runtime classes: nvidia, nvidia-cdi, nvidia-legacy.
    ("variables.requestsGpu || !has(object.spec.runtimeClassName)"
     " || !object.spec.runtimeClassName.startsWith('nvidia')",
     f"the nvidia runtime classes need a {GPU} request"),
    ("!has(object.metadata.annotations) || !object.metadata.annotations.exists(k, k.startsWith('cdi.k8s.io/'))",
     f"cdi.k8s.io/ annotations ask the runtime for devices outside the quota; request {GPU} instead"),
    ("!has(object.spec.resourceClaims) || size(object.spec.resourceClaims) == 0",
     f"resource claims (DRA) are not offered to tenants: GPUs come as {GPU} under the tenant's quota"),
    ONE_SHARE_PER_CONTAINER,
    (f"!variables.tolerations.exists(t, has(t.key) && t.key == '{labels.DEDICATED_TAINT_KEY}'"
     " && (!has(t.value) || t.value == ''))",
     f"tolerate a dedicated pool by its name ({labels.DEDICATED_TAINT_KEY} with operator Equal and the pool as value), "
     "not every dedicated pool at once"),
    *CORDON_RULES,
    # Ephemeral containers (added through pods/ephemeralcontainers, which the policy matches too) take no resources,
    # but an environment as any container does.
    ("!has(object.spec.ephemeralContainers) || !object.spec.ephemeralContainers.exists(c, has(c.env)"
     " && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES'))",
     f"NVIDIA_VISIBLE_DEVICES is set by the device plugin, in ephemeral containers too; request {GPU} instead"),
]


def dedicated_validations(owners: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """Per pool dedicated to some tenants: only pods in their namespaces (labelled labels.DEDICATED_POOL_LABEL for
    it) tolerate its taint or select it by the pool label (no pod tolerates every taint: CORDON_RULES)."""
    rules = []
    for pool, tenants in sorted(owners.items()):
        label = labels.DEDICATED_POOL_LABEL.format(pool=pool)
        rules.append((
            f"'{label}' in variables.namespaceLabels || (!variables.tolerations.exists(t, has(t.key)"
            f" && t.key == '{labels.DEDICATED_TAINT_KEY}' && has(t.value) && t.value == '{pool}')"
            f" && !(has(object.spec.nodeSelector) && '{labels.POOL_LABEL}' in object.spec.nodeSelector"
            f" && object.spec.nodeSelector['{labels.POOL_LABEL}'] == '{pool}'))",
            f"pool {pool} is dedicated to {', '.join(tenants)}: only their pods may tolerate its taint or select it"))
    return rules


def _units(kind: str) -> str:
    return (f"variables.containers.map(c, has(c.resources) && has(c.resources.limits) && '{kind}' in c.resources.limits"
            f" ? quantity(string(c.resources.limits['{kind}'])).asInteger() : 0).sum()")


def _asked(resource: str) -> str:
    return (f"variables.containers.map(c, has(c.resources) && has(c.resources.requests)"
            f" && '{resource}' in c.resources.requests"
            f" ? quantity(string(c.resources.requests['{resource}'])).asApproximateFloat() : 0.0).sum()")


def node_share_validations(shares: Mapping[str, tuple[int, int]]) -> list[tuple[str, str]]:
    """A GPU pod asks for at most its units' share of a node's CPU and memory (`shares`: per kind, millicores and MiB
    per unit; stacks.tenancy.node_shares), every container counted, init containers too. A pod that asks for a kind
    without a known share (a bring-your-own pool's) is not bounded. Checked as a pod or Job is created: tenants
    cannot change a pod's requests (pods/resize is not theirs), and a pod admitted under an earlier bound stays
    updatable."""
    if not shares:
        return []
    bounded = sorted(shares)
    unknown = (f"variables.containers.exists(c, has(c.resources) && has(c.resources.limits)"
               f" && c.resources.limits.exists(k, (k == '{GPU}' || k == '{SHARED_GPU}' || k.startsWith('{MIG_PREFIX}'))"
               f" && !(k in {bounded})))")
    rules = []
    for resource, index, scale, unit in (("cpu", 0, 0.001, "millicores"), ("memory", 1, 1024.0 * 1024, "MiB")):
        bound = " + ".join(f"double({_units(kind)}) * {shares[kind][index] * scale!r}" for kind in bounded)
        per_kind = ", ".join(f"{kind} {shares[kind][index]}" for kind in bounded)
        rules.append((f"request.operation != 'CREATE' || !variables.requestsGpu || {unknown}"
                      f" || {_asked(resource)} <= {bound}",
                      f"a GPU pod asks for at most its GPUs' share of a node's {resource}, per unit ({unit}): "
                      f"{per_kind}; more would strand the node's other GPUs or slices, which other tenants were given"))
    return rules


# Karpenter treats a pod's preferred anti-affinity and spread as required until it cannot meet them
# (sigs.k8s.io/karpenter v1.15.0 pkg/controllers/provisioning/scheduling/preferences.go, Preferences.Relax), so it
# launches a node for each spread pod.
SPREAD_RULES = [
    ("request.operation != 'CREATE' || !variables.requestsGpu || !has(variables.podSpec.affinity)"
     " || !has(variables.podSpec.affinity.podAntiAffinity)",
     "GPU pods here are not spread by pod anti-affinity: Karpenter would launch a node for each, up to its pool's "
     "limit, and strand GPUs other tenants were given"),
    ("request.operation != 'CREATE' || !variables.requestsGpu || !has(variables.podSpec.topologySpreadConstraints)"
     " || size(variables.podSpec.topologySpreadConstraints) == 0",
     "GPU pods here are not spread by topology spread constraints: Karpenter would launch a node for each, up to its "
     "pool's limit, and strand GPUs other tenants were given"),
]


# Outside tenant namespaces (and the cluster's and platform's own, which the binding leaves out): no GPUs at all.
GUARD_VALIDATIONS = [
    ("!variables.requestsGpu",
     f"{GPU} is for tenants: run GPU work in a tenant namespace (labelled {labels.TENANT_LABEL}), under its quota"),
    ("!variables.toleratesGpuTaint",
     "only tenant pods that request GPUs tolerate the GPU taint: GPU nodes are for GPU work"),
    ("!variables.namesNode",
     "pods here are placed by the scheduler: spec.nodeName skips the GPU taint; use a nodeSelector instead"),
]


@dataclass(frozen=True)
class TenantAdmissionArgs:
    """The policy's name, its CEL variables and validations (default: the GPU quota rules above), and the namespaces
    it binds: tenants' (carrying the tenant label), or with `others` every other namespace but those `exempt` by
    name or starting with `exempt_prefix`."""

    policy: str = POLICY_NAME
    variables: Mapping[str, str] = field(default_factory=lambda: VARIABLES)
    validations: tuple[tuple[str, str], ...] = tuple(VALIDATIONS)
    tenant_label: str = labels.TENANT_LABEL
    others: bool = False
    exempt: tuple[str, ...] = ()
    exempt_prefix: str | None = None

    def namespace_selector(self) -> dict:
        if not self.others:
            return {"matchExpressions": [{"key": self.tenant_label, "operator": "Exists"}]}
        return {"matchExpressions": [{"key": self.tenant_label, "operator": "DoesNotExist"},
                                     {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                      "values": sorted(set(self.exempt))}]}


# Namespaces of every cluster whose node agents tolerate every taint.
CLUSTER_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def gpu_guard_args(platform_namespaces: tuple[str, ...], openshift: bool) -> TenantAdmissionArgs:
    """The cluster-wide guard: no GPU request, GPU toleration or named node outside tenant namespaces, except in
    the cluster's own namespaces, the platform's (operators, monitoring, trusted add-ons) and on OpenShift its
    reserved openshift-* ones (no user may create a project so named)."""
    return TenantAdmissionArgs(policy=GUARD_POLICY_NAME, validations=tuple(GUARD_VALIDATIONS), others=True,
                               exempt=(*CLUSTER_NAMESPACES, *platform_namespaces),
                               exempt_prefix="openshift-" if openshift else None)


class TenantAdmission(pulumi.ComponentResource):
    """A policy and its binding to every tenant namespace (or every other); the API server rejects a violating pod.

    By default it closes the ways around the GPU quota that the quota alone cannot see: tolerating the GPU taint
    without a GPU request, naming a node (which skips the taint), asking the runtime for devices by environment,
    runtime class, CDI annotation or resource claim, and preempting with a priority class the tenant may not use.
    """

    def __init__(self, name: str, args: TenantAdmissionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantAdmission", name, None, opts)
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy", metadata=metadata(args.policy), spec={
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                    # Ephemeral containers are added through a subresource, checked as the pod it changes.
                    "resources": ["pods", "pods/ephemeralcontainers"]}]},
                **({"matchConditions": [{"name": "outside-reserved-namespaces",
                                         "expression": f"!request.namespace.startsWith('{args.exempt_prefix}')"}]}
                   if args.exempt_prefix else {}),
                "variables": [{"name": key, "expression": value} for key, value in args.variables.items()],
                "validations": [{"expression": rule, "message": message} for rule, message in args.validations],
            }, opts=child_options(self, opts))
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding", metadata=metadata(args.policy), spec={
                "policyName": args.policy,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": args.namespace_selector()},
            }, opts=child_options(self, opts, policy))
        self.register_outputs({"policy": args.policy})
