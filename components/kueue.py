"""Kueue for tenancy mode `queue`: the pinned controller, a ResourceFlavor per GPU pool, WorkloadPriorityClasses as
the priority tiers, the policy that keeps GPU work inside the queues, and per tenant a ClusterQueue in one cohort
with the LocalQueue of its namespace."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import kinds, labels
from components.admission import ONE_SHARE_PER_CONTAINER, VARIABLES
from components.manifests import child_options, helm_release, metadata
from components.olm import INSTALL_TIMEOUT_SECONDS, OlmOperator, OlmOperatorArgs
from fleet.dra import quota_key

QUEUE_POLICY_NAME = labels.QUEUE_POLICY_NAME
GPU = labels.GPU_RESOURCE
# OpenShift: the flavor of CPU and memory, which places nothing (no node labels): a job's GPUs take a pool's flavor,
# its CPU and memory this one, so a CPU-only job is given no GPU pool's labels or toleration.
COMPUTE_FLAVOR = "compute"
# The tiers, as the PriorityClasses of the same names: Kueue orders and preempts workloads by these values.
WORKLOAD_PRIORITIES = {labels.HIGH_PRIORITY_CLASS: 100000, labels.LOW_PRIORITY_CLASS: 1000}
# Fair sharing on (Kueue reads `fairSharing` being set as on, pkg/scheduler/preemption/fairsharing/strategy.go): a
# tenant above its share is preempted first; strategies as Kueue documents its defaults.
FAIR_SHARING = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
# An admitted job whose pods are not all ready within this long is evicted (its quota freed) and requeued with
# backoff: a job whose pods can never be created (refused by a tenant policy, an image that cannot be pulled)
# holds no GPUs for longer. Five minutes is what the Red Hat build's operator fixes for `gangScheduling: ByWorkload`
# (kueue-operator release-1.4, pkg/configmap/configmap.go buildWaitForPodsReady); the chart is given the same, so
# both flavors behave alike (docs/tenancy.md: what it means for large images).
PODS_READY_TIMEOUT = "5m"


def device_class_mappings(device_classes: Sequence[str]) -> list[dict[str, Any]]:
    """Allocation mode `dra`: each DeviceClass counted as a resource of its own, named as its quota line is
    (fleet.dra.quota_key). Kueue (feature gate KueueDRAIntegration, beta and on since v0.18:
    pkg/features/kube_features.go) counts the devices a Job's pods ask through ResourceClaimTemplates, per class,
    as that class's resource (pkg/dra/claims.go GetResourceRequestsForResourceClaimTemplates, countDevicesPerClass);
    a class mapped nowhere, firstAvailable, adminAccess, allocationMode All and pods naming a pre-made ResourceClaim
    make the workload inadmissible (there, and pkg/controller/core/workload_controller.go HasResourceClaim)."""
    return [{"name": quota_key(name), "deviceClassNames": [name]} for name in device_classes]


def configuration(device_classes: Sequence[str] = ()) -> dict[str, Any]:
    """Kueue's own configuration (config.kueue.x-k8s.io/v1beta2): the chart's defaults for probes, metrics, webhook
    and leader election; batch Jobs as the one integration; fair sharing; only GPUs counted against queues (CPU and
    memory stay under each namespace's compute quota, `IgnoreUndeclared`, beta and on in v0.19), in mode `dra` the
    devices of each of `device_classes`; an admitted job's pods ready within PODS_READY_TIMEOUT or the job is
    evicted."""
    mappings = {"deviceClassMappings": device_class_mappings(device_classes)} if device_classes else {}
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "integrations": {"frameworks": ["batch/job"]},
        "fairSharing": FAIR_SHARING,
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared", **mappings},
        # Pods admitted in parallel (blockAdmission false): one slow job does not hold up the queue.
        "waitForPodsReady": {"timeout": PODS_READY_TIMEOUT, "blockAdmission": False},
    }


def red_hat_configuration() -> dict[str, Any]:
    """The Red Hat build's `Kueue` spec.config, which its operator turns into Kueue's configuration
    (pkg/configmap/configmap.go): batch Jobs as the one integration, fair sharing with the same strategies as
    `configuration()`, and only jobs labelled with a queue name managed. It has no setting for undeclared resources,
    so Kueue blocks them: a tenant's ClusterQueue covers CPU and memory too (`TenantQueueArgs.compute`)."""
    return {"integrations": {"frameworks": ["BatchJob"]},
            "preemption": {"preemptionPolicy": "FairSharing"},
            "workloadManagement": {"labelPolicy": "QueueName"},
            # waitForPodsReady, timeout PODS_READY_TIMEOUT, admission not blocked (buildWaitForPodsReady).
            "gangScheduling": {"policy": "ByWorkload", "byWorkload": {"admission": "Parallel"}}}


KUEUE_PREFIX = "kueue.x-k8s.io/"  # Kueue's labels and annotations: kueue.x-k8s.io/..., and its subdomains
JOB_POD_LABELS = ("batch.kubernetes.io/job-name", "job-name", "batch.kubernetes.io/controller-uid", "controller-uid")
# The Job controller's finalizer on each pod it counts (pkg/controller/job/job_controller.go,
# batch.JobTrackingFinalizer): without it, and without its labels and owner reference, a running pod is no longer the
# Job's, which starts another.
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"

TENANT_KUEUE_LABELS = (labels.QUEUE_NAME_LABEL, labels.WORKLOAD_PRIORITY_LABEL, "kueue.x-k8s.io/max-exec-time-seconds")
JOB_CONTROLLER_MANAGER = "kubernetes.io/job-controller"  # batch/v1 JobControllerName
MAX_GRACE_SECONDS = 60

# CEL on pods and batch Jobs in tenant namespaces (Kubernetes CEL, as the API server evaluates it).
QUEUE_VARIABLES = {
    "podSpec": "object.kind == 'Pod' ? object.spec : object.spec.template.spec",
    "containers": "variables.podSpec.containers"
                  " + (has(variables.podSpec.initContainers) ? variables.podSpec.initContainers : [])",
    "requestsGpu": VARIABLES["requestsGpu"],
    "jobLabels": "object.kind == 'Job' && has(object.metadata.labels) ? object.metadata.labels : {}",
    "tenantClass": VARIABLES["tenantClass"],
    # A Job Kueue manages: labelled with a queue name, now or before this update.
    "queued": f"object.kind == 'Job' && ('{labels.QUEUE_NAME_LABEL}' in variables.jobLabels"
              f" || (request.operation == 'UPDATE' && has(oldObject.metadata.labels)"
              f" && '{labels.QUEUE_NAME_LABEL}' in oldObject.metadata.labels))",
    "byKueue": f"request.userInfo.username in {list(labels.KUEUE_CONTROLLERS)}",
    # Controller owner references this request adds (all of them on CREATE).
    "newControllers": "object.kind != 'Job' || !has(object.metadata.ownerReferences) ? []"
                      " : object.metadata.ownerReferences.filter(o, has(o.controller) && o.controller"
                      " && !(request.operation == 'UPDATE' && has(oldObject.metadata.ownerReferences)"
                      " && oldObject.metadata.ownerReferences.exists(p, p.uid == o.uid)))",
    "wasSuspended": "request.operation == 'UPDATE' && object.kind == 'Job' && has(oldObject.spec.suspend)"
                    " && oldObject.spec.suspend",
    "suspended": "object.kind == 'Job' && has(object.spec.suspend) && object.spec.suspend",
    # The priority classes a tenant's queued Job may be ordered by: gpu-low, and its own tier.
    "tiers": f"['{labels.LOW_PRIORITY_CLASS}', variables.tenantClass]",
    "tolerations": "has(variables.podSpec.tolerations) ? variables.podSpec.tolerations : []",
    "tolerationsKept": "request.operation == 'UPDATE' && variables.tolerations == (oldObject.kind == 'Pod'"
                       " ? (has(oldObject.spec.tolerations) ? oldObject.spec.tolerations : [])"
                       " : (has(oldObject.spec.template.spec.tolerations) ? oldObject.spec.template.spec.tolerations"
                       " : []))",
    # Kubernetes' own controllers (kube-controller-manager's, each as its service account in kube-system) and Kueue.
    "byController": f"request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"
                    f" || request.userInfo.username in {list(labels.KUEUE_CONTROLLERS)}",
    "updated": "request.operation == 'UPDATE'",
    "owners": "has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : []",
    "oldOwners": "variables.updated && has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences"
                 " : []",
    "marks": "has(object.metadata.labels) ? object.metadata.labels : {}",
    "oldMarks": "variables.updated && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}",
    "notes": "has(object.metadata.annotations) ? object.metadata.annotations : {}",
    "oldNotes": "variables.updated && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}",
    # What ties a pod to its Job and a Job to its Workload: the Job controller selects a Job's pods by these labels
    # (kubernetes v1.34 pkg/controller/job/job_controller.go, getPodsForJob; the labels of
    # pkg/apis/batch/types.go), and Kueue reads its own labels and annotations on the Job.
    "guardedLabels": f"variables.marks.filter(k, k.contains('{KUEUE_PREFIX}') || k in {list(JOB_POD_LABELS)})",
    "oldGuardedLabels": f"variables.oldMarks.filter(k, k.contains('{KUEUE_PREFIX}') || k in {list(JOB_POD_LABELS)})",
    "guardedNotes": f"variables.notes.filter(k, k.contains('{KUEUE_PREFIX}'))",
    "oldGuardedNotes": f"variables.oldNotes.filter(k, k.contains('{KUEUE_PREFIX}'))",
}
# Allocation mode `dra`: a pod (or a Job's pod template) with resource claims is GPU work too (tenants' claims name
# only the GPU classes they were given, components.dra_admission), so it goes through the tenant's queue.
DRA_QUEUE_VARIABLES = {**QUEUE_VARIABLES, "requestsGpu": "(has(variables.podSpec.resourceClaims)"
                       " && size(variables.podSpec.resourceClaims) > 0) || (" + QUEUE_VARIABLES["requestsGpu"] + ")"}
QUEUE_VALIDATIONS = [
    (f"object.kind != 'Pod' || request.operation != 'CREATE' || !variables.requestsGpu"
     f" || request.userInfo.username == '{labels.JOB_CONTROLLER}'",
     f"GPU pods here are started by Kueue: submit a batch/v1 Job labelled {labels.QUEUE_NAME_LABEL}: "
     f"{labels.TENANT_QUEUE}"),
    (f"object.kind != 'Job' || !variables.requestsGpu"
     f" || ('{labels.QUEUE_NAME_LABEL}' in variables.jobLabels"
     f" && variables.jobLabels['{labels.QUEUE_NAME_LABEL}'] == '{labels.TENANT_QUEUE}')",
     f"a GPU Job here waits in the tenant's queue: label it {labels.QUEUE_NAME_LABEL}: {labels.TENANT_QUEUE}"),
    # Refused as a Job, not only as its pods: Kueue would admit it and hold the quota of pods that are never created.
    ONE_SHARE_PER_CONTAINER,
    (f"!('{labels.WORKLOAD_PRIORITY_LABEL}' in variables.jobLabels)"
     f" || variables.jobLabels['{labels.WORKLOAD_PRIORITY_LABEL}'] != '{labels.HIGH_PRIORITY_CLASS}'"
     f" || variables.tenantClass == '{labels.HIGH_PRIORITY_CLASS}'",
     f"this tenant may not use workload priority class {labels.HIGH_PRIORITY_CLASS}"),
    # Kueue treats a Job whose controller is a queued Job as that Job's child: it neither suspends it nor gives it a
    # Workload (jobframework/reconciler.go FindAncestorJobManagedByKueue: "same-namespace ownership spoofing is out of
    # scope"). Only the CronJob controller sets a Job's controller here.
    (f"size(variables.newControllers) == 0 || request.userInfo.username == '{labels.CRONJOB_CONTROLLER}'",
     "a Job's controller owner is set by Kubernetes only (a CronJob's): a Job owned by another Job would run "
     "outside the queue; submit it as a Job of its own"),
    # Kueue's webhook suspends a queued Job when it is created (jobframework ApplyDefaultForSuspend); only Kueue
    # resumes it, once it admitted its Workload, and only Kueue changes the parallelism of an unsuspended Job (a
    # running Job's pods would start before Kueue suspends it again).
    ("!variables.queued || request.operation != 'CREATE' || variables.suspended || variables.byKueue",
     "a queued Job starts suspended (Kueue's webhook suspends it; is Kueue running?): Kueue resumes it when admitted"),
    ("!variables.queued || !variables.wasSuspended || variables.suspended || variables.byKueue",
     "only Kueue resumes a queued Job, when it admits it: leave spec.suspend to Kueue"),
    ("!variables.queued || request.operation != 'UPDATE' || variables.byKueue"
     " || (variables.wasSuspended && variables.suspended)"
     " || (has(object.spec.parallelism) ? object.spec.parallelism : 1)"
     " == (has(oldObject.spec.parallelism) ? oldObject.spec.parallelism : 1)",
     "a queued Job's parallelism changes only while it is suspended: Kueue admitted it for the pods it asked for"),
    # Kueue orders a Job by its workload priority class, else by its pod template's priority class
    # (jobframework/reconciler.go ExtractPriority): either may name only the tenant's tiers.
    (f"!variables.queued || !('{labels.WORKLOAD_PRIORITY_LABEL}' in variables.jobLabels)"
     f" || variables.jobLabels['{labels.WORKLOAD_PRIORITY_LABEL}'] in variables.tiers",
     f"a queued Job's workload priority class is {labels.LOW_PRIORITY_CLASS} or its tenant's tier"),
    ("!variables.queued || !has(variables.podSpec.priorityClassName) || variables.podSpec.priorityClassName == ''"
     " || variables.podSpec.priorityClassName in variables.tiers",
     f"Kueue queues a Job at its pod template's priority class: here {labels.LOW_PRIORITY_CLASS} or the tenant's "
     f"tier only (or label it {labels.WORKLOAD_PRIORITY_LABEL})"),
    # After create, only Kubernetes' controllers and Kueue change what ties a pod to its Job and a Job to its Workload:
    # a Job turned into a queued Job's child (controller: true) by an update would leave Kueue's management
    # (FindAncestorJobManagedByKueue), and a running pod detached from its Job would keep its GPUs while the Job
    # starts another in its place, which Kueue does not count.
    ("!variables.updated || variables.byController || variables.owners == variables.oldOwners",
     "owner references here are Kubernetes' to change: a pod or Job moved to another owner would run outside "
     "what Kueue counts"),
    ("!variables.updated || variables.byController"
     " || (size(variables.guardedLabels) == size(variables.oldGuardedLabels) && variables.guardedLabels.all(k,"
     " k in variables.oldMarks && variables.oldMarks[k] == variables.marks[k])"
     " && size(variables.guardedNotes) == size(variables.oldGuardedNotes) && variables.guardedNotes.all(k,"
     " k in variables.oldNotes && variables.oldNotes[k] == variables.notes[k]))",
     f"{KUEUE_PREFIX} labels and annotations, and the Job labels of a Job's pods, are kept as created: Kueue and the "
     "Job controller count a job's pods by them"),
    (f"object.kind != 'Pod' || !variables.updated || variables.byController"
     f" || has(oldObject.metadata.deletionTimestamp)"
     f" || !(has(oldObject.metadata.finalizers) && '{JOB_TRACKING_FINALIZER}' in oldObject.metadata.finalizers)"
     f" || (has(object.metadata.finalizers) && '{JOB_TRACKING_FINALIZER}' in object.metadata.finalizers)",
     f"the finalizer {JOB_TRACKING_FINALIZER} is the Job controller's: it counts a running pod by it"),
    # What Kueue reads from a Job besides its queue and priority (kueue v0.19.2 pkg/controller/jobframework):
    # a prebuilt workload's name (utils.go PrebuiltWorkloadNameFor) takes over a Workload, `elastic-job` lets a Job run
    # unsuspended behind a scheduling gate its owner may remove (reconciler.go ReconcileGenericJob), `stopping` reads
    # as running (jobs/job Job.IsSuspended). A tenant's Job carries none: only the labels this policy checks.
    (f"object.kind != 'Job' || request.operation != 'CREATE'"
     f" || (variables.marks.all(k, !k.contains('{KUEUE_PREFIX}') || k in {list(TENANT_KUEUE_LABELS)})"
     f" && variables.notes.all(k, !k.contains('{KUEUE_PREFIX}')))",
     f"a Job here carries no {KUEUE_PREFIX} annotations and of Kueue's labels only "
     f"{', '.join(TENANT_KUEUE_LABELS)}"),
    # Another manager (spec.managedBy) runs the Job's pods instead of the Job controller; a manual selector adopts
    # any pod that matches it (kubernetes v1.34 pkg/controller/job/job_controller.go).
    ("object.kind != 'Job' || request.operation != 'CREATE' || ((!has(object.spec.managedBy)"
     f" || object.spec.managedBy == '{JOB_CONTROLLER_MANAGER}')"
     " && (!has(object.spec.manualSelector) || !object.spec.manualSelector))",
     f"a Job here is run by the Job controller (spec.managedBy {JOB_CONTROLLER_MANAGER} or unset) with the "
     "selector it generates (no spec.manualSelector)"),
    # Kueue frees a preempted or deleted job's quota once its pods are deleted; a pod being deleted holds its GPU
    # for its grace period.
    (f"request.operation != 'CREATE' || !variables.requestsGpu"
     f" || !has(variables.podSpec.terminationGracePeriodSeconds)"
     f" || variables.podSpec.terminationGracePeriodSeconds <= {MAX_GRACE_SECONDS}",
     f"a GPU pod here stops within {MAX_GRACE_SECONDS} s of being preempted (terminationGracePeriodSeconds): "
     "Kueue has given its GPUs to another job by then"),
    # A queue's flavors are GPU pools: Kueue would give a Job without GPUs a pool's toleration and node labels (on
    # OpenShift, where queues cover CPU and memory too), and the tenant pod policy then refuses its pods.
    (f"object.kind != 'Job' || !('{labels.QUEUE_NAME_LABEL}' in variables.jobLabels) || variables.requestsGpu",
     f"the queue is for GPU Jobs: a Job without a {GPU} request runs without the label {labels.QUEUE_NAME_LABEL}"),
]


# Deleting a Job orphans its pods unless the request says otherwise (batch/v1's default propagation,
# kubernetes v1.34 pkg/registry/batch/job/strategy.go DefaultGarbageCollectionPolicy): Kueue then finishes the
# Workload and frees its quota while the pods run on. A queued Job goes with its pods.
ORPHANING_DELETE = (
    f"request.operation != 'DELETE' || variables.byController"
    f" || !(has(oldObject.metadata.labels) && '{labels.QUEUE_NAME_LABEL}' in oldObject.metadata.labels)"
    " || (has(request.options) && has(request.options.propagationPolicy)"
    " ? request.options.propagationPolicy in ['Background', 'Foreground']"
    " : has(request.options) && has(request.options.orphanDependents) && !request.options.orphanDependents)",
    "a queued Job is deleted with its pods (propagationPolicy Background or Foreground, as kubectl delete does): "
    "orphaned pods would keep GPUs Kueue no longer counts")


def workload_priority_class(name: str, tier: str, value: int, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """A WorkloadPriorityClass: its `value` sits beside `metadata`, where CustomResource takes only `spec`, so it is
    registered as CustomResource registers any custom object (its type token, the object as inputs)."""
    kind = "WorkloadPriorityClass"
    return pulumi.CustomResource(f"kubernetes:{labels.KUEUE_API_VERSION}:{kind}", name, {
        "apiVersion": labels.KUEUE_API_VERSION, "kind": kind, "metadata": metadata(tier), "value": value,
        "description": f"Kueue's order of {tier} workloads, as the PriorityClass {tier}"}, opts)


@dataclass(frozen=True)
class KueueArgs:
    """The GPU pools: the labels that select each one's nodes and the taints its pods must tolerate (one
    ResourceFlavor each); with `compute`, the flavor of CPU and memory too."""

    pools: dict[str, dict[str, str]]
    taints: dict[str, list[dict[str, str]]]
    chart_mirror: str | None = None  # charts.mirror: where the pinned chart is pulled from instead
    cli_image: str | None = None  # OpenShift: the Red Hat build through OLM, its install plans approved with this
    install_cert_manager: bool = True  # OpenShift: install the cert-manager Operator it needs (else the cluster's)
    compute: bool = False  # OpenShift: CPU and memory are counted in the queues too, in their own flavor
    # Rules of the tenant pod policy that hold for a pod's template too, checked on Jobs as they are created, so that
    # Kueue never holds quota for pods that would be refused.
    template_rules: tuple[tuple[str, str], ...] = ()
    device_classes: tuple[str, ...] = ()  # allocation mode dra: the stack's DeviceClasses, each counted in the queues


class Kueue(pulumi.ComponentResource):
    """Kueue's chart, pinned, as a Helm release (on OpenShift the Red Hat build through OLM, after the cert-manager
    Operator it needs, and its `Kueue` instance); a ResourceFlavor per pool that places admitted pods on its nodes (by
    the labels that select them: the pool label, or a bring-your-own pool's selector) and
    adds the GPU taint's toleration; the tiers as WorkloadPriorityClasses; and a policy, bound to every tenant
    namespace, by which the API server refuses GPU pods no Kueue-admitted Job started and GPU Jobs outside the
    tenant's queue. `installed` is what queues wait for: Kueue's CRDs and webhooks exist once it is."""

    installed: pulumi.Resource
    namespace: str

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:Kueue", name, None, opts)
        if args.cli_image:
            self.installed = self._red_hat_build(name, args.cli_image, args.install_cert_manager, opts)
            self.namespace = labels.KUEUE_OLM.namespace
        else:
            namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(labels.KUEUE_NAMESPACE),
                                              opts=child_options(self, opts))
            self.installed = helm_release(f"{name}-release", labels.KUEUE_CHART, labels.KUEUE_NAMESPACE, {
                "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(configuration(args.device_classes),
                                                                                 sort_keys=False)},
            }, child_options(self, opts, namespace), args.chart_mirror)
            self.namespace = labels.KUEUE_NAMESPACE
        after = child_options(self, opts, self.installed)
        for tier, value in WORKLOAD_PRIORITIES.items():
            workload_priority_class(f"{name}-priority-{tier}", tier, value, after)
        for pool, node_labels in args.pools.items():
            tolerations = [{"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint["effect"]}
                           if taint.get("value") else {"key": taint["key"], "operator": "Exists",
                                                        "effect": taint["effect"]} for taint in args.taints[pool]]
            k8s.apiextensions.CustomResource(
                f"{name}-flavor-{pool}", api_version=labels.KUEUE_API_VERSION, kind="ResourceFlavor",
                metadata=metadata(pool), spec={"nodeLabels": dict(node_labels), "tolerations": tolerations},
                opts=after)
        if args.compute:
            k8s.apiextensions.CustomResource(
                f"{name}-flavor-{COMPUTE_FLAVOR}", api_version=labels.KUEUE_API_VERSION, kind="ResourceFlavor",
                metadata=metadata(COMPUTE_FLAVOR), spec={}, opts=after)
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy", metadata=metadata(QUEUE_POLICY_NAME), spec={
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                     "resources": ["pods"]},
                    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                     "resources": ["jobs"]}]},
                "variables": [{"name": key, "expression": value} for key, value in (
                    DRA_QUEUE_VARIABLES if args.device_classes else QUEUE_VARIABLES).items()],
                # A DELETE has no `object`: the other rules are for creates and updates. One policy, so that the
                # admission gate's probe of it proves the deletes' rule in force too.
                "validations": [*({"expression": f"request.operation == 'DELETE' || ({rule})", "message": message}
                                  for rule, message in (*QUEUE_VALIDATIONS, *args.template_rules)),
                                {"expression": ORPHANING_DELETE[0], "message": ORPHANING_DELETE[1]}],
            }, opts=child_options(self, opts))
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-policy-binding", metadata=metadata(QUEUE_POLICY_NAME), spec={
                "policyName": QUEUE_POLICY_NAME, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchExpressions": [
                    {"key": labels.TENANT_LABEL, "operator": "Exists"}]}},
            }, opts=child_options(self, opts, policy))
        self.register_outputs({"namespace": self.namespace})

    def _red_hat_build(self, name: str, cli_image: str, install_cert_manager: bool,
                       opts: pulumi.ResourceOptions | None) -> pulumi.Resource:
        """The cert-manager Operator (unless the cluster's cert-manager serves), then the Kueue operator, then the
        `Kueue` instance `cluster`, which the operator reports Available once Kueue's controller (after its CRDs and
        webhooks) is ready. Both operators' CSVs ask for cluster monitoring of their namespaces."""
        monitored = {"openshift.io/cluster-monitoring": "true"}
        cert_manager = [OlmOperator(f"{name}-cert-manager", OlmOperatorArgs(
            package=labels.CERT_MANAGER_OLM, cli_image=cli_image, namespace_labels=monitored),
            child_options(self, opts)).installed] if install_cert_manager else []
        operator = OlmOperator(f"{name}-operator", OlmOperatorArgs(
            package=labels.KUEUE_OLM, cli_image=cli_image, namespace_labels=monitored),
            child_options(self, opts, *cert_manager))
        return k8s.apiextensions.CustomResource(
            f"{name}-instance", api_version=labels.KUEUE_OPERATOR_API_VERSION, kind="Kueue",
            metadata=metadata("cluster", annotations={labels.WAIT_FOR: "condition=Available",
                                                      labels.TIMEOUT_SECONDS: str(INSTALL_TIMEOUT_SECONDS)}),
            spec={"managementState": "Managed", "config": red_hat_configuration()},
            opts=child_options(self, opts, operator.installed))


