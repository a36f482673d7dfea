"""TenantQuota: a namespace per tenant, capped at its GPUs, used by its group, with the platform priority classes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components import labels
from components.tenant_quota import QUOTA_SPEC_DIGEST
from tests.conftest import Plan, render_stack, stack_config

GPU = "nvidia.com/gpu"
GPU_QUOTA = "requests.nvidia.com/gpu"


def tenants(stack: str) -> list[dict[str, Any]]:
    return stack_config(stack)["gpu-platform:tenants"]


def plan_of(stack: str, dev_plan: Plan, prod_plan: Plan) -> Plan:
    return dev_plan if stack == "dev" else prod_plan


TENANTS = [(stack, tenant["name"]) for stack in ("dev", "prod") for tenant in tenants(stack)]


def tenant_config(stack: str, name: str) -> dict[str, Any]:
    return next(t for t in tenants(stack) if t["name"] == name)


def scoped_quotas(plan: Plan, namespace: str) -> dict[tuple[str, ...], dict[str, str]]:
    """PriorityClass-scoped quotas of a namespace: the classes they cover -> their hard limits."""
    found = {}
    for quota in plan.kind("ResourceQuota"):
        if quota["metadata"]["namespace"] != namespace or "scopeSelector" not in quota["spec"]:
            continue
        [expression] = quota["spec"]["scopeSelector"]["matchExpressions"]
        assert (expression["scopeName"], expression["operator"]) == ("PriorityClass", "In")
        found[tuple(sorted(expression["values"]))] = quota["spec"]["hard"]
    return found


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_tenant_namespace_enforces_pod_security(dev_plan, prod_plan, stack: str, name: str) -> None:
    namespace = plan_of(stack, dev_plan, prod_plan).manifest("Namespace", name)
    labels = namespace["metadata"]["labels"]

    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["gpu-platform.io/tenant"] == name


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_gpu_quota_equals_the_tenants_gpus(dev_plan, prod_plan, stack: str, name: str) -> None:
    quota = plan_of(stack, dev_plan, prod_plan).manifest("ResourceQuota", "gpu-quota", name)

    tenant = tenant_config(stack, name)
    # Every kind the stack's pools advertise is capped, at 0 where not given (dev's T4s are shared).
    shares = {"requests.nvidia.com/gpu.shared": str(tenant.get("gpuShares", 0))} if stack == "dev" else {}
    assert quota["spec"]["hard"] == {GPU_QUOTA: str(tenant.get("gpus", 0)), **shares}
    assert "scopeSelector" not in quota["spec"]


def test_every_tenant_has_a_gpu_quota(dev_plan: Plan, prod_plan: Plan) -> None:
    for stack, plan in (("dev", dev_plan), ("prod", prod_plan)):
        capped = {q["metadata"]["namespace"] for q in plan.kind("ResourceQuota") if GPU_QUOTA in q["spec"]["hard"]
                  and "scopeSelector" not in q["spec"]}
        assert capped == {t["name"] for t in tenants(stack)}


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_limit_range_defaults_cpu_and_memory_but_never_gpus(dev_plan, prod_plan, stack: str, name: str) -> None:
    """A GPU entry in a Container limit range is defaulted onto every container: CPU pods would then consume GPU
    quota (a `max` becomes the default) or, with a zero default, carry an nvidia.com/gpu request that makes the
    ExtendedResourceToleration admission plugin let them onto the tainted GPU nodes."""
    limit_range = plan_of(stack, dev_plan, prod_plan).manifest("LimitRange", "default-limits", name)
    [item] = [i for i in limit_range["spec"]["limits"] if i["type"] == "Container"]

    assert item["default"]["cpu"] and item["default"]["memory"] and item["defaultRequest"]["cpu"]
    assert all(GPU not in item.get(field, {}) for field in ("default", "defaultRequest", "max", "min"))


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_tenant_group_holds_the_tenant_role_in_its_namespace(dev_plan, prod_plan, stack: str, name: str) -> None:
    plan = plan_of(stack, dev_plan, prod_plan)
    binding = plan.manifest("RoleBinding", f"{name}-members", name)

    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": labels.TENANT_ROLE}
    assert plan.manifest("ClusterRole", labels.TENANT_ROLE)["rules"]
    group = tenant_config(stack, name).get("group", name)
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_tenants_cannot_use_system_priority_classes(dev_plan, prod_plan, stack: str, name: str) -> None:
    quotas = scoped_quotas(plan_of(stack, dev_plan, prod_plan), name)

    assert quotas[("system-cluster-critical", "system-node-critical")] == {"pods": "0"}


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_low_priority_tenants_cannot_claim_gpu_high(dev_plan, prod_plan, stack: str, name: str) -> None:
    quotas = scoped_quotas(plan_of(stack, dev_plan, prod_plan), name)

    if tenant_config(stack, name)["priorityClass"] == "gpu-low":
        assert quotas[("gpu-high",)] == {GPU_QUOTA: "0", **({"requests.nvidia.com/gpu.shared": "0"}
                                                             if stack == "dev" else {})}
    else:
        assert ("gpu-high",) not in quotas  # a high-priority tenant may use its own class


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_priority_classes_exist(dev_plan, prod_plan, stack: str) -> None:
    plan = plan_of(stack, dev_plan, prod_plan)
    high, low = plan.manifest("PriorityClass", "gpu-high"), plan.manifest("PriorityClass", "gpu-low")

    assert high["value"] > low["value"]
    assert high["preemptionPolicy"] == "PreemptLowerPriority"
    assert low["preemptionPolicy"] == "Never"
    assert not high.get("globalDefault") and not low.get("globalDefault")
    # Below the system classes (2000000000+), so node agents always win.
    assert high["value"] < 1_000_000_000


def test_tenant_objects_are_inside_the_tenant_namespace(dev_plan: Plan) -> None:
    for tenant in tenants("dev"):
        namespace = dev_plan.object("Namespace", tenant["name"])
        for kind in ("ResourceQuota", "LimitRange", "RoleBinding"):
            for resource in dev_plan.resources:
                manifest = resource["inputs"]
                if resource["type"].endswith(f":{kind}") and manifest["metadata"].get("namespace") == tenant["name"]:
                    assert namespace["urn"] in resource["dependencies"], manifest["metadata"]["name"]


def test_tenant_namespaces_are_protected_until_retired() -> None:
    """Removing a tenant in one edit cannot delete its namespace: the engine refuses to delete a protected one."""
    config = stack_config("dev")
    config["gpu-platform:tenants"][0]["retired"] = True
    retired = config["gpu-platform:tenants"][0]["name"]

    plan = render_stack("dev", config)

    namespaces = {r["inputs"]["metadata"]["name"]: r["options"]["protect"]
                  for r in plan.of_type("kubernetes:core/v1:Namespace")}
    tenant_names = {tenant["name"] for tenant in config["gpu-platform:tenants"]}
    assert {name: protect for name, protect in namespaces.items() if name in tenant_names} == {
        name: name != retired for name in tenant_names}


# -- fencing: compute quota, limit maxima, network ---------------------------------------------------------------


@pytest.mark.parametrize(("stack", "name"), TENANTS)
def test_cpu_pods_count_against_a_compute_quota(dev_plan, prod_plan, stack: str, name: str) -> None:
    plan = plan_of(stack, dev_plan, prod_plan)
    quota = plan.manifest("ResourceQuota", "compute-quota", name)
    limits = plan.manifest("LimitRange", "default-limits", name)

    assert set(quota["spec"]["hard"]) == {"requests.cpu", "requests.memory", "pods"}
    [container] = limits["spec"]["limits"]
    assert container["max"] == {"cpu": quota["spec"]["hard"]["requests.cpu"],
                                "memory": quota["spec"]["hard"]["requests.memory"]}


def test_compute_quota_follows_the_tenant_config() -> None:
    config = stack_config("prod")
    config["gpu-platform:tenants"][0].update(cpu="16", memory="64Gi", pods=40)
    plan = render_stack("prod", config)
    name = config["gpu-platform:tenants"][0]["name"]

    assert plan.manifest("ResourceQuota", "compute-quota", name)["spec"]["hard"] == {
        "requests.cpu": "16", "requests.memory": "64Gi", "pods": "40"}


@pytest.mark.parametrize(("stack", "scrapers"), [
    ("dev", ["openshift-monitoring", "openshift-user-workload-monitoring"]),
    ("prod", ["monitoring"]),
])
def test_tenant_namespaces_admit_only_themselves_and_monitoring(dev_plan, prod_plan, stack, scrapers) -> None:
    plan = plan_of(stack, dev_plan, prod_plan)
    for tenant in tenants(stack):
        fence = plan.manifest("NetworkPolicy", "tenant-fence", tenant["name"])
        assert fence["spec"]["podSelector"] == {} and fence["spec"]["policyTypes"] == ["Ingress", "Egress"]
        [rule] = fence["spec"]["ingress"]
        assert rule["from"][0] == {"podSelector": {}}
        assert [peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                for peer in rule["from"][1:]] == scrapers


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_tenant_pods_reach_everything_but_the_metadata_service(dev_plan, prod_plan, stack) -> None:
    """The node role's credentials are served at the metadata address: tenant egress excludes it (v4 and v6),
    and allows every pod of the cluster by selector (a CNI may leave pods out of CIDR rules)."""
    for tenant in tenants(stack):
        [rule] = plan_of(stack, dev_plan, prod_plan).manifest("NetworkPolicy", "tenant-fence", tenant["name"])[
            "spec"]["egress"]
        assert rule["to"] == [
            {"namespaceSelector": {}},
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
        ]


def test_monitoring_namespaces_can_be_set() -> None:
    config = stack_config("prod")
    config["gpu-platform:cluster"]["monitoringNamespaces"] = ["prometheus"]
    plan = render_stack("prod", config)
    name = config["gpu-platform:tenants"][0]["name"]

    [rule] = plan.manifest("NetworkPolicy", "tenant-fence", name)["spec"]["ingress"]
    assert rule["from"][1:] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prometheus"}}}]


def test_openshift_projects_are_for_admins_unless_the_stack_allows_them(dev_plan: Plan) -> None:
    """A self-provisioned project is a namespace outside every tenant's quota."""
    binding = dev_plan.manifest("ClusterRoleBindingPatch", "self-provisioners")
    assert binding["subjects"] == [] and binding["roleRef"]["name"] == "self-provisioner"
    assert binding["metadata"]["annotations"] == {"rbac.authorization.kubernetes.io/autoupdate": "false",
                                                  "pulumi.com/patchForce": "true"}
    config = stack_config("dev")
    config["gpu-platform:cluster"]["projectSelfProvisioning"] = True
    assert render_stack("dev", config).kind("ClusterRoleBindingPatch") == []


