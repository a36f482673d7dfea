"""Karpenter GPU pools, judged by the real Karpenter (v1.15.0, its core controllers built from sigs.k8s.io/karpenter,
e2e/karpenter.py) with the real API server and scheduler: what a tenant sees when its GPU pods wait for nodes.

Stand-ins, named where they are (e2e/karpenter.py): each pool's EC2NodeClass is swapped for a KWOKNodeClass in its
NodePool's nodeClassRef; the instance types Karpenter chooses from are generated from the project's catalog; a kwok
node's capacity is its first pods' requests, not the instance's size. Karpenter's Nodes are kwok's (Ready, pods
Running; Job pods run until deleted), so nothing runs in them. Where Karpenter disagrees with our reading of it, the
test follows Karpenter and says so; so far it has not (the limit test says why the example's tenants cannot pass a
pool's GPU limit with whole nodes, and what Karpenter counts instead).
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
from components.admission import SPREAD_RULES
from e2e import karpenter, kueue
from e2e.cluster import KWOK_STAGES, ControlPlane
from e2e.conftest import Applied, apply_stack, object_key, prepare_cluster
from e2e.kube import Kube, refusal, stays, wait_for
from e2e.stack import Stack
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


# --- the cluster -------------------------------------------------------------------------------------------------

EXAMPLE = ROOT / "examples" / "Pulumi.karpenter.yaml"


def example_config() -> dict[str, Any]:
    """examples/Pulumi.karpenter.yaml's `config:` (staging on Karpenter: a10g-training, 4 x g5.12xlarge at most,
    on-demand in two zones; l4-search, 4 x g6.xlarge at most, on-demand or spot, dedicated to search-ranking)."""
    return yaml.safe_load(EXAMPLE.read_text())["config"]


@dataclass
class Karpentered:
    """A stack whose GPU pools are all Karpenter's, applied to its own control plane with only CPU nodes, its NodePools
    on the stand-in node class, Karpenter running."""

    applied: Applied

    @property
    def admin(self) -> Kube:
        return self.applied.admin

    @property
    def stack(self) -> Stack:
        return self.applied.stack

    def pool(self, name: str) -> NodePoolConfig:
        return next(pool for pool in self.stack.config.node_pools if pool.name == name)

    def nodepool(self, name: str) -> dict[str, Any]:
        return self.admin.get(*NODEPOOL, name)

    def tenant(self, name: str) -> Kube:
        [tenant] = [tenant for tenant in self.stack.tenants() if tenant.name == name]
        return self.applied.user(f"{name}-member", tenant.rbac_group)

    def pool_nodes(self, pool: str) -> list[dict[str, Any]]:
        return [node for node in self.admin.list("v1", "Node")
                if node["metadata"].get("labels", {}).get(karpenter.NODEPOOL_LABEL) == pool]


def karpenter_cluster(stack: Stack, plane: ControlPlane, *, with_kueue: bool = False) -> Karpentered:
    """The cluster before the stack (Karpenter running, as the cluster's, and Kueue for a queue-mode stack), the
    stand-in node classes, then the stack applied in the engine's order with its NodePools on them."""
    admin = prepare_cluster(stack, plane)  # CPU nodes only: Karpenter launches every GPU node
    assert stack.config.karpenter_pools == stack.config.node_pools
    if with_kueue:
        kueue.start(plane, admin, pods_ready_seconds=None)  # the configured 5 minutes: pods wait for nodes
    nodepools = [obj for obj in stack.objects() if obj["kind"] == "NodePool"]
    karpenter.start(plane, admin, karpenter.instance_types(
        {pool.instance_type: pool.partitioning for pool in stack.config.node_pools}, karpenter.zones(nodepools)))
    for nodepool in nodepools:
        admin.apply(karpenter.node_class(nodepool["spec"]["template"]["spec"]["nodeClassRef"]["name"]))
    applied = Applied(stack, plane, admin)
    apply_stack(applied, stand_in=karpenter.stand_in)
    assert applied.rejected == {}
    for tenant in stack.tenants():
        wait_for(lambda: admin.get("v1", "ServiceAccount", "default", tenant.name), f"{tenant.name}/default", 30)
    for obj in [obj for obj in stack.objects() if obj["kind"] == "ResourceQuota"]:
        name, namespace = obj["metadata"]["name"], obj["metadata"]["namespace"]
        wait_for(lambda: (admin.get("v1", "ResourceQuota", name, namespace) or {}).get("status", {}).get("hard"),
                 f"quota {namespace}/{name} enforced", timeout=60)
    for nodepool in nodepools:
        name = nodepool["metadata"]["name"]
        wait_for(lambda: condition(admin.get(*NODEPOOL, name), "Ready"), f"NodePool {name} Ready", SETTLE_SECONDS)
    return Karpentered(applied)


@pytest.fixture(scope="module")
def quota_mode(tools, tmp_path_factory) -> Iterator[Karpentered]:
    """The example as it ships (tenancy mode quota)."""
    stack = Stack.from_config("karpenter", example_config())
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


def gpu_pod(cluster: Karpentered, name: str, pool: str, gpus: int) -> dict[str, Any]:
    """A tenant's pod asking `gpus` whole GPUs of `pool`, as its users write it: the pool's selector, the GPU
    toleration, and the pool's dedicated taint tolerated where the pool has one."""
    body = pod(name, gpus=gpus, pool=cluster.stack.pool_selector(pool))
    if cluster.pool(pool).dedicated_to:
        body["spec"]["tolerations"].append({"key": labels.DEDICATED_TAINT_KEY, "operator": "Equal", "value": pool,
                                            "effect": "NoSchedule"})
    return body


def service(cluster: Karpentered, tenant: str, name: str, pool: str, *, replicas: int, gpus: int,
            spread: bool = False) -> dict[str, Any]:
    """A tenant's Deployment of `replicas` pods of `gpus` GPUs each; `spread`: one pod a node (required pod
    anti-affinity on the hostname)."""
    spec = gpu_pod(cluster, name, pool, gpus)["spec"]
    if spread:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}]}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": tenant},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def serving_on(cluster: Karpentered, tenant: str, app: str) -> list[str]:
    """The nodes of the app's running pods (one entry a pod)."""
    return [found["spec"]["nodeName"] for found in cluster.admin.list("v1", "Pod", tenant)
            if found["metadata"].get("labels", {}).get("app") == app and found["status"].get("phase") == "Running"
            and not found["metadata"].get("deletionTimestamp")]


