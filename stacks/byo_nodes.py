"""Bring-your-own pools, checked live: their nodes carry the GPU taint (and their sharing's config label), each
belongs to one pool, and the pool has the nodes it declares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from components import labels
from fleet.partitioning import MIG_DISABLED
from stacks.config import PROJECT, ConfigError, DiscoveryConfig, NodePoolConfig
from stacks.deadline import Deadline
from stacks.discovery import ClusterRead, ask_cluster, node_list, read_nodes

TAINT = f"{labels.GPU_TAINT['key']}:{labels.GPU_TAINT['effect']}"


class ByoNodesError(ConfigError):
    """A bring-your-own pool's nodes are not what the stack needs them to be; one line with the fix."""


@dataclass(frozen=True)
class LiveNode:
    """What the check reads of a node: its name, labels and taints (as key:effect)."""

    name: str
    labels: dict[str, str]
    taints: frozenset[str]


def read_byo_nodes(discovery: DiscoveryConfig, pools: Sequence[NodePoolConfig],
                   deadline: Deadline | None = None) -> dict[str, list[LiveNode]]:
    """Each bring-your-own pool's nodes, selected by its labels, in one exchange bounded by `deadline` (default:
    `timeoutSeconds` from now)."""

    def request(api: client.ApiClient, timeout: float) -> dict[str, bytes]:
        return {pool.name: read_nodes(api, timeout, selector(pool)) for pool in pools}

    bodies, server = ask_cluster(discovery, request, ByoNodesError, ClusterRead(
        answer="the bring-your-own pools' node lists ", doing="listing a bring-your-own pool's nodes",
        rights="list nodes", grant="bind it a ClusterRole with get and list on nodes"), deadline)
    return {name: [_live(node, server) for node in node_list(body, server, ByoNodesError).get("items") or []]
            for name, body in bodies.items()}


def check_byo_nodes(pools: Sequence[NodePoolConfig], nodes: dict[str, list[LiveNode]]) -> list[str]:
    """Refuse nodes the platform cannot fence or configure; return warnings for pools short of or over their count.

    Without the GPU taint any pod could land on a GPU node and the tenants' quotas and priorities would not hold;
    a shared pool's nodes select its device-plugin config by label, which only the node's owner can set.
    """
    owner: dict[str, str] = {}
    warnings = []
    for pool in pools:
        found = nodes.get(pool.name, [])
        for node in found:
            if node.name in owner:
                raise ByoNodesError(f"{PROJECT}:nodePools: node {node.name} is selected by pools {owner[node.name]!r} "
                                    f"and {pool.name!r}; make their bringYourOwn.nodeSelector labels disjoint")
            owner[node.name] = pool.name
        untainted = sorted(node.name for node in found if TAINT not in node.taints)
        if untainted:
            raise ByoNodesError(
                f"{PROJECT}:nodePools: pool {pool.name!r} nodes {', '.join(untainted)} lack the GPU taint {TAINT}, "
                f"so any pod could run there; taint them: kubectl taint nodes {' '.join(untainted)} {TAINT}")
        for key, value, why in _required_labels(pool):
            unlabelled = sorted(node.name for node in found if node.labels.get(key) != value)
            if unlabelled:
                raise ByoNodesError(
                    f"{PROJECT}:nodePools: pool {pool.name!r} {why} but nodes {', '.join(unlabelled)} do not carry "
                    f"{key}={value}; label them: kubectl label nodes {' '.join(unlabelled)} --overwrite {key}={value}")
        for key, allowed, fix, why in _stale_labels(pool):
            stale = sorted(node.name for node in found if node.labels.get(key) not in (None, *allowed))
            if stale:
                raise ByoNodesError(
                    f"{PROJECT}:nodePools: pool {pool.name!r} {why} but nodes {', '.join(stale)} carry "
                    f"{key}={found_value(found, stale[0], key)}, so they advertise what the pool does not count; "
                    f"relabel them: kubectl label nodes {' '.join(stale)} {fix}")
        model = pool.instance.gpu_model
        other = sorted(node.name for node in found if not _same_gpu(node.labels.get(labels.GPU_PRODUCT_LABEL), model))
        if other:
            raise ByoNodesError(
                f"{PROJECT}:nodePools: pool {pool.name!r} declares {model} but nodes {', '.join(other)} report "
                f"{labels.GPU_PRODUCT_LABEL}={found_value(found, other[0], labels.GPU_PRODUCT_LABEL)}; set "
                "bringYourOwn.gpuModel to what they have, or select other nodes")
        if pool.dedicated_to:
            dedicated = f"{labels.DEDICATED_TAINT_KEY}={pool.name}:NoSchedule"
            open_nodes = sorted(node.name for node in found if dedicated not in node.taints)
            if open_nodes:
                raise ByoNodesError(
                    f"{PROJECT}:nodePools: pool {pool.name!r} is dedicated to {', '.join(pool.dedicated_to)} but "
                    f"nodes {', '.join(open_nodes)} lack its taint {dedicated}, so other tenants' pods could run "
                    f"there; taint them: kubectl taint nodes {' '.join(open_nodes)} {dedicated}")
        if len(found) != pool.replicas:
            warnings.append(f"pool {pool.name!r} declares {pool.replicas} nodes but {len(found)} match "
                            f"{selector(pool)}; quotas and policies count {pool.replicas}")
    return warnings


