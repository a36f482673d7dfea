"""Tenant networks: the secondary networks and their address management."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StrictBool, model_validator

from stacks.config.fields import Int, StrictModel, dns_label


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError:
        raise ValueError(f"{value!r} is not a network in CIDR form with its host bits zero, e.g. 10.20.0.0/24") from None
    return value


class IpamConfig(StrictModel):
    """Addresses on a secondary network: whereabouts (cluster-wide, no duplicates across nodes) or host-local."""

    type: Literal["whereabouts", "host-local"] = "whereabouts"
    range: Annotated[str, AfterValidator(_cidr)]
    gateway: str | None = None

    @model_validator(mode="after")
    def _check(self) -> IpamConfig:
        if self.gateway is not None:
            try:
                inside = ipaddress.ip_address(self.gateway) in ipaddress.ip_network(self.range)
            except ValueError:
                inside = False
            if not inside:
                raise ValueError(f"gateway {self.gateway!r} must be an address inside range {self.range!r}")
        return self

    @property
    def subnet(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.range)


class TenantNetworkConfig(StrictModel):
    """A secondary network a tenant's pods may attach to (Multus): macvlan on a host interface, or SR-IOV."""

    name: Annotated[str, dns_label(63)]
    type: Literal["macvlan", "sriov"]
    master: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9._-]{1,15}$", description="macvlan: host interface")
    mode: Literal["bridge", "private", "vepa", "passthru"] = "bridge"
    resource_name: str | None = Field(default=None, pattern=r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$",
                                      description="sriov: the device plugin resource of the VFs")
    vlan: Int | None = Field(default=None, ge=0, le=4094)
    ipam: IpamConfig
    retired: StrictBool = Field(default=False, description="unprotect the attachment so a later change may remove it")

    @model_validator(mode="after")
    def _check(self) -> TenantNetworkConfig:
        if self.type == "macvlan" and (self.master is None or self.resource_name or self.vlan is not None):
            raise ValueError("a macvlan network needs master (the host interface, e.g. ens5) and takes no "
                             "resourceName or vlan")
        if self.type == "sriov" and (self.resource_name is None or self.master):
            raise ValueError("an sriov network needs resourceName (the SR-IOV device plugin resource, e.g. "
                             "openshift.io/mlxnics) and takes no master")
        return self

    @property
    def segment(self) -> str:
        """The layer-2 segment the network's pods share: its host interface, or its VFs' resource and VLAN."""
        if self.type == "macvlan":
            return f"host interface {self.master}"
        return f"SR-IOV resource {self.resource_name} on {f'VLAN {self.vlan}' if self.vlan is not None else 'no VLAN'}"
