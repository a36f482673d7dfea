"""The README's promises about tenants, held by the real API server (quota, admission, RBAC) and the real scheduler.

Each request is made as a tenant: a user the admin impersonates, in the tenant's group, with only the RBAC the
stack grants that group. Pods run on kwok nodes shaped like the stack's pools (GPU taint, pool labels, advertised
GPUs); nothing runs in them. NetworkPolicies are stored but not enforced here (no CNI): what a tenant may do to
them is tested, not the traffic they stop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.dynamic.exceptions import NotFoundError

from components import labels
from components.admission import CORDON_RULES, GUARD_VALIDATIONS, UNSCHEDULABLE_TAINT, VALIDATIONS
from components.tenant_network import DEFAULT_NETWORK_ANNOTATION, NETWORKS_ANNOTATION
from components.tenant_network import VALIDATIONS as NETWORK_VALIDATIONS
from components.tenant_objects import SECRET_VALIDATIONS, SERVICE_VALIDATIONS, TOKEN_SECRET
from e2e.conftest import Applied
from e2e.kube import Kube, refusal, stays, wait_for
from stacks.tenancy import node_shares

GPU = labels.GPU_RESOURCE
SHARED_GPU, MIG_PREFIX = "nvidia.com/gpu.shared", "nvidia.com/mig-"
PAUSE = "registry.k8s.io/pause:3.10"
# What kwok and the scheduler need at most to settle a pod.
SETTLE_SECONDS = 60


def message(rule_part: str, validations: list = VALIDATIONS) -> str:
    """The admission policy's own message for the one rule whose CEL holds `rule_part` (not a copy of its text)."""
    [text] = [text for rule, text in validations if rule_part in rule]
    return text


# Tenant namespaces enforce the restricted pod security standard: a pod runs as non-root with the runtime's seccomp
# profile, each container without privilege escalation or capabilities. On OpenShift the restricted-v2 SCC fills
# these in; here (no SCC admission) the tenant sets them, as on Kubernetes.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def container(**fields: Any) -> dict:
    """A pause container, as restricted pod security wants it."""
    return {"name": "main", "image": PAUSE, "securityContext": dict(RESTRICTED_CONTAINER), **fields}


