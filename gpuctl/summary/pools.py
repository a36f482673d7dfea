"""The pools and rolls section: how each pool's nodes change, and how the change reaches them."""

from __future__ import annotations

import math
from typing import Any

from components import labels
from components.labels import GPU_RESOURCE
from fleet.partitioning import MIG_DISABLED
from gpuctl.diff import NVIDIA_DRIVER, PlanDiff, Step, object_name
from gpuctl.summary.model import (ASG, CONSOLIDATION_EVICTS, DRIFT, DRIFT_EVICTS, DRIVER_ROLL_EXCLUDED, EC2_NODE_CLASS,
                                  EXPIRY_UNBUDGETED, LAUNCH_TEMPLATE, MACHINE_SET, MCP_DEFAULT_MAX_UNAVAILABLE,
                                  NODE_POOL, NODE_TUNING, POOL_DOWN, PROFILE_TYPES, REFRESH_CANCELS, REQUIREMENTS,
                                  UNDERUTILIZED, UNDRAINED, Destructive, PoolChange, PoolState)
from gpuctl.summary.plans import _kernel_key, _pool_components


def _pool_steps(diff: PlanDiff, plan: dict[str, Any], name: str) -> list[Step]:
    """The steps of a pool's own resources and of its node profile (OpenShift: its NodeTuning component)."""
    parents = {_pool_components(plan).get(name)} | {
        resource["urn"] for resource in plan["resources"]
        if resource["type"] == NODE_TUNING and resource["name"] == f"tuning-{name}"}
    parents.discard(None)
    return [step for step in diff.steps if step.resource["parent"] in parents]


def _at_once(nodes: int, min_healthy: int | None) -> int:
    """Nodes an instance refresh takes out at once: it keeps minHealthyPercentage in service (at least one goes)."""
    if not nodes:
        return 0
    healthy = math.ceil(nodes * (min_healthy if min_healthy is not None else 90) / 100)
    return max(1, nodes - healthy)


SIZE_PATHS = ("desiredCapacity", "spec.replicas")


def size_applied(steps: list[Step]) -> bool:
    """Whether `pulumi up` sets the pool's node count (it does not where the autoscaler owns it)."""
    return any(change.path in SIZE_PATHS for step in steps for change in step.changes)


def _gpus(count: int) -> str:
    return f"{count} GPU{'s' if count != 1 else ''}"


def _refresh_phrase(state: PoolState, at_once: int) -> str:
    roll = state.roll
    parts = [f"instance refresh of {state.nodes} node{'s' if state.nodes != 1 else ''}: "
             f"{roll.get('minHealthyPercentage', 90)}% stay healthy, so {at_once} node{'s' if at_once != 1 else ''} "
             f"({_gpus(at_once * state.gpus_per_node)}) at a time"]
    if roll.get("maxHealthyPercentage"):
        parts.append(f"up to {roll['maxHealthyPercentage']}% launched before terminating")
    if roll.get("instanceWarmupSeconds") is not None:
        parts.append(f"{roll['instanceWarmupSeconds']}s warm-up per node")
    if roll.get("checkpoints"):
        delay = roll.get("checkpointDelaySeconds")
        parts.append(f"checkpoints at {', '.join(f'{c}%' for c in roll['checkpoints'])}"
                     + (f" ({delay}s pause)" if delay else ""))
    if roll.get("drain"):
        parts.append(f"drain: {roll['drain']}")
    return "; ".join(parts)


def drift_at_once(budget: str, nodes: int) -> int:
    """Nodes a Karpenter disruption budget lets go at once: a count, or a percentage of the pool's nodes rounded up
    (sigs.k8s.io/karpenter v1.15.0 pkg/apis/v1/nodepool.go Budget.GetAllowedDisruptions)."""
    if budget.endswith("%"):
        return min(nodes, math.ceil(nodes * int(budget[:-1]) / 100))
    return min(nodes, int(budget))


