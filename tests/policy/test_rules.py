"""Every policy of the pack, passing and violated, on real renders (mutated config, or a mutated plan)."""

from __future__ import annotations

import ast
import base64
import copy
import json
import select
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from components import labels
from gpuctl.check import Violation, check_plan
from policy.rules import DEFAULT_OVERCOMMIT, DEFAULT_REGISTRIES, POD_SECURITY_ENFORCE, POLICIES
from tests.conftest import ROOT, Plan, render_stack, stack_config
from tests.stacks.test_allocation import dra_queue_config

Document = dict[str, Any]
SHIPPED = sorted(path.name.split(".")[1] for path in ROOT.glob("Pulumi.*.yaml"))


# Plan surgery -----------------------------------------------------------------------------------------------


def resource(doc: Document, name: str) -> dict[str, Any]:
    """The one custom resource of a plan with this logical name (a component may share it)."""
    [match] = [r for r in doc["resources"] if r["name"] == name and r["custom"]]
    return match


def inputs(doc: Document, name: str) -> dict[str, Any]:
    return resource(doc, name)["inputs"]


def pod(doc: Document, name: str) -> dict[str, Any]:
    """The pod template spec of a workload."""
    return inputs(doc, name)["spec"]["template"]["spec"]


def remove(doc: Document, name: str) -> None:
    doc["resources"].remove(resource(doc, name))


def add(doc: Document, type_: str, name: str, manifest: dict[str, Any]) -> None:
    """Add a resource the program never makes (a hand-written one, as a reviewer might meet)."""
    doc["resources"].append({"urn": f"urn:pulumi:test::gpu-platform::{type_}::{name}", "type": type_, "name": name,
                             "custom": True, "parent": None, "dependencies": [], "inputs": manifest, "options": {}})


def gpu_machine_set_outside_pools(doc: Document) -> None:
    """A hand-written MachineSet, outside any pool component, that advertises GPUs and taints nothing."""
    machine_set = copy.deepcopy(inputs(doc, "pool-t4-inference"))
    machine_set["metadata"]["name"] = "extra-gpu"
    machine_set["spec"]["template"]["spec"]["taints"] = []
    add(doc, "kubernetes:machine.openshift.io/v1beta1:MachineSet", "extra-gpu-machineset", machine_set)


def user_data(script: str) -> str:
    return base64.b64encode(script.encode()).decode()


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
RUNTIME_CLASS = "kubernetes:node.k8s.io/v1:RuntimeClass"
DEV_DRIVER = "driver-rhcos4-18"
DRIVER_1019 = "driver-ubuntu22-04-6-8-0-1019-aws"
CLUSTER_POLICY = "cluster-policy-cluster-policy"
APPROVER = "gpu-operator-olm-approve-install-plan"  # dev: the Job approving the GPU Operator's install plan
WILDCARD_RULES = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]


def wildcard_role(doc: Document, namespace: str) -> dict[str, Any]:
    add(doc, ROLE, f"{namespace}-anything", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                             "metadata": {"name": "anything", "namespace": namespace},
                                             "rules": WILDCARD_RULES})
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "anything"}


def bind_wildcard_in_operator_namespace(doc: Document) -> None:
    namespace = labels.GPU_OPERATOR_NAMESPACES["openshift"]
    ref = wildcard_role(doc, namespace)
    add(doc, ROLE_BINDING, "operator-anything", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "operator-anything", "namespace": namespace}, "roleRef": ref,
        "subjects": [{"kind": "ServiceAccount", "name": "gpu-operator", "namespace": namespace}]})


def bind_tenant_cluster_wide(doc: Document) -> None:
    add(doc, CLUSTER_ROLE_BINDING, "vision-admin", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "vision-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "vision-team"}]})


def host_agent(doc: Document, namespace: str) -> str:
    """Add a privileged host agent DaemonSet (host PID, a hostPath volume) in a namespace; its logical name."""
    name = f"{namespace}-host-agent"
    add(doc, DAEMON_SET, name, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "host-agent", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": "host-agent"}}, "template": {
            "metadata": {"labels": {"app": "host-agent"}},
            "spec": {"hostPID": True, "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
                     "containers": [{"name": "agent", "image": "nvcr.io/nvidia/agent:1.0",
                                     "securityContext": {"privileged": True}}]}}}})
    return name


def host_path_in_tenant(doc: Document) -> None:
    job = copy.deepcopy(inputs(doc, APPROVER))
    job["metadata"]["namespace"] = "vision"
    job["spec"]["template"]["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
    add(doc, "kubernetes:batch/v1:Job", "vision-job", job)


def gpu_workload(doc: Document, tolerations: list[dict[str, Any]], runtime_class: str | None = None) -> None:
    """Add a tenant's Deployment `vision-trainer` requesting one GPU."""
    spec: dict[str, Any] = {"tolerations": tolerations, "containers": [{
        "name": "train", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "resources": {"limits": {labels.GPU_RESOURCE: "1"}}}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    add(doc, DEPLOYMENT, "vision-trainer", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "trainer", "namespace": "vision"},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}},
                 "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": spec}}})


def runtime_class(doc: Document, name: str, tolerations: list[dict[str, Any]]) -> None:
    add(doc, RUNTIME_CLASS, f"runtime-class-{name}", {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": "nvidia",
        "scheduling": {"tolerations": tolerations}})


def drop_asg_taint_tag(doc: Document) -> None:
    group = inputs(doc, "pool-a10g-batch-asg")
    group["tags"] = [tag for tag in group["tags"] if "/taint/" not in tag["key"]]


def namespace_labels(doc: Document, name: str) -> dict[str, str]:
    return inputs(doc, name)["metadata"]["labels"]


def pod_taints(doc: Document) -> list[dict[str, Any]]:
    return pod(doc, "pool-t4-inference")["taints"]


def driver(doc: Document, name: str) -> dict[str, Any]:
    """The spec of an NVIDIADriver."""
    return inputs(doc, name)["spec"]


def operand_tolerations(doc: Document) -> list[dict[str, Any]]:
    return inputs(doc, CLUSTER_POLICY)["spec"]["daemonsets"]["tolerations"]


def operand(doc: Document, section: str) -> dict[str, Any]:
    """A section of the shipped ClusterPolicy (toolkit, devicePlugin, ...)."""
    return inputs(doc, CLUSTER_POLICY)["spec"][section]


def manager(doc: Document, name: str) -> dict[str, Any]:
    """The driver manager section of an NVIDIADriver."""
    return driver(doc, name)["manager"]


