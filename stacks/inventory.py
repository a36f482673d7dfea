"""Node inventories: the GPU nodes of a `kubectl get nodes -o json` answer, validated, with the kernels they run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from components import labels
from fleet.catalog import NODE_OSES, node_os_of
from fleet.kernels import KernelTarget, ObservedNode
from stacks.config import ConfigError


_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_NODE_LIST_FIX = "produce it with `kubectl get nodes -o json`"


def _shown(kind: object) -> str:
    """A kind as the file names it, quoted (control characters escaped) unless it is a plain name."""
    return kind if isinstance(kind, str) and kind.isidentifier() else repr(kind)


def parse_node_list(document: Any, source: str) -> list[ObservedNode]:
    """GPU nodes of a `kubectl get nodes -o json` answer (a v1 NodeList or List of Nodes), from their NFD labels."""
    if (not isinstance(document, dict) or document.get("apiVersion") != "v1"
            or document.get("kind") not in ("NodeList", "List") or not isinstance(document.get("items"), list)):
        kind = document.get("kind") if isinstance(document, dict) else None
        found = f"a {_shown(kind)}, " if isinstance(kind, str) and kind not in ("NodeList", "List") else ""
        raise ConfigError(f"{source}: not a node list ({found}expected a v1 NodeList); {_NODE_LIST_FIX}")
    observed = []
    seen: dict[str, int] = {}
    for index, item in enumerate(document["items"]):
        if isinstance(item, dict) and item.get("kind", "Node") != "Node":
            raise ConfigError(f"{source}: items[{index}] is a {_shown(item['kind'])}, not a Kubernetes Node; {_NODE_LIST_FIX}")
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise ConfigError(f"{source}: items[{index}] has no metadata.name; not a Kubernetes node")
        if meta["name"] in seen:  # two answers merged, or an edited file: which node runs which kernel is unclear
            raise ConfigError(f"{source}: items[{index}] and items[{seen[meta['name']]}] are both node "
                              f"{_shown(meta['name'])}; a node list names each node once, so pass one "
                              "`kubectl get nodes -o json` answer")
        seen[meta["name"]] = index
        node_labels = meta.get("labels") or {}
        if not isinstance(node_labels, dict):
            raise ConfigError(f"{source}: items[{index}].metadata.labels must be a mapping; {_NODE_LIST_FIX}")
        for key, value in node_labels.items():
            if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
                raise ConfigError(f"{source}: node {meta['name']}: label {key} has {value!r}, not a valid "
                                  f"Kubernetes label value; {_NODE_LIST_FIX}")
        if node_labels.get(labels.NVIDIA_PCI_LABEL) != "true":
            continue
        observed.append(_observed_node(meta["name"], node_labels, source))
    return observed


def node_list(observed: list[ObservedNode]) -> dict[str, Any]:
    """GPU nodes as a v1 NodeList of what parse_node_list reads (names and NFD labels), in name order: the same
    nodes give the same document, whatever else the API server answered with."""
    items = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": {
        labels.NVIDIA_PCI_LABEL: "true", labels.KERNEL_LABEL: node.target.kernel,
        **NODE_OSES[node.target.os].node_labels()}}}
             for node in sorted(observed, key=lambda node: node.name)]
    return {"apiVersion": "v1", "kind": "NodeList", "items": items}


def _observed_node(name: str, node_labels: Mapping[str, str], source: str) -> ObservedNode:
    kernel = node_labels.get(labels.KERNEL_LABEL)
    # VERSION_ID as NFD sets it; a node list written by node_list carries only the major where the OS is keyed by it.
    release = (node_labels.get(labels.OS_ID_LABEL),
               node_labels.get(labels.OS_VERSION_LABEL) or node_labels.get(labels.OS_VERSION_MAJOR_LABEL))
    if not kernel:
        raise ConfigError(f"{source}: GPU node {name} has no {labels.KERNEL_LABEL} label; is NFD running on it?")
    os_name = node_os_of(*release)
    if os_name is None:
        raise ConfigError(
            f"{source}: GPU node {name} runs {release[0]} {release[1]}, which has no driver images here; "
            f"supported: {', '.join(NODE_OSES)}"
        )
    if not NODE_OSES[os_name].is_kernel(kernel):
        raise ConfigError(f"{source}: GPU node {name}: kernel {kernel!r} is not a {os_name} kernel; "
                          f"check its {labels.KERNEL_LABEL} label")
    return ObservedNode(name, KernelTarget(os_name, kernel))