def pod(name: str, *, gpus: int = 0, pool: dict[str, str] | None = None, tolerate: bool = False,
        resource: str = GPU, **spec: Any) -> dict:
    """A pause pod asking for `gpus` of `resource` (whole GPUs, shares or MIG slices); `pool` is the node selector of
    the pool it must land in."""
    main = container()
    if gpus:
        main["resources"] = {"limits": {resource: str(gpus)}}
    body: dict[str, Any] = {"containers": [main], "securityContext": dict(RESTRICTED_POD), **spec}
    if pool:
        body["nodeSelector"] = dict(pool)
    if tolerate or gpus:
        body["tolerations"] = [dict(labels.GPU_TOLERATION)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def in_namespace(obj: dict, namespace: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}


@pytest.fixture
def cluster(applied: Applied) -> Iterator[Applied]:
    """The applied stack, with every tenant workload removed after the test."""
    yield applied
    for tenant in applied.stack.config.tenants:
        for api_version, kind in (("batch/v1", "CronJob"), ("batch/v1", "Job"), ("apps/v1", "Deployment"),
                                  ("apps/v1", "ReplicaSet"), ("v1", "Pod"), ("v1", "Service")):
            for obj in applied.admin.list(api_version, kind, tenant.name):
                try:
                    applied.admin.delete(api_version, kind, obj["metadata"]["name"], tenant.name)
                except NotFoundError:  # gone with its owner meanwhile
                    pass
        wait_for(lambda: not applied.admin.list("v1", "Pod", tenant.name), f"pods of {tenant.name} gone",
                 timeout=SETTLE_SECONDS)


def as_tenant(applied: Applied, tenant: Any) -> Kube:
    return applied.user(f"{tenant.name}-member", tenant.rbac_group)


def gpu_nodes(applied: Applied, pool: str) -> set[str]:
    selector = applied.stack.pool_selector(pool).items()
    return {node["metadata"]["name"] for node in applied.stack.nodes()
            if selector <= node["metadata"]["labels"].items()}


def running(kube: Kube, name: str, namespace: str) -> dict:
    def probe() -> dict | None:
        found = kube.get("v1", "Pod", name, namespace)
        return found if found and found["status"].get("phase") == "Running" else None
    return wait_for(probe, f"pod {namespace}/{name} Running", timeout=SETTLE_SECONDS)


KINDS = {"whole": lambda name: name == GPU, "shared": lambda name: name == SHARED_GPU,
         "mig": lambda name: name.startswith(MIG_PREFIX)}


def given(stack: Any, kind: str) -> tuple[Any, Any, str]:
    """A tenant given some of a kind, a pool it may use that advertises it, and the resource; skipped if none."""
    for tenant in stack.config.tenants:
        for pool in stack.config.node_pools:
            for resource in pool.advertised_per_node:
                if KINDS[kind](resource) and tenant.grants.get(resource) and stack.config.may_use(tenant, pool):
                    return tenant, pool, resource
    pytest.skip(f"stack {stack.name} gives no tenant {kind} GPUs")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_pod_within_quota_runs_on_a_pool_that_advertises_its_kind(cluster: Applied, kind: str) -> None:
    """Whole GPUs, a share or a MIG slice: each asked for by its own name, placed by the real scheduler on a node of
    a pool that advertises it."""
    tenant, pool, resource = given(cluster.stack, kind)
    user = as_tenant(cluster, tenant)
    user.create(in_namespace(pod("train", gpus=1, resource=resource, pool=cluster.stack.pool_selector(pool.name)),
                             tenant.name))
    placed = running(cluster.admin, "train", tenant.name)
    assert placed["spec"]["nodeName"] in gpu_nodes(cluster, pool.name)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_pod_over_quota_of_its_kind_is_refused_by_the_quota(cluster: Applied, kind: str) -> None:
    tenant, _, resource = given(cluster.stack, kind)
    user = as_tenant(cluster, tenant)
    greedy = pod("greedy", gpus=tenant.grants[resource] + 1, resource=resource)
    if resource == SHARED_GPU:  # more than one share is refused per container: ask through many containers
        greedy["spec"]["containers"] = [container(name=f"c{index}", resources={"limits": {resource: "1"}})
                                        for index in range(tenant.grants[resource] + 1)]
    text = refusal(lambda: user.create(in_namespace(greedy, tenant.name)))
    assert "exceeded quota: gpu-quota" in text and f"requests.{resource}" in text


def test_a_kind_a_tenant_was_not_given_is_refused_by_the_quota(cluster: Applied) -> None:
    """A quota caps only what it names: every kind the fleet advertises is named, at 0 where not given."""
    for tenant in cluster.stack.config.tenants:
        for pool in cluster.stack.config.node_pools:
            missing = [name for name in pool.advertised_per_node if not tenant.grants.get(name)]
            if missing and cluster.stack.config.may_use(tenant, pool):
                text = refusal(lambda: as_tenant(cluster, tenant).create(in_namespace(
                    pod("ungiven", gpus=1, resource=missing[0]), tenant.name)))
                assert "exceeded quota: gpu-quota" in text and f"requests.{missing[0]}" in text
                return
    pytest.skip(f"every tenant of stack {cluster.stack.name} was given every kind")


def test_two_shares_in_one_container_are_refused_before_the_kubelet_would(cluster: Applied) -> None:
    tenant, pool, resource = given(cluster.stack, "shared")
    body = pod("double", gpus=2, resource=resource, pool=cluster.stack.pool_selector(pool.name))
    text = refusal(lambda: as_tenant(cluster, tenant).create(in_namespace(body, tenant.name)))
    assert message("quantity('1')") in text


def dedicated(stack: Any) -> tuple[Any, Any, Any]:
    """A pool dedicated to some tenants, one of its owners and a tenant that does not own it; skipped if none."""
    for pool in stack.config.node_pools:
        if pool.dedicated_to:
            owners = [t for t in stack.config.tenants if t.name in pool.dedicated_to]
            others = [t for t in stack.config.tenants if t.name not in pool.dedicated_to]
            if owners and others:
                return pool, owners[0], others[0]
    pytest.skip(f"stack {stack.name} has no pool dedicated to some of its tenants")


def dedicated_pod(name: str, stack: Any, pool: Any, resource: str) -> dict:
    body = pod(name, gpus=1, resource=resource, pool=stack.pool_selector(pool.name))
    body["spec"]["tolerations"].append({"key": labels.DEDICATED_TAINT_KEY, "operator": "Equal", "value": pool.name,
                                        "effect": "NoSchedule"})
    return body


def test_another_tenants_pod_is_refused_a_dedicated_pool_naming_its_owners(cluster: Applied) -> None:
    pool, _, other = dedicated(cluster.stack)
    [resource] = pool.advertised_per_node
    body = dedicated_pod("intruder", cluster.stack, pool, resource)
    text = refusal(lambda: as_tenant(cluster, other).create(in_namespace(body, other.name)))
    assert f"pool {pool.name} is dedicated to {', '.join(pool.dedicated_to)}" in text
    untolerated = pod("selector-only", gpus=1, resource=resource, pool=cluster.stack.pool_selector(pool.name))
    text = refusal(lambda: as_tenant(cluster, other).create(in_namespace(untolerated, other.name)))
    assert f"pool {pool.name} is dedicated to" in text


def test_the_owners_pod_is_scheduled_on_its_dedicated_pool(cluster: Applied) -> None:
    pool, owner, _ = dedicated(cluster.stack)
    [resource] = pool.advertised_per_node
    as_tenant(cluster, owner).create(in_namespace(dedicated_pod("mine", cluster.stack, pool, resource), owner.name))
    placed = running(cluster.admin, "mine", owner.name)
    assert placed["spec"]["nodeName"] in gpu_nodes(cluster, pool.name)


def test_without_the_dedicated_toleration_the_owners_pod_stays_off_the_pool(cluster: Applied) -> None:
    """The second taint is what keeps the pool: the real scheduler refuses a pod that does not tolerate it."""
    pool, owner, _ = dedicated(cluster.stack)
    [resource] = pool.advertised_per_node
    as_tenant(cluster, owner).create(in_namespace(
        pod("untolerated", gpus=1, resource=resource, pool=cluster.stack.pool_selector(pool.name)), owner.name))

    # The pod tolerates the GPU taint and selects only the pool's nodes, so the taint it leaves untolerated is the
    # dedicated one (the scheduler's message counts such nodes without naming the taint).
    def unschedulable() -> bool:
        found = cluster.admin.get("v1", "Pod", "untolerated", owner.name) or {}
        return not found.get("spec", {}).get("nodeName") and any(
            c["type"] == "PodScheduled" and c["status"] == "False" and
            f"{len(gpu_nodes(cluster, pool.name))} node(s) had untolerated taint" in c.get("message", "")
            for c in found.get("status", {}).get("conditions", []))
    wait_for(unschedulable, "the scheduler refuses the pool's nodes for their untolerated taint",
             timeout=SETTLE_SECONDS)


@pytest.mark.parametrize("name, spec, refused_by", [
    ("tolerates the GPU taint", {"tolerate": True}, "toleratesGpuTaint"),
    ("tolerates every taint", {"tolerations": [{"operator": "Exists"}]}, "toleratesGpuTaint"),
    ("tolerates every taint by an empty key", {"tolerations": [{"key": "", "operator": "Exists"}]},
     "toleratesGpuTaint"),
    ("tolerates the GPU taint asking for 0m GPUs", {"tolerate": True, "containers": [
        container(resources={"limits": {GPU: "0m"}})]}, "toleratesGpuTaint"),
    ("names a GPU node", {"nodeName": "{gpu_node}"}, "namesNode"),
    ("sets NVIDIA_VISIBLE_DEVICES", {"containers": [container(env=[
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])]}, "variables.containers.exists(c, has(c.env)"),
    ("asks for the nvidia runtime", {"runtimeClassName": "nvidia"}, "runtimeClassName"),
    ("asks for the nvidia-cdi runtime", {"runtimeClassName": "nvidia-cdi"}, "runtimeClassName"),
    ("asks for the nvidia-legacy runtime", {"runtimeClassName": "nvidia-legacy"}, "runtimeClassName"),
    ("asks the runtime for devices by CDI annotation", {"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}},
     "cdi.k8s.io/"),
    ("claims devices through DRA", {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "any"}]},
     "resourceClaims"),
    ("takes a system priority class", {"priorityClassName": "system-node-critical"}, "startsWith('system-')"),
    ("takes an OpenShift priority class", {"priorityClassName": "openshift-user-critical"}, "startsWith('system-')"),
])
def test_a_pod_without_a_gpu_request_cannot_reach_gpus(cluster: Applied, name: str, spec: dict,
                                                       refused_by: str) -> None:
    """Each way onto a GPU node, or to GPU devices, without a GPU request: refused by the admission policy."""
    if "OpenShift" in name and not cluster.stack.openshift:
        pytest.skip("OpenShift's priority classes exist on OpenShift only")
    tenant = cluster.stack.config.tenants[0]
    gpu_node = next(iter(gpu_nodes(cluster, cluster.stack.config.node_pools[0].name)))
    spec = {key: (value.format(gpu_node=gpu_node) if isinstance(value, str) else value) for key, value in spec.items()}
    body = pod("sneaky", tolerate=spec.pop("tolerate", False))
    body["metadata"]["annotations"] = spec.pop("annotations", {})
    body["spec"].update(spec)
    text = refusal(lambda: as_tenant(cluster, tenant).create(in_namespace(body, tenant.name)))
    assert message(refused_by) in text, name


