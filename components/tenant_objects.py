"""TenantObjects: a ValidatingAdmissionPolicy, enforced by the API server, on what tenants make besides pods: no
service-account token Secrets (tokens that never expire) and no Service reaching beyond the cluster."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata

POLICY_NAME = "gpu-platform-tenant-objects"
# The token controller fills a Secret of this type with a token of the service account it names that never expires
# (kube-controller-manager's tokens_controller), where TokenRequest gives bound, expiring tokens.
TOKEN_SECRET = "kubernetes.io/service-account-token"

# CEL, as the API server evaluates it; `object.kind` tells the kinds the policy matches apart.
VALIDATIONS = [
    (f"object.kind != 'Secret' || !has(object.type) || object.type != '{TOKEN_SECRET}'",
     f"{TOKEN_SECRET} Secrets hold tokens that never expire; pods get expiring tokens of their service account "
     "(projected volumes) without one"),
    # A Service's externalIPs capture traffic to any address in the cluster, the API server's included
    # (CVE-2020-8554); NodePort and LoadBalancer open a port on every node or a cloud load balancer.
    ("object.kind != 'Service' || !has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
     "Service externalIPs are refused: they take over traffic to those addresses cluster-wide"),
    ("object.kind != 'Service' || !has(object.spec.type) || object.spec.type == 'ClusterIP'",
     "tenant Services are ClusterIP: NodePort and LoadBalancer (and ExternalName) reach beyond the tenant; "
     "ask the platform team to publish a service"),
]


@dataclass(frozen=True)
class TenantObjectsArgs:
    """The policy's name and the label every tenant namespace carries (its binding selects them)."""

    policy: str = POLICY_NAME
    tenant_label: str = labels.TENANT_LABEL


class TenantObjects(pulumi.ComponentResource):
    """The policy on tenants' Secrets and Services and its binding to every tenant namespace (`Deny`)."""

    def __init__(self, name: str, args: TenantObjectsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantObjects", name, None, opts)
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy", metadata=metadata(args.policy), spec={
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                    "resources": ["secrets", "services"]}]},
                "validations": [{"expression": rule, "message": message} for rule, message in VALIDATIONS],
            }, opts=child_options(self, opts))
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding", metadata=metadata(args.policy), spec={
                "policyName": args.policy,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchExpressions": [
                    {"key": args.tenant_label, "operator": "Exists"}]}},
            }, opts=child_options(self, opts, policy))
        self.register_outputs({"policy": args.policy})
