"""Karpenter GPU pools, judged by the real Karpenter (v1.15.0, its core controllers built from sigs.k8s.io/karpenter,
e2e/karpenter.py) with the real API server and scheduler: what a tenant sees when its GPU pods wait for nodes.

Stand-ins, named where they are (e2e/karpenter.py): each pool's EC2NodeClass is swapped for a KWOKNodeClass in its
NodePool's nodeClassRef; the instance types Karpenter chooses from are generated from the project's catalog; a kwok
node's capacity is its first pods' requests, not the instance's size. Karpenter's Nodes are kwok's (Ready, pods
Running; Job pods run until deleted), so nothing runs in them. Where Karpenter disagrees with our reading of it, the
test follows Karpenter and says so.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import yaml
from kubernetes.dynamic.exceptions import NotFoundError

from components import labels
from e2e import karpenter, kueue
from e2e.cluster import KWOK_STAGES, ControlPlane
from e2e.conftest import Applied, apply_stack, prepare_cluster
from e2e.kube import Kube, wait_for
from e2e.stack import Stack, cpu_nodes
from e2e.test_kueue import condition, gpu_job, settles_at, submit, workload
from e2e.test_tenants import container, in_namespace, pod
from stacks.config import NodePoolConfig
from tests.conftest import ROOT

GPU = labels.GPU_RESOURCE
RUNNING = tuple(stage for stage in KWOK_STAGES if stage != "pod/fast/pod-complete.yaml")
SETTLE_SECONDS = 120  # Karpenter batches pending pods (1 s idle, 10 s at most), then a node registers in seconds
QUIET_SECONDS = 30  # how long a pod that must not get a node is watched
DRIFT_SECONDS = 300
NVIDIADRIVER = ("nvidia.com/v1alpha1", "NVIDIADriver")
NODEPOOL = (karpenter.NODEPOOL_API, "NodePool")
NODECLAIM = (karpenter.NODECLAIM_API, "NodeClaim")


# --- NodePools ---------------------------------------------------------------------------------------------------

def interim_nodepool(stack: Stack, pool: NodePoolConfig, budget: str = "1") -> dict[str, Any]:
    """A NodePool of the shape the stack's `karpenter` placement renders (until the stack renders them): the labels and
    taints the pool's nodes register with, the kernel its image boots as a template label, its instance type, a
    limit of its GPUs at its largest size, a drift budget, and an EC2NodeClass named after it."""
    node_labels, taints = stack._registration(pool)  # noqa: SLF001 (the one reader of what a pool's nodes carry)
    node_labels = {**node_labels, labels.KERNEL_LABEL: stack.config.kernel_target(pool).kernel}
    size = pool.max_replicas or pool.replicas
    return {
        "apiVersion": karpenter.NODEPOOL_API, "kind": "NodePool", "metadata": {"name": pool.name},
        "spec": {
            "template": {
                "metadata": {"labels": node_labels},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                    "taints": taints,
                    "requirements": [
                        {"key": karpenter.INSTANCE_TYPE_LABEL, "operator": "In", "values": [pool.instance_type]},
                        {"key": karpenter.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]}],
                    "expireAfter": "Never"}},
            "limits": {resource: str(count * size) for resource, count in pool.advertised_per_node.items()},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s",
                           "budgets": [{"nodes": budget}]}}}


def nodepools(stack: Stack) -> dict[str, dict[str, Any]]:
    """Each pool's NodePool as applied here: the EC2NodeClass reference swapped for the stand-in KWOKNodeClass."""
    return {pool.name: karpenter.with_stand_in_node_class(interim_nodepool(stack, pool))
            for pool in stack.config.node_pools}


# --- the cluster -------------------------------------------------------------------------------------------------

@dataclass
class Karpentered:
    """A stack applied to its own control plane with no GPU node: its pools are Karpenter's NodePools."""

    applied: Applied
    nodepools: dict[str, dict[str, Any]]
    process: Any = None

    @property
    def admin(self) -> Kube:
        return self.applied.admin

    @property
    def stack(self) -> Stack:
        return self.applied.stack

    def tenant(self, name: str) -> Kube:
        [tenant] = [tenant for tenant in self.stack.tenants() if tenant.name == name]
        return self.applied.user(f"{name}-member", tenant.rbac_group)

    def pool_nodes(self, pool: str) -> list[dict[str, Any]]:
        return [node for node in self.admin.list("v1", "Node")
                if node["metadata"].get("labels", {}).get(karpenter.NODEPOOL_LABEL) == pool]

    def claims(self, pool: str) -> list[dict[str, Any]]:
        return [claim for claim in self.admin.list(*NODECLAIM)
                if claim["metadata"].get("labels", {}).get(karpenter.NODEPOOL_LABEL) == pool]


