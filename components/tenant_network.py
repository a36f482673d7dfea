"""TenantNetwork: a tenant's secondary network as a Multus NetworkAttachmentDefinition in its namespace; and the
admission policy by which the API server refuses a tenant pod attaching to a network of another namespace.

A pod asks Multus for networks with the annotation `k8s.v1.cni.cncf.io/networks`: a comma-separated list of
`[<namespace>/]<name>[@<interface>]`, or a JSON list of `{"name", "namespace", "interface", ...}`. A name without a
namespace is looked up in the pod's own namespace, so a tenant's own networks need no namespace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.admission import TenantAdmissionArgs
from components.manifests import child_options, metadata

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# Multus replaces a pod's cluster network with the network this annotation names (multus-cni pkg/k8sclient
# tryLoadK8sPodDefaultNetwork), a bare name resolved in Multus's own namespace, not the pod's: a tenant pod would
# leave the cluster network its NetworkPolicy fences, so tenant pods may not set it.
DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"
# SR-IOV: the device plugin resource whose VFs the network uses; Multus adds the resource to pods that attach
# (the network resources injector) and passes the allocated VF to the sriov CNI plugin.
RESOURCE_NAME_ANNOTATION = "k8s.v1.cni.cncf.io/resourceName"
CNI_VERSION = "0.3.1"
POLICY_NAME = "gpu-platform-tenant-networks"

_NAME = "[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_INTERFACE = "[A-Za-z0-9._-]{1,15}"
# CEL (Kubernetes: `matches` is RE2, unanchored). The only namespace a reference may name is the pod's own.
VARIABLES = {
    "networks": f"has(object.metadata.annotations) && '{NETWORKS_ANNOTATION}' in object.metadata.annotations"
                f" ? object.metadata.annotations['{NETWORKS_ANNOTATION}'] : ''",
    "own": "namespaceObject.metadata.name",
}
_TEXT_ITEM = f"\\\\s*(' + variables.own + '/)?{_NAME}(@{_INTERFACE})?\\\\s*"
_JSON_ITEM = (f'\\\\{{\\\\s*"name"\\\\s*:\\\\s*"{_NAME}"'
              f'(\\\\s*,\\\\s*"namespace"\\\\s*:\\\\s*"' + "' + variables.own + '" + '")?'
              f'(\\\\s*,\\\\s*"interface"\\\\s*:\\\\s*"{_INTERFACE}")?\\\\s*\\\\}}')
VALIDATIONS = [
    (f"variables.networks == ''"
     f" || variables.networks.matches('^{_TEXT_ITEM}(,{_TEXT_ITEM})*$')"
     f" || variables.networks.matches('^\\\\s*\\\\[\\\\s*{_JSON_ITEM}(\\\\s*,\\\\s*{_JSON_ITEM})*\\\\s*\\\\]\\\\s*$')",
     f"{NETWORKS_ANNOTATION} may name only networks of the pod's own namespace, as [<namespace>/]<name>[@<interface>] "
     'or [{"name", "namespace", "interface"}]'),
    (f"!has(object.metadata.annotations) || !('{DEFAULT_NETWORK_ANNOTATION}' in object.metadata.annotations)",
     f"{DEFAULT_NETWORK_ANNOTATION} is refused: tenant pods keep the cluster network; attach further networks "
     f"with {NETWORKS_ANNOTATION}"),
]


@dataclass(frozen=True)
class Ipam:
    """Addresses on the network: `whereabouts` (cluster-wide) or `host-local` (per node), from `range`."""

    type: str
    range: str
    gateway: str | None = None

    def config(self) -> dict[str, object]:
        # whereabouts reads `range` (and `gateway`); host-local reads `subnet` (and `gateway`).
        ipam: dict[str, object] = {"type": self.type, "range" if self.type == "whereabouts" else "subnet": self.range}
        if self.gateway:
            ipam["gateway"] = self.gateway
        return ipam


@dataclass(frozen=True)
class TenantNetworkArgs:
    """One network: macvlan on a host interface (`master`, `mode`), or SR-IOV VFs of `resource_name` (`vlan`)."""

    namespace: str
    name: str
    type: str
    ipam: Ipam
    master: str | None = None
    mode: str = "bridge"
    resource_name: str | None = None
    vlan: int | None = None
    protect: bool = True  # while the tenant and the network are not retired

    def cni_config(self) -> str:
        config: dict[str, object] = {"cniVersion": CNI_VERSION, "name": self.name, "type": self.type}
        if self.type == "macvlan":
            config.update(master=self.master, mode=self.mode)
        elif self.vlan is not None:
            config["vlan"] = self.vlan
        config["ipam"] = self.ipam.config()
        return json.dumps(config, sort_keys=True)


class TenantNetwork(pulumi.ComponentResource):
    """The NetworkAttachmentDefinition of one tenant network, in the tenant's namespace."""

    def __init__(self, name: str, args: TenantNetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:TenantNetwork", name, None, opts)
        annotations = {RESOURCE_NAME_ANNOTATION: args.resource_name} if args.resource_name else None
        k8s.apiextensions.CustomResource(
            f"{name}-attachment", api_version="k8s.cni.cncf.io/v1", kind="NetworkAttachmentDefinition",
            metadata=metadata(args.name, args.namespace, extra_labels={labels.TENANT_LABEL: args.namespace},
                              annotations=annotations),
            spec={"config": args.cni_config()},
            opts=pulumi.ResourceOptions.merge(child_options(self, opts), pulumi.ResourceOptions(protect=args.protect)))
        self.register_outputs({"network": f"{args.namespace}/{args.name}"})


def network_admission_args() -> TenantAdmissionArgs:
    """The tenant admission policy that keeps pods to their own namespace's networks.

    Multus itself resolves a `<namespace>/<name>` reference in any namespace unless its namespace isolation is on,
    so the fence is the API server's.
    """
    return TenantAdmissionArgs(policy=POLICY_NAME, variables=VARIABLES, validations=tuple(VALIDATIONS))
