"""Tenancy mode `queue`, held by the real Kueue controller (v0.19.2, built from its module) and the real API server and
scheduler: each example stack (examples/Pulumi.queue.yaml on Kubernetes, examples/Pulumi.queue-openshift.yaml on
OpenShift) applied, tenants borrowing idle GPUs, lenders reclaiming them, priority inside a tenant, and no GPU work
outside the queues.

Stand-ins, said where they are: Kueue's webhooks are reached on 127.0.0.1 (e2e/kueue.py), and GPU nodes are kwok's,
shaped like the example's pools (GPU taint, pool label, advertised nvidia.com/gpu). Job pods run until deleted here
(kwok without its stage that completes Job pods), so a job holds its GPUs for as long as a scenario needs. On
OpenShift the Red Hat build of Kueue (an operator installed through OLM) cannot run: upstream Kueue runs with the
configuration that build's operator writes from the stack's `Kueue` instance, its webhooks registered as that
operator registers them (namespaced kinds only in namespaces labelled kueue.openshift.io/managed, e2e/kueue.py),
and that instance is not applied (its CRD comes with the operator's bundle).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
import yaml
from kubernetes.dynamic.exceptions import NotFoundError

from components import labels
from components.admission import CORDON_RULES, VALIDATIONS
from components.kueue import JOB_POD_LABELS, JOB_TRACKING_FINALIZER, ORPHANING_DELETE, QUEUE_VALIDATIONS
from e2e import kueue
from e2e.cluster import KWOK_STAGES, ControlPlane
from e2e.conftest import Applied, apply_stack, object_key, prepare_cluster
from e2e.kube import Kube, refusal, stays, wait_for
from e2e.stack import Stack
from e2e.test_tenants import RESTRICTED_POD, container
from stacks.config import parse_stack_config
from stacks.tenancy import borrowable, guarantees
from tests.conftest import ROOT, render_stack

GPU = labels.GPU_RESOURCE
WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")
EXAMPLES = {"queue": "Pulumi.queue.yaml", "queue-openshift": "Pulumi.queue-openshift.yaml"}
OPERATOR_INSTANCE = "Kueue/cluster"  # OpenShift: the Red Hat build's instance, for its operator (a stand-in here)
RUNNING = tuple(stage for stage in KWOK_STAGES if stage != "pod/fast/pod-complete.yaml")
SETTLE_SECONDS = 90
POOL = "a10g-batch"  # 2 nodes of 4 GPUs: llm-training guaranteed 4 (lends 2), analytics 4


@pytest.fixture(scope="module", params=sorted(EXAMPLES))
def queued(request, tools, tmp_path_factory) -> Iterator[Applied]:
    example = yaml.safe_load((ROOT / "examples" / EXAMPLES[request.param]).read_text())["config"]
    values = {key.removeprefix("gpu-platform:"): value for key, value in copy.deepcopy(example).items()}
    stack = Stack(request.param, render_stack(request.param, example), parse_stack_config(values))
    with ControlPlane.start(tmp_path_factory.mktemp(f"cluster-{request.param}"), stages=RUNNING) as plane:
        admin = prepare_cluster(stack, plane)
        instance = [obj for obj in stack.objects() if object_key(obj) == OPERATOR_INSTANCE]
        kueue.start(plane, admin, *instance)
        applied = Applied(stack, plane, admin)
        apply_stack(applied, leave_out=frozenset({OPERATOR_INSTANCE}))
        for tenant in stack.tenants():
            wait_for(lambda: admin.get("v1", "ServiceAccount", "default", tenant.name), f"{tenant.name}/default", 30)
        yield applied
        for client in [admin, *applied.users.values()]:
            client.close()


@pytest.fixture
def cluster(queued: Applied) -> Iterator[Applied]:
    """The applied example, every tenant job (and so its workload and pods) removed after the test."""
    yield queued
    for tenant in queued.stack.tenants():
        for job in queued.admin.list("batch/v1", "Job", tenant.name):
            try:
                queued.admin.delete("batch/v1", "Job", job["metadata"]["name"], tenant.name)
            except NotFoundError:
                pass
        wait_for(lambda: not queued.admin.list("v1", "Pod", tenant.name) and not queued.admin.list(
            *WORKLOAD, tenant.name), f"jobs of {tenant.name} gone", timeout=SETTLE_SECONDS)


def tenant_client(applied: Applied, name: str) -> Kube:
    [tenant] = [tenant for tenant in applied.stack.tenants() if tenant.name == name]
    return applied.user(f"{name}-member", tenant.rbac_group)


def gpu_job(name: str, gpus: int, *, priority: str | None = None, queue: bool = True, resource: str = GPU,
            pool: str = POOL) -> dict[str, Any]:
    """A Job of one pod asking for `gpus` of `resource` (whole GPUs, shares, MIG slices), kept to `pool`'s flavor by
    its nodeSelector; no toleration of its own."""
    job_labels = {labels.QUEUE_NAME_LABEL: labels.TENANT_QUEUE} if queue else {}
    if priority:
        job_labels[labels.WORKLOAD_PRIORITY_LABEL] = priority
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": job_labels},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": {labels.POOL_LABEL: pool},
                "securityContext": dict(RESTRICTED_POD),
                "containers": [container(resources={"limits": {resource: str(gpus)}})]}}}}


def submit(applied: Applied, tenant: str, job: dict[str, Any]) -> None:
    tenant_client(applied, tenant).create({**job, "metadata": {**job["metadata"], "namespace": tenant}})


def workload(applied: Applied, tenant: str, job: str) -> dict[str, Any] | None:
    for found in applied.admin.list(*WORKLOAD, tenant):
        if any(owner["name"] == job for owner in found["metadata"].get("ownerReferences", [])):
            return found
    return None


def condition(found: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def admitted(applied: Applied, tenant: str, job: str, pool: str = POOL) -> dict[str, Any]:
    """Wait until Kueue admits the job's workload and its pod runs on a node of `pool`; the workload."""
    found = wait_for(lambda: condition(workload(applied, tenant, job), "Admitted") and workload(applied, tenant, job),
                     f"{tenant}/{job} admitted", timeout=SETTLE_SECONDS)
    nodes = {node["metadata"]["name"] for node in applied.stack.nodes()
             if node["metadata"]["labels"].get(labels.POOL_LABEL) == pool}
    wait_for(lambda: [pod for pod in applied.admin.list("v1", "Pod", tenant)
                      if pod["metadata"].get("labels", {}).get("job-name") == job
                      and pod["status"].get("phase") == "Running" and pod["spec"].get("nodeName") in nodes],
             f"{tenant}/{job} running on {pool}", timeout=SETTLE_SECONDS)
    return found


