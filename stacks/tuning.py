"""From the stack config to the tuning components: node profiles, EFA, tenant networks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.efa import EfaFabric
from components.node_profile import NodeProfile, NodeTuning
from components.tenant_network import Ipam, TenantNetworkArgs
from fleet import sysctls
from stacks.config import NodePoolConfig, TenantConfig, TenantNetworkConfig


def node_profile(pool: NodePoolConfig, kubernetes_version: str) -> NodeProfile:
    """A pool's profile, resolved: which of its pod sysctls the kubelet must allow (the unsafe ones)."""
    profile = pool.profile
    classes = {name: sysctls.classify(name, kubernetes_version) for name in profile.pod_sysctls}
    return NodeProfile(
        pool=pool.name, vcpus=pool.instance.vcpus, reserved_cpus=profile.reserved_cpus,
        cpu_manager_policy=profile.cpu_manager_policy, topology_manager_policy=profile.topology_manager_policy,
        topology_manager_scope=profile.topology_manager_scope,
        hugepages=tuple(sorted(profile.hugepages.items())),
        unsafe_sysctls=tuple(name for name, kind in classes.items() if kind == "unsafe"),
        safe_sysctls=tuple(name for name, kind in classes.items() if kind == "safe"),
        node_sysctls=tuple(sorted(profile.node_sysctls.items())), max_unavailable=profile.max_unavailable)


@dataclass
class PoolTuning:
    """The tuning of every pool: profiles by pool, OpenShift tuning components by pool, the EFA fabric if any."""

    profiles: dict[str, NodeProfile]
    tuning: dict[str, NodeTuning]
    fabric: EfaFabric | None

    def waits(self, pool: str) -> list[pulumi.Resource]:
        """What a pool's machines wait for: its MachineConfigPool and PerformanceProfile, so a new node joins the
        tuned pool, never the plain worker pool first."""
        return [self.tuning[pool]] if pool in self.tuning else []

    def pool_args(self, pool: NodePoolConfig) -> dict[str, Any]:
        """The GpuNodePoolArgs fields of a pool's tuning."""
        args: dict[str, Any] = {}
        if pool.name in self.profiles:
            args["profile"] = self.profiles[pool.name]
        if pool.fabric == "efa" and self.fabric is not None:
            args["efa_interfaces"] = pool.instance.efa_interfaces
            args["placement_group"] = self.fabric.placement_groups[pool.name].name
        return args

    def rollouts(self, flavor: str) -> dict[str, dict[str, object]]:
        """How a profile change reaches each tuned pool's nodes."""
        return {name: profile.rollout(flavor) for name, profile in self.profiles.items()}


def tenant_network_args(tenant: TenantConfig, network: TenantNetworkConfig) -> TenantNetworkArgs:
    ipam = network.ipam
    return TenantNetworkArgs(
        namespace=tenant.name, name=network.name, type=network.type, ipam=Ipam(ipam.type, ipam.range, ipam.gateway),
        master=network.master, mode=network.mode, resource_name=network.resource_name, vlan=network.vlan,
        protect=not (tenant.retired or network.retired))
