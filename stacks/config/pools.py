"""GPU node pools: what each provisions or, brought by the user, only labels and taints."""

from __future__ import annotations

import difflib
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, StrictBool, model_validator
from pydantic.alias_generators import to_camel

from fleet.catalog import INSTANCE_TYPES, KUBERNETES_OSES, NODE_OSES, InstanceType
from fleet.kernels import KernelTarget
from fleet.partitioning import Partitioning, custom_layout_name, custom_layout_problem, layouts_for, profiles_of
from stacks.config.cluster import ClusterConfig
from stacks.config.fields import MAX_POOL_NODES, Int, StrictModel, check_kernel, dns_label, label_key, label_value
from stacks.config.karpenter import KarpenterPoolConfig
from stacks.config.node_profiles import NodeProfileConfig
from stacks.config.rolls import RollConfig


class BringYourOwnConfig(StrictModel):
    """Nodes that join the cluster by other means (bare metal, a managed node group, another tool): the stack
    provisions nothing for them, declares their driver, checks live that they carry the GPU taint, and counts them."""

    node_selector: dict[Annotated[str, AfterValidator(label_key)], Annotated[str, AfterValidator(label_value)]] = \
        Field(min_length=1, description="labels that select the pool's nodes, and no other node")
    gpu_model: Annotated[str, AfterValidator(label_value)] = Field(
        min_length=1, description="the GPU as GPU feature discovery names it (nvidia.com/gpu.product)")
    gpus_per_node: Int = Field(ge=1, le=64, description="physical GPUs in each node")


# Settings of pools this stack provisions, which a bring-your-own pool cannot have.
_PROVISIONING_FIELDS = ("instance_type", "image", "availability_zone", "root_volume_gib", "min_replicas",
                        "max_replicas", "profile", "fabric", "subnet_id", "roll", "retired", "karpenter")
# Settings of an Auto Scaling Group or MachineSet pool that a Karpenter pool does not take, and what it takes instead.
_NOT_KARPENTER = {
    "roll": "a Karpenter pool rolls by drift, karpenter.disruptionBudget nodes at a time: set that instead",
    "availability_zone": "set karpenter.zones instead",
    "subnet_id": "set karpenter.zones instead (subnets are selected by cluster.karpenter.subnetTags)",
    "fabric": "EFA pools need a cluster placement group in one subnet, which this platform sets up for Auto Scaling "
              "Group pools only: remove karpenter to make it one",
    "profile": "Karpenter writes a Karpenter pool's boot script, which a node profile tunes on Auto Scaling Group pools "
               "only: remove karpenter to make it one",
    "time_slicing_replicas": "Karpenter launches a node for a pending pod only from what its instance types offer, and "
                             "EC2's offer nvidia.com/gpu, not shares (aws/karpenter-provider-aws instancetype/types.go "
                             "computeCapacity): share GPUs on an Auto Scaling Group pool",
    "mig_layout": "Karpenter launches a node for a pending pod only from what its instance types offer, and EC2's offer "
                  "nvidia.com/gpu, not MIG slices (aws/karpenter-provider-aws instancetype/types.go computeCapacity): "
                  "slice GPUs on an Auto Scaling Group pool",
}