def after_its_admission_second(found: dict[str, Any]) -> None:
    """Wait until the second after the workload's quota was reserved. Kueue preempts the most recently admitted
    workload first, but compares admission times only to the second and breaks ties by UID, arbitrarily
    (pkg/scheduler/preemption/common/ordering.go): a job admitted in the same second could be preempted instead."""
    reserved = datetime.fromisoformat(condition(found, "QuotaReserved")["lastTransitionTime"])
    time.sleep(max(0.0, reserved.timestamp() + 1 - datetime.now(timezone.utc).timestamp()))


def preempted(applied: Applied, tenant: str, job: str) -> dict[str, Any]:
    """Wait until Kueue preempts the job's workload and its pods are gone; the Preempted condition."""
    found = wait_for(lambda: condition(workload(applied, tenant, job), "Preempted"), f"{tenant}/{job} preempted",
                     timeout=SETTLE_SECONDS)
    wait_for(lambda: not [pod for pod in applied.admin.list("v1", "Pod", tenant)
                          if pod["metadata"].get("labels", {}).get("job-name") == job
                          and not pod["metadata"].get("deletionTimestamp")],
             f"{tenant}/{job} pods gone", timeout=SETTLE_SECONDS)
    return found


def settles_at(applied: Applied, tenant: str, expected: dict[str, int], pool: str = POOL,
               resource: str = GPU) -> bool:
    """Whether the tenant's ClusterQueue reports `expected` usage within a while (Kueue updates status after it
    admits or evicts)."""
    try:
        wait_for(lambda: usage(applied, tenant, pool, resource) == expected, f"{tenant} using {expected}",
                 timeout=SETTLE_SECONDS)
    except TimeoutError:
        return False
    return True


