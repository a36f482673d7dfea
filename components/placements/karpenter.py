"""Kubernetes on AWS: a pool as a Karpenter NodePool (karpenter.sh/v1) and its EC2NodeClass (karpenter.k8s.aws/v1).

Karpenter launches nodes for pending pods, up to the NodePool's limits, and replaces them by drift when the
NodePool's template or the EC2NodeClass changes. Karpenter itself is the cluster's (installed with its controller's
IAM role and interruption queue, or EKS Auto Mode's): the stack declares its pools only, and live discovery checks
its CRDs (stacks/preconditions.py). Fields as Karpenter v1.15 reads them: sigs.k8s.io/karpenter v1.15.0
pkg/apis/v1/nodepool.go and aws/karpenter-provider-aws v1.15.x pkg/apis/v1/ec2nodeclass.go, whose CRDs are the
reference ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.driver import kernel_node_selector
from components.manifests import metadata
from components.placements.base import GpuNodePoolArgs, kernel_annotations

NODE_POOL_API = "karpenter.sh/v1"
NODE_CLASS_API = "karpenter.k8s.aws/v1"
# Well-known labels a NodePool's requirements constrain (sigs.k8s.io/karpenter pkg/apis/v1/labels.go:
# CapacityTypeLabelKey, and corev1's LabelInstanceTypeStable, LabelTopologyZone, LabelArchStable, LabelOSStable that
# Karpenter's WellKnownLabels list).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
# The scheduler's count of nodes against `limits.nodes`: every node of the pool is one (pkg/controllers/state/
# statenode.go Capacity, resources.Node), enforced before any instance type is chosen (provisioning/scheduling/
# scheduler.go, "node limits have been exhausted for nodepool").
NODES_LIMIT = "nodes"
DRIFT = "drift"
# A pod annotated so holds its node against every voluntary disruption, drift included (pkg/apis/v1/labels.go
# DoNotDisruptAnnotationKey; pkg/controllers/state/statenode.go, ValidateNodeDisruptable).
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


@dataclass(frozen=True)
class KarpenterPlacement:
    """Where Karpenter launches a pool's nodes, and how it may take them away.

    `consolidation`: WhenEmpty (the default here, Karpenter's is WhenEmptyOrUnderutilized) never moves a running
    pod to consolidate: a GPU node goes only once its jobs have ended. `budget`: NodeClaims of the pool that may be
    disrupting at once (Budget.Nodes), drift included. `expire_after`: Never, or how long a node lives.
    """

    node_role: str
    subnet_tags: dict[str, str]
    security_group_tags: dict[str, str]
    capacity_types: tuple[str, ...] = ("on-demand",)
    zones: tuple[str, ...] = ()
    consolidation: str = "WhenEmpty"
    consolidate_after: str = "10m"
    budget: str = "1"
    expire_after: str = "Never"

    def declared(self, pool: GpuNodePoolArgs) -> dict[str, Any]:
        return {}

    def node_selector(self, pool: GpuNodePoolArgs) -> dict[str, str]:
        return {labels.POOL_LABEL: pool.name}

    def roll(self, pool: GpuNodePoolArgs) -> dict[str, object]:
        return {"method": DRIFT, "budget": self.budget, "consolidationPolicy": self.consolidation,
                "expireAfter": self.expire_after, "limitNodes": pool.max_replicas,
                # what the preview compares: a node drifts on these only where it no longer satisfies them
                "requirements": {term["key"]: term["values"] for term in self.requirements(pool)}}

    def requirements(self, pool: GpuNodePoolArgs) -> list[dict[str, Any]]:
        """The NodePool's requirements: the pool's instance type, capacity types and (when given) zones."""
        return [
            {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [pool.instance_type]},
            {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": list(self.capacity_types)},
            *([{"key": ZONE_LABEL, "operator": "In", "values": list(self.zones)}] if self.zones else []),
        ]

    def limits(self, pool: GpuNodePoolArgs) -> dict[str, str]:
        """The pool's ceiling: its maximum nodes, and what they advertise per kind (the capacity policy counts the
        pool at this). Karpenter counts a node's capacity, its instance type's until the node reports its own
        (statenode.go Capacity), and refuses an instance type that would pass a limit (scheduler.go
        filterByRemainingResources)."""
        return {NODES_LIMIT: str(pool.max_replicas),
                **{kind: str(count * pool.max_replicas) for kind, count in pool.advertised_per_node.items()}}

    def template_labels(self, pool: GpuNodePoolArgs, node_labels: dict[str, str]) -> dict[str, str]:
        """What the pool's nodes register with: the pool's labels and the kernel and OS its image boots, under the
        NFD keys the kernel's NVIDIADriver selects (components/driver.py kernel_node_selector). The kernel is part of
        the NodePool's template, so an image and kernel change drifts the nodes through the NodePool too."""
        return {**node_labels, **kernel_node_selector(pool.kernel)}

    def provision(self, pool: GpuNodePoolArgs, name: str, node_labels: dict[str, str],
                  opts: pulumi.ResourceOptions) -> None:
        # `pulumi up` waits for neither object to report Ready (their controller is the cluster's Karpenter) nor,
        # on delete, for the nodes Karpenter drains.
        annotations = {**kernel_annotations(pool), labels.SKIP_AWAIT: "true",
                       labels.DELETION_PROPAGATION: "background"}
        node_class = k8s.apiextensions.CustomResource(
            f"{name}-node-class",
            api_version=NODE_CLASS_API,
            kind="EC2NodeClass",
            metadata=metadata(pool.name, annotations=annotations),
            spec={
                # AL2's user data runs /etc/eks/bootstrap.sh with the NodePool's taints and labels as kubelet flags,
                # so the nodes are tainted from their first boot; "AL2 userdata also works on Ubuntu"
                # (providers/amifamily/al2.go AL2.UserData, bootstrap/eksbootstrap.go, bootstrap.go
                # kubeletExtraArgs). An amiSelectorTerms without an alias needs amiFamily (the CRD's rule).
                "amiFamily": "AL2",
                # Pinned by ID: a new image is a reviewed change of this term, which drifts the pool's nodes.
                "amiSelectorTerms": [{"id": pool.image}],
                "role": self.node_role,
                "subnetSelectorTerms": [{"tags": dict(self.subnet_tags)}],
                "securityGroupSelectorTerms": [{"tags": dict(self.security_group_tags)}],
                # IMDSv2 only, its token answering one hop: pods behind the node's network namespace cannot take the
                # node role's credentials (MetadataOptions; the same as the Auto Scaling Group pools' template).
                "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                    "httpPutResponseHopLimit": 1, "httpTokens": "required"},
                # AL2's default root device is /dev/xvda (al2.go EphemeralBlockDevice); Ubuntu's AMIs boot from
                # /dev/sda1, as the Auto Scaling Group pools' template says.
                "blockDeviceMappings": [{"deviceName": "/dev/sda1", "rootVolume": True, "ebs": {
                    "volumeSize": f"{pool.root_volume_gib}Gi", "volumeType": "gp3", "encrypted": True,
                    "deleteOnTermination": True}}],
                "tags": {"Name": pool.name, **kernel_annotations(pool)},
            },
            opts=opts,
        )
        requirements = self.requirements(pool)
        k8s.apiextensions.CustomResource(
            name,
            api_version=NODE_POOL_API,
            kind="NodePool",
            metadata=metadata(pool.name, annotations={**annotations,
                                                      labels.CONFIGURED_NODES: str(pool.replicas)}),
            spec={
                "template": {
                    "metadata": {"labels": self.template_labels(pool, node_labels)},
                    "spec": {
                        "taints": pool.taints,
                        "requirements": requirements,
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                        "expireAfter": self.expire_after,
                    },
                },
                "disruption": {"consolidationPolicy": self.consolidation, "consolidateAfter": self.consolidate_after,
                               "budgets": [{"nodes": self.budget}]},
                "limits": self.limits(pool),
            },
            # The node class first, so a new pool's NodePool never names a class that is not there yet.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[node_class])),
        )
