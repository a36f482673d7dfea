"""What a rendered stack asks of a cluster: its Kubernetes objects in the order the engine creates them, the
namespaces it expects the cluster to have, and kwok nodes shaped like its pools."""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from typing import Any

from components import labels
from e2e.cluster import kwok_node
from gpuctl.render import manifests
from gpuctl.stackfile import stack_file_from_config
from fleet.catalog import NODE_OSES, OPENSHIFT_RELEASES, InstanceType, nfd_os_release_labels
from stacks.config import PROJECT, NodePoolConfig, StackConfig, parse_stack_config
from tests.conftest import Plan, config_values, render_stack

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"  # set by GPU feature discovery on nodes with a working driver
CPU_NODES = 2
# A bring-your-own node declares its GPUs only: the stand-in nodes get the CPUs and memory of a DGX-class server.
BYO_NODE_SHAPE = InstanceType("", 0, 0, 128, 1 << 20)


@dataclass(frozen=True)
class Stack:
    name: str
    plan: Plan
    config: StackConfig

    @classmethod
    def render(cls, name: str) -> Stack:
        return cls(name, render_stack(name), parse_stack_config(config_values(name)))

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], plan: Plan | None = None) -> Stack:
        """A stack from a stack file's `config:` mapping (an example, or a shipped stack edited), and its render."""
        values = stack_file_from_config(name, copy.deepcopy(config)).config
        return cls(name, plan or render_stack(name, config),
                   parse_stack_config({key.removeprefix(f"{PROJECT}:"): value for key, value in values.items()}))

    @property
    def openshift(self) -> bool:
        return self.config.cluster.flavor == "openshift"

    def objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object of the plan, in the order the engine creates them: a resource only after every
        resource it depends on (the mock runtime records registrations, which need not come in that order)."""
        return manifests({"resources": dependency_order(self.plan.resources)})

    def missing_namespaces(self) -> list[str]:
        """Namespaces the stack's objects live in that the stack does not create: the cluster's own."""
        created = {obj["metadata"]["name"] for obj in self.objects() if obj["kind"] == "Namespace"}
        used = {obj["metadata"]["namespace"] for obj in self.objects() if obj["metadata"].get("namespace")}
        return sorted(used - created - {"default", "kube-system"})

    def tenants(self, priority_class: str | None = None) -> list[Any]:
        return [tenant for tenant in self.config.tenants
                if priority_class is None or tenant.priority_class == priority_class]

    def nodes(self) -> list[dict[str, Any]]:
        """kwok nodes (stand-ins: no device plugin runs here): each pool's replicas with the labels and taints its
        machines register with (from the plan), the labels NFD and GPU feature discovery add, and what the device
        plugin advertises under the pool's partitioning, per kind (fleet.partitioning, read from k8s-device-plugin
        v0.20.0: whole GPUs as nvidia.com/gpu, time-sliced shares renamed nvidia.com/gpu.shared and counted
        GPUs x replicas, MIG devices as nvidia.com/mig-<profile> under the mixed strategy, counted from the MIG
        manager's layout); plus untainted CPU nodes. A Karpenter pool has none here: Karpenter launches its nodes
        (e2e/karpenter.py)."""
        nodes = []
        for pool in self.config.node_pools:
            if pool.karpenter is not None:
                continue
            node_labels, taints = self._registration(pool)
            node_labels |= nfd_labels(self.config, pool) | {GPU_PRESENT_LABEL: "true"}
            shape = pool.instance if pool.bring_your_own is None else BYO_NODE_SHAPE
            capacity = {"cpu": str(shape.vcpus), "memory": f"{shape.memory_mib}Mi", "pods": "110",
                        **{name: str(count) for name, count in pool.advertised_per_node.items()}}
            nodes += [kwok_node(f"{pool.name}-{index}", labels=node_labels, capacity=capacity, taints=taints)
                      for index in range(pool.replicas)]
        return nodes + cpu_nodes()

    def pool_selector(self, pool: str) -> dict[str, str]:
        """The labels that select a pool's nodes: the pool label the stack gives its machines, or the labels a
        bring-your-own pool's nodes already carry."""
        config = next(candidate for candidate in self.config.node_pools if candidate.name == pool)
        if config.bring_your_own is not None:
            return dict(config.bring_your_own.node_selector)
        return {labels.POOL_LABEL: pool}

    def _registration(self, config: NodePoolConfig) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The labels and taints the pool's machines register with: a MachineSet's template, or the kubelet
        flags of an Auto Scaling Group's launch template; a bring-your-own pool's nodes as its owner sets them
        up (its selector's labels, the GPU taint, the device-plugin config label when it shares GPUs, the MIG layout
        label and the dedicated taint when it has them)."""
        pool = config.name
        if config.bring_your_own is not None:
            node_labels = dict(config.bring_your_own.node_selector)
            if config.time_slicing_replicas:
                node_labels[labels.DEVICE_PLUGIN_CONFIG_LABEL] = pool
            if config.mig_layout:
                node_labels[labels.MIG_CONFIG_LABEL] = config.partitioning.mig_layout
            dedicated = [labels.dedicated_taint(pool)] if config.dedicated_to else []
            return node_labels, [dict(labels.GPU_TAINT), *dedicated]
        for resource in self.plan.resources:
            inputs = resource["inputs"]
            if resource["type"].endswith(":MachineSet"):
                spec = inputs["spec"]["template"]["spec"]
                node_labels = spec.get("metadata", {}).get("labels", {})
                if node_labels.get(labels.POOL_LABEL) == pool:
                    return dict(node_labels), list(spec.get("taints", []))
            if resource["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and "userData" in inputs:
                script = base64.b64decode(inputs["userData"]).decode()
                node_labels = dict(item.split("=", 1) for item in _flag(script, "node-labels").split(","))
                if node_labels.get(labels.POOL_LABEL) == pool:
                    taints = [_taint(item) for item in _flag(script, "register-with-taints").split(",")]
                    return node_labels, taints
        raise LookupError(f"no MachineSet or launch template registers nodes of pool {pool}")


def cpu_nodes() -> list[dict[str, Any]]:
    """The cluster's untainted CPU nodes (where system pods and every pod without GPUs run)."""
    return [kwok_node(f"cpu-{index}", labels={}, capacity={"cpu": "32", "memory": "128Gi", "pods": "110"})
            for index in range(CPU_NODES)]


