"""OpenShift: a pool as a MachineSet of the Machine API, scaled by a MachineAutoscaler and the ClusterAutoscaler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.machine_labels import DRAIN_TIMEOUT_SECONDS, RECUT_TIMEOUT_SECONDS, machine_labels
from components.manifests import metadata
from components.placements.base import GpuNodePoolArgs
from fleet.partitioning import MIG_DISABLED, layouts_for

MACHINE_API_NAMESPACE = "openshift-machine-api"
CAPACITY_LABELS = "capacity.cluster-autoscaler.kubernetes.io/labels"
# The MachineSet controller (machine-api-provider-aws) writes a MachineSet's vCPU, memory and GPU annotations from
# its instance type: the program sets them too (scale from zero before the controller runs, and the capacity
# policy reads them), and leaves them to the controller afterwards.
CONTROLLER_ANNOTATIONS = [f'metadata.annotations["{key}"]' for key in labels.MACHINESET_CAPACITY_ANNOTATIONS.values()]
MACHINESET_ROLL = ("template changes reach new machines only; kernels roll with the cluster release through the "
                   "Machine Config Operator")
# cluster-autoscaler-operator pkg/operator/config.go DefaultClusterAutoscalerName: the operator deploys an
# autoscaler only for the ClusterAutoscaler of this name, and without one a MachineAutoscaler does nothing.
CLUSTER_AUTOSCALER_NAME = "default"


@dataclass(frozen=True)
class MachineSetPlacement:
    """OpenShift: where the MachineSet's machines go (the infrastructure name prefixes the installer's AWS names)."""

    infrastructure_id: str
    machine_set: str
    region: str
    zone: str
    cli_image: str = ""  # `oc`, for the Job that brings a partitioning change to the running machines

    def declared(self, pool: GpuNodePoolArgs) -> dict[str, Any]:
        return {}

    def node_selector(self, pool: GpuNodePoolArgs) -> dict[str, str]:
        return {labels.POOL_LABEL: pool.name}

    def roll(self, pool: GpuNodePoolArgs) -> dict[str, object]:
        return {"method": "machineset", "note": MACHINESET_ROLL, "drainTimeoutSeconds": DRAIN_TIMEOUT_SECONDS,
                "recutTimeoutSeconds": RECUT_TIMEOUT_SECONDS}

    @staticmethod
    def partition_labels(pool: GpuNodePoolArgs) -> dict[str, str]:
        """The pool's MIG layout label, and on MIG-capable GPUs without one `all-disabled`: the machine API never
        removes a node label, so a layout that goes must be a label that says so."""
        if pool.partition_labels or not layouts_for(pool.instance.gpu_model):
            return pool.partition_labels
        return {labels.MIG_CONFIG_LABEL: MIG_DISABLED}

    def provision(self, pool: GpuNodePoolArgs, name: str, node_labels: dict[str, str],
                  opts: pulumi.ResourceOptions) -> None:
        infra, zone, machine_set = self.infrastructure_id, self.zone, self.machine_set
        partition = self.partition_labels(pool)
        node_labels = {**node_labels, **partition}
        selector = {"machine.openshift.io/cluster-api-cluster": infra,
                    "machine.openshift.io/cluster-api-machineset": machine_set}
        instance = pool.instance
        annotations = {
            labels.MACHINESET_CAPACITY_ANNOTATIONS["cpu"]: str(instance.vcpus),
            labels.MACHINESET_CAPACITY_ANNOTATIONS["memory"]: str(instance.memory_mib),
            labels.MACHINESET_CAPACITY_ANNOTATIONS["gpu"]: str(instance.gpus),
            # The MachineSet controller (machine-api-provider-aws) merges kubernetes.io/arch into this list; holding it
            # already (every catalog type is x86_64), the merge changes nothing and `pulumi up` sees no drift.
            CAPACITY_LABELS: ",".join(f"{k}={v}" for k, v in {**node_labels, "kubernetes.io/arch": "amd64"}.items()),
            # `pulumi up` waits neither for machines (capacity may be unavailable) nor, on delete, for their drain.
            labels.SKIP_AWAIT: "true",
            labels.DELETION_PROPAGATION: "background",
            labels.CONFIGURED_NODES: str(pool.replicas),
        }
        machine_set_resource = k8s.apiextensions.CustomResource(
            name,
            api_version="machine.openshift.io/v1beta1",
            kind="MachineSet",
            metadata={**metadata(machine_set, MACHINE_API_NAMESPACE, extra_labels=selector, annotations=annotations)},
            spec={
                "replicas": pool.replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**selector, "machine.openshift.io/cluster-api-machine-role": "worker",
                                            "machine.openshift.io/cluster-api-machine-type": "worker"}},
                    "spec": {
                        "metadata": {"labels": {**node_labels, "node-role.kubernetes.io/gpu": "",
                                                # a tuned pool's role, which its MachineConfigPool selects
                                                **({pool.profile.node_role_label: ""} if pool.profile else {})}},
                        "taints": pool.taints,
                        "providerSpec": {"value": {
                            "apiVersion": "machine.openshift.io/v1beta1",
                            "kind": "AWSMachineProviderConfig",
                            "ami": {"id": pool.image},
                            "instanceType": pool.instance_type,
                            "blockDevices": [{"ebs": {"volumeSize": pool.root_volume_gib, "volumeType": "gp3",
                                                      "encrypted": True}}],
                            "credentialsSecret": {"name": "aws-cloud-credentials"},
                            "iamInstanceProfile": {"id": f"{infra}-worker-profile"},
                            # IMDSv2 only (EC2 HttpTokens=required); EC2's default hop limit of 1 keeps pods out.
                            "metadataServiceOptions": {"authentication": "Required"},
                            "placement": {"availabilityZone": zone, "region": self.region},
                            "securityGroups": [{"filters": [{"name": "tag:Name", "values": [f"{infra}-node"]}]}],
                            "subnet": {"filters": [{"name": "tag:Name",
                                                    "values": [f"{infra}-subnet-private-{zone}"]}]},
                            "tags": [{"name": f"kubernetes.io/cluster/{infra}", "value": "owned"}],
                            "userDataSecret": {"name": "worker-user-data"},
                        }},
                    },
                },
            },
            # `replicas` is the size the MachineSet is created with; the MachineAutoscaler's cluster autoscaler
            # moves it between the bounds afterwards, and `pulumi up` does not set it back.
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                ignore_changes=[*(["spec.replicas"] if pool.autoscales else []), *CONTROLLER_ANNOTATIONS])),
        )
        if partition or pool.dedicated:
            # The MIG layout and the dedicated taint reach the running machines too (the template only new ones):
            # node by node, each drained before the MIG manager re-cuts it (components/machine_labels.py).
            machine_labels(f"{name}-partition-labels", machine_set, partition, pool.taints,
                           max(pool.max_replicas, pool.replicas), self.cli_image,
                           pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                               depends_on=[machine_set_resource], protect=False)))
        if pool.max_replicas < 1:
            return  # a parked pool has nothing to scale, and a MachineAutoscaler's maxReplicas must be at least 1
        k8s.apiextensions.CustomResource(
            f"{name}-autoscaler",
            api_version="autoscaling.openshift.io/v1beta1",
            kind="MachineAutoscaler",
            metadata=metadata(machine_set, MACHINE_API_NAMESPACE),
            spec={
                "minReplicas": pool.min_replicas,
                "maxReplicas": pool.max_replicas,
                "scaleTargetRef": {"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                                   "name": machine_set},
            },
            opts=opts,
        )


def cluster_autoscaler(name: str, pools: list[GpuNodePoolArgs],
                       opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource | None:
    """OpenShift: the cluster's ClusterAutoscaler when a pool autoscales, capping GPUs per type at the maxima of the
    pools of whole GPUs (pools of shares or MIG slices are bounded by their MachineAutoscaler's maximum).

    `resourceLimits.gpus[].type` is matched against the nodes' `cluster-api/accelerator` label
    (pkg/apis/autoscaling/v1/clusterautoscaler_types.go GPULimit), which every MachineSet sets to its GPU model.
    The resource is cluster-wide and a singleton: on a cluster that already has one, import it first.
    """
    if not any(pool.autoscales for pool in pools):
        return None
    gpus: dict[str, int] = {}
    for pool in pools:
        if not pool.whole:
            continue  # not a GPU node to the autoscaler (its nodes carry no GPU label, see GpuNodePoolArgs)
        model = pool.instance.gpu_model
        # The autoscaler counts a node's nvidia.com/gpu, which a MachineSet's node template takes from its GPU
        # annotation: the physical GPUs, whatever the pool's partitioning (shares and MIG slices are advertised under
        # other names, so they neither raise nor lower the count).
        gpus[model] = gpus.get(model, 0) + pool.max_replicas * pool.instance.gpus
    return k8s.apiextensions.CustomResource(
        name,
        api_version="autoscaling.openshift.io/v1",
        kind="ClusterAutoscaler",
        metadata=metadata(CLUSTER_AUTOSCALER_NAME),
        spec={
            "resourceLimits": {"gpus": [{"type": model, "min": 0, "max": total}
                                        for model, total in sorted(gpus.items()) if total > 0]},
            # GPU nodes run a dozen operator DaemonSets: without this they never look idle enough to go.
            "ignoreDaemonsetsUtilization": True,
            "scaleDown": {"enabled": True, "delayAfterAdd": "10m", "unneededTime": "10m",
                          "utilizationThreshold": "0.5"},
        },
        opts=opts,
    )