def _drift_phrase(before: PoolState, state: PoolState) -> tuple[str, int]:
    """How Karpenter replaces a pool's nodes after its template or node class changed, and nodes out at once."""
    budget = str(state.roll.get("budget", "10%"))
    nodes = min(before.nodes, state.nodes)
    at_once = drift_at_once(budget, nodes)
    pace = (f"{at_once} node{'s' if at_once != 1 else ''} ({_gpus(at_once * state.gpus_per_node)}) at a time "
            f"(disruption budget {budget})" if at_once else
            f"none while the disruption budget is {budget}")
    which = "the pool's running node" if nodes == 1 else f"each of the pool's {nodes} running nodes"
    return (f"drift replacement by Karpenter: {which} is marked Drifted and replaced by a node of the new template, {pace}; {DRIFT_EVICTS}; pulumi up does not "
            "wait for it"), at_once


def _drifts(steps: list[Step]) -> bool:
    """Whether every node of a Karpenter pool drifts: its EC2NodeClass's spec or its NodePool's template changes, but
    for the requirements, which the template's hash ignores (REQUIREMENTS)."""
    return any((step.resource["type"] == EC2_NODE_CLASS and any(c.path.startswith("spec") for c in step.changes))
               or (step.resource["type"] == NODE_POOL and any(
                   c.path.startswith("spec.template") and not c.path.startswith(REQUIREMENTS) for c in step.changes))
               for step in steps)


def _narrowed(before: PoolState, after: PoolState) -> dict[str, list[str]]:
    """What a Karpenter pool's requirements no longer allow, per label: the values taken out of an `In` list."""
    old, new = before.roll.get("requirements") or {}, after.roll.get("requirements") or {}
    return {key: sorted(set(values) - set(new.get(key, values))) for key, values in sorted(old.items())
            if set(values) - set(new.get(key, values))}


def _requirement_phrase(before: PoolState, after: PoolState) -> str | None:
    """How a change of a Karpenter pool's requirements reaches its nodes: only those that no longer match drift."""
    old, new = before.roll.get("requirements"), after.roll.get("requirements")
    if old is None or new is None or old == new:
        return None
    narrowed = _narrowed(before, after)
    which = ("; ".join(f"nodes with {key} {', '.join(values)}" for key, values in narrowed.items())
             if narrowed else "none: nothing a running node matches is taken out")
    return (f"requirements change: the template's hash leaves them out, so Karpenter replaces only the nodes that no "
            f"longer satisfy them (RequirementsDrifted), within the disruption budget: {which}")


def _expiry_phrase(before: PoolState, after: PoolState) -> str | None:
    """A Karpenter pool's expireAfter changed: its nodes drift, and from then on each goes at that age."""
    was, now = before.roll.get("expireAfter"), after.roll.get("expireAfter")
    if was is None or now is None or was == now:
        return None
    then = (f"from then on Karpenter deletes each node when it is {now} old, {EXPIRY_UNBUDGETED}" if now != "Never"
            else "and no node expires from then on")
    return f"expireAfter {was} -> {now}: the drift replacement above gives every node the new expiry, {then}"


def _consolidation_phrase(before: PoolState, after: PoolState) -> str | None:
    was, now = before.roll.get("consolidationPolicy"), after.roll.get("consolidationPolicy")
    if was == now or now != UNDERUTILIZED or was is None:
        return None
    return (f"consolidation {was} -> {now}: {CONSOLIDATION_EVICTS}, "
            f"{after.roll.get('budget', '10%')} node(s) at a time (disruption budget)")


def _removal(before: PoolState | None) -> str:
    """How a removed pool's nodes go."""
    if before is None:
        return "removed"
    if before.roll.get("method") == DRIFT:
        return ("removed: the NodePool and its EC2NodeClass are deleted; Karpenter drains and terminates every node "
                "of the pool")
    if before.roll.get("method") == "instance-refresh":
        return ("removed: the group is scaled to zero with its drain hook still in place (the stack retains the hook "
                f"on delete; AWS deletes it with the group), drain: {before.roll.get('drain', 'none')}; then every "
                "node is terminated and the group deleted")
    return ("removed: the MachineSet is deleted and its machines with it; the machine controller drains each node "
            "before it deletes the instance")


