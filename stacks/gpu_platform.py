"""GpuPlatform: the operators, the drivers per kernel, the pools and the tenants, composed into one graph."""

from __future__ import annotations

import dataclasses

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.admission import (CORDON_RULES, SPREAD_RULES, VALIDATIONS, VARIABLES, TenantAdmission,
                                  TenantAdmissionArgs,
                                  dedicated_validations, gpu_guard_args, node_share_validations)
from components.admission_gate import CURL_IMAGE, AdmissionGate, AdmissionGateArgs, tenant_probes
from components.cluster_policy import ClusterPolicyStack, ClusterPolicyStackArgs
from components.device_plugin import DevicePluginStack, DevicePluginStackArgs
from components.dra import DraStack, DraStackArgs
from components.dra_admission import DRA_POD_VALIDATIONS, DRA_POD_VARIABLES, DraAdmission, DraAdmissionArgs
from components.driver import DriverStack, DriverStackArgs
from components.efa import EfaFabric, EfaFabricArgs
from components.gpu_operator import GpuOperator, GpuOperatorArgs
from components.kueue import Kueue, KueueArgs, TenantQueue, TenantQueueArgs
from components.manifests import metadata
from components.mig_config import MigPartedConfig, MigPartedConfigArgs
from components.monitoring import MonitoringStack, MonitoringStackArgs
from components.nfd import NfdStack, NfdStackArgs
from components.node_drain import NodeDrain, NodeDrainArgs
from components.node_pool import GpuNodePool
from components.placements.auto_scaling_group import AutoScalingPlacement, InstanceRefresh, group_prefix
from components.placements.base import GpuNodePoolArgs
from components.placements.bring_your_own import BringYourOwnPlacement
from components.placements.karpenter import KarpenterPlacement
from components.placements.machine_set import MachineSetPlacement, cluster_autoscaler
from components.node_profile import NodeTuning
from components.tenant_network import TenantNetwork, network_admission_args
from components.tenant_objects import TenantObjects, TenantObjectsArgs
from components.tenant_quota import TenantQuota, TenantQuotaArgs, self_provisioning_off, tenant_role
from fleet.dra import OPERATOR_CLASSES, device_classes, tenant_devices
from fleet.kernels import KernelInventory
from stacks.allocation import device_shares, dra_pools
from stacks.config import NodePoolConfig, StackConfig
from stacks.part import Selection, TenantInputs
from stacks.tenancy import borrowable, ceilings, guarantees, node_shares
from stacks.tuning import PoolTuning, node_profile, tenant_network_args

PULL_SECRET = "nvidia-registry"


