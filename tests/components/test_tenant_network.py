"""components.tenant_network: tenant networks as NetworkAttachmentDefinitions, the network fence's CEL, and the
docs/tuning.md's training job through both admission policies and the policy pack."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml

from components import admission, labels, tenant_network
from gpuctl.check import check_plan
from tests.cel import broken_rules
from tests.conftest import ROOT, Plan, render_stack, stack_config

def evaluate(policy, pod: dict[str, Any], namespace: str, tenant_class: str) -> list[str]:
    """Messages of the rules the pod breaks, as the API server evaluates the policy (variables first, in order)."""
    return broken_rules(policy.VARIABLES, policy.VALIDATIONS, pod, namespace=namespace, tenant_class=tenant_class)


def admit(pod: dict[str, Any], namespace: str = "vision", tenant_class: str = labels.HIGH_PRIORITY_CLASS) -> list[str]:
    return [*evaluate(admission, pod, namespace, tenant_class), *evaluate(tenant_network, pod, namespace, tenant_class)]


def readme_jobs() -> list[dict[str, Any]]:
    section = (ROOT / "docs" / "tuning.md").read_text().split("## A training job", 1)[1]
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)[:1]]


def job_pod(job: dict[str, Any]) -> dict[str, Any]:
    template = job["spec"]["template"]
    return {"metadata": {**template.get("metadata", {}), "namespace": job["metadata"]["namespace"]},
            "spec": template["spec"]}


def networked(annotation: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {tenant_network.NETWORKS_ANNOTATION: annotation}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def test_network_attachment_in_the_tenant_namespace(onprem_plan: Plan) -> None:
    nad = onprem_plan.manifest("NetworkAttachmentDefinition", "collective", "vision")
    assert json.loads(nad["spec"]["config"]) == {
        "cniVersion": "0.3.1", "name": "collective", "type": "macvlan", "master": "ens6f1", "mode": "bridge",
        "ipam": {"type": "whereabouts", "range": "10.20.0.0/24"}}
    resource = onprem_plan.object("NetworkAttachmentDefinition", "collective", "vision")
    assert onprem_plan.depends_on(resource, "tenant-vision-namespace")


def test_sriov_network_names_its_device_resource() -> None:
    config = stack_config("onprem")
    config["gpu-platform:tenants"][2]["networks"] = [{
        "name": "rdma", "type": "sriov", "resourceName": "openshift.io/mlxnics", "vlan": 100,
        "ipam": {"type": "host-local", "range": "10.30.0.0/24", "gateway": "10.30.0.1"}}]
    nad = render_stack("onprem", config).manifest("NetworkAttachmentDefinition", "rdma", "nlp-research")
    assert nad["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/resourceName": "openshift.io/mlxnics"}
    assert json.loads(nad["spec"]["config"]) == {
        "cniVersion": "0.3.1", "name": "rdma", "type": "sriov", "vlan": 100,
        "ipam": {"type": "host-local", "subnet": "10.30.0.0/24", "gateway": "10.30.0.1"}}


def test_network_fence_is_bound_to_tenant_namespaces(onprem_plan: Plan) -> None:
    binding = onprem_plan.manifest("ValidatingAdmissionPolicyBinding", tenant_network.POLICY_NAME)
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": labels.TENANT_LABEL, "operator": "Exists"}]
    nad = onprem_plan.object("NetworkAttachmentDefinition", "collective", "vision")
    assert onprem_plan.depends_on(nad, "tenant-network-admission-binding")


@pytest.mark.parametrize("annotation", [
    "collective", "vision/collective@net1", "collective@net1, vision/other", '[{"name": "collective"}]',
    '[{"name": "collective", "namespace": "vision", "interface": "net1"}]'])
def test_own_networks_are_admitted(annotation: str) -> None:
    assert evaluate(tenant_network, networked(annotation), "vision", labels.LOW_PRIORITY_CLASS) == []


@pytest.mark.parametrize("annotation", [
    "nlp-research/collective", "collective,nlp-research/collective", "visionx/collective",
    '[{"name": "collective", "namespace": "nlp-research"}]',
    '[{"name": "collective", "\\u006eamespace": "nlp-research"}]',  # a JSON escape Multus would decode
    '[{"namespace": "nlp-research", "name": "collective"}]'])
def test_other_namespaces_networks_are_refused(annotation: str) -> None:
    [message] = evaluate(tenant_network, networked(annotation), "vision", labels.LOW_PRIORITY_CLASS)
    assert "own namespace" in message


@pytest.mark.parametrize("value", ["collective", "vision/collective", '[{"name": "collective"}]', ""])
def test_a_tenant_pod_may_not_replace_its_cluster_network(value: str) -> None:
    # Multus resolves a bare default-network name in its own namespace, and the pod would leave the network its
    # namespace's NetworkPolicy fences.
    pod = networked("collective")
    pod["metadata"]["annotations"]["v1.multus-cni.io/default-network"] = value
    [message] = evaluate(tenant_network, pod, "vision", labels.LOW_PRIORITY_CLASS)
    assert message.startswith("v1.multus-cni.io/default-network is refused")


def test_readme_job_passes_both_admission_policies() -> None:
    [job] = readme_jobs()
    pod = job_pod(job)
    assert admit(pod) == []
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"]  # guaranteed: whole cores from the static CPU manager
    assert resources["limits"]["hugepages-1Gi"] == "16Gi"


def test_readme_job_passes_the_policy_pack(dev_plan: Plan) -> None:
    [job] = readme_jobs()
    doc = copy.deepcopy(dev_plan.document)
    doc["resources"].append({"urn": "urn:pulumi:dev::gpu-platform::kubernetes:batch/v1:Job::resnet-train",
                             "type": "kubernetes:batch/v1:Job", "name": "resnet-train", "custom": True,
                             "parent": None, "dependencies": [], "inputs": job, "options": {}})
    assert check_plan(doc) == []
    # its pool exists, is tuned, and has the hugepages the job asks for
    pool = job["spec"]["template"]["spec"]["nodeSelector"][labels.POOL_LABEL]
    config = {p["name"]: p for p in stack_config("dev")["gpu-platform:nodePools"]}[pool]
    assert config["profile"]["hugepages"]["1Gi"] >= 16


def test_network_variant_passes_admission_and_the_pack_and_another_tenants_network_does_not(
        onprem_plan: Plan) -> None:
    [job] = readme_jobs()
    job = copy.deepcopy(job)
    template = job["spec"]["template"]
    template["metadata"] = {"annotations": {tenant_network.NETWORKS_ANNOTATION: "collective@net1"}}
    template["spec"]["nodeSelector"] = {"example.com/gpu-pool": "dgx-a100"}
    for section in ("requests", "limits"):
        del template["spec"]["containers"][0]["resources"][section]["hugepages-1Gi"]
    del template["spec"]["volumes"], template["spec"]["containers"][0]["volumeMounts"]
    assert admit(job_pod(job)) == []
    doc = copy.deepcopy(onprem_plan.document)
    doc["resources"].append({"urn": "urn:pulumi:onprem::gpu-platform::kubernetes:batch/v1:Job::resnet-train",
                             "type": "kubernetes:batch/v1:Job", "name": "resnet-train", "custom": True,
                             "parent": None, "dependencies": [], "inputs": job, "options": {}})
    assert check_plan(doc) == []
    # the same pod reaching for another tenant's network is refused
    template["metadata"]["annotations"][tenant_network.NETWORKS_ANNOTATION] = "nlp-research/collective"
    assert len(admit(job_pod(job))) == 1


def test_efa_variant_passes_admission_and_the_pack(prod_plan: Plan) -> None:
    [job] = readme_jobs()
    job = copy.deepcopy(job)
    job["metadata"]["namespace"] = "llm-training"
    template = job["spec"]["template"]
    template["spec"]["nodeSelector"] = {labels.POOL_LABEL: "h100-training"}
    for section in ("requests", "limits"):
        template["spec"]["containers"][0]["resources"][section]["vpc.amazonaws.com/efa"] = "16"
    assert admit(job_pod(job), "llm-training") == []
    doc = copy.deepcopy(prod_plan.document)
    doc["resources"].append({"urn": "urn:pulumi:prod::gpu-platform::kubernetes:batch/v1:Job::llm-train",
                             "type": "kubernetes:batch/v1:Job", "name": "llm-train", "custom": True,
                             "parent": None, "dependencies": [], "inputs": job, "options": {}})
    assert check_plan(doc) == []


@pytest.mark.parametrize(("tenant_retired", "network_retired", "protected"), [
    (False, False, True), (True, False, False), (False, True, False)])
def test_an_attachment_is_protected_until_its_tenant_or_itself_is_retired(tenant_retired: bool, network_retired: bool,
                                                                         protected: bool) -> None:
    # Removing a tenant in one change would otherwise lose its attachments before the engine stops at the namespace.
    config = stack_config("onprem")
    vision = next(t for t in config["gpu-platform:tenants"] if t["name"] == "vision")
    vision["retired"] = tenant_retired
    vision["networks"][0]["retired"] = network_retired
    [attachment] = [r for r in render_stack("onprem", config).resources
                    if r["type"].endswith(":NetworkAttachmentDefinition")]
    assert attachment["options"].get("protect", False) is protected
