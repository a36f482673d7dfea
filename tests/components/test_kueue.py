"""components.kueue: the queue admission policy's CEL evaluated on pods and Jobs, the ClusterQueue a tenant's
guarantee becomes, and Kueue's configuration."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from components import labels
from components.admission import CORDON_RULES
from components.kueue import (DRA_QUEUE_VARIABLES, JOB_TRACKING_FINALIZER, MAX_GRACE_SECONDS, ORPHANING_DELETE,
                              QUEUE_VALIDATIONS, QUEUE_VARIABLES, TenantQueueArgs, cluster_queue_spec, configuration,
                              red_hat_configuration)
from fleet.dra import quota_key
from tests.cel import broken_rules
from tests.conftest import ROOT, render_stack

GPU = labels.GPU_RESOURCE
EXAMPLE = ROOT / "examples" / "Pulumi.queue.yaml"
POD_SPEC = {"restartPolicy": "Never",
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                            "resources": {"limits": {GPU: "1"}}}]}


def pod(gpus: bool = True) -> dict[str, Any]:
    spec = copy.deepcopy(POD_SPEC)
    if not gpus:
        spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def job(job_labels: dict[str, str] | None = None, gpus: bool = True) -> dict[str, Any]:
    return {"kind": "Job", "metadata": {"name": "j", **({"labels": job_labels} if job_labels is not None else {})},
            "spec": {"template": {"spec": pod(gpus)["spec"]}}}


def admit(obj: dict[str, Any], *, user: str = "alice", tenant_class: str = labels.LOW_PRIORITY_CLASS,
          old: dict[str, Any] | None = None) -> list[str]:
    return broken_rules(QUEUE_VARIABLES, QUEUE_VALIDATIONS, obj, user=user, tenant_class=tenant_class,
                        operation="UPDATE" if old else "CREATE", old=old)


def changed(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """`base` with these keys of its Job spec set."""
    obj = copy.deepcopy(base)
    obj["spec"].update(spec)
    return obj


def suspended(obj: dict[str, Any]) -> dict[str, Any]:
    """A Job as Kueue's webhook leaves it on creation (suspended), with the parallelism the API server defaults."""
    return changed(obj, suspend=True, parallelism=obj["spec"].get("parallelism", 1))


QUEUED = {labels.QUEUE_NAME_LABEL: labels.TENANT_QUEUE}


def test_a_gpu_pod_a_tenant_creates_is_refused_and_told_to_submit_a_queued_job() -> None:
    [message] = admit(pod())
    assert labels.QUEUE_NAME_LABEL in message and "Job" in message


def test_gpu_pods_of_jobs_kueue_admitted_and_cpu_pods_pass() -> None:
    assert admit(pod(), user=labels.JOB_CONTROLLER) == []
    assert admit(pod(gpus=False)) == []


@pytest.mark.parametrize("job_labels", [None, {}, {labels.QUEUE_NAME_LABEL: "other"}])
def test_a_gpu_job_outside_the_tenant_queue_is_refused(job_labels: dict[str, str] | None) -> None:
    [message] = admit(suspended(job(job_labels)))
    assert f"{labels.QUEUE_NAME_LABEL}: {labels.TENANT_QUEUE}" in message


def test_a_queued_gpu_job_and_a_cpu_job_pass() -> None:
    assert admit(suspended(job(QUEUED))) == []
    assert admit(job(None, gpus=False)) == []


def test_only_a_high_priority_tenant_may_name_the_high_workload_priority() -> None:
    high = suspended(job({**QUEUED, labels.WORKLOAD_PRIORITY_LABEL: labels.HIGH_PRIORITY_CLASS}))
    assert any(labels.HIGH_PRIORITY_CLASS in message for message in admit(high))
    assert admit(high, tenant_class=labels.HIGH_PRIORITY_CLASS) == []
    assert admit(suspended(job({**QUEUED, labels.WORKLOAD_PRIORITY_LABEL: labels.LOW_PRIORITY_CLASS}))) == []


def owned(obj: dict[str, Any], uid: str = "1234", controller: bool = True) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "parent", "uid": uid,
                                           "controller": controller}]
    return obj


