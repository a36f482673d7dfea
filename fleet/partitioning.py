"""How a pool cuts its GPUs, and what its nodes then advertise, per kind: the one table everything that counts reads
(quotas, Kueue flavors, the capacity policy, autoscaler limits, the fleet summary, the e2e suite's kwok nodes)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

GPU = "nvidia.com/gpu"
# k8s-device-plugin v0.20.0 (the GPU Operator v26.7.0's): with `renameByDefault` a time-sliced resource is advertised
# under its name plus ".shared" (api/config/v1/replicas.go ReplicatedResources.UnmarshalJSON, resources.go
# DefaultSharedRename with consts.go DefaultSharedResourceNameSuffix).
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"

# The MIG layouts of mig-parted's default configuration that GPU Operator v26.7.0 ships (the ConfigMap
# default-mig-parted-config, assets/state-mig-manager/0400_configmap.yaml), for the MIG-capable GPUs of the catalog,
# by GPU feature discovery's product name: the layouts listed there under each GPU's comment heading (and, for
# `all-1g.10gb` and `all-balanced`, the entry whose device-filter holds the GPU's PCI device ID), with the MIG
# devices each layout makes on one GPU. A100-40GB: 0x20B0; A100-80GB: 0x20B2; H100-80GB: 0x2330; H200-141GB: 0x2335.
_A100_40GB = {
    "all-1g.5gb": {"1g.5gb": 7}, "all-1g.5gb.me": {"1g.5gb+me": 1}, "all-2g.10gb": {"2g.10gb": 3},
    "all-3g.20gb": {"3g.20gb": 2}, "all-4g.20gb": {"4g.20gb": 1}, "all-7g.40gb": {"7g.40gb": 1},
    "all-1g.10gb": {"1g.10gb": 4}, "all-balanced": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
}
_80GB = {  # "H100-80GB, H800-80GB, A100-80GB, A800-80GB"
    "all-1g.10gb": {"1g.10gb": 7}, "all-1g.10gb.me": {"1g.10gb+me": 1}, "all-1g.20gb": {"1g.20gb": 4},
    "all-2g.20gb": {"2g.20gb": 3}, "all-3g.40gb": {"3g.40gb": 2}, "all-4g.40gb": {"4g.40gb": 1},
    "all-7g.80gb": {"7g.80gb": 1}, "all-balanced": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
}
_H200 = {  # "H200-141GB"
    "all-1g.18gb": {"1g.18gb": 7}, "all-1g.18gb.me": {"1g.18gb+me": 1}, "all-1g.35gb": {"1g.35gb": 4},
    "all-2g.35gb": {"2g.35gb": 3}, "all-3g.71gb": {"3g.71gb": 2}, "all-4g.71gb": {"4g.71gb": 1},
    "all-7g.141gb": {"7g.141gb": 1}, "all-balanced": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
}
MIG_LAYOUTS: dict[str, dict[str, dict[str, int]]] = {
    "NVIDIA-A100-SXM4-40GB": _A100_40GB,
    "NVIDIA-A100-SXM4-80GB": _80GB,
    "NVIDIA-H100-80GB-HBM3": _80GB,
    "NVIDIA-H200": _H200,
}
# The layout the operator gives MIG-capable nodes that no pool labels (ClusterPolicy migManager.config.default):
# MIG off, every GPU whole.
MIG_DISABLED = "all-disabled"
# Each MIG-capable GPU's PCI device ID as mig-parted's device-filter names it (the same file's all-balanced entries,
# under each GPU's heading), for layouts of this stack's own mig-parted config that hold for one GPU only.
PCI_DEVICE_IDS = {"NVIDIA-A100-SXM4-40GB": "0x20B010DE", "NVIDIA-A100-SXM4-80GB": "0x20B210DE",
                  "NVIDIA-H100-80GB-HBM3": "0x233010DE", "NVIDIA-H200": "0x233510DE"}
# A GPU has 7 compute slices and 8 memory slices; a profile `<c>g.<m>gb` takes c of the first and m GB's share of
# the second (NVIDIA's MIG user guide, "Supported MIG profiles"); a `+me` profile takes the GPU's one media engine.
COMPUTE_SLICES, MEMORY_SLICES = 7, 8
CUSTOM_LAYOUT_PREFIX = "custom-"  # a pool's own layout is named custom-<pool>-<digest of its devices>
_PROFILE = re.compile(r"([1-7])g\.([0-9]+)gb(\+me)?")
# Where a GPU instance may start, by its (compute slices, memory slices): the memory slices it may start at, each
# taking that many of the 8 (an instance is created only where it overlaps no other: NVML
# nvmlDeviceGetGpuInstancePossiblePlacements_v2). As an H100 and an H200 report them (../shared/notes/gpu-readings.md,
# "MIG GPU instance profiles"). The A100s are given the same slots: NVIDIA's MIG user guide ("Supported MIG
# Profiles") gives their profiles the same fractions of memory (1/8, 2/8, 4/8, all) under the same names scaled by
# memory, but no A100 was read here; a layout the A100's placements cannot hold still ends `failed` in the MIG manager.
PLACEMENTS: dict[tuple[int, int], tuple[int, ...]] = {
    (1, 1): (0, 1, 2, 3, 4, 5, 6), (1, 2): (0, 2, 4, 6), (2, 2): (0, 2, 4), (3, 4): (0, 4), (4, 4): (0,), (7, 8): (0,),
}


def custom_layout_name(pool: str, devices: Mapping[str, int]) -> str:
    """A pool's own layout's name: the pool and a digest of the MIG devices, so an edit is a new name (a new node label
    the MIG manager acts on, a layout change the preview shows), never the same name over other contents."""
    digest = hashlib.sha256(repr(sorted(devices.items())).encode()).hexdigest()[:8]
    return f"{CUSTOM_LAYOUT_PREFIX}{pool}-{digest}"


def mig_resource(profile: str) -> str:
    """The extended resource of a MIG profile under the mixed strategy: "mig-" plus the profile with "+" as "."
    (k8s-device-plugin v0.20.0 internal/rm/rm.go AddDefaultResourcesToConfig)."""
    return MIG_PREFIX + profile.replace("+", ".")


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource is one of the kinds the device plugin advertises GPUs (or slices of them) as."""
    return name in (GPU, SHARED_GPU) or name.startswith(MIG_PREFIX)