def karpenter_cluster(stack: Stack, plane: ControlPlane, *, with_kueue: bool = False) -> Karpentered:
    """The stack applied with only CPU nodes, its pools' NodePools and stand-in node classes, and Karpenter running
    (and Kueue first, for a queue-mode stack)."""
    admin = prepare_cluster(stack, plane, nodes=cpu_nodes())
    if with_kueue:
        kueue.start(plane, admin, pods_ready_seconds=None)  # the configured 5 minutes: pods wait for nodes
    applied = Applied(stack, plane, admin)
    apply_stack(applied)
    assert applied.rejected == {}
    for tenant in stack.tenants():
        wait_for(lambda: admin.get("v1", "ServiceAccount", "default", tenant.name), f"{tenant.name}/default", 30)
    for obj in [obj for obj in stack.objects() if obj["kind"] == "ResourceQuota"]:
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        wait_for(lambda: (admin.get("v1", "ResourceQuota", name, namespace) or {}).get("status", {}).get("hard"),
                 f"quota {namespace}/{name} enforced", timeout=60)
    pools = nodepools(stack)
    types = karpenter.instance_types({pool.instance_type: pool.partitioning for pool in stack.config.node_pools})
    process = karpenter.start(plane, admin, types)
    for name, nodepool in pools.items():
        admin.apply(karpenter.node_class(nodepool["spec"]["template"]["spec"]["nodeClassRef"]["name"]))
        admin.apply(nodepool)
        wait_for(lambda: condition(admin.get(*NODEPOOL, name), "Ready"), f"NodePool {name} Ready", SETTLE_SECONDS)
    return Karpentered(applied, pools, process)


@pytest.fixture(scope="module")
def quota_mode(tools, tmp_path_factory) -> Iterator[Karpentered]:
    """staging (tenancy mode quota), its pools as NodePools."""
    stack = Stack.render("staging")
    with ControlPlane.start(tmp_path_factory.mktemp("cluster-karpenter"), stages=RUNNING) as plane:
        cluster = karpenter_cluster(stack, plane)
        yield cluster
        for client in [cluster.admin, *cluster.applied.users.values()]:
            client.close()


@pytest.fixture
def cluster(quota_mode: Karpentered) -> Iterator[Karpentered]:
    """The cluster, every tenant workload and every Karpenter node removed after the test."""
    yield quota_mode
    clean(quota_mode)


def clean(cluster: Karpentered) -> None:
    admin = cluster.admin
    for tenant in cluster.stack.tenants():
        for api_version, kind in (("batch/v1", "Job"), ("apps/v1", "Deployment"), ("v1", "Pod")):
            for obj in admin.list(api_version, kind, tenant.name):
                try:
                    admin.delete(api_version, kind, obj["metadata"]["name"], tenant.name)
                except NotFoundError:
                    pass
        wait_for(lambda: not admin.list("v1", "Pod", tenant.name), f"pods of {tenant.name} gone", SETTLE_SECONDS)
    for claim in admin.list(*NODECLAIM):
        try:
            admin.delete(*NODECLAIM, claim["metadata"]["name"])
        except NotFoundError:
            pass
    wait_for(lambda: not admin.list(*NODECLAIM) and not [
        node for node in admin.list("v1", "Node") if karpenter.NODEPOOL_LABEL in node["metadata"].get("labels", {})],
        "Karpenter's nodes gone", SETTLE_SECONDS)


# --- helpers -----------------------------------------------------------------------------------------------------

def running_on(cluster: Karpentered, namespace: str, name: str) -> dict[str, Any]:
    """Wait until the pod runs; the Node it runs on."""
    def probe() -> dict[str, Any] | None:
        found = cluster.admin.get("v1", "Pod", name, namespace)
        return found if found and found["status"].get("phase") == "Running" else None
    found = wait_for(probe, f"pod {namespace}/{name} Running", SETTLE_SECONDS)
    return cluster.admin.get("v1", "Node", found["spec"]["nodeName"])


