"""components.admission: the tenant pod policy's CEL, compiled and evaluated on pods, and as rendered."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components import labels
from components.admission import (CORDON_RULES, GUARD_POLICY_NAME, GUARD_VALIDATIONS, POLICY_NAME,
                                  UNSCHEDULABLE_TAINT, VALIDATIONS, VARIABLES, dedicated_validations,
                                  node_share_validations)
from fleet.partitioning import SHARED_GPU
from tests.cel import broken_rules, program
from stacks.config import parse_stack_config
from stacks.tenancy import node_shares
from tests.conftest import Plan, config_values


def admit(pod: dict[str, Any], tenant_class: str = labels.LOW_PRIORITY_CLASS, operation: str = "CREATE",
          validations: list = VALIDATIONS) -> list[str]:
    """The messages of the rules this pod breaks, evaluated as the API server does (variables first, in order)."""
    return broken_rules(VARIABLES, validations, pod, tenant_class=tenant_class, operation=operation)


GPU_POD = {"spec": {
    "priorityClassName": labels.LOW_PRIORITY_CLASS,
    "tolerations": [{"key": labels.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                    "resources": {"limits": {labels.GPU_RESOURCE: "2"}}}],
}}
CPU_POD = {"spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "1"}}}]}}


def zero_gpus(base: dict[str, Any], amount: Any) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    pod["spec"]["containers"][0]["resources"] = {"limits": {labels.GPU_RESOURCE: amount}}
    return pod


def annotated(base: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    return {**copy.deepcopy(base), "metadata": {"annotations": annotations}}


def variant(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    pod["spec"].update(spec)
    return pod


def without_gpu(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return pod


def test_every_expression_compiles() -> None:
    for expression in [*VARIABLES.values(), *(rule for rule, _ in [*VALIDATIONS, *GUARD_VALIDATIONS])]:
        program(expression)


@pytest.mark.parametrize("pod", [GPU_POD, CPU_POD, variant(GPU_POD, runtimeClassName="nvidia")],
                         ids=["gpu-pod", "cpu-pod", "gpu-pod-nvidia-runtime"])
def test_normal_pods_are_admitted(pod) -> None:
    assert admit(pod) == []


def test_a_gpu_high_tenant_may_use_gpu_high() -> None:
    assert admit(variant(GPU_POD, priorityClassName=labels.HIGH_PRIORITY_CLASS), labels.HIGH_PRIORITY_CLASS) == []


@pytest.mark.parametrize(("pod", "tenant_class", "reason"), [
    (without_gpu(GPU_POD), "gpu-low", "tolerates the GPU taint must request"),
    (variant(CPU_POD, tolerations=[{"operator": "Exists"}]), "gpu-low", "tolerates the GPU taint must request"),
    (variant(GPU_POD, priorityClassName="gpu-high"), "gpu-low", "may not use priority class gpu-high"),
    (variant(CPU_POD, priorityClassName="gpu-high"), "gpu-low", "may not use priority class gpu-high"),
    (variant(CPU_POD, priorityClassName="system-node-critical"), "gpu-high", "system-* and openshift-*"),
    (variant(CPU_POD, priorityClassName="openshift-user-critical"), "gpu-high", "system-* and openshift-*"),
    (variant(CPU_POD, runtimeClassName="nvidia"), "gpu-low", "the nvidia runtime classes need"),
    (variant(CPU_POD, containers=[{"name": "x", "image": "i:1",
                                   "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]),
     "gpu-low", "NVIDIA_VISIBLE_DEVICES is set by the device plugin"),
    (variant(GPU_POD, initContainers=[{"name": "x", "image": "i:1",
                                       "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]),
     "gpu-low", "NVIDIA_VISIBLE_DEVICES is set by the device plugin"),
    (variant(CPU_POD, nodeName="gpu-node-0"), "gpu-low", "spec.nodeName skips the GPU taint"),
    (variant(GPU_POD, nodeName="gpu-node-0"), "gpu-low", "spec.nodeName skips the GPU taint"),
    # Raw input, before the API server normalises it: an empty key tolerates every taint, "0m" is no GPU.
    (variant(CPU_POD, tolerations=[{"key": "", "operator": "Exists"}]), "gpu-low", "tolerates the GPU taint must"),
    (zero_gpus(GPU_POD, "0m"), "gpu-low", "tolerates the GPU taint must"),
    (variant(CPU_POD, runtimeClassName="nvidia-cdi"), "gpu-low", "the nvidia runtime classes need"),
    (variant(CPU_POD, runtimeClassName="nvidia-legacy"), "gpu-low", "the nvidia runtime classes need"),
    (annotated(CPU_POD, {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}), "gpu-low", "cdi.k8s.io/ annotations"),
    (annotated(GPU_POD, {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}), "gpu-low", "cdi.k8s.io/ annotations"),
    (variant(CPU_POD, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "a100"}]), "gpu-low",
     "resource claims (DRA) are not offered"),
], ids=["toleration-without-gpu", "tolerate-everything", "gpu-pod-gpu-high", "cpu-pod-gpu-high", "system-class",
        "openshift-class", "nvidia-runtime-without-gpu", "visible-devices-env", "visible-devices-in-init",
        "cpu-pod-names-node", "gpu-pod-names-node", "empty-key-tolerates-everything", "zero-milli-gpus",
        "nvidia-cdi-runtime", "nvidia-legacy-runtime", "cdi-annotation", "cdi-annotation-on-gpu-pod",
        "resource-claim"])
def test_abusive_pods_are_rejected(pod, tenant_class, reason) -> None:
    broken = admit(pod, tenant_class)
    assert any(reason in message for message in broken), broken


def test_an_ephemeral_container_is_held_to_the_pod_rules() -> None:
    """An ephemeral container added to a running CPU pod (pods/ephemeralcontainers, which the policy matches) may
    not ask the runtime for devices by environment; one without it may be added."""
    debug = {"name": "debug", "image": "busybox:1.36"}
    added = variant(variant(CPU_POD, nodeName="cpu-0"), ephemeralContainers=[
        {**debug, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}])
    assert any("in ephemeral containers too" in message for message in admit(added, operation="UPDATE"))
    assert admit(variant(variant(CPU_POD, nodeName="cpu-0"), ephemeralContainers=[debug]), operation="UPDATE") == []


def test_the_policies_match_ephemeral_containers(dev_plan: Plan) -> None:
    for name in (POLICY_NAME, GUARD_POLICY_NAME):
        rules = dev_plan.manifest("ValidatingAdmissionPolicy", name)["spec"]["matchConstraints"]["resourceRules"]
        assert rules[0]["resources"] == ["pods", "pods/ephemeralcontainers"]


def test_a_scheduled_pod_can_still_be_updated() -> None:
    """Once the scheduler has bound a pod its nodeName is set: an update (a label, a finalizer) is not refused."""
    assert admit(variant(GPU_POD, nodeName="gpu-node-0"), operation="UPDATE") == []


@pytest.mark.parametrize("amount", ["0", 0, "0m", "0.0"])
def test_a_zero_gpu_request_is_no_gpu_request(amount: Any) -> None:
    assert any("tolerates the GPU taint" in message for message in admit(zero_gpus(GPU_POD, amount)))


@pytest.mark.parametrize("amount", ["1", 1, "2000m"])
def test_any_form_of_a_gpu_request_is_one(amount: Any) -> None:
    assert admit(zero_gpus(GPU_POD, amount)) == []


@pytest.mark.parametrize(("pod", "reason"), [
    (GPU_POD, "is for tenants"),
    (zero_gpus(GPU_POD, "0m"), "only tenant pods that request GPUs tolerate"),
    (variant(CPU_POD, tolerations=[{"operator": "Exists"}]), "only tenant pods that request GPUs tolerate"),
    (variant(CPU_POD, nodeName="gpu-node-0"), "spec.nodeName skips the GPU taint"),
], ids=["gpu-pod", "toleration-without-gpu", "tolerate-everything", "names-node"])
def test_outside_tenant_namespaces_no_pod_gets_a_gpu(pod, reason) -> None:
    assert any(reason in message for message in admit(pod, validations=GUARD_VALIDATIONS))


def test_outside_tenant_namespaces_cpu_pods_are_admitted() -> None:
    assert admit(CPU_POD, validations=GUARD_VALIDATIONS) == []
    assert admit(variant(CPU_POD, nodeName="node-0"), operation="UPDATE", validations=GUARD_VALIDATIONS) == []


@pytest.mark.parametrize(("stack", "left_out", "prefix"), [
    ("dev", {"kube-system", "nvidia-gpu-operator", "openshift-nfd", "openshift-monitoring"}, "openshift-"),
    ("prod", {"kube-system", "gpu-operator", "node-feature-discovery", "monitoring"}, None),
])
def test_the_guard_binds_every_namespace_but_tenants_and_the_platforms(stack, left_out, prefix, dev_plan,
                                                                      prod_plan) -> None:
    plan = dev_plan if stack == "dev" else prod_plan
    binding = plan.manifest("ValidatingAdmissionPolicyBinding", GUARD_POLICY_NAME)
    tenant, names = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert tenant == {"key": labels.TENANT_LABEL, "operator": "DoesNotExist"}
    assert names["operator"] == "NotIn" and left_out <= set(names["values"])
    assert not {t["name"] for t in tenants_of(plan)} & set(names["values"])
    conditions = plan.manifest("ValidatingAdmissionPolicy", GUARD_POLICY_NAME)["spec"].get("matchConditions", [])
    assert [c["expression"] for c in conditions] == ([f"!request.namespace.startsWith('{prefix}')"] if prefix else [])


def tenants_of(plan: Plan) -> list[dict[str, Any]]:
    return [{"name": ns["inputs"]["metadata"]["name"]} for ns in plan.of_type("kubernetes:core/v1:Namespace")
            if labels.TENANT_LABEL in ns["inputs"]["metadata"].get("labels", {})]


def test_the_policy_is_bound_to_every_tenant_namespace(dev_plan: Plan) -> None:
    policy = dev_plan.manifest("ValidatingAdmissionPolicy", POLICY_NAME)
    binding = dev_plan.manifest("ValidatingAdmissionPolicyBinding", POLICY_NAME)
    rules = [v["expression"] for v in policy["spec"]["validations"]]
    assert rules[:len(VALIDATIONS)] == [rule for rule, _ in VALIDATIONS]
    # ... then the fleet's: dev has no dedicated pool or Karpenter pool, so each unit's share of a node alone.
    assert [v["message"] for v in policy["spec"]["validations"][len(VALIDATIONS):]] == [
        message for _, message in node_share_validations(node_shares(parse_stack_config(config_values("dev"))))]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [{"key": labels.TENANT_LABEL, "operator": "Exists"}]
    for namespace in dev_plan.of_type("kubernetes:core/v1:Namespace"):
        meta = namespace["inputs"]["metadata"]
        # The admission gate's probe namespace carries the tenant label (so the policy binds it) and is no tenant's.
        if labels.TENANT_LABEL in meta.get("labels", {}) and labels.ADMISSION_PROBE_LABEL not in meta["labels"]:
            assert meta["labels"][labels.TENANT_PRIORITY_LABEL] in (labels.HIGH_PRIORITY_CLASS,
                                                                    labels.LOW_PRIORITY_CLASS)


def test_tenant_namespaces_are_created_only_after_the_policy_is_bound(dev_plan: Plan) -> None:
    binding = dev_plan.object("ValidatingAdmissionPolicyBinding", POLICY_NAME)["urn"]
    tenants = [namespace for namespace in dev_plan.of_type("kubernetes:core/v1:Namespace")
               if labels.TENANT_LABEL in namespace["inputs"]["metadata"].get("labels", {})]
    assert tenants and all(binding in namespace["dependencies"] for namespace in tenants)


# -- kinds of GPU and dedicated pools ---------------------------------------------------------------------------


def asking(resources: dict[str, str], **spec: Any) -> dict[str, Any]:
    pod = copy.deepcopy(GPU_POD)
    pod["spec"]["containers"][0]["resources"] = {"limits": resources}
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize("resources", [{SHARED_GPU: "1"}, {"nvidia.com/mig-1g.10gb": "2"},
                                       {"nvidia.com/mig-1g.10gb.me": "1"}])
def test_a_share_or_a_mig_slice_is_a_gpu_request_that_may_tolerate_the_taint(resources: dict[str, str]) -> None:
    assert admit(asking(resources)) == []


def test_a_cpu_pod_tolerating_the_taint_with_a_zero_slice_is_refused() -> None:
    [(_, text)] = [rule for rule in VALIDATIONS if rule[0] == "variables.requestsGpu || !variables.toleratesGpuTaint"]

    assert admit(asking({"nvidia.com/mig-1g.10gb": "0"})) == [text]


@pytest.mark.parametrize("section", ["limits", "requests"])
def test_two_shares_in_one_container_are_refused_with_the_reason(section: str) -> None:
    pod = asking({})
    pod["spec"]["containers"][0]["resources"] = {section: {SHARED_GPU: "2"}}

    [text] = admit(pod)

    assert f"one {SHARED_GPU}" in text and "time slice of one GPU" in text


def test_one_share_in_each_of_two_containers_is_admitted() -> None:
    pod = asking({SHARED_GPU: "1"})
    pod["spec"]["containers"].append({**pod["spec"]["containers"][0], "name": "sidecar"})

    assert admit(pod) == []


OWNERS = {"a10g-search": ("search-ranking", "ads")}
DEDICATED_RULES = [*VALIDATIONS, *dedicated_validations(OWNERS)]
DEDICATED_TOLERATION = {"key": labels.DEDICATED_TAINT_KEY, "operator": "Equal", "value": "a10g-search",
                        "effect": "NoSchedule"}


def on_dedicated(namespace_labels: dict[str, str], **spec: Any) -> list[str]:
    pod = asking({labels.GPU_RESOURCE: "1"}, **spec)
    return broken_rules(VARIABLES, DEDICATED_RULES, pod, tenant_class=labels.LOW_PRIORITY_CLASS,
                        namespace_labels=namespace_labels)


OWNER = {labels.DEDICATED_POOL_LABEL.format(pool="a10g-search"): "true"}


def test_an_owner_may_tolerate_and_select_its_dedicated_pool() -> None:
    tolerations = [*GPU_POD["spec"]["tolerations"], DEDICATED_TOLERATION]

    assert on_dedicated(OWNER, tolerations=tolerations, nodeSelector={labels.POOL_LABEL: "a10g-search"}) == []


@pytest.mark.parametrize("spec", [
    {"tolerations": [*GPU_POD["spec"]["tolerations"], DEDICATED_TOLERATION]},
    {"nodeSelector": {labels.POOL_LABEL: "a10g-search"}},
], ids=["tolerates", "selects"])
def test_another_tenant_is_refused_a_dedicated_pool_naming_its_owners(spec: dict[str, Any]) -> None:
    [text] = on_dedicated({}, **spec)

    assert "a10g-search is dedicated to search-ranking, ads" in text


def test_tolerating_every_dedicated_pool_or_every_taint_is_refused() -> None:
    every_dedicated = {"key": labels.DEDICATED_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

    assert len(on_dedicated(OWNER, tolerations=[*GPU_POD["spec"]["tolerations"], every_dedicated])) == 1
    assert len(on_dedicated(OWNER, tolerations=[{"operator": "Exists"}])) == 1


def test_without_dedicated_pools_no_rule_is_added() -> None:
    assert dedicated_validations({}) == []


def test_the_dedicated_rules_compile() -> None:
    for rule, _ in dedicated_validations(OWNERS):
        program(rule)


@pytest.mark.parametrize("toleration", [
    {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    {"key": UNSCHEDULABLE_TAINT, "operator": "Exists"},
    {"operator": "Exists"},
    {"key": "", "operator": "Exists", "effect": "NoSchedule"},
])
def test_a_tenant_pod_does_not_tolerate_a_cordon(toleration: dict[str, str]) -> None:
    """In either tenancy mode, with or without dedicated pools: a cordon holds every tenant pod off."""
    pod = variant(GPU_POD, tolerations=[*GPU_POD["spec"]["tolerations"], toleration])
    assert set(admit(pod)) & {message for _, message in CORDON_RULES}


SHARES = {labels.GPU_RESOURCE: (10800, 44236), SHARED_GPU: (900, 3686)}


def unit_pod(gpus: dict[str, str], cpu: str, memory: str = "1Gi", init_cpu: str | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(GPU_POD)
    pod["spec"]["containers"][0]["resources"] = {"limits": gpus, "requests": {**gpus, "cpu": cpu, "memory": memory}}
    if init_cpu:
        pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox",
                                          "resources": {"requests": {"cpu": init_cpu}}}]
    return pod


@pytest.mark.parametrize("pod, refused", [
    (unit_pod({SHARED_GPU: "1"}, "900m"), False),
    (unit_pod({SHARED_GPU: "1"}, "3800m"), True),  # one share and most of a 4-vCPU node
    (unit_pod({SHARED_GPU: "1"}, "500m", memory="4Gi"), True),
    (unit_pod({SHARED_GPU: "1"}, "500m", init_cpu="1"), True),  # init containers count too
    (unit_pod({labels.GPU_RESOURCE: "2"}, "21600m", memory="86Gi"), False),  # two GPUs, two shares of the node
    (unit_pod({labels.GPU_RESOURCE: "2"}, "21601m"), True),
    (unit_pod({"nvidia.com/mig-1g.5gb": "1"}, "40"), False),  # a kind no pool with a known shape advertises
    (without_gpu(GPU_POD), False),
])
def test_a_gpu_pod_asks_for_at_most_its_units_share_of_a_node(pod: dict[str, Any], refused: bool) -> None:
    rules = node_share_validations(SHARES)
    assert bool(admit(pod, validations=rules)) == refused


def test_a_units_share_is_the_least_over_the_pools_that_advertise_it() -> None:
    """partitioned: the time-sliced L4 pool (g6.xlarge, 4 vCPUs, 16 GiB, 4 shares) sets a share's; 90% of a node
    goes to its GPUs' pods."""
    shares = node_shares(parse_stack_config(config_values("partitioned")))
    assert shares[SHARED_GPU] == (4 * 1000 * 9 // 10 // 4, 16384 * 9 // 10 // 4)
    assert set(shares) == {kind for pool in parse_stack_config(config_values("partitioned")).node_pools
                           if pool.bring_your_own is None for kind in pool.advertised_per_node}
