"""TenantObjects: a ValidatingAdmissionPolicy, enforced by the API server, on what tenants make besides pods: no
service-account token Secrets (tokens that never expire) and no Service reaching beyond the cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata

POLICY_NAME = "gpu-platform-tenant-objects"  # one policy per kind, named POLICY_NAME-<resource>
# The token controller fills a Secret of this type with a token of the service account it names that never expires
# (kube-controller-manager's tokens_controller), where TokenRequest gives bound, expiring tokens.
TOKEN_SECRET = "kubernetes.io/service-account-token"

# CEL, as the API server evaluates it, per resource: the API server type-checks each expression against the kind
# its policy matches, so each kind has a policy of its own.
SECRET_VALIDATIONS = [
    (f"!has(object.type) || object.type != '{TOKEN_SECRET}'",
     f"{TOKEN_SECRET} Secrets hold tokens that never expire; pods get expiring tokens of their service account "
     "(projected volumes) without one"),
]
SERVICE_VALIDATIONS = [
    # A Service's externalIPs capture traffic to any address in the cluster, the API server's included
    # (CVE-2020-8554); NodePort and LoadBalancer open a port on every node or a cloud load balancer.
    ("!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
     "Service externalIPs are refused: they take over traffic to those addresses cluster-wide"),
    ("!has(object.spec.type) || object.spec.type == 'ClusterIP'",
     "tenant Services are ClusterIP: NodePort and LoadBalancer (and ExternalName) reach beyond the tenant; "
     "ask the platform team to publish a service"),
]
VALIDATIONS = {"secrets": SECRET_VALIDATIONS, "services": SERVICE_VALIDATIONS}


@dataclass(frozen=True)
class TenantObjectsArgs:
    """The policies' name prefix and the label every tenant namespace carries (their bindings select them)."""

    policy: str = POLICY_NAME
    tenant_label: str = labels.TENANT_LABEL


class TenantObjects(pulumi.ComponentResource):
    """A policy on tenants' Secrets and one on their Services, each bound to every tenant namespace (`Deny`)."""

    def __init__(self, name: str, args: TenantObjectsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantObjects", name, None, opts)
        for resource, validations in VALIDATIONS.items():
            policy_name = f"{args.policy}-{resource}"
            policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                f"{name}-{resource}-policy", metadata=metadata(policy_name), spec={
                    "failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [{
                        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                        "resources": [resource]}]},
                    "validations": [{"expression": rule, "message": message} for rule, message in validations],
                }, opts=child_options(self, opts))
            k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                f"{name}-{resource}-binding", metadata=metadata(policy_name), spec={
                    "policyName": policy_name,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": {"matchExpressions": [
                        {"key": args.tenant_label, "operator": "Exists"}]}},
                }, opts=child_options(self, opts, policy))
        self.register_outputs({"policies": [f"{args.policy}-{resource}" for resource in VALIDATIONS]})
