"""Policies of GPU quotas: every tenant has one, and they and the queues' guarantees fit the pools."""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import PolicyResource, ReportViolation, StackValidationArgs

from components import labels
from fleet.dra import DEVICES_ANNOTATION, quota_key
from fleet.partitioning import GPU, kind_of
from policy.capacity import add, gpu_quota, quotas, tenant_gpu_quotas, tenant_namespaces
from policy.index import index
from policy.queues import _lendable, flavor_pools, queue_pools, queue_quotas, queued_namespaces
from policy.reading import DEFAULT_OVERCOMMIT, dig, items, tolerates, whole


def tenant_gpu_quota(args: StackValidationArgs, report: ReportViolation) -> None:
    kinds = sorted({GPU, *(kind for pool in queue_pools(args.resources) for kind in pool.capacity)})
    for namespace, resource in tenant_namespaces(args.resources).items():
        caps = {kind: [cap for cap in (gpu_quota(q, kind) for q in quotas(args.resources, namespace))
                       if cap is not None] for kind in kinds}
        missing = [kind for kind, found in caps.items() if not found]
        if missing:
            report(f"tenant namespace {namespace} has no ResourceQuota on {', '.join(missing)}, so its pods can take "
                   "every one the pools advertise (in tenancy mode queue too: Kueue does not see every path); add an "
                   "unscoped ResourceQuota with spec.hard requests.<kind>: \"<count>\" for each (0 where not given)",
                   resource.urn)
        for kind, found in caps.items():
            if any(whole(cap) is None for cap in found):
                report(f"tenant namespace {namespace} caps requests.{kind} at {', '.join(map(str, found))}; "
                       "use a whole number", resource.urn)


def quota_within_capacity(args: StackValidationArgs, report: ReportViolation) -> None:
    """Per kind: every tenant's quota together within what the pools advertise; and what tenants cannot place on
    pools dedicated to them within the pools dedicated to no one (a dedicated pool counts toward its owners only); in
    allocation mode dra, per DeviceClass, within the devices it covers."""
    ratio = float(args.get_config().get("maxOvercommit", DEFAULT_OVERCOMMIT))
    # A queued tenant's quota is its ceiling, guarantee plus borrowing: its guarantee is held to capacity by
    # queue-guarantee-within-capacity.
    queued = queued_namespaces(args.resources)
    promised = {name: caps for name, caps in tenant_gpu_quotas(args.resources).items() if name not in queued}
    pools = queue_pools(args.resources)
    namespaces = tenant_namespaces(args.resources)
    capacity: dict[str, int] = {}
    for pool in pools:
        add(capacity, pool.capacity)
    for kind in sorted({kind for caps in promised.values() for kind in caps} | {GPU}):
        quotas_of = {name: caps[kind] for name, caps in promised.items() if kind in caps}
        total, advertised = sum(quotas_of.values()), capacity.get(kind, 0)
        tenants = ", ".join(f"{name} {amount}" for name, amount in sorted(quotas_of.items()))
        what = "GPU quotas" if kind == GPU else f"quotas of {kind_of(kind)} ({kind})"
        unit = " GPUs" if kind == GPU else ""
        if total > advertised * ratio:
            report(f"tenant {what} add up to {total}{unit} ({tenants}) but the GPU pools advertise {advertised}; "
                   f"with maxOvercommit {ratio:g} at most {advertised * ratio:g} may be promised. Lower the tenants' "
                   "quotas, add pool replicas, or raise maxOvercommit in the pack config", None)
            continue
        open_capacity = sum(pool.capacity.get(kind, 0) for pool in pools if pool.dedicated_to is None)
        beyond = {name: amount - sum(pool.capacity.get(kind, 0) for pool in pools if pool.dedicated_to is not None
                                     and pool.owned_by(namespaces.get(name)))
                  for name, amount in quotas_of.items()}
        spill = sum(max(0, amount) for amount in beyond.values())
        if spill > open_capacity * ratio:
            dedicated = ", ".join(sorted(str(pool.dedicated_to) for pool in pools if pool.dedicated_to is not None))
            report(f"tenant {what} beyond what their dedicated pools hold add up to {spill}{unit} ({tenants}) but "
                   f"the pools dedicated to no one advertise {open_capacity} (dedicated: {dedicated}, counted "
                   "toward their owners only); lower the quotas of tenants without a dedicated pool, or add "
                   "capacity", None)
    devices_within_classes(args.resources, ratio, report)


