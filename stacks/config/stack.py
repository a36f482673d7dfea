"""The stack as a whole: every part of the stack file and the checks that span them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, StrictBool, model_validator
from pydantic.alias_generators import to_camel, to_snake

from components import labels
from fleet.kernels import DriverRelease, KernelTarget
from fleet.partitioning import kind_of
from stacks.allocation import dra_problem
from stacks.config.cluster import ClusterConfig
from stacks.config.drivers import DriverConfig
from stacks.config.fields import MAX_LABEL_VALUE, StrictModel, field_error
from stacks.config.images import ChartsConfig, DevicePluginConfig, ImagesConfig, docker_config_json
from stacks.config.karpenter import AWS_ZONE_LETTERS
from stacks.config.monitoring import MonitoringConfig
from stacks.config.pools import NodePoolConfig
from stacks.config.tenant_networks import TenantNetworkConfig
from stacks.config.tenants import TenancyConfig, TenantConfig


class StackConfig(StrictModel):
    """Everything one environment declares."""

    cluster: ClusterConfig
    node_pools: tuple[NodePoolConfig, ...] = Field(min_length=1)
    driver: DriverConfig = DriverConfig()
    tenants: tuple[TenantConfig, ...] = ()
    tenancy: TenancyConfig = TenancyConfig()
    device_plugin: DevicePluginConfig = DevicePluginConfig()
    images: ImagesConfig = ImagesConfig()
    charts: ChartsConfig = ChartsConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    registry_pull_secret: Annotated[SecretStr, AfterValidator(docker_config_json)] | None = None
    preflight: StrictBool = True
    allocation_mode: Literal["devicePlugin", "dra"] = "devicePlugin"  # docs/dra.md

    @model_validator(mode="after")
    def _check(self) -> StackConfig:
        for field, items in (("nodePools", self.node_pools), ("tenants", self.tenants)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"{field}: name {item.name!r} appears twice; names must be unique")
                seen.add(item.name)
        openshift = self.cluster.flavor == "openshift"
        self._check_placement()
        if self.allocation_mode == "dra" and (problem := dra_problem(self)):
            raise field_error(*problem)
        for pool in self.node_pools:
            if openshift and (pool.os or pool.kernel):
                raise ValueError(f"nodePools: pool {pool.name!r} sets os or kernel, but OpenShift nodes run the kernel "
                                 "of the cluster release (a pool's image is only its boot image); remove them and set "
                                 "cluster.release and cluster.kernel")
            if openshift and "roll" in pool.model_fields_set:
                raise ValueError(f"nodePools: pool {pool.name!r} sets roll, which applies to Kubernetes pools (an Auto "
                                 "Scaling Group's instance refresh); on OpenShift a MachineSet's template reaches new "
                                 "machines only and kernels roll with the release: remove roll")
            if not openshift and pool.kernel_target is None:
                missing = " and ".join(name for name in ("os", "kernel") if getattr(pool, name) is None)
                raise ValueError(f"nodePools: pool {pool.name!r} needs os and kernel: the OS and kernel its image "
                                 f"boots; set {missing}")
            self._check_tuning(pool)
            if pool.availability_zone and not pool.availability_zone.startswith(self.cluster.region):
                raise ValueError(f"nodePools: pool {pool.name!r} availabilityZone {pool.availability_zone!r} is not "
                                 f"in cluster.region {self.cluster.region!r}; use one of its zones, e.g. "
                                 f"{self.cluster.region}a")
            if openshift and len(name := pool.machine_set_name(self.cluster)) > MAX_LABEL_VALUE:
                raise ValueError(
                    f"nodePools: pool {pool.name!r} makes the MachineSet name {name!r} {len(name)} characters long, "
                    f"over the {MAX_LABEL_VALUE} of a label value; shorten the pool name"
                )
        for index, tenant in enumerate(self.tenants):
            if tenant.name in self.cluster.trusted_namespaces:
                raise field_error(("tenants", index, "name"), (
                    f"{tenant.name!r} is in cluster.trustedNamespaces, which the GPU guard leaves out; remove it "
                    "there or choose another team name"))
            if tenant.name in self.cluster.scrapers:
                raise field_error(("tenants", index, "name"), (
                    f"{tenant.name!r} is a monitoring namespace (cluster.monitoringNamespaces: its Prometheus may "
                    "scrape every tenant); choose another team name"))
        self._check_networks_carry_traffic()
        self._check_network_isolation()
        self._check_tenancy()
        self._check_partitions()
        self.driver.check_for(self.driver_release.precompiled)
        if self.images.nfd and "@" in self.images.nfd:
            raise ValueError("images.nfd: the NFD chart takes a tag, not a digest; use registry/repository:tag")
        if self.images.nfd and openshift:
            raise ValueError("images: nfd applies to Kubernetes; on OpenShift the NFD operator runs the NFD image "
                             "of the cluster release")
        if self.charts.mirror and openshift:
            raise ValueError("charts.mirror applies to Kubernetes: on OpenShift the operators come through OLM from "
                             "the cluster's catalogs (mirror those with oc-mirror); remove it")
        return self

    def _check_placement(self) -> None:
        """Bring-your-own pools on Kubernetes only; what Auto Scaling Group pools need, when the stack has one."""
        cluster = self.cluster
        for index, pool in enumerate(self.node_pools):
            if pool.bring_your_own is not None and cluster.flavor == "openshift":
                raise field_error(("nodePools", index, "bringYourOwn"), (
                    "applies to Kubernetes clusters; OpenShift pools are MachineSets of this stack: remove it and "
                    "set instanceType and image"))
            if pool.karpenter is not None and cluster.flavor == "openshift":
                raise field_error(("nodePools", index, "karpenter"), (
                    "applies to Kubernetes clusters on AWS; OpenShift pools are MachineSets, scaled by the cluster "
                    "autoscaler: remove it"))
            if pool.karpenter is not None and (problem := pool.karpenter_problem()):
                raise field_error(("nodePools", index, problem[0]), problem[1])
            for number, zone in enumerate(pool.karpenter.zones if pool.karpenter is not None else ()):
                region, letter = zone[:-1], zone[-1]
                if region != cluster.region or letter not in AWS_ZONE_LETTERS:
                    problem = (f"is in {region}, not in cluster.region {cluster.region}" if region != cluster.region
                               else f"is not an availability zone of {region}")
                    raise field_error(("nodePools", index, "karpenter", "zones", number), (
                        f"{zone!r} {problem}; use zones of {cluster.region} (from {cluster.region}a to "
                        f"{cluster.region}{AWS_ZONE_LETTERS[-1]}, as the region has them)"))
            if pool.karpenter is not None and cluster.karpenter is None:
                raise field_error(("cluster", "karpenter"), (
                    f"is required: pool {pool.name!r} is a Karpenter NodePool; set cluster.karpenter.nodeRole to the "
                    "IAM role of the nodes Karpenter launches"))
        if cluster.karpenter is not None and not self.karpenter_pools:
            raise field_error(("cluster", "karpenter"), "configures Karpenter pools, and no pool is one; remove it")
        if cluster.flavor == "kubernetes" and self.aws_pools and not (
                cluster.subnet_ids and cluster.security_group_ids and cluster.instance_profile):
            missing = ", ".join(name for name in ("subnetIds", "securityGroupIds", "instanceProfile")
                                if not getattr(cluster, to_snake(name)))
            raise field_error(("cluster",), (
                f"{missing} required: pool {self.aws_pools[0].name!r} is an Auto Scaling Group launched into them "
                "(set them, or make every pool bringYourOwn)"))
        brought = [(index, pool) for index, pool in enumerate(self.node_pools) if pool.bring_your_own is not None]
        for index, pool in brought:
            mine = pool.bring_your_own.node_selector.items()
            for _, other in brought:
                theirs = other.bring_your_own.node_selector.items()
                if other is not pool and theirs <= mine:
                    raise field_error(("nodePools", index, "bringYourOwn", "nodeSelector"), (
                        f"every node it selects is also selected by pool {other.name!r} (its selector "
                        f"{dict(theirs)} is a subset), so a node would belong to two pools; give each pool a "
                        "label of its own"))
        if cluster.node_termination_handler_role and not self.aws_pools:
            raise field_error(("cluster", "nodeTerminationHandlerRole"), (
                "drains Auto Scaling Group nodes, and no pool is one; remove it"))

    @property
    def aws_pools(self) -> tuple[NodePoolConfig, ...]:
        """Kubernetes pools this stack provisions as AWS resources: Auto Scaling Groups (every pool but bring-your-own
        and Karpenter's, which are Kubernetes objects)."""
        if self.cluster.flavor != "kubernetes":
            return ()
        return tuple(pool for pool in self.node_pools if pool.bring_your_own is None and pool.karpenter is None)

    @property
    def karpenter_pools(self) -> tuple[NodePoolConfig, ...]:
        return tuple(pool for pool in self.node_pools if pool.karpenter is not None)

    def _check_networks_carry_traffic(self) -> None:
        """Tenant networks only where their frames reach the wire: AWS drops the extra MAC addresses macvlan gives
        pods and exposes no SR-IOV functions, so a Multus network there attaches and carries nothing."""
        on_aws = [pool.name for pool in self.node_pools if pool.bring_your_own is None]
        for index, tenant in enumerate(self.tenants):
            if tenant.networks and on_aws:
                raise field_error(("tenants", index, "networks"), (
                    f"{tenant.networks[0].type} network {tenant.networks[0].name!r} would carry no traffic: pools "
                    f"{', '.join(on_aws)} run on AWS, whose network drops the extra MAC addresses macvlan gives pods "
                    "and has no SR-IOV functions to hand out; use EFA for collectives on AWS (a Kubernetes pool's "
                    "fabric: efa), and tenant networks on a stack whose pools are all bringYourOwn"))

    def _check_tenancy(self) -> None:
        """Queue settings only in `queue` mode, naming pools that exist; `queue` only where Kueue is installed."""
        queue = self.tenancy.mode == "queue"
        red_hat_build = queue and self.cluster.flavor == "openshift"
        if red_hat_build and self.cluster.minor not in labels.KUEUE_OLM_MINORS:
            raise field_error(("tenancy", "mode"), (
                f"queue needs the Red Hat build of Kueue, whose pinned {labels.KUEUE_OLM.csv} is not published "
                f"for OpenShift {self.cluster.minor} (only {', '.join(labels.KUEUE_OLM_MINORS)}); use quota"))
        if "cert_manager" in self.tenancy.model_fields_set and not red_hat_build:
            raise field_error(("tenancy", "certManager"), (
                "applies to tenancy.mode queue on OpenShift, where the Red Hat build of Kueue needs cert-manager; "
                "remove it"))
        pools = [pool.name for pool in self.node_pools]
        for index, tenant in enumerate(self.tenants):
            if "queue" in tenant.model_fields_set and not queue:
                raise field_error(("tenants", index, "queue"), (
                    "applies to tenancy.mode queue; set tenancy.mode: queue or remove it"))
            chosen = tenant.queue.pools or ()
            if len(set(chosen)) != len(chosen):
                raise field_error(("tenants", index, "queue", "pools"), "names a pool twice; list each once")
            for name in chosen:
                if name not in pools:
                    raise field_error(("tenants", index, "queue", "pools"), (
                        f"{name!r} is not a pool of nodePools; use one of {', '.join(pools)}"))

    def _check_partitions(self) -> None:
        """Dedicated pools name tenants of the stack; each kind a tenant is given is advertised by a pool it may
        use; a tenant's queue lists no pool dedicated to others."""
        names = [tenant.name for tenant in self.tenants]
        for index, pool in enumerate(self.node_pools):
            for owner in pool.dedicated_to or ():
                if owner not in names:
                    raise field_error(("nodePools", index, "dedicatedTo"), (
                        f"{owner!r} is not a tenant of this stack; use one of {', '.join(names) or '(none yet)'}"))
        queued = self.tenancy.mode == "queue"
        for index, tenant in enumerate(self.tenants):
            listed = tenant.queue.pools if queued and tenant.queue.pools else None
            for name in tenant.queue.pools or ():
                pool = next(pool for pool in self.node_pools if pool.name == name)
                if not self.may_use(tenant, pool):
                    raise field_error(("tenants", index, "queue", "pools"), (
                        f"{name!r} is dedicated to {', '.join(pool.dedicated_to)}; remove it, or add "
                        f"{tenant.name!r} to its dedicatedTo"))
            usable = [pool for pool in self.node_pools if self.may_use(tenant, pool)
                      and (listed is None or pool.name in listed)]
            offered = {name for pool in usable for name in pool.advertised_per_node}
            for name, amount in tenant.grants.items():
                if amount and name not in offered:
                    field, hint = _GRANT_FIELDS[kind_of(name).split()[0]]
                    raise field_error(("tenants", index, field), (
                        f"{amount} {kind_of(name)}, but no pool this tenant may use advertises {name}; {hint}"))

    @staticmethod
    def may_use(tenant: TenantConfig, pool: NodePoolConfig) -> bool:
        """Whether a tenant's pods may run on a pool: any pool not dedicated, or one dedicated to it."""
        return pool.dedicated_to is None or tenant.name in pool.dedicated_to

    def _check_network_isolation(self) -> None:
        """No two tenants share a layer-2 segment (a macvlan host interface, or SR-IOV VFs of one resource on one
        VLAN) or an address range: NetworkPolicies do not reach Multus networks, so only separation isolates."""
        seen: list[tuple[str, TenantNetworkConfig]] = []
        for tenant in self.tenants:
            for network in tenant.networks:
                for owner, other in seen:
                    if owner == tenant.name:
                        continue
                    where = f"networks {owner}/{other.name} and {tenant.name}/{network.name}"
                    if network.segment == other.segment:
                        raise ValueError(f"tenants: {where} share {network.segment}, one layer-2 segment between "
                                         "two tenants; give each tenant its own interface or VLAN")
                    if network.ipam.subnet.overlaps(other.ipam.subnet):
                        raise ValueError(f"tenants: {where} overlap ({other.ipam.range}, {network.ipam.range}); "
                                         "give each tenant its own address range")
                seen.append((tenant.name, network))

    def _check_tuning(self, pool: NodePoolConfig) -> None:
        """A pool's profile and fabric against the flavor and the cluster's Kubernetes version."""
        openshift = self.cluster.flavor == "openshift"
        if pool.profile is not None:
            if not openshift and "max_unavailable" in pool.profile.model_fields_set:
                raise ValueError(f"nodePools: pool {pool.name!r} profile.maxUnavailable paces the Machine Config "
                                 "Operator's reboots on OpenShift; a Kubernetes pool rolls by instance refresh: "
                                 "remove it and set roll.minHealthyPercentage instead")
            try:
                pool.profile.check_sysctls(self.cluster.kubernetes_version)
            except ValueError as error:
                raise ValueError(f"nodePools: pool {pool.name!r} profile.{error}") from None
            if openshift and pool.profile.cpu_manager_policy != "static":
                raise ValueError(f"nodePools: pool {pool.name!r} profile.cpuManagerPolicy: OpenShift tunes pools with a "
                                 "PerformanceProfile, which always sets the static CPU manager; set static")
        if pool.fabric == "efa" and openshift:
            raise ValueError(f"nodePools: pool {pool.name!r} sets fabric efa, which this platform sets up on Kubernetes "
                             "pools only; remove it")
        if pool.subnet_id is not None and openshift:
            raise ValueError(f"nodePools: pool {pool.name!r} sets subnetId, a Kubernetes setting; OpenShift pools "
                             "use availabilityZone")
        if pool.fabric == "efa" and pool.subnet_id is None:
            raise ValueError(f"nodePools: pool {pool.name!r} sets fabric efa and needs subnetId: one of "
                             "cluster.subnetIds, since its cluster placement group lives in one availability zone")
        if pool.subnet_id is not None and pool.subnet_id not in self.cluster.subnet_ids:
            raise ValueError(f"nodePools: pool {pool.name!r} subnetId {pool.subnet_id!r} is not one of "
                             "cluster.subnetIds; pick one of them")

    @property
    def gpu_capacity(self) -> int:
        return sum(pool.gpu_capacity for pool in self.node_pools)

    def kernel_target(self, pool: NodePoolConfig) -> KernelTarget:
        """The kernel a pool's nodes run: its image's on Kubernetes, the cluster release's on OpenShift."""
        return self.cluster.kernel_target or pool.kernel_target

    @property
    def declared_kernels(self) -> set[KernelTarget]:
        return {self.kernel_target(pool) for pool in self.node_pools}

    @property
    def driver_release(self) -> DriverRelease:
        return self.driver.release(self.cluster.flavor)

    @property
    def prometheus_operator(self) -> bool:
        return self.monitoring.enabled(self.cluster.flavor)


# A grant's field by its kind's first word (fleet.partitioning.kind_of), and how to offer that kind.
_GRANT_FIELDS = {
    "whole": ("gpus", "give a pool whole GPUs (no timeSlicingReplicas or migLayout), or set gpus: 0"),
    "GPU": ("gpuShares", "set timeSlicingReplicas on a pool, or remove gpuShares"),
    "MIG": ("migSlices", "give a pool a migLayout with that profile, or remove it from migSlices"),
}

CONFIG_KEYS = {to_camel(name): name for name in StackConfig.model_fields}
SECRET_KEYS = frozenset({"registryPullSecret"})