def usage(applied: Applied, tenant: str, pool: str = POOL, resource: str = GPU) -> dict[str, int]:
    """The ClusterQueue's `resource` in use in `pool`'s flavor, and how much of it is borrowed, as Kueue reports."""
    queue = applied.admin.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", tenant) or {}
    for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
        if flavor["name"] == pool:
            [used] = [found for found in flavor["resources"] if found["name"] == resource]
            return {"total": int(used.get("total", 0)), "borrowed": int(used.get("borrowed", 0))}
    return {"total": 0, "borrowed": 0}


def test_the_example_applies_with_every_queue_accepted_by_kueue_webhooks(queued: Applied) -> None:
    assert queued.rejected == {}
    for tenant in queued.stack.tenants():
        queue = wait_for(lambda: condition(queued.admin.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", tenant.name),
                                           "Active"), f"ClusterQueue {tenant.name} active", timeout=SETTLE_SECONDS)
        assert queue


def test_a_tenant_borrows_idle_gpus_and_the_lender_reclaims_them(cluster: Applied) -> None:
    submit(cluster, "analytics", gpu_job("own", 4))
    after_its_admission_second(admitted(cluster, "analytics", "own"))
    submit(cluster, "analytics", gpu_job("borrowed", 2))
    admitted(cluster, "analytics", "borrowed")
    assert settles_at(cluster, "analytics", {"total": 6, "borrowed": 2})  # llm-training's 2 lendable GPUs
    submit(cluster, "llm-training", gpu_job("reclaim", 4))
    preempted(cluster, "analytics", "borrowed")
    admitted(cluster, "llm-training", "reclaim")
    assert settles_at(cluster, "llm-training", {"total": 4, "borrowed": 0})  # within its nominal 4
    assert condition(workload(cluster, "analytics", "own"), "Admitted")  # its guarantee is left alone


SHARED, SHARED_POOL = "nvidia.com/gpu.shared", "l4-inference"  # 4 shares: search-ranking 2, analytics 2
MIG, MIG_POOL = "nvidia.com/mig-1g.5gb", "a100-mig"  # 56 slices: llm-training 28 (lends 2), analytics 28


def test_shares_are_borrowed_one_per_container_and_reclaimed(cluster: Applied) -> None:
    """search-ranking runs its 2 shares and borrows analytics' idle ones; analytics gets its own back."""
    share = {"resource": SHARED, "pool": SHARED_POOL}
    for index in range(2):
        submit(cluster, "search-ranking", gpu_job(f"own-{index}", 1, **share))
        after_its_admission_second(admitted(cluster, "search-ranking", f"own-{index}", SHARED_POOL))
    submit(cluster, "search-ranking", gpu_job("borrowed", 1, **share))
    admitted(cluster, "search-ranking", "borrowed", SHARED_POOL)
    assert settles_at(cluster, "search-ranking", {"total": 3, "borrowed": 1}, SHARED_POOL, SHARED)
    submit(cluster, "analytics", gpu_job("mine-0", 1, **share))
    admitted(cluster, "analytics", "mine-0", SHARED_POOL)  # the one share still idle
    submit(cluster, "analytics", gpu_job("mine-1", 1, **share))
    preempted(cluster, "search-ranking", "borrowed")
    admitted(cluster, "analytics", "mine-1", SHARED_POOL)
    assert settles_at(cluster, "analytics", {"total": 2, "borrowed": 0}, SHARED_POOL, SHARED)


