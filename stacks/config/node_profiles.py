"""Node profiles: the sysctls, hugepages and CPU sets a pool's nodes boot with."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainValidator, model_validator

from fleet import sysctls
from fleet.catalog import HUGEPAGE_SIZES_MIB, MAX_HUGEPAGES_SHARE, InstanceType
from fleet.cpusets import parse_cpuset
from stacks.config.fields import Int, StrictModel, _shown


# What `sysctl -w` takes: numbers and words, single spaces between them (tcp_rmem's "4096 87380 6291456"); no quotes
# or shell text, which sysctl.conf and Tuned would take literally and every node's boot would then fail on.
SYSCTL_VALUE = r"^[A-Za-z0-9_.:/,+%@-]+( [A-Za-z0-9_.:/,+%@-]+)*$"
CPUSET = r"^[0-9]{1,3}(-[0-9]{1,3})?(,[0-9]{1,3}(-[0-9]{1,3})?)*$"


def _cpuset(value: str) -> str:
    """A cpuset list whose ranges run upwards."""
    parse_cpuset(value)
    return value


def _nodes_or_share(value: Any) -> int | str:
    """A number of nodes (at least 1) or a percentage of them ("10%")."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]?%|100%", value):
        return value
    raise ValueError(f"{_shown(value)} is not a number of nodes (at least 1) nor a percentage; write e.g. 1 or \"10%\"")


class NodeProfileConfig(StrictModel):
    """How a pool's nodes are tuned: CPU and topology managers, reserved CPUs, hugepages, sysctls."""

    cpu_manager_policy: Literal["none", "static"] = "static"
    topology_manager_policy: Literal["none", "best-effort", "restricted", "single-numa-node"] = "single-numa-node"
    topology_manager_scope: Literal["container", "pod"] = "pod"
    reserved_cpus: Annotated[str, AfterValidator(_cpuset)] = Field(
        pattern=CPUSET, description="CPUs for the OS and the kubelet, as a cpuset list")
    hugepages: dict[Literal["2Mi", "1Gi"], Annotated[Int, Field(ge=1, le=1_000_000)]] = {}
    pod_sysctls: tuple[str, ...] = Field(default=(), description="sysctls pods may set (safe or namespaced)")
    node_sysctls: dict[str, Annotated[str, Field(min_length=1, pattern=SYSCTL_VALUE)]] = Field(
        default={}, description="node-level sysctls and their values")
    max_unavailable: Annotated[int | str, PlainValidator(_nodes_or_share)] = Field(
        default=1, description="OpenShift: nodes the Machine Config Operator reboots at once")

    @model_validator(mode="after")
    def _check(self) -> NodeProfileConfig:
        if self.cpu_manager_policy == "none" and self.topology_manager_policy != "none":
            raise ValueError("topologyManagerPolicy needs cpuManagerPolicy static to align CPUs with GPUs; "
                             "set cpuManagerPolicy: static or topologyManagerPolicy: none")
        return self

    @property
    def reserved(self) -> set[int]:
        return parse_cpuset(self.reserved_cpus)

    @property
    def hugepages_mib(self) -> int:
        return sum(HUGEPAGE_SIZES_MIB[size] * count for size, count in self.hugepages.items())

    def check_sysctls(self, kubernetes_version: str) -> None:
        """Each sysctl in its class: pods set safe and namespaced ones, only the node sets node-level ones."""
        for name in self.pod_sysctls:
            if not sysctls.is_name(name):
                raise ValueError(f"podSysctls: {name!r} is not a sysctl name (dotted, lowercase, e.g. "
                                 "net.core.somaxconn; a trailing * for a namespaced prefix)")
            if sysctls.classify(name, kubernetes_version) == "node":
                raise ValueError(f"podSysctls: {name!r} is node-level (not namespaced), so no pod may set it; "
                                 "move it to nodeSysctls with its value")
        for name in self.node_sysctls:
            if not sysctls.is_name(name) or name.endswith("*"):
                raise ValueError(f"nodeSysctls: {name!r} is not a sysctl name (dotted, lowercase, e.g. "
                                 "vm.max_map_count)")
            kind = sysctls.classify(name, kubernetes_version)
            if kind != "node":
                where = "any pod may set it" if kind == "safe" else "pods set it in their own namespace"
                raise ValueError(f"nodeSysctls: {name!r} is namespaced ({where}), so the node's value would not "
                                 "reach pods; list it in podSysctls and set it in the pod's securityContext")

    def check_instance(self, instance: InstanceType) -> None:
        """Reserved CPUs among the type's vCPUs, leaving some to pods; hugepages within its memory."""
        reserved = self.reserved
        if max(reserved) >= instance.vcpus or len(reserved) >= instance.vcpus:
            raise ValueError(f"profile.reservedCpus {self.reserved_cpus!r} does not fit the {instance.vcpus} vCPUs "
                             f"(0-{instance.vcpus - 1}) of the instance type, leaving CPUs to pods; reserve fewer")
        limit = int(instance.memory_mib * MAX_HUGEPAGES_SHARE)
        if self.hugepages_mib > limit:
            raise ValueError(f"profile.hugepages take {self.hugepages_mib} MiB, over {int(MAX_HUGEPAGES_SHARE * 100)}% "
                             f"of the instance type's {instance.memory_mib} MiB ({limit} MiB); declare fewer pages")
