"""components.node_profile: a tuned pool on OpenShift (MachineConfigPool, PerformanceProfile, Tuned) and on AWS
(the launch template's boot configuration), and how a profile change rolls the pool."""

from __future__ import annotations

import base64
import json

import pytest

from components.placements.auto_scaling_group import kubelet_user_data
from components.node_profile import NodeProfile
from gpuctl.diff import diff_plans
from tests.conftest import Plan, render_stack, stack_config

ROLE = "gpu-a100-training"
PROFILE = {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod",
           "reservedCpus": "0-1,96-97", "hugepages": {"1Gi": 128, "2Mi": 1024},
           "podSysctls": ["net.ipv4.tcp_keepalive_time", "net.core.somaxconn"],
           "nodeSysctls": {"vm.max_map_count": "262144"}}


def user_data(plan: Plan, pool: str) -> str:
    return base64.b64decode(plan.named(f"pool-{pool}-launch-template")["inputs"]["userData"]).decode()


def machine_set(plan: Plan, pool: str) -> dict:
    [match] = [r for r in plan.of_type("kubernetes:machine.openshift.io/v1beta1:MachineSet")
               if r["name"] == f"pool-{pool}"]
    return match


def with_profile(profile: dict) -> dict:
    config = stack_config("prod")
    [pool] = [p for p in config["gpu-platform:nodePools"] if p["name"] == "h100-training"]
    pool["profile"] = profile
    return config


@pytest.fixture(scope="module")
def tuned_prod() -> Plan:
    return render_stack("prod", with_profile(PROFILE))


def test_openshift_pool_gets_its_own_machine_config_pool(dev_plan: Plan) -> None:
    pool = dev_plan.manifest("MachineConfigPool", ROLE)
    assert pool["spec"]["nodeSelector"] == {"matchLabels": {f"node-role.kubernetes.io/{ROLE}": ""}}
    assert pool["spec"]["machineConfigSelector"]["matchExpressions"][0]["values"] == ["worker", ROLE]
    assert pool["spec"]["maxUnavailable"] == 1
    assert pool["metadata"]["labels"]["machineconfiguration.openshift.io/role"] == ROLE
    tuned_nodes = machine_set(dev_plan, "a100-training")["inputs"]["spec"]["template"]["spec"]["metadata"]["labels"]
    plain_nodes = machine_set(dev_plan, "t4-inference")["inputs"]["spec"]["template"]["spec"]["metadata"]["labels"]
    assert tuned_nodes[f"node-role.kubernetes.io/{ROLE}"] == ""
    assert not any(key.startswith("node-role.kubernetes.io/gpu-") for key in plain_nodes)


def test_performance_profile_is_bound_to_the_pool(dev_plan: Plan) -> None:
    spec = dev_plan.manifest("PerformanceProfile", ROLE)["spec"]
    assert spec["machineConfigPoolSelector"] == {"machineconfiguration.openshift.io/role": ROLE}
    assert spec["nodeSelector"] == {f"node-role.kubernetes.io/{ROLE}": ""}
    assert spec["cpu"] == {"reserved": "0-1,48-49", "isolated": "2-47,50-95"}  # p4d.24xlarge: 96 vCPUs
    assert spec["numa"] == {"topologyPolicy": "single-numa-node"}
    assert spec["hugepages"] == {"defaultHugepagesSize": "1G", "pages": [{"size": "1G", "count": 64}]}


def test_unsafe_sysctl_and_pod_scope_go_through_the_profile_annotation(dev_plan: Plan) -> None:
    snippet = json.loads(dev_plan.manifest("PerformanceProfile", ROLE)["metadata"]["annotations"][
        "kubeletconfig.experimental"])
    # the safe sysctl needs nothing on the node; the namespaced one is allowed on this pool's kubelet only
    assert snippet == {"allowedUnsafeSysctls": ["net.core.somaxconn"], "topologyManagerScope": "pod"}
    assert dev_plan.kind("KubeletConfig") == []