@pytest.mark.parametrize("annotations, rule", [
    ({NETWORKS_ANNOTATION: "{other}/collective"}, 0),
    ({NETWORKS_ANNOTATION: '[{{"name": "collective", "namespace": "{other}"}}]'}, 0),
    ({DEFAULT_NETWORK_ANNOTATION: "{other}/collective"}, 1),
], ids=["another-namespace", "another-namespace-json", "default-network-swap"])
def test_a_tenant_pod_keeps_to_its_own_networks(cluster: Applied, annotations: dict, rule: int) -> None:
    """Multus attaches whatever network a pod's annotations name: the network policy refuses another namespace's
    networks and a swap of the cluster network (which would leave the tenant's fence)."""
    if len(cluster.stack.config.tenants) < 2:
        pytest.skip("one tenant")
    tenant, other = cluster.stack.config.tenants[0], cluster.stack.config.tenants[-1]
    body = pod("wired")
    body["metadata"]["annotations"] = {key: value.format(other=other.name) for key, value in annotations.items()}
    text = refusal(lambda: as_tenant(cluster, tenant).create(in_namespace(body, tenant.name)))
    assert NETWORK_VALIDATIONS[rule][1] in text


def _template(kind: str, pod_spec: dict) -> dict:
    template = {"metadata": {"labels": {"app": "sneaky"}}, "spec": pod_spec}
    if kind == "Deployment":
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "sneaky"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "sneaky"}}, "template": template}}
    job = {"template": {**template, "spec": {**pod_spec, "restartPolicy": "Never"}}, "backoffLimit": 0}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "sneaky"}, "spec": job}
    return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "sneaky"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": job}}}