def _driver_steps(diff: PlanDiff, state: PoolState, plan: dict[str, Any]) -> list[Step]:
    """Updates of the NVIDIADriver the pool's nodes run that make the GPU Operator roll it onto them."""
    key = _kernel_key(state, plan)
    if not key:
        return []
    node_os, kernel = key.split("/", 1)
    found = []
    for step in diff.steps:
        if step.op not in ("update", "replace") or step.resource["type"] != NVIDIA_DRIVER:
            continue
        annotations = step.resource["inputs"].get("metadata", {}).get("annotations", {})
        if annotations.get(labels.OS_ANNOTATION) != node_os or annotations.get(
                labels.KERNEL_ANNOTATION, kernel) != kernel:
            continue
        if any(change.path.startswith("spec.") and not change.path.startswith(DRIVER_ROLL_EXCLUDED)
               for change in step.changes):
            found.append(step)
    return found


def _upgrade_policy(step: Step, state: PoolState) -> tuple[dict[str, Any], int, str]:
    """A driver's upgradePolicy, the nodes its roll takes at once, and what leaves each node."""
    policy = step.resource["inputs"].get("spec", {}).get("upgradePolicy") or {}
    parallel = policy.get("maxParallelUpgrades", 1)
    at_once = state.nodes if parallel == 0 else min(parallel, state.nodes)
    evicted = "every pod drained off the node" if (policy.get("drain") or {}).get("enable") else "its GPU pods evicted"
    return policy, at_once, evicted


def _driver_roll(step: Step, state: PoolState) -> tuple[str, int | None]:
    """The GPU Operator's driver roll as its NVIDIADriver's upgradePolicy sets it, and GPUs out at once."""
    policy, at_once, evicted = _upgrade_policy(step, state)
    parallel = policy.get("maxParallelUpgrades", 1)
    if not policy.get("autoUpgrade"):
        return (f"driver {object_name(step.resource)} changes, but upgradePolicy.autoUpgrade is off: the operator "
                "rolls nothing; each node takes the new driver only when its driver pod is deleted"), None
    return (f"driver roll by the GPU Operator ({object_name(step.resource)}, upgradePolicy): "
            f"{'every node' if parallel == 0 else f'{at_once} node' + ('s' if at_once != 1 else '')} at a time "
            f"(maxParallelUpgrades {parallel}, maxUnavailable {policy.get('maxUnavailable', '25%')}), each cordoned, "
            f"{evicted} and the driver reloaded; pulumi up does not wait for it"), at_once * state.gpus_per_node


# How a MIG layout change (set, edited or removed) reaches the running nodes of a pool, per placement: the roll line,
# and what the destructive list says goes with it. NVIDIA's MIG manager drains nothing itself: a GPU instance with a
# live process cannot be destroyed, so every GPU pod leaves a node before its layout changes.
RECUTS = {
    "instance-refresh": ("the nodes' layout label is in the launch template, so the instance refresh above replaces "
                         "every node: each is drained by its drain hook before it terminates, and new nodes boot with "
                         "the new layout",
                         "each node is drained and replaced by the instance refresh"),
    DRIFT: ("the nodes' layout label is in the NodePool's template, so the drift replacement above replaces every "
            "node, and new nodes boot with the new layout",
            "each node is drained and replaced by drift"),
    "machineset": ("a Job re-cuts the pool's running nodes one at a time: it cordons the node, evicts its pods through "
                   "the eviction API (PodDisruptionBudgets respected, up to {drain}s), labels its machine (the machine "
                   "API copies the label to the node), waits up to {recut}s for "
                   f"{labels.MIG_CONFIG_LABEL}.state=success, then uncordons it; a node that fails stops the roll, "
                   "stays cordoned and is named in the Job's log (oc logs -n openshift-machine-api job/<MachineSet>-"
                   "<digest>); pulumi up starts the roll and does not wait for it",
                   "each node is drained (cordoned, its GPU pods evicted, PodDisruptionBudgets respected) before its "
                   "GPUs are re-cut, one node at a time"),
    "bring-your-own": ("you roll the pool's nodes, one at a time: cordon, drain, label "
                       f"{labels.MIG_CONFIG_LABEL}={{layout}}, wait for {labels.MIG_CONFIG_LABEL}.state=success, "
                       "uncordon (docs/partitioning.md, bring-your-own pools); the live node check refuses the next "
                       "up until every node carries the label",
                       "when you re-label a node, its GPU pods must be drained first: NVIDIA's MIG manager evicts "
                       "nothing, and a GPU instance still in use makes the re-cut fail"),
}


