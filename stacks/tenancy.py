"""Tenancy mode `queue`: each tenant's guaranteed GPUs per pool, derived from its `gpus` and the pools it may use."""

from __future__ import annotations

from stacks.config import StackConfig


def guarantees(config: StackConfig) -> dict[str, dict[str, int]]:
    """Nominal GPUs per pool of each tenant, in tenant order: a tenant's `gpus` come from its pools in the order it
    lists them, each pool giving what it advertises and earlier tenants left. What no pool has left stays on the
    tenant's last pool, over that pool's capacity, where the `queue-guarantee-within-capacity` policy reports it."""
    left = {pool.name: pool.advertised_capacity for pool in config.node_pools}
    result = {}
    for tenant in config.tenants:
        pools = tenant.queue.pools or tuple(left)
        share, need = {}, tenant.gpus
        for name in pools:
            share[name] = min(need, left[name])
            left[name] -= share[name]
            need -= share[name]
        share[pools[-1]] += need
        result[tenant.name] = share
    return result


def borrowable(config: StackConfig, shares: dict[str, dict[str, int]]) -> dict[str, int]:
    """GPUs each tenant may borrow at most beyond its guarantee: per pool it may use, what the other tenants with a
    guarantee there may lend (their lending limit, or all of it), up to its own borrowing limit. Empty for `quota`."""
    tenants = {tenant.name: tenant for tenant in config.tenants}
    result = {}
    for name, share in shares.items():
        total = 0
        for pool in share:
            lent = sum(min(other[pool], tenants[owner].queue.lending_limit if tenants[owner].queue.lending_limit
                           is not None else other[pool])
                       for owner, other in shares.items() if owner != name and pool in other)
            limit = tenants[name].queue.borrowing_limit
            total += lent if limit is None else min(limit, lent)
        result[name] = total
    return result
