"""The fleet summary of a change: what happens to pools, kernels, drivers, tenants and capacity.

Built from the base and head plans (their `outputs`, and the records where an older plan lacks an output), the
diff between them, and the driver image preflight. Plain data: `gpuctl.report` formats it as text, JSON or
Markdown.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from components import labels
from components.labels import GPU_RESOURCE
from fleet.partitioning import MIG_DISABLED
from gpuctl.diff import NVIDIA_DRIVER, PROVIDER_REPLACED, PlanDiff, Step, object_name, refused_by_the_engine
from gpuctl.upgrade import release_stages, served_by, shared

POOL = "gpu-platform:index:GpuNodePool"
ASG = "aws:autoscaling/group:Group"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
MACHINE_SET = "kubernetes:machine.openshift.io/v1beta1:MachineSet"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
DRIFT = "drift"  # a Karpenter pool's roll method (components/placements/karpenter.py)
# What a drift replacement does to running work: Karpenter drains a drifted node (its pods evicted) when it replaces
# it; a pod annotated karpenter.sh/do-not-disrupt holds its node until the pod ends (sigs.k8s.io/karpenter v1.15.0
# pkg/controllers/state/statenode.go ValidateNodeDisruptable), as the NodePool sets no terminationGracePeriod.
DRIFT_EVICTS = ("running GPU jobs on a drifted node are evicted when Karpenter replaces it (a pod annotated "
                "karpenter.sh/do-not-disrupt: \"true\" holds its node until it ends)")
# A NodePool's requirements are outside the template's hash (sigs.k8s.io/karpenter v1.15.0 pkg/apis/v1/nodepool.go
# and nodeclaim.go, `hash:"ignore"`): a node drifts on them only when its labels no longer satisfy them
# (pkg/controllers/nodeclaim/disruption/drift.go areRequirementsDrifted).
REQUIREMENTS = "spec.template.spec.requirements"
# expireAfter is in the hash (a change drifts every node), and an expired NodeClaim is deleted by the expiration
# controller directly, with no disruption budget and no do-not-disrupt check (pkg/controllers/nodeclaim/expiration/
# controller.go Reconcile).
EXPIRY_UNBUDGETED = ("whatever the disruption budget and do-not-disrupt annotations say (expiration is not a "
                     "voluntary disruption): nodes launched together expire together, with their GPU jobs")
UNDERUTILIZED = "WhenEmptyOrUnderutilized"
CONSOLIDATION_EVICTS = ("Karpenter now also replaces or removes nodes that run pods but are under-used, evicting "
                        "their GPU jobs to pack them onto fewer or cheaper nodes")
NAMESPACE = "kubernetes:core/v1:Namespace"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
RESOURCE_QUOTA = "kubernetes:core/v1:ResourceQuota"
NETWORK = "kubernetes:k8s.cni.cncf.io/v1:NetworkAttachmentDefinition"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
# components/tenant_quota.py: the RoleBinding of a tenant's group, and the quota on its CPU, memory and pods.
MEMBERS, COMPUTE_QUOTA = "-members", "compute-quota"
# components/node_drain.py drain_phrase: how a pool's drain reads when the handler's IAM policy is not attached.
UNDRAINED = "NOT drained"
UNKNOWN = "[unknown]"
# How the Machine Config Operator rolls a release onto the nodes of a pool when its MachineConfigPool sets no
# maxUnavailable (machineconfiguration.openshift.io/v1 MachineConfigPool: "Defaults to 1").
MCP_DEFAULT_MAX_UNAVAILABLE = 1
NODE_TUNING = "gpu-platform:index:NodeTuning"
# A change to any of these reboots the tuned pool's nodes through the Machine Config Operator.
PROFILE_TYPES = frozenset({"kubernetes:performance.openshift.io/v2:PerformanceProfile",
                           "kubernetes:tuned.openshift.io/v1:Tuned",
                           "kubernetes:machineconfiguration.openshift.io/v1:MachineConfigPool"})

# The bridge deletes an explicitly named AWS resource before it creates its replacement (pulumi-terraform-bridge,
# nameRequiresDeleteBeforeReplace): the pools' groups are named.
POOL_DOWN = ("the group is named, so the provider deletes it before it creates the new one: every node is drained "
             "and terminated, and the pool is down until the new group is up")
# terraform-provider-aws autoscaling/group.go: a new launch template version cancels a refresh in progress (and
# waits for the cancel) before it starts the next one.
REFRESH_CANCELS = ("a launch-template change while this refresh runs cancels it and starts over (the cancel waits "
                   "for nodes in their drain hook, which can outlast the provider's wait and fail the update): let "
                   "a refresh finish before the next image change")
RETIRED_POOL = ("retired: unprotected, so a later change may remove it; it keeps its nodes, GPUs and drain until then")
RETIRED_TENANT = ("retired: its namespace is unprotected, so a later change may remove the tenant, deleting the "
                  "namespace and everything in it; its quota and workloads stay until then")
RETIRED_NETWORK = ("retired: its NetworkAttachmentDefinition is unprotected, so a later change may remove the network; "
                   "pods attach to it until then")
# Kueue creates a queued Job suspended and unsuspends it when it admits it: with the queue gone nothing does.
STRANDED = ("the Jobs still waiting in it: Kueue holds a queued Job suspended until it admits it, and with the queue "
            "gone nothing admits it, so they stay suspended until deleted or resubmitted without the queue label "
            "(admitted Jobs keep running)")
# NVIDIADriver spec fields whose change makes the GPU Operator roll the driver onto the nodes it selects.
DRIVER_ROLL_EXCLUDED = ("spec.upgradePolicy",)
PROTECTED = ("pulumi up refuses this: the resource is protected; mark it `retired: true` first and remove it in a "
             "later change")
# Preflight statuses of one driver image.
VERIFIED, MISSING, NOT_VERIFIED, SKIPPED = "verified", "missing", "not verified", "skipped (--offline)"


@dataclass(frozen=True)
class PoolState:
    """One pool in one revision."""

    instance_type: str | None
    nodes: int
    gpus: int
    gpus_per_node: int
    os: str | None
    kernel: str | None
    image: str | None
    min_nodes: int | None = None
    max_nodes: int | None = None
    roll: dict[str, Any] = field(default_factory=dict)
    retired: bool = False
    profile: dict[str, Any] = field(default_factory=dict)  # how a node profile change reaches the nodes
    sharing: int | None = None  # pods per GPU under device-plugin time-slicing; 1 or None: whole GPUs
    partitioning: str | None = None  # how its GPUs are cut, in words (plans from before: None)
    kinds: dict[str, int] = field(default_factory=dict)  # what its nodes advertise together, per extended resource
    dedicated_to: tuple[str, ...] = ()  # the tenants a dedicated pool is reserved for

    @property
    def advertised(self) -> int:
        """nvidia.com/gpu the pool's nodes advertise: per kind where the plan says (shares and MIG slices are not
        GPUs), else (plans from before the kinds) its GPUs times their sharing."""
        if self.partitioning is not None:
            return self.kinds.get(GPU_RESOURCE, 0)
        return self.gpus * (self.sharing or 1)


@dataclass(frozen=True)
class PoolChange:
    """A pool before and after (None when it does not exist there), and how its nodes will roll."""

    name: str
    before: PoolState | None
    after: PoolState | None
    roll: str  # one phrase: how the change reaches the nodes, or "no roll"
    gpus_out: int | None = None  # GPUs out of service at once during the roll, when known
    size_applied: bool = False  # pulumi up sets the node count (the autoscaler does not own it)
    drifts: bool = False  # a Karpenter pool whose nodes are replaced by drift


@dataclass(frozen=True)
class KernelChange:
    """One (os, kernel) with a driver in either revision."""

    key: str
    change: str  # new | unchanged (also a kernel joining or leaving its OS's driver) | image changed | kept | removed
    image: str | None
    preflight: str
    pools_before: list[str]
    pools_after: list[str]
    note: str = ""


@dataclass(frozen=True)
class TenantChange:
    name: str
    namespace: str
    gpus_before: int | None
    gpus_after: int | None
    priority_before: str | None
    priority_after: str | None
    # How the tenant shares GPUs: `quota` (a hard cap) or `queue` (Kueue); what it is guaranteed (its cap, or its
    # ClusterQueue's nominal GPUs) and may borrow beyond that from idle tenants (0 under a hard quota).
    tenancy_before: str | None = None
    tenancy_after: str | None = None
    guaranteed_before: int | None = None
    guaranteed_after: int | None = None
    borrowable_before: int | None = None
    borrowable_after: int | None = None
    retired: bool = False
    # What it was given of the kinds other than whole GPUs (shares, MIG slices), by extended resource.
    slices_before: dict[str, int] = field(default_factory=dict)
    slices_after: dict[str, int] = field(default_factory=dict)
    # Who works in the namespace (the RoleBinding's groups) and its compute quota's memory and pods.
    group_before: str | None = None
    group_after: str | None = None
    memory_before: str | None = None
    memory_after: str | None = None
    pods_before: str | None = None
    pods_after: str | None = None


@dataclass(frozen=True)
class Capacity:
    gpus_before: int
    gpus_after: int
    quota_before: int
    quota_after: int
    schedulable_before: int  # nvidia.com/gpu the pools advertise, what quotas count
    schedulable_after: int
    # The head's other kinds (GPU shares, MIG slices): extended resource -> (tenants' quotas, pools' advertised).
    kinds_after: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Destructive:
    """Something the change takes away: what it is and what goes with it."""

    what: str
    takes_away: str
    engine: str = ""  # where `pulumi up` will act differently (e.g. refuse a protected delete)


@dataclass
class FleetSummary:
    stack: str
    release_before: str | None
    release_after: str | None
    pools: list[PoolChange]
    kernels: list[KernelChange]
    tenants: list[TenantChange]
    capacity: Capacity
    destructive: list[Destructive]
    unknowns: list[str]  # effects that depend on live cluster state that was not read
    engine_notes: list[str]  # where gpuctl and the engine may differ
    retirements: list[str] = field(default_factory=list)  # retired pools and tenants, and what retiring means
    upgrade: list[str] = field(default_factory=list)  # an OpenShift release change: which driver serves which nodes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- reading a plan ----------------------------------------------------------------------------------------------


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


# -- pools -------------------------------------------------------------------------------------------------------


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


def _driver_roll(step: Step, state: PoolState) -> tuple[str, int | None]:
    """The GPU Operator's driver roll as its NVIDIADriver's upgradePolicy sets it, and GPUs out at once."""
    policy = step.resource["inputs"].get("spec", {}).get("upgradePolicy") or {}
    if not policy.get("autoUpgrade"):
        return (f"driver {object_name(step.resource)} changes, but upgradePolicy.autoUpgrade is off: the operator "
                "rolls nothing; each node takes the new driver only when its driver pod is deleted"), None
    parallel = policy.get("maxParallelUpgrades", 1)
    at_once = state.nodes if parallel == 0 else min(parallel, state.nodes)
    evicted = ("every pod drained off the node" if (policy.get("drain") or {}).get("enable")
               else "its GPU pods evicted")
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


def _recut_losses(pool: PoolChange) -> list[Destructive]:
    """What a change of how a pool is cut, or who may use it, takes from the jobs on its running nodes."""
    before, after = pool.before, pool.after
    if before is None or after is None or before.partitioning is None or after.partitioning is None:
        return []
    method, name, nodes = after.roll.get("method"), pool.name, before.nodes
    jobs = f"running GPU jobs on its {nodes} node{'s' if nodes != 1 else ''}"
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
                          or "no roll (nodes are not this stack's)")
    replaced = any(step.op == "replace" and step.resource["type"] == ASG for step in steps)
    template_changed = not replaced and (any(step.resource["type"] == LAUNCH_TEMPLATE for step in steps) or any(
        step.resource["type"] == MACHINE_SET and any(c.path.startswith("spec.template") for c in step.changes)
        for step in steps))
    phrases, gpus_out = [], None
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
        at_once = per if isinstance(per, int) else f"{per} of the nodes"
        phrases.append(f"node profile change: the Machine Config Operator reboots each node through machine config "
                       f"pool {after.profile.get('machineConfigPool', name)}, {at_once} "
                       f"node{'s' if at_once != 1 else ''} at a time (maxUnavailable)")
        if isinstance(per, int):
            gpus_out = max(gpus_out or 0, per * after.gpus_per_node)
    if template_changed and method == "instance-refresh":
        at_once = _at_once(min(before.nodes, after.nodes), after.roll.get("minHealthyPercentage"))
        phrases.append(f"{_refresh_phrase(after, at_once)}; {REFRESH_CANCELS}")
        gpus_out = max(gpus_out or 0, at_once * after.gpus_per_node)
    elif method == DRIFT and _drifts(steps):
        phrase, at_once = _drift_phrase(before, after)
        phrases.append(phrase)
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
                      method == DRIFT and _drifts(steps))


# -- the summary -------------------------------------------------------------------------------------------------


def _kernel_pools(states: dict[str, PoolState], plan: dict[str, Any]) -> dict[str, list[str]]:
    booted: dict[str, list[str]] = {}
    for name, state in states.items():
        key = _kernel_key(state, plan)
        if key:
            booted.setdefault(key, []).append(name)
    return booted


def _kernels(old: dict[str, Any], new: dict[str, Any], old_pools: dict[str, PoolState],
             new_pools: dict[str, PoolState], preflight: dict[str, str], offline: bool) -> list[KernelChange]:
    before, after = _outputs(old), _outputs(new)
    images_before, images_after = before.get("driverImages") or {}, after.get("driverImages") or {}
    kept = set(after.get("keptKernels") or [])
    booted_before, booted_after = _kernel_pools(old_pools, old), _kernel_pools(new_pools, new)
    rows = []
    for key in sorted(set(before.get("kernels") or []) | set(after.get("kernels") or [])):
        image = images_after.get(key) or images_before.get(key)
        status = preflight.get(images_after.get(key, ""), SKIPPED if offline else NOT_VERIFIED) \
            if key in images_after else "-"
        leaving = [pool for pool in booted_before.get(key, []) if pool not in booted_after.get(key, [])]
        note = ""
        if key not in images_before:
            change = "new"
            note = "declared before any pool rolls onto it"
        elif key not in images_after:
            change = "removed"
            note = "no pool boots it and " + ("--observed-nodes" if offline else "live discovery") + \
                " shows no node on it"
        elif key in kept:
            change = "kept"
            note = ("no pool boots it any more; kept until a node inventory (live discovery at deploy, or "
                    "--observed-nodes) shows no node on it")
        else:
            change = "image changed" if images_before[key] != images_after[key] else "unchanged"
            was, now = branch(images_before[key]), branch(images_after[key])
            if was and now and now < was:
                note = f"driver branch {was} -> {now}: a downgrade"
        driver = served_by(new if key in images_after else old, key)
        if change in ("new", "kept", "removed") and driver and served_by(old, key) == served_by(new, key) and (
                shared(new, key) or shared(old, key)):
            # One driver for every kernel of the OS (built on each node): a kernel joining or leaving changes none.
            change, leaving = "unchanged", []
            note = (f"{'new to the stack' if key not in images_before else 'no pool boots it any more'}; its nodes "
                    f"are served by {driver}, which selects every {key.split('/', 1)[0]} node whatever its kernel "
                    "and stays: no driver change")
        if key in images_after and key not in kept and key not in after.get("declaredKernels", [key]):
            note = "nodes run it, but the stack declares it nowhere (cluster.kernel on OpenShift, a pool's kernel on " \
                   "Kubernetes)"
        if leaving and key in images_after:
            still = [pool for pool in booted_after.get(key, [])]
            note = "; ".join(filter(None, [note, f"{', '.join(leaving)} nodes run it until they roll; "
                                           "the driver stays while any node runs it"
                                           + (f" ({', '.join(still)} still boot{'s' if len(still) == 1 else ''} it)"
                                              if still else "")]))
        rows.append(KernelChange(key, change, image, status, booted_before.get(key, []), booted_after.get(key, []),
                                 note))
    return rows


def _sharing(tenant: dict[str, Any] | None) -> tuple[str | None, int | None, int | None]:
    """(tenancy, guaranteed, borrowable) of a tenant's outputs; a plan from before tenancy modes had hard quotas."""
    if not tenant:
        return None, None, None
    if tenant.get("tenancy", "quota") == "quota":
        return "quota", tenant.get("gpus"), 0
    return "queue", _whole(tenant.get("guaranteed")), _whole(tenant.get("borrowable"))