@dataclass(frozen=True)
class TenantQueueArgs:
    """A tenant's guarantee: nominal quota per pool (flavor) and kind (whole GPUs, shares, MIG slices), the limits of
    what it borrows and lends of each, its fair-sharing weight, and the cohort it shares with."""

    tenant: str
    cohort: str
    nominal: dict[str, dict[str, int]]
    # Every kind the fleet advertises: the queue covers each (0 where not given), so none is left undeclared; and the
    # fleet's pools, one of which holds those kinds for a tenant without pools of its own.
    kinds: tuple[str, ...] = ()
    fleet_pools: tuple[str, ...] = ()
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: int = 1
    # OpenShift: the tenant's CPU and memory quota, covered in each flavor and never lent (the Red Hat build's Kueue
    # blocks undeclared resources); the namespace's compute quota stays the real cap.
    compute: dict[str, str] | None = None


def resource_groups(nominal: dict[str, dict[str, int]]) -> list[tuple[list[str], list[str]]]:
    """(covered kinds, flavors) per resource group: Kueue takes each resource and each flavor in one group only, and
    every flavor of a group lists the group's resources (the ClusterQueue CRD's rule "flavors must have the same
    number of resources as the coveredResources"), so pools that advertise a kind in common share a group, which
    covers every kind its pools advertise."""
    groups: list[tuple[set[str], list[str]]] = []
    for pool, kinds in nominal.items():
        if not kinds:
            continue
        joined = [group for group in groups if group[0] & kinds.keys()]
        merged = (set(kinds), [pool])
        for group in joined:
            groups.remove(group)
            merged = (merged[0] | group[0], group[1] + merged[1])
        groups.append(merged)
    order = list(nominal)
    return [(sorted(kinds), sorted(pools, key=order.index)) for kinds, pools in
            sorted(groups, key=lambda group: min(order.index(pool) for pool in group[1]))]


