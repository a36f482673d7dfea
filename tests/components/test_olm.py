"""OlmOperator: a Subscription pinned to one CSV with manual approval, and a Job that approves only that CSV."""

from __future__ import annotations

from typing import Any

import subprocess

import pytest

from components.olm import APPROVE_SCRIPT

from tests.cel import broken_rules
from tests.conftest import Plan, stack_config

# (namespace, package, pinned CSV, logical prefix) of the two operators dev installs through OLM.
OPERATORS = [
    ("nvidia-gpu-operator", "gpu-operator-certified", "gpu-operator-certified.v26.7.0", "gpu-operator-olm"),
    ("openshift-nfd", "nfd", "nfd.4.18.0-202509240837", "nfd-operator"),
]


def job(plan: Plan, namespace: str, csv: str) -> dict[str, Any]:
    return plan.manifest("Job", f"approve-{csv}", namespace)


def container(plan: Plan, namespace: str, csv: str) -> dict[str, Any]:
    [only] = job(plan, namespace, csv)["spec"]["template"]["spec"]["containers"]
    return only


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_subscription_is_pinned_and_manually_approved(dev_plan: Plan, namespace: str, package: str, csv: str,
                                                      prefix: str) -> None:
    spec = dev_plan.manifest("Subscription", package, namespace)["spec"]
    assert spec["installPlanApproval"] == "Manual"  # OLM never moves to a newer CSV by itself
    assert spec["startingCSV"] == csv
    assert spec["name"] == package and spec["sourceNamespace"] == "openshift-marketplace"


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_operator_group_targets_its_own_namespace(dev_plan: Plan, namespace: str, package: str, csv: str,
                                                  prefix: str) -> None:
    group = dev_plan.manifest("OperatorGroup", f"{package}-group", namespace)
    assert group["spec"]["targetNamespaces"] == [namespace]
    assert dev_plan.depends_on(dev_plan.object("Subscription", package, namespace), f"{prefix}-operator-group")


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_approver_approves_only_the_pinned_csv(dev_plan: Plan, namespace: str, package: str, csv: str,
                                               prefix: str) -> None:
    approver = container(dev_plan, namespace, csv)
    env = {item["name"]: item["value"] for item in approver["env"]}
    assert env == {"CSV": csv, "NAMESPACE": namespace}
    script = approver["command"][-1]
    assert "clusterServiceVersionNames[0]=='$CSV'" in script
    assert '"approved":true' in script
    assert "Succeeded" in script  # completes only once the CSV is installed
    assert approver["image"] == "registry.redhat.io/openshift4/ose-cli-rhel9:v4.18"


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_the_approver_may_change_only_the_pinned_csvs_install_plan(dev_plan: Plan, namespace: str, package: str,
                                                                   csv: str, prefix: str) -> None:
    """RBAC cannot name OLM's generated install plans; an admission policy scoped to the approver's service account
    refuses its change of any plan that does not install the pinned CSV."""
    policy = dev_plan.manifest("ValidatingAdmissionPolicy", f"gpu-platform-{package}-approver")["spec"]
    [condition] = policy["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == 'system:serviceaccount:{namespace}:{package}-approver'"
    assert policy["matchConstraints"]["resourceRules"][0]["resources"] == ["installplans"]
    rules = [(v["expression"], v["message"]) for v in policy["validations"]]

    def plan_for(*csvs: str) -> dict[str, Any]:
        return {"spec": {"approved": True, "clusterServiceVersionNames": list(csvs)}}

    assert broken_rules({}, rules, plan_for(csv)) == []
    assert broken_rules({}, rules, plan_for(f"{package}.v99.0.0")) == [
        f"{package}-approver approves only the install plan of the pinned {csv}"]
    binding = dev_plan.manifest("ValidatingAdmissionPolicyBinding", f"gpu-platform-{package}-approver")["spec"]
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    assert dev_plan.depends_on(dev_plan.object("Job", f"approve-{csv}", namespace), f"{prefix}-approver-scope-binding")


# A stand-in for `oc`: install plans from $PLANS (one name a line), patches logged to $PATCHED, the CSV Succeeded.
FAKE_OC = """#!/bin/bash
case "$1 $2" in
  "get installplan") printf '%b' "$PLANS" ;;
  "get csv") echo Succeeded ;;
  "patch installplan") echo "$3" >> "$PATCHED" ;;
esac
"""


def run_approver(tmp_path, plans: str) -> tuple[subprocess.CompletedProcess, str]:
    (tmp_path / "oc").write_text(FAKE_OC)
    (tmp_path / "oc").chmod(0o755)
    patched = tmp_path / "patched"
    patched.touch()
    result = subprocess.run(["bash", "-c", APPROVE_SCRIPT], capture_output=True, text=True, timeout=30, env={
        "PATH": f"{tmp_path}:/usr/bin:/bin", "CSV": "nfd.4.18.0-1", "NAMESPACE": "openshift-nfd",
        "PLANS": plans, "PATCHED": str(patched)})
    return result, patched.read_text()


def test_the_approver_approves_the_one_plan_of_the_pinned_csv(tmp_path) -> None:
    result, patched = run_approver(tmp_path, "install-abcde\\n")
    assert result.returncode == 0, result.stderr
    assert patched == "install-abcde\n"


def test_two_plans_for_the_pinned_csv_fail_the_approver_naming_both(tmp_path) -> None:
    """The names used to be joined into one that matched no plan; now the Job fails and says which to approve."""
    result, patched = run_approver(tmp_path, "install-abcde\\ninstall-fghij\\n")
    assert result.returncode == 1 and patched == ""
    assert "2 install plans install nfd.4.18.0-1 in openshift-nfd: install-abcde install-fghij" in result.stderr


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_approver_role_is_least_privilege(dev_plan: Plan, namespace: str, package: str, csv: str,
                                          prefix: str) -> None:
    role = dev_plan.manifest("Role", f"{package}-approver", namespace)
    assert sorted((rule["resources"][0], tuple(sorted(rule["verbs"]))) for rule in role["rules"]) == [
        ("clusterserviceversions", ("get",)), ("installplans", ("get", "list", "patch"))]
    assert all(rule["apiGroups"] == ["operators.coreos.com"] and len(rule["resources"]) == 1
               for rule in role["rules"])
    binding = dev_plan.manifest("RoleBinding", f"{package}-approver", namespace)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{package}-approver", "namespace": namespace}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": f"{package}-approver"}
    pod = job(dev_plan, namespace, csv)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{package}-approver"


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_approver_runs_unprivileged_and_gives_up(dev_plan: Plan, namespace: str, package: str, csv: str,
                                                 prefix: str) -> None:
    manifest = job(dev_plan, namespace, csv)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container(dev_plan, namespace, csv)["securityContext"]["allowPrivilegeEscalation"] is False
    deadline = manifest["spec"]["activeDeadlineSeconds"]
    assert manifest["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == str(deadline)


@pytest.mark.parametrize(("namespace", "package", "csv", "prefix"), OPERATORS)
def test_approver_waits_for_subscription_and_rbac(dev_plan: Plan, namespace: str, package: str, csv: str,
                                                  prefix: str) -> None:
    approve = dev_plan.object("Job", f"approve-{csv}", namespace)
    for name in ("approver-sa", "approver-role", "approver-binding"):
        assert dev_plan.depends_on(approve, f"{prefix}-{name}")
    assert dev_plan.depends_on(dev_plan.object("Role", f"{package}-approver", namespace), f"{prefix}-subscription")


def test_nfd_csv_can_be_pinned_for_a_minor_without_a_default(render) -> None:
    config = stack_config("dev")
    config["gpu-platform:cluster"].update(release="4.19.10", kernel="5.14.0-570.28.1.el9_6.x86_64",
                                          nfdOperatorCsv="nfd.4.19.0-202510010101")
    plan = render("dev", config)
    assert plan.manifest("Subscription", "nfd", "openshift-nfd")["spec"]["startingCSV"] == "nfd.4.19.0-202510010101"
    env = {e["name"]: e["value"] for e in container(plan, "openshift-nfd", "nfd.4.19.0-202510010101")["env"]}
    assert env["CSV"] == "nfd.4.19.0-202510010101"
    assert container(plan, "openshift-nfd", "nfd.4.19.0-202510010101")["image"].endswith(":v4.19")
