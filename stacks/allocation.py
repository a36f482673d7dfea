"""Allocation mode `dra`: what the stack config may not ask of it, each refusal a field and its fix."""

from __future__ import annotations

from typing import Any

from fleet.dra import DraPool, dedicated_model_clash

DRA_GA_MINOR = 34  # resource.k8s.io/v1, served by default from Kubernetes 1.34 (KEP-4381)


def dra_problem(config: Any) -> tuple[tuple[str | int, ...], str] | None:
    """The first field of a validated stack config (stacks.config.StackConfig) that mode `dra` cannot serve, with
    the reason and the fix; None when it can serve them all."""
    version = config.cluster.kubernetes_version
    if version is not None and int(version.split(".")[1]) < DRA_GA_MINOR:
        return ("cluster", "kubernetesVersion"), (
            f"allocationMode dra needs Kubernetes 1.{DRA_GA_MINOR} or later, where resource.k8s.io/v1 (DeviceClasses, "
            f"claims and their quota) is GA and served; upgrade the cluster, or use allocationMode devicePlugin")
    for index, pool in enumerate(config.node_pools):
        if pool.time_slicing_replicas is not None:
            return ("nodePools", index, "timeSlicingReplicas"), _TIME_SLICING
        if pool.partitioning.kind == "mig" and pool.bring_your_own is None:
            return ("nodePools", index, "migLayout"), (
                "allocationMode dra has no MIG manager to cut this pool's GPUs: GPU Operator v26.7.0's GPUCluster runs "
                "only the DRA driver, DCGM, its exporter and the DRA validator (internal/state/manager.go "
                "newGPUClusterStates); use allocationMode devicePlugin, or a bring-your-own pool whose GPUs its "
                "owner cuts as the layout says")
    if config.tenancy.mode == "queue":
        return ("tenancy", "mode"), ("tenancy mode queue is not offered with allocationMode dra yet: its Kueue queues "
                                     "count extended resources, not devices per DeviceClass; use tenancy mode quota, or "
                                     "allocationMode devicePlugin")
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