def kind_of(resource: str) -> str:
    """A resource's kind, in words a reader of the fleet summary knows."""
    if resource == GPU:
        return "whole GPUs"
    if resource == SHARED_GPU:
        return "GPU shares"
    return f"MIG {resource.removeprefix(MIG_PREFIX)}"


def custom_layout_problem(gpu_model: str, gpu_memory_gib: int, devices: Mapping[str, int]) -> str | None:
    """Why a custom layout (MIG devices per GPU) does not fit a GPU, or None: each profile one the GPU offers, at
    most 7 compute and 8 memory slices together, at most one media-engine profile, and every instance at a placement
    the GPU allows (PLACEMENTS) without overlapping another."""
    if not devices:
        return "names no MIG profile"
    offered = profiles_of(gpu_model)
    unknown = sorted(set(devices) - set(offered))
    if unknown:
        return f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a profile of {gpu_model}"
    compute = memory = engines = 0
    shapes = []
    for profile, count in devices.items():
        slices, gigabytes, engine = _PROFILE.fullmatch(profile).groups()
        shape = (int(slices), round(int(gigabytes) * MEMORY_SLICES / gpu_memory_gib))
        shapes += [shape] * count
        compute += shape[0] * count
        memory += shape[1] * count
        engines += count if engine else 0
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES or engines > 1:
        return (f"takes {compute} compute slices, {memory} memory slices and {engines} media engines of one GPU, "
                f"which has {COMPUTE_SLICES}, {MEMORY_SLICES} and 1")
    if not _placeable(sorted(shapes, reverse=True), frozenset()):
        return ("fits the GPU's slices but not its placements (1g at memory slices 0-6, a 2-slice 1g at 0/2/4/6, 2g at "
                "0/2/4, 3g at 0/4, 4g and 7g at 0, none overlapping)")
    return None


def _placeable(shapes: list[tuple[int, int]], taken: frozenset[int]) -> bool:
    """Whether GPU instances of these shapes can all be placed without overlap, at the starts PLACEMENTS allows."""
    if not shapes:
        return True
    (compute, size), rest = shapes[0], shapes[1:]
    for start in PLACEMENTS.get((compute, size), ()):
        slots = frozenset(range(start, start + size))
        if not slots & taken and _placeable(rest, taken | slots):
            return True
    return False


@dataclass(frozen=True)
class Partitioning:
    """How a pool's GPUs are cut: whole (neither set), time-sliced `shares` per GPU, or a MIG `layout`: one of NVIDIA's
    by name, or the stack's own (`mig_devices`, per GPU, named after the pool)."""

    shares: int | None = None
    mig_layout: str | None = None
    mig_devices: tuple[tuple[str, int], ...] = ()

    @property
    def kind(self) -> str:
        return "mig" if self.mig_layout else "shared" if self.shares else "whole"

    def describe(self) -> str:
        if self.mig_layout:
            return f"MIG {self.mig_layout}"
        return f"time-sliced x{self.shares}" if self.shares else "whole GPUs"

    def advertised(self, gpu_model: str, gpus: int) -> dict[str, int]:
        """What one node with `gpus` GPUs of `gpu_model` advertises, by extended resource."""
        if self.mig_layout:
            devices = self.devices(gpu_model)
            return {mig_resource(profile): count * gpus for profile, count in sorted(devices.items())}
        if self.shares:
            return {SHARED_GPU: gpus * self.shares}
        return {GPU: gpus}


    def devices(self, gpu_model: str) -> dict[str, int]:
        """The MIG devices the layout makes on one GPU of `gpu_model`."""
        return dict(self.mig_devices) if self.mig_devices else dict(MIG_LAYOUTS[gpu_model][self.mig_layout])


def layouts_for(gpu_model: str) -> Mapping[str, Mapping[str, int]]:
    """The MIG layouts a GPU can hold (none for a GPU without MIG)."""
    return MIG_LAYOUTS.get(gpu_model, {})


def profiles_of(gpu_model: str) -> list[str]:
    """The MIG profiles a GPU offers across its layouts, in a stable order."""
    return sorted({profile for devices in layouts_for(gpu_model).values() for profile in devices})