def _layout(pool: PoolState) -> str:
    """A pool's MIG layout, as its nodes' label names it: a pool without one is re-cut to MIG off."""
    return pool.partitioning.removeprefix("MIG ") if (pool.partitioning or "").startswith("MIG ") else MIG_DISABLED


def _mig_change(before: PoolState, after: PoolState) -> bool:
    """Whether a pool's MIG layout changes (set, changed or removed): its GPUs are re-partitioned."""
    return None not in (before.partitioning, after.partitioning) and _layout(before) != _layout(after)


def _advertises(pool: PoolState) -> str:
    return ", ".join(f"{count} {kind}" for kind, count in pool.kinds.items()) or "nothing"


def _replaces_for_sharing(before: PoolState, after: PoolState, method: str | None) -> bool:
    """Whether a sharing change replaces the pool's nodes: whole GPUs <-> shares moves the accelerator label, which
    whole-GPU pools' nodes boot with (GpuNodePoolArgs.node_labels), in the launch template or NodePool template."""
    return method in ("instance-refresh", DRIFT) and (GPU_RESOURCE in before.kinds) != (GPU_RESOURCE in after.kinds)


def _partition_roll(before: PoolState, after: PoolState, method: str | None) -> str:
    """How a change of a pool's partitioning reaches its running nodes."""
    change = f"{before.partitioning} -> {after.partitioning}"
    then = f"its nodes then advertise {_advertises(after)} (before: {_advertises(before)})"
    if _replaces_for_sharing(before, after, method):
        how = "instance refresh" if method == "instance-refresh" else "drift replacement"
        return (f"{change}: the nodes' accelerator label (on whole-GPU pools only) is in the "
                f"{'launch template' if method == 'instance-refresh' else 'NodePool template'}, so the {how} above "
                f"replaces every node, each drained first: running GPU jobs go with their node; {then}")
    if not _mig_change(before, after):
        return (f"{change}: the device plugin and GPU feature discovery restart on every GPU node, one node at a time "
                "(the operator rolls their DaemonSets for the new config); running pods keep their GPUs, and "
                f"{then}")
    how = RECUTS.get(method or "", ("", ""))[0].format(layout=_layout(after), drain=after.roll.get(
        "drainTimeoutSeconds"), recut=after.roll.get("recutTimeoutSeconds"))
    return f"{change}: {how}; {then}"


def _dedication_phrase(before: PoolState, after: PoolState, method: str | None) -> str | None:
    """How a pool's dedication (its second taint) reaches its running nodes, where no replacement brings it."""
    if set(before.dedicated_to) == set(after.dedicated_to) or method not in ("machineset", "bring-your-own"):
        return None
    was, now = ", ".join(before.dedicated_to) or "nobody", ", ".join(after.dedicated_to) or "nobody"
    if method == "bring-your-own":
        return (f"dedicated to {was} -> {now}: you taint (or untaint) the nodes; the live node check refuses the next "
                "up until every node carries the pool's taints")
    return (f"dedicated to {was} -> {now}: the template reaches new machines, and the Job sets the taints of the "
            "running nodes (through their machines, and directly where a taint goes, as the machine API only adds "
            "taints); pods already running keep running (NoSchedule evicts nothing)")