@pytest.mark.parametrize("kind", ["Deployment", "Job", "CronJob"])
@pytest.mark.parametrize("way", ["toleration", "nodeName"])
def test_no_workload_template_puts_a_cpu_pod_on_a_gpu_node(cluster: Applied, kind: str, way: str) -> None:
    """A controller creates the pods of a Deployment, Job or CronJob; the policy refuses them all the same, so no
    pod of the template ever exists, let alone on a GPU node."""
    tenant = cluster.stack.config.tenants[0]
    pool = cluster.stack.config.node_pools[0].name
    pod_spec = pod("x", pool=cluster.stack.pool_selector(pool), tolerate=True)["spec"] if way == "toleration" else \
        {**pod("x")["spec"], "nodeName": next(iter(gpu_nodes(cluster, pool)))}
    as_tenant(cluster, tenant).create(in_namespace(_template(kind, pod_spec), tenant.name))
    expected = message("toleratesGpuTaint" if way == "toleration" else "namesNode")

    def refused_event() -> bool:
        events = cluster.admin.list("v1", "Event", tenant.name)
        return any(event["reason"] == "FailedCreate" and expected in event["message"] for event in events)

    wait_for(refused_event, f"the {kind}'s controller refused a pod", timeout=90 if kind == "CronJob" else 30)
    assert cluster.admin.list("v1", "Pod", tenant.name) == []


def test_a_gpu_low_tenant_cannot_take_gpu_high(cluster: Applied) -> None:
    low = cluster.stack.tenants(labels.LOW_PRIORITY_CLASS)
    if not low:
        pytest.skip(f"stack {cluster.stack.name} has no gpu-low tenant")
    body = pod("jump", gpus=1, priorityClassName=labels.HIGH_PRIORITY_CLASS)
    text = refusal(lambda: as_tenant(cluster, low[0]).create(in_namespace(body, low[0].name)))
    assert f"may not use priority class {labels.HIGH_PRIORITY_CLASS}" in text


