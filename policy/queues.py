"""Queue arithmetic: the namespaces Kueue governs, the pools behind each flavor, and what a ClusterQueue
guarantees and lends."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import PolicyResource

from components import labels
from fleet.partitioning import is_gpu_resource
from policy.capacity import (byo_capacity, device_plugin_sharing, gpu_pools, mig_parted_layouts, pool_capacity,
                             pool_node_labels, pool_taints)
from policy.index import index
from policy.reading import POOL_COMPONENT, describe, dig, items, whole
from policy.resource_types import is_pool


def queued_namespaces(resources: Sequence[PolicyResource]) -> set[str]:
    """Namespaces whose GPU work Kueue governs: a LocalQueue there feeds a ClusterQueue of the stack, and the
    policy that refuses GPU work outside the queues is in the stack."""
    found = index(resources)
    fenced = any(dig(r.props, "metadata", "name") == labels.QUEUE_POLICY_NAME
                 for r in found.of_kind("ValidatingAdmissionPolicy"))
    cluster_queues = {dig(r.props, "metadata", "name") for r in found.of_kind("ClusterQueue")}
    return {dig(r.props, "metadata", "namespace") for r in found.of_kind("LocalQueue")
            if fenced and dig(r.props, "spec", "clusterQueue") in cluster_queues}


@dataclass(frozen=True)
class PoolView:
    """A GPU pool as quotas and Kueue's flavors meet it: what it is, its nodes' labels and taints, what it
    advertises per kind."""

    resource: PolicyResource
    what: str
    node_labels: dict[str, str]
    taints: list[dict[str, str]]
    capacity: dict[str, int]

    @property
    def dedicated_to(self) -> str | None:
        """The pool a dedicated taint reserves (its value), or None for a pool any tenant may use."""
        return next((str(taint.get("value") or "") for taint in self.taints
                     if taint.get("key") == labels.DEDICATED_TAINT_KEY), None)

    def owned_by(self, namespace: PolicyResource | None) -> bool:
        """Whether a tenant namespace carries the label that lets its pods onto this dedicated pool."""
        label = labels.DEDICATED_POOL_LABEL.format(pool=self.dedicated_to)
        return namespace is not None and bool(dig(namespace.props, "metadata", "labels", label))


def queue_pools(resources: Sequence[PolicyResource]) -> list[PoolView]:
    """MachineSet, Auto Scaling Group and Karpenter NodePool pools, and bring-your-own pools by what their component declares (their
    nodes' GPU taint is checked live under `pulumi up`)."""
    found = index(resources)
    sharing = device_plugin_sharing(resources)
    own_layouts = mig_parted_layouts(resources)
    views = [PoolView(pool, describe(pool.resource_type, pool.props), pool_node_labels(pool), pool_taints(pool),
                      pool_capacity(pool, sharing, own_layouts)) for pool in gpu_pools(found.selected(is_pool))]
    for pool in found.of_type(POOL_COMPONENT):
        brought = pool.props.get("bringYourOwn")
        if isinstance(brought, Mapping):
            views.append(PoolView(pool, f"bring-your-own pool {pool.name}", dict(brought.get("nodeSelector") or {}),
                                  [dict(taint) for taint in items(brought.get("taints"))] or [dict(labels.GPU_TAINT)],
                                  byo_capacity(pool)))
    return views


def flavor_pools(flavor: Mapping[str, Any], pools: Iterable[PoolView]) -> list[PoolView]:
    """The GPU pools whose nodes a ResourceFlavor's nodeLabels select."""
    wanted = dig(flavor, "spec", "nodeLabels") or {}
    return [pool for pool in pools if wanted and wanted.items() <= pool.node_labels.items()]


def queue_quotas(cluster_queue: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(flavor, quota) of each quota of a kind of GPU of a ClusterQueue."""
    return [(flavor.get("name"), quota) for group in items(dig(cluster_queue, "spec", "resourceGroups"))
            for flavor in items(group.get("flavors")) for quota in items(flavor.get("resources"))
            if is_gpu_resource(str(quota.get("name")))]


def _lendable(quota: Mapping[str, Any]) -> int:
    nominal = whole(quota.get("nominalQuota")) or 0
    limit = whole(quota.get("lendingLimit"))
    return nominal if limit is None else min(limit, nominal)