def _jobs(nodes: int) -> str:
    return f"running GPU jobs on its {nodes} node{'s' if nodes != 1 else ''}"


def _recut_losses(pool: PoolChange) -> list[Destructive]:
    """What a change of how a pool is cut, or who may use it, takes from the jobs on its running nodes."""
    before, after = pool.before, pool.after
    if before is None or after is None or before.partitioning is None or after.partitioning is None:
        return []
    method, name, nodes = after.roll.get("method"), pool.name, before.nodes
    jobs = _jobs(nodes)
    items = []
    if _mig_change(before, after) and not (method == DRIFT and pool.drifts):
        items.append(Destructive(f"pool {name} MIG layout {_layout(before)} -> {_layout(after)}",
                                 f"{jobs}: {RECUTS.get(method or '', ('', 'each node re-cut'))[1]}"))
    elif _replaces_for_sharing(before, after, method) and method == "instance-refresh":
        items.append(Destructive(f"pool {name} {before.partitioning} -> {after.partitioning}",
                                 f"{jobs}: the instance refresh replaces every node (the accelerator label is in the "
                                 "launch template), each drained first"))
    if method == DRIFT and _consolidation_phrase(before, after) and nodes:
        items.append(Destructive(f"pool {name} consolidation {before.roll.get('consolidationPolicy')} -> "
                                 f"{UNDERUTILIZED}", f"{jobs}: {CONSOLIDATION_EVICTS}"))
    if method == DRIFT and _expiry_phrase(before, after) and after.roll.get("expireAfter") != "Never":
        items.append(Destructive(f"pool {name} expireAfter {before.roll.get('expireAfter')} -> "
                                 f"{after.roll['expireAfter']}", f"running GPU jobs on each node that reaches that "
                                 f"age: it is deleted, {EXPIRY_UNBUDGETED}"))
    narrowed = _narrowed(before, after) if method == DRIFT else {}
    if narrowed and nodes:
        items.append(Destructive(f"pool {name} requirements narrowed", "running GPU jobs on its nodes with "
                                 + "; ".join(f"{key} {', '.join(values)}" for key, values in narrowed.items())
                                 + ": Karpenter replaces those nodes by drift, within the disruption budget"))
    added = sorted(set(after.dedicated_to) - set(before.dedicated_to))
    if not before.dedicated_to and after.dedicated_to and method in ("machineset", "bring-your-own") and nodes:
        how = ("the Job taints each running node through its machine" if method == "machineset" else
               "the live node check refuses the next up until you taint every node")
        items.append(Destructive(f"pool {name} dedicated to {', '.join(added)}",
                                 f"other tenants' use of its {nodes} running node{'s' if nodes != 1 else ''}: {how}; "
                                 "their pods running there keep running (NoSchedule evicts nothing), but none starts "
                                 "there again"))
    return items


def _refresh_loss(name: str, before: PoolState, after: PoolState, at_once: int) -> list[Destructive]:
    """An instance refresh replaces every running node: its GPU jobs go with it, drained first when the handler can.
    A re-cut or sharing change that rides on the refresh already says so (_recut_losses)."""
    nodes = min(before.nodes, after.nodes)
    method = after.roll.get("method")
    if not nodes or _mig_change(before, after) or _replaces_for_sharing(before, after, method):
        return []
    drained = ("terminated with its pods still running: NOT drained unless the node termination handler's IAM policy "
               "is attached (the pool's drain says how)" if str(after.roll.get("drain", "")).startswith(UNDRAINED) else
               "drained by the node termination handler before it terminates")
    return [Destructive(f"pool {name} instance refresh",
                        f"{_jobs(nodes)}: each node is replaced by a new one, {drained}, "
                        f"{at_once} node{'s' if at_once != 1 else ''} at a time")]