def test_a_gpu_high_pod_preempts_a_gpu_low_pod_on_a_full_pool(cluster: Applied) -> None:
    """The smallest pool is filled with 1-GPU pods, gpu-low first; one more gpu-high pod makes the real scheduler
    evict a gpu-low pod and place the new one."""
    stack = cluster.stack
    low, high = stack.tenants(labels.LOW_PRIORITY_CLASS), stack.tenants(labels.HIGH_PRIORITY_CLASS)
    if not (low and high):
        pytest.skip(f"stack {stack.name} needs a gpu-low and a gpu-high tenant")
    pools = sorted((p for p in stack.config.node_pools if len(p.advertised) == 1 and not p.dedicated_to),
                   key=lambda p: sum(p.advertised.values()))
    candidates = [(p, lo, hi) for p in pools for lo in low for hi in high]
    for pool, low, high in candidates:
        [(resource, capacity)] = pool.advertised.items()
        low_pods = min(low.grants.get(resource, 0), capacity)
        high_pods = capacity - low_pods
        if low_pods and high_pods + 1 <= high.grants.get(resource, 0):
            break
    else:
        pytest.skip(f"no gpu-high tenant's quota of stack {stack.name} covers what a gpu-low one leaves of a pool")
    for tenant, count, tier in ((low, low_pods, labels.LOW_PRIORITY_CLASS),
                                (high, high_pods, labels.HIGH_PRIORITY_CLASS)):
        for index in range(count):
            body = pod(f"fill-{index}", gpus=1, resource=resource, pool=stack.pool_selector(pool.name),
                       priorityClassName=tier)
            as_tenant(cluster, tenant).create(in_namespace(body, tenant.name))
            running(cluster.admin, f"fill-{index}", tenant.name)
    as_tenant(cluster, high).create(in_namespace(
        pod("urgent", gpus=1, resource=resource, pool=stack.pool_selector(pool.name),
            priorityClassName=labels.HIGH_PRIORITY_CLASS),
        high.name))
    placed = running(cluster.admin, "urgent", high.name)
    assert placed["spec"]["nodeName"] in gpu_nodes(cluster, pool.name)
    assert len(cluster.admin.list("v1", "Pod", low.name)) == low_pods - 1  # one gpu-low pod was evicted
    assert len(cluster.admin.list("v1", "Pod", high.name)) == high_pods + 1


# Everything a tenant's workloads are made of, and the platform's objects around them.
RESOURCES = [("", "pods"), ("", "secrets"), ("", "configmaps"), ("", "services"), ("apps", "deployments"),
             ("batch", "jobs"), ("batch", "cronjobs"), ("networking.k8s.io", "networkpolicies"),
             ("", "resourcequotas"), ("", "limitranges"), ("rbac.authorization.k8s.io", "rolebindings")]
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def test_a_tenant_can_do_nothing_in_another_tenants_namespace(cluster: Applied) -> None:
    tenants = cluster.stack.config.tenants
    if len(tenants) < 2:
        pytest.skip("one tenant")
    for tenant in tenants:
        user = as_tenant(cluster, tenant)
        for other in tenants:
            if other is tenant:
                continue
            allowed = [f"{verb} {resource}" for group, resource in RESOURCES for verb in VERBS
                       if user.can(verb, resource, other.name, group)]
            assert allowed == [], f"{tenant.name} in {other.name}"
            refusal(lambda: user.list("v1", "Pod", other.name))


def test_a_tenant_runs_its_own_workloads(cluster: Applied) -> None:
    """The positive control of the RBAC tests: the tenant's group may do its work in its own namespace."""
    tenant = cluster.stack.config.tenants[0]
    user = as_tenant(cluster, tenant)
    for group, resource in [("", "pods"), ("", "secrets"), ("", "configmaps"), ("", "services"),
                            ("apps", "deployments"), ("batch", "jobs"), ("batch", "cronjobs")]:
        for verb in VERBS:
            assert user.can(verb, resource, tenant.name, group), f"{verb} {resource}"
    user.create(in_namespace(pod("web"), tenant.name))
    placed = running(cluster.admin, "web", tenant.name)
    assert placed["spec"]["nodeName"].startswith("cpu-")


def test_a_tenant_cannot_change_the_platforms_objects_in_its_namespace(cluster: Applied) -> None:
    """The fence, the quotas, the limit range and the binding are the platform's: a tenant may read them, not
    delete, change or add to them (a second NetworkPolicy would widen the fence: policies add up)."""
    tenant = cluster.stack.config.tenants[0]
    user = as_tenant(cluster, tenant)
    platform = [obj for obj in cluster.stack.objects() if obj["metadata"].get("namespace") == tenant.name]
    assert {obj["kind"] for obj in platform} >= {"NetworkPolicy", "ResourceQuota", "LimitRange", "RoleBinding"}
    for obj in platform:
        api_version, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
        refusal(lambda: user.delete(api_version, kind, name, tenant.name))
        widened = {**obj, "metadata": {"name": name, "namespace": tenant.name}}
        refusal(lambda: user.apply(widened))
    fence = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "open", "namespace": tenant.name},
             "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}}
    refusal(lambda: user.create(fence))
    assert not user.can("impersonate", "serviceaccounts", tenant.name)
    assert not user.can("create", "serviceaccounts", tenant.name, subresource="token")