def test_mig_slices_are_borrowed_and_reclaimed(cluster: Applied) -> None:
    """analytics fills its 28 slices and borrows the 2 llm-training lends; llm-training reclaims them."""
    slices = {"resource": MIG, "pool": MIG_POOL}
    submit(cluster, "analytics", gpu_job("own", 28, **slices))
    after_its_admission_second(admitted(cluster, "analytics", "own", MIG_POOL))
    submit(cluster, "analytics", gpu_job("borrowed", 2, **slices))
    admitted(cluster, "analytics", "borrowed", MIG_POOL)
    assert settles_at(cluster, "analytics", {"total": 30, "borrowed": 2}, MIG_POOL, MIG)
    submit(cluster, "llm-training", gpu_job("reclaim", 28, **slices))
    preempted(cluster, "analytics", "borrowed")
    admitted(cluster, "llm-training", "reclaim", MIG_POOL)
    assert settles_at(cluster, "llm-training", {"total": 28, "borrowed": 0}, MIG_POOL, MIG)
    assert condition(workload(cluster, "analytics", "own"), "Admitted")


def test_a_job_asking_two_shares_in_a_container_is_refused_before_kueue_holds_quota_for_it(cluster: Applied) -> None:
    text = refusal(lambda: submit(cluster, "search-ranking", gpu_job("two", 2, resource=SHARED, pool=SHARED_POOL)))
    assert f"a container may ask for one {SHARED}" in text
    assert workload(cluster, "search-ranking", "two") is None


def test_a_higher_priority_job_preempts_a_lower_one_inside_a_tenant(cluster: Applied) -> None:
    submit(cluster, "analytics", gpu_job("own", 4))  # nothing left in the pool for llm-training to borrow
    admitted(cluster, "analytics", "own")
    submit(cluster, "llm-training", gpu_job("batch", 4, priority=labels.LOW_PRIORITY_CLASS))
    admitted(cluster, "llm-training", "batch")
    submit(cluster, "llm-training", gpu_job("deadline", 2, priority=labels.HIGH_PRIORITY_CLASS))
    preempted(cluster, "llm-training", "batch")
    admitted(cluster, "llm-training", "deadline")
    assert condition(workload(cluster, "analytics", "own"), "Admitted")


@pytest.mark.parametrize("name, obj, part", [
    ("a GPU job without a queue", gpu_job("unqueued", 1, queue=False),
     f"variables.jobLabels['{labels.QUEUE_NAME_LABEL}'] == '{labels.TENANT_QUEUE}'"),
    ("a bare GPU pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": {
        "securityContext": RESTRICTED_POD, "containers": [container(resources={"limits": {GPU: "1"}})]}},
     f"request.userInfo.username == '{labels.JOB_CONTROLLER}'"),
])
def test_gpu_work_outside_the_queue_is_refused(cluster: Applied, name: str, obj: dict[str, Any], part: str) -> None:
    text = refusal(lambda: submit(cluster, "analytics", obj))
    assert rule(part) in text


def test_a_low_priority_tenant_cannot_queue_at_high_priority(cluster: Applied) -> None:
    text = refusal(lambda: submit(cluster, "analytics", gpu_job("jump", 1, priority=labels.HIGH_PRIORITY_CLASS)))
    assert f"workload priority class {labels.HIGH_PRIORITY_CLASS}" in text


VISIBILITY = "visibility.kueue.x-k8s.io"


def pending_workloads(user: Kube, path: str) -> dict[str, Any]:
    """GET a listing of Kueue's visibility API (served by Kueue, through the API server's aggregation)."""
    return user.dynamic.request("GET", f"/apis/{VISIBILITY}/v1beta2/{path}").to_dict()


