"""GpuPlatform: the six components composed into one dependency graph (DESIGN.md's state machine)."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.admission import TenantAdmission, TenantAdmissionArgs
from components.device_plugin import DevicePluginStack, DevicePluginStackArgs
from components.driver import DriverStack, DriverStackArgs
from components.manifests import metadata, privileged_scc_binding
from components.monitoring import MonitoringStack, MonitoringStackArgs
from components.nfd import NfdStack, NfdStackArgs
from components.node_pool import GpuNodePool, GpuNodePoolArgs
from components.tenant_quota import TenantQuota, TenantQuotaArgs
from stacks.config import StackConfig
from stacks.inventory import KernelInventory, KernelTarget

PULL_SECRET = "nvidia-registry"
# Service accounts of the privileged node agents; on OpenShift they need the privileged SCC.
PRIVILEGED_AGENTS = ["nvidia-driver", "nvidia-container-toolkit", "nvidia-device-plugin",
                     "nvidia-gpu-feature-discovery", "nvidia-dcgm-exporter"]


class GpuPlatform(pulumi.ComponentResource):
    """NFD -> drivers (one per kernel) -> pools, validations -> toolkit and device plugin -> monitoring; tenants."""

    def __init__(self, name: str, config: StackConfig, inventory: KernelInventory,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:GpuPlatform", name, None, opts)
        images = config.images
        openshift = config.cluster.flavor == "openshift"
        system = self._system_namespace(openshift)
        in_system = pulumi.ResourceOptions(parent=self, depends_on=[system])
        pull_secret = self._pull_secret(config, in_system)

        nfd = NfdStack("nfd", NfdStackArgs(image=images.nfd, openshift=openshift), pulumi.ResourceOptions(parent=self))
        driver = DriverStack("driver", DriverStackArgs(
            inventory=inventory, repository=config.driver.repository, branch=config.driver.branch,
            version=config.driver.version, validator_image=images.validator, pull_secret=pull_secret,
        ), pulumi.ResourceOptions(parent=self, depends_on=[system, nfd]))

        self.pools = {
            pool.name: GpuNodePool(f"pool-{pool.name}", GpuNodePoolArgs(pool=pool, cluster=config.cluster),
                                   pulumi.ResourceOptions(parent=self, depends_on=[
                                       driver.daemonsets[KernelTarget(pool.os, pool.kernel)]]))
            for pool in config.node_pools
        }
        device_plugin = DevicePluginStack("device-plugin", DevicePluginStackArgs(
            toolkit_image=images.toolkit, device_plugin_image=images.device_plugin,
            validator_image=images.validator, cuda_sample_image=images.cuda_sample,
            container_runtime="crio" if openshift else "containerd",
            time_slicing_replicas=config.device_plugin.time_slicing_replicas,
            await_validation=any(inventory.nodes.values()),
        ), pulumi.ResourceOptions(parent=self, depends_on=[system, *driver.validations.values()]))
        MonitoringStack("monitoring", MonitoringStackArgs(dcgm_exporter_image=images.dcgm_exporter),
                        pulumi.ResourceOptions(parent=self, depends_on=[system, device_plugin.validation]))

        priority_classes = self._priority_classes()
        # Bound before any tenant namespace exists, so no tenant pod is ever admitted unchecked.
        admission = TenantAdmission("tenant-admission", TenantAdmissionArgs(), pulumi.ResourceOptions(parent=self))
        self.tenants = {
            tenant.name: TenantQuota(f"tenant-{tenant.name}", TenantQuotaArgs(
                name=tenant.name, gpus=tenant.gpus, priority_class=tenant.priority_class, group=tenant.rbac_group,
                cpu=tenant.cpu, memory=tenant.memory, pods=tenant.pods, scrapers=config.cluster.scrapers,
                protect=not tenant.retired,
            ), pulumi.ResourceOptions(parent=self, depends_on=[*priority_classes, admission]))
            for tenant in config.tenants
        }
        if openshift:
            self._privileged_scc(in_system)

        self.outputs = {
            "cluster": config.cluster.name,
            "kubernetesVersion": config.cluster.kubernetes_version,
            "capacity": {pool.name: pool.gpu_capacity for pool in config.node_pools},
            "totalGpus": config.gpu_capacity,
            "kernels": [f"{target.os}/{target.kernel}" for target in inventory.targets],
            "driverImages": driver.images,
            "tenants": {tenant.name: {"gpus": tenant.gpus, "priorityClass": tenant.priority_class}
                        for tenant in config.tenants},
        }
        self.register_outputs(self.outputs)

    def _system_namespace(self, openshift: bool) -> k8s.core.v1.Namespace:
        ns_labels = {"pod-security.kubernetes.io/enforce": "privileged"}
        if openshift:
            ns_labels["openshift.io/cluster-monitoring"] = "true"
        return k8s.core.v1.Namespace("gpu-system", metadata=metadata(labels.GPU_SYSTEM_NAMESPACE,
                                                                     extra_labels=ns_labels),
                                     opts=pulumi.ResourceOptions(parent=self))

    def _pull_secret(self, config: StackConfig, opts: pulumi.ResourceOptions) -> str | None:
        if config.registry_pull_secret is None:
            return None
        k8s.core.v1.Secret(
            "registry-pull-secret", metadata=metadata(PULL_SECRET, labels.GPU_SYSTEM_NAMESPACE),
            type="kubernetes.io/dockerconfigjson",
            string_data={".dockerconfigjson": pulumi.Output.secret(config.registry_pull_secret.get_secret_value())},
            opts=opts)
        return PULL_SECRET

    def _priority_classes(self) -> list[k8s.scheduling.v1.PriorityClass]:
        # The API server refuses a changed `value`, and pulumi-kubernetes would try it in place: replace instead.
        child = pulumi.ResourceOptions(parent=self, replace_on_changes=["value"], delete_before_replace=True)
        return [
            k8s.scheduling.v1.PriorityClass(
                "priority-high", metadata=metadata(labels.HIGH_PRIORITY_CLASS), value=100000,
                preemption_policy="PreemptLowerPriority",
                description="GPU jobs that may preempt gpu-low jobs (training with deadlines, serving).", opts=child),
            k8s.scheduling.v1.PriorityClass(
                "priority-low", metadata=metadata(labels.LOW_PRIORITY_CLASS), value=1000, preemption_policy="Never",
                global_default=False,
                description="Best-effort GPU jobs: never preempt others, first to be preempted.", opts=child),
        ]

    def _privileged_scc(self, opts: pulumi.ResourceOptions) -> None:
        privileged_scc_binding("privileged-node-agents", labels.GPU_SYSTEM_NAMESPACE, PRIVILEGED_AGENTS, opts)
