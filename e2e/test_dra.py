"""Allocation mode `dra` (examples/Pulumi.dra.yaml) on the real control plane: the real API server enforces the
quota per DeviceClass and the claims policy, the real scheduler allocates devices from the ResourceSlices NVIDIA's DRA
driver would publish (stand-ins, e2e/dra.py), and each tenant's attempt to get around what it was given is refused.

One plane for the module: the stack applied once, the slices published once, each test's claims and pods removed
after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes.dynamic.exceptions import NotFoundError

from components import labels
from components.admission_gate import ACCOUNT, GATE_NAMESPACE, PROBE_NAMESPACE
from components.dra_admission import ADMIN_ACCESS_LABEL, CLAIM_VALIDATIONS, NAMESPACE_VALIDATIONS
from e2e.conftest import Applied
from e2e.dra import dra_plane
from e2e.kube import Kube, refusal, stays, wait_for
from e2e.stack import Stack
from e2e.test_admission_gate import gate_ends, gate_running, probed_policies
from fleet.dra import quota_key
from tests.conftest import ROOT

RESOURCE = "resource.k8s.io/v1"
PAUSE = "registry.k8s.io/pause:3.10"
SETTLE_SECONDS = 60
WHOLE, MIG, SEARCH = "gpu.gpu-platform.io", "mig-1g.10gb.gpu-platform.io", "gpu.l40s-search.gpu-platform.io"


EXAMPLE = ROOT / "examples" / "Pulumi.dra.yaml"
OVERCOMMITTED = 8  # training's whole GPUs here: 10 promised on the 8 H100s, as a pack with maxOvercommit 1.25 allows


@pytest.fixture(scope="module")
def applied(tools, tmp_path_factory) -> Iterator[Applied]:
    """The example, training given 8 whole GPUs instead of 6 so that the H100 class can be full while a tenant
    still has quota on it."""
    config = yaml.safe_load(EXAMPLE.read_text())["config"]
    next(tenant for tenant in config["gpu-platform:tenants"] if tenant["name"] == "training")["gpus"] = OVERCOMMITTED
    with dra_plane(Stack.from_config("dra", config), tmp_path_factory.mktemp("cluster-dra")) as applied:
        yield applied


@pytest.fixture
def cluster(applied: Applied) -> Iterator[Applied]:
    yield applied
    for tenant in applied.stack.config.tenants:
        for api_version, kind in (("v1", "Pod"), (RESOURCE, "ResourceClaim"), (RESOURCE, "ResourceClaimTemplate")):
            for obj in applied.admin.list(api_version, kind, tenant.name):
                try:
                    applied.admin.delete(api_version, kind, obj["metadata"]["name"], tenant.name)
                except NotFoundError:
                    pass
        wait_for(lambda: not applied.admin.list("v1", "Pod", tenant.name)
                 and not applied.admin.list(RESOURCE, "ResourceClaim", tenant.name),
                 f"pods and claims of {tenant.name} gone", timeout=SETTLE_SECONDS)


def as_tenant(applied: Applied, name: str) -> Kube:
    tenant = next(tenant for tenant in applied.stack.config.tenants if tenant.name == name)
    return applied.user(f"{name}-member", tenant.rbac_group)


def claim_spec(device_class: str, count: int = 1, **request: Any) -> dict:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count, **request}}]}}


def claim(name: str, namespace: str, device_class: str, count: int = 1, **request: Any) -> dict:
    return {"apiVersion": RESOURCE, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": claim_spec(device_class, count, **request)}


def template(name: str, namespace: str, device_class: str, count: int = 1) -> dict:
    return {"apiVersion": RESOURCE, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(device_class, count)}}


def pod(name: str, namespace: str, *, claim_name: str | None = None, template_name: str | None = None,
        tolerations: list[dict] | None = None, **spec: Any) -> dict:
    """A pause pod, as restricted pod security wants it, holding one claim (by name, or made from a template)."""
    source = {"resourceClaimName": claim_name} if claim_name else {"resourceClaimTemplateName": template_name}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "main", "image": PAUSE, "resources": {"claims": [{"name": "gpu"}]},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "resourceClaims": [{"name": "gpu", **source}],
        "tolerations": [dict(labels.GPU_TOLERATION), *(tolerations or [])], **spec}}


def running(kube: Kube, name: str, namespace: str) -> dict:
    def probe() -> dict | None:
        found = kube.get("v1", "Pod", name, namespace)
        return found if found and found["status"].get("phase") == "Running" else None
    return wait_for(probe, f"pod {namespace}/{name} Running", timeout=SETTLE_SECONDS)


def allocated(kube: Kube, namespace: str, pod_name: str) -> list[dict]:
    """The devices allocated to the claims of a pod (its own claims, named in its status)."""
    found = kube.get("v1", "Pod", pod_name, namespace)
    names = [status["resourceClaimName"] for status in found["status"].get("resourceClaimStatuses", [])
             if status.get("resourceClaimName")]
    names += [source["resourceClaimName"] for source in found["spec"]["resourceClaims"]
              if source.get("resourceClaimName")]
    return [result for name in names
            for result in kube.get(RESOURCE, "ResourceClaim", name, namespace)["status"]["allocation"]["devices"]
            ["results"]]


def message(rule_part: str, validations: list) -> str:
    [text] = [text for rule, text in validations if rule_part in rule]
    return text


def test_the_api_server_took_every_object_of_the_stack(applied: Applied) -> None:
    assert applied.rejected == {}


def test_quota_names_every_device_class_of_the_fleet(applied: Applied) -> None:
    """The operator's classes and the stack's, 0 where not given: no class a tenant could name is uncounted."""
    classes = {obj["metadata"]["name"] for obj in applied.admin.list(RESOURCE, "DeviceClass")}
    assert {WHOLE, MIG, SEARCH} <= classes
    for tenant in applied.stack.config.tenants:
        hard = applied.admin.get("v1", "ResourceQuota", "gpu-quota", tenant.name)["status"]["hard"]
        counted = {key.removesuffix(quota_key("")) for key in hard if key.endswith(quota_key(""))}
        assert counted >= classes | {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}


@pytest.mark.parametrize("tenant, device_class, pool", [
    ("training", WHOLE, "h100-training"), ("training", MIG, "h100-mig"), ("search", SEARCH, "l40s-search")])
def test_a_tenant_gets_devices_of_a_class_it_was_given(cluster: Applied, tenant: str, device_class: str,
                                                       pool: str) -> None:
    """Made from a template, allocated by the real scheduler from the pool's slice, on that pool's node."""
    kube = as_tenant(cluster, tenant)
    kube.create(template("one", tenant, device_class))
    tolerations = [labels.dedicated_taint(pool) | {"operator": "Equal"}] if tenant == "search" else []
    kube.create(pod("worker", tenant, template_name="one", tolerations=tolerations))
    found = running(kube, "worker", tenant)
    assert found["spec"]["nodeName"].startswith(pool)
    [result] = allocated(cluster.admin, tenant, "worker")
    assert result["driver"] == "gpu.nvidia.com" and result["pool"] == found["spec"]["nodeName"]


@pytest.mark.parametrize("device_class", [WHOLE, "gpu.nvidia.com", SEARCH])
def test_a_tenant_cannot_name_a_class_it_was_not_given(cluster: Applied, device_class: str) -> None:
    """research was given MIG slices only: the whole-GPU class, the operator's class of every GPU, and another
    tenant's dedicated pool's class are refused by the claims policy, as claims and as templates."""
    kube = as_tenant(cluster, "research")
    expected = message("variables.allowed", CLAIM_VALIDATIONS)
    assert expected in refusal(lambda: kube.create(claim("other", "research", device_class)))
    assert expected in refusal(lambda: kube.create(template("other", "research", device_class)))


def test_admin_access_is_refused(cluster: Applied) -> None:
    """adminAccess would get devices allocated to others: refused (the API server's own check comes first, as
    the namespace lacks the admin-access label; the claims policy stands behind it)."""
    kube = as_tenant(cluster, "training")
    text = refusal(lambda: kube.create(claim("all", "training", WHOLE, adminAccess=True)))
    assert ADMIN_ACCESS_LABEL in text or "adminAccess" in text


def test_a_tenant_cannot_label_its_namespace_for_admin_access(cluster: Applied) -> None:
    """Not as the tenant (namespaces are not its to change), and not even as the admin (the namespace policy)."""
    patch = {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}}

    def label(kube: Kube) -> Any:
        return kube.resource("v1", "Namespace").patch(name="training", body=patch,
                                                      content_type="application/merge-patch+json")
    assert "forbidden" in refusal(lambda: label(as_tenant(cluster, "training"))).lower()
    assert message(ADMIN_ACCESS_LABEL, NAMESPACE_VALIDATIONS) in refusal(lambda: label(cluster.admin))
    assert ADMIN_ACCESS_LABEL not in cluster.admin.get("v1", "Namespace", "training")["metadata"]["labels"]


def test_a_claim_over_quota_is_refused(cluster: Applied) -> None:
    kube = as_tenant(cluster, "research")  # 7 MIG slices given
    assert "exceeded quota" in refusal(lambda: kube.create(claim("big", "research", MIG, count=8)))


def test_a_claim_for_every_device_of_a_node_counts_as_the_most_it_could_take(cluster: Applied) -> None:
    """allocationMode All asks for every matching device of a node, however many: the API server counts it as the
    most one claim may be given (32, AllocationResultsMaxSize), so 7 MIG slices' quota refuses it."""
    kube = as_tenant(cluster, "research")
    body = claim("everything", "research", MIG)
    del body["spec"]["devices"]["requests"][0]["exactly"]["count"]
    body["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    assert "exceeded quota" in refusal(lambda: kube.create(body))


def test_a_list_of_alternatives_names_only_classes_given_and_counts_the_largest(cluster: Applied) -> None:
    """firstAvailable: an alternative of a class not given is refused like a claim of it, and the quota counts the
    largest alternative of each class (research: 7 MIG slices; an alternative of 8 is over it)."""
    kube = as_tenant(cluster, "research")

    def alternatives(*choices: tuple[str, int]) -> dict:
        body = claim("either", "research", MIG)
        body["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
            {"name": f"choice-{index}", "deviceClassName": name, "allocationMode": "ExactCount", "count": count}
            for index, (name, count) in enumerate(choices)]}]
        return body
    assert message("variables.allowed", CLAIM_VALIDATIONS) in refusal(
        lambda: kube.create(alternatives((MIG, 1), (WHOLE, 1))))
    assert "exceeded quota" in refusal(lambda: kube.create(alternatives((MIG, 1), (MIG, 8))))