def test_a_tenant_reads_its_place_in_its_queue_and_no_other_tenants(cluster: Applied) -> None:
    """Its LocalQueue's pending workloads, with each one's position, through Kueue's visibility API as the tenant;
    another tenant's queue and the ClusterQueues' listings (every tenant's workloads) are refused it."""
    submit(cluster, "analytics", gpu_job("own", 4))
    admitted(cluster, "analytics", "own")
    # 4 GPUs each: more than llm-training lends (2), so both wait. Kueue orders a queue by priority, then by the
    # workload's creation time (pkg/workload/workload.go GetQueueOrderTimestamp), which is kept to the second: two
    # jobs created in the same second were seen listed in either order, so the second is submitted a second later.
    for name in ("first", "second"):
        submit(cluster, "analytics", gpu_job(name, 4))
        created = wait_for(lambda: workload(cluster, "analytics", name), f"analytics/{name} queued",
                           timeout=SETTLE_SECONDS)["metadata"]["creationTimestamp"]
        time.sleep(max(0.0, datetime.fromisoformat(created).timestamp() + 1 - datetime.now(timezone.utc).timestamp()))
    user = tenant_client(cluster, "analytics")
    names = {workload(cluster, "analytics", name)["metadata"]["name"]: name for name in ("first", "second")}

    def positions() -> dict[str, int] | None:
        listing = pending_workloads(user, f"namespaces/analytics/localqueues/{labels.TENANT_QUEUE}/pendingworkloads")
        found = {names[item["metadata"]["name"]]: item["positionInLocalQueue"] for item in listing["items"]
                 if item["metadata"]["name"] in names}
        return found if len(found) == 2 else None

    assert wait_for(positions, "both jobs listed as pending", timeout=SETTLE_SECONDS) == {"first": 0, "second": 1}
    other = refusal(lambda: pending_workloads(
        user, f"namespaces/llm-training/localqueues/{labels.TENANT_QUEUE}/pendingworkloads"))
    assert "forbidden" in other
    assert "forbidden" in refusal(lambda: pending_workloads(user, "clusterqueues/analytics/pendingworkloads"))


def test_a_tenant_sees_why_its_job_waits_but_cannot_change_its_queue(cluster: Applied) -> None:
    """Its Workloads and LocalQueue; its place in the queue is read above."""
    user = tenant_client(cluster, "analytics")
    assert user.can("get", "localqueues", "analytics", VISIBILITY, subresource="pendingworkloads")
    assert not user.can("get", "localqueues", "llm-training", VISIBILITY, subresource="pendingworkloads")
    assert not user.can("get", "clusterqueues", "", VISIBILITY, subresource="pendingworkloads")
    assert user.can("list", "workloads", "analytics", group="kueue.x-k8s.io")
    assert user.can("get", "localqueues", "analytics", group="kueue.x-k8s.io")
    assert not user.can("update", "localqueues", "analytics", group="kueue.x-k8s.io")
    assert not user.can("update", "workloads", "analytics", group="kueue.x-k8s.io")
    assert not user.can("list", "workloads", "llm-training", group="kueue.x-k8s.io")


def rule(part: str) -> str:
    """The queue policy's message for the one rule whose CEL holds `part`."""
    [text] = [text for expression, text in QUEUE_VALIDATIONS if part in expression]
    return text


def patch_job(applied: Applied, tenant: str, name: str, body: dict[str, Any]) -> None:
    """A merge patch of the tenant's Job, as the tenant (what `kubectl patch --type merge` sends)."""
    tenant_client(applied, tenant).resource("batch/v1", "Job").patch(
        body=body, name=name, namespace=tenant, content_type="application/merge-patch+json")


def job_pods(applied: Applied, tenant: str, job: str) -> list[dict[str, Any]]:
    return [pod for pod in applied.admin.list("v1", "Pod", tenant)
            if pod["metadata"].get("labels", {}).get("job-name") == job]


def test_a_forged_child_of_an_admitted_job_is_refused(cluster: Applied) -> None:
    """Kueue takes a Job whose controller is a queued Job for that Job's child: it would neither suspend it nor
    give it a Workload, so its pods would hold GPUs no ClusterQueue counts. The tenant's forged child, asking for
    a whole node with its own toleration and the pool's nodeSelector, is refused."""
    submit(cluster, "analytics", gpu_job("parent", 1))
    admitted(cluster, "analytics", "parent")
    parent = cluster.admin.get("batch/v1", "Job", "parent", "analytics")
    child = gpu_job("child", 4)
    child["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "parent",
                                             "uid": parent["metadata"]["uid"], "controller": True}]
    child["spec"]["template"]["spec"]["tolerations"] = [dict(labels.GPU_TOLERATION)]
    text = refusal(lambda: submit(cluster, "analytics", child))
    assert rule("newControllers") in text
    assert settles_at(cluster, "analytics", {"total": 1, "borrowed": 0})
    assert cluster.admin.get("batch/v1", "Job", "child", "analytics") is None