def cluster_queue_spec(args: TenantQueueArgs) -> dict[str, Any]:
    """The ClusterQueue: per resource group its flavors in the pools' order, each with the tenant's nominal quota of
    every kind the group covers (0 where the pool has none of it); the kinds none of its pools advertise are covered
    too, in its first group (or on the fleet's first pool), at 0 with nothing to borrow: Kueue skips the resources a
    queue does not cover (`IgnoreUndeclared`, pkg/scheduler/flavorassigner/flavorassigner.go), so an uncovered kind
    would run uncounted. On OpenShift a group of its own covers CPU and memory in the flavor without node labels.
    Preemption reclaims lent quota from any borrower in the cohort and, inside the queue, lets higher priority preempt
    lower; only the tenant's namespace may use it."""
    covered = resource_groups(args.nominal) or [([], list(args.fleet_pools[:1]))]
    not_given = set(args.kinds) - {kind for kinds, _ in covered for kind in kinds}
    covered[0] = (sorted({*covered[0][0], *not_given}), covered[0][1])
    groups = []
    for kinds, pools in covered:
        flavors = []
        for pool in pools:
            resources = []
            for kind in kinds:
                nominal = args.nominal.get(pool, {}).get(kind, 0)
                quota: dict[str, Any] = {"name": kind, "nominalQuota": nominal}
                if kind in not_given:
                    quota["borrowingLimit"] = 0
                elif args.borrowing_limit is not None:
                    quota["borrowingLimit"] = args.borrowing_limit
                if args.lending_limit is not None:
                    quota["lendingLimit"] = min(args.lending_limit, nominal)
                resources.append(quota)
            flavors.append({"name": pool, "resources": resources})
        groups.append({"coveredResources": kinds, "flavors": flavors})
    if args.compute:
        groups.append({"coveredResources": list(args.compute), "flavors": [{"name": COMPUTE_FLAVOR, "resources": [
            {"name": resource, "nominalQuota": amount, "borrowingLimit": 0, "lendingLimit": 0}
            for resource, amount in args.compute.items()]}]})
    return {
        "cohortName": args.cohort,
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": args.tenant}},
        "resourceGroups": groups,
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "fairSharing": {"weight": str(args.weight)},
    }


class TenantQueue(pulumi.ComponentResource):
    """A tenant's ClusterQueue (named after it) and the LocalQueue `gpu` of its namespace that feeds it."""

    def __init__(self, name: str, args: TenantQueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantQueue", name, None, opts)
        cluster_queue = kinds.CLUSTER_QUEUE(f"{name}-cluster-queue", child_options(self, opts),
                                            metadata=metadata(args.tenant), spec=cluster_queue_spec(args))
        kinds.LOCAL_QUEUE(f"{name}-local-queue", child_options(self, opts, cluster_queue),
                          metadata=metadata(labels.TENANT_QUEUE, args.tenant), spec={"clusterQueue": args.tenant})
        self.register_outputs({"clusterQueue": args.tenant, "localQueue": labels.TENANT_QUEUE})
