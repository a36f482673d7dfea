"""components.tenant_objects: the policy on tenants' Secrets and Services, its CEL evaluated, and as rendered."""

from __future__ import annotations

from typing import Any

import pytest

from components import labels
from components.tenant_objects import POLICY_NAME, TOKEN_SECRET, VALIDATIONS
from tests.cel import broken_rules, program
from tests.conftest import Plan


def admit(obj: dict[str, Any]) -> list[str]:
    return broken_rules({}, VALIDATIONS[{"Secret": "secrets", "Service": "services"}[obj["kind"]]], obj)


def secret(kind: str | None) -> dict[str, Any]:
    return {"kind": "Secret", "metadata": {"name": "s"}, **({"type": kind} if kind else {})}


def service(**spec: Any) -> dict[str, Any]:
    return {"kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}], **spec}}


def test_every_expression_compiles() -> None:
    for validations in VALIDATIONS.values():
        for rule, _ in validations:
            program(rule)


@pytest.mark.parametrize("obj", [secret(None), secret("Opaque"), secret("kubernetes.io/dockerconfigjson"),
                                 secret("kubernetes.io/tls"), service(), service(type="ClusterIP"),
                                 service(type="ClusterIP", clusterIP="None"), service(externalIPs=[])],
                         ids=["secret", "opaque", "pull-secret", "tls", "service", "cluster-ip", "headless",
                              "no-external-ips"])
def test_what_tenants_need_is_admitted(obj: dict[str, Any]) -> None:
    assert admit(obj) == []


@pytest.mark.parametrize("obj, reason", [
    (secret(TOKEN_SECRET), "never expire"),
    (service(externalIPs=["10.96.0.1"]), "externalIPs"),
    (service(type="NodePort"), "ClusterIP"),
    (service(type="LoadBalancer"), "ClusterIP"),
    (service(type="ExternalName", externalName="example.com"), "ClusterIP"),
], ids=["token-secret", "external-ips", "node-port", "load-balancer", "external-name"])
def test_tokens_and_exposure_are_refused(obj: dict[str, Any], reason: str) -> None:
    [message] = admit(obj)
    assert reason in message


@pytest.mark.parametrize("resource", sorted(VALIDATIONS))
def test_each_policy_is_bound_to_every_tenant_namespace_before_any_exists(dev_plan: Plan, resource: str) -> None:
    """One policy per kind: the API server type-checks each expression against every kind its policy matches."""
    policy = dev_plan.manifest("ValidatingAdmissionPolicy", f"{POLICY_NAME}-{resource}")
    binding = dev_plan.manifest("ValidatingAdmissionPolicyBinding", f"{POLICY_NAME}-{resource}")
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [resource]
    assert [v["expression"] for v in policy["spec"]["validations"]] == [rule for rule, _ in VALIDATIONS[resource]]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": labels.TENANT_LABEL, "operator": "Exists"}]
    bound = dev_plan.object("ValidatingAdmissionPolicyBinding", f"{POLICY_NAME}-{resource}")["urn"]
    tenants = [namespace for namespace in dev_plan.of_type("kubernetes:core/v1:Namespace")
               if labels.TENANT_LABEL in namespace["inputs"]["metadata"].get("labels", {})]
    assert tenants and all(bound in namespace["dependencies"] for namespace in tenants)
