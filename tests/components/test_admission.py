"""components.admission: the tenant pod policy's CEL, compiled and evaluated on pods, and as rendered."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest

from components import labels
from components.admission import POLICY_NAME, VALIDATIONS, VARIABLES
from tests.conftest import Plan

ENVIRONMENT = celpy.Environment()
PROGRAMS = {key: ENVIRONMENT.program(ENVIRONMENT.compile(expression)) for key, expression in VARIABLES.items()}
RULES = [(ENVIRONMENT.program(ENVIRONMENT.compile(rule)), message) for rule, message in VALIDATIONS]


def admit(pod: dict[str, Any], tenant_class: str = labels.LOW_PRIORITY_CLASS, operation: str = "CREATE") -> list[str]:
    """The messages of the rules this pod breaks, evaluated as the API server does (variables first, in order)."""
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(pod),
        "request": celpy.json_to_cel({"operation": operation}),
        "namespaceObject": celpy.json_to_cel(
            {"metadata": {"name": "team", "labels": {labels.TENANT_PRIORITY_LABEL: tenant_class}}}),
    }
    variables: dict[str, Any] = {}
    for key, program in PROGRAMS.items():
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()})
        variables[key] = program.evaluate(activation)
    activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): v for k, v in variables.items()})
    return [message for program, message in RULES if not program.evaluate(activation)]


GPU_POD = {"spec": {
    "priorityClassName": labels.LOW_PRIORITY_CLASS,
    "tolerations": [{"key": labels.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                    "resources": {"limits": {labels.GPU_RESOURCE: "2"}}}],
}}
CPU_POD = {"spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "1"}}}]}}


def variant(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    pod = copy.deepcopy(base)
    pod["spec"].update(spec)
    return pod


def without_gpu(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return pod


def test_every_expression_compiles() -> None:
    assert len(PROGRAMS) == len(VARIABLES) and len(RULES) == len(VALIDATIONS)


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
    (variant(CPU_POD, runtimeClassName="nvidia"), "gpu-low", "runtimeClassName nvidia needs"),
    (variant(CPU_POD, containers=[{"name": "x", "image": "i:1",
                                   "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]),
     "gpu-low", "NVIDIA_VISIBLE_DEVICES is set by the device plugin"),
    (variant(GPU_POD, initContainers=[{"name": "x", "image": "i:1",
                                       "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]),
     "gpu-low", "NVIDIA_VISIBLE_DEVICES is set by the device plugin"),
    (variant(CPU_POD, nodeName="gpu-node-0"), "gpu-low", "spec.nodeName skips the GPU taint"),
    (variant(GPU_POD, nodeName="gpu-node-0"), "gpu-low", "spec.nodeName skips the GPU taint"),
], ids=["toleration-without-gpu", "tolerate-everything", "gpu-pod-gpu-high", "cpu-pod-gpu-high", "system-class",
        "openshift-class", "nvidia-runtime-without-gpu", "visible-devices-env", "visible-devices-in-init",
        "cpu-pod-names-node", "gpu-pod-names-node"])
def test_abusive_pods_are_rejected(pod, tenant_class, reason) -> None:
    broken = admit(pod, tenant_class)
    assert any(reason in message for message in broken), broken


def test_a_scheduled_pod_can_still_be_updated() -> None:
    """Once the scheduler has bound a pod its nodeName is set: an update (a label, a finalizer) is not refused."""
    assert admit(variant(GPU_POD, nodeName="gpu-node-0"), operation="UPDATE") == []


def test_a_zero_gpu_request_is_no_gpu_request() -> None:
    pod = copy.deepcopy(GPU_POD)
    pod["spec"]["containers"][0]["resources"] = {"limits": {labels.GPU_RESOURCE: "0"}}
    assert any("tolerates the GPU taint" in message for message in admit(pod))


def test_the_policy_is_bound_to_every_tenant_namespace(dev_plan: Plan) -> None:
    policy = dev_plan.manifest("ValidatingAdmissionPolicy", POLICY_NAME)
    binding = dev_plan.manifest("ValidatingAdmissionPolicyBinding", POLICY_NAME)
    assert [v["expression"] for v in policy["spec"]["validations"]] == [rule for rule, _ in VALIDATIONS]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [{"key": labels.TENANT_LABEL, "operator": "Exists"}]
    for namespace in dev_plan.of_type("kubernetes:core/v1:Namespace"):
        meta = namespace["inputs"]["metadata"]
        if labels.TENANT_LABEL in meta.get("labels", {}):
            assert meta["labels"][labels.TENANT_PRIORITY_LABEL] in (labels.HIGH_PRIORITY_CLASS,
                                                                    labels.LOW_PRIORITY_CLASS)


def test_tenant_namespaces_are_created_only_after_the_policy_is_bound(dev_plan: Plan) -> None:
    binding = dev_plan.object("ValidatingAdmissionPolicyBinding", POLICY_NAME)["urn"]
    tenants = [namespace for namespace in dev_plan.of_type("kubernetes:core/v1:Namespace")
               if labels.TENANT_LABEL in namespace["inputs"]["metadata"].get("labels", {})]
    assert tenants and all(binding in namespace["dependencies"] for namespace in tenants)
