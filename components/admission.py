"""TenantAdmission: a ValidatingAdmissionPolicy, enforced by the API server, that keeps tenant pods to their quota."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata

POLICY_NAME = "gpu-platform-tenant-pods"
GPU = labels.GPU_RESOURCE

# CEL, as the API server evaluates it (Kubernetes CEL: `has`, macros, `namespaceObject`, `variables`).
VARIABLES = {
    "containers": "object.spec.containers"
                  " + (has(object.spec.initContainers) ? object.spec.initContainers : [])",
    "requestsGpu": "variables.containers.exists(c, has(c.resources) && ("
                   f"(has(c.resources.limits) && '{GPU}' in c.resources.limits && c.resources.limits['{GPU}'] != '0')"
                   f" || (has(c.resources.requests) && '{GPU}' in c.resources.requests"
                   f" && c.resources.requests['{GPU}'] != '0')))",
    "tenantClass": f"has(namespaceObject.metadata.labels) && '{labels.TENANT_PRIORITY_LABEL}' in"
                   f" namespaceObject.metadata.labels ? namespaceObject.metadata.labels['{labels.TENANT_PRIORITY_LABEL}']"
                   " : ''",
}
# (expression that must hold, message when it does not)
VALIDATIONS = [
    (f"variables.requestsGpu || !has(object.spec.tolerations) || !object.spec.tolerations.exists(t,"
     f" (has(t.key) && t.key == '{GPU}') || (!has(t.key) && has(t.operator) && t.operator == 'Exists'))",
     f"a pod that tolerates the GPU taint must request {GPU}: GPU nodes are for GPU work"),
    ("!has(object.spec.priorityClassName) || !(object.spec.priorityClassName.startsWith('system-')"
     " || object.spec.priorityClassName.startsWith('openshift-'))",
     "system-* and openshift-* priority classes are for the platform, not tenants"),
    (f"!has(object.spec.priorityClassName) || object.spec.priorityClassName != '{labels.HIGH_PRIORITY_CLASS}'"
     f" || variables.tenantClass == '{labels.HIGH_PRIORITY_CLASS}'",
     f"this tenant may not use priority class {labels.HIGH_PRIORITY_CLASS}"),
    ("!variables.containers.exists(c, has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES'))",
     f"NVIDIA_VISIBLE_DEVICES is set by the device plugin; request {GPU} instead"),
    ("variables.requestsGpu || !has(object.spec.runtimeClassName) || object.spec.runtimeClassName != 'nvidia'",
     f"runtimeClassName nvidia needs a {GPU} request"),
    # A pod created with spec.nodeName skips the scheduler, and the kubelet re-checks only NoExecute taints: any pod
    # could fill a GPU node past its NoSchedule taint. The scheduler binds through pods/binding, which this policy
    # does not match, and nodeName cannot change after creation, so only CREATE is checked.
    ("request.operation != 'CREATE' || !has(object.spec.nodeName)",
     "tenant pods are placed by the scheduler: spec.nodeName skips the GPU taint; use a nodeSelector instead"),
]


@dataclass(frozen=True)
class TenantAdmissionArgs:
    """The policy's name, its CEL variables and validations (default: the GPU quota rules above), and which
    namespaces are tenants': those carrying the tenant label."""

    policy: str = POLICY_NAME
    variables: Mapping[str, str] = field(default_factory=lambda: VARIABLES)
    validations: tuple[tuple[str, str], ...] = tuple(VALIDATIONS)
    tenant_label: str = labels.TENANT_LABEL


class TenantAdmission(pulumi.ComponentResource):
    """A policy and its binding to every tenant namespace; the API server rejects a violating pod at creation.

    By default it closes the ways around the GPU quota that the quota alone cannot see: tolerating the GPU taint
    without a GPU request, naming a node (which skips the taint), asking the runtime for devices by environment or
    runtime class, and preempting with a priority class the tenant may not use.
    """

    def __init__(self, name: str, args: TenantAdmissionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantAdmission", name, None, opts)
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy", metadata=metadata(args.policy), spec={
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                    "resources": ["pods"]}]},
                "variables": [{"name": key, "expression": value} for key, value in args.variables.items()],
                "validations": [{"expression": rule, "message": message} for rule, message in args.validations],
            }, opts=child_options(self, opts))
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding", metadata=metadata(args.policy), spec={
                "policyName": args.policy,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchExpressions": [
                    {"key": args.tenant_label, "operator": "Exists"}]}},
            }, opts=child_options(self, opts, policy))
        self.register_outputs({"policy": args.policy})