def test_a_job_owned_by_a_queued_job_is_refused() -> None:
    """Kueue takes a Job controlled by a queued Job for its child, and neither suspends it nor queues it."""
    for child in (suspended(job(QUEUED)), job(QUEUED), job(None, gpus=False)):
        assert any("controller owner is set by Kubernetes only" in message for message in admit(owned(child)))
    assert admit(owned(job(None, gpus=False), controller=False)) == []  # not a controller: Kueue does not look
    parent = suspended(job(QUEUED))
    assert any("controller owner" in message for message in admit(owned(parent), old=parent))


def test_the_cronjob_controller_sets_a_jobs_controller_and_owners_stay() -> None:
    cron = owned(suspended(job(QUEUED)))
    cron["metadata"]["ownerReferences"][0]["kind"] = "CronJob"
    assert admit(cron, user=labels.CRONJOB_CONTROLLER) == []
    assert admit(changed(cron, suspend=True), old=cron) == []  # an update keeping its owner
    orphaned = copy.deepcopy(cron)
    del orphaned["metadata"]["ownerReferences"]
    assert admit(orphaned, old=cron, user="system:serviceaccount:kube-system:generic-garbage-collector") == []


@pytest.mark.parametrize("kueue", labels.KUEUE_CONTROLLERS)
def test_only_kueue_resumes_a_queued_job_or_changes_a_running_ones_parallelism(kueue: str) -> None:
    pending = suspended(job(QUEUED))
    resumed = changed(pending, suspend=False)
    [message] = admit(resumed, old=pending)
    assert "only Kueue resumes" in message
    assert admit(resumed, old=pending, user=kueue) == []
    [message] = admit(changed(resumed, parallelism=8), old=resumed)
    assert "parallelism changes only while it is suspended" in message
    assert admit(changed(resumed, parallelism=8), old=resumed, user=kueue) == []
    assert admit(changed(pending, parallelism=8), old=pending) == []  # suspended: Kueue queues it anew
    assert admit(changed(resumed, suspend=True), old=resumed) == []  # a tenant may stop its job
    [message] = admit(resumed)
    assert "starts suspended" in message


@pytest.mark.parametrize("template_class, label, tenant_class, refused", [
    ("gpu-high", None, "gpu-low", True),
    ("system-node-critical", None, "gpu-high", True),
    ("cluster-critical-batch", None, "gpu-high", True),
    (None, "urgent", "gpu-high", True),
    ("gpu-high", None, "gpu-high", False),
    ("gpu-low", None, "gpu-high", False),
    ("gpu-low", "gpu-low", "gpu-low", False),
])
def test_a_queued_job_is_ordered_at_most_at_its_tenants_tier(template_class: str | None, label: str | None,
                                                              tenant_class: str, refused: bool) -> None:
    """Without a workload priority label Kueue takes the pod template's priority class (ExtractPriority)."""
    queued = suspended(job({**QUEUED, **({labels.WORKLOAD_PRIORITY_LABEL: label} if label else {})}))
    if template_class:
        queued["spec"]["template"]["spec"]["priorityClassName"] = template_class
    assert bool(admit(queued, tenant_class=tenant_class)) == refused


def test_a_queued_job_without_gpus_is_refused() -> None:
    [message] = admit(suspended(job(QUEUED, gpus=False)))
    assert "the queue is for GPU Jobs" in message