def test_a_running_job_cannot_grow_and_a_waiting_one_cannot_start_itself(cluster: Applied) -> None:
    """Raising parallelism on an admitted Job would start pods before Kueue suspends it again; un-suspending a
    Job that waits would start its pods before Kueue re-suspends it. Only Kueue does either."""
    submit(cluster, "analytics", gpu_job("grow", 1))
    admitted(cluster, "analytics", "grow")
    text = refusal(lambda: patch_job(cluster, "analytics", "grow", {"spec": {"parallelism": 4}}))
    assert rule("oldObject.spec.parallelism") in text
    submit(cluster, "analytics", gpu_job("waits", 16))  # more than the cohort holds: never admitted
    wait_for(lambda: workload(cluster, "analytics", "waits"), "analytics/waits queued", timeout=SETTLE_SECONDS)
    text = refusal(lambda: patch_job(cluster, "analytics", "waits", {"spec": {"suspend": False}}))
    assert rule("variables.wasSuspended || variables.suspended") in text
    assert cluster.admin.get("batch/v1", "Job", "waits", "analytics")["spec"]["suspend"] is True
    assert job_pods(cluster, "analytics", "waits") == [] and len(job_pods(cluster, "analytics", "grow")) == 1
    patch_job(cluster, "analytics", "waits", {"spec": {"parallelism": 2}})  # while suspended: queued anew


