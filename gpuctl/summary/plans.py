"""Reading a rendered plan: its outputs, its pools' states, their kernels and sharing."""

from __future__ import annotations

from typing import Any

import yaml

from components import labels
from gpuctl.summary.model import ASG, CONFIG_MAP, LAUNCH_TEMPLATE, MACHINE_SET, POOL, PoolState


def _outputs(plan: dict[str, Any]) -> dict[str, Any]:
    return plan.get("outputs") or {}


def _pool_components(plan: dict[str, Any]) -> dict[str, str]:
    """Pool name -> the URN of its GpuNodePool component."""
    return {resource["name"].removeprefix("pool-"): resource["urn"] for resource in plan["resources"]
            if resource["type"] == POOL}


def _children(plan: dict[str, Any], parent: str) -> dict[str, dict[str, Any]]:
    """A component's custom resources by type."""
    return {resource["type"]: resource for resource in plan["resources"] if resource["parent"] == parent}


def _tag(tags: list[dict[str, Any]], key: str) -> str | None:
    return next((tag.get("value") for tag in tags if tag.get("key") == key), None)


def pool_states(plan: dict[str, Any]) -> dict[str, PoolState]:
    """Each pool of a plan: from its `pools` output, else from its records (plans written before that output)."""
    outputs = _outputs(plan)
    if isinstance(outputs.get("pools"), dict):
        # Plans from before each pool chose its sharing have one fleet-wide time-slicing config instead.
        fleet_sharing = None if all("sharing" in pool for pool in outputs["pools"].values()) else time_slicing(plan)
        return {name: PoolState(
            instance_type=pool.get("instanceType") or _brought(pool), nodes=pool.get("nodes", 0),
            gpus=pool.get("gpus", 0),
            gpus_per_node=pool.get("gpusPerNode", 0), os=pool.get("os"), kernel=pool.get("kernel"),
            image=pool.get("image"), min_nodes=pool.get("minNodes"), max_nodes=pool.get("maxNodes"),
            roll=dict(pool.get("roll") or {}), retired=bool(pool.get("retired")),
            profile=dict(pool.get("profile") or {}), sharing=pool.get("sharing", fleet_sharing),
            partitioning=pool.get("partitioning"), kinds=dict(pool.get("advertised") or {}),
            dedicated_to=tuple(pool.get("dedicatedTo") or ()))
            for name, pool in sorted(outputs["pools"].items())}
    capacity = outputs.get("capacity") or {}
    states = {}
    for name, urn in sorted(_pool_components(plan).items()):
        children = _children(plan, urn)
        gpus = capacity.get(name, 0)
        if ASG in children:
            group = children[ASG]["inputs"]
            template = children.get(LAUNCH_TEMPLATE, {}).get("inputs", {})
            nodes = group.get("desiredCapacity", 0)
            refresh = (group.get("instanceRefresh") or {}).get("preferences") or {}
            states[name] = PoolState(
                template.get("instanceType"), nodes, gpus, gpus // nodes if nodes else 0,
                _tag(group.get("tags", []), labels.OS_ANNOTATION), _tag(group.get("tags", []), labels.KERNEL_ANNOTATION),
                template.get("imageId"), group.get("minSize"), group.get("maxSize"),
                {"method": "instance-refresh", **refresh})
        elif MACHINE_SET in children:
            spec = children[MACHINE_SET]["inputs"].get("spec", {})
            provider = spec.get("template", {}).get("spec", {}).get("providerSpec", {}).get("value", {})
            nodes = spec.get("replicas", 0)
            states[name] = PoolState(provider.get("instanceType"), nodes, gpus, gpus // nodes if nodes else 0,
                                     None, None, (provider.get("ami") or {}).get("id"),
                                     roll={"method": "machineset"})
    return states


def _brought(pool: dict[str, Any]) -> str | None:
    """What stands for a bring-your-own pool's instance type: its nodes' GPUs."""
    if (pool.get("roll") or {}).get("method") != "bring-your-own":
        return None
    return f"bring-your-own, {pool.get('gpusPerNode')}x {pool.get('gpuModel')}"


def time_slicing(plan: dict[str, Any]) -> int | None:
    """Pods per GPU of a plan written when time-slicing was the whole fleet's (its pools' outputs say no `sharing`):
    the device plugin's one time-slicing config (k8s-device-plugin config v1), None when off."""
    for resource in plan["resources"]:
        if resource["type"] != CONFIG_MAP:
            continue
        for text in (resource["inputs"].get("data") or {}).values():
            if not isinstance(text, str) or "timeSlicing" not in text:
                continue
            try:
                document = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            shared = ((document or {}).get("sharing") or {}).get("timeSlicing") or {}
            for resource_config in shared.get("resources") or []:
                if resource_config.get("name") == labels.GPU_RESOURCE:
                    return resource_config.get("replicas")
    return None


def _openshift_kernel(plan: dict[str, Any]) -> str | None:
    """The kernel every OpenShift node runs (the release's): the one the stack declares (plans from before that
    output: the one kernel with a driver that is not kept)."""
    outputs = _outputs(plan)
    live = outputs.get("declaredKernels") or [
        key for key in outputs.get("kernels", []) if key not in outputs.get("keptKernels", [])]
    return live[0] if len(live) == 1 else None


def _kernel_key(state: PoolState, plan: dict[str, Any]) -> str | None:
    if state.os and state.kernel:
        return f"{state.os}/{state.kernel}"
    return _openshift_kernel(plan)
