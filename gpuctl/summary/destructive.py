"""The destructive lines, what the summary cannot know, the engine's notes and retirements."""

from __future__ import annotations

from typing import Any

from components import labels
from gpuctl.diff import NVIDIA_DRIVER, PROVIDER_REPLACED, PlanDiff, object_name, refused_by_the_engine
from gpuctl.summary.model import (ASG, DRIFT, LOCAL_QUEUE, MACHINE_SET, NAMESPACE, NETWORK, POOL,
                                  POOL_DOWN, PROTECTED, RETIRED_NETWORK, RETIRED_POOL, RETIRED_TENANT, STRANDED,
                                  UNDRAINED, UNKNOWN, Destructive, KernelChange, PoolChange, TenantChange)
from gpuctl.summary.pools import _recut_losses
from gpuctl.summary.tenants import _networks


def _retirements(pools: list[PoolChange], tenants: list[TenantChange], old: dict[str, Any],
                 new: dict[str, Any]) -> list[str]:
    """Each retired pool, tenant and tenant network of the head revision, with what retiring means."""
    lines = [f"pool {pool.name}: {'newly ' if pool.before and not pool.before.retired else ''}{RETIRED_POOL}"
             for pool in pools if pool.after and pool.after.retired]
    lines += [f"tenant {tenant.name}: {RETIRED_TENANT}" for tenant in tenants if tenant.retired]
    retired_tenants = {tenant.namespace for tenant in tenants if tenant.retired}  # their networks go with them
    before = _networks(old)
    for urn, network in sorted(_networks(new).items()):
        metadata = network["inputs"].get("metadata") or {}
        if network["options"]["protect"] or metadata.get("namespace") in retired_tenants:
            continue
        was = before.get(urn)
        newly = "newly " if was is not None and was["options"]["protect"] else ""
        lines.append(f"tenant {metadata.get('namespace')} network {metadata.get('name')}: {newly}{RETIRED_NETWORK}")
    return lines


def _destructive(diff: PlanDiff, pools: list[PoolChange], tenants: list[TenantChange],
                 kernels: list[KernelChange]) -> list[Destructive]:
    items = []
    quotas = {tenant.namespace: tenant for tenant in tenants}
    # A removed pool's protected children show on the pool's line.
    folded = {step.resource["urn"]: "" for step in diff.steps
              if step.op == "delete" and step.resource["type"] == POOL}
    pool_items = {}
    for pool in pools:
        items += _recut_losses(pool) + list(pool.takes)
        if (pool.after or pool.before).roll.get("method") == "bring-your-own":
            continue  # its nodes are not the stack's: none of them goes
        if pool.after is None and pool.before is not None:
            pool_items[f"pool-{pool.name}"] = len(items)
            # A Karpenter pool's GPUs are counted at its limit; what goes is what runs now.
            gpus = pool.before.nodes * pool.before.gpus_per_node if pool.before.roll.get("method") == DRIFT \
                else pool.before.gpus
            items.append(Destructive(f"pool {pool.name}", f"{pool.before.nodes} nodes, {gpus} GPUs "
                                     f"({pool.before.instance_type})"))
        elif pool.before and pool.after and pool.after.max_nodes is not None and pool.before.max_nodes is not None \
                and pool.after.max_nodes < pool.before.max_nodes \
                and pool.after.roll.get("method") == "instance-refresh":
            items.append(Destructive(f"pool {pool.name} maximum {pool.before.max_nodes} -> {pool.after.max_nodes}",
                                     "any running nodes above the new maximum (AWS lowers the group's size to it)"))
        elif pool.before and pool.after and pool.after.nodes < pool.before.nodes and pool.size_applied:
            items.append(Destructive(f"pool {pool.name} nodes", f"{pool.before.nodes - pool.after.nodes} nodes, "
                                     f"{pool.before.gpus - pool.after.gpus} GPUs"))
    removed_kernels = {kernel.key: kernel for kernel in kernels}
    refused = {id(step) for step in refused_by_the_engine(diff)}
    # A removed tenant's protected objects (limits, fence, binding, networks) show on its namespace's line.
    refused_namespaces = {step.resource["inputs"]["metadata"]["name"] for step in diff.steps
                          if id(step) in refused and step.resource["type"] == NAMESPACE}
    for step in diff.steps:
        if step.op not in ("delete", "replace"):
            continue
        resource, verb = step.resource, "deleted" if step.op == "delete" else "replaced (deleted, then created)"
        engine = PROTECTED if id(step) in refused else ""
        if engine and resource["parent"] in folded:
            folded[resource["parent"]] = engine
            continue
        if engine and (resource["inputs"].get("metadata") or {}).get("namespace") in refused_namespaces:
            continue
        if resource["type"] == NAMESPACE:
            name = resource["inputs"]["metadata"]["name"]
            tenant = quotas.get(name)
            quota = f", quota {tenant.gpus_before} GPUs ({tenant.priority_before})" if tenant and \
                tenant.gpus_before is not None else ""
            whose = "the tenant's workloads, volumes and secrets" if tenant else "what runs there and its secrets"
            items.append(Destructive(f"namespace {name} {verb}", f"every object in it: {whose}{quota}", engine))
        elif resource["type"] == LOCAL_QUEUE and step.op == "delete":
            items.append(Destructive(f"queue {object_name(resource)} {verb}", STRANDED, engine))
        elif resource["type"] == NETWORK and step.op == "delete":
            items.append(Destructive(f"network {object_name(resource)} {verb}",
                                     "the tenant's secondary network: pods that ask for it no longer start (running "
                                     "pods keep their interface until they restart)", engine))
        elif resource["type"] == NVIDIA_DRIVER:
            annotations = resource["inputs"].get("metadata", {}).get("annotations", {})
            node_os, kernel_name = annotations.get(labels.OS_ANNOTATION), annotations.get(labels.KERNEL_ANNOTATION)
            key = f"{node_os}/{kernel_name}"
            kernel = removed_kernels.get(key)
            nodes = f"kernel {key}" if kernel_name else f"{node_os} (every kernel)"  # an OS release's driver
            items.append(Destructive(f"driver {object_name(resource)} {verb}",
                                     f"the GPU driver of every node on {nodes}"
                                     + (f" ({kernel.note})" if kernel and kernel.note else ""), engine))
        elif step.op == "replace" and resource["type"] == ASG:
            items.append(Destructive(f"{resource['name']} replaced", f"every node of the pool: {POOL_DOWN}", engine))
        elif step.op == "replace" and resource["type"] == MACHINE_SET:
            items.append(Destructive(f"{resource['name']} {verb}", "every node of the pool", engine))
        elif step.op == "replace" and resource["type"].startswith("pulumi:providers:"):
            users = [other for other in diff.steps if (other.resource.get("provider") or "").startswith(
                f"{resource['urn']}::")]
            reasons = ", ".join(f"{c.named} {c.old} -> {c.new}" for c in step.changes
                                if c.path in step.replace_reasons)
            items.append(Destructive(f"{resource['type'].rsplit(':', 1)[-1]} provider replaced ({reasons})",
                                     f"every resource it manages, replaced with it: {len(users)} resources, "
                                     "every pool's nodes among them", engine))
        elif engine:
            items.append(Destructive(f"{resource['name']} {verb}", object_name(resource) or resource["type"], engine))
    for urn, engine in folded.items():
        index = pool_items.get(diff.parents[urn]["name"])
        if engine and index is not None:
            items[index] = Destructive(items[index].what, items[index].takes_away, engine)
    return items + _lost_drain(pools) + _lost_access(tenants)


