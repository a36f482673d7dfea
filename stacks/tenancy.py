"""What tenants may hold: in tenancy mode `queue` each tenant's guarantee per pool and kind (derived from what it was
given and the pools it may use) and its ceiling; in either mode the share of a node's CPU and memory that comes with
one unit of each kind of GPU."""

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


def ceilings(config: StackConfig, shares: dict[str, Guarantee], lendable: dict[str, dict[str, int]],
             kinds: list[str]) -> dict[str, dict[str, int]]:
    """The most of each kind the fleet advertises that each tenant can ever hold: its guarantee plus what it may
    borrow (0 for a kind its queue does not draw on). The API server holds every tenant namespace to it, whatever
    Kueue is told or not told."""
    return {name: {kind: sum(pool.get(kind, 0) for pool in share.values()) + lendable[name].get(kind, 0)
                   for kind in kinds} for name, share in shares.items()}


# The part of a node's vCPUs and memory its GPUs' pods may ask for together: the rest is left for the kubelet, the
# operating system and the node agents (the GPU Operator's DaemonSets), which a node's allocatable does not show
# ahead of time.
NODE_SHARE = 0.9


def node_shares(config: StackConfig) -> dict[str, tuple[int, int]]:
    """Per kind of GPU: the most CPU (millicores) and memory (MiB) a pod may ask per unit of it (a whole GPU, a share,
    a MIG slice), so that no tenant strands the other units of a node: NODE_SHARE of a node divided by the units of
    that kind it advertises, the least over the pools that advertise it. Bring-your-own pools declare no node shape
    and set no bound."""
    shares: dict[str, tuple[int, int]] = {}
    for pool in config.node_pools:
        if pool.bring_your_own is not None:
            continue
        for kind, units in pool.advertised_per_node.items():
            cpu = int(pool.instance.vcpus * 1000 * NODE_SHARE) // units
            memory = int(pool.instance.memory_mib * NODE_SHARE) // units
            known = shares.get(kind, (cpu, memory))
            shares[kind] = (min(cpu, known[0]), min(memory, known[1]))
    return shares