class GpuPlatform(pulumi.ComponentResource):
    """NFD -> GPU Operator -> device-plugin config -> ClusterPolicy -> NVIDIADriver per kernel -> the pools on that
    kernel; monitoring after the operator; priority classes and the tenant admission policy -> tenants."""

    def __init__(self, name: str, config: StackConfig, inventory: KernelInventory,
                 opts: pulumi.ResourceOptions | None = None, part: Selection | None = None):
        super().__init__("gpu-platform:index:GpuPlatform", name, None, opts)
        cluster = config.cluster
        flavor = cluster.flavor
        openshift = flavor == "openshift"
        namespace = labels.GPU_OPERATOR_NAMESPACES[flavor]
        cli_image = labels.OPENSHIFT_CLI_IMAGE.format(minor=cluster.minor) if openshift else None

        nfd = NfdStack("nfd", NfdStackArgs(
            flavor=flavor, image=config.images.nfd, cli_image=cli_image,
            olm=labels.nfd_olm_package(cluster.nfd_csv) if openshift else None, chart_mirror=config.charts.mirror,
        ), pulumi.ResourceOptions(parent=self))
        operator = GpuOperator("gpu-operator", GpuOperatorArgs(
            flavor=flavor, cli_image=cli_image,
            namespace_labels={"openshift.io/cluster-monitoring": "true"} if openshift else {},
            chart_mirror=config.charts.mirror,
        ), pulumi.ResourceOptions(parent=self, depends_on=[nfd.ready]))
        after_install = pulumi.ResourceOptions(parent=self, depends_on=[operator.installed])
        dra = config.allocation_mode == "dra"
        plans = device_classes(dra_pools(config)) if dra else []  # mode dra: the stack's DeviceClasses
        # The GPUCluster takes the ClusterPolicy's place: the operator runs only one of the two (components/dra.py).
        operands = self._dra(config, after_install) if dra else self._cluster_policy(config, namespace, after_install)
        pull_secret = self._pull_secret(config, namespace, operator.installed)
        driver = DriverStack("driver", DriverStackArgs(
            inventory=inventory, release=config.driver_release,
            manager_image=config.images.driver_manager or labels.OPERAND_IMAGES["driverManager"],
            max_parallel_upgrades=config.driver.max_parallel_upgrades,
            max_unavailable=config.driver.max_unavailable, drain=config.driver.drain,
            pull_secret=PULL_SECRET if pull_secret else None,
        ), pulumi.ResourceOptions(parent=self, depends_on=[operator.installed, operands,
                                                           *([pull_secret] if pull_secret else [])]))

        tuning = self._tuning(config)
        pool_args = {pool.name: self._pool_args(config, pool, tuning) for pool in config.node_pools}
        # Kubernetes: the drain runs before any group exists or rolls, so no node terminates undrained.
        drain = [NodeDrain("node-drain", NodeDrainArgs(
            cluster=cluster.name, region=cluster.region, group_prefix=group_prefix(cluster.name),
            drain_timeout_seconds=max(pool.roll.drain_timeout_seconds for pool in config.aws_pools),
            role=cluster.node_termination_handler_role, chart_mirror=config.charts.mirror), pulumi.ResourceOptions(parent=self)).ready
        ] if config.aws_pools else []
        self.pools = {
            pool.name: GpuNodePool(f"pool-{pool.name}", pool_args[pool.name], pulumi.ResourceOptions(
                parent=self, depends_on=[driver.drivers[config.kernel_target(pool)], *tuning.waits(pool.name),
                                         *drain]))
            for pool in config.node_pools
        }
        if openshift:
            cluster_autoscaler("cluster-autoscaler", list(pool_args.values()), pulumi.ResourceOptions(parent=self))
        MonitoringStack("monitoring", MonitoringStackArgs(
            namespace=namespace, scrapers=cluster.scrapers, prometheus_operator=config.prometheus_operator,
            rule_labels=dict(config.monitoring.rule_labels), openshift=openshift,
        ), after_install)

        priority_classes = self._priority_classes()
        queued = config.tenancy.mode == "queue"
        role = tenant_role("tenant-role", pulumi.ResourceOptions(parent=self), dra=dra, queued=queued)
        if openshift and not cluster.project_self_provisioning:
            self_provisioning_off("project-self-provisioning-off", pulumi.ResourceOptions(parent=self))
        # Both bound before any tenant namespace exists, so no tenant pod is ever admitted unchecked.
        owners = {pool.name: pool.dedicated_to for pool in config.node_pools if pool.dedicated_to}
        # The fleet's own rules for tenant pods: a GPU unit's share of a node, and with Karpenter no spreading.
        # In mode dra a pod's claims do not say how many devices it holds: no share of a node per device.
        pod_rules = (*([] if dra else node_share_validations(node_shares(config))),
                     *(SPREAD_RULES if any(pool.karpenter for pool in config.node_pools) else ()))
        admission = TenantAdmission("tenant-admission", TenantAdmissionArgs(
            variables=DRA_POD_VARIABLES if dra else VARIABLES,
            validations=(*(DRA_POD_VALIDATIONS if dra else VALIDATIONS), *dedicated_validations(owners), *pod_rules)),
            pulumi.ResourceOptions(parent=self))
        # Outside tenant namespaces no pod gets a GPU: the quota exists only in tenants'.
        guard = gpu_guard_args((labels.GPU_OPERATOR_NAMESPACES[flavor], labels.NFD_NAMESPACES[flavor],
                                *cluster.scrapers, *cluster.trusted_namespaces), openshift)
        TenantAdmission("gpu-guard", dataclasses.replace(guard, variables=DRA_POD_VARIABLES) if dra else guard,
                        pulumi.ResourceOptions(parent=self))
        claims = [DraAdmission("dra-admission", DraAdmissionArgs(queued=queued), pulumi.ResourceOptions(parent=self))
                  ] if dra else []
        network_admission = TenantAdmission("tenant-network-admission", network_admission_args(),
                                            pulumi.ResourceOptions(parent=self))
        objects = TenantObjects("tenant-objects", TenantObjectsArgs(), pulumi.ResourceOptions(parent=self))
        # Queue mode: Kueue and its refusal of GPU work outside the queues, before any tenant namespace exists.
        kueue = Kueue("kueue", KueueArgs({name: pool.node_selector for name, pool in self.pools.items()},
                                          {name: pool.taints for name, pool in self.pools.items()},
                                          config.charts.mirror, cli_image,
                                          install_cert_manager=config.tenancy.cert_manager == "install",
                                          compute=openshift, template_rules=(*CORDON_RULES, *pod_rules),
                                          device_classes=tuple(plan.name for plan in plans)),
                      pulumi.ResourceOptions(parent=self)) if queued else None
        # The API server loads policies asynchronously: members are bound only once each policy refuses its probe.
        gate_image = cli_image or CURL_IMAGE
        probes = tenant_probes(gate_image, queue=queued, dra=dra)
        gate = AdmissionGate("admission-gate", AdmissionGateArgs(probes, gate_image, openshift=openshift),
                             pulumi.ResourceOptions(parent=self, depends_on=[
                                 admission, network_admission, objects, *claims, *([kueue] if kueue else [])]))
        # Every kind the fleet advertises is capped in each tenant's quota (0 where not given): a quota caps only
        # the resources it names.
        kinds = sorted({labels.GPU_RESOURCE, *(kind for pool in config.node_pools for kind in pool.advertised_per_node)})
        # Queue mode: Kueue decides within a ceiling the API server enforces, the guarantee plus what may be borrowed.
        shares = guarantees(config) if queued else {}
        lendable = borrowable(config, shares)
        # Mode dra: no device plugin advertises a kind, and every kind stays at 0; the devices are counted per class.
        caps = ceilings(config, shares, lendable, kinds) if queued and not dra else {
            tenant.name: {kind: 0 if dra else tenant.grants.get(kind, 0) for kind in kinds} for tenant in config.tenants}
        # Queue mode in mode dra: the queues count each class of the stack (its quota key), 0 where not given.
        queue_shares = device_shares(config, shares) if dra else shares
        queue_kinds = [plan.quota_key for plan in plans] if dra else kinds
        held = ceilings(config, queue_shares, borrowable(config, queue_shares), queue_kinds) if queued and dra else {}
        # Mode dra: what each tenant may hold of each DeviceClass of the fleet (the operator's at 0).
        devices = {tenant.name: {name: 0 for name in OPERATOR_CLASSES} | {
            plan.name: held[tenant.name][plan.quota_key] for plan in plans} if queued else tenant_devices(
            dra_pools(config), tenant.grants, tenant.name) for tenant in config.tenants} if dra else {}
        # The fleet summary's devices per class: in queue mode the guarantee, which the capacity policy holds too.
        promised = {name: {plan.name: sum(pool.get(plan.quota_key, 0) for pool in share.values()) for plan in plans}
                    for name, share in queue_shares.items()} if queued and dra else devices
        # What each tenant's components are registered from; the part (gpuctl's) decides which tenants register.
        after = (*priority_classes, role, admission, network_admission, objects, *claims, *([kueue] if kueue else []))
        self.tenant_inputs = [TenantInputs(tenant.name, (
            (f"tenant-{tenant.name}", TenantQuotaArgs(
                name=tenant.name, quota=caps[tenant.name],
                priority_class=tenant.priority_class, group=tenant.rbac_group,
                cpu=tenant.cpu, memory=tenant.memory, pods=tenant.pods, scrapers=cluster.scrapers,
                protect=not tenant.retired, kueue_managed=queued and openshift,
                dedicated_pools=tuple(name for name, tenants in owners.items() if tenant.name in tenants),
                members_after=(gate.ready,), devices=devices.get(tenant.name, {}),
            )),
            *([(f"tenant-{tenant.name}-queue", TenantQueueArgs(
                tenant=tenant.name, cohort=config.tenancy.cohort, nominal=queue_shares[tenant.name],
                kinds=tuple(queue_kinds),
                fleet_pools=tuple(self.pools),
                borrowing_limit=tenant.queue.borrowing_limit, lending_limit=tenant.queue.lending_limit,
                weight=tenant.queue.weight,
                compute={"cpu": tenant.cpu, "memory": tenant.memory} if openshift else None,
            ))] if queued else []),
            *((f"tenant-{tenant.name}-network-{network.name}", tenant_network_args(tenant, network))
              for network in tenant.networks),
        ), after) for tenant in config.tenants]
        self.tenants = {}
        for position, inputs in enumerate(self.tenant_inputs):
            if part is None or part.registers(position, inputs):
                self._tenant(inputs, kueue, network_admission)

        self.outputs = {
            "cluster": cluster.name,
            "kubernetesVersion": cluster.kubernetes_version,
            "capacity": {pool.name: pool.gpu_capacity for pool in config.node_pools},
            "advertised": {pool.name: pool.advertised for pool in config.node_pools},
            "totalGpus": config.gpu_capacity,
            "kernels": [target.key for target in inventory.targets],
            "keptKernels": [target.key for target in inventory.kept],
            "declaredKernels": sorted(target.key for target in config.declared_kernels),
            "driverImages": driver.images,
            # Queue mode adds each tenant's guaranteed GPUs per pool and what it may borrow beyond them.
            "tenants": {tenant.name: {"gpus": tenant.gpus, "grants": tenant.grants,
                                      "priorityClass": tenant.priority_class, "retired": tenant.retired, **({
                "tenancy": "queue", "guaranteed": shares[tenant.name], "borrowable": lendable[tenant.name]}
                if queued else {}), **({"devices": promised[tenant.name]} if dra else {})}
                for tenant in config.tenants},
            "pools": {pool.name: {
                "instanceType": pool.instance_type, "nodes": pool.replicas, "minNodes": pool.autoscaler_min,
                "maxNodes": pool.autoscaler_max, "gpusPerNode": pool.instance.gpus, "gpuModel": pool.instance.gpu_model,
                "gpus": pool.gpu_capacity,
                # pods per GPU (1: whole GPUs; a None would not survive as an output)
                "sharing": pool.time_slicing_replicas or 1, "partitioning": pool.partitioning.describe(),
                "advertised": pool.advertised, "dedicatedTo": list(pool.dedicated_to or ()),
                "os": config.kernel_target(pool).os, "kernel": pool.kernel, "image": pool.image,
                "retired": pool.retired, "roll": self.pools[pool.name].roll,
            } for pool in config.node_pools},
            "release": cluster.release,
            "allocationMode": config.allocation_mode,
            # Mode dra: the devices each DeviceClass of the stack covers.
            **({"deviceClasses": {plan.name: {"kind": plan.kind, "pool": plan.pool, "devices": plan.devices}
                                  for plan in plans}} if dra else {}),
            # How a node profile change reaches each tuned pool (MCO reboots, or the pool's instance refresh).
            "profiles": tuning.rollouts(flavor),
        }
        for name, entry in self.outputs["pools"].items():
            entry["profile"] = self.outputs["profiles"].get(name)
        # The stack exports these (stacks/program.py); registered here as well, the map of every tenant would be
        # serialized twice by the SDK (0.04 s of the 0.4 s a one-tenant render takes at 1,000 tenants).
        self.register_outputs({})

    def _tenant(self, inputs: TenantInputs, kueue: Kueue | None, network_admission: pulumi.Resource) -> None:
        """A tenant's namespace and quotas, then its queue and networks, which wait for them."""
        (quota_name, quota_args), *others = inputs.components
        quota = self.tenants[inputs.name] = TenantQuota(quota_name, quota_args, pulumi.ResourceOptions(
            parent=self, depends_on=list(inputs.after)))
        for name, args in others:
            if isinstance(args, TenantQueueArgs):
                TenantQueue(name, args, pulumi.ResourceOptions(parent=self, depends_on=[quota, kueue.installed]))
            else:
                TenantNetwork(name, args, pulumi.ResourceOptions(parent=self, depends_on=[quota, network_admission]))

    def _cluster_policy(self, config: StackConfig, namespace: str,
                        after_install: pulumi.ResourceOptions) -> pulumi.Resource:
        """Mode devicePlugin: the device plugin's configs, the MIG layouts, and the ClusterPolicy that runs them."""
        device_plugin = DevicePluginStack("device-plugin", DevicePluginStackArgs(
            namespace=namespace, pools={pool.name: pool.partitioning for pool in config.node_pools}),
            after_install)
        mig_config = self._mig_config(config, namespace, after_install)
        return ClusterPolicyStack("cluster-policy", ClusterPolicyStackArgs(
            flavor=config.cluster.flavor, images={**labels.OPERAND_IMAGES, **config.images.operands()},
            device_plugin_config=device_plugin.config, service_monitor=config.prometheus_operator,
            service_monitor_labels=dict(config.monitoring.rule_labels), mig_config=mig_config and mig_config.name,
            # every placement but bring-your-own is an EC2 instance, its GPUs passed through to the VM
            mig_reboot=any(pool.partitioning.mig_layout and pool.bring_your_own is None for pool in config.node_pools),
        ), pulumi.ResourceOptions(parent=self, depends_on=[*after_install.depends_on, device_plugin,
                                                           *([mig_config] if mig_config else [])])).policy

    def _dra(self, config: StackConfig, after_install: pulumi.ResourceOptions) -> pulumi.Resource:
        """Mode dra: the GPUCluster and the stack's DeviceClasses."""
        images = {**labels.OPERAND_IMAGES, **config.images.operands()}
        return DraStack("dra", DraStackArgs(dcgm_exporter_image=images["dcgmExporter"],
                                            classes=tuple(device_classes(dra_pools(config)))), after_install).cluster

    def _mig_config(self, config: StackConfig, namespace: str,
                    opts: pulumi.ResourceOptions) -> MigPartedConfig | None:
        """The stack's own mig-parted config, where a pool gives its own MIG layout: every layout the pools use."""
        if not any(pool.partitioning.mig_devices for pool in config.node_pools):
            return None
        layouts: dict[str, dict[str, dict[str, int]]] = {}
        for pool in config.node_pools:
            partitioning, model = pool.partitioning, pool.instance.gpu_model
            if partitioning.mig_layout:
                layouts.setdefault(partitioning.mig_layout, {})[model] = partitioning.devices(model)
        return MigPartedConfig("mig-manager", MigPartedConfigArgs(namespace, layouts), opts)

    def _tuning(self, config: StackConfig) -> PoolTuning:
        """Node profiles of the tuned pools (OpenShift: their MachineConfigPools and PerformanceProfiles) and the
        EFA fabric of the pools that declare it."""
        profiles = {pool.name: node_profile(pool, config.cluster.kubernetes_version)
                    for pool in config.node_pools if pool.profile is not None}
        tuning = {}
        if config.cluster.flavor == "openshift":
            tuning = {name: NodeTuning(f"tuning-{name}", profile, pulumi.ResourceOptions(parent=self))
                      for name, profile in profiles.items()}
        efa_pools = tuple(pool.name for pool in config.node_pools if pool.fabric == "efa")
        fabric = EfaFabric("efa", EfaFabricArgs(config.cluster.name, efa_pools, config.charts.mirror),
                           pulumi.ResourceOptions(parent=self)) if efa_pools else None
        return PoolTuning(profiles, tuning, fabric)

    @staticmethod
    def _pool_args(config: StackConfig, pool: NodePoolConfig, tuning: PoolTuning) -> GpuNodePoolArgs:
        cluster = config.cluster
        if pool.bring_your_own is not None:
            placement = BringYourOwnPlacement(dict(pool.bring_your_own.node_selector))
        elif pool.karpenter is not None:
            own = pool.karpenter
            placement = KarpenterPlacement(
                cluster.karpenter.node_role, dict(cluster.karpenter.subnet_tags),
                dict(cluster.karpenter.security_group_tags), own.capacity_types, own.zones, own.consolidation,
                own.consolidate_after, own.disruption_budget, own.expire_after)
        elif cluster.flavor == "openshift":
            placement = MachineSetPlacement(cluster.infrastructure_id, pool.machine_set_name(cluster),
                                            cluster.region, pool.zone(cluster),
                                            labels.OPENSHIFT_CLI_IMAGE.format(minor=cluster.minor))
        else:
            # An EFA pool launches in its one subnet: its cluster placement group lives in one availability zone.
            placement = AutoScalingPlacement(cluster.name, (pool.subnet_id,) if pool.subnet_id else cluster.subnet_ids,
                                             cluster.security_group_ids, cluster.instance_profile,
                                             InstanceRefresh(**pool.roll.model_dump()),
                                             drain_permitted=bool(cluster.node_termination_handler_role))
        return GpuNodePoolArgs(
            name=pool.name, instance_type=pool.instance_type, instance=pool.instance, replicas=pool.replicas,
            min_replicas=pool.autoscaler_min, max_replicas=pool.autoscaler_max, image=pool.image,
            root_volume_gib=pool.root_volume_gib, placement=placement, kernel=pool.kernel_target,
            retired=pool.retired, partitioning=pool.partitioning, dedicated=pool.dedicated_to is not None,
            **tuning.pool_args(pool))

    def _pull_secret(self, config: StackConfig, namespace: str, after: pulumi.Resource) -> k8s.core.v1.Secret | None:
        """The driver registry's pull secret, which each NVIDIADriver names and so waits for; None when unset."""
        if config.registry_pull_secret is None:
            return None
        return k8s.core.v1.Secret(
            "registry-pull-secret", metadata=metadata(PULL_SECRET, namespace),
            type="kubernetes.io/dockerconfigjson",
            string_data={".dockerconfigjson": pulumi.Output.secret(config.registry_pull_secret.get_secret_value())},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[after]))

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