@pytest.mark.parametrize("priority_class", [labels.HIGH_PRIORITY_CLASS, "system-node-critical"])
def test_a_job_is_not_queued_above_its_tenants_tier_through_its_template(cluster: Applied,
                                                                         priority_class: str) -> None:
    """Without a workload priority label Kueue orders a Job by its pod template's priority class
    (ExtractPriority): a gpu-low tenant naming gpu-high or a system class there is refused."""
    job = gpu_job("jump", 1)
    job["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    text = refusal(lambda: submit(cluster, "analytics", job))
    assert rule("variables.podSpec.priorityClassName in variables.tiers") in text
    assert workload(cluster, "analytics", "jump") is None


def test_a_cpu_job_stays_out_of_the_gpu_queue(cluster: Applied) -> None:
    """The flavors are GPU pools: a queued Job without GPUs would be given a pool's toleration (on OpenShift, whose
    queues cover CPU and memory) and its pods refused, holding CPU quota. It is refused, and runs unqueued."""
    job = gpu_job("cpu", 0)
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    del job["spec"]["template"]["spec"]["nodeSelector"]
    text = refusal(lambda: submit(cluster, "analytics", job))
    assert rule("|| variables.requestsGpu") in text
    del job["metadata"]["labels"][labels.QUEUE_NAME_LABEL]
    submit(cluster, "analytics", job)
    wait_for(lambda: [pod for pod in job_pods(cluster, "analytics", "cpu") if pod["status"].get("phase") in (
        "Running", "Succeeded")], "analytics/cpu ran", timeout=SETTLE_SECONDS)


def test_a_job_whose_pods_never_start_gives_its_gpus_back(cluster: Applied) -> None:
    """waitForPodsReady: an admitted Job whose pods are all refused (here by the tenant pod policy) is evicted when
    its pods are not ready in time, and its GPUs return to the queue (the timeout is shortened here,
    e2e/kueue.py PODS_READY_SECONDS)."""
    job = gpu_job("never", 2)
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    submit(cluster, "analytics", job)
    wait_for(lambda: condition(workload(cluster, "analytics", "never"), "Admitted"), "analytics/never admitted",
             timeout=SETTLE_SECONDS)
    [pod_rule] = [text for expression, text in VALIDATIONS if "NVIDIA_VISIBLE_DEVICES" in expression
                  and "ephemeral" not in expression]
    wait_for(lambda: any(pod_rule in event["message"] for event in cluster.admin.list("v1", "Event", "analytics")
                         if event["reason"] == "FailedCreate"), "analytics/never's pods refused", timeout=SETTLE_SECONDS)
    evicted = wait_for(lambda: condition(workload(cluster, "analytics", "never"), "Evicted"),
                       "analytics/never evicted", timeout=kueue.PODS_READY_SECONDS + SETTLE_SECONDS)
    assert evicted["reason"] == "PodsReadyTimeout"
    assert settles_at(cluster, "analytics", {"total": 0, "borrowed": 0})


# --- a tenant trying to run GPUs Kueue does not count --------------------------------------------------------------

QUIET_SECONDS = 20  # how long a job that must not start is watched


def ceiling(applied: Applied, tenant: str) -> dict[str, int]:
    """The hard limits of the tenant's GPU quota, as the API server enforces them (its status)."""
    quota = applied.admin.get("v1", "ResourceQuota", "gpu-quota", tenant)
    return {key.removeprefix("requests."): int(value) for key, value in quota["status"]["hard"].items()}


def test_every_tenant_is_capped_by_the_api_server_at_what_it_may_ever_hold(cluster: Applied) -> None:
    """Its guarantee plus what it may borrow, of every kind the fleet advertises; 0 of a kind it was not given."""
    config = cluster.stack.config
    kinds = {GPU, *(kind for pool in config.node_pools for kind in pool.advertised_per_node)}
    shares = guarantees(config)
    lendable = borrowable(config, shares)
    for tenant in cluster.stack.tenants():
        expected = {kind: sum(pool.get(kind, 0) for pool in shares[tenant.name].values())
                    + lendable[tenant.name].get(kind, 0) for kind in kinds}
        assert ceiling(cluster, tenant.name) == expected, tenant.name
    assert ceiling(cluster, "search-ranking")[GPU] == 0 and ceiling(cluster, "search-ranking")[MIG] == 0


@pytest.mark.parametrize("tenant, name, gpus, resource, pool", [
    ("search-ranking", "whole", 4, GPU, POOL),  # given shares only
    ("search-ranking", "slices", 28, MIG, MIG_POOL),
    ("llm-training", "shares", 1, SHARED, SHARED_POOL),  # given whole GPUs and MIG slices, not shares
])
def test_a_tenant_runs_no_kind_it_was_not_given(cluster: Applied, tenant: str, name: str, gpus: int, resource: str,
                                                 pool: str) -> None:
    """Kueue skips what a ClusterQueue does not cover (IgnoreUndeclared): every queue covers every kind, at 0 where
    not given, so the job waits and no pod of it runs."""
    submit(cluster, tenant, gpu_job(name, gpus, resource=resource, pool=pool))
    wait_for(lambda: workload(cluster, tenant, name), f"{tenant}/{name} queued", timeout=SETTLE_SECONDS)
    assert stays(lambda: not condition(workload(cluster, tenant, name), "QuotaReserved")
                 and not job_pods(cluster, tenant, name), QUIET_SECONDS)


def test_a_job_cannot_be_made_another_jobs_child_by_an_update(cluster: Applied) -> None:
    """Created with a plain owner reference to an admitted Job, then updated to make that Job its controller: Kueue
    would take it for the Job's child and leave it running when preempted. The update is refused."""
    submit(cluster, "analytics", gpu_job("parent", 1))
    admitted(cluster, "analytics", "parent")
    parent = cluster.admin.get("batch/v1", "Job", "parent", "analytics")
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "parent", "uid": parent["metadata"]["uid"]}
    child = gpu_job("child", 1)
    child["metadata"]["ownerReferences"] = [{**owner, "controller": False}]
    submit(cluster, "analytics", child)
    admitted(cluster, "analytics", "child")
    text = refusal(lambda: patch_job(cluster, "analytics", "child",
                                     {"metadata": {"ownerReferences": [{**owner, "controller": True}]}}))
    assert rule("variables.owners == variables.oldOwners") in text
    assert settles_at(cluster, "analytics", {"total": 2, "borrowed": 0})