def selects(driver: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the NVIDIADriver's nodeSelector selects the node (the operator runs its driver there)."""
    return driver["spec"]["nodeSelector"].items() <= node["metadata"]["labels"].items()


def created(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


# --- tests -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pool", "tenant", "gpus"), [("a10g-training", "llm-training", 4),
                                                      ("l4-search", "search-ranking", 1)])
def test_a_tenants_pending_gpu_pod_gets_a_node_of_its_pool_and_instance_type(cluster: Karpentered, pool: str,
                                                                            tenant: str, gpus: int) -> None:
    """No GPU node exists; a tenant's pod asks GPUs of one pool; Karpenter launches a node of that pool's NodePool,
    of its instance type, capacity type and zones, registered with the pool's labels and taints and the kernel its
    image boots, which the kernel's NVIDIADriver selects; the scheduler binds the pod there."""
    config = cluster.pool(pool)
    assert not cluster.pool_nodes(pool)
    cluster.tenant(tenant).create(in_namespace(gpu_pod(cluster, "train", pool, gpus), tenant))
    node = running_on(cluster, tenant, "train")
    node_labels = node["metadata"]["labels"]
    assert node_labels[karpenter.NODEPOOL_LABEL] == pool
    assert cluster.stack.pool_selector(pool).items() <= node_labels.items()
    assert node_labels[karpenter.INSTANCE_TYPE_LABEL] == config.instance_type
    assert node_labels[karpenter.CAPACITY_TYPE_LABEL] in config.karpenter.capacity_types
    assert not config.karpenter.zones or node_labels[karpenter.ZONE_LABEL] in config.karpenter.zones
    assert node_labels[labels.KERNEL_LABEL] == config.kernel
    taints = [{key: value for key, value in taint.items() if key != "timeAdded"} for taint in node["spec"]["taints"]]
    assert labels.GPU_TAINT in taints
    assert (labels.dedicated_taint(pool) in taints) == bool(config.dedicated_to)
    [driver] = [obj for obj in cluster.stack.objects() if obj["kind"] == "NVIDIADriver" and selects(obj, node)]
    assert driver["spec"]["nodeSelector"][labels.KERNEL_LABEL] == config.kernel
    # Stand-in capacity (the kwok provider's toNode): the node's GPUs are what the pod asked, not the instance's.
    assert node["status"]["capacity"][GPU] == str(gpus)