def pod_events(cluster: Karpentered, namespace: str, name: str) -> list[str]:
    return [event.get("message", "") for event in cluster.admin.list("v1", "Event", namespace)
            if event["involvedObject"].get("name") == name]


def stays(probe: Callable[[], bool], seconds: float, interval: float = 1.0) -> bool:
    """Whether `probe` holds at every look for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not probe():
            return False
        time.sleep(interval)
    return True


def gpu_pod(name: str, pool: str, gpus: int, resource: str = GPU) -> dict[str, Any]:
    return pod(name, gpus=gpus, pool={labels.POOL_LABEL: pool}, resource=resource)


def created(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


# --- tests -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pool", "gpus"), [("l4-inference", 1), ("a10g-batch", 2)])
def test_a_tenants_pending_gpu_pod_gets_a_node_of_its_pool_and_instance_type(cluster: Karpentered, pool: str,
                                                                            gpus: int) -> None:
    """No GPU node exists; the tenant's pod asks GPUs of one pool; Karpenter launches a node of that pool, of the
    pool's instance type, registered with the pool's labels, taints and kernel, and the scheduler binds the pod."""
    config = next(candidate for candidate in cluster.stack.config.node_pools if candidate.name == pool)
    assert not cluster.pool_nodes(pool)
    cluster.tenant("search-ranking").create(in_namespace(gpu_pod("train", pool, gpus), "search-ranking"))
    node = running_on(cluster, "search-ranking", "train")
    node_labels = node["metadata"]["labels"]
    assert node_labels[karpenter.NODEPOOL_LABEL] == pool
    assert node_labels[labels.POOL_LABEL] == pool
    assert node_labels[karpenter.INSTANCE_TYPE_LABEL] == config.instance_type
    assert node_labels[labels.KERNEL_LABEL] == config.kernel
    assert labels.GPU_TAINT in [{"key": t["key"], "effect": t["effect"]} for t in node["spec"].get("taints") or []]
    # Stand-in capacity (kwok provider's toNode): the node's GPUs are what the pod asked, not the instance's.
    assert node["status"]["capacity"][GPU] == str(gpus)
    assert len(cluster.claims(pool)) == 1


def test_a_pod_without_gpus_never_gets_a_gpu_node(cluster: Karpentered) -> None:
    """A tenant's CPU pod too big for the CPU nodes, and one that selects a GPU pool's label: Karpenter launches no
    node for either (every NodePool is GPU-tainted and neither pod tolerates it); both stay pending."""
    tenant = cluster.tenant("analytics")
    big = pod("big-cpu")
    big["spec"]["containers"] = [container(resources={"requests": {"cpu": "40"}, "limits": {"cpu": "40"}})]  # nodes: 32
    tenant.create(in_namespace(big, "analytics"))
    tenant.create(in_namespace(pod("on-gpu-pool", pool={labels.POOL_LABEL: "l4-inference"}), "analytics"))
    assert stays(lambda: not cluster.admin.list(*NODECLAIM) and all(
        cluster.admin.get("v1", "Pod", name, "analytics")["status"].get("phase") == "Pending"
        for name in ("big-cpu", "on-gpu-pool")), QUIET_SECONDS)
    # Karpenter says why, on the pod: no NodePool's taints are tolerated.
    messages = wait_for(lambda: [m for m in pod_events(cluster, "analytics", "on-gpu-pool") if "taint" in m],
                        "Karpenter's scheduling event", SETTLE_SECONDS)
    assert any(GPU in m for m in messages), messages


def test_the_nodepools_gpu_limit_stops_scale_up(cluster: Karpentered) -> None:
    """l4-inference: 1 GPU a node, at most 4 nodes, so a limit of 4 GPUs. Six one-GPU pods of three tenants: four
    get nodes, two stay pending, and Karpenter says the pool's limit is why."""
    pool = "l4-inference"
    limit = int(cluster.nodepools[pool]["spec"]["limits"][GPU])
    assert limit == 4
    names = []
    for tenant in ("search-ranking", "llm-training", "analytics"):
        for index in range(2):
            cluster.tenant(tenant).create(in_namespace(gpu_pod(f"infer-{index}", pool, 1), tenant))
            names.append((tenant, f"infer-{index}"))

    def phases() -> list[str]:
        return [cluster.admin.get("v1", "Pod", name, tenant)["status"].get("phase") for tenant, name in names]
    wait_for(lambda: phases().count("Running") == limit, f"{limit} pods running", SETTLE_SECONDS)
    assert stays(lambda: phases().count("Running") == limit and len(cluster.pool_nodes(pool)) == limit,
                 QUIET_SECONDS)
    status = cluster.admin.get(*NODEPOOL, pool)["status"]
    assert status["resources"][GPU] == str(limit)
    pending = [(tenant, name) for (tenant, name), phase in zip(names, phases()) if phase == "Pending"]
    assert len(pending) == 2
    tenant, name = pending[0]
    assert wait_for(lambda: [m for m in pod_events(cluster, tenant, name) if "exceed limits" in m],
                    "Karpenter's limit event", SETTLE_SECONDS)


