"""The capacity section: GPUs and slices the pools advertise against what the tenants are promised."""

from __future__ import annotations

from components.labels import GPU_RESOURCE
from gpuctl.summary.model import PoolState, TenantChange


def _other_kinds(tenants: list[TenantChange], pools: dict[str, PoolState]) -> dict[str, tuple[int, int]]:
    """The head's kinds other than whole GPUs: (tenants' quotas, pools' advertised) of each."""
    kinds = sorted({kind for pool in pools.values() for kind in pool.kinds if kind != GPU_RESOURCE}
                   | {kind for tenant in tenants for kind in tenant.slices_after})
    return {kind: (sum(tenant.slices_after.get(kind, 0) for tenant in tenants if tenant.gpus_after is not None),
                   sum(pool.kinds.get(kind, 0) for pool in pools.values())) for kind in kinds}


def _quota(tenants: list[TenantChange], which: str) -> int:
    return sum(getattr(tenant, f"gpus_{which}") or 0 for tenant in tenants)