def test_a_template_over_quota_makes_no_claim(cluster: Applied) -> None:
    """The API server takes a template of 8 against a quota of 7 (quota counts claims, not templates), but the claim
    the resourceclaim controller makes from it for a pod is refused: the pod stays Pending, nothing is allocated."""
    kube = as_tenant(cluster, "research")
    kube.create(template("big", "research", MIG, count=8))
    kube.create(pod("greedy", "research", template_name="big"))
    assert stays(lambda: kube.get("v1", "Pod", "greedy", "research")["status"].get("phase") == "Pending"
                 and not cluster.admin.list(RESOURCE, "ResourceClaim", "research"), 10)
    used = cluster.admin.get("v1", "ResourceQuota", "gpu-quota", "research")["status"].get("used", {})
    assert used.get(quota_key(MIG)) == "0"


def test_claims_add_up_to_the_quota(cluster: Applied) -> None:
    """Two claims of 4 against 7: the second is refused, whatever each asks alone."""
    kube = as_tenant(cluster, "research")
    kube.create(claim("first", "research", MIG, count=4))
    assert "exceeded quota" in refusal(lambda: kube.create(claim("second", "research", MIG, count=4)))


def test_a_claim_cannot_be_shared_with_another_tenant(cluster: Applied) -> None:
    """A pod names claims of its own namespace only: research's pod naming training's claim waits for a claim of
    that name in research, which research cannot make from another class; and research cannot read or reserve
    training's claim."""
    training, research = as_tenant(cluster, "training"), as_tenant(cluster, "research")
    training.create(claim("shared", "training", WHOLE))
    research.create(pod("borrower", "research", claim_name="shared"))
    assert stays(lambda: research.get("v1", "Pod", "borrower", "research")["status"].get("phase") == "Pending", 10)
    assert not research.can("get", "resourceclaims", "training", group="resource.k8s.io")
    assert not research.can("update", "resourceclaims", "training", group="resource.k8s.io", subresource="status")
    assert not research.can("update", "resourceclaims", "research", group="resource.k8s.io", subresource="status")
    assert not cluster.admin.get(RESOURCE, "ResourceClaim", "shared", "training").get("status", {}).get("reservedFor")