def approver_image(image: str) -> Callable[[Document], None]:
    return lambda doc: pod(doc, APPROVER)["containers"][0].update(image=image)


def cluster_policy(doc: Document, toolkit_env: dict[str, str], plugin_env: dict[str, str]) -> None:
    """A ClusterPolicy with these toolkit and device-plugin environment variables."""
    env = lambda values: [{"name": key, "value": value} for key, value in values.items()]  # noqa: E731
    add(doc, "kubernetes:nvidia.com/v1:ClusterPolicy", "operands", {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "operands"},
        "spec": {"toolkit": {"enabled": True, "env": env(toolkit_env)},
                 "devicePlugin": {"enabled": True, "env": env(plugin_env)}}})


PROFILE = "tuning-a100-training-performance-profile"  # dev: the tuned training pool's PerformanceProfile


def hugepages(doc: Document, count: int) -> None:
    inputs(doc, PROFILE)["spec"]["hugepages"]["pages"] = [{"size": "1G", "count": count}]


def allow_to_pods(doc: Document, names: list[str]) -> None:
    """The PerformanceProfile's kubelet snippet lets pods set these sysctls."""
    inputs(doc, PROFILE)["metadata"]["annotations"]["kubeletconfig.experimental"] = json.dumps(
        {"allowedUnsafeSysctls": names})


def own_tuned(doc: Document) -> None:
    """A hand-written Tuned profile that sets a sysctl on every worker, outside any pool's profile."""
    add(doc, "kubernetes:tuned.openshift.io/v1:Tuned", "worker-sysctls", {
        "apiVersion": "tuned.openshift.io/v1", "kind": "Tuned",
        "metadata": {"name": "worker-sysctls", "namespace": "openshift-cluster-node-tuning-operator"},
        "spec": {"profile": [{"name": "worker-sysctls", "data": "[main]\ninclude=openshift-node\n[sysctl]\n"
                                                                  "vm.swappiness=10\n"}],
                 "recommend": [{"match": [{"label": "node-role.kubernetes.io/worker"}], "priority": 25,
                                "profile": "worker-sysctls"}]}})


def pod_sysctl(doc: Document, name: str) -> None:
    gpu_workload(doc, [GPU_TOLERATION])
    pod(doc, "vision-trainer")["securityContext"] = {"sysctls": [{"name": name, "value": "1"}]}


def efa_interfaces(doc: Document, template: str, count: int) -> None:
    inputs(doc, template)["networkInterfaces"] = [
        {"deviceIndex": 0 if card == 0 else 1, "networkCardIndex": card, "interfaceType": "efa"}
        for card in range(count)]


def networked(doc: Document, networks: str) -> None:
    """The tenant vision's trainer asks Multus for these networks."""
    gpu_workload(doc, [GPU_TOLERATION])
    inputs(doc, "vision-trainer")["spec"]["template"]["metadata"]["annotations"] = {
        "k8s.v1.cni.cncf.io/networks": networks}


def default_network(doc: Document, network: str) -> None:
    """The tenant vision's trainer asks Multus to replace its cluster network."""
    gpu_workload(doc, [GPU_TOLERATION])
    inputs(doc, "vision-trainer")["spec"]["template"]["metadata"]["annotations"] = {
        "v1.multus-cni.io/default-network": network}


HARDENED = {"ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
            "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true"}
GPU_TOLERATION = dict(labels.GPU_TOLERATION)
DIGEST = f"sha256:{'0' * 64}"


