"""The karpenter placement on a real render (examples/Pulumi.karpenter.yaml): one NodePool and one EC2NodeClass per
pool, each field as Karpenter v1.15 reads it, both after the driver of the pool's kernel."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import pytest
import yaml

from tests.cel import program
from tests.conftest import ROOT, Plan, render_stack, stack_config

NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
KERNEL = "feature.node.kubernetes.io/kernel-version.full"
POOLS = ["a10g-training", "l4-search"]


def node_pool(plan: Plan, name: str) -> dict[str, Any]:
    return plan.manifest("NodePool", name)


def node_class(plan: Plan, name: str) -> dict[str, Any]:
    return plan.manifest("EC2NodeClass", name)


def test_one_node_pool_and_node_class_per_pool_and_nothing_on_aws(karpenter_plan: Plan) -> None:
    assert sorted(r["inputs"]["metadata"]["name"] for r in karpenter_plan.of_type(NODE_POOL)) == POOLS
    assert sorted(r["inputs"]["metadata"]["name"] for r in karpenter_plan.of_type(NODE_CLASS)) == POOLS
    assert not [r for r in karpenter_plan.resources if r["type"].startswith(("aws:", "pulumi:providers:aws"))]
    for name in POOLS:
        assert node_pool(karpenter_plan, name)["spec"]["template"]["spec"]["nodeClassRef"] == {
            "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name}


def test_nodes_register_tainted_with_the_pool_and_kernel_labels(karpenter_plan: Plan) -> None:
    training = node_pool(karpenter_plan, "a10g-training")["spec"]["template"]
    search = node_pool(karpenter_plan, "l4-search")["spec"]["template"]

    assert training["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert search["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                        {"key": "gpu-platform.io/dedicated", "value": "l4-search",
                                         "effect": "NoSchedule"}]
    assert training["metadata"]["labels"]["gpu-platform.io/pool"] == "a10g-training"
    assert training["metadata"]["labels"][KERNEL] == "6.8.0-1021-aws"


def test_the_template_carries_every_label_the_kernels_driver_selects(karpenter_plan: Plan) -> None:
    """So a new node matches its NVIDIADriver the moment it registers (and kwok nodes do in the e2e suite)."""
    driver = karpenter_plan.manifest("NVIDIADriver", "nvidia-driver-ubuntu22-04-6-8-0-1021-aws")
    template_labels = node_pool(karpenter_plan, "a10g-training")["spec"]["template"]["metadata"]["labels"]

    assert driver["spec"]["nodeSelector"].items() <= template_labels.items()


def test_requirements_pin_the_type_capacity_type_and_zones(karpenter_plan: Plan) -> None:
    training = node_pool(karpenter_plan, "a10g-training")["spec"]["template"]["spec"]["requirements"]
    search = node_pool(karpenter_plan, "l4-search")["spec"]["template"]["spec"]["requirements"]

    assert training == [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.12xlarge"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a", "us-east-1b"]}]
    assert [r["key"] for r in search] == ["node.kubernetes.io/instance-type", "karpenter.sh/capacity-type"]
    assert search[1]["values"] == ["on-demand", "spot"]


@pytest.mark.parametrize(("name", "limits"), [("a10g-training", {"nodes": "4", "nvidia.com/gpu": "16"}),
                                              ("l4-search", {"nodes": "4", "nvidia.com/gpu": "4"})])
def test_limits_are_the_maximum_nodes_and_their_gpus(karpenter_plan: Plan, name: str, limits: dict) -> None:
    assert node_pool(karpenter_plan, name)["spec"]["limits"] == limits


def test_running_jobs_are_not_consolidated_away_and_nodes_do_not_expire(karpenter_plan: Plan) -> None:
    spec = node_pool(karpenter_plan, "a10g-training")["spec"]

    assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m",
                                  "budgets": [{"nodes": "1"}]}
    assert spec["template"]["spec"]["expireAfter"] == "Never"


def test_the_user_may_let_karpenter_consolidate_underused_nodes() -> None:
    config = stack_config("karpenter")
    config["gpu-platform:nodePools"][0]["karpenter"].update(consolidation="WhenEmptyOrUnderutilized",
                                                           disruptionBudget="25%", expireAfter="720h")
    spec = node_pool(render_stack("karpenter", config), "a10g-training")["spec"]

    assert spec["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert spec["disruption"]["budgets"] == [{"nodes": "25%"}]
    assert spec["template"]["spec"]["expireAfter"] == "720h"


def test_the_node_class_pins_the_ami_by_id_and_keeps_pods_from_the_metadata_service(karpenter_plan: Plan) -> None:
    spec = node_class(karpenter_plan, "a10g-training")["spec"]

    assert spec["amiSelectorTerms"] == [{"id": "ami-0e1f2a3b4c5d6e7f8"}]
    assert spec["amiFamily"] == "AL2"  # required without an alias; its bootstrap.sh user data works on Ubuntu
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
    assert spec["role"] == "KarpenterNodeRole-staging-gpu"
    assert spec["subnetSelectorTerms"] == spec["securityGroupSelectorTerms"] == [
        {"tags": {"karpenter.sh/discovery": "staging-gpu"}}]
    assert spec["blockDeviceMappings"] == [{"deviceName": "/dev/sda1", "rootVolume": True, "ebs": {
        "volumeSize": "200Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}}]
    assert node_class(karpenter_plan, "a10g-training")["metadata"]["annotations"]["gpu-platform.io/kernel"] \
        == "6.8.0-1021-aws"


@pytest.mark.parametrize("name", POOLS)
def test_the_node_class_and_pool_wait_for_the_driver_of_their_kernel(karpenter_plan: Plan, name: str) -> None:
    driver = "driver-ubuntu22-04-6-8-0-1021-aws"
    node_class_resource = karpenter_plan.named(f"pool-{name}-node-class")
    node_pool_resource = next(r for r in karpenter_plan.of_type(NODE_POOL) if r["name"] == f"pool-{name}")

    assert karpenter_plan.depends_on(node_class_resource, driver)
    assert karpenter_plan.depends_on(node_pool_resource, driver)
    assert karpenter_plan.depends_on(node_pool_resource, f"pool-{name}-node-class")
    assert node_class_resource["options"]["protect"] and node_pool_resource["options"]["protect"]


def test_a_new_image_and_kernel_declare_the_new_driver_first_and_change_the_template() -> None:
    """The new kernel's NVIDIADriver is what the pool's objects wait for; the kernel label drifts the NodePool's
    template (Karpenter's drift, which a KWOKNodeClass change alone would not show)."""
    config = stack_config("karpenter")
    config["gpu-platform:nodePools"][0].update(kernel="6.8.0-1024-aws", image="ami-0f2a3b4c5d6e7f809")
    plan = render_stack("karpenter", config)
    new = "driver-ubuntu22-04-6-8-0-1024-aws"

    assert plan.depends_on(plan.named("pool-a10g-training-node-class"), new)
    assert plan.depends_on(next(r for r in plan.of_type(NODE_POOL) if r["name"] == "pool-a10g-training"), new)
    assert node_pool(plan, "a10g-training")["spec"]["template"]["metadata"]["labels"][KERNEL] == "6.8.0-1024-aws"
    assert node_class(plan, "a10g-training")["spec"]["amiSelectorTerms"] == [{"id": "ami-0f2a3b4c5d6e7f809"}]
    # The other pool still boots the old kernel: its driver stays.
    assert plan.manifest("NVIDIADriver", "nvidia-driver-ubuntu22-04-6-8-0-1021-aws")


def test_pulumi_up_waits_for_no_node(karpenter_plan: Plan) -> None:
    for name in POOLS:
        for manifest in (node_pool(karpenter_plan, name), node_class(karpenter_plan, name)):
            assert manifest["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


# -- the CRDs' own rules (CEL), which the offline schema check counts but does not evaluate ------------------------

CRDS = ROOT.parent / "shared" / "reference" / "crds"
CRD_FILES = {"NodePool": "karpenter.sh_nodepools.yaml", "EC2NodeClass": "karpenter.k8s.aws_ec2nodeclasses.yaml"}


def _rules(schema: dict[str, Any], value: Any, path: str) -> list[tuple[str, str, str, Any]]:
    """(path, rule, message, value) of every x-kubernetes-validations rule the API server evaluates on `value`;
    transition rules (oldSelf) only run on updates and are left out."""
    if value is None:
        return []
    found = [(path, rule["rule"], rule.get("message", rule["rule"]), value)
             for rule in schema.get("x-kubernetes-validations") or [] if "oldSelf" not in rule["rule"]]
    if isinstance(value, dict):
        for key, child in value.items():
            sub = (schema.get("properties") or {}).get(key) or (schema.get("additionalProperties") or None)
            if isinstance(sub, dict):
                found += _rules(sub, child, f"{path}.{key}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _rules(schema.get("items") or {}, child, f"{path}[{index}]")
    return found


def broken_crd_rules(manifest: dict[str, Any]) -> list[str]:
    document = yaml.safe_load((CRDS / CRD_FILES[manifest["kind"]]).read_text())
    [version] = [v for v in document["spec"]["versions"] if f"{document['spec']['group']}/{v['name']}"
                 == manifest["apiVersion"]]
    return [f"{path}: {message}" for path, rule, message, value in
            _rules(version["schema"]["openAPIV3Schema"], manifest, "")
            if not program(rule).evaluate({"self": celpy.json_to_cel(value)})]


@pytest.mark.skipif(not CRDS.is_dir(), reason=f"{CRDS} is not beside the project here")
@pytest.mark.parametrize("name", POOLS)
def test_the_objects_keep_every_rule_of_karpenters_crds(karpenter_plan: Plan, name: str) -> None:
    assert broken_crd_rules(node_pool(karpenter_plan, name)) == []
    assert broken_crd_rules(node_class(karpenter_plan, name)) == []


@pytest.mark.skipif(not CRDS.is_dir(), reason=f"{CRDS} is not beside the project here")
def test_the_rule_check_can_fail(karpenter_plan: Plan) -> None:
    pool = copy.deepcopy(node_pool(karpenter_plan, "a10g-training"))
    pool["spec"]["template"]["metadata"]["labels"]["karpenter.k8s.aws/instance-size"] = "12xlarge"
    pool["spec"]["template"]["metadata"]["labels"]["karpenter.k8s.aws/pool"] = "x"
    node_class_manifest = copy.deepcopy(node_class(karpenter_plan, "a10g-training"))
    del node_class_manifest["spec"]["amiFamily"]

    assert any('label domain "karpenter.k8s.aws" is restricted' in error for error in broken_crd_rules(pool))
    assert broken_crd_rules(node_class_manifest) == [
        ".spec: must specify amiFamily if amiSelectorTerms does not contain an alias"]


def test_the_old_kernels_driver_stays_while_a_node_runs_it_and_goes_on_evidence() -> None:
    """Both pools move to a new image and kernel: nodes Karpenter has not replaced yet keep their driver."""
    from fleet.kernels import KernelTarget, ObservedNode

    config = stack_config("karpenter")
    for entry in config["gpu-platform:nodePools"]:
        entry.update(kernel="6.8.0-1024-aws", image="ami-0f2a3b4c5d6e7f809")
    old = "nvidia-driver-ubuntu22-04-6-8-0-1021-aws"
    running = [ObservedNode("ip-10-0-1-7", KernelTarget("ubuntu22.04", "6.8.0-1021-aws"))]

    assert old in [d["metadata"]["name"] for d in render_stack("karpenter", config, running).kind("NVIDIADriver")]
    assert old not in [d["metadata"]["name"] for d in render_stack("karpenter", config, []).kind("NVIDIADriver")]


def test_a_stack_may_mix_auto_scaling_groups_and_karpenter_pools() -> None:
    config = stack_config("staging")
    config["gpu-platform:cluster"]["karpenter"] = {"nodeRole": "KarpenterNodeRole-staging-gpu"}
    config["gpu-platform:nodePools"].append({
        "name": "a10g-burst", "instanceType": "g5.12xlarge", "replicas": 0, "maxReplicas": 2, "os": "ubuntu22.04",
        "kernel": "6.8.0-1021-aws", "image": "ami-0e1f2a3b4c5d6e7f8", "karpenter": {}})
    plan = render_stack("staging", config)
    groups = sorted(r["inputs"]["name"] for r in plan.of_type("aws:autoscaling/group:Group"))

    assert groups == ["staging-gpu-gpu-a10g-batch", "staging-gpu-gpu-l4-inference"]
    assert [r["inputs"]["metadata"]["name"] for r in plan.of_type(NODE_POOL)] == ["a10g-burst"]
    assert plan.outputs["capacity"] == {"l4-inference": 2, "a10g-batch": 4, "a10g-burst": 8}