@pytest.mark.parametrize("propagation", ["Orphan", None])
def test_a_queued_job_is_not_deleted_from_under_its_running_pods(cluster: Applied, propagation: str | None) -> None:
    """`kubectl delete job --cascade=orphan`, or a client's delete without options (batch/v1 orphans by default):
    Kueue would free the quota while the pods run on. Refused; deleted with its pods, the quota is freed."""
    submit(cluster, "analytics", gpu_job("own", 4))
    admitted(cluster, "analytics", "own")
    jobs = tenant_client(cluster, "analytics").resource("batch/v1", "Job")
    options = {"propagation_policy": propagation} if propagation else {}
    text = refusal(lambda: jobs.delete(name="own", namespace="analytics", **options))
    assert ORPHANING_DELETE[1] in text
    assert len(job_pods(cluster, "analytics", "own")) == 1
    assert settles_at(cluster, "analytics", {"total": 4, "borrowed": 0})
    jobs.delete(name="own", namespace="analytics", propagation_policy="Background")
    wait_for(lambda: not job_pods(cluster, "analytics", "own"), "analytics/own's pods gone", timeout=SETTLE_SECONDS)
    assert settles_at(cluster, "analytics", {"total": 0, "borrowed": 0})


@pytest.mark.parametrize("what, patch, part", [
    ("its owner reference", {"metadata": {"ownerReferences": None}}, "variables.owners == variables.oldOwners"),
    ("the labels its Job selects it by", {"metadata": {"labels": {label: None for label in JOB_POD_LABELS}}},
     "variables.guardedLabels"),
    ("the Job controller's finalizer", {"metadata": {"finalizers": None}}, JOB_TRACKING_FINALIZER),
])
def test_a_running_pod_cannot_be_detached_from_its_job(cluster: Applied, what: str, patch: dict[str, Any],
                                                       part: str) -> None:
    """Detached, the pod would keep its GPUs while its Job starts another that Kueue does not count."""
    submit(cluster, "analytics", gpu_job("held", 2))
    admitted(cluster, "analytics", "held")
    [held] = job_pods(cluster, "analytics", "held")
    pods = tenant_client(cluster, "analytics").resource("v1", "Pod")
    text = refusal(lambda: pods.patch(body=patch, name=held["metadata"]["name"], namespace="analytics",
                                      content_type="application/merge-patch+json"))
    assert rule(part) in text, what
    assert stays(lambda: len(job_pods(cluster, "analytics", "held")) == 1, QUIET_SECONDS / 2)
    assert settles_at(cluster, "analytics", {"total": 2, "borrowed": 0})


@pytest.mark.parametrize("what, change, part", [
    ("a prebuilt workload's name", {"labels": {"kueue.x-k8s.io/prebuilt-workload-name": "other"}},
     "variables.notes.all"),
    ("an elastic job", {"annotations": {"kueue.x-k8s.io/elastic-job": "true"}}, "variables.notes.all"),
    ("another manager", {"spec": {"managedBy": "example.com/mine"}}, "object.spec.managedBy"),
    ("a selector of its own", {"spec": {"manualSelector": True, "selector": {"matchLabels": {"app": "x"}}},
                               "template": {"app": "x"}}, "object.spec.manualSelector"),
    ("a long grace period", {"template_spec": {"terminationGracePeriodSeconds": 3600}},
     "terminationGracePeriodSeconds"),
    ("a toleration of a cordon", {"template_spec": {"tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}},
     "node.kubernetes.io/unschedulable"),
])
def test_a_job_carries_nothing_kueue_would_trust_to_count_less(cluster: Applied, what: str, change: dict[str, Any],
                                                               part: str) -> None:
    """What Kueue v0.19.2 and the Job controller read from a Job besides its queue and priority, each refused."""
    job = gpu_job("tricky", 1)
    job["metadata"]["labels"].update(change.get("labels", {}))
    job["metadata"]["annotations"] = change.get("annotations", {})
    job["spec"].update(change.get("spec", {}))
    job["spec"]["template"]["spec"].update(change.get("template_spec", {}))
    if "template" in change:
        job["spec"]["template"]["metadata"] = {"labels": change["template"]}
    text = refusal(lambda: submit(cluster, "analytics", job))
    messages = [message for expression, message in (*QUEUE_VALIDATIONS, *CORDON_RULES) if part in expression]
    assert any(message in text for message in messages), (what, text)
    assert workload(cluster, "analytics", "tricky") is None
