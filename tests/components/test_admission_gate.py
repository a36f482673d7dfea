"""components.admission_gate: tenants are bound only after a Job has seen every tenant policy refuse its probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import labels
from components.admission_gate import ACCOUNT, CURL_IMAGE, GATE_NAMESPACE, PROBE_NAMESPACE, Probe, tenant_probes
from tests.cel import broken_rules
from tests.conftest import ROOT, Plan, render_stack

JOB = "kubernetes:batch/v1:Job"
GATE = f"system:serviceaccount:{GATE_NAMESPACE}:{ACCOUNT}"
EXAMPLES = {name: ROOT / f"examples/Pulumi.{name}.yaml" for name in ("queue", "queue-openshift", "dra", "dra-queue")}


def plan_of(stack: str) -> Plan:
    path: Path | None = EXAMPLES.get(stack)
    return render_stack(stack, yaml.safe_load(path.read_text())["config"]) if path else render_stack(stack)


@pytest.fixture(scope="module", params=["dev", "prod", "onprem", "partitioned", "queue", "queue-openshift", "dra",
                                        "dra-queue"])
def plan(request: pytest.FixtureRequest) -> Plan:
    return plan_of(request.param)


def gate_job(plan: Plan) -> dict[str, Any]:
    [job] = [r for r in plan.of_type(JOB) if r["inputs"]["metadata"]["namespace"] == GATE_NAMESPACE]
    return job


def tenant_policies(plan: Plan) -> dict[str, dict[str, Any]]:
    """The policies bound (Deny) to every namespace with the tenant label, by name: the ones tenants are held to."""
    bound = {b["spec"]["policyName"] for b in plan.kind("ValidatingAdmissionPolicyBinding")
             if {"key": labels.TENANT_LABEL, "operator": "Exists"} in
             b["spec"].get("matchResources", {}).get("namespaceSelector", {}).get("matchExpressions", [])}
    return {p["metadata"]["name"]: p["spec"] for p in plan.kind("ValidatingAdmissionPolicy")
            if p["metadata"]["name"] in bound}


def refusals(spec: dict[str, Any], probe: Probe, namespace_labels: dict[str, str]) -> list[str]:
    resources = {resource for rule in spec["matchConstraints"]["resourceRules"] for resource in rule["resources"]}
    if probe.resource not in resources:
        return []
    variables = {v["name"]: v["expression"] for v in spec.get("variables", [])}
    validations = [(v["expression"], v["message"]) for v in spec["validations"]]
    return broken_rules(variables, validations, probe.body, namespace=PROBE_NAMESPACE, user=GATE,
                        namespace_labels=namespace_labels)


def probes_of(plan: Plan) -> tuple[Probe, ...]:
    image = gate_job(plan)["inputs"]["spec"]["template"]["spec"]["containers"][0]["image"]
    return tenant_probes(image, queue=bool(plan.kind("ClusterQueue")), dra=bool(plan.kind("DeviceClass")))


def test_every_tenant_policy_is_probed_and_each_probe_is_refused_by_its_policy_alone(plan: Plan) -> None:
    """The API server reports only the first policy that refuses: a probe another policy refused first would keep
    the gate waiting for its own policy to the deadline."""
    policies = tenant_policies(plan)
    namespace_labels = plan.manifest("Namespace", PROBE_NAMESPACE)["metadata"]["labels"]
    probes = probes_of(plan)

    assert {probe.policy for probe in probes} == set(policies)
    for probe in probes:
        refused = {name for name, spec in policies.items() if refusals(spec, probe, namespace_labels)}
        assert refused == {probe.policy}, probe.body["metadata"]["name"]


def test_every_tenants_members_are_bound_only_after_the_gate(plan: Plan) -> None:
    job = gate_job(plan)
    bindings = [r for r in plan.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
                if r["name"].endswith("-members")]

    assert bindings
    for binding in bindings:
        assert job["urn"] in binding["dependencies"], binding["name"]


def test_the_gate_runs_after_every_tenant_policy_and_binding_exists(plan: Plan) -> None:
    job = gate_job(plan)
    names = set(tenant_policies(plan))
    admission = [r for r in plan.resources if r["type"].endswith((":ValidatingAdmissionPolicy",
                                                                  ":ValidatingAdmissionPolicyBinding"))
                 and r["inputs"]["metadata"]["name"] in names]

    assert len(admission) == 2 * len(names)
    assert all(r["urn"] in job["dependencies"] for r in admission)


def test_the_gate_may_create_only_in_the_probe_namespace_where_a_quota_refuses_everything_it_creates(
        plan: Plan) -> None:
    role = plan.manifest("Role", ACCOUNT, PROBE_NAMESPACE)
    binding = plan.manifest("RoleBinding", ACCOUNT, PROBE_NAMESPACE)
    quota = plan.manifest("ResourceQuota", "nothing", PROBE_NAMESPACE)

    dra = bool(plan.kind("DeviceClass"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods", "secrets", "services"], "verbs": ["create"]}] + (
        [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaimtemplates"],
          "verbs": ["create"]}] if dra else [])
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": GATE_NAMESPACE}]
    assert not [b for b in plan.kind("ClusterRoleBinding") + plan.kind("RoleBinding")
                if b is not binding and any(s.get("name") == ACCOUNT for s in b.get("subjects", []))]
    # Nothing of what it may create can be created for real: not a Secret either.
    kinds = ["pods", "secrets", "services"] + (
        ["count/resourceclaims.resource.k8s.io", "count/resourceclaimtemplates.resource.k8s.io"] if dra else [])
    assert quota["spec"]["hard"] == dict.fromkeys(kinds, "0")
    # ... enforced before the gate runs: each limit in its status (see tenant_quota.quota).
    assert {f"jsonpath={{.status.hard['{kind}']}}=0" for kind in kinds} <= set(
        json.loads(quota["metadata"]["annotations"][labels.WAIT_FOR]))


def test_the_gate_is_bounded_and_runs_restricted(plan: Plan) -> None:
    job = gate_job(plan)["inputs"]
    pod = job["spec"]["template"]["spec"]
    image = pod["containers"][0]["image"]
    openshift = image.startswith(labels.OPENSHIFT_CLI_IMAGE.split(":")[0])

    assert job["spec"]["activeDeadlineSeconds"] == int(job["metadata"]["annotations"][labels.TIMEOUT_SECONDS])
    assert pod["serviceAccountName"] == ACCOUNT
    assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                       "capabilities": {"drop": ["ALL"]}}
    # OpenShift's restricted SCC picks the user; elsewhere the kubelet needs a numeric one to check runAsNonRoot.
    assert ("runAsUser" in pod["securityContext"]) is not openshift
    assert openshift or image == CURL_IMAGE


def test_queue_mode_probes_the_queue_policy_and_quota_mode_does_not() -> None:
    assert labels.QUEUE_POLICY_NAME in {p.policy for p in tenant_probes(CURL_IMAGE, queue=True)}
    assert labels.QUEUE_POLICY_NAME not in {p.policy for p in tenant_probes(CURL_IMAGE, queue=False)}
