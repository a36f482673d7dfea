"""Kernels and their drivers: which (os, kernel) pairs need a driver, and which live nodes run each."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleet.catalog import NODE_OSES


@dataclass(frozen=True, order=True)
class KernelTarget:
    """One (os, kernel) pair: what a driver is built for, and what one NVIDIADriver selects."""

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

    @property
    def key(self) -> str:
        """`os/kernel`, as outputs and the preview name it."""
        return f"{self.os}/{self.kernel}"


@dataclass(frozen=True)
class DriverRelease:
    """The driver every NVIDIADriver runs: NVIDIA's driver image in `repository`, precompiled or built on the node."""

    repository: str
    branch: str
    version: str
    precompiled: bool

    def image(self, target: KernelTarget) -> str:
        """The exact reference the GPU Operator pulls for nodes of this target.

        The operator's rule: precompiled, `<repository>/driver:<branch>-<kernel>-<os tag>`; otherwise
        `<repository>/driver:<version>-<os tag>`, which the operator builds against the node's kernel (on OpenShift
        with the Driver Toolkit image of the node's RHCOS).
        """
        tag = NODE_OSES[target.os].tag_suffix
        if self.precompiled:
            return f"{self.repository}/driver:{self.branch}-{target.kernel}-{tag}"
        return f"{self.repository}/driver:{self.version}-{tag}"


@dataclass(frozen=True)
class ObservedNode:
    """A GPU node as NFD labelled it."""

    name: str
    target: KernelTarget


@dataclass(frozen=True)
class KernelInventory:
    """Every (os, kernel) that needs a driver: the declared ones, those live nodes run, and those kept for lack of
    evidence; and which live nodes run each."""

    targets: tuple[KernelTarget, ...]
    nodes: Mapping[KernelTarget, tuple[str, ...]] = field(default_factory=dict)
    observed: bool = False
    kept: tuple[KernelTarget, ...] = ()

    @classmethod
    def build(cls, declared: Iterable[KernelTarget], observed: Iterable[ObservedNode] | None = None,
              previous: Iterable[KernelTarget] = ()) -> KernelInventory:
        """Declared kernels, plus kernels nodes run; a previous kernel is kept unless an inventory shows no node on it.

        Args:
            declared: the kernels the stack config boots.
            observed: the cluster's GPU nodes; None when they were not read.
            previous: kernels that had a driver before this change (the base revision's).
        """
        nodes: dict[KernelTarget, list[str]] = defaultdict(list)
        for node in observed or ():
            nodes[node.target].append(node.name)
        declared = set(declared)
        kept = () if observed is not None else tuple(sorted(set(previous) - declared))
        targets = tuple(sorted(declared | set(nodes) | set(kept)))
        return cls(targets, {target: tuple(sorted(names)) for target, names in nodes.items()},
                   observed is not None, kept)

    def running(self, target: KernelTarget) -> tuple[str, ...]:
        """Names of observed nodes that run this kernel (empty when none, or when nothing was observed)."""
        return self.nodes.get(target, ())
