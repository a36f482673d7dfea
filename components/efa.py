"""EfaFabric: Elastic Fabric Adapter for GPU pools that declare `fabric: efa` (Kubernetes on AWS).

Per pool: a cluster placement group (nodes on one low-latency network segment), EFA interfaces on the launch template
(`efa_network_interfaces`), and the `vpc.amazonaws.com/efa` resource in the autoscaler's node template. Once: AWS's
EFA device plugin, which advertises each node's EFA devices as `vpc.amazonaws.com/efa`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components import labels
from components.manifests import child_options, helm_release

EFA_RESOURCE = "vpc.amazonaws.com/efa"
EFA_NAMESPACE = "kube-system"
# aws/eks-charts stable/aws-efa-k8s-device-plugin (Chart.yaml version v0.5.20, appVersion v0.5.13). Its values read
# here: `tolerations` (added to the DaemonSet's own CriticalAddonsOnly toleration) and `nodeSelector`; the chart
# keeps its pods to EFA-capable instance types itself (`supportedInstanceLabels`, a node affinity).
EFA_DEVICE_PLUGIN_CHART = labels.HelmChart("https://aws.github.io/eks-charts", "aws-efa-k8s-device-plugin", "v0.5.20")


def efa_network_interfaces(count: int, security_group_ids: tuple[str, ...]) -> list[dict[str, object]]:
    """Launch template interfaces for `count` EFAs, as EC2 documents for instances with several network cards.

    The primary interface is an EFA on network card 0, device 0; each further one takes the next network card at
    device index 1. The subnet comes from the Auto Scaling Group; the security groups move onto the interfaces
    (EC2 refuses them beside network interfaces).
    """
    return [{"device_index": 0 if card == 0 else 1, "network_card_index": card, "interface_type": "efa",
             "security_groups": list(security_group_ids), "delete_on_termination": "true"}
            for card in range(count)]


def efa_autoscaler_tags(count: int) -> dict[str, str]:
    """The cluster autoscaler's node template resource for EFA devices, so it scales EFA pools from zero."""
    return {labels.CA_RESOURCE_TAG.format(resource=EFA_RESOURCE): str(count)} if count else {}


@dataclass(frozen=True)
class EfaFabricArgs:
    """The cluster and the pools with EFA (by pool name)."""

    cluster: str
    pools: tuple[str, ...]
    chart_mirror: str | None = None  # charts.mirror: where the pinned chart is pulled from instead


class EfaFabric(pulumi.ComponentResource):
    """A cluster placement group per EFA pool, and the EFA device plugin."""

    placement_groups: dict[str, aws.ec2.PlacementGroup]

    def __init__(self, name: str, args: EfaFabricArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:EfaFabric", name, None, opts)
        child = child_options(self, opts)
        self.placement_groups = {
            pool: aws.ec2.PlacementGroup(f"{name}-{pool}-placement", name=f"{args.cluster}-gpu-{pool}",
                                         strategy="cluster", opts=child)
            for pool in args.pools
        }
        helm_release(f"{name}-device-plugin", EFA_DEVICE_PLUGIN_CHART, EFA_NAMESPACE, {
            "tolerations": [dict(labels.GPU_TOLERATION)],
            "nodeSelector": dict(labels.GPU_NODE_SELECTOR),
        }, child, args.chart_mirror)
        self.register_outputs({"placementGroups": {pool: group.name for pool, group in self.placement_groups.items()}})