def test_a_pod_without_gpus_never_gets_a_gpu_node(cluster: Karpentered) -> None:
    """A tenant's CPU pod too big for the CPU nodes, and one that selects a GPU pool's label: Karpenter launches no
    node for either (every NodePool is GPU-tainted and neither pod may tolerate that); both stay pending."""
    tenant = cluster.tenant("analytics")
    big = pod("big-cpu")
    big["spec"]["containers"] = [container(resources={"requests": {"cpu": "40"}, "limits": {"cpu": "40"}})]
    tenant.create(in_namespace(big, "analytics"))  # the CPU nodes have 32 CPUs each
    tenant.create(in_namespace(pod("on-gpu-pool", pool=cluster.stack.pool_selector("a10g-training")), "analytics"))
    assert stays(lambda: not cluster.admin.list(*NODECLAIM) and all(
        cluster.admin.get("v1", "Pod", name, "analytics")["status"].get("phase") == "Pending"
        for name in ("big-cpu", "on-gpu-pool")), QUIET_SECONDS)
    # Karpenter says why, on the pod: the NodePools' GPU taint is not tolerated.
    messages = wait_for(lambda: [m for m in pod_events(cluster, "analytics", "on-gpu-pool") if "taint" in m],
                        "Karpenter's scheduling event", SETTLE_SECONDS)
    assert any(GPU in m for m in messages), messages


def test_a_tenant_cannot_spread_gpu_pods_to_make_karpenter_launch_the_pools_limit(cluster: Karpentered) -> None:
    """The attack: llm-training spreads 5 one-GPU replicas one a node (required pod anti-affinity on the hostname),
    within its quota of 8, so that Karpenter launches a10g-training's 4 nodes for 4 GPUs and another tenant's 4-GPU
    job finds no node. Its pods are refused by the tenant pod policy (the Deployment's ReplicaSet reports each
    refusal), a bare pod spread by topology is refused too, and Karpenter launches nothing for them."""
    tenant = cluster.tenant("llm-training")
    tenant.create(service(cluster, "llm-training", "spread", "a10g-training", replicas=5, gpus=1, spread=True))
    [anti_affinity, topology] = [text for rule, text in SPREAD_RULES]
    wait_for(lambda: [event for event in cluster.admin.list("v1", "Event", "llm-training")
                      if event["reason"] == "FailedCreate" and anti_affinity in event.get("message", "")],
             "the spread replicas refused", SETTLE_SECONDS)
    spread = gpu_pod(cluster, "spread-by-zone", "a10g-training", 1)
    spread["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                    "whenUnsatisfiable": "ScheduleAnyway",
                                                    "labelSelector": {"matchLabels": {"app": "spread"}}}]
    assert topology in refusal(lambda: tenant.create(in_namespace(spread, "llm-training")))
    assert stays(lambda: not cluster.admin.list("v1", "Pod", "llm-training") and not cluster.admin.list(*NODECLAIM),
                 QUIET_SECONDS)


