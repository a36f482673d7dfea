"""Tenancy mode `queue`: each tenant's guarantee per pool and kind, derived from what it was given and the pools it
may use."""

from __future__ import annotations

from stacks.config import StackConfig, TenantConfig

Guarantee = dict[str, dict[str, int]]  # pool -> extended resource -> nominal quota


def tenant_pools(config: StackConfig, tenant: TenantConfig) -> list[str]:
    """The pools a tenant's queue draws from, in its order: those it lists, else every pool it may use."""
    usable = [pool.name for pool in config.node_pools if config.may_use(tenant, pool)]
    return list(tenant.queue.pools) if tenant.queue.pools else usable


def guarantees(config: StackConfig) -> dict[str, Guarantee]:
    """Nominal quota per pool and kind of each tenant, in tenant order. Per kind, a tenant's amount comes from its
    pools that advertise that kind, in its order, each giving what it advertises and earlier tenants left; what no
    pool has left stays on its last such pool, over capacity, where the `queue-guarantee-within-capacity` policy
    reports it. Every kind a tenant's pools advertise gets an entry (0 when not given), so it may borrow there."""
    advertised = {pool.name: pool.advertised for pool in config.node_pools}
    left = {name: dict(kinds) for name, kinds in advertised.items()}
    result = {}
    for tenant in config.tenants:
        pools = tenant_pools(config, tenant)
        share: Guarantee = {name: {} for name in pools}
        kinds = sorted({kind for name in pools for kind in advertised[name]})
        for kind in kinds:
            need = tenant.grants.get(kind, 0)
            offering = [name for name in pools if kind in advertised[name]]
            for name in offering:
                share[name][kind] = min(need, left[name][kind])
                left[name][kind] -= share[name][kind]
                need -= share[name][kind]
            share[offering[-1]][kind] += need
        result[tenant.name] = {name: kinds for name, kinds in share.items() if kinds}
    return result


def borrowable(config: StackConfig, shares: dict[str, Guarantee]) -> dict[str, dict[str, int]]:
    """What each tenant may borrow at most beyond its guarantee, per kind: per pool it may use, what the other tenants
    with a guarantee there may lend (their lending limit, or all of it), up to its own borrowing limit."""
    tenants = {tenant.name: tenant for tenant in config.tenants}
    result = {}
    for name, share in shares.items():
        totals: dict[str, int] = {}
        for pool, kinds in share.items():
            for kind in kinds:
                lent = 0
                for owner, other in shares.items():
                    nominal = other.get(pool, {}).get(kind)
                    if owner == name or nominal is None:
                        continue
                    limit = tenants[owner].queue.lending_limit
                    lent += nominal if limit is None else min(limit, nominal)
                limit = tenants[name].queue.borrowing_limit
                totals[kind] = totals.get(kind, 0) + (lent if limit is None else min(limit, lent))
        result[name] = totals
    return result