def nfd_labels(config: StackConfig, pool: NodePoolConfig) -> dict[str, str]:
    """The labels NFD sets on a pool's GPU nodes (its pci, kernel and system sources): the NVIDIA PCI device, the
    kernel, and the os-release of the OS they run (on OpenShift the cluster release's RHCOS)."""
    target = config.kernel_target(pool)
    if config.cluster.flavor == "openshift":
        os_release = OPENSHIFT_RELEASES[config.cluster.minor].nfd_labels()
    else:
        node_os = NODE_OSES[target.os]
        os_release = nfd_os_release_labels(node_os.os_release_id, node_os.os_release_version)
    return {**labels.GPU_NODE_SELECTOR, labels.KERNEL_LABEL: target.kernel, **os_release}


def dependency_order(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Resources sorted so that each follows its dependencies, otherwise in registration order."""
    done: set[str] = set()
    ordered: list[dict[str, Any]] = []
    pending = list(resources)
    while pending:
        ready = [resource for resource in pending if set(resource["dependencies"]) <= done]
        if not ready:
            raise ValueError(f"dependency cycle among {[resource['urn'] for resource in pending]}")
        for resource in ready:
            done.add(resource["urn"])
        ordered += ready
        pending = [resource for resource in pending if resource["urn"] not in done]
    return ordered


def _flag(script: str, name: str) -> str:
    match = re.search(rf"--{name}=([^\s']+)", script)
    if not match:
        raise LookupError(f"--{name} is not in the launch template's kubelet flags")
    return match.group(1)


def _taint(text: str) -> dict[str, str]:
    """`key=value:Effect` or `key:Effect`, as the kubelet's --register-with-taints takes it."""
    key_value, effect = text.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    return {"key": key, "effect": effect, **({"value": value} if value else {})}
