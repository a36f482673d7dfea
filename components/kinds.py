"""The Kubernetes kinds every tenant registers, sent as the provider's typed classes send them, for less work.

A typed class (`k8s.core.v1.ResourceQuota`) carries its arguments through the provider's input types and declares
its output properties; at every answer from the engine the SDK then turns the whole live object back into the
provider's output types (`rpc.resolve_outputs`, `translate_output_properties`). The program never reads a tenant
object's outputs, and at a thousand tenants that work was a large share of the program's time under the engine.
A `Kind` registers the object as a plain dict through `pulumi.CustomResource`, with what the typed class adds to the
request (its type token, the provider's version and its aliases: each class's `_internal_init` in pulumi-kubernetes
4.25.0; for a custom object, `apiextensions.CustomResource`'s), so the engine receives the same RegisterResource
request; tests/components/test_kinds.py compares the two for each kind, so a provider upgrade that changes a class
fails there. The engine's answer still gives each object its URN and ID; its other outputs are not kept
(`KindObject`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import labels

# What every typed class merges under its caller's options (pulumi_kubernetes/_utilities.py,
# get_resource_opts_defaults): the provider version this SDK was generated for.
PROVIDER_DEFAULTS = pulumi.ResourceOptions(version=k8s._utilities.get_version(),
                                           plugin_download_url=k8s._utilities.get_plugin_download_url())


class KindObject(pulumi.CustomResource):
    """An object a `Kind` registered. Only its URN and ID are read (parents, dependencies), so where
    stacks/registration.py's `unread_outputs` applies it keeps no other output: reading one is an AttributeError."""

    outputs_read = False


@dataclass(frozen=True)
class Kind:
    """One Kubernetes kind: `kind(name, opts, metadata=..., spec=...)` registers an object of it."""

    api_version: str
    kind: str
    aliases: tuple[str, ...] = ()  # the older type tokens the typed class names as aliases

    @functools.cached_property
    def _alias_options(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(aliases=[pulumi.Alias(type_=token) for token in self.aliases])

    @property
    def token(self) -> str:
        """The type token: `kubernetes:<group>/<version>:<kind>`, `core` for the core group."""
        group_version = self.api_version if "/" in self.api_version else f"core/{self.api_version}"
        return f"kubernetes:{group_version}:{self.kind}"

    def __call__(self, name: str, opts: pulumi.ResourceOptions, **fields: Any) -> KindObject:
        """Register the object `fields` (its top-level fields as the API names them, `roleRef` not `role_ref`)."""
        options = pulumi.ResourceOptions.merge(pulumi.ResourceOptions.merge(PROVIDER_DEFAULTS, opts),
                                               self._alias_options)
        return KindObject(self.token, name, {"apiVersion": self.api_version, "kind": self.kind, **fields}, options)


NAMESPACE = Kind("v1", "Namespace")
RESOURCE_QUOTA = Kind("v1", "ResourceQuota")
LIMIT_RANGE = Kind("v1", "LimitRange")
NETWORK_POLICY = Kind("networking.k8s.io/v1", "NetworkPolicy", aliases=(
    "kubernetes:extensions/v1beta1:NetworkPolicy",))
ROLE_BINDING = Kind("rbac.authorization.k8s.io/v1", "RoleBinding", aliases=(
    "kubernetes:rbac.authorization.k8s.io/v1alpha1:RoleBinding",
    "kubernetes:rbac.authorization.k8s.io/v1beta1:RoleBinding"))
CLUSTER_QUEUE = Kind(labels.KUEUE_API_VERSION, "ClusterQueue")
LOCAL_QUEUE = Kind(labels.KUEUE_API_VERSION, "LocalQueue")
