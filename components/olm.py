"""OlmOperator: an OpenShift operator installed through OLM, pinned to one ClusterServiceVersion."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import child_options, metadata, run_once

MARKETPLACE_NAMESPACE = "openshift-marketplace"
# How long `pulumi up` waits for the pinned CSV to be installed (the approver Job's deadline, and the provider's).
INSTALL_TIMEOUT_SECONDS = 1200
# How long `pulumi up` waits for OLM to resolve the Subscription to the pinned CSV (an install plan that awaits
# approval): seconds on a healthy catalog; a pin the channel does not offer fails here, not at the Job's deadline.
RESOLVE_TIMEOUT_SECONDS = 600

# Approves the one install plan that installs the pinned CSV, then waits until that CSV has succeeded, so the
# operator's CRDs exist once the Job completes. Install plans for any other version stay pending; two plans for the
# pinned CSV (a catalog resolved twice) fail the Job with their names rather than approve a guess.
APPROVE_SCRIPT = """set -eu
echo "waiting for the install plan of $CSV"
while :; do
  plans=$(oc get installplan -n "$NAMESPACE" \\
    -o jsonpath="{range .items[?(@.spec.clusterServiceVersionNames[0]=='$CSV')]}{.metadata.name}{'\\n'}{end}")
  count=$(printf '%s\\n' "$plans" | grep -c . || true)
  [ "$count" -eq 0 ] || break
  sleep 10
done
if [ "$count" -ne 1 ]; then
  echo "$count install plans install $CSV in $NAMESPACE:" $plans "- set spec.approved: true on the right one" >&2
  exit 1
fi
oc patch installplan "$plans" -n "$NAMESPACE" --type merge -p '{"spec":{"approved":true}}'
until [ "$(oc get csv "$CSV" -n "$NAMESPACE" -o jsonpath='{.status.phase}' 2>/dev/null)" = Succeeded ]; do
  sleep 10
done
echo "$CSV installed"
"""


@dataclass(frozen=True)
class OlmOperatorArgs:
    """The pinned package, the namespace it installs to, and the image with `oc` that approves its install plan."""

    package: labels.OlmPackage
    cli_image: str
    namespace_labels: dict[str, str]


class OlmOperator(pulumi.ComponentResource):
    """Namespace, OperatorGroup and a Subscription with manual install-plan approval, plus a Job that approves the
    pinned CSV's install plan and completes once that CSV has installed.

    With manual approval OLM never moves to a newer CSV by itself: a version change is a change of the pin in
    this program, reviewed in its preview; its Job is then replaced and approves the new plan. `installed` is
    the resource that custom resources of this operator wait for: its CRDs exist once the Job has completed.
    """

    namespace: str
    installed: k8s.batch.v1.Job

    def __init__(self, name: str, args: OlmOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:OlmOperator", name, None, opts)
        package = args.package
        self.namespace = package.namespace
        child = child_options(self, opts)
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(
            package.namespace, extra_labels=args.namespace_labels), opts=child)
        in_namespace = child_options(self, opts, namespace)
        group = k8s.apiextensions.CustomResource(
            f"{name}-operator-group", api_version="operators.coreos.com/v1", kind="OperatorGroup",
            metadata=metadata(f"{package.package}-group", package.namespace),
            spec={"upgradeStrategy": "Default",
                  **({} if package.all_namespaces else {"targetNamespaces": [package.namespace]})},
            opts=in_namespace)
        # status.currentCSV is "the CSV the Subscription is progressing to" (OLM's Subscription CRD): OLM sets it
        # with the install plan it generates, which then waits for the approver Job below.
        subscription = k8s.apiextensions.CustomResource(
            f"{name}-subscription", api_version="operators.coreos.com/v1alpha1", kind="Subscription",
            metadata=metadata(package.package, package.namespace, annotations={
                labels.WAIT_FOR: f"jsonpath={{.status.currentCSV}}={package.csv}",
                labels.TIMEOUT_SECONDS: str(RESOLVE_TIMEOUT_SECONDS)}),
            spec={"name": package.package, "channel": package.channel, "source": package.source,
                  "sourceNamespace": MARKETPLACE_NAMESPACE, "installPlanApproval": "Manual",
                  "startingCSV": package.csv},
            opts=child_options(self, opts, group))
        self.installed = self._approve(name, package, args.cli_image, subscription, opts)
        self.register_outputs({"namespace": self.namespace, "csv": package.csv})

    def _approve(self, name: str, package: labels.OlmPackage, cli_image: str, subscription: pulumi.Resource,
                 opts: pulumi.ResourceOptions | None) -> k8s.batch.v1.Job:
        account = f"{package.package}-approver"
        rbac = child_options(self, opts, subscription)
        service_account = k8s.core.v1.ServiceAccount(
            f"{name}-approver-sa", metadata=metadata(account, package.namespace), opts=rbac)
        role = k8s.rbac.v1.Role(f"{name}-approver-role", metadata=metadata(account, package.namespace), rules=[
            {"apiGroups": ["operators.coreos.com"], "resources": ["installplans"], "verbs": ["get", "list", "patch"]},
            {"apiGroups": ["operators.coreos.com"], "resources": ["clusterserviceversions"], "verbs": ["get"]},
        ], opts=rbac)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-approver-binding", metadata=metadata(account, package.namespace),
            subjects=[{"kind": "ServiceAccount", "name": account, "namespace": package.namespace}],
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account}, opts=rbac)
        scope = self._approval_scope(name, package, account, rbac)
        return k8s.batch.v1.Job(
            f"{name}-approve-install-plan",
            metadata=metadata(f"approve-{package.csv}"[:63].rstrip(".-"), package.namespace, annotations={
                labels.TIMEOUT_SECONDS: str(INSTALL_TIMEOUT_SECONDS)}),
            spec=run_once(account, INSTALL_TIMEOUT_SECONDS, {
                "name": "approve",
                "image": cli_image,
                "command": ["/bin/bash", "-c", APPROVE_SCRIPT],
                "env": [{"name": "CSV", "value": package.csv}, {"name": "NAMESPACE", "value": package.namespace}],
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            }),
            opts=child_options(self, opts, service_account, role, binding, scope),
        )

    def _approval_scope(self, name: str, package: labels.OlmPackage, account: str,
                        opts: pulumi.ResourceOptions) -> pulumi.Resource:
        """RBAC cannot name install plans (OLM generates their names), so the approver's Role may patch any in the
        namespace; this policy lets the approver change only the plans that install the pinned CSV."""
        policy_name = f"gpu-platform-{account}"
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-approver-scope", metadata=metadata(policy_name), spec={
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["operators.coreos.com"], "apiVersions": ["*"], "operations": ["UPDATE"],
                    "resources": ["installplans"]}]},
                "matchConditions": [{"name": "the-approver", "expression": "request.userInfo.username == "
                                     f"'system:serviceaccount:{package.namespace}:{account}'"}],
                "validations": [{
                    "expression": f"has(object.spec.clusterServiceVersionNames) && "
                                  f"'{package.csv}' in object.spec.clusterServiceVersionNames",
                    "message": f"{account} approves only the install plan of the pinned {package.csv}"}],
            }, opts=opts)
        return k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-approver-scope-binding", metadata=metadata(policy_name), spec={
                "policyName": policy_name, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": package.namespace}}},
            }, opts=child_options(self, opts, policy))
