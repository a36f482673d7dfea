"""The fleet summary of allocation mode `dra`: the devices per DeviceClass against the tenants' quotas, and a switch
of allocation mode as the destructive change it is."""

from __future__ import annotations

from typing import Any

from gpuctl.summary.model import Destructive
from gpuctl.summary.plans import _outputs

# What restarts when the allocation mode changes: the GPU Operator runs the ClusterPolicy's operands or the
# GPUCluster's, never both (components/dra.py); pods holding DRA claims keep the DRA driver on their node until they
# end (GPU Operator v26.7.0 controllers/nodelabeling_controller.go, the deferred kubelet-plugin removal).
MODE_SWITCH = {
    ("devicePlugin", "dra"): "the ClusterPolicy's operands on every GPU node (device plugin, GPU feature discovery, "
                             "container toolkit, MIG manager, DCGM exporter), which the GPUCluster's replace (DRA "
                             "driver, DCGM exporter, DRA validator); running GPU pods keep their GPUs, but new pods "
                             "asking nvidia.com/* get none: tenants move to claims (NVIDIA supports the GPUCluster on "
                             "new deployments only, not as an in-place migration)",
    ("dra", "devicePlugin"): "the GPUCluster's operands on every GPU node (DRA driver, DCGM exporter, DRA validator), "
                             "which the ClusterPolicy's replace (device plugin, GPU feature discovery, container "
                             "toolkit, MIG manager, DCGM exporter), the DeviceClasses, and tenants' access to their "
                             "claims: claims no longer allocate, pods holding devices keep them until they end, and "
                             "tenants' claims and claim templates stay for the platform team to remove",
}


def allocation_mode(plan: dict[str, Any]) -> str:
    return _outputs(plan).get("allocationMode", "devicePlugin")


def mode_switch(old: dict[str, Any], new: dict[str, Any]) -> list[Destructive]:
    """A change of allocation mode on a deployed stack (a new stack has no outputs yet)."""
    modes = (allocation_mode(old), allocation_mode(new))
    if not _outputs(old) or modes[0] == modes[1]:
        return []
    return [Destructive(f"allocation mode {modes[0]} -> {modes[1]}", MODE_SWITCH[modes])]


def device_classes(plan: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Mode dra: per DeviceClass of the plan, (the tenants' quotas on it, the devices it covers)."""
    outputs = _outputs(plan)
    covered = {name: entry["devices"] for name, entry in (outputs.get("deviceClasses") or {}).items()}
    given: dict[str, int] = {}
    for tenant in (outputs.get("tenants") or {}).values():
        for name, count in (tenant.get("devices") or {}).items():
            given[name] = given.get(name, 0) + count
    return {name: (given.get(name, 0), covered.get(name, 0))
            for name in sorted(set(covered) | {name for name, count in given.items() if count})}