# (id, policy, stack, plan mutation, violated?, the resource the violation names, None for the stack)
Case = tuple[str, str, str, Callable[[Document], None], bool, str | None]
CASES: list[Case] = [
    ("machineset-extra-taint", "gpu-pool-tainted", "dev", lambda d: pod_taints(d).append(
        {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}), False, None),
    ("machineset-untainted", "gpu-pool-tainted", "dev", lambda d: pod_taints(d).clear(), True, "pool-t4-inference"),
    ("kubelet-taint-with-value", "gpu-pool-tainted", "prod", lambda d: inputs(d, "pool-a10g-batch-launch-template")
     .update(userData=user_data("#!/bin/bash\nbootstrap --kubelet-extra-args "
                                "'--register-with-taints=example.com/x=y:NoExecute,nvidia.com/gpu=present:NoSchedule'"
                                "\n")), False, None),
    ("asg-without-taint-tag", "gpu-pool-tainted", "prod", drop_asg_taint_tag, True, "pool-a10g-batch-asg"),
    ("launch-template-without-kubelet-taint", "gpu-pool-tainted", "prod",
     lambda d: inputs(d, "pool-h100-training-launch-template").update(userData=user_data("#!/bin/bash\nbootstrap\n")),
     True, "pool-h100-training-launch-template"),
    ("cpu-launch-template-untainted", "gpu-pool-tainted", "prod", lambda d: add(
        d, LAUNCH_TEMPLATE, "cpu-workers", {"name": "cpu-workers", "userData": user_data("#!/bin/bash\nbootstrap\n")}),
     False, None),
    ("hand-written-gpu-machineset-untainted", "gpu-pool-tainted", "dev", gpu_machine_set_outside_pools, True,
     "extra-gpu-machineset"),

    ("scoped-quota-alongside", "tenant-gpu-quota", "dev", lambda d: None, False, None),
    ("no-gpu-quota", "tenant-gpu-quota", "dev", lambda d: remove(d, "tenant-vision-gpu-quota"), True,
     "tenant-vision-namespace"),
    ("only-a-scoped-gpu-quota", "tenant-gpu-quota", "dev", lambda d: remove(d, "tenant-nlp-research-gpu-quota"), True,
     "tenant-nlp-research-namespace"),
    ("fractional-gpu-quota", "tenant-gpu-quota", "dev",
     lambda d: inputs(d, "tenant-vision-gpu-quota")["spec"]["hard"].update({labels.GPU_QUOTA_KEY: "1500m"}), True,
     "tenant-vision-namespace"),

    ("quota-equals-capacity", "gpu-quota-within-capacity", "dev", lambda d: None, False, None),
    ("quota-above-capacity", "gpu-quota-within-capacity", "prod",
     lambda d: inputs(d, "tenant-analytics-gpu-quota")["spec"]["hard"].update({labels.GPU_QUOTA_KEY: "17"}), True,
     None),

    ("toleration-in-pod", "gpu-pods-tolerate-taint", "prod", lambda d: gpu_workload(d, [GPU_TOLERATION]), False,
     None),
    ("toleration-from-runtime-class", "gpu-pods-tolerate-taint", "dev",
     lambda d: [gpu_workload(d, [], "nvidia"), runtime_class(d, "nvidia", [GPU_TOLERATION])], False, None),
    ("no-toleration", "gpu-pods-tolerate-taint", "dev", lambda d: gpu_workload(d, []), True, "vision-trainer"),
    ("toleration-for-another-effect", "gpu-pods-tolerate-taint", "dev",
     lambda d: gpu_workload(d, [{**GPU_TOLERATION, "effect": "NoExecute"}]), True, "vision-trainer"),
    ("runtime-class-not-in-stack", "gpu-pods-tolerate-taint", "prod", lambda d: gpu_workload(d, [], "nvidia"), True,
     "vision-trainer"),

    ("full-version-with-driver-toolkit", "driver-pinned-to-kernel", "dev",
     lambda d: driver(d, DEV_DRIVER).update(version="580.95.05"), False, None),
    ("image-tagged-for-its-kernel", "driver-pinned-to-kernel", "prod",
     lambda d: driver(d, DRIVER_1019).update(image="nvcr.io/nvidia/driver:580-6.8.0-1019-aws-ubuntu22.04"), False,
     None),
    ("registry-port-is-no-tag", "driver-pinned-to-kernel", "prod",
     lambda d: driver(d, DRIVER_1019).update(image="mirror.example.com:5000/nvidia/driver"), False, None),
    ("driver-not-pinned", "driver-pinned-to-kernel", "prod",
     lambda d: driver(d, DRIVER_1019)["nodeSelector"].pop(labels.KERNEL_LABEL), True, DRIVER_1019),
    ("driver-not-pinned-to-a-release", "driver-pinned-to-kernel", "dev",
     lambda d: driver(d, DEV_DRIVER)["nodeSelector"].pop(labels.OS_VERSION_LABEL), True, DEV_DRIVER),
    ("toolkit-driver-needs-no-kernel", "driver-pinned-to-kernel", "dev", lambda d: None, False, None),
    ("precompiled-full-version", "driver-pinned-to-kernel", "prod",
     lambda d: driver(d, DRIVER_1019).update(version="580.95.05"), True, DRIVER_1019),
    ("precompiled-digest", "driver-pinned-to-kernel", "prod",
     lambda d: driver(d, DRIVER_1019).update(version=DIGEST), True, DRIVER_1019),
    ("driver-image-for-another-kernel", "driver-pinned-to-kernel", "prod",
     lambda d: driver(d, DRIVER_1019).update(image="nvcr.io/nvidia/driver:580-6.8.0-1021-aws-ubuntu22.04"), True,
     DRIVER_1019),

    ("operands-tolerate-every-taint", "operands-tolerate-gpu-taint", "dev",
     lambda d: operand_tolerations(d).__setitem__(0, {"operator": "Exists"}), False, None),
    ("driver-tolerates-gpu-key", "operands-tolerate-gpu-taint", "prod",
     lambda d: driver(d, DRIVER_1019).update(tolerations=[{"key": labels.GPU_RESOURCE, "operator": "Exists"}]),
     False, None),
    ("cluster-policy-without-toleration", "operands-tolerate-gpu-taint", "dev",
     lambda d: operand_tolerations(d).clear(), True, CLUSTER_POLICY),
    ("cluster-policy-without-daemonsets", "operands-tolerate-gpu-taint", "prod",
     lambda d: inputs(d, CLUSTER_POLICY)["spec"].pop("daemonsets"), True, CLUSTER_POLICY),
    ("driver-tolerates-another-effect", "operands-tolerate-gpu-taint", "prod",
     lambda d: driver(d, DRIVER_1019).update(tolerations=[{**GPU_TOLERATION, "effect": "NoExecute"}]), True,
     DRIVER_1019),
    ("driver-tolerates-another-key", "operands-tolerate-gpu-taint", "dev",
     lambda d: driver(d, DEV_DRIVER).update(tolerations=[{**GPU_TOLERATION, "key": "example.com/gpu"}]), True,
     DEV_DRIVER),

    ("hardened-cluster-policy", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, HARDENED, {"DEVICE_LIST_STRATEGY": "volume-mounts"}), False, None),
    ("cdi-cluster-policy", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, HARDENED, {"DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri"}), False, None),
    ("toolkit-accepts-visible-devices", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, {**HARDENED, "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "true"},
                              {"DEVICE_LIST_STRATEGY": "volume-mounts"}), True, "operands"),
    ("device-list-by-envvar", "gpu-access-only-through-device-plugin", "prod",
     lambda d: cluster_policy(d, HARDENED, {"DEVICE_LIST_STRATEGY": "envvar"}), True, "operands"),
    ("cluster-policy-defaults", "gpu-access-only-through-device-plugin", "dev",
     lambda d: cluster_policy(d, {}, {}), True, "operands"),

    ("digest-pinned-image", "no-latest-images", "dev",
     approver_image(f"registry.redhat.io/openshift4/ose-cli-rhel9@{DIGEST}"), False, None),
    ("latest-image", "no-latest-images", "dev", approver_image("registry.redhat.io/openshift4/ose-cli-rhel9:latest"),
     True, APPROVER),
    ("untagged-init-image", "no-latest-images", "dev", lambda d: pod(d, APPROVER).update(
        initContainers=[{"name": "wait", "image": "registry.redhat.io/ubi9/ubi-minimal"}]), True, APPROVER),
    ("operand-digest-pinned", "no-latest-images", "dev",
     lambda d: operand(d, "toolkit").update(version=DIGEST), False, None),
    ("operand-full-image-path", "no-latest-images", "prod", lambda d: operand(d, "dcgmExporter").update(
        repository="", version="", image=f"nvcr.io/nvidia/k8s/dcgm-exporter@{DIGEST}"), False, None),
    ("driver-digest-built-on-node", "no-latest-images", "dev",
     lambda d: driver(d, DEV_DRIVER).update(version=DIGEST), False, None),
    ("cluster-policy-toolkit-latest", "no-latest-images", "dev",
     lambda d: operand(d, "toolkit").update(version="latest"), True, CLUSTER_POLICY),
    ("cluster-policy-validator-unversioned", "no-latest-images", "prod",
     lambda d: operand(d, "validator").pop("version"), True, CLUSTER_POLICY),
    ("cluster-policy-other-section-latest", "no-latest-images", "prod", lambda d: inputs(d, CLUSTER_POLICY)[
        "spec"].update(vgpuDeviceManager={"enabled": False, "repository": "nvcr.io/nvidia/cloud-native",
                                          "image": "vgpu-device-manager", "version": "latest"}), True, CLUSTER_POLICY),
    ("driver-latest", "no-latest-images", "dev", lambda d: driver(d, DEV_DRIVER).update(version="latest"), True,
     DEV_DRIVER),
    ("driver-without-version", "no-latest-images", "prod", lambda d: driver(d, DRIVER_1019).pop("version"), True,
     DRIVER_1019),
    ("driver-manager-latest", "no-latest-images", "prod",
     lambda d: manager(d, DRIVER_1019).update(version="latest"), True, DRIVER_1019),

    ("registry-path-prefix", "allowed-image-registries", "dev", approver_image("nvcr.io/mirror/ose-cli:v4.18"), False,
     None),
    ("docker-hub-image", "allowed-image-registries", "dev", approver_image("busybox:1.36"), True, APPROVER),
    ("operand-from-nvcr-path", "allowed-image-registries", "prod",
     lambda d: operand(d, "toolkit").update(repository="nvcr.io/mirror/k8s"), False, None),
    ("operand-section-without-image", "allowed-image-registries", "dev",
     lambda d: inputs(d, CLUSTER_POLICY)["spec"].update(gds={"enabled": False, "version": "2.20.5"}), False, None),
    ("cluster-policy-operand-from-quay", "allowed-image-registries", "dev",
     lambda d: operand(d, "dcgmExporter").update(repository="quay.io/example"), True, CLUSTER_POLICY),
    ("cluster-policy-operand-on-docker-hub", "allowed-image-registries", "prod",
     lambda d: operand(d, "validator").update(repository="", version="",
                                              image="example/gpu-operator-validator:v26.7.0"), True, CLUSTER_POLICY),
    ("driver-from-ghcr", "allowed-image-registries", "prod",
     lambda d: driver(d, DRIVER_1019).update(repository="ghcr.io/example"), True, DRIVER_1019),
    ("driver-manager-from-ghcr", "allowed-image-registries", "dev",
     lambda d: manager(d, DEV_DRIVER).update(repository="ghcr.io/example/cloud-native"), True, DEV_DRIVER),

    *[(f"host-access-in-{namespace}", "host-access-only-in-gpu-system", "prod",
       lambda d, namespace=namespace: host_agent(d, namespace), False, None) for namespace in labels.SYSTEM_NAMESPACES],
    ("privileged-agent-in-tenant", "host-access-only-in-gpu-system", "prod",
     lambda d: host_agent(d, "search-ranking"), True, "search-ranking-host-agent"),
    ("host-path-in-tenant", "host-access-only-in-gpu-system", "dev", host_path_in_tenant, True, "vision-job"),

    ("restricted-tenant", "tenant-pod-security", "dev", lambda d: namespace_labels(d, "tenant-vision-namespace")
     .update({POD_SECURITY_ENFORCE: "restricted"}), False, None),
    ("privileged-tenant", "tenant-pod-security", "dev", lambda d: namespace_labels(d, "tenant-vision-namespace")
     .update({POD_SECURITY_ENFORCE: "privileged"}), True, "tenant-vision-namespace"),
    ("tenant-without-pod-security", "tenant-pod-security", "prod",
     lambda d: namespace_labels(d, "tenant-analytics-namespace").pop(POD_SECURITY_ENFORCE), True,
     "tenant-analytics-namespace"),

    ("wildcard-role-for-operator", "tenant-rbac-least-privilege", "dev", bind_wildcard_in_operator_namespace, False,
     None),
    ("tenant-cluster-admin", "tenant-rbac-least-privilege", "dev", lambda d: inputs(d, "tenant-vision-members")[
        "roleRef"].update(name="cluster-admin"), True, "tenant-vision-members"),
    ("tenant-wildcard-role", "tenant-rbac-least-privilege", "dev",
     lambda d: inputs(d, "tenant-vision-members").update(roleRef=wildcard_role(d, "vision")), True, "tenant-vision-members"),
    ("tenant-group-cluster-admin", "tenant-rbac-least-privilege", "dev", bind_tenant_cluster_wide, True,
     "vision-admin"),

    ("system-priority-blocked", "tenant-no-system-priority", "prod", lambda d: None, False, None),
    ("system-priority-open", "tenant-no-system-priority", "prod",
     lambda d: remove(d, "tenant-llm-training-system-priority"), True, "tenant-llm-training-namespace"),
    ("one-system-class-open", "tenant-no-system-priority", "dev", lambda d: inputs(d, "tenant-vision-system-priority")[
        "spec"]["scopeSelector"]["matchExpressions"][0].update(values=[labels.NODE_CRITICAL_PRIORITY]), True,
     "tenant-vision-namespace"),

    ("profile-hugepages-fit", "hugepages-within-memory", "dev", lambda d: hugepages(d, 900), False, None),
    ("profile-hugepages-over-memory", "hugepages-within-memory", "dev", lambda d: hugepages(d, 1000), True, PROFILE),
    ("boot-hugepages-over-memory", "hugepages-within-memory", "prod", lambda d: inputs(
        d, "pool-l4-inference-launch-template").update(userData=user_data(
            "#!/bin/bash\necho 14 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages\n")), True,
     "pool-l4-inference-launch-template"),

    ("namespaced-sysctl-allowed", "node-sysctls-only-in-profiles", "dev",
     lambda d: allow_to_pods(d, ["net.core.somaxconn", "kernel.shm*"]), False, None),
    ("safe-sysctl-in-pod", "node-sysctls-only-in-profiles", "dev",
     lambda d: pod_sysctl(d, "net.ipv4.tcp_keepalive_time"), False, None),
    ("node-sysctl-allowed-to-pods", "node-sysctls-only-in-profiles", "dev",
     lambda d: allow_to_pods(d, ["vm.swappiness"]), True, PROFILE),
    ("node-sysctl-in-pod", "node-sysctls-only-in-profiles", "dev", lambda d: pod_sysctl(d, "vm.max_map_count"), True,
     "vision-trainer"),
    ("node-sysctl-kubelet-flag", "node-sysctls-only-in-profiles", "prod", lambda d: inputs(
        d, "pool-a10g-batch-launch-template").update(userData=user_data(
            "#!/bin/bash\nbootstrap --kubelet-extra-args '--allowed-unsafe-sysctls=kernel.numa_balancing'\n")), True,
     "pool-a10g-batch-launch-template"),
    ("tuned-outside-profile", "node-sysctls-only-in-profiles", "dev", own_tuned, True, "worker-sysctls"),

    ("efa-on-p5", "efa-only-on-capable-instances", "prod", lambda d: None, False, None),
    ("one-efa-on-g5-12xlarge", "efa-only-on-capable-instances", "prod",
     lambda d: efa_interfaces(d, "pool-a10g-batch-launch-template", 1), False, None),
    ("efa-on-g6-xlarge", "efa-only-on-capable-instances", "prod",
     lambda d: efa_interfaces(d, "pool-l4-inference-launch-template", 1), True, "pool-l4-inference-launch-template"),
    ("too-many-efa", "efa-only-on-capable-instances", "prod",
     lambda d: efa_interfaces(d, "pool-a10g-batch-launch-template", 2), True, "pool-a10g-batch-launch-template"),

    ("own-network", "tenant-networks-own-namespace", "dev", lambda d: networked(d, "collective@net1, vision/collective"),
     False, None),
    ("own-network-json", "tenant-networks-own-namespace", "dev",
     lambda d: networked(d, '[{"name": "collective", "interface": "net1"}]'), False, None),
    ("other-tenant-network", "tenant-networks-own-namespace", "dev",
     lambda d: networked(d, "collective,nlp-research/collective"), True, "vision-trainer"),
    ("other-tenant-network-json", "tenant-networks-own-namespace", "dev",
     lambda d: networked(d, '[{"name": "collective", "namespace": "nlp-research"}]'), True, "vision-trainer"),
    ("default-network-swap", "tenant-networks-own-namespace", "dev",
     lambda d: default_network(d, "collective"), True, "vision-trainer"),

    # "queue": the example stack in tenancy mode queue (examples/Pulumi.queue.yaml).
    ("queued-tenants-have-ceilings", "tenant-gpu-quota", "queue", lambda d: None, False, None),
    ("queued-tenant-loses-its-ceiling", "tenant-gpu-quota", "queue",
     lambda d: remove(d, "tenant-analytics-gpu-quota"), True, "tenant-analytics-namespace"),
    ("queued-ceilings-above-capacity-are-borrowing", "gpu-quota-within-capacity", "queue", lambda d: None, False,
     None),
    ("guarantees-fit-the-pools", "queue-guarantee-within-capacity", "queue", lambda d: None, False, None),
    ("guarantee-over-a-pool", "queue-guarantee-within-capacity", "queue",
     lambda d: queue_quota(d, "analytics", 0).update(nominalQuota=5), True, "kueue-flavor-a10g-batch"),
    ("borrowing-the-cohort-can-lend", "queue-borrowing-within-cohort", "queue", lambda d: None, False, None),
    ("borrowing-more-than-the-cohort-lends", "queue-borrowing-within-cohort", "queue",
     lambda d: queue_quota(d, "search-ranking", 0).update(borrowingLimit=3), True,
     "tenant-search-ranking-queue-cluster-queue"),
    ("flavors-tolerate-the-gpu-taint", "queue-flavors-tolerate-pools", "queue", lambda d: None, False, None),
    ("flavor-without-toleration", "queue-flavors-tolerate-pools", "queue",
     lambda d: inputs(d, "kueue-flavor-l4-inference")["spec"].update(tolerations=[]), True,
     "kueue-flavor-l4-inference"),
    ("flavor-selecting-no-pool", "queue-flavors-tolerate-pools", "queue",
     lambda d: inputs(d, "kueue-flavor-l4-inference")["spec"].update(nodeLabels={labels.POOL_LABEL: "gone"}), True,
     "kueue-flavor-l4-inference"),
]