def test_the_nodepools_limits_stop_scale_up(cluster: Karpentered) -> None:
    """a10g-training may grow to 4 nodes (limits: nodes 4, nvidia.com/gpu 16). Three tenants run four 3-GPU jobs
    within their quotas, no two of which fit one node: Karpenter launches 4 nodes; llm-training's 2-GPU job then
    needs a fifth, stays pending, and Karpenter says the pool's limits are why."""
    pool = "a10g-training"
    assert cluster.nodepool(pool)["spec"]["limits"] == {"nodes": "4", GPU: "16"}
    bigs = (("llm-training", "big-0"), ("llm-training", "big-1"), ("analytics", "big-2"), ("search-ranking", "big-3"))
    for tenant, name in bigs:
        cluster.tenant(tenant).create(in_namespace(gpu_pod(cluster, name, pool, 3), tenant))
    # Each on a node of its own before the next job comes: a node launched for one may otherwise take another.
    wait_for(lambda: len(cluster.pool_nodes(pool)) == 4 and all(
        (found := cluster.admin.get("v1", "Pod", name, tenant)) and found["status"].get("phase") == "Running"
        for tenant, name in bigs), "4 nodes launched, a job running on each", SETTLE_SECONDS)
    cluster.tenant("llm-training").create(in_namespace(gpu_pod(cluster, "small", pool, 2), "llm-training"))
    assert stays(lambda: len(cluster.pool_nodes(pool)) == 4 and cluster.admin.get(
        "v1", "Pod", "small", "llm-training")["status"].get("phase") == "Pending", QUIET_SECONDS)
    assert cluster.nodepool(pool)["status"]["resources"]["nodes"] == "4"
    messages = wait_for(lambda: [m for m in pod_events(cluster, "llm-training", "small") if "limit" in m],
                        "Karpenter's limit event", SETTLE_SECONDS)
    assert any(pool in m for m in messages), messages


# The AMI+kernel change of a pool, as a stack change makes it: a new image that boots a new kernel.
NEW_IMAGE, NEW_KERNEL = "ami-0a1b2c3d4e5f60718", "6.8.0-1024-aws"


def changed(config: dict[str, Any], pool: str, **fields: Any) -> Stack:
    """The example with `fields` of one pool changed, rendered as `pulumi up` would render it."""
    config = copy.deepcopy(config)
    for entry in config["gpu-platform:nodePools"]:
        if entry["name"] == pool:
            entry.update(fields)
    return Stack.from_config("karpenter", config)


class Roll:
    """Watches a pool while Karpenter rolls it: at each look, how many of its nodes are being disrupted (tainted
    karpenter.sh/disrupted or deleting) and how many there are, and for each node the NVIDIADriver `driver` selects,
    whether that driver existed when the node was first seen."""

    def __init__(self, cluster: Karpentered, pool: str, driver: dict[str, Any]):
        self.kube = Kube(cluster.applied.plane.kubeconfig)
        self.pool, self.driver = pool, driver
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
            if selects(self.driver, node) and name not in self.driver_first:
                self.driver_first[name] = self.kube.get(*NVIDIADRIVER, self.driver["metadata"]["name"]) is not None
        return nodes


@pytest.fixture
def restored(cluster: Karpentered) -> Iterator[Karpentered]:
    """The cluster, with the example as it ships applied again after the test (and the drivers it added removed)."""
    yield cluster
    clean(cluster)
    shipped = {obj["metadata"]["name"] for obj in cluster.stack.objects() if obj["kind"] == "NVIDIADriver"}
    apply_stack(cluster.applied, stand_in=karpenter.stand_in)
    for driver in cluster.admin.list(*NVIDIADRIVER):
        if driver["metadata"]["name"] not in shipped:
            cluster.admin.delete(*NVIDIADRIVER, driver["metadata"]["name"])