def test_a_pod_of_another_tenant_cannot_reach_a_dedicated_pool_through_a_class(cluster: Applied) -> None:
    """training is not among l40s-search's tenants: it may not name the pool's class, and the classes it was given
    select no L40S; a pod that tolerates the pool's taint is refused by the pod policy."""
    kube = as_tenant(cluster, "training")
    assert message("variables.allowed", CLAIM_VALIDATIONS) in refusal(
        lambda: kube.create(claim("search", "training", SEARCH)))
    kube.create(template("one", "training", WHOLE))
    body = pod("sneak", "training", template_name="one",
               tolerations=[labels.dedicated_taint("l40s-search") | {"operator": "Equal"}])
    assert "dedicated to search" in refusal(lambda: kube.create(body))


def test_a_high_priority_claim_on_a_full_class_waits_no_preemption(cluster: Applied) -> None:
    """The H100 class covers 8 devices and is given 10 (training 8, search 2). training fills it at gpu-low; search's
    gpu-high pod then stays Pending and no gpu-low pod is evicted: the scheduler does not preempt for DRA devices
    here (NVIDIA's GPU Operator DRA documentation says so too). What the scheduler says of the waiting pod is kept."""
    training, search = as_tenant(cluster, "training"), as_tenant(cluster, "search")
    training.create(template("one", "training", WHOLE))
    for index in range(OVERCOMMITTED):
        training.create(pod(f"low-{index}", "training", template_name="one",
                            priorityClassName=labels.LOW_PRIORITY_CLASS))
    for index in range(OVERCOMMITTED):
        running(training, f"low-{index}", "training")
    search.create(template("one", "search", WHOLE))
    search.create(pod("urgent", "search", template_name="one", priorityClassName=labels.HIGH_PRIORITY_CLASS))

    def low_all_running() -> bool:
        pods = cluster.admin.list("v1", "Pod", "training")
        return len(pods) == OVERCOMMITTED and all(p["status"].get("phase") == "Running" and not p["metadata"].get(
            "deletionTimestamp") for p in pods)
    assert stays(lambda: low_all_running() and search.get("v1", "Pod", "urgent", "search")["status"].get(
        "phase") == "Pending", 20)
    urgent = search.get("v1", "Pod", "urgent", "search")
    assert not urgent["status"].get("nominatedNodeName")
    [condition] = [c for c in urgent["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert condition["status"] == "False"
    print(f"gpu-high pod on a full class: {condition['reason']}: {condition.get('message')}")



def test_the_admission_gate_waits_for_the_claims_policies_too(cluster: Applied, tmp_path) -> None:
    """The gate's own script (run as its pod would run it, a stand-in: see e2e/test_admission_gate.py), as its own
    service account: it probes the claims and claim-template policies through resource.k8s.io, as well as the pod
    policies, and ends once each refuses in its own name; its account can create no claim for real."""
    probed = probed_policies(cluster.stack)
    assert {"gpu-platform-tenant-claims-resourceclaims", "gpu-platform-tenant-claims-resourceclaimtemplates"} <= set(
        probed)
    with gate_running(cluster.stack, cluster.plane, cluster.admin, tmp_path / "account") as gate:
        gate_ends(gate, cluster.stack)
    # The quota controller counts both kinds at 0 (the keys are ones it knows), and a real claim is refused.
    hard = cluster.admin.get("v1", "ResourceQuota", "nothing", PROBE_NAMESPACE)["status"]["hard"]
    assert hard["count/resourceclaims.resource.k8s.io"] == hard["count/resourceclaimtemplates.resource.k8s.io"] == "0"
    as_gate = Kube(cluster.plane.kubeconfig, user=f"system:serviceaccount:{GATE_NAMESPACE}:{ACCOUNT}",
                   group="system:serviceaccounts")
    try:
        assert refusal(lambda: as_gate.create(claim("real", PROBE_NAMESPACE, WHOLE)))
        assert not as_gate.can("get", "resourceclaims", PROBE_NAMESPACE, group="resource.k8s.io")
    finally:
        as_gate.close()
