"""Tenancy mode `queue` in allocation mode `dra` (the DRA example with `tenancy.mode: queue`), held by the real
Kueue (v0.19.2, counting devices per DeviceClass through the stack's deviceClassMappings), the real API server and
the real scheduler, each tenant's attempt to get around its queue tried as that tenant.

Stand-ins, as in e2e/test_dra.py and e2e/test_kueue.py: the ResourceSlices NVIDIA's DRA driver would publish
(e2e/dra.py), the GPUCluster CRD, Kueue's webhooks reached on 127.0.0.1 (e2e/kueue.py) and kwok's nodes; Job pods run
until deleted (kwok without the stage that completes Job pods).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.dynamic.exceptions import NotFoundError

from components import labels
from components.dra_admission import CLAIM_VALIDATIONS, QUEUED_TEMPLATE_VALIDATIONS
from components.kueue import QUEUE_VALIDATIONS
from e2e.conftest import Applied
from e2e.dra import dra_plane
from e2e.kube import refusal, stays, wait_for
from e2e.stack import Stack
from e2e.test_dra import RESOURCE, SEARCH, WHOLE, allocated, as_tenant, claim, message, template
from e2e.test_kueue import RUNNING, WORKLOAD, after_its_admission_second, condition, preempted, workload
from e2e.test_tenants import RESTRICTED_POD, container
from fleet.dra import quota_key
from tests.stacks.test_allocation import dra_queue_config

SETTLE_SECONDS = 90
POOL = "h100-training"  # 8 H100s: training guaranteed 6, search 2 (which it lends), research none


@pytest.fixture(scope="module")
def queued(tools, tmp_path_factory) -> Iterator[Applied]:
    stack = Stack.from_config("dra-queue", dra_queue_config())
    with dra_plane(stack, tmp_path_factory.mktemp("cluster-dra-queue"), stages=RUNNING, queued=True) as applied:
        yield applied


@pytest.fixture
def cluster(queued: Applied) -> Iterator[Applied]:
    """The applied stack; every tenant Job (its workload, pods and claims), claim and template removed after."""
    yield queued
    admin = queued.admin
    for tenant in queued.stack.config.tenants:
        for api_version, kind in (("batch/v1", "Job"), (RESOURCE, "ResourceClaim"),
                                  (RESOURCE, "ResourceClaimTemplate")):
            for obj in admin.list(api_version, kind, tenant.name):
                try:
                    admin.delete(api_version, kind, obj["metadata"]["name"], tenant.name)
                except NotFoundError:
                    pass
        wait_for(lambda: not admin.list("v1", "Pod", tenant.name) and not admin.list(*WORKLOAD, tenant.name)
                 and not admin.list(RESOURCE, "ResourceClaim", tenant.name),
                 f"jobs and claims of {tenant.name} gone", timeout=SETTLE_SECONDS)


def claimed_job(name: str, *, template_name: str | None = None, claim_name: str | None = None,
                priority: str | None = None, queue: bool = True) -> dict[str, Any]:
    """A Job of one pause pod holding one claim (made from a template, or a pre-made one), in the tenant's queue."""
    job_labels = {labels.QUEUE_NAME_LABEL: labels.TENANT_QUEUE} if queue else {}
    if priority:
        job_labels[labels.WORKLOAD_PRIORITY_LABEL] = priority
    source = {"resourceClaimName": claim_name} if claim_name else {"resourceClaimTemplateName": template_name}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": job_labels},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "securityContext": dict(RESTRICTED_POD),
                "resourceClaims": [{"name": "gpu", **source}],
                "containers": [container(resources={"claims": [{"name": "gpu"}]})]}}}}


def submit(applied: Applied, tenant: str, job: dict[str, Any]) -> None:
    as_tenant(applied, tenant).create({**job, "metadata": {**job["metadata"], "namespace": tenant}})


def job_pods(applied: Applied, tenant: str, job: str) -> list[dict[str, Any]]:
    return [pod for pod in applied.admin.list("v1", "Pod", tenant)
            if pod["metadata"].get("labels", {}).get("job-name") == job
            and not pod["metadata"].get("deletionTimestamp")]