def test_node_level_sysctl_goes_through_tuned(dev_plan: Plan) -> None:
    tuned = dev_plan.manifest("Tuned", ROLE, "openshift-cluster-node-tuning-operator")
    [profile] = tuned["spec"]["profile"]
    assert f"include=openshift-node-performance-{ROLE}" in profile["data"]
    assert profile["data"].split("[sysctl]\n")[1] == "vm.max_map_count=262144\n"
    assert tuned["spec"]["recommend"] == [{"machineConfigLabels": {"machineconfiguration.openshift.io/role": ROLE},
                                           "priority": 19, "profile": ROLE}]


def test_machines_wait_for_their_pool(dev_plan: Plan) -> None:
    assert dev_plan.depends_on(machine_set(dev_plan, "a100-training"), "tuning-a100-training-machine-config-pool")


def test_profile_change_reboots_the_pool_through_the_machine_config_operator(dev_plan: Plan) -> None:
    assert dev_plan.outputs["profiles"] == {"a100-training": {
        "rollsBy": "machine-config-operator", "machineConfigPool": ROLE, "maxUnavailable": 1, "reboots": True}}
    config = stack_config("dev")
    config["gpu-platform:nodePools"][1]["profile"]["reservedCpus"] = "0-3,48-51"
    diff = diff_plans(dev_plan.document, render_stack("dev", config).document)
    assert [(step.op, step.resource["name"]) for step in diff.steps] == [
        ("update", "tuning-a100-training-performance-profile")]


def test_aws_kubelet_flags_and_boot_configuration(tuned_prod: Plan) -> None:
    script = user_data(tuned_prod, "h100-training")
    bootstrap = script.splitlines()[-1]
    assert bootstrap.startswith("/etc/eks/bootstrap.sh prod-gpu --kubelet-extra-args '--register-with-taints=")
    for flag in ("--cpu-manager-policy=static", "--reserved-cpus=0-1,96-97",
                 "--topology-manager-policy=single-numa-node", "--topology-manager-scope=pod",
                 "--allowed-unsafe-sysctls=net.core.somaxconn"):
        assert f" {flag}" in bootstrap
    assert "tcp_keepalive_time" not in script  # safe: left to pods
    assert "cat > /etc/sysctl.d/90-gpu-platform.conf <<'EOF'\nvm.max_map_count = 262144\nEOF\n" in script
    assert "echo 128 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages\n" in script
    assert "echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages\n" in script
    assert "default_hugepagesz=1G" in script and script.index("nr_hugepages") < script.index("bootstrap.sh")


def test_untuned_user_data_is_unchanged(tuned_prod: Plan) -> None:
    labels = {"gpu-platform.io/pool": "l4-inference"}
    assert kubelet_user_data("c", labels) == (
        "#!/bin/bash\nset -euo pipefail\n/etc/eks/bootstrap.sh c --kubelet-extra-args "
        "'--register-with-taints=nvidia.com/gpu:NoSchedule --node-labels=gpu-platform.io/pool=l4-inference'\n")
    assert "cpu-manager" not in user_data(tuned_prod, "l4-inference")


def test_aws_profile_change_rolls_the_pool_by_instance_refresh(prod_plan: Plan, tuned_prod: Plan) -> None:
    assert tuned_prod.outputs["profiles"] == {"h100-training": {"rollsBy": "instance-refresh", "reboots": False}}
    changed = render_stack("prod", with_profile({**PROFILE, "nodeSysctls": {"vm.max_map_count": "524288"}}))
    steps = [(step.op, step.resource["name"]) for step in diff_plans(tuned_prod.document, changed.document).steps]
    assert steps == [("update", "pool-h100-training-launch-template")]
    # a new template version is what the group's instance refresh (drained, by the lifecycle hook) rolls out
    group = tuned_prod.named("pool-h100-training-asg")["inputs"]
    assert group["instanceRefresh"]["strategy"] == "Rolling"


def test_isolated_cpus_are_the_rest() -> None:
    assert NodeProfile(pool="p", vcpus=8, reserved_cpus="0,4").isolated_cpus == "1-3,5-7"