def test_an_ami_and_kernel_change_drifts_the_nodes_after_the_new_kernels_driver_within_the_budget(
        restored: Karpentered) -> None:
    """llm-training serves on two a10g-training nodes. The pool's image and kernel change and the stack is applied
    in the engine's order: the new kernel's NVIDIADriver, then the EC2NodeClass and the NodePool (whose template
    carries the kernel). Karpenter marks the nodes drifted and replaces them one at a time (the pool's budget,
    nodes: 1), each replacement on the new kernel, none seen before its driver exists, and the service ends on the
    new nodes. (The stand-in node class never drifts: the NodePool's kernel label does, as the AMI does on EC2.)
    The stored driver's creation time cannot tell a driver applied milliseconds after the NodePool, so the change is
    applied with a pause after the NodePool until Karpenter acts on it."""
    cluster, pool, replicas = restored, "a10g-training", 2
    assert cluster.nodepool(pool)["spec"]["disruption"]["budgets"] == [{"nodes": "1"}]
    cluster.tenant("llm-training").create(service(cluster, "llm-training", "ranker", pool, replicas=replicas, gpus=4))
    old_nodes = set(wait_for(lambda: len(set(serving_on(cluster, "llm-training", "ranker"))) == replicas
                             and serving_on(cluster, "llm-training", "ranker"), "the service on 2 nodes",
                             SETTLE_SECONDS))
    new = changed(example_config(), pool, image=NEW_IMAGE, kernel=NEW_KERNEL)
    [driver] = [obj for obj in new.objects() if obj["kind"] == "NVIDIADriver"
                and obj["spec"]["nodeSelector"].get(labels.KERNEL_LABEL) == NEW_KERNEL]
    assert cluster.admin.get(*NVIDIADRIVER, driver["metadata"]["name"]) is None
    roll = Roll(cluster, pool, driver)
    try:
        roll.look()
        # `pulumi up` of the change, in the engine's order; the rest of the change is held back once the pool's
        # NodePool is applied, until Karpenter has launched its first replacement: had the stack ordered the driver
        # after the NodePool, that node would come up without it.
        for obj in new.objects():
            cluster.admin.apply(karpenter.stand_in(obj))
            if object_key(obj) == f"NodePool/{pool}":
                wait_for(lambda: [node for node in roll.look() if selects(driver, node)],
                         "Karpenter's first replacement node", DRIFT_SECONDS, interval=0.5)

        def rolled() -> bool:
            nodes = {node["metadata"]["name"]: node for node in roll.look()}
            serving = serving_on(cluster, "llm-training", "ranker")
            return (not set(nodes) & old_nodes and len(serving) == replicas
                    and all(name in nodes and selects(driver, nodes[name]) for name in serving))
        wait_for(rolled, "every node of the pool replaced by one on the new kernel", DRIFT_SECONDS, interval=0.5)
    finally:
        roll.kube.close()
    assert len(roll.driver_first) >= replicas and all(roll.driver_first.values()), roll.driver_first
    assert roll.most_disrupted <= 1  # the budget: one node disrupted at a time
    assert roll.most_nodes <= replicas + 1  # one replacement ahead of the node it replaces
    stored = cluster.admin.get(*NVIDIADRIVER, driver["metadata"]["name"])
    assert all(created(stored) <= created(node) for node in cluster.pool_nodes(pool))