def devices_within_classes(resources: Sequence[PolicyResource], ratio: float, report: ReportViolation) -> None:
    """Mode dra: per DeviceClass of the stack, every tenant's quota on its devices together within the devices it
    covers (its annotation DEVICES_ANNOTATION) times the allowed overcommit; a queued tenant's quota is its ceiling,
    so its ClusterQueue's guarantee (nominal quota on the class's resource, every flavor) is counted instead."""
    queued = queued_namespaces(resources)
    queues = index(resources).of_kind("ClusterQueue")
    for device_class in index(resources).of_kind("DeviceClass"):
        name = dig(device_class.props, "metadata", "name")
        covered = whole(dig(device_class.props, "metadata", "annotations", DEVICES_ANNOTATION))
        if covered is None:
            continue
        given = {namespace: whole(dig(quota, "spec", "hard", quota_key(name))) or 0
                 for namespace in tenant_namespaces(resources) if namespace not in queued
                 for quota in quotas(resources, namespace) if dig(quota, "spec", "hard", quota_key(name)) is not None}
        for queue in queues:
            nominal = [whole(quota.get("nominalQuota")) or 0 for group in items(dig(queue.props, "spec",
                                                                                     "resourceGroups"))
                       for flavor in items(group.get("flavors")) for quota in items(flavor.get("resources"))
                       if quota.get("name") == quota_key(name)]
            if nominal:
                given[dig(queue.props, "metadata", "name")] = sum(nominal)
        total = sum(given.values())
        if total > covered * ratio:
            tenants = ", ".join(f"{namespace} {amount}" for namespace, amount in sorted(given.items()))
            report(f"tenant quotas on DeviceClass {name} add up to {total} devices ({tenants}) but it covers {covered}; "
                   f"with maxOvercommit {ratio:g} at most {covered * ratio:g} may be promised. Lower the tenants' "
                   "grants, add pool replicas, or raise maxOvercommit in the pack config", device_class.urn)


def queue_within_capacity(args: StackValidationArgs, report: ReportViolation) -> None:
    found = index(args.resources)
    flavors = {dig(r.props, "metadata", "name"): r for r in found.of_kind("ResourceFlavor")}
    pools = queue_pools(args.resources)
    promised: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for queue in found.of_kind("ClusterQueue"):
        for flavor, quota in queue_quotas(queue.props):
            if flavor not in flavors:
                report(f"ClusterQueue {dig(queue.props, 'metadata', 'name')} guarantees GPUs of flavor {flavor}, "
                       "which is not a ResourceFlavor of this stack; name a pool's flavor", queue.urn)
                continue
            promised.setdefault((flavor, str(quota.get("name"))), []).append(
                (dig(queue.props, "metadata", "name"), whole(quota.get("nominalQuota")) or 0))
    for (flavor, kind), shares in promised.items():
        capacity = sum(pool.capacity.get(kind, 0) for pool in flavor_pools(flavors[flavor].props, pools))
        total = sum(gpus for _, gpus in shares)
        if total > capacity:
            who = ", ".join(f"{name} {gpus}" for name, gpus in shares)
            what = "GPUs" if kind == GPU else kind_of(kind)
            report(f"ClusterQueues guarantee {total} {what} of flavor {flavor} ({who}) but its pool advertises "
                   f"{capacity}; lower the tenants' quotas, let them use other pools, or add replicas",
                   flavors[flavor].urn)


def queue_borrowing_within_cohort(args: StackValidationArgs, report: ReportViolation) -> None:
    queues = index(args.resources).of_kind("ClusterQueue")
    for queue in queues:
        cohort = dig(queue.props, "spec", "cohortName")
        for flavor, quota in queue_quotas(queue.props):
            limit = whole(quota.get("borrowingLimit"))
            if limit is None:
                continue
            lendable = sum(_lendable(other_quota) for other in queues if other is not queue and cohort
                           and dig(other.props, "spec", "cohortName") == cohort
                           for other_flavor, other_quota in queue_quotas(other.props)
                           if other_flavor == flavor and other_quota.get("name") == quota.get("name"))
            if limit > lendable:
                report(f"ClusterQueue {dig(queue.props, 'metadata', 'name')} may borrow {limit} GPUs of flavor "
                       f"{flavor}, but the rest of cohort {cohort or '(none)'} can lend at most {lendable} there; "
                       f"lower its borrowingLimit to {lendable} or raise the others' lendingLimit", queue.urn)


def queue_flavors_tolerate_pools(args: StackValidationArgs, report: ReportViolation) -> None:
    found = index(args.resources)
    pools = queue_pools(args.resources)
    gpu_flavors = {flavor for queue in found.of_kind("ClusterQueue") for flavor, _ in queue_quotas(queue.props)}
    for flavor in found.of_kind("ResourceFlavor"):
        name = dig(flavor.props, "metadata", "name")
        selected = flavor_pools(flavor.props, pools)
        if not selected and (name in gpu_flavors or dig(flavor.props, "spec", "nodeLabels")):
            report(f"ResourceFlavor {name} selects no GPU pool's nodes by its nodeLabels, so workloads admitted to it "
                   f"wait forever; set nodeLabels {{{labels.POOL_LABEL}: <pool>}}", flavor.urn)
        tolerations = items(dig(flavor.props, "spec", "tolerations"))
        for pool in selected:
            for taint in pool.taints:
                if not any(tolerates(toleration, taint) for toleration in tolerations):
                    report(f"ResourceFlavor {name} does not tolerate the taint {taint['key']}:{taint['effect']} of "
                           f"{pool.what}, so workloads admitted to it stay Pending; "
                           f"add {{key: {taint['key']}, operator: Exists, effect: {taint['effect']}}} to its "
                           "tolerations", flavor.urn)
