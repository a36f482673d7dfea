"""The kernel inventory: kernels the pools declare plus kernels observed on the cluster's GPU nodes."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from components import labels
from stacks.catalog import NODE_OSES, OS_BY_RELEASE
from stacks.config import ConfigError, StackConfig


@dataclass(frozen=True, order=True)
class KernelTarget:
    """One (os, kernel) pair: what a driver image is built for."""

    os: str
    kernel: str

    @property
    def slug(self) -> str:
        """A DNS-1123 label fragment, stable for the same pair, short enough for derived names."""
        readable = re.sub(r"[^a-z0-9]+", "-", f"{self.os}-{self.kernel}".lower()).strip("-")
        if len(readable) <= 40:
            return readable
        digest = hashlib.sha256(f"{self.os}/{self.kernel}".encode()).hexdigest()[:8]
        return f"{readable[:31].rstrip('-')}-{digest}"

    def driver_image(self, repository: str, branch: str) -> str:
        """NVIDIA's precompiled driver tag form: <repository>/driver:<branch>-<kernel>-<os>."""
        return f"{repository}/driver:{branch}-{self.kernel}-{NODE_OSES[self.os].tag_suffix}"


@dataclass(frozen=True)
class ObservedNode:
    """A GPU node as NFD labelled it."""

    name: str
    target: KernelTarget


@dataclass(frozen=True)
class KernelInventory:
    """Every (os, kernel) that needs a driver, and which live nodes run each."""

    targets: tuple[KernelTarget, ...]
    nodes: Mapping[KernelTarget, tuple[str, ...]] = field(default_factory=dict)
    observed: bool = False

    @classmethod
    def build(cls, config: StackConfig, observed: Iterable[ObservedNode] | None = None) -> KernelInventory:
        nodes: dict[KernelTarget, list[str]] = defaultdict(list)
        for node in observed or ():
            nodes[node.target].append(node.name)
        declared = {KernelTarget(pool.os, pool.kernel) for pool in config.node_pools}
        targets = tuple(sorted(declared | set(nodes)))
        return cls(targets, {target: tuple(sorted(names)) for target, names in nodes.items()}, observed is not None)

    def running(self, target: KernelTarget) -> tuple[str, ...]:
        """Names of observed nodes that run this kernel (empty when none, or when nothing was observed)."""
        return self.nodes.get(target, ())


_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_NODE_LIST_FIX = "produce it with `kubectl get nodes -o json`"


def parse_node_list(document: Any, source: str) -> list[ObservedNode]:
    """GPU nodes of a `kubectl get nodes -o json` answer (a v1 NodeList or List of Nodes), from their NFD labels."""
    if (not isinstance(document, dict) or document.get("apiVersion") != "v1"
            or document.get("kind") not in ("NodeList", "List") or not isinstance(document.get("items"), list)):
        kind = document.get("kind") if isinstance(document, dict) else None
        found = f"a {kind}, " if isinstance(kind, str) and kind not in ("NodeList", "List") else ""
        raise ConfigError(f"{source}: not a node list ({found}expected a v1 NodeList); {_NODE_LIST_FIX}")
    observed = []
    for index, item in enumerate(document["items"]):
        if isinstance(item, dict) and item.get("kind", "Node") != "Node":
            raise ConfigError(f"{source}: items[{index}] is a {item['kind']}, not a Kubernetes Node; {_NODE_LIST_FIX}")
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise ConfigError(f"{source}: items[{index}] has no metadata.name; not a Kubernetes node")
        node_labels = meta.get("labels") or {}
        if not isinstance(node_labels, dict):
            raise ConfigError(f"{source}: items[{index}].metadata.labels must be a mapping; {_NODE_LIST_FIX}")
        for key, value in node_labels.items():
            if not isinstance(value, str) or not _LABEL_VALUE.match(value):
                raise ConfigError(f"{source}: node {meta['name']}: label {key} has {value!r}, not a valid "
                                  f"Kubernetes label value; {_NODE_LIST_FIX}")
        if node_labels.get(labels.NVIDIA_PCI_LABEL) != "true":
            continue
        observed.append(_observed_node(meta["name"], node_labels, source))
    return observed


def _observed_node(name: str, node_labels: Mapping[str, str], source: str) -> ObservedNode:
    kernel = node_labels.get(labels.KERNEL_LABEL)
    release = (node_labels.get(labels.OS_ID_LABEL), node_labels.get(labels.OS_VERSION_LABEL))
    if not kernel:
        raise ConfigError(f"{source}: GPU node {name} has no {labels.KERNEL_LABEL} label; is NFD running on it?")
    os_name = OS_BY_RELEASE.get(release)
    if os_name is None:
        raise ConfigError(
            f"{source}: GPU node {name} runs {release[0]} {release[1]}, which has no driver images here; "
            f"supported: {', '.join(NODE_OSES)}"
        )
    if not NODE_OSES[os_name].kernel_pattern.match(kernel):
        raise ConfigError(f"{source}: GPU node {name}: kernel {kernel!r} is not a {os_name} kernel; "
                          f"check its {labels.KERNEL_LABEL} label")
    return ObservedNode(name, KernelTarget(os_name, kernel))