def _required_labels(pool: NodePoolConfig) -> list[tuple[str, str, str]]:
    """(label, value, why) the pool's nodes must carry: the device-plugin config of a pool that shares its GPUs, the
    layout of one that slices them (which NVIDIA's MIG manager applies)."""
    required = []
    if pool.time_slicing_replicas:
        required.append((labels.DEVICE_PLUGIN_CONFIG_LABEL, pool.name,
                         "shares GPUs (timeSlicingReplicas), which its nodes' device-plugin config must say,"))
    layout = pool.partitioning.mig_layout
    if layout:
        required.append((labels.MIG_CONFIG_LABEL, layout,
                         f"slices its GPUs by MIG layout {layout}, which the MIG manager applies by label,"))
    return required


def _stale_labels(pool: NodePoolConfig) -> list[tuple[str, tuple[str, ...], str, str]]:
    """(label, the values a node may carry besides none, the kubectl label argument that fixes it, why): a node of a
    pool without a layout carries none or `all-disabled` (MIG off, which the MIG manager then applies); a node of a
    pool without sharing selects no device-plugin config but its pool's own (whole GPUs)."""
    stale = []
    if not pool.partitioning.mig_layout:
        stale.append((labels.MIG_CONFIG_LABEL, (MIG_DISABLED,), f"--overwrite {labels.MIG_CONFIG_LABEL}={MIG_DISABLED}",
                      "has no MIG layout (whole GPUs or shares),"))
    if not pool.time_slicing_replicas:
        stale.append((labels.DEVICE_PLUGIN_CONFIG_LABEL, (pool.name,), f"{labels.DEVICE_PLUGIN_CONFIG_LABEL}-",
                      "does not share its GPUs,"))
    return stale


def _same_gpu(product: str | None, model: str) -> bool:
    """Whether GPU feature discovery's product label names the pool's GPU: none yet (GFD has not run), the model, or
    the model with GFD's suffixes (k8s-device-plugin v0.20.0 internal/lm/resource.go getProductName: `-SHARED` for
    a shared GPU not renamed; mig-strategy.go: `-MIG-...`)."""
    return product is None or product == model or product.startswith(f"{model}-")


def found_value(nodes: Sequence[LiveNode], name: str, key: str) -> str:
    """A node's value of a label, for a message."""
    return next(node.labels.get(key, "") for node in nodes if node.name == name)


def selector(pool: NodePoolConfig) -> str:
    """The pool's node selector as a label selector."""
    return ",".join(f"{key}={value}" for key, value in sorted(pool.bring_your_own.node_selector.items()))


def _live(node: Any, server: str) -> LiveNode:
    """A node of the list as the check reads it; ByoNodesError for one that is not a v1 Node."""
    try:
        metadata, taints = node["metadata"], (node.get("spec") or {}).get("taints") or []
        node_labels = metadata.get("labels") or {}
        if not isinstance(metadata["name"], str) or not all(isinstance(v, str) for v in node_labels.values()):
            raise TypeError
        return LiveNode(metadata["name"], dict(node_labels), frozenset(
            f"{taint['key']}{'=' + taint['value'] if taint.get('value') else ''}:{taint['effect']}" for taint in taints))
    except (AttributeError, KeyError, TypeError):
        raise ByoNodesError(f"the API server at {server} answered a bring-your-own pool's node list with an item that "
                            "is not a v1 Node; check that the kubeconfig's server URL points at the Kubernetes API")