class NodePoolConfig(StrictModel):
    """A pool of identical GPU nodes booting one image, hence one kernel."""

    name: Annotated[str, dns_label(30)]
    bring_your_own: BringYourOwnConfig | None = Field(
        default=None, description="Kubernetes: nodes from elsewhere, selected by labels; nothing is provisioned")
    karpenter: KarpenterPoolConfig | None = Field(
        default=None, description="Kubernetes on AWS: a Karpenter NodePool instead of an Auto Scaling Group")
    instance_type: str | None = None
    replicas: Int = Field(ge=0, le=MAX_POOL_NODES)
    min_replicas: Int = Field(default=0, ge=0, le=MAX_POOL_NODES)
    max_replicas: Int | None = Field(default=None, ge=0, le=MAX_POOL_NODES)
    os: str | None = None
    kernel: str | None = None
    image: str | None = Field(default=None, pattern=r"^ami-[0-9a-f]{8,17}$")
    availability_zone: str | None = Field(default=None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]([a-z]|(-[a-z0-9]+)+)$",
                                          description="OpenShift: the zone of the pool's machines, e.g. us-east-1a")
    root_volume_gib: Int = Field(default=200, ge=50, le=16384)
    profile: NodeProfileConfig | None = Field(default=None, description="node tuning; none: the image's defaults")
    fabric: Literal["efa"] | None = Field(default=None, description="Kubernetes: EFA interfaces for collectives")
    time_slicing_replicas: Int | None = Field(default=None, ge=2, le=64, description=(
        "share each GPU of the pool between this many pods, advertised as nvidia.com/gpu.shared (one per "
        "container); unset: whole GPUs"))
    mig_layout: str | dict[str, Annotated[Int, Field(ge=1, le=7)]] | None = Field(default=None, description=(
        "cut each GPU into MIG slices by this layout of NVIDIA's MIG manager (e.g. all-1g.10gb, all-balanced), or by "
        "the MIG devices of one GPU (e.g. {3g.40gb: 1, 1g.10gb: 4}), advertised as nvidia.com/mig-<profile>; unset: "
        "whole GPUs"))
    dedicated_to: tuple[str, ...] | None = Field(default=None, min_length=1, description=(
        "tenants the pool is reserved for: its nodes carry a second taint only their pods may tolerate"))
    subnet_id: str | None = Field(default=None, pattern=r"^subnet-[0-9a-f]{8,17}$",
                                  description="Kubernetes: the one subnet (one zone) of an EFA pool")
    roll: RollConfig = Field(default=RollConfig(), description="Kubernetes: how an image change replaces the nodes")
    retired: StrictBool = Field(default=False,
                                description="unprotect the pool's machines so a later change may remove it")

    # What an entry usually needs (a pool this stack provisions), for messages about a missing one.
    usual_keys: ClassVar[tuple[str, ...]] = ("name", "instanceType", "replicas", "image")

    @model_validator(mode="after")
    def _check(self) -> NodePoolConfig:
        if self.bring_your_own is not None:
            provisioned = [to_camel(field) for field in _PROVISIONING_FIELDS if field in self.model_fields_set]
            if provisioned:
                raise ValueError(f"{', '.join(provisioned)}: a bringYourOwn pool's nodes are provisioned outside this "
                                 "stack, which sets only its replicas (node count), os, kernel, "
                                 "timeSlicingReplicas, migLayout and dedicatedTo; remove them")
        else:
            missing = [to_camel(field) for field in ("instance_type", "image") if getattr(self, field) is None]
            if missing:
                raise ValueError(f"{' and '.join(missing)} required: the AWS instance type and image (AMI) of the "
                                 "pool's machines, or bringYourOwn for nodes provisioned elsewhere")
            if self.instance_type not in INSTANCE_TYPES:
                close = difflib.get_close_matches(self.instance_type, INSTANCE_TYPES, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(INSTANCE_TYPES))}"
                raise ValueError(f"instanceType {self.instance_type!r} is not a known GPU instance type; {hint}")
        if self.os is not None:
            # Whether a pool may or must set os and kernel depends on the flavor: StackConfig checks that.
            node_os = NODE_OSES.get(self.os)
            if node_os is not None and node_os.openshift:
                raise ValueError(f"os {self.os!r} is an OpenShift node OS: OpenShift pools leave os and kernel out "
                                 "(nodes run the kernel of cluster.release); Kubernetes pools use one of "
                                 f"{', '.join(KUBERNETES_OSES)}")
            if node_os is None:
                raise ValueError(f"os {self.os!r} is not supported; use one of {', '.join(KUBERNETES_OSES)}")
            if self.kernel is not None:
                check_kernel(self.kernel, self.os, f"a {self.os}")
        if self.max_replicas is not None and not self.min_replicas <= self.replicas <= self.max_replicas:
            raise ValueError("replicas must lie within minReplicas..maxReplicas")
        if self.min_replicas > self.replicas:
            raise ValueError("minReplicas must not exceed replicas")
        if self.profile is not None:
            self.profile.check_instance(self.instance)
        self._check_partitioning()
        if self.fabric == "efa" and not self.instance.efa:
            capable = ", ".join(name for name, instance in INSTANCE_TYPES.items() if instance.efa)
            raise ValueError(f"fabric efa: instanceType {self.instance_type!r} has no EFA; use one of {capable} "
                             "or remove fabric")
        return self

    def karpenter_problem(self) -> tuple[str, str] | None:
        """(field, what is wrong and the fix) of a Karpenter pool's settings, or None: a maximum (its limit), no
        minimum, none of an Auto Scaling Group's or MachineSet's settings."""
        for field, fix in _NOT_KARPENTER.items():
            if getattr(self, field) is not None and field in self.model_fields_set:
                return to_camel(field), f"does not apply to a karpenter pool; {fix}"
        if self.min_replicas:
            return "minReplicas", ("a karpenter pool has no minimum: Karpenter launches nodes for pending pods and "
                                   "removes empty ones; set 0 or leave it out")
        if self.max_replicas is None:
            return "maxReplicas", ("is required for a karpenter pool: the most nodes Karpenter may launch (the "
                                   "NodePool's limits, and what quotas and Kueue count the pool at)")
        return None

    def _check_partitioning(self) -> None:
        """A pool shares its GPUs or slices them, not both; a MIG layout the pool's GPU can hold."""
        if len(set(self.dedicated_to or ())) != len(self.dedicated_to or ()):
            raise ValueError("dedicatedTo names a tenant twice; list each once")
        if self.mig_layout is None:
            return
        if self.time_slicing_replicas is not None:
            raise ValueError("timeSlicingReplicas and migLayout: a pool shares its GPUs by time or slices them with "
                             "MIG, not both; keep one (or make two pools)")
        model = self.instance.gpu_model
        layouts = layouts_for(model)
        if not layouts:
            capable = ", ".join(name for name, instance in INSTANCE_TYPES.items() if layouts_for(instance.gpu_model))
            raise ValueError(f"migLayout {self.mig_layout!r}: the pool's GPU {model} has no MIG; share it with "
                             f"timeSlicingReplicas instead, or use a MIG-capable type ({capable})")
        if isinstance(self.mig_layout, dict):
            problem = custom_layout_problem(model, self.instance.gpu_memory_gib, self.mig_layout)
            if problem:
                raise ValueError(f"migLayout {self.mig_layout}: {problem}; its profiles are "
                                 f"{', '.join(profiles_of(model))}")
        elif self.mig_layout not in layouts:
            offered = ", ".join(f"{name} ({', '.join(f'{count}x {profile}' for profile, count in devices.items())})"
                                for name, devices in layouts.items())
            raise ValueError(f"migLayout {self.mig_layout!r} is not a layout a {model} can hold; its profiles are "
                             f"{', '.join(profiles_of(model))}, in the layouts {offered}; or give the MIG devices of "
                             "one GPU, e.g. {" + f"{profiles_of(model)[0]}: 1" + "}")

    @property
    def partitioning(self) -> Partitioning:
        """A custom MIG layout is named after the pool and its contents (the label its nodes carry, and its entry in
        the stack's own mig-parted config): an edit is a new name, so it reaches the nodes as a layout change."""
        if isinstance(self.mig_layout, dict):
            return Partitioning(mig_layout=custom_layout_name(self.name, self.mig_layout),
                                mig_devices=tuple(sorted(self.mig_layout.items())))
        return Partitioning(shares=self.time_slicing_replicas, mig_layout=self.mig_layout)

    @property
    def advertised_per_node(self) -> dict[str, int]:
        """What the device plugin advertises on one node, by extended resource (fleet.partitioning)."""
        return self.partitioning.advertised(self.instance.gpu_model, self.instance.gpus)

    @property
    def advertised(self) -> dict[str, int]:
        """What the pool's nodes advertise together at its counted size, by extended resource."""
        return {name: count * self.counted_nodes for name, count in self.advertised_per_node.items()}

    @property
    def instance(self) -> InstanceType:
        """The machine: an AWS instance type, or what a bring-your-own pool declares of its nodes' GPUs."""
        if self.bring_your_own is not None:
            return InstanceType(self.bring_your_own.gpu_model, self.bring_your_own.gpus_per_node, 0, 0, 0)
        return INSTANCE_TYPES[self.instance_type]

    @property
    def kernel_target(self) -> KernelTarget | None:
        """Kubernetes: the (os, kernel) the pool's image boots."""
        return KernelTarget(self.os, self.kernel) if self.os and self.kernel else None

    @property
    def counted_nodes(self) -> int:
        """The nodes quotas, Kueue and the capacity policy count: a Karpenter pool's limit (it launches nodes for
        pending pods up to it), any other pool's configured size."""
        return self.max_replicas if self.karpenter is not None else self.replicas

    @property
    def gpu_capacity(self) -> int:
        return self.counted_nodes * self.instance.gpus

    @property
    def autoscaler_min(self) -> int:
        """Fewest nodes: a bring-your-own pool has the nodes it has, nothing scales it."""
        return self.replicas if self.bring_your_own is not None else self.min_replicas

    @property
    def autoscaler_max(self) -> int:
        return self.replicas if self.max_replicas is None else self.max_replicas

    def zone(self, cluster: ClusterConfig) -> str:
        """The availability zone of the pool's machines: the one set, or the region's first."""
        return self.availability_zone or f"{cluster.region}a"

    def machine_set_name(self, cluster: ClusterConfig) -> str:
        """OpenShift MachineSet name; its machines carry it as a label value, so it has at most 63 characters."""
        return f"{cluster.infrastructure_id}-gpu-{self.name}-{self.zone(cluster)}"
