"""The fleet summary of a change: what happens to pools, kernels, drivers, tenants and capacity.

Built from the base and head plans (their `outputs`, and the records where an older plan lacks an output), the
diff between them, and the driver image preflight. Plain data: `gpuctl.report` formats it as text, JSON or
Markdown. One module per section of the report (pools, kernels, tenants, capacity, destructive), over the data
(model) and the reading of a plan (plans).
"""

from __future__ import annotations

from typing import Any

from gpuctl.diff import PlanDiff
from gpuctl.summary.allocation import device_classes, mode_switch
from gpuctl.summary.capacity import _other_kinds, _quota
from gpuctl.summary.destructive import _destructive, _engine_notes, _retirements, _unknowns
from gpuctl.summary.kernels import _downgrades, _kernels
from gpuctl.summary.model import (DRIFT, MISSING, NOT_VERIFIED, SKIPPED, VERIFIED, Capacity, Destructive,
                                  FleetSummary, KernelChange, PoolChange, PoolState)
from gpuctl.summary.plans import _outputs, pool_states
from gpuctl.summary.pools import _driver_steps, _pool_change, _pool_steps
from gpuctl.summary.tenants import _tenants
from gpuctl.upgrade import release_stages

__all__ = ["DRIFT", "MISSING", "NOT_VERIFIED", "SKIPPED", "VERIFIED", "FleetSummary", "KernelChange", "PoolChange",
           "PoolState", "summarize"]


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
                        _other_kinds(tenants, new_pools), device_classes(new))
    downgrades = [Destructive(f"driver for {key} downgraded, branch {was} -> {now}",
                              "the newer driver on every node on that kernel: containers built for its CUDA version "
                              "may not run on the older branch") for key, was, now in _downgrades(old, new)]
    return FleetSummary(new.get("stack", ""), release[0], release[1], pools, kernels, tenants, capacity,
                        mode_switch(old, new) + _destructive(diff, pools, tenants, kernels) + downgrades,
                        _unknowns(diff, pools, kernels, offline), _engine_notes(diff),
                        _retirements(pools, tenants, old, new), release_stages(old, new))