@pytest.mark.parametrize("name, spec, refused_by", [
    ("requests a GPU", {"gpus": 1}, "requestsGpu"),
    ("tolerates the GPU taint", {"tolerate": True}, "toleratesGpuTaint"),
    ("names a GPU node", {"nodeName": "{gpu_node}"}, "namesNode"),
])
def test_outside_tenant_namespaces_no_pod_gets_a_gpu(cluster: Applied, name: str, spec: dict, refused_by: str) -> None:
    """The quota exists only in tenant namespaces: anywhere else (a namespace anyone with namespace rights made)
    a GPU request, a GPU toleration or a named node is refused, for the cluster admin too."""
    cluster.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox"}})
    wait_for(lambda: cluster.admin.get("v1", "ServiceAccount", "default", "sandbox"), "sandbox/default", 30)
    gpu_node = next(iter(gpu_nodes(cluster, cluster.stack.config.node_pools[0].name)))
    body = pod("grab", gpus=spec.get("gpus", 0), tolerate=spec.get("tolerate", False))
    if "nodeName" in spec:
        body["spec"]["nodeName"] = gpu_node
    text = refusal(lambda: cluster.admin.create(in_namespace(body, "sandbox")))
    assert message(refused_by, GUARD_VALIDATIONS) in text, name


def test_outside_tenant_namespaces_cpu_pods_and_node_agents_run(cluster: Applied) -> None:
    """The guard leaves CPU pods alone, and the cluster's own namespaces keep their node agents (which tolerate
    every taint)."""
    cluster.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sandbox"}})
    wait_for(lambda: cluster.admin.get("v1", "ServiceAccount", "default", "sandbox"), "sandbox/default", 30)
    cluster.admin.create(in_namespace(pod("web"), "sandbox"))
    agent = pod("agent", tolerations=[{"operator": "Exists"}])
    cluster.admin.create(in_namespace(agent, "kube-system"))
    try:
        assert running(cluster.admin, "web", "sandbox")["spec"]["nodeName"].startswith("cpu-")
        running(cluster.admin, "agent", "kube-system")
    finally:
        for namespace, name in (("sandbox", "web"), ("kube-system", "agent")):
            cluster.admin.delete("v1", "Pod", name, namespace)


def test_on_openshift_only_admins_create_projects(cluster: Applied) -> None:
    """A project outside the tenants would be a namespace without their quota: the stack empties OpenShift's
    self-provisioners binding (owned by another field manager) and keeps the API server from restoring it."""
    if not cluster.stack.openshift:
        pytest.skip("OpenShift's project self-provisioning")
    binding = cluster.admin.get("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "self-provisioners")
    assert not binding.get("subjects")
    assert binding["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "false"


def test_a_tenant_cannot_mint_a_token_that_never_expires(cluster: Applied) -> None:
    """The role lets tenants create Secrets; one of type service-account-token would be filled by the token
    controller with a token of the service account it names that never expires. The tenant objects policy refuses
    it (and the role grants no serviceaccounts/token)."""
    tenant = cluster.stack.config.tenants[0]
    body = {"apiVersion": "v1", "kind": "Secret", "type": TOKEN_SECRET, "metadata": {
        "name": "forever", "namespace": tenant.name, "annotations": {"kubernetes.io/service-account.name": "default"}}}
    text = refusal(lambda: as_tenant(cluster, tenant).create(body))
    assert SECRET_VALIDATIONS[0][1] in text
    assert cluster.admin.get("v1", "Secret", "forever", tenant.name) is None
    as_tenant(cluster, tenant).create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
        "name": "own", "namespace": tenant.name}, "stringData": {"key": "value"}})
    cluster.admin.delete("v1", "Secret", "own", tenant.name)


def service(name: str, **spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"port": 443, "targetPort": 8443}], **spec}}


@pytest.mark.parametrize("name, spec, rule", [
    ("takes the API server's address", {"externalIPs": ["{api_server}"]}, 0),
    ("opens a port on every node", {"type": "NodePort"}, 1),
    ("asks for a load balancer", {"type": "LoadBalancer"}, 1),
])
def test_a_tenant_exposes_nothing_beyond_the_cluster(cluster: Applied, name: str, spec: dict, rule: int) -> None:
    """externalIPs take over traffic to any address cluster-wide (CVE-2020-8554: here the API server's ClusterIP);
    NodePort and LoadBalancer open the tenant's pods beyond the cluster. Refused on every flavor; a ClusterIP
    Service is the tenant's."""
    tenant = cluster.stack.config.tenants[0]
    api_server = cluster.admin.get("v1", "Service", "kubernetes", "default")["spec"]["clusterIP"]
    spec = {key: ([api_server] if value == ["{api_server}"] else value) for key, value in spec.items()}
    user = as_tenant(cluster, tenant)
    text = refusal(lambda: user.create(in_namespace(service("exposed", **spec), tenant.name)))
    assert SERVICE_VALIDATIONS[rule][1] in text, name
    user.create(in_namespace(service("inside"), tenant.name))


