"""OpenShift: a MachineSet's partitioning labels and taints brought to the machines it already runs, and so to their
nodes, one node at a time, each drained before its GPUs are re-cut."""

from __future__ import annotations

import hashlib
import json

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.manifests import metadata

MACHINE_API_NAMESPACE = "openshift-machine-api"
# Per node: how long the drain may take (the eviction API retries while a PodDisruptionBudget refuses), and then how
# long the MIG manager may take to report the new cut (a reboot under pass-through included).
DRAIN_TIMEOUT_SECONDS = 600
RECUT_TIMEOUT_SECONDS = 900
# What the Job needs beyond the nodes' time: listing and patching the machines.
SLACK_SECONDS = 120
# `pulumi up` starts the roll and does not wait for it, as for an instance refresh or a drift replacement: a roll of
# many nodes outlasts any wait, and a node a PodDisruptionBudget holds would hang the update. A `waitFor` the created
# Job meets at once does that (pulumi-kubernetes provider/pkg/await/await.go Creation: a Job's completion awaiter only
# without such an override). `skipAwait` would too, but on a Job it also skips the wait for its deletion
# (provider/pkg/metadata/overrides.go DeletedCondition, allowsSkipAwaitWithDelete): the replacement of a Job under the
# same name (a new `oc` image with the cluster release) was then applied onto the old Job while the garbage collector
# still held it for its pod (foreground deletion), a field conflict that failed `up`, and a new roll could start
# while the old one's pod was still stopping. Deleting waits for the old Job and its pod to be gone, within the
# timeout (the pod's grace period is 30 s).
ROLL_JOB_WAITS = {labels.WAIT_FOR: "jsonpath={.metadata.uid}", labels.TIMEOUT_SECONDS: "300"}

# A MachineSet's template reaches only machines it creates from then on. The machine API's nodelink controller copies
# each Machine's spec.metadata.labels and spec.taints onto its node at every sync, adding or overwriting, never
# removing (machine-api-operator pkg/controller/nodelink, processNode and addTaintsToNode): labelling a node directly
# would be undone, so the Job patches every running Machine, and removes a dedicated taint the pool no longer has from
# the node itself. A layout that goes is `all-disabled`, never a missing label, for the same reason.
#
# NVIDIA's MIG manager re-cuts a node when its nvidia.com/mig.config changes; it pauses the operator's own DaemonSets
# but evicts no workload, and a GPU instance with a live process cannot be destroyed, so the cut would fail part-way
# (mig-parted v0.15.0 pkg/mig/reconfigure/reconfigure.go Run). So a node whose layout changes is cordoned and drained
# first. The manager writes nvidia.com/mig.config.state=pending when it starts and success or failed when it ends
# (the same Run): the Job writes `pending` before the label changes, so the `success` of the old cut is never taken
# for the new one, and only a `failed` for the new layout stops the roll (a manager restarted by a config change may
# still report on the old label before the new one reaches the node).
ROLL_SCRIPT = """set -eu
state() {
  oc get node "$1" -o jsonpath='{.metadata.labels.nvidia\\.com/mig\\.config}/{.metadata.labels.nvidia\\.com/mig\\.config\\.state}'
}
patch_machine() {
  oc patch "$1" -n "$NAMESPACE" --type merge -p "{\\"spec\\":{\\"metadata\\":{\\"labels\\":$LABELS},\\"taints\\":$TAINTS}}"
}
drop_stale_taint() {
  if [ -z "$DEDICATED" ] && [ -n "$(oc get node "$1" -o jsonpath='{.spec.taints[?(@.key=="'"$DEDICATED_KEY"'")].key}')" ]
  then
    oc adm taint node "$1" "$DEDICATED_KEY-"
  fi
}
for machine in $(oc get machines -n "$NAMESPACE" -l "machine.openshift.io/cluster-api-machineset=$MACHINESET" -o name)
do
  node=$(oc get "$machine" -n "$NAMESPACE" -o jsonpath='{.status.nodeRef.name}')
  current=""
  if [ -n "$node" ]; then current=$(oc get node "$node" -o jsonpath='{.metadata.labels.nvidia\\.com/mig\\.config}'); fi
  if [ -n "$node" ] && [ -n "$LAYOUT" ] && [ "$(state "$node")" = "$LAYOUT/failed" ]; then
    echo "node $node: carries $LAYOUT but the MIG manager reports failed (an earlier roll stopped here); fix it and" \
         "uncordon it once it reports success, then run the roll again" >&2
    exit 1
  fi
  if [ -z "$node" ] || [ -z "$LAYOUT" ] || [ "$current" = "$LAYOUT" ]; then
    patch_machine "$machine"  # no node yet (it joins with the new labels), or its cut does not change
    if [ -n "$node" ]; then drop_stale_taint "$node"; fi
    continue
  fi
  echo "node $node: re-cut $current -> $LAYOUT: cordon, drain (up to ${DRAIN_TIMEOUT}s)"
  oc adm cordon "$node"
  if ! oc adm drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout="${DRAIN_TIMEOUT}s"; then
    echo "node $node: not drained in ${DRAIN_TIMEOUT}s (a PodDisruptionBudget or a pod that cannot be evicted holds it);" \\
         "the roll stops here, the node stays cordoned with its old cut" >&2
    exit 1
  fi
  oc label node "$node" --overwrite "nvidia.com/mig.config.state=pending"
  patch_machine "$machine"
  drop_stale_taint "$node"
  deadline=$(( $(date +%s) + RECUT_TIMEOUT ))
  while :; do
    case "$(state "$node")" in
      "$LAYOUT/success") break ;;
      "$LAYOUT/failed") echo "node $node: the MIG manager reports failed for $LAYOUT; the roll stops here, the node" \\
                            "stays cordoned (its manager's log says why)" >&2; exit 1 ;;
    esac
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "node $node: no success for $LAYOUT in ${RECUT_TIMEOUT}s; the roll stops here, the node stays cordoned" >&2
      exit 1
    fi
    sleep 5
  done
  oc adm uncordon "$node"
  echo "node $node: re-cut to $LAYOUT"
done
echo "machines of $MACHINESET labelled $LABELS, tainted $TAINTS"
"""