def _whole(value: Any) -> int:
    """Whole GPUs of a guarantee or a borrowable amount: per pool and kind, per kind, or (plans from before the kinds)
    per pool or one number."""
    if isinstance(value, dict):
        return sum(_whole(item) if isinstance(item, dict) else item for key, item in value.items()
                   if isinstance(item, dict) or not key.startswith("nvidia.com/") or key == GPU_RESOURCE)
    return value or 0


def _tenant_access(plan: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Namespace -> its tenant's group (the RoleBinding's Group subjects) and compute quota's memory and pods."""
    found: dict[str, dict[str, str]] = {}
    for resource in plan["resources"]:
        metadata = resource["inputs"].get("metadata") or {}
        entry = found.setdefault(metadata.get("namespace") or "", {})
        if resource["type"] == ROLE_BINDING and resource["name"].endswith(MEMBERS):
            entry["group"] = ", ".join(sorted(subject.get("name", "") for subject in resource["inputs"].get(
                "subjects") or [] if subject.get("kind") == "Group"))
        elif resource["type"] == RESOURCE_QUOTA and metadata.get("name") == COMPUTE_QUOTA:
            hard = (resource["inputs"].get("spec") or {}).get("hard") or {}
            entry.update(memory=hard.get("requests.memory"), pods=hard.get("pods"))
    return found


