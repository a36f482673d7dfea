"""Tenants, their namespaces and grants, and their queues when tenancy is by queue."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, StrictBool, model_validator

from components import labels
from fleet.partitioning import SHARED_GPU, mig_resource
from stacks.config.fields import (CPU, MAX_TENANT_GPUS, MEMORY, MIG_PROFILE, Int, StrictModel, dns_label, tenant_group,
                                  tenant_namespace)
from stacks.config.tenant_networks import TenantNetworkConfig


class TenantQueueConfig(StrictModel):
    """Tenancy mode `queue`: where a tenant's guaranteed GPUs live and how it shares them (Kueue ClusterQueue)."""

    pools: tuple[str, ...] | None = Field(default=None, min_length=1, description=(
        "pools whose GPUs the tenant may use, its guarantee taken from them in this order; unset: every pool"))
    borrowing_limit: Int | None = Field(default=None, ge=0, le=MAX_TENANT_GPUS, description=(
        "GPUs it may borrow beyond its guarantee in each pool while others leave theirs idle; unset: no limit"))
    lending_limit: Int | None = Field(default=None, ge=0, le=MAX_TENANT_GPUS, description=(
        "GPUs of its guarantee in each pool it may lend out while idle; unset: all of them"))
    weight: Int = Field(default=1, ge=0, le=1000, description="fair-sharing weight against the other tenants")


class TenancyConfig(StrictModel):
    """How tenants share the GPUs: a hard quota each (`quota`) or guarantees in a Kueue cohort (`queue`)."""

    mode: Literal["quota", "queue"] = "quota"
    cohort: Annotated[str, dns_label(63)] = "gpu-tenants"
    cert_manager: Literal["install", "existing"] = Field(
        default="install", description="OpenShift, queue mode: install the cert-manager Operator the Red Hat build "
                                       "of Kueue needs, or use the cert-manager the cluster already runs")


class TenantConfig(StrictModel):
    """A team with its own namespace and a GPU quota."""

    name: Annotated[str, dns_label(50), AfterValidator(tenant_namespace)]
    gpus: Int = Field(default=0, ge=0, le=MAX_TENANT_GPUS, description="whole GPUs (nvidia.com/gpu)")
    gpu_shares: Int = Field(default=0, ge=0, le=MAX_TENANT_GPUS, description=(
        "time-sliced GPU shares (nvidia.com/gpu.shared) of the pools that share their GPUs"))
    mig_slices: dict[str, Annotated[Int, Field(ge=0, le=MAX_TENANT_GPUS)]] = Field(default_factory=dict, description=(
        "MIG slices by profile (e.g. 1g.10gb: 7; nvidia.com/mig-<profile>) of the pools with a MIG layout"))
    priority_class: Literal["gpu-high", "gpu-low"] = labels.LOW_PRIORITY_CLASS
    group: Annotated[str, AfterValidator(tenant_group)] | None = Field(default=None, min_length=1)
    retired: StrictBool = Field(default=False, description="unprotect the namespace so a later change may remove it")
    cpu: str = Field(default="64", pattern=CPU, description="quota on the sum of CPU requests")
    memory: str = Field(default="256Gi", pattern=MEMORY, description="quota on the sum of memory requests")
    pods: Int = Field(default=200, ge=1, le=10_000)
    networks: tuple[TenantNetworkConfig, ...] = Field(default=(), description="secondary networks (Multus)")
    queue: TenantQueueConfig = Field(default=TenantQueueConfig(), description="tenancy.mode queue: its sharing")

    # What an entry usually has, for messages about a missing one.
    usual_keys: ClassVar[tuple[str, ...]] = ("name", "gpus")

    @model_validator(mode="after")
    def _check(self) -> TenantConfig:
        for profile in self.mig_slices:
            if not MIG_PROFILE.fullmatch(profile):
                raise ValueError(f"migSlices: {profile!r} is not a MIG profile; name one as the device plugin does "
                                 "after nvidia.com/mig-, e.g. 1g.10gb or 3g.40gb")
        names = [network.name for network in self.networks]
        if len(set(names)) != len(names):
            raise ValueError("networks: each network name may appear once")
        return self

    @property
    def rbac_group(self) -> str:
        return self.group or self.name

    @property
    def grants(self) -> dict[str, int]:
        """What the tenant was given, by extended resource: whole GPUs always (0 is a grant of none), the rest when
        given."""
        return {labels.GPU_RESOURCE: self.gpus, **({SHARED_GPU: self.gpu_shares} if self.gpu_shares else {}),
                **{mig_resource(profile): count for profile, count in sorted(self.mig_slices.items()) if count}}