def test_a_running_job_annotated_do_not_disrupt_holds_its_drifted_node_until_it_ends(restored: Karpentered) -> None:
    """What the preview's roll line promises: a pod annotated karpenter.sh/do-not-disrupt: "true" holds its node
    against drift. llm-training's training pod runs on an a10g-training node; the pool's image and kernel change;
    Karpenter marks the node drifted but leaves it (and the pod) alone while the pod runs; once the pod ends, the
    node goes."""
    cluster, pool = restored, "a10g-training"
    body = gpu_pod(cluster, "train", pool, 4)
    body["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    cluster.tenant("llm-training").create(in_namespace(body, "llm-training"))
    node = running_on(cluster, "llm-training", "train")["metadata"]["name"]
    apply_stack(Applied(changed(example_config(), pool, image=NEW_IMAGE, kernel=NEW_KERNEL), cluster.applied.plane,
                        cluster.admin), stand_in=karpenter.stand_in)
    [claim] = [claim for claim in cluster.admin.list(*NODECLAIM) if claim["status"].get("nodeName") == node]
    wait_for(lambda: condition(cluster.admin.get(*NODECLAIM, claim["metadata"]["name"]), "Drifted"),
             "the node's NodeClaim drifted", SETTLE_SECONDS)
    assert stays(lambda: (found := cluster.admin.get("v1", "Node", node)) is not None
                 and not found["metadata"].get("deletionTimestamp")
                 and cluster.admin.get("v1", "Pod", "train", "llm-training")["status"].get("phase") == "Running",
                 QUIET_SECONDS)
    # Karpenter says why, on the node: disruption blocked by the pod's annotation.
    assert wait_for(lambda: [event for event in cluster.admin.list("v1", "Event")
                             if event["involvedObject"].get("name") == node
                             and event.get("reason") == "DisruptionBlocked"
                             and "karpenter.sh/do-not-disrupt" in event.get("message", "")],
                    "Karpenter's DisruptionBlocked event", SETTLE_SECONDS)
    cluster.admin.delete("v1", "Pod", "train", "llm-training")  # the job ends
    wait_for(lambda: cluster.admin.get("v1", "Node", node) is None, "the drifted node gone", DRIFT_SECONDS)


# --- queue mode --------------------------------------------------------------------------------------------------

def queue_mode_config() -> dict[str, Any]:
    """The example in tenancy mode queue: llm-training guaranteed its 8 GPUs on a10g-training and lending at most 4
    of them while idle, analytics 4 there, search-ranking its 4 on l4-search."""
    config = example_config()
    config["gpu-platform:tenancy"] = {"mode": "queue", "cohort": "gpu-tenants"}
    queues = {"search-ranking": {"pools": ["l4-search"]}, "analytics": {"pools": ["a10g-training"]},
              "llm-training": {"pools": ["a10g-training"], "lendingLimit": 4}}
    for tenant in config["gpu-platform:tenants"]:
        tenant["queue"] = queues[tenant["name"]]
    return config


@pytest.fixture(scope="module")
def queue_mode(tools, tmp_path_factory) -> Iterator[Karpentered]:
    """The example in queue mode, Kueue running."""
    stack = Stack.from_config("karpenter-queue", queue_mode_config())
    with ControlPlane.start(tmp_path_factory.mktemp("cluster-karpenter-queue"), stages=RUNNING) as plane:
        cluster = karpenter_cluster(stack, plane, with_kueue=True)
        yield cluster
        for client in [cluster.admin, *cluster.applied.users.values()]:
            client.close()


def test_a_queued_job_borrows_capacity_that_karpenter_then_provisions(queue_mode: Karpentered) -> None:
    """No GPU node exists. analytics (4 GPUs guaranteed on a10g-training) runs a 4-GPU job and another: Kueue admits
    the second on 4 GPUs borrowed from llm-training's idle ones, and Karpenter launches a node of a10g-training for
    each job's pod."""
    cluster, pool = queue_mode, "a10g-training"
    try:
        submit(cluster.applied, "analytics", gpu_job("own", 4, pool=pool))
        submit(cluster.applied, "analytics", gpu_job("borrowed", 4, pool=pool))
        for job in ("own", "borrowed"):
            wait_for(lambda: condition(workload(cluster.applied, "analytics", job), "Admitted"),
                     f"analytics/{job} admitted", SETTLE_SECONDS)
        assert settles_at(cluster.applied, "analytics", {"total": 8, "borrowed": 4}, pool=pool)

        def job_nodes() -> dict[str, dict[str, Any]] | None:
            pods = [found for found in cluster.admin.list("v1", "Pod", "analytics")
                    if found["status"].get("phase") == "Running"]
            if len(pods) != 2:
                return None
            return {found["metadata"]["labels"]["job-name"]: cluster.admin.get("v1", "Node", found["spec"]["nodeName"])
                    for found in pods}
        nodes = wait_for(job_nodes, "both jobs' pods running", SETTLE_SECONDS)
        assert sorted(nodes) == ["borrowed", "own"]
        for node in nodes.values():
            assert node["metadata"]["labels"][karpenter.NODEPOOL_LABEL] == pool
            assert node["metadata"]["labels"][karpenter.INSTANCE_TYPE_LABEL] == "g5.12xlarge"
        assert len({node["metadata"]["name"] for node in nodes.values()}) == 2  # 8 GPUs: two 4-GPU machines
        assert condition(workload(cluster.applied, "analytics", "borrowed"), "Admitted")
    finally:
        clean(cluster)