def test_a_tenant_cannot_publish_an_ingress(cluster: Applied) -> None:
    """An Ingress may claim any host on the cluster's ingress controller (OpenShift turns it into a Route):
    publishing is the platform team's; tenants read their Ingresses only."""
    tenant = cluster.stack.config.tenants[0]
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
               "metadata": {"name": "hijack", "namespace": tenant.name},
               "spec": {"rules": [{"host": "login.example.com", "http": {"paths": [{
                   "path": "/", "pathType": "Prefix",
                   "backend": {"service": {"name": "inside", "port": {"number": 443}}}}]}}]}}
    user = as_tenant(cluster, tenant)
    refusal(lambda: user.create(ingress))
    assert user.can("list", "ingresses", tenant.name, "networking.k8s.io")
    assert not user.can("create", "ingresses", tenant.name, "networking.k8s.io")


def test_an_ephemeral_container_is_held_to_the_pod_rules(cluster: Applied) -> None:
    """Ephemeral containers are added to a running pod through pods/ephemeralcontainers (tenants hold no right to
    it; an admin debugging does): one asking the runtime for every GPU by environment is refused all the same."""
    tenant = cluster.stack.config.tenants[0]
    as_tenant(cluster, tenant).create(in_namespace(pod("web"), tenant.name))
    live = running(cluster.admin, "web", tenant.name)
    assert not as_tenant(cluster, tenant).can("update", "pods", tenant.name, subresource="ephemeralcontainers")
    live["spec"]["ephemeralContainers"] = [{**container(name="debug"), "env": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]
    core = CoreV1Api(cluster.admin.api)
    text = refusal(lambda: core.replace_namespaced_pod_ephemeralcontainers("web", tenant.name, live))
    assert message("ephemeralContainers") in text
    live["spec"]["ephemeralContainers"][0].pop("env")
    core.replace_namespaced_pod_ephemeralcontainers("web", tenant.name, live)


@pytest.mark.parametrize("name, change", [
    ("runs as root", lambda body: body["spec"]["securityContext"].update(runAsUser=0, runAsNonRoot=False)),
    ("may escalate privileges", lambda body: body["spec"]["containers"][0]["securityContext"].update(
        allowPrivilegeEscalation=True)),
    ("keeps its capabilities", lambda body: body["spec"]["containers"][0]["securityContext"].pop("capabilities")),
    ("says nothing of its user", lambda body: body["spec"].pop("securityContext")),
])
def test_a_tenant_pod_runs_restricted(cluster: Applied, name: str, change: Any) -> None:
    """Tenant namespaces enforce the restricted pod security standard; a GPU pod that runs as a non-root user
    with no capabilities (all a GPU container needs: the device plugin mounts its devices) is placed on its pool."""
    tenant, pool, resource = given(cluster.stack, "whole")
    body = in_namespace(pod("root", gpus=1, resource=resource, pool=cluster.stack.pool_selector(pool.name)),
                        tenant.name)
    change(body)
    text = refusal(lambda: as_tenant(cluster, tenant).create(body))
    assert 'violates PodSecurity "restricted' in text, name
    as_tenant(cluster, tenant).create(in_namespace(pod("train", gpus=1, resource=resource,
                                                       pool=cluster.stack.pool_selector(pool.name)), tenant.name))
    assert running(cluster.admin, "train", tenant.name)["spec"]["nodeName"] in gpu_nodes(cluster, pool.name)


@pytest.mark.parametrize("name, toleration", [
    ("a cordon", {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}),
    ("every taint", {"operator": "Exists"}),
])
def test_a_gpu_pod_may_not_tolerate_a_cordon(cluster: Applied, name: str, toleration: dict) -> None:
    """A cordon (every drain and re-cut starts with one) is a taint: a GPU pod tolerating it, or every taint, would
    be placed on a node being emptied."""
    tenant, pool, resource = given(cluster.stack, "whole")
    body = pod("stays-on", gpus=1, resource=resource, pool=cluster.stack.pool_selector(pool.name))
    body["spec"]["tolerations"].append(toleration)
    text = refusal(lambda: as_tenant(cluster, tenant).create(in_namespace(body, tenant.name)))
    assert any(text_of in text for _, text_of in CORDON_RULES), name


def the_scheduler_sees_the_cordon(cluster: Applied, pool: dict[str, str]) -> None:
    """The scheduler places pods by its informer's copy of the nodes, which a watch updates a moment after a cordon:
    a pod made right after one can still be placed on the node (a run of two suites at once saw it). Wait until the
    scheduler refuses a pod that only the pool's nodes would take, as unschedulable: the admin's, in kube-system,
    which the GPU guard leaves to the cluster's node agents (components/admission.py CLUSTER_NAMESPACES)."""
    canary = in_namespace(pod("cordon-canary", pool=pool, tolerate=True), "kube-system")

    def decided() -> str | None:
        found = cluster.admin.get("v1", "Pod", "cordon-canary", "kube-system") or {}
        if found.get("spec", {}).get("nodeName"):
            return "placed"
        conditions = found.get("status", {}).get("conditions", [])
        return next((c["reason"] for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"),
                    None)

    def refused() -> bool:
        cluster.admin.create(canary)
        try:
            return wait_for(decided, "the canary pod placed or refused", timeout=SETTLE_SECONDS) == "Unschedulable"
        finally:
            cluster.admin.delete("v1", "Pod", "cordon-canary", "kube-system")
            wait_for(lambda: not cluster.admin.get("v1", "Pod", "cordon-canary", "kube-system"), "the canary pod gone",
                     timeout=SETTLE_SECONDS)
    wait_for(refused, "the scheduler sees the cordon", timeout=SETTLE_SECONDS)


def test_a_cordoned_gpu_node_takes_no_new_tenant_pod(cluster: Applied) -> None:
    """Every node of a pool cordoned: a tenant's GPU pod for that pool waits; uncordoned, it runs."""
    tenant, pool, resource = given(cluster.stack, "whole")
    nodes = sorted(gpu_nodes(cluster, pool.name))
    nodes_api = cluster.admin.resource("v1", "Node")
    for node in nodes:
        nodes_api.patch(body={"spec": {"unschedulable": True}}, name=node,
                        content_type="application/merge-patch+json")
    try:
        the_scheduler_sees_the_cordon(cluster, cluster.stack.pool_selector(pool.name))
        as_tenant(cluster, tenant).create(in_namespace(
            pod("waits", gpus=1, resource=resource, pool=cluster.stack.pool_selector(pool.name)), tenant.name))
        assert stays(lambda: not cluster.admin.get("v1", "Pod", "waits", tenant.name)["spec"].get("nodeName"),
                     SETTLE_SECONDS / 4)
    finally:
        for node in nodes:
            nodes_api.patch(body={"spec": {"unschedulable": False}}, name=node,
                            content_type="application/merge-patch+json")
    assert running(cluster.admin, "waits", tenant.name)["spec"]["nodeName"] in nodes


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_gpu_pod_asks_for_no_more_than_its_share_of_the_node(cluster: Applied, kind: str) -> None:
    """One share (or slice, or GPU) and most of the node's CPU, or memory, would strand the node's other units, which
    other tenants were given: refused above the unit's share; at it, the pod runs."""
    tenant, pool, resource = given(cluster.stack, kind)
    if pool.bring_your_own is not None:
        pytest.skip("a bring-your-own pool declares no node shape, so no share of one is set")
    cpu, memory = node_shares(cluster.stack.config)[resource]
    user = as_tenant(cluster, tenant)
    selector = cluster.stack.pool_selector(pool.name)
    for name, asked in (("cpu", {"cpu": f"{cpu + 1}m"}), ("memory", {"memory": f"{memory + 1}Mi"})):
        greedy = pod(f"greedy-{name}", gpus=1, resource=resource, pool=selector)
        greedy["spec"]["containers"][0]["resources"] = {"requests": {resource: "1", **asked},
                                                        "limits": {resource: "1", **asked}}
        text = refusal(lambda: user.create(in_namespace(greedy, tenant.name)))
        assert f"share of a node's {name}" in text
    fair = pod("fair", gpus=1, resource=resource, pool=selector)
    share = {resource: "1", "cpu": f"{cpu}m", "memory": f"{memory}Mi"}
    fair["spec"]["containers"][0]["resources"] = {"requests": share, "limits": share}  # the limit range's defaults
    user.create(in_namespace(fair, tenant.name))
    assert running(cluster.admin, "fair", tenant.name)["spec"]["nodeName"] in gpu_nodes(cluster, pool.name)