def _driver_loss(name: str, step: Step, state: PoolState) -> list[Destructive]:
    """A driver roll the GPU Operator runs evicts the GPU pods of each node it reloads."""
    policy, at_once, evicted = _upgrade_policy(step, state)
    if not policy.get("autoUpgrade") or not state.nodes:
        return []
    return [Destructive(f"pool {name} driver roll ({object_name(step.resource)})",
                        f"{_jobs(state.nodes)}: each node is cordoned, {evicted} and its driver reloaded, "
                        f"{at_once} node{'s' if at_once != 1 else ''} at a time")]


def _drift_loss(name: str, before: PoolState, after: PoolState, at_once: int) -> list[Destructive]:
    """Karpenter's drift replacement evicts the GPU jobs of every running node it replaces."""
    nodes = min(before.nodes, after.nodes)
    if not nodes:
        return []
    return [Destructive(f"pool {name} drift replacement",
                        f"{_jobs(nodes)}: {DRIFT_EVICTS}, {at_once} node{'s' if at_once != 1 else ''} at a time")]


def _profile_loss(name: str, before: PoolState, pace: str) -> list[Destructive]:
    """A node profile the Machine Config Operator applies reboots every node of the pool."""
    if not before.nodes:
        return []
    return [Destructive(f"pool {name} node profile",
                        f"{_jobs(before.nodes)}: the Machine Config Operator drains and reboots each node, {pace}")]


