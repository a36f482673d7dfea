"""DraAdmission: in allocation mode `dra`, what tenants may ask of Dynamic Resource Allocation, enforced by the API
server: claims and claim templates name only the DeviceClasses the tenant was given, never `adminAccess`, and no
tenant namespace carries the label that lets the API server admit `adminAccess` at all."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.admission import GUARD_VALIDATIONS, VALIDATIONS, VARIABLES
from components.manifests import child_options, metadata

POLICY_NAME = "gpu-platform-tenant-claims"  # one policy per kind, named POLICY_NAME-<resource>
NAMESPACE_POLICY_NAME = "gpu-platform-admin-access"
# On a tenant namespace: the DeviceClasses its claims may name, comma-separated (the stack sets it; tenants cannot
# change namespaces).
CLASSES_ANNOTATION = "gpu-platform.io/device-classes"
# The API server admits a claim with adminAccess only in a namespace labelled so, "true" (k8s.io/kubernetes v1.34.4
# pkg/registry/resource/utils.go, AuthorizedForAdmin; pkg/apis/resource/types.go DRAAdminNamespaceLabelKey); an
# admin-access claim is given devices already allocated to others.
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"

_REQUESTS = {"resourceclaims": "object.spec", "resourceclaimtemplates": "object.spec.spec"}
VARIABLES_BY_RESOURCE = {
    resource: {
        "requests": f"has({spec}.devices) && has({spec}.devices.requests) ? {spec}.devices.requests : []",
        "allowed": f"has(namespaceObject.metadata.annotations) && '{CLASSES_ANNOTATION}' in"
                   f" namespaceObject.metadata.annotations ? namespaceObject.metadata.annotations"
                   f"['{CLASSES_ANNOTATION}'].split(',') : []",
    } for resource, spec in _REQUESTS.items()}
CLAIM_VALIDATIONS = [
    ("variables.requests.all(r, has(r.exactly) ? r.exactly.deviceClassName in variables.allowed"
     " : (has(r.firstAvailable) && r.firstAvailable.all(s, s.deviceClassName in variables.allowed)))",
     "a claim names only the DeviceClasses this tenant was given (the namespace's "
     f"{CLASSES_ANNOTATION} annotation): another class would select GPUs outside its quota"),
    ("!variables.requests.exists(r, has(r.exactly) && has(r.exactly.adminAccess) && r.exactly.adminAccess)",
     "adminAccess is for the platform's monitoring: it is given devices already allocated to other tenants"),
]
# Tenancy mode queue: a template is never deleted but with its namespace (components.tenant_quota.QUEUED_DRA_RULES);
# an owner reference would have the garbage collector delete it with its owner, freeing its name for a template
# asking more devices than Kueue counted for the Jobs that name it.
QUEUED_TEMPLATE_VALIDATIONS = [
    ("!has(object.metadata.ownerReferences) || size(object.metadata.ownerReferences) == 0",
     "in tenancy mode queue a ResourceClaimTemplate has no owner: Kueue counted it for the Jobs that name it, and "
     "one deleted with its owner could be made again asking more devices"),
]
NAMESPACE_VALIDATIONS = [
    (f"!has(object.metadata.labels) || !('{labels.TENANT_LABEL}' in object.metadata.labels)"
     f" || !('{ADMIN_ACCESS_LABEL}' in object.metadata.labels)",
     f"a tenant namespace does not carry {ADMIN_ACCESS_LABEL}: claims there could take every device of a node, "
     "other tenants' included"),
]

# The tenant pod policy in mode `dra`: a pod's GPUs come through its resource claims (counted by the quota per
# DeviceClass), so a claim counts as a GPU request and is no longer refused.
NO_CLAIMS = "!has(object.spec.resourceClaims) || size(object.spec.resourceClaims) == 0"
_CLAIMS = "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"
DRA_POD_VARIABLES = {**VARIABLES, "requestsGpu": f"{_CLAIMS} || {VARIABLES['requestsGpu']}"}
DRA_POD_VALIDATIONS = tuple(rule for rule in VALIDATIONS if rule[0] != NO_CLAIMS)
# Outside tenant namespaces: no claims either (the operator's own namespace is exempt, as it is from the guard).
DRA_GUARD_VALIDATIONS = (*GUARD_VALIDATIONS, (
    NO_CLAIMS, "resource claims are for tenants: run GPU work in a tenant namespace, under its quota"))


@dataclass(frozen=True)
class DraAdmissionArgs:
    """The policies' name prefix, the label every tenant namespace carries, and whether tenancy mode is queue."""

    policy: str = POLICY_NAME
    tenant_label: str = labels.TENANT_LABEL
    queued: bool = False  # tenancy mode queue: templates have no owners


class DraAdmission(pulumi.ComponentResource):
    """A policy on tenants' ResourceClaims and one on their ResourceClaimTemplates, bound to every tenant namespace,
    and one on every namespace against the admin-access label where the tenant label is."""

    def __init__(self, name: str, args: DraAdmissionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DraAdmission", name, None, opts)
        tenants = {"namespaceSelector": {"matchExpressions": [{"key": args.tenant_label, "operator": "Exists"}]}}
        templates = QUEUED_TEMPLATE_VALIDATIONS if args.queued else []
        policies = [(f"{args.policy}-{resource}", "resource.k8s.io", "v1", resource, VARIABLES_BY_RESOURCE[resource],
                     CLAIM_VALIDATIONS + (templates if resource == "resourceclaimtemplates" else []), tenants)
                    for resource in _REQUESTS]
        policies.append((NAMESPACE_POLICY_NAME, "", "v1", "namespaces", {}, NAMESPACE_VALIDATIONS, {}))
        for policy_name, group, version, resource, variables, validations, match in policies:
            policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{name}-{resource}-policy", metadata=metadata(policy_name), spec={
                    "failurePolicy": "Fail",
                    # matchPolicy Equivalent (the default): requests through resource.k8s.io/v1beta1 and v1beta2 are
                    # converted to v1 and checked the same.
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": [group], "apiVersions": [version], "operations": ["CREATE", "UPDATE"],
                        "resources": [resource]}]},
                    "variables": [{"name": key, "expression": value} for key, value in variables.items()],
                    "validations": [{"expression": rule, "message": message} for rule, message in validations],
                }, opts=child_options(self, opts))
            k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{name}-{resource}-binding", metadata=metadata(policy_name), spec={
                    "policyName": policy_name, "validationActions": ["Deny"],
                    **({"matchResources": match} if match else {}),
                }, opts=child_options(self, opts, policy))
        self.register_outputs({"policies": [policy[0] for policy in policies]})