def test_trusted_namespaces_are_left_out_of_the_gpu_guard() -> None:
    config = stack_config("prod")
    config["gpu-platform:cluster"]["trustedNamespaces"] = ["logging"]
    binding = render_stack("prod", config).manifest("ValidatingAdmissionPolicyBinding", "gpu-platform-gpu-guard")
    assert "logging" in binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][1]["values"]


def test_members_are_bound_only_once_every_quota_is_enforced(prod_plan: Plan) -> None:
    # Quota admission enforces what a quota's status lists: `pulumi up` waits for each hard limit there
    # (pulumi-kubernetes pulumi.com/waitFor, all of a list) before the tenant's group gets in, so no pod is admitted
    # unbounded in between; and for this spec's digest, so that a copy of the quota from before a change cannot
    # satisfy the wait (ResourceQuotas have no generation to tell it apart).
    quotas = [r for r in prod_plan.resources if r["type"] == "kubernetes:core/v1:ResourceQuota"
              and r["inputs"]["metadata"]["namespace"] == "analytics"]
    assert len(quotas) == 4
    for quota in quotas:
        annotations, hard = quota["inputs"]["metadata"]["annotations"], quota["inputs"]["spec"]["hard"]
        digest = annotations[QUOTA_SPEC_DIGEST]
        assert json.loads(annotations[labels.WAIT_FOR]) == [
            f"jsonpath={{.metadata.annotations['{QUOTA_SPEC_DIGEST}']}}={digest}",
            *(f"jsonpath={{.status.hard['{key}']}}={value}" for key, value in sorted(hard.items()))]
    binding = prod_plan.object("RoleBinding", "analytics-members", "analytics")
    assert {quota["urn"] for quota in quotas} <= set(binding["dependencies"])


def test_a_quota_change_is_waited_for_under_a_new_digest() -> None:
    config = stack_config("prod")
    before = render_stack("prod", config).manifest("ResourceQuota", "gpu-quota", "analytics")
    tenant = next(t for t in config["gpu-platform:tenants"] if t["name"] == "analytics")
    tenant["gpus"] = tenant.get("gpus", 0) + 1
    after = render_stack("prod", config).manifest("ResourceQuota", "gpu-quota", "analytics")
    assert before["spec"] != after["spec"]
    assert before["metadata"]["annotations"][QUOTA_SPEC_DIGEST] != after["metadata"]["annotations"][QUOTA_SPEC_DIGEST]
