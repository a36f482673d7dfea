"""Bring-your-own: nodes that join the cluster by other means, selected by their labels; the stack provisions none of
them, declares their kernel's driver before they need it, and counts what they declare."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.placements.base import GpuNodePoolArgs

BRING_YOUR_OWN = "bringYourOwn"
BRING_YOUR_OWN_ROLL = ("nodes are provisioned outside this stack: it declares their kernel's driver before they need "
                       "it, and you roll them")


@dataclass(frozen=True)
class BringYourOwnPlacement:
    """Nodes selected by the labels `selector`: the stack provisions none of them."""

    selector: dict[str, str]

    def declared(self, pool: GpuNodePoolArgs) -> dict[str, Any]:
        """No resource says what the pool brings: the component itself carries it, as input and output, so the
        capacity policy counts it whichever of the two a runtime shows it."""
        return {BRING_YOUR_OWN: {"nodes": pool.replicas, "gpusPerNode": pool.instance.gpus,
                                 "advertisedPerNode": pool.advertised_per_node,
                                 "nodeSelector": dict(self.selector), "taints": pool.taints}}

    def node_selector(self, pool: GpuNodePoolArgs) -> dict[str, str]:
        return dict(self.selector)

    def roll(self, pool: GpuNodePoolArgs) -> dict[str, object]:
        return {"method": "bring-your-own", "note": BRING_YOUR_OWN_ROLL}

    def provision(self, pool: GpuNodePoolArgs, name: str, node_labels: dict[str, str],
                  opts: pulumi.ResourceOptions) -> None:
        """Nothing: the nodes are brought."""