def _pool_change(name: str, before: PoolState | None, after: PoolState | None, steps: list[Step],
                 release: tuple[str | None, str | None], drivers: list[Step] = ()) -> PoolChange:
    brought = (after or before).roll.get("method") == "bring-your-own"
    if after is None:
        if brought:
            return PoolChange(name, before, None, "removed from the stack: its nodes are not this stack's and keep "
                              "running; quotas no longer count their GPUs")
        return PoolChange(name, before, None, _removal(before), before.gpus if before else None)
    if before is None:
        if brought:
            return PoolChange(name, None, after, f"new: {after.nodes} bring-your-own node"
                              f"{'s' if after.nodes != 1 else ''} counted; none launched")
        return PoolChange(name, None, after, f"new: {after.nodes} node{'s' if after.nodes != 1 else ''} launched")
    method = after.roll.get("method")
    if brought:
        kernel = (f"kernel {before.kernel} -> {after.kernel}: its driver is declared now; you reboot the nodes into "
                  "it" if before.kernel != after.kernel else "")
        rolls = [_driver_roll(step, after)[0] for step in drivers]
        if before.partitioning is not None and after.partitioning is not None \
                and before.partitioning != after.partitioning:
            rolls.append(_partition_roll(before, after, method))
        rolls.append(_dedication_phrase(before, after, method))
        return PoolChange(name, before, after, "; ".join(filter(None, [kernel, *rolls]))
                          or "no roll (nodes are not this stack's)",
                          takes=tuple(loss for step in drivers for loss in _driver_loss(name, step, after)))
    replaced = any(step.op == "replace" and step.resource["type"] == ASG for step in steps)
    template_changed = not replaced and (any(step.resource["type"] == LAUNCH_TEMPLATE for step in steps) or any(
        step.resource["type"] == MACHINE_SET and any(c.path.startswith("spec.template") for c in step.changes)
        for step in steps))
    phrases, gpus_out, takes = [], None, []
    if replaced:
        phrases.append(f"replaced: {POOL_DOWN}")
        gpus_out = before.gpus
    if release[0] and release[1] and release[0] != release[1]:
        per = MCP_DEFAULT_MAX_UNAVAILABLE
        phrases.append(f"OpenShift release {release[0]} -> {release[1]}: this stack only declares it (and any driver "
                       "its nodes need); when you start the cluster upgrade, the Machine Config Operator reboots each "
                       f"node into the new kernel through the worker machine config pool, {per} node "
                       f"({_gpus(per * after.gpus_per_node)}) at a time unless its maxUnavailable says otherwise")
        gpus_out = per * after.gpus_per_node
    if after.profile.get("rollsBy") == "machine-config-operator" and any(
            step.resource["type"] in PROFILE_TYPES for step in steps):
        per = after.profile.get("maxUnavailable", MCP_DEFAULT_MAX_UNAVAILABLE)
        pace = (f"{per} node{'s' if per != 1 else ''} at a time" if isinstance(per, int)
                else f"{per} of the nodes at a time")
        phrases.append(f"node profile change: the Machine Config Operator reboots each node through machine config "
                       f"pool {after.profile.get('machineConfigPool', name)}, {pace} (maxUnavailable)")
        takes += _profile_loss(name, before, pace)
        if isinstance(per, int):
            gpus_out = max(gpus_out or 0, per * after.gpus_per_node)
    if template_changed and method == "instance-refresh":
        at_once = _at_once(min(before.nodes, after.nodes), after.roll.get("minHealthyPercentage"))
        phrases.append(f"{_refresh_phrase(after, at_once)}; {REFRESH_CANCELS}")
        takes += _refresh_loss(name, before, after, at_once)
        gpus_out = max(gpus_out or 0, at_once * after.gpus_per_node)
    elif method == DRIFT and _drifts(steps):
        phrase, at_once = _drift_phrase(before, after)
        phrases.append(phrase)
        takes += _drift_loss(name, before, after, at_once)
        gpus_out = max(gpus_out or 0, at_once * after.gpus_per_node)
    elif template_changed and method == "machineset":
        running = "the 1 running node keeps its" if before.nodes == 1 else f"the {before.nodes} running nodes keep their"
        phrases.append(f"MachineSet template: reaches only machines created from now on; {running} image until "
                       "replaced")
    if before.partitioning is not None and after.partitioning is not None \
            and before.partitioning != after.partitioning:
        phrases.append(_partition_roll(before, after, method))
    if method == DRIFT:
        phrases += [_requirement_phrase(before, after), _expiry_phrase(before, after),
                    _consolidation_phrase(before, after)]
    phrases.append(_dedication_phrase(before, after, method))
    phrases = [phrase for phrase in phrases if phrase]
    for step in drivers:
        phrase, out = _driver_roll(step, after)
        phrases.append(phrase)
        takes += _driver_loss(name, step, after)
        if out is not None:
            gpus_out = max(gpus_out or 0, out)
    capped = after.max_nodes is not None and before.max_nodes is not None and after.max_nodes < before.max_nodes
    if capped and method == "instance-refresh":
        phrases.append(f"maximum {before.max_nodes} -> {after.max_nodes}: AWS lowers the group's size to the new "
                       "maximum, so running nodes above it are terminated (each drained first)")
    elif capped and method == DRIFT:
        phrases.append(f"limit {before.max_nodes} -> {after.max_nodes} nodes: Karpenter launches no node above it; "
                       "running nodes above it stay until they are empty and consolidated")
    elif capped:
        phrases.append(f"maximum {before.max_nodes} -> {after.max_nodes}: the autoscaler adds no machine above it; "
                       "running machines above it stay until it scales them down")
    if after.nodes != before.nodes and method == DRIFT:
        phrases.append(f"nodes now {before.nodes} -> {after.nodes}: what the stack says runs now, for the summary; "
                       "Karpenter owns the count, and no resource changes for it")
    elif after.nodes != before.nodes:
        phrases.append(f"scales {before.nodes} -> {after.nodes} nodes" if size_applied(steps) else
                       f"config size {before.nodes} -> {after.nodes}, but the autoscaler owns the live count "
                       "(ignoreChanges): pulumi up does not set it"
                       + ("" if capped and method == "instance-refresh" else
                          ", and leaves the running nodes as they are"))
    return PoolChange(name, before, after, "; ".join(phrases) or "no roll", gpus_out, size_applied(steps),
                      method == DRIFT and _drifts(steps), tuple(takes))