def job_deadline(nodes: int) -> int:
    """The most the roll may take: every node drained and re-cut in turn."""
    return max(nodes, 1) * (DRAIN_TIMEOUT_SECONDS + RECUT_TIMEOUT_SECONDS) + SLACK_SECONDS


def machine_labels(name: str, machine_set: str, node_labels: dict[str, str], taints: list[dict[str, str]],
                   nodes: int, cli_image: str, opts: pulumi.ResourceOptions) -> k8s.batch.v1.Job:
    """A Job that gives the running machines of `machine_set` (at most `nodes`) these node labels and taints, draining
    and re-cutting one node at a time where the MIG layout changes. Its name ends in a digest of both, so a change is a
    new Job that runs again. Least RBAC: get, list and patch Machines of the machine
    API's namespace; nodes (get, list, patch), pods (get, list), evictions (create) and DaemonSets (get, as a drain
    reads a pod's owner) cluster-wide."""
    wanted = {"labels": node_labels, "taints": taints}
    digest = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:8]
    account = f"{machine_set[:40]}-labels"
    service_account = k8s.core.v1.ServiceAccount(f"{name}-account", metadata=metadata(
        account, MACHINE_API_NAMESPACE), opts=opts)
    role = k8s.rbac.v1.Role(f"{name}-role", metadata=metadata(account, MACHINE_API_NAMESPACE), rules=[{
        "apiGroups": ["machine.openshift.io"], "resources": ["machines"], "verbs": ["get", "list", "patch"]}],
        opts=opts)
    subjects = [{"kind": "ServiceAccount", "name": account, "namespace": MACHINE_API_NAMESPACE}]
    binding = k8s.rbac.v1.RoleBinding(f"{name}-binding", metadata=metadata(account, MACHINE_API_NAMESPACE),
                                      subjects=subjects, role_ref={"apiGroup": "rbac.authorization.k8s.io",
                                                                   "kind": "Role", "name": account}, opts=opts)
    drainer = k8s.rbac.v1.ClusterRole(f"{name}-drain-role", metadata=metadata(account), rules=[
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
    ], opts=opts)
    drain_binding = k8s.rbac.v1.ClusterRoleBinding(f"{name}-drain-binding", metadata=metadata(account),
                                                   subjects=subjects, role_ref={
                                                       "apiGroup": "rbac.authorization.k8s.io",
                                                       "kind": "ClusterRole", "name": account}, opts=opts)
    dedicated = [taint for taint in taints if taint["key"] == labels.DEDICATED_TAINT_KEY]
    env = {"NAMESPACE": MACHINE_API_NAMESPACE, "MACHINESET": machine_set,
           "LABELS": json.dumps(node_labels, sort_keys=True, separators=(",", ":")),
           "TAINTS": json.dumps(taints, sort_keys=True, separators=(",", ":")),
           "LAYOUT": node_labels.get(labels.MIG_CONFIG_LABEL, ""),
           "DEDICATED": dedicated[0]["value"] if dedicated else "", "DEDICATED_KEY": labels.DEDICATED_TAINT_KEY,
           "DRAIN_TIMEOUT": str(DRAIN_TIMEOUT_SECONDS), "RECUT_TIMEOUT": str(RECUT_TIMEOUT_SECONDS)}
    deadline = job_deadline(nodes)
    return k8s.batch.v1.Job(f"{name}-job", metadata=metadata(
        f"{machine_set[:48]}-{digest}", MACHINE_API_NAMESPACE, annotations=ROLL_JOB_WAITS), spec={
        # One try: a node that failed stays cordoned and named; running the roll again is a decision for a person.
        "backoffLimit": 0,
        "activeDeadlineSeconds": deadline,
        "template": {"spec": {
            "serviceAccountName": account,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "label-machines", "image": cli_image, "command": ["/bin/bash", "-c", ROLL_SCRIPT],
                "env": [{"name": key, "value": value} for key, value in env.items()],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            }],
        }},
    }, opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
        depends_on=[service_account, role, binding, drainer, drain_binding], delete_before_replace=True,
        # The deadline is set when the Job is created (a change of labels or taints); resizing the pool later does
        # not touch a Job that has already run.
        ignore_changes=["spec.activeDeadlineSeconds"])))