def queue_quota(doc: Document, tenant: str, flavor: int) -> dict[str, Any]:
    """The GPU quota of a tenant's ClusterQueue in its `flavor`-th flavor."""
    spec = inputs(doc, f"tenant-{tenant}-queue-cluster-queue")["spec"]
    return spec["resourceGroups"][0]["flavors"][flavor]["resources"][0]


def of(violations: list[Violation], policy: str) -> list[Violation]:
    return [v for v in violations if v.policy == policy]


@pytest.fixture(scope="module")
def queue_plan() -> Plan:
    """The example stack in tenancy mode queue."""
    return render_stack("queue", yaml.safe_load((ROOT / "examples" / "Pulumi.queue.yaml").read_text())["config"])


@pytest.fixture
def fresh(dev_plan: Plan, prod_plan: Plan, queue_plan: Plan, partitioned_plan: Plan) -> Callable[[str], Document]:
    """A mutable copy of a shipped stack's plan (or of the examples in tenancy mode queue and of partitioning)."""
    plans = {"dev": dev_plan, "prod": prod_plan, "queue": queue_plan, "partitioned": partitioned_plan}
    return lambda stack: copy.deepcopy(plans[stack].document)


@pytest.fixture(scope="module")
def shipped_plans(dev_plan: Plan, prod_plan: Plan) -> dict[str, Plan]:
    rendered = {"dev": dev_plan, "prod": prod_plan}
    return {stack: rendered.get(stack) or render_stack(stack) for stack in SHIPPED}


