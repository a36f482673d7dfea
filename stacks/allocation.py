"""Allocation mode `dra`: what the stack config may not ask of it, each refusal a field and its fix."""

from __future__ import annotations

from typing import Any

from fleet.dra import DraPool, dedicated_model_clash, device_classes, pool_classes, quota_key

DRA_GA_MINOR = 34  # resource.k8s.io/v1, served by default from Kubernetes 1.34 (KEP-4381)
MAX_MAPPINGS = 16  # Kueue v0.19.2's cap on resources.deviceClassMappings (pkg/config/validation.go)


def dra_problem(config: Any) -> tuple[tuple[str | int, ...], str] | None:
    """The first field of a validated stack config (stacks.config.StackConfig) that mode `dra` cannot serve, with
    the reason and the fix; None when it can serve them all."""
    version = config.cluster.kubernetes_version
    if version is not None and int(version.split(".")[1]) < DRA_GA_MINOR:
        return ("cluster", "kubernetesVersion"), (
            f"allocationMode dra needs Kubernetes 1.{DRA_GA_MINOR} or later, where resource.k8s.io/v1 (DeviceClasses, "
            f"claims and their quota) is GA and served; upgrade the cluster, or use allocationMode devicePlugin")
    if config.tenancy.mode == "queue":
        if config.cluster.flavor == "openshift":
            return ("tenancy", "mode"), (
                "tenancy mode queue with allocationMode dra needs Kueue to count devices per DeviceClass "
                "(resources.deviceClassMappings), which the stack sets in the upstream chart's configuration only, "
                "not through the Red Hat build's Kueue instance; use tenancy mode quota, or allocationMode "
                "devicePlugin")
        classes = device_classes(dra_pools(config))
        if len(classes) > MAX_MAPPINGS:
            return ("nodePools",), (
                f"tenancy mode queue with allocationMode dra counts each DeviceClass as a resource of its own, and "
                f"Kueue v0.19.2 takes at most {MAX_MAPPINGS} deviceClassMappings (pkg/config/validation.go, "
                f"validateDeviceClassMappings); the pools make {len(classes)} classes: offer fewer MIG profiles or "
                f"dedicated pools, or use tenancy mode quota")
    for index, pool in enumerate(config.node_pools):
        if pool.time_slicing_replicas is not None:
            return ("nodePools", index, "timeSlicingReplicas"), _TIME_SLICING
        if pool.partitioning.kind == "mig" and pool.bring_your_own is None:
            return ("nodePools", index, "migLayout"), (
                "allocationMode dra has no MIG manager to cut this pool's GPUs: GPU Operator v26.7.0's GPUCluster runs "
                "only the DRA driver, DCGM, its exporter and the DRA validator (internal/state/manager.go "
                "newGPUClusterStates); use allocationMode devicePlugin, or a bring-your-own pool whose GPUs its "
                "owner cuts as the layout says")
    clash = dedicated_model_clash(dra_pools(config))
    if clash:
        pool, other, kind = clash
        index = next(i for i, candidate in enumerate(config.node_pools) if candidate.name == pool)
        return ("nodePools", index, "dedicatedTo"), (
            f"pool {pool} is dedicated, and pool {other} offers {kind} on the same GPU model: in allocationMode dra a "
            "DeviceClass tells pools apart only by the GPU model NVIDIA's DRA driver publishes (no node or pool "
            "attribute); give the dedicated pool a model of its own, or use allocationMode devicePlugin")
    return None


_TIME_SLICING = (
    "allocationMode dra shares GPUs per claim, not per pool: pods that reference one ResourceClaim share its devices, "
    "and time-slicing is a setting of that claim for NVIDIA's DRA driver (dra-driver-nvidia-gpu "
    "api/nvidia.com/resource/v1beta1/gpuconfig.go, sharing.strategy TimeSlicing); remove timeSlicingReplicas, or use "
    "allocationMode devicePlugin")


def dra_pools(config: Any) -> list[DraPool]:
    """The pools of a stack config as DRA sees them (fleet.dra): model, devices per node and kind, MIG cut, nodes
    counted, owners."""
    return [DraPool(pool.name, pool.instance.gpu_model, dict(pool.advertised_per_node),
                    pool.partitioning.devices(pool.instance.gpu_model) if pool.partitioning.kind == "mig" else {},
                    pool.counted_nodes, pool.dedicated_to)
            for pool in config.node_pools]


def device_shares(config: Any, shares: dict[str, dict[str, dict[str, int]]]) -> dict[str, dict[str, dict[str, int]]]:
    """Tenancy mode queue in mode `dra`: each tenant's guarantee per pool (stacks.tenancy.guarantees) with each kind
    named as the resource Kueue counts for the pool's DeviceClass of it (the class's quota key, components.kueue)."""
    classes = {pool.name: pool_classes(pool) for pool in dra_pools(config)}
    return {tenant: {pool: {quota_key(classes[pool][kind]): amount for kind, amount in kinds.items()}
                     for pool, kinds in share.items()} for tenant, share in shares.items()}
