"""Allocation mode `dra`: the DeviceClasses tenants may name, what each selects, and each tenant's devices per class.

What a class can select is what NVIDIA's DRA driver publishes of a device (kubernetes-sigs/dra-driver-nvidia-gpu
v25.12.0, cmd/gpu-kubelet-plugin): driver `gpu.nvidia.com`, one pool per node (driver.go), a whole GPU with the
attributes `type` = "gpu", `productName`, `uuid`, ... (partitions.go, GpuInfo.PartDevAttributes) and a MIG device
with `type` = "mig", `profile` (go-nvlib's profile name, e.g. "1g.10gb+me") and its parent's `productName`
(deviceinfo.go, MigDeviceInfo.GetDevice). Nothing names the node or the pool, and a DeviceClass's CEL sees only the
device, not the node's labels: a class tells pools apart by their GPU model only. So a dedicated pool's classes
select its model, and the stack refuses a dedicated pool whose model another pool offers in the same kind; the
pool's taint (which only its tenants may tolerate) keeps other tenants' pods, and so their claims, off its nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleet.partitioning import GPU, MIG_PREFIX

DRIVER = "gpu.nvidia.com"
# The DeviceClasses GPU Operator v26.7.0 creates for a GPUCluster (manifests/state-dra-driver/0400_deviceclass-gpu.yaml,
# 0410_deviceclass-mig.yaml, 0430_deviceclass-vfio-gpu.yaml; the compute-domain classes of 0420 only with
# computeDomains enabled, which the stack turns off). They select every GPU, so tenants get none of them.
OPERATOR_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")
CLASS_DOMAIN = "gpu-platform.io"
# ResourceQuota's name for the devices of one class (k8s.io/kubernetes pkg/quota/v1/evaluator/core/
# resource_claims.go, V1ResourceByDeviceClass: "<class>.deviceclass.resource.k8s.io/devices").
QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
# On each of the stack's DeviceClasses: the devices it covers (what the capacity policy holds the quotas to).
DEVICES_ANNOTATION = "gpu-platform.io/devices"


@dataclass(frozen=True)
class DraPool:
    """A pool as DRA sees it: its GPU model (GPU feature discovery's product name), what one node offers per kind
    (`nvidia.com/gpu`, `nvidia.com/mig-<profile>`), the MIG devices one GPU is cut into (profile -> count), its
    nodes, and the tenants it is dedicated to (None: any)."""

    name: str
    gpu_model: str
    per_node: Mapping[str, int]
    mig_devices: Mapping[str, int]
    nodes: int
    dedicated_to: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DeviceClassPlan:
    """One DeviceClass of the stack: its name, the kind it serves, the dedicated pool it is for (None: every pool
    not dedicated), the GPU models it selects, the MIG profile (None: whole GPUs), and the devices it covers."""

    name: str
    kind: str
    pool: str | None
    models: tuple[str, ...]
    profile: str | None
    devices: int

    @property
    def quota_key(self) -> str:
        return quota_key(self.name)

    def selector(self) -> str:
        """The class's CEL: the device's type (and MIG profile), and its model, compared as GPU feature discovery
        writes it (spaces as "-": k8s-device-plugin v0.20.0 internal/lm/resource.go productLabel)."""
        attributes = f"device.attributes['{DRIVER}']"
        kind = (f"{attributes}.type == 'mig' && {attributes}.profile == '{self.profile}'" if self.profile
                else f"{attributes}.type == 'gpu'")
        models = ", ".join(f"'{model}'" for model in self.models)
        return f"device.driver == '{DRIVER}' && {kind} && {attributes}.productName.replace(' ', '-') in [{models}]"


def quota_key(device_class: str) -> str:
    return device_class + QUOTA_SUFFIX


def _slug(profile: str) -> str:
    return profile.lower().replace("+", "-")


def class_name(kind: str, profile: str | None, pool: str | None) -> str:
    """`gpu.gpu-platform.io`, `mig-1g.10gb.gpu-platform.io`; a dedicated pool's with its name before the domain."""
    head = f"mig-{_slug(profile)}" if profile else "gpu"
    return ".".join(part for part in (head, pool, CLASS_DOMAIN) if part)


def _profiles(pool: DraPool) -> dict[str, str | None]:
    """Each kind a pool offers, with the MIG profile it stands for (None: whole GPUs)."""
    by_kind: dict[str, str | None] = {GPU: None} if GPU in pool.per_node else {}
    for profile in pool.mig_devices:
        kind = MIG_PREFIX + profile.replace("+", ".")  # fleet.partitioning.mig_resource
        if kind in pool.per_node:
            by_kind[kind] = profile
    return by_kind


def pool_classes(pool: DraPool) -> dict[str, str]:
    """The class of each kind a pool offers: its own where the pool is dedicated, else the shared one."""
    return {kind: class_name(kind, profile, pool.name if pool.dedicated_to else None)
            for kind, profile in _profiles(pool).items()}


def device_classes(pools: Sequence[DraPool]) -> list[DeviceClassPlan]:
    """The stack's classes: per kind, one for the pools not dedicated and one per dedicated pool offering it."""
    plans: dict[str, DeviceClassPlan] = {}
    for pool in pools:
        scope = pool.name if pool.dedicated_to else None
        for kind, profile in _profiles(pool).items():
            name = class_name(kind, profile, scope)
            known = plans.get(name)
            models = tuple(sorted({*(known.models if known else ()), pool.gpu_model}))
            devices = (known.devices if known else 0) + pool.per_node[kind] * pool.nodes
            plans[name] = DeviceClassPlan(name, kind, scope, models, profile, devices)
    return sorted(plans.values(), key=lambda plan: plan.name)


def dedicated_model_clash(pools: Sequence[DraPool]) -> tuple[str, str, str] | None:
    """A dedicated pool, another pool, and a kind both offer on the same GPU model, which no class can tell apart."""
    for pool in pools:
        if not pool.dedicated_to:
            continue
        for other in pools:
            if other is pool or other.gpu_model != pool.gpu_model:
                continue
            shared = sorted(set(_profiles(pool)) & set(_profiles(other)))
            if shared:
                return pool.name, other.name, shared[0]
    return None


def tenant_devices(pools: Sequence[DraPool], grants: Mapping[str, int], tenant: str) -> dict[str, int]:
    """What a tenant may hold of every class (the operator's included, 0 where not given): per kind, its grant
    goes first to the classes of the dedicated pools it owns, in pool order, up to what each covers, and the rest
    to the class of the pools not dedicated (else to its last dedicated one). The sum over a kind's classes is its
    grant, so no class adds to what the tenant was given."""
    plans = device_classes(pools)
    result = {name: 0 for name in OPERATOR_CLASSES} | {plan.name: 0 for plan in plans}
    own = [pool.name for pool in pools if pool.dedicated_to and tenant in pool.dedicated_to]
    for kind, amount in grants.items():
        mine = [plan for pool in own for plan in plans if plan.pool == pool and plan.kind == kind]
        common = [plan for plan in plans if plan.pool is None and plan.kind == kind]
        left = amount
        for plan in mine:
            result[plan.name] = min(left, plan.devices)
            left -= result[plan.name]
        last = (common or mine)
        if last and left:
            result[last[-1].name] += left
    return result