@pytest.fixture(scope="module")
def misconfigured() -> Plan:
    """dev with one GPU more promised than the pools advertise (9 whole GPUs; the T4s' shares are not GPUs)."""
    config = stack_config("dev")
    config["gpu-platform:tenants"][0]["gpus"] += 4
    return render_stack("dev", config)


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_stack_passes_every_policy(shipped_plans: dict[str, Plan], stack: str) -> None:
    assert check_plan(shipped_plans[stack].document) == []


@pytest.mark.parametrize(("policy", "stack", "mutate", "violated", "where"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_policy(fresh: Callable[[str], Document], policy: str, stack: str, mutate: Callable[[Document], None],
                violated: bool, where: str | None) -> None:
    doc = fresh(stack)
    mutate(doc)
    found = of(check_plan(doc), policy)
    if not violated:
        assert found == []
        return
    assert [v.name for v in found] == [where]
    assert found[0].urn == (resource(doc, where)["urn"] if where else None)


def test_every_policy_has_a_passing_and_a_violating_case() -> None:
    covered = {(case[1], case[4]) for case in CASES}
    assert {(policy.name, outcome) for policy in POLICIES for outcome in (False, True)} <= covered


def test_quota_message_gives_quota_capacity_and_tenants(misconfigured: Plan) -> None:
    [violation] = of(check_plan(misconfigured.document), "gpu-quota-within-capacity")
    assert violation.level == "mandatory" and violation.urn is None
    for fact in ("add up to 9 GPUs", "vision 8", "nlp-research 1", "advertise 8", "at most 8 may be promised"):
        assert fact in violation.message


def test_overcommit_knob_admits_the_extra_gpu(misconfigured: Plan) -> None:
    config = {"gpu-quota-within-capacity": {"maxOvercommit": 1.125}}
    assert of(check_plan(misconfigured.document, config), "gpu-quota-within-capacity") == []


def test_latest_image_message_names_container_and_image(fresh: Callable[[str], Document]) -> None:
    doc = fresh("dev")
    approver_image("registry.redhat.io/openshift4/ose-cli-rhel9:latest")(doc)
    [violation] = of(check_plan(doc), "no-latest-images")
    assert violation.name == APPROVER and "container approve of Job nvidia-gpu-operator/" in violation.message
    assert "ose-cli-rhel9:latest" in violation.message and "pin a version tag" in violation.message


def test_operand_latest_message_names_the_section_and_the_fix(fresh: Callable[[str], Document]) -> None:
    doc = fresh("dev")
    operand(doc, "toolkit").update(version="latest")
    operand(doc, "migManager").pop("version")
    messages = sorted(v.message for v in of(check_plan(doc), "no-latest-images"))
    assert len(messages) == 2
    untagged, latest = sorted(messages, key=lambda m: "spec.toolkit" in m)
    assert latest.startswith("ClusterPolicy cluster-policy section spec.toolkit runs "
                             "nvcr.io/nvidia/k8s/container-toolkit:latest with the :latest tag")
    assert "set spec.toolkit.version to a release tag or a sha256: digest" in latest
    assert untagged.startswith("ClusterPolicy cluster-policy section spec.migManager runs "
                               "nvcr.io/nvidia/cloud-native/k8s-mig-manager with no version")
    assert "set spec.migManager.version" in untagged


@pytest.mark.parametrize(("stack", "name", "pulled"), [
    ("prod", DRIVER_1019, "nvcr.io/nvidia/driver:latest-6.8.0-1019-aws-ubuntu22.04"),  # precompiled
    ("dev", DEV_DRIVER, "nvcr.io/nvidia/driver:latest-rhcos4.18"),  # built on the node
])
def test_driver_latest_message_names_the_tag_the_operator_pulls(fresh: Callable[[str], Document], stack: str,
                                                                  name: str, pulled: str) -> None:
    doc = fresh(stack)
    driver(doc, name).update(version="latest")
    [violation] = of(check_plan(doc), "no-latest-images")
    assert violation.name == name and violation.level == "mandatory"
    assert violation.message.startswith(f"NVIDIADriver {inputs(doc, name)['metadata']['name']} sets spec.version "
                                        f"latest, so the operator pulls {pulled}")
    assert 'set spec.version to the driver branch (precompiled, e.g. "580")' in violation.message


def test_driver_without_version_is_told_to_set_one(fresh: Callable[[str], Document]) -> None:
    doc = fresh("prod")
    for field in ("repository", "image", "version"):  # the operator's default driver image still needs a version
        driver(doc, DRIVER_1019).pop(field)
    [violation] = of(check_plan(doc), "no-latest-images")
    assert violation.name == DRIVER_1019 and "sets no spec.version" in violation.message
    assert "set spec.version" in violation.message
    assert of(check_plan(doc), "allowed-image-registries") == []  # no repository: the operator's own default


def test_operand_registry_message_names_the_field_and_the_fix(fresh: Callable[[str], Document]) -> None:
    doc = fresh("prod")
    driver(doc, DRIVER_1019).update(repository="ghcr.io/example")
    [violation] = of(check_plan(doc), "allowed-image-registries")
    assert violation.message.startswith("NVIDIADriver nvidia-driver-ubuntu22-04-6-8-0-1019-aws section spec pulls "
                                        "ghcr.io/example/driver:580 from ghcr.io, which is not allowed")
    assert "point spec.repository at an allowed registry" in violation.message
    assert "allowedRegistries" in violation.message


def test_operand_registries_follow_path_prefixes(fresh: Callable[[str], Document]) -> None:
    doc = fresh("prod")
    operand(doc, "toolkit").update(repository="registry.example.com/mirror/k8s")
    operand(doc, "gfd").update(repository="registry.example.com/other")
    manager(doc, DRIVER_1019).update(repository="registry.example.com/mirror/cloud-native")
    config = {"allowed-image-registries": {"allowedRegistries": [*DEFAULT_REGISTRIES, "registry.example.com/mirror/"]}}
    [refused] = of(check_plan(doc, config), "allowed-image-registries")
    assert refused.name == CLUSTER_POLICY and "section spec.gfd pulls registry.example.com/other/k8s-device-plugin" \
        in refused.message and "point spec.gfd.repository" in refused.message
    refused = of(check_plan(doc), "allowed-image-registries")  # the default list allows no path of the mirror
    assert sorted(v.name for v in refused) == [CLUSTER_POLICY, CLUSTER_POLICY, DRIVER_1019]


def test_registry_is_refused_unless_allowed(fresh: Callable[[str], Document]) -> None:
    doc = fresh("dev")
    approver_image("ghcr.io/example/oc:v4.18")(doc)
    [refused] = of(check_plan(doc), "allowed-image-registries")
    assert refused.name == APPROVER and "ghcr.io" in refused.message and "allowedRegistries" in refused.message
    config = {"allowed-image-registries": {"allowedRegistries": [*DEFAULT_REGISTRIES, "ghcr.io"]}}
    assert of(check_plan(doc, config), "allowed-image-registries") == []


def test_openshift_cli_registry_is_allowed_only_by_default(dev_plan: Plan) -> None:
    """dev's install-plan approvers, admission gate and the A100 pool's re-cut roll (MIG off, all-disabled) run the
    OpenShift CLI image; a pack config without Red Hat's registry refuses them."""
    assert labels.OPENSHIFT_CLI_IMAGE.startswith("registry.redhat.io/")
    config = {"allowed-image-registries": {"allowedRegistries": ["nvcr.io", "registry.k8s.io"]}}
    refused = of(check_plan(dev_plan.document, config), "allowed-image-registries")
    assert sorted(v.name for v in refused) == ["admission-gate-job", APPROVER, "nfd-operator-approve-install-plan",
                                               "pool-a100-training-partition-labels-job"]
    assert all("registry.redhat.io" in v.message for v in refused)


def test_driver_messages_name_the_resource_and_the_fix(fresh: Callable[[str], Document]) -> None:
    doc = fresh("prod")
    driver(doc, DRIVER_1019).update(version="580.95.05", image="driver:580-6.8.0-1021-aws-ubuntu22.04")
    driver(doc, "driver-ubuntu22-04-6-8-0-1021-aws")["nodeSelector"].pop(labels.KERNEL_LABEL)
    messages = {(v.name, v.message) for v in of(check_plan(doc), "driver-pinned-to-kernel")}
    by_name: dict[str, list[str]] = {}
    for name, message in messages:
        by_name.setdefault(name, []).append(message)
    assert len(by_name[DRIVER_1019]) == 2 and len(by_name["driver-ubuntu22-04-6-8-0-1021-aws"]) == 1
    version, image = sorted(by_name[DRIVER_1019], key=lambda m: "spec.image" in m)
    assert version.startswith("NVIDIADriver nvidia-driver-ubuntu22-04-6-8-0-1019-aws ")
    assert "'580.95.05'" in version and 'driver branch (digits only, e.g. "580")' in version
    assert "kernel 6.8.0-1019-aws" in image and "<branch>-6.8.0-1019-aws-<os>" in image
    [unpinned] = by_name["driver-ubuntu22-04-6-8-0-1021-aws"]
    assert f"spec.nodeSelector {labels.KERNEL_LABEL}: <kernel>" in unpinned


def test_operand_toleration_message_names_the_field_and_the_fix(fresh: Callable[[str], Document]) -> None:
    doc = fresh("dev")
    operand_tolerations(doc).clear()
    [violation] = of(check_plan(doc), "operands-tolerate-gpu-taint")
    assert violation.level == "mandatory" and violation.message.startswith("ClusterPolicy cluster-policy ")
    for fact in ("nvidia.com/gpu:NoSchedule", "spec.daemonsets.tolerations",
                 "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}"):
        assert fact in violation.message


def test_host_access_message_names_the_system_namespaces(fresh: Callable[[str], Document]) -> None:
    doc = fresh("prod")
    host_agent(doc, "analytics")
    [violation] = of(check_plan(doc), "host-access-only-in-gpu-system")
    assert violation.message.startswith("DaemonSet analytics/host-agent uses hostPID, privileged container agent, "
                                        "hostPath volume host; ")
    assert "gpu-operator, nvidia-gpu-operator, node-feature-discovery or openshift-nfd" in violation.message


def test_knobs_default_as_documented() -> None:
    schemas = {policy.name: policy.config_schema.properties for policy in POLICIES if policy.config_schema}
    assert schemas["gpu-quota-within-capacity"]["maxOvercommit"]["default"] == DEFAULT_OVERCOMMIT == 1.0
    assert schemas["allowed-image-registries"]["allowedRegistries"]["default"] == \
        ["nvcr.io", "registry.k8s.io", "registry.redhat.io"]


def test_importing_the_rules_starts_no_server() -> None:
    result = subprocess.run([sys.executable, "-c", "import policy.rules"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout) == (0, "")


def test_pack_entry_point_is_imported_by_nothing() -> None:
    for path in ROOT.rglob("*.py"):
        if ".venv" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                       [f"{node.module}.{alias.name}" for alias in node.names] if isinstance(node, ast.ImportFrom)
                       else [])
            assert not any(m.startswith("policy.__main__") for m in modules), f"{path} imports policy/__main__.py"


def test_pack_serves_when_run_as_the_cli_runs_it() -> None:
    """The CLI's Python policy host runs the directory as a script; the pack then prints its port and serves."""
    pack = subprocess.Popen([sys.executable, "-m", "pulumi.policy", "127.0.0.1:0", "policy"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([pack.stdout], [], [], 60)
        port = pack.stdout.readline().strip() if ready else ""
    finally:
        pack.kill()
        pack.communicate()
    assert port.isdigit(), "the pack did not start serving"


def test_pack_layout_and_pins() -> None:
    project = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python" and project["description"]
    assert (ROOT / "policy" / project["runtime"]["options"]["virtualenv"]).resolve() == ROOT / ".venv"
    lock = {line.split("==")[0]: line for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line}
    pins = (ROOT / "policy" / "requirements.txt").read_text().split()
    assert pins == [lock["pulumi"], lock["pulumi-policy"]]


def test_bring_your_own_pools_count_towards_the_capacity_quotas_are_checked_against(
        shipped_plans: dict[str, Plan]) -> None:
    # onprem provisions no pool: its 16 whole GPUs and 32 shares (16 L40S shared two ways) come from its components.
    document = copy.deepcopy(shipped_plans["onprem"].document)
    assert of(check_plan(document), "gpu-quota-within-capacity") == []
    inputs(document, "tenant-nlp-research-gpu-quota")["spec"]["hard"][labels.GPU_QUOTA_KEY] = "7"
    [violation] = of(check_plan(document), "gpu-quota-within-capacity")
    assert "add up to 17 GPUs" in violation.message and "advertise 16" in violation.message
    inputs(document, "tenant-nlp-research-gpu-quota")["spec"]["hard"][labels.GPU_QUOTA_KEY] = "1"
    inputs(document, "tenant-nlp-research-gpu-quota")["spec"]["hard"]["requests.nvidia.com/gpu.shared"] = "9"
    [violation] = of(check_plan(document), "gpu-quota-within-capacity")
    assert "GPU shares (nvidia.com/gpu.shared) add up to 33" in violation.message and "advertise 32" in violation.message


def test_queue_policies_read_bring_your_own_pools_by_their_selector_and_capacity() -> None:
    config = stack_config("onprem")
    config["gpu-platform:tenancy"] = {"mode": "queue"}
    doc = copy.deepcopy(render_stack("onprem", config).document)
    assert check_plan(doc) == []
    flavor = next(r for r in doc["resources"] if r["type"].endswith(":ResourceFlavor"))
    pool = flavor["inputs"]["metadata"]["name"]
    capacity = sum(r["inputs"]["bringYourOwn"]["nodes"] * count for r in doc["resources"] if r["name"] == f"pool-{pool}"
                   for count in r["inputs"]["bringYourOwn"]["advertisedPerNode"].values())
    queue = next(r for r in doc["resources"] if r["type"].endswith(":ClusterQueue"))
    quotas = [flavor for group in queue["inputs"]["spec"]["resourceGroups"] for flavor in group["flavors"]]
    [quota] = [entry["resources"][0] for entry in quotas if entry["name"] == pool]
    quota["nominalQuota"] = capacity + 1
    [violation] = of(check_plan(doc), "queue-guarantee-within-capacity")
    assert violation.name == flavor["name"] and f"its pool advertises {capacity}" in violation.message


@pytest.mark.parametrize(("stack", "size_path"), [("prod", ("desiredCapacity",)), ("dev", ("spec", "replicas"))])
def test_capacity_is_judged_at_the_configured_size_under_both_runtimes(fresh: Callable[[str], Document], stack: str,
                                                                        size_path: tuple[str, ...]) -> None:
    """Under `pulumi up` a stack policy sees outputs: the size the autoscaler moved a pool to (here: scaled to zero
    overnight), not the configured one gpuctl sees in the inputs. Both judge the configured size the pool records."""
    doc = fresh(stack)
    assert of(check_plan(doc), "gpu-quota-within-capacity") == []
    for record in doc["resources"]:
        if record["type"] in ("aws:autoscaling/group:Group", "kubernetes:machine.openshift.io/v1beta1:MachineSet"):
            target = record["inputs"]
            for key in size_path[:-1]:
                target = target[key]
            target[size_path[-1]] = 0  # the live size, as the engine's outputs would show it
    assert of(check_plan(doc), "gpu-quota-within-capacity") == []


def engine_numbers(value: Any) -> Any:
    """A value as the engine hands it to a policy pack: every number a float (a protobuf Struct has no integers)."""
    if isinstance(value, dict):
        return {key: engine_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [engine_numbers(item) for item in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


@pytest.mark.parametrize("stack", ["dev", "prod", "onprem"])
def test_policies_judge_numbers_as_the_engine_hands_them(shipped_plans: dict[str, Plan], stack: str) -> None:
    """Under `pulumi up` a bring-your-own pool's 2 nodes arrive as 2.0: read as no nodes, the capacity policy refused
    onprem's quotas against 0 GPUs (found by the real engine)."""
    document = copy.deepcopy(shipped_plans[stack].document)
    expected = [(v.policy, v.name) for v in check_plan(document)]
    for record in document["resources"]:
        record["inputs"] = engine_numbers(record["inputs"])
    assert [(v.policy, v.name) for v in check_plan(document)] == expected


def test_a_dedicated_pool_counts_toward_its_owners_only(fresh: Callable[[str], Document]) -> None:
    """partitioned: h100-training's 8 and a10g-search's 4 (dedicated to search-ranking) are 12 whole GPUs; a quota
    only search-ranking could place there does not fit in the 8 of the pool dedicated to no one."""
    document = fresh("partitioned")
    assert of(check_plan(document), "gpu-quota-within-capacity") == []
    inputs(document, "tenant-search-ranking-gpu-quota")["spec"]["hard"][labels.GPU_QUOTA_KEY] = "0"
    inputs(document, "tenant-inference-gpu-quota")["spec"]["hard"][labels.GPU_QUOTA_KEY] = "4"
    [violation] = of(check_plan(document), "gpu-quota-within-capacity")
    assert "beyond what their dedicated pools hold add up to 12 GPUs" in violation.message
    assert "advertise 8" in violation.message and "a10g-search" in violation.message


def test_mig_slices_are_counted_per_profile(fresh: Callable[[str], Document]) -> None:
    document = fresh("partitioned")
    inputs(document, "tenant-inference-gpu-quota")["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] = "43"
    [violation] = of(check_plan(document), "gpu-quota-within-capacity")
    assert "quotas of MIG 1g.10gb (nvidia.com/mig-1g.10gb) add up to 57" in violation.message
    assert "advertise 56" in violation.message


def test_a_karpenter_pool_counts_at_its_limit_and_must_taint_its_nodes(karpenter_plan: Plan) -> None:
    """examples/Pulumi.karpenter.yaml: 16 GPUs of quota on pools whose NodePools may reach 20 (one node runs now)."""
    document = copy.deepcopy(karpenter_plan.document)
    assert check_plan(document) == []
    inputs(document, "tenant-analytics-gpu-quota")["spec"]["hard"][labels.GPU_QUOTA_KEY] = "9"
    [violation] = of(check_plan(document), "gpu-quota-within-capacity")
    assert "add up to 21 GPUs" in violation.message and "advertise 20" in violation.message

    node_pool = next(r for r in document["resources"] if r["type"] == "kubernetes:karpenter.sh/v1:NodePool")
    node_pool["inputs"]["spec"]["template"]["spec"]["taints"] = []
    [untainted] = of(check_plan(document), "gpu-pool-tainted")
    assert "NodePool a10g-training does not taint its nodes" in untainted.message


def test_queue_flavors_of_karpenter_pools_are_judged_at_their_limit() -> None:
    config = stack_config("karpenter")
    config["gpu-platform:tenancy"] = {"mode": "queue"}
    doc = copy.deepcopy(render_stack("karpenter", config).document)
    assert check_plan(doc) == []
    queue = next(r for r in doc["resources"] if r["type"].endswith(":ClusterQueue")
                 and r["inputs"]["metadata"]["name"] == "llm-training")
    [quota] = [flavor["resources"][0] for group in queue["inputs"]["spec"]["resourceGroups"]
               for flavor in group["flavors"] if flavor["name"] == "a10g-training"]
    assert quota["nominalQuota"] == 8
    quota["nominalQuota"] = 17  # the pool's limit is 4 nodes x 4 GPUs
    [violation] = of(check_plan(doc), "queue-guarantee-within-capacity")
    assert "its pool advertises 16" in violation.message


def test_in_dra_queue_mode_guarantees_not_ceilings_are_held_to_each_classs_devices() -> None:
    """The DRA example in tenancy mode queue: tenants' ceilings (guarantee plus borrowing) add up past a class's
    devices, which is borrowing; a guarantee raised past them is reported on the class."""
    doc = copy.deepcopy(render_stack("dra-queue", dra_queue_config()).document)
    assert of(check_plan(doc), "gpu-quota-within-capacity") == []
    whole = "gpu.gpu-platform.io.deviceclass.resource.k8s.io/devices"
    [quota] = [quota for group in inputs(doc, "tenant-research-queue-cluster-queue")["spec"]["resourceGroups"]
               for flavor in group["flavors"] for quota in flavor["resources"] if quota["name"] == whole]
    quota["nominalQuota"] = 1  # training 6, search 2, research 1: 9 of the 8 H100s
    [violation] = of(check_plan(doc), "gpu-quota-within-capacity")
    assert "DeviceClass gpu.gpu-platform.io add up to 9 devices" in violation.message
    assert "research 1" in violation.message