def _lost_drain(pools: list[PoolChange]) -> list[Destructive]:
    """Pools whose nodes were drained before termination and no longer are (the handler's IAM policy goes)."""
    names = [pool.name for pool in pools if pool.before and pool.after
             and pool.before.roll.get("drain") and not str(pool.before.roll["drain"]).startswith(UNDRAINED)
             and str(pool.after.roll.get("drain", "")).startswith(UNDRAINED)]
    if not names:
        return []
    return [Destructive(f"node drain switched off for pool{'s' if len(names) != 1 else ''} {', '.join(names)}",
                        "the drain before a node terminates: each node a refresh, scale-in or removal terminates "
                        "waits out its lifecycle hook and goes with its pods still running (set "
                        "cluster.nodeTerminationHandlerRole, or attach the handler's IAM policy to the nodes' role)")]


def _lost_access(tenants: list[TenantChange]) -> list[Destructive]:
    """Groups that worked in a tenant's namespace and no longer do."""
    return [Destructive(f"group {tenant.group_before} loses namespace {tenant.namespace}",
                        f"every right {tenant.group_before} had there (the tenant role): its members can no longer "
                        f"see or run the tenant's workloads; {tenant.group_after} gets them instead")
            for tenant in tenants if tenant.group_before and tenant.group_after
            and tenant.group_before != tenant.group_after]


def _unknowns(diff: PlanDiff, pools: list[PoolChange], kernels: list[KernelChange], offline: bool) -> list[str]:
    lines = []
    if offline:
        lines.append("live discovery not read: the kernels GPU nodes run now are not known to this preview")
    for kernel in kernels:
        if kernel.change == "kept":
            lines.append(f"driver for {kernel.key} kept only for lack of a node inventory: it goes in the first "
                         "deploy (live discovery) or preview with --observed-nodes that sees no node on it")
    for pool in pools:
        if pool.before and pool.after and pool.before.nodes != pool.after.nodes and pool.size_applied:
            lines.append(f"pool {pool.name}: sets the node count to {pool.after.nodes}; the autoscaler may have "
                         "moved it since the last deploy (the live size was not read)")
    for step in diff.steps:
        unknown = [change.named for change in step.changes if change.new == UNKNOWN]
        if unknown:
            lines.append(f"{step.resource['name']}: {', '.join(unknown)} known only at deploy")
    return lines


def _engine_notes(diff: PlanDiff) -> list[str]:
    notes = []
    for step in diff.steps:
        if step.op == "replace" and step.replace_reasons != [PROVIDER_REPLACED]:
            notes.append(f"{step.resource['name']}: replace decided by the providers' rules as gpuctl knows them "
                         f"({', '.join(step.replace_reasons)}); `pulumi preview` asks the provider itself")
    return notes
