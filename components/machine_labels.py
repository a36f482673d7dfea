"""OpenShift: labels of a MachineSet's template brought to the machines it already runs, and so to their nodes."""

from __future__ import annotations

import hashlib
import json

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import metadata

MACHINE_API_NAMESPACE = "openshift-machine-api"
# How long `pulumi up` waits for the Job: one patch per machine.
TIMEOUT_SECONDS = 600

# A MachineSet's template reaches only machines it creates from then on. The machine API's nodelink controller copies
# each Machine's spec.metadata.labels onto its node, over the node's own, at every sync (machine-api-operator's
# nodelink controller, processNode), so labelling a node directly would be undone: the Job patches every running
# Machine of the MachineSet instead.
PATCH_SCRIPT = """set -eu
for machine in $(oc get machines -n "$NAMESPACE" -l "machine.openshift.io/cluster-api-machineset=$MACHINESET" -o name)
do
  oc patch "$machine" -n "$NAMESPACE" --type merge -p "{\\"spec\\":{\\"metadata\\":{\\"labels\\":$LABELS}}}"
done
echo "machines of $MACHINESET labelled $LABELS"
"""


def machine_labels(name: str, machine_set: str, node_labels: dict[str, str], cli_image: str,
                   opts: pulumi.ResourceOptions) -> k8s.batch.v1.Job:
    """A Job (with the least RBAC it needs: get, list and patch Machines of the machine API's namespace) that gives
    the running machines of `machine_set` these node labels; its name ends in a digest of them, so a change of the
    labels is a new Job that runs again."""
    digest = hashlib.sha256(json.dumps(node_labels, sort_keys=True).encode()).hexdigest()[:8]
    account = f"{machine_set[:40]}-labels"
    service_account = k8s.core.v1.ServiceAccount(f"{name}-account", metadata=metadata(
        account, MACHINE_API_NAMESPACE), opts=opts)
    role = k8s.rbac.v1.Role(f"{name}-role", metadata=metadata(account, MACHINE_API_NAMESPACE), rules=[{
        "apiGroups": ["machine.openshift.io"], "resources": ["machines"], "verbs": ["get", "list", "patch"]}],
        opts=opts)
    binding = k8s.rbac.v1.RoleBinding(f"{name}-binding", metadata=metadata(account, MACHINE_API_NAMESPACE),
                                      subjects=[{"kind": "ServiceAccount", "name": account,
                                                 "namespace": MACHINE_API_NAMESPACE}],
                                      role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                "name": account}, opts=opts)
    env = {"NAMESPACE": MACHINE_API_NAMESPACE, "MACHINESET": machine_set,
           "LABELS": json.dumps(node_labels, sort_keys=True, separators=(",", ":"))}
    return k8s.batch.v1.Job(f"{name}-job", metadata=metadata(
        f"{machine_set[:48]}-{digest}", MACHINE_API_NAMESPACE,
        annotations={labels.TIMEOUT_SECONDS: str(TIMEOUT_SECONDS)}), spec={
        "backoffLimit": 3,
        "activeDeadlineSeconds": TIMEOUT_SECONDS,
        "template": {"spec": {
            "serviceAccountName": account,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "label-machines", "image": cli_image, "command": ["/bin/bash", "-c", PATCH_SCRIPT],
                "env": [{"name": key, "value": value} for key, value in env.items()],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            }],
        }},
    }, opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
        depends_on=[service_account, role, binding], delete_before_replace=True)))
