"""The fleet summary's plain data, and the resource types, preflight statuses and phrases its sections share."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from components.labels import GPU_RESOURCE


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
    takes: tuple[Destructive, ...] = ()  # what the roll takes from the GPU jobs running on the pool's nodes


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
    # Allocation mode dra: DeviceClass -> (tenants' quotas on it, devices it covers), in the head.
    classes_after: dict[str, tuple[int, int]] = field(default_factory=dict)


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
