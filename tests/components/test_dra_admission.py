"""components.dra_admission: the tenant pod policy in mode dra, and the claims policies as rendered (their CEL is
judged by the real API server in e2e/test_dra.py: cel-python has no Kubernetes string library)."""

from __future__ import annotations

from components.admission import VALIDATIONS
from components.dra_admission import (DRA_POD_VALIDATIONS, DRA_POD_VARIABLES, NAMESPACE_POLICY_NAME, NO_CLAIMS,
                                      POLICY_NAME)
from tests.conftest import render_stack


def test_mode_dra_drops_only_the_refusal_of_claims_and_counts_claims_as_gpus() -> None:
    assert [rule for rule in VALIDATIONS if rule not in DRA_POD_VALIDATIONS] == [
        rule for rule in VALIDATIONS if rule[0] == NO_CLAIMS]
    assert "object.spec.resourceClaims" in DRA_POD_VARIABLES["requestsGpu"]


def test_claims_and_templates_each_have_a_policy_bound_to_tenants_and_namespaces_one_of_their_own() -> None:
    plan = render_stack("dra")
    for resource in ("resourceclaims", "resourceclaimtemplates"):
        policy = plan.manifest("ValidatingAdmissionPolicy", f"{POLICY_NAME}-{resource}")
        assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == [resource]
        binding = plan.manifest("ValidatingAdmissionPolicyBinding", f"{POLICY_NAME}-{resource}")
        assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"] == \
            "gpu-platform.io/tenant"
    namespaces = plan.manifest("ValidatingAdmissionPolicy", NAMESPACE_POLICY_NAME)
    assert namespaces["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["namespaces"]
    assert plan.kind("ValidatingAdmissionPolicy") and not render_stack("dev").kind("DeviceClass")