# The AMI+kernel change of a pool, as a stack change makes it: a new image that boots a new kernel.
NEW_IMAGE, NEW_KERNEL = "ami-0a1b2c3d4e5f60718", "6.8.0-1024-aws"


def changed(stack: Stack, pool: str, **fields: Any) -> Stack:
    """The stack with `fields` of one pool changed, rendered as `pulumi up` would render it."""
    config = yaml.safe_load((ROOT / f"Pulumi.{stack.name}.yaml").read_text())["config"]
    for entry in config["gpu-platform:nodePools"]:
        if entry["name"] == pool:
            entry.update(fields)
    return Stack.from_config(stack.name, copy.deepcopy(config))


class Roll:
    """Watches a pool while Karpenter rolls it: at each look, how many of its nodes are being disrupted (tainted
    karpenter.sh/disrupted or deleting), how many there are, and for each node on `kernel` whether the NVIDIADriver
    `driver` existed when the node was first seen."""

    def __init__(self, cluster: Karpentered, pool: str, kernel: str, driver: str):
        self.kube = Kube(cluster.applied.plane.kubeconfig)
        self.pool, self.kernel, self.driver = pool, kernel, driver
        self.most_disrupted = self.most_nodes = 0
        self.driver_first: dict[str, bool] = {}

    def look(self) -> list[dict[str, Any]]:
        nodes = [node for node in self.kube.list("v1", "Node")
                 if node["metadata"].get("labels", {}).get(karpenter.NODEPOOL_LABEL) == self.pool]
        disrupted = [node for node in nodes if node["metadata"].get("deletionTimestamp") or any(
            taint["key"] == karpenter.DISRUPTED_TAINT for taint in node["spec"].get("taints") or [])]
        self.most_disrupted = max(self.most_disrupted, len(disrupted))
        self.most_nodes = max(self.most_nodes, len(nodes))
        for node in nodes:
            name = node["metadata"]["name"]
            if node["metadata"]["labels"].get(labels.KERNEL_LABEL) == self.kernel and name not in self.driver_first:
                self.driver_first[name] = self.kube.get(*NVIDIADRIVER, self.driver) is not None
        return nodes