def _tenants(old: dict[str, Any], new: dict[str, Any]) -> list[TenantChange]:
    before, after = _outputs(old).get("tenants") or {}, _outputs(new).get("tenants") or {}
    access = _tenant_access(old), _tenant_access(new)
    return [TenantChange(name, name, before.get(name, {}).get("gpus"), after.get(name, {}).get("gpus"),
                         before.get(name, {}).get("priorityClass"), after.get(name, {}).get("priorityClass"),
                         *(value for pair in zip(_sharing(before.get(name)), _sharing(after.get(name)))
                           for value in pair), retired=bool(after.get(name, {}).get("retired")),
                         slices_before=_slices(before.get(name)), slices_after=_slices(after.get(name)),
                         **{f"{field}_{which}": access[index].get(name, {}).get(field)
                            for field in ("group", "memory", "pods")
                            for index, which in enumerate(("before", "after"))})
            for name in sorted(set(before) | set(after))]


def _slices(tenant: dict[str, Any] | None) -> dict[str, int]:
    """A tenant's grants of the kinds other than whole GPUs; none in plans from before the kinds."""
    return {kind: amount for kind, amount in ((tenant or {}).get("grants") or {}).items()
            if kind != GPU_RESOURCE and amount}


def _networks(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each tenant network's NetworkAttachmentDefinition, by URN."""
    return {resource["urn"]: resource for resource in plan["resources"] if resource["type"] == NETWORK}


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


def _other_kinds(tenants: list[TenantChange], pools: dict[str, PoolState]) -> dict[str, tuple[int, int]]:
    """The head's kinds other than whole GPUs: (tenants' quotas, pools' advertised) of each."""
    kinds = sorted({kind for pool in pools.values() for kind in pool.kinds if kind != GPU_RESOURCE}
                   | {kind for tenant in tenants for kind in tenant.slices_after})
    return {kind: (sum(tenant.slices_after.get(kind, 0) for tenant in tenants if tenant.gpus_after is not None),
                   sum(pool.kinds.get(kind, 0) for pool in pools.values())) for kind in kinds}


def _quota(tenants: list[TenantChange], which: str) -> int:
    return sum(getattr(tenant, f"gpus_{which}") or 0 for tenant in tenants)


def _destructive(diff: PlanDiff, pools: list[PoolChange], tenants: list[TenantChange],
                 kernels: list[KernelChange]) -> list[Destructive]:
    items = []
    quotas = {tenant.namespace: tenant for tenant in tenants}
    # A removed pool's protected children show on the pool's line.
    folded = {step.resource["urn"]: "" for step in diff.steps
              if step.op == "delete" and step.resource["type"] == POOL}
    pool_items = {}
    for pool in pools:
        items += _recut_losses(pool)
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
        elif pool.before and pool.after and pool.after.roll.get("method") == DRIFT and pool.drifts \
                and min(pool.before.nodes, pool.after.nodes):
            nodes = min(pool.before.nodes, pool.after.nodes)
            at_once = drift_at_once(str(pool.after.roll.get("budget", "10%")), nodes)
            items.append(Destructive(f"pool {pool.name} drift replacement",
                                     f"running GPU jobs on its {nodes} node{'s' if nodes != 1 else ''}: {DRIFT_EVICTS}, "
                                     f"{at_once} node{'s' if at_once != 1 else ''} at a time"))
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


def branch(image: str | None) -> int | None:
    """The driver branch of an NVIDIA driver image: the tag's leading number (580-6.8.0-1021-aws-ubuntu22.04,
    580.95.05-ubuntu22.04)."""
    tag = (image or "").rpartition(":")[2]
    digits = tag[:len(tag) - len(tag.lstrip("0123456789"))]
    return int(digits) if digits else None


def _downgrades(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(os/kernel, branch before, branch after) of each driver that moves to an older branch."""
    before, after = _outputs(old).get("driverImages") or {}, _outputs(new).get("driverImages") or {}
    moves = [(key, branch(before[key]), branch(image)) for key, image in sorted(after.items()) if key in before]
    return [(key, was, now) for key, was, now in moves if was and now and now < was]


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


def summarize(old: dict[str, Any], new: dict[str, Any], diff: PlanDiff, *,
              preflight: dict[str, str] | None = None, offline: bool = True) -> FleetSummary:
    """The fleet summary of going from plan `old` to plan `new`; `preflight` is each driver image's status."""
    old_pools, new_pools = pool_states(old), pool_states(new)
    release = (_outputs(old).get("release"), _outputs(new).get("release"))
    pools = [_pool_change(name, old_pools.get(name), new_pools.get(name),
                          _pool_steps(diff, new if name in new_pools else old, name), release,
                          _driver_steps(diff, new_pools[name], new) if name in new_pools else [])
             for name in sorted(set(old_pools) | set(new_pools))]
    kernels = _kernels(old, new, old_pools, new_pools, preflight or {}, offline)
    tenants = _tenants(old, new)
    capacity = Capacity(_outputs(old).get("totalGpus", sum(p.gpus for p in old_pools.values())),
                        _outputs(new).get("totalGpus", sum(p.gpus for p in new_pools.values())),
                        _quota(tenants, "before"), _quota(tenants, "after"),
                        sum(p.advertised for p in old_pools.values()), sum(p.advertised for p in new_pools.values()),
                        _other_kinds(tenants, new_pools))
    downgrades = [Destructive(f"driver for {key} downgraded, branch {was} -> {now}",
                              "the newer driver on every node on that kernel: containers built for its CUDA version "
                              "may not run on the older branch") for key, was, now in _downgrades(old, new)]
    return FleetSummary(new.get("stack", ""), release[0], release[1], pools, kernels, tenants, capacity,
                        _destructive(diff, pools, tenants, kernels) + downgrades,
                        _unknowns(diff, pools, kernels, offline), _engine_notes(diff),
                        _retirements(pools, tenants, old, new), release_stages(old, new))