def admitted(applied: Applied, tenant: str, job: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait until Kueue admits the job's workload and its pod runs; the workload and the pod."""
    found = wait_for(lambda: condition(workload(applied, tenant, job), "Admitted") and workload(applied, tenant, job),
                     f"{tenant}/{job} admitted", timeout=SETTLE_SECONDS)
    [pod] = wait_for(lambda: [pod for pod in job_pods(applied, tenant, job) if pod["status"].get("phase") == "Running"],
                     f"{tenant}/{job} running", timeout=SETTLE_SECONDS)
    return found, pod


def held_out(applied: Applied, tenant: str, job: str) -> dict[str, Any]:
    """The job's workload once Kueue has looked at it, after checking that for a while the Job stays suspended,
    without pods, and its workload unadmitted."""
    wait_for(lambda: workload(applied, tenant, job) and (workload(applied, tenant, job).get("status") or {}).get(
        "conditions"), f"{tenant}/{job} seen by Kueue", timeout=SETTLE_SECONDS)
    assert stays(lambda: applied.admin.get("batch/v1", "Job", job, tenant)["spec"].get("suspend") is True
                 and not job_pods(applied, tenant, job)
                 and not condition(workload(applied, tenant, job), "QuotaReserved"), seconds=10)
    return workload(applied, tenant, job)


def test_the_stack_applies_and_kueue_takes_every_queue_counting_devices(queued: Applied) -> None:
    assert queued.rejected == {}
    for tenant in queued.stack.config.tenants:
        queue = wait_for(lambda: condition(queued.admin.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", tenant.name),
                                           "Active"), f"ClusterQueue {tenant.name} active", timeout=SETTLE_SECONDS)
        assert queue


@pytest.mark.parametrize("count, pods", [(9, 1), (5, 2)])
def test_a_job_asking_more_devices_than_its_queue_can_give_stays_suspended(cluster: Applied, count: int,
                                                                           pods: int) -> None:
    """training may hold 8 whole H100s (6 its own, 2 borrowed from search): a template asking 9, or two pods of 5,
    is counted as that many devices of the class, and Kueue keeps the Job out."""
    as_tenant(cluster, "training").create(template("many", "training", WHOLE, count=count))
    job = claimed_job("too-big", template_name="many")
    job["spec"].update(parallelism=pods, completions=pods)
    submit(cluster, "training", job)
    found = held_out(cluster, "training", "too-big")
    requests = found["status"].get("resourceRequests") or []
    counted = {name: value for entry in requests for name, value in entry.get("resources", {}).items()}
    assert counted.get(quota_key(WHOLE)) == str(count * pods), requests
    pending = next(c for c in found["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert pending["status"] == "False" and quota_key(WHOLE) in pending["message"]
    assert f"({count * pods}) > maximum capacity (8)" in pending["message"]  # what the queue can ever give


def test_a_class_not_given_is_refused_and_its_job_never_admitted(cluster: Applied) -> None:
    """research was not given search's pool: its template naming that class is refused by the claims policy, and a
    Job naming the template (so no template by that name) waits unadmitted."""
    kube = as_tenant(cluster, "research")
    assert message("variables.allowed", CLAIM_VALIDATIONS) in refusal(
        lambda: kube.create(template("search-gpus", "research", SEARCH)))
    submit(cluster, "research", claimed_job("elsewhere", template_name="search-gpus"))
    found = held_out(cluster, "research", "elsewhere")
    assert "search-gpus" in next(c for c in found["status"]["conditions"] if c["type"] == "QuotaReserved")["message"]


def test_a_pod_or_job_with_a_claim_outside_the_queue_is_refused(cluster: Applied) -> None:
    kube = as_tenant(cluster, "training")
    kube.create(template("one", "training", WHOLE))
    job = claimed_job("bypass", template_name="one", queue=False)
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bypass", "namespace": "training"},
            "spec": job["spec"]["template"]["spec"]}
    assert message("object.kind != 'Pod' || request.operation != 'CREATE'", QUEUE_VALIDATIONS) in refusal(
        lambda: kube.create(bare))
    assert message("object.kind != 'Job' || !variables.requestsGpu", QUEUE_VALIDATIONS) in refusal(
        lambda: submit(cluster, "training", job))


def test_a_pre_made_claim_is_not_counted_so_kueue_keeps_its_job_out(cluster: Applied) -> None:
    """Kueue v0.19.2 counts templates only; a Job whose pods name a pre-made claim is inadmissible
    (pkg/controller/core/workload_controller.go, workload.HasResourceClaim)."""
    as_tenant(cluster, "training").create(claim("mine", "training", WHOLE))
    submit(cluster, "training", claimed_job("premade", claim_name="mine"))
    found = held_out(cluster, "training", "premade")
    pending = next(c for c in found["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert "does not support use of resource claims" in pending["message"]


def test_a_high_priority_job_preempts_a_lower_one_holding_every_device(cluster: Applied) -> None:
    """What the scheduler does not do for devices (e2e/test_dra.py), Kueue does inside the tenant's queue: training
    fills all 8 H100s at gpu-low (borrowing search's 2), then a gpu-high Job asking 1 device evicts it, and the
    scheduler gives the freed device to the new pod."""
    kube = as_tenant(cluster, "training")
    kube.create(template("eight", "training", WHOLE, count=8))
    kube.create(template("one", "training", WHOLE))
    submit(cluster, "training", claimed_job("low", template_name="eight", priority=labels.LOW_PRIORITY_CLASS))
    low, pod = admitted(cluster, "training", "low")
    [assignment] = low["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {quota_key(WHOLE): POOL} and assignment["resourceUsage"][quota_key(WHOLE)] == "8"
    assert pod["spec"]["nodeName"].startswith(POOL) and len(allocated(cluster.admin, "training",
                                                                      pod["metadata"]["name"])) == 8
    after_its_admission_second(low)
    submit(cluster, "training", claimed_job("high", template_name="one", priority=labels.HIGH_PRIORITY_CLASS))
    reason = preempted(cluster, "training", "low")
    assert reason["reason"] == "InClusterQueue", reason
    _, pod = admitted(cluster, "training", "high")
    [result] = allocated(cluster.admin, "training", pod["metadata"]["name"])
    assert result["pool"] == pod["spec"]["nodeName"] and pod["spec"]["nodeName"].startswith(POOL)
    assert cluster.admin.get("batch/v1", "Job", "low", "training")["spec"]["suspend"] is True



def test_a_template_cannot_be_replaced_by_one_asking_more(cluster: Applied) -> None:
    """Kueue counts a template when it admits a Job, and a template's spec is immutable; deleting it and making one
    by the same name that asks 8 would give the Job's next pod 8 devices counted as 1 (tried on this plane before
    the rule: Kueue's ClusterQueue showed 1 in use while the pod held 8). So tenants do not delete templates, and no
    template has an owner the garbage collector would delete it with."""
    kube = as_tenant(cluster, "training")
    kube.create(template("one", "training", WHOLE))
    submit(cluster, "training", claimed_job("swap", template_name="one"))
    admitted(cluster, "training", "swap")
    assert "forbidden" in refusal(lambda: kube.delete(RESOURCE, "ResourceClaimTemplate", "one", "training")).lower()
    job = cluster.admin.get("batch/v1", "Job", "swap", "training")
    owned = template("owned", "training", WHOLE)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "swap",
                                             "uid": job["metadata"]["uid"]}]
    assert message("ownerReferences", QUEUED_TEMPLATE_VALIDATIONS) in refusal(lambda: kube.create(owned))


def test_a_template_with_first_available_keeps_its_job_out(cluster: Applied) -> None:
    """The claims policy lets a tenant list its classes in `firstAvailable`; Kueue v0.19.2 does not count such a
    request (pkg/dra/claims.go countDevicesPerClass), so the Job is never admitted rather than admitted uncounted."""
    body = template("either", "training", WHOLE)
    body["spec"]["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "whole", "deviceClassName": WHOLE, "allocationMode": "ExactCount", "count": 1}]}]
    as_tenant(cluster, "training").create(body)
    submit(cluster, "training", claimed_job("either", template_name="either"))
    found = held_out(cluster, "training", "either")
    pending = next(c for c in found["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert "FirstAvailable device selection is not supported" in pending["message"]


def test_a_lender_takes_back_the_devices_another_tenant_borrowed(cluster: Applied) -> None:
    """search lends its 2 H100s while idle: training's gpu-low Job holding all 8 is preempted by Kueue when search
    asks for its own 2, and the scheduler gives them to search's pod."""
    as_tenant(cluster, "training").create(template("eight", "training", WHOLE, count=8))
    submit(cluster, "training", claimed_job("low", template_name="eight", priority=labels.LOW_PRIORITY_CLASS))
    low, _ = admitted(cluster, "training", "low")
    after_its_admission_second(low)
    as_tenant(cluster, "search").create(template("two", "search", WHOLE, count=2))
    submit(cluster, "search", claimed_job("own", template_name="two"))
    reason = preempted(cluster, "training", "low")
    assert reason["reason"] == "InCohortReclamation" and "/gpu-tenants/search" in reason["message"], reason
    _, pod = admitted(cluster, "search", "own")
    assert pod["spec"]["nodeName"].startswith(POOL) and len(allocated(cluster.admin, "search",
                                                                      pod["metadata"]["name"])) == 2