def test_an_ami_and_kernel_change_drifts_the_nodes_after_the_new_kernels_driver_within_the_budget(
        cluster: Karpentered) -> None:
    """A tenant's service runs on two l4-inference nodes. The pool's image and kernel change: the new kernel's
    NVIDIADriver is applied first (the stack's order), then the NodePool's template (the kernel label) changes;
    Karpenter marks the nodes drifted and replaces them one at a time (budget nodes: 1), each replacement on the new
    kernel, none before its driver exists, and the service's pods end on the new nodes."""
    pool = "l4-inference"
    tenant = "search-ranking"
    replicas = 2
    service = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ranker", "namespace": tenant},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "ranker"}}, "template": {
                   "metadata": {"labels": {"app": "ranker"}}, "spec": gpu_pod("ranker", pool, 1)["spec"]}}}
    cluster.tenant(tenant).create(service)

    def serving_on() -> set[str]:
        return {found["spec"]["nodeName"] for found in cluster.admin.list("v1", "Pod", tenant)
                if found["status"].get("phase") == "Running" and not found["metadata"].get("deletionTimestamp")}
    old_nodes = wait_for(lambda: len(serving_on()) == replicas and serving_on(), "the service on 2 nodes",
                         SETTLE_SECONDS)
    new = changed(cluster.stack, pool, image=NEW_IMAGE, kernel=NEW_KERNEL)
    [driver] = [obj for obj in new.objects() if obj["kind"] == "NVIDIADriver"
                and obj["spec"]["nodeSelector"].get(labels.KERNEL_LABEL) == NEW_KERNEL]
    driver_name = driver["metadata"]["name"]
    assert cluster.admin.get(*NVIDIADRIVER, driver_name) is None
    roll = Roll(cluster, pool, NEW_KERNEL, driver_name)
    roll.look()
    # `pulumi up` of the change, in the engine's order: the stack's objects (the new driver among them), then the
    # pool's NodePool (interim: built here until the stack renders it, after the driver as the stack orders it).
    applied = Applied(new, cluster.applied.plane, cluster.admin)
    apply_stack(applied)
    assert applied.rejected == {}
    nodepool = karpenter.with_stand_in_node_class(interim_nodepool(new, next(
        candidate for candidate in new.config.node_pools if candidate.name == pool)))
    cluster.admin.apply(nodepool)
    try:
        def rolled() -> bool:
            nodes = roll.look()
            return (not {node["metadata"]["name"] for node in nodes} & old_nodes
                    and len(serving_on()) == replicas and serving_on() <= {
                        node["metadata"]["name"] for node in nodes
                        if node["metadata"]["labels"].get(labels.KERNEL_LABEL) == NEW_KERNEL})
        wait_for(rolled, "every node of the pool replaced by one on the new kernel", DRIFT_SECONDS, interval=0.5)
    finally:
        roll.kube.close()
    assert roll.driver_first and all(roll.driver_first.values()), roll.driver_first
    assert roll.most_disrupted <= 1  # the budget: one node disrupted at a time
    assert roll.most_nodes <= replicas + 1  # one replacement ahead of the node it replaces
    assert created(cluster.admin.get(*NVIDIADRIVER, driver_name)) <= min(
        created(node) for node in cluster.pool_nodes(pool))


# --- queue mode --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def queue_mode(tools, tmp_path_factory) -> Iterator[Karpentered]:
    """examples/Pulumi.queue.yaml (tenancy mode queue, Kueue running), its pools as NodePools."""
    example = yaml.safe_load((ROOT / "examples" / "Pulumi.queue.yaml").read_text())["config"]
    stack = Stack.from_config("queue", example)
    with ControlPlane.start(tmp_path_factory.mktemp("cluster-karpenter-queue"), stages=RUNNING) as plane:
        cluster = karpenter_cluster(stack, plane, with_kueue=True)
        yield cluster
        for client in [cluster.admin, *cluster.applied.users.values()]:
            client.close()


def test_a_queued_job_borrows_capacity_that_karpenter_then_provisions(queue_mode: Karpentered) -> None:
    """No GPU node exists. analytics (4 GPUs guaranteed on a10g-batch) runs a 4-GPU job and a 2-GPU one: Kueue admits
    the second on 2 GPUs borrowed from llm-training's idle share, and Karpenter launches the nodes both jobs' pods
    need, of a10g-batch's instance type."""
    cluster = queue_mode
    pool = "a10g-batch"
    try:
        submit(cluster.applied, "analytics", gpu_job("own", 4, pool=pool))
        submit(cluster.applied, "analytics", gpu_job("borrowed", 2, pool=pool))
        for job in ("own", "borrowed"):
            wait_for(lambda: condition(workload(cluster.applied, "analytics", job), "Admitted"),
                     f"analytics/{job} admitted", SETTLE_SECONDS)
        assert settles_at(cluster.applied, "analytics", {"total": 6, "borrowed": 2}, pool=pool)

        def job_nodes() -> dict[str, dict[str, Any]] | None:
            pods = [found for found in cluster.admin.list("v1", "Pod", "analytics")
                    if found["status"].get("phase") == "Running"]
            if len(pods) != 2:
                return None
            return {found["metadata"]["labels"]["job-name"]: cluster.admin.get("v1", "Node", found["spec"]["nodeName"])
                    for found in pods}
        nodes = wait_for(job_nodes, "both jobs' pods running", SETTLE_SECONDS)
        for node in nodes.values():
            assert node["metadata"]["labels"][karpenter.NODEPOOL_LABEL] == pool
            assert node["metadata"]["labels"][karpenter.INSTANCE_TYPE_LABEL] == "g5.12xlarge"
        assert len({node["metadata"]["name"] for node in nodes.values()}) == 2  # 6 GPUs: two 4-GPU machines
        assert condition(workload(cluster.applied, "analytics", "borrowed"), "Admitted")
    finally:
        clean(cluster)