def test_cluster_queue_caps_lending_at_the_guarantee_and_leaves_unset_limits_out() -> None:
    spec = cluster_queue_spec(TenantQueueArgs(tenant="a", cohort="c", nominal={"x": {GPU: 4}, "y": {GPU: 1}},
                                              lending_limit=2, weight=3))
    quotas = [flavor["resources"][0] for flavor in spec["resourceGroups"][0]["flavors"]]
    assert quotas == [{"name": GPU, "nominalQuota": 4, "lendingLimit": 2},
                      {"name": GPU, "nominalQuota": 1, "lendingLimit": 1}]
    assert spec["cohortName"] == "c" and spec["fairSharing"] == {"weight": "3"}
    assert spec["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "a"}}


def test_the_chart_runs_kueue_with_this_configuration() -> None:
    plan = render_stack("queue", yaml.safe_load(EXAMPLE.read_text())["config"])
    [release] = [r for r in plan.resources if r["type"] == "kubernetes:helm.sh/v3:Release"
                 and r["inputs"]["name"] == "kueue"]
    assert release["inputs"]["version"] == labels.KUEUE_VERSION
    shipped = yaml.safe_load(release["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert shipped == configuration()
    assert shipped["integrations"]["frameworks"] == ["batch/job"]


OPENSHIFT_EXAMPLE = ROOT / "examples" / "Pulumi.queue-openshift.yaml"


@pytest.fixture(scope="module")
def openshift_plan():
    return render_stack("queue-openshift", yaml.safe_load(OPENSHIFT_EXAMPLE.read_text())["config"])


def test_openshift_installs_the_red_hat_build_after_cert_manager_and_no_chart(openshift_plan) -> None:
    assert not [r for r in openshift_plan.of_type("kubernetes:helm.sh/v3:Release") if r["inputs"]["name"] == "kueue"]
    for package in (labels.CERT_MANAGER_OLM, labels.KUEUE_OLM):
        spec = openshift_plan.manifest("Subscription", package.package, package.namespace)["spec"]
        assert (spec["channel"], spec["startingCSV"], spec["installPlanApproval"]) == (
            package.channel, package.csv, "Manual")
    kueue_operator = openshift_plan.object("Subscription", labels.KUEUE_OLM.package, labels.KUEUE_OLM.namespace)
    assert openshift_plan.depends_on(kueue_operator, "kueue-cert-manager-approve-install-plan")
    # The Kueue operator's CSV supports only the AllNamespaces install mode; cert-manager's group stays its own.
    assert "targetNamespaces" not in openshift_plan.manifest(
        "OperatorGroup", "kueue-operator-group", labels.KUEUE_OLM.namespace)["spec"]
    assert openshift_plan.manifest("OperatorGroup", "openshift-cert-manager-operator-group",
                                   labels.CERT_MANAGER_OLM.namespace)["spec"]["targetNamespaces"] == [
        labels.CERT_MANAGER_OLM.namespace]


def test_openshift_queues_wait_for_the_kueue_instance_reported_available(openshift_plan) -> None:
    instance = openshift_plan.object("Kueue", "cluster")
    assert instance["inputs"]["spec"] == {"managementState": "Managed", "config": red_hat_configuration()}
    annotations = instance["inputs"]["metadata"]["annotations"]
    assert annotations[labels.WAIT_FOR] == "condition=Available" and int(annotations[labels.TIMEOUT_SECONDS]) > 0
    assert openshift_plan.depends_on(instance, "kueue-operator-approve-install-plan")
    for kind, name, namespace in [("ResourceFlavor", "a10g-batch", None), ("ClusterQueue", "analytics", None),
                                  ("LocalQueue", labels.TENANT_QUEUE, "analytics"),
                                  ("WorkloadPriorityClass", labels.HIGH_PRIORITY_CLASS, None)]:
        assert instance["urn"] in openshift_plan.object(kind, name, namespace)["dependencies"], kind


def test_openshift_tenants_are_managed_and_their_queues_cover_cpu_and_memory_never_lent(openshift_plan) -> None:
    config = yaml.safe_load(OPENSHIFT_EXAMPLE.read_text())["config"]
    for tenant in config["gpu-platform:tenants"]:
        namespace = openshift_plan.manifest("Namespace", tenant["name"])
        assert namespace["metadata"]["labels"][labels.KUEUE_MANAGED_LABEL] == "true"
        spec = openshift_plan.manifest("ClusterQueue", tenant["name"])["spec"]
        *gpus, compute = spec["resourceGroups"]
        assert all("cpu" not in group["coveredResources"] for group in gpus)
        # CPU and memory in a group of their own, in the flavor that places nothing: a CPU-only job gets no GPU pool
        assert compute == {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "compute", "resources": [
            {"name": "cpu", "nominalQuota": "64", "borrowingLimit": 0, "lendingLimit": 0},
            {"name": "memory", "nominalQuota": "256Gi", "borrowingLimit": 0, "lendingLimit": 0}]}]}
    assert openshift_plan.manifest("ResourceFlavor", "compute")["spec"] == {}


def test_kubernetes_queues_count_only_gpus_and_namespaces_carry_no_openshift_label() -> None:
    plan = render_stack("queue", yaml.safe_load(EXAMPLE.read_text())["config"])
    for queue in plan.kind("ClusterQueue"):
        covered = {kind for group in queue["spec"]["resourceGroups"] for kind in group["coveredResources"]}
        assert covered and all(kind.startswith("nvidia.com/") for kind in covered)
        assert labels.KUEUE_MANAGED_LABEL not in plan.manifest("Namespace", queue["metadata"]["name"])[
            "metadata"]["labels"]


def test_openshift_with_the_clusters_cert_manager_installs_only_the_kueue_operator() -> None:
    config = yaml.safe_load(OPENSHIFT_EXAMPLE.read_text())["config"]
    config["gpu-platform:tenancy"]["certManager"] = "existing"
    plan = render_stack("queue-openshift", config)
    assert [s["metadata"]["name"] for s in plan.kind("Subscription") if "kueue" in s["metadata"]["name"]
            or "cert-manager" in s["metadata"]["name"]] == [labels.KUEUE_OLM.package]
    assert not [n for n in plan.kind("Namespace") if n["metadata"]["name"] == labels.CERT_MANAGER_OLM.namespace]


def test_both_builds_evict_a_job_whose_pods_are_not_ready_in_time() -> None:
    """The chart's configuration sets waitForPodsReady; the Red Hat build's operator sets it (timeout fixed at five
    minutes, admission not blocked) from gangScheduling ByWorkload with Parallel admission."""
    assert configuration()["waitForPodsReady"] == {"timeout": "5m", "blockAdmission": False}
    assert red_hat_configuration()["gangScheduling"] == {"policy": "ByWorkload", "byWorkload": {"admission": "Parallel"}}


def test_a_job_made_a_queued_jobs_child_by_an_update_is_refused() -> None:
    """Created with a plain owner reference, then updated to controller: Kueue would take it for the parent's child."""
    plain = owned(suspended(job(QUEUED)), controller=False)
    assert admit(plain) == []
    assert any("owner references here are Kubernetes'" in message for message in admit(owned(plain), old=plain))
    garbage_collector = "system:serviceaccount:kube-system:generic-garbage-collector"
    released = copy.deepcopy(plain)
    del released["metadata"]["ownerReferences"]
    assert admit(released, old=plain, user=garbage_collector) == []


def running_pod(**metadata: Any) -> dict[str, Any]:
    """A Job's GPU pod as the Job controller creates it."""
    obj = pod()
    obj["metadata"].update({
        "labels": {"batch.kubernetes.io/job-name": "j", "job-name": "j", "batch.kubernetes.io/controller-uid": "1",
                   "controller-uid": "1"},
        "finalizers": [JOB_TRACKING_FINALIZER],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1", "controller": True}],
        **metadata})
    return obj


@pytest.mark.parametrize("field, value", [
    ("ownerReferences", []),
    ("labels", {"app": "mine"}),
    ("finalizers", []),
])
def test_a_running_pod_is_not_detached_from_its_job_but_by_kubernetes(field: str, value: Any) -> None:
    before = running_pod()
    after = running_pod(**{field: value})
    assert admit(after, old=before)
    assert admit(after, old=before, user=labels.JOB_CONTROLLER) == []
    assert admit(running_pod(annotations={"note": "mine"}), old=before) == []  # anything else of its own


def test_a_pod_being_deleted_loses_its_finalizer_to_whoever_removes_it() -> None:
    deleting = running_pod(deletionTimestamp="2026-11-27T00:00:00Z")
    assert admit(running_pod(deletionTimestamp="2026-11-27T00:00:00Z", finalizers=[]), old=deleting) == []


def test_kueues_labels_and_annotations_stay_as_created() -> None:
    queued = suspended(job(QUEUED))
    moved = copy.deepcopy(queued)
    moved["metadata"]["labels"][labels.WORKLOAD_PRIORITY_LABEL] = labels.LOW_PRIORITY_CLASS
    assert any("labels and annotations" in message for message in admit(moved, old=queued))
    assert admit(moved, old=queued, user=labels.KUEUE_CONTROLLERS[0]) == []


@pytest.mark.parametrize("change", [
    {"labels": {"kueue.x-k8s.io/prebuilt-workload-name": "other"}},
    {"annotations": {"kueue.x-k8s.io/prebuilt-workload-name": "other"}},
    {"annotations": {"kueue.x-k8s.io/elastic-job": "true"}},
    {"annotations": {"kueue.x-k8s.io/stopping": "true"}},
    {"spec": {"managedBy": "example.com/mine"}},
    {"spec": {"manualSelector": True}},
    {"template": {"terminationGracePeriodSeconds": MAX_GRACE_SECONDS + 1}},
])
def test_a_job_carries_nothing_kueue_would_trust_to_count_less(change: dict[str, Any]) -> None:
    tricky = suspended(job(QUEUED))
    tricky["metadata"]["labels"].update(change.get("labels", {}))
    tricky["metadata"]["annotations"] = change.get("annotations", {})
    tricky["spec"].update(change.get("spec", {}))
    tricky["spec"]["template"]["spec"].update(change.get("template", {}))
    assert admit(tricky)


def test_what_a_tenant_may_set_passes() -> None:
    fine = suspended(job({**QUEUED, "kueue.x-k8s.io/max-exec-time-seconds": "3600", "app": "train"}))
    fine["spec"].update(managedBy="kubernetes.io/job-controller", manualSelector=False)
    fine["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = MAX_GRACE_SECONDS
    assert admit(fine) == []


@pytest.mark.parametrize("options, refused", [
    (None, True),  # batch/v1 orphans by default
    ({"propagationPolicy": "Orphan"}, True),
    ({"orphanDependents": True}, True),
    ({"propagationPolicy": "Background"}, False),
    ({"propagationPolicy": "Foreground"}, False),
    ({"orphanDependents": False}, False),
])
def test_a_queued_job_is_deleted_with_its_pods(options: dict[str, Any] | None, refused: bool) -> None:
    queued = suspended(job(QUEUED))
    variables = {"byController": QUEUE_VARIABLES["byController"]}
    broken = broken_rules(variables, [ORPHANING_DELETE], None, operation="DELETE", old=queued, options=options)
    assert bool(broken) == refused
    assert broken_rules(variables, [ORPHANING_DELETE], None, operation="DELETE", old=job(None, gpus=False),
                        options=options) == []  # a Job outside the queue: its pods are counted by the quota
    # The namespace controller deletes what a deleted namespace holds.
    assert broken_rules(variables, [ORPHANING_DELETE], None, operation="DELETE", old=queued, options=options,
                        user="system:serviceaccount:kube-system:namespace-controller") == []


def test_the_policy_checks_creates_and_updates_only_where_a_delete_has_an_object() -> None:
    plan = render_stack("queue", yaml.safe_load(EXAMPLE.read_text())["config"])
    policy = plan.manifest("ValidatingAdmissionPolicy", labels.QUEUE_POLICY_NAME)
    rules = [v["expression"] for v in policy["spec"]["validations"]]
    assert rules[-1] == ORPHANING_DELETE[0]
    assert all(rule.startswith("request.operation == 'DELETE' || (") for rule in rules[:-1])
    [jobs] = [r for r in policy["spec"]["matchConstraints"]["resourceRules"] if r["resources"] == ["jobs"]]
    assert jobs["operations"] == ["CREATE", "UPDATE", "DELETE"]


def test_every_queue_covers_every_kind_the_fleet_advertises() -> None:
    """Kueue skips a resource its ClusterQueue does not cover (IgnoreUndeclared): a kind not given is covered at 0,
    with nothing to borrow; a tenant without pools of its own has them all on the fleet's first pool."""
    kinds = (GPU, "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb")
    spec = cluster_queue_spec(TenantQueueArgs(tenant="a", cohort="c", nominal={"l4": {"nvidia.com/gpu.shared": 2}},
                                              borrowing_limit=2, kinds=kinds, fleet_pools=("a10g", "l4")))
    [group] = spec["resourceGroups"]
    assert group["coveredResources"] == sorted(kinds)
    [flavor] = group["flavors"]
    assert flavor["name"] == "l4" and {q["name"]: (q["nominalQuota"], q["borrowingLimit"])
                                       for q in flavor["resources"]} == {
        GPU: (0, 0), "nvidia.com/gpu.shared": (2, 2), "nvidia.com/mig-1g.5gb": (0, 0)}
    none = cluster_queue_spec(TenantQueueArgs(tenant="b", cohort="c", nominal={}, kinds=kinds,
                                              fleet_pools=("a10g", "l4")))
    [group] = none["resourceGroups"]
    assert [flavor["name"] for flavor in group["flavors"]] == ["a10g"]
    assert all(q["nominalQuota"] == 0 and q["borrowingLimit"] == 0 for q in group["flavors"][0]["resources"])


def test_rules_that_came_after_a_pod_do_not_stop_kubernetes_finishing_it() -> None:
    """A pod admitted before the cordon rules (tolerating every taint) or with a long grace period: the Job
    controller still removes its finalizer, and the tenant may still annotate it."""
    old = running_pod()
    old["spec"]["tolerations"] = [{"operator": "Exists"}]
    old["spec"]["terminationGracePeriodSeconds"] = 3600
    done = copy.deepcopy(old)
    done["metadata"]["finalizers"] = []
    assert broken_rules(QUEUE_VARIABLES, [*QUEUE_VALIDATIONS, *CORDON_RULES], done, operation="UPDATE", old=old,
                        user=labels.JOB_CONTROLLER) == []
    noted = copy.deepcopy(old)
    noted["metadata"]["annotations"] = {"note": "mine"}
    assert broken_rules(QUEUE_VARIABLES, [*QUEUE_VALIDATIONS, *CORDON_RULES], noted, operation="UPDATE",
                        old=old) == []
    widened = copy.deepcopy(old)
    widened["spec"]["tolerations"].append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"})
    assert broken_rules(QUEUE_VARIABLES, [*QUEUE_VALIDATIONS, *CORDON_RULES], widened, operation="UPDATE", old=old)


CLAIMED = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
           "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                           "resources": {"claims": [{"name": "gpu"}]}}]}


def admit_dra(obj: dict[str, Any], user: str = "alice") -> list[str]:
    """`admit`, with the queue policy's variables of allocation mode dra."""
    return broken_rules(DRA_QUEUE_VARIABLES, QUEUE_VALIDATIONS, obj, user=user, tenant_class=labels.LOW_PRIORITY_CLASS,
                        operation="CREATE")


def test_in_dra_mode_a_pod_or_job_with_claims_is_gpu_work_that_goes_through_the_queue() -> None:
    claimed_pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"restartPolicy": "Never", **CLAIMED}}
    claimed_job = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": claimed_pod["spec"]}}}
    [message] = admit_dra(claimed_pod)
    assert labels.QUEUE_NAME_LABEL in message
    assert admit_dra(claimed_pod, user=labels.JOB_CONTROLLER) == []
    [message] = admit_dra(suspended(claimed_job))
    assert f"{labels.QUEUE_NAME_LABEL}: {labels.TENANT_QUEUE}" in message
    queued = {**claimed_job, "metadata": {"name": "j", "labels": QUEUED}}
    assert admit_dra(suspended(queued)) == []
    # Without the mode, a claim is not GPU work to the queue policy (the tenant pod policy refuses claims there).
    assert admit(suspended(queued)) != [] and admit(suspended(claimed_job)) == []
    assert admit_dra(suspended(job(QUEUED))) == []


def test_in_dra_mode_kueue_counts_each_class_as_its_quota_line() -> None:
    classes = ("gpu.gpu-platform.io", "mig-1g.10gb.gpu-platform.io")
    resources = configuration(classes)["resources"]
    assert resources["quotaCheckStrategy"] == "IgnoreUndeclared"
    assert resources["deviceClassMappings"] == [{"name": quota_key(name), "deviceClassNames": [name]}
                                                for name in classes]
    # A label key, as Kueue validates the name (pkg/config/validation.go validateDeviceClassMappings).
    assert all(re.fullmatch(r"[a-z0-9.-]{1,253}/[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?", mapping["name"])
               for mapping in resources["deviceClassMappings"])
    assert "deviceClassMappings" not in configuration()["resources"]
