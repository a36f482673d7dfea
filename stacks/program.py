"""The Pulumi program: the same code path under `pulumi up` and under gpuctl's mock runtime."""

from __future__ import annotations

from collections.abc import Iterable

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from fleet.kernels import KernelInventory, KernelTarget, ObservedNode
from stacks.config import PROJECT, ClusterConfig, ConfigError, StackConfig, load_stack_config
from stacks.gpu_platform import GpuPlatform
from stacks.part import Selection
from stacks.preflight import check_driver_images
from stacks.registration import lean_registrations, unread_outputs
from stacks.settle import settled


def build(config: StackConfig, observed: Iterable[ObservedNode] | None = None, *, discover: bool = False,
          preflight: bool = False, previous: Iterable[KernelTarget] = (), part: Selection | None = None) -> GpuPlatform:
    """Compose the platform for a validated config and the nodes observed on the cluster, and export outputs.

    Args:
        config: the validated stack config.
        observed: GPU nodes already read (a `kubectl get nodes -o json` file); None when not known.
        discover: read the cluster live when the stack enables discovery: check the CRDs the stack needs and does
            not install (stacks/preconditions.py), read the nodes when none were given, and check the nodes of
            bring-your-own pools (stacks/byo_nodes.py).
        preflight: check every driver image exists before any resource is registered.
        previous: kernels that had a driver before this change; kept while no node inventory says otherwise.
        part: register only these tenants (and everything else); None, under the Pulumi CLI: all.
    """
    _refuse_provider_keys(config.cluster)
    if discover and config.cluster.discovery.enabled:
        # The Kubernetes client loads only here: an offline render never reads the cluster (9 MB less).
        from stacks.byo_nodes import check_byo_nodes, read_byo_nodes
        from stacks.deadline import Deadline
        from stacks.discovery import read_live_nodes
        from stacks.preconditions import check_crds, required_crds

        # What the stack needs and does not install is checked before anything is registered; the CRD check and the
        # node reads share one deadline, so discovery as a whole takes at most timeoutSeconds.
        deadline = Deadline(config.cluster.discovery.timeout_seconds)
        check_crds(config.cluster.discovery, required_crds(config), deadline)
        if observed is None:
            observed = read_live_nodes(config.cluster.discovery, deadline)
        if byo := [pool for pool in config.node_pools if pool.bring_your_own is not None]:
            for warning in check_byo_nodes(byo, read_byo_nodes(config.cluster.discovery, byo, deadline)):
                pulumi.log.warn(warning)
    inventory = KernelInventory.build(config.declared_kernels, observed, previous)
    for target in sorted(set(inventory.nodes) - config.declared_kernels):
        pulumi.log.warn(f"GPU nodes run kernel {target.kernel} ({target.os}), which the stack does not declare: "
                        f"{', '.join(inventory.running(target))}; their driver is kept for them, but declare the "
                        "kernel (cluster.kernel on OpenShift, a pool's kernel on Kubernetes) so the preview shows it")
    if preflight:
        check_driver_images({target: config.driver_release.image(target) for target in inventory.targets})
    platform = GpuPlatform("gpu-platform", config, inventory,
                           pulumi.ResourceOptions(providers=providers(config)), part)
    for key, value in platform.outputs.items():
        pulumi.export(key, value)
    return platform


# Provider settings the program sets itself from gpu-platform:cluster; the same keys in the provider's own namespace
# only configure default providers, which no resource of this program uses.
PROVIDER_KEYS = {("aws", "region"): "region", ("kubernetes", "kubeconfig"): "kubeconfig",
                 ("kubernetes", "context"): "context"}
CLUSTER_TAG = "gpu-platform.io/cluster"
STACK_TAG = "gpu-platform.io/stack"


def providers(config: StackConfig) -> list[pulumi.ProviderResource]:
    """The explicit providers every resource of the program uses (children inherit them).

    AWS, only when the stack provisions Auto Scaling Group pools (OpenShift pools are MachineSets, Karpenter pools
    are NodePools, bring-your-own pools are provisioned elsewhere, so those stacks need no AWS credentials): the cluster's region, and tags
    naming the cluster and stack on every AWS resource that takes tags (the provider's `default_tags`; Auto
    Scaling Groups carry their own). Kubernetes: the cluster's kubeconfig and
    context (the ones live discovery reads; $KUBECONFIG or ~/.kube/config and its current context when unset);
    `cluster_identifier` is the cluster's name, so a new kubeconfig path or context for the same cluster updates
    the provider instead of replacing every object (pulumi-kubernetes DiffConfig); the kubeconfig is a secret.
    """
    cluster = config.cluster
    aws_provider = [aws.Provider("aws", region=cluster.region, default_tags=aws.ProviderDefaultTagsArgs(
        tags={CLUSTER_TAG: cluster.name, STACK_TAG: pulumi.get_stack()}))] if config.aws_pools else []
    k8s_provider = k8s.Provider(
        "kubernetes", cluster_identifier=cluster.name, context=cluster.context,
        kubeconfig=pulumi.Output.secret(cluster.kubeconfig) if cluster.kubeconfig else None)
    return [*aws_provider, k8s_provider]


def _refuse_provider_keys(cluster: ClusterConfig) -> None:
    """`aws:region`, `kubernetes:kubeconfig` or `kubernetes:context` in the stack file would be ignored; one that
    names another value than the cluster's is an error rather than a surprise."""
    for (namespace, key), field in PROVIDER_KEYS.items():
        value = pulumi.Config(namespace).get(key)
        if value is not None and value != getattr(cluster, field):
            raise ConfigError(f"{namespace}:{key}: the program's {namespace} provider takes it from "
                              f"{PROJECT}:cluster.{field}, not from {namespace}:{key}; move the value there and "
                              f"remove {namespace}:{key}")


def run() -> None:
    """Entry point under the Pulumi CLI: config, discovery and preflight errors become one-line run errors."""
    lean_registrations()
    unread_outputs()
    try:
        config = load_stack_config()
        if not config.cluster.discovery.enabled:
            pulumi.log.warn("live discovery is off (gpu-platform:cluster.discovery.enabled: false): a driver whose "
                            "kernel leaves the stack config is deleted even if nodes still run it, and the CRDs the "
                            "stack needs but does not install are not checked")
        build(config, discover=True, preflight=config.preflight)
        pulumi.run(settled)  # awaited once the program has run, before the SDK's own final wait
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
