"""components.kinds: a tenant's objects reach the engine as the provider's typed classes would send them."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components import kinds
from gpuctl import runtime

METADATA = {"name": "team-a", "namespace": "team-a", "labels": {"app.kubernetes.io/managed-by": "gpu-platform"},
            "annotations": {"pulumi.com/waitFor": '["jsonpath={.status.hard.pods}=4"]'}}
QUEUE = {"metadata": METADATA, "spec": {"clusterQueue": "team-a"}}

# Each kind here, its typed class (a custom object's: `apiextensions.CustomResource`) and the fields of an object
# of it (as the API names them, and as the typed class's keyword arguments).
CASES = [
    (kinds.NAMESPACE, k8s.core.v1.Namespace, {"metadata": METADATA}, {"metadata": METADATA}),
    (kinds.RESOURCE_QUOTA, k8s.core.v1.ResourceQuota,
     {"metadata": METADATA, "spec": {"hard": {"pods": "4"}, "scopeSelector": {"matchExpressions": [
         {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu-high"]}]}}},
     {"metadata": METADATA, "spec": {"hard": {"pods": "4"}, "scopeSelector": {"matchExpressions": [
         {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu-high"]}]}}}),
    (kinds.LIMIT_RANGE, k8s.core.v1.LimitRange,
     {"metadata": METADATA, "spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]}},
     {"metadata": METADATA, "spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]}}),
    (kinds.NETWORK_POLICY, k8s.networking.v1.NetworkPolicy,
     {"metadata": METADATA, "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [
         {"podSelector": {}}]}]}},
     {"metadata": METADATA, "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [
         {"podSelector": {}}]}]}}),
    (kinds.ROLE_BINDING, k8s.rbac.v1.RoleBinding,
     {"metadata": METADATA, "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"}],
      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-tenant"}},
     {"metadata": METADATA, "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "g"}],
      "role_ref": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-tenant"}}),
    *((kind, lambda name, opts, kind=kind, **fields: k8s.apiextensions.CustomResource(
        name, api_version=kind.api_version, kind=kind.kind, opts=opts, **fields), QUEUE, QUEUE)
      for kind in (kinds.CLUSTER_QUEUE, kinds.LOCAL_QUEUE)),
]

REGISTER = runtime.RecordingMonitor.RegisterResource


def requests(monkeypatch, register: Callable[[pulumi.ResourceOptions], pulumi.Resource]) -> list:
    """The RegisterResource requests of a program that registers, under a component, a namespace and then
    `register(options)`, the options naming the component as parent, the namespace as dependency, and protect."""
    sent = []

    def recorded(monitor, request):
        sent.append(request)
        return REGISTER(monitor, request)

    monkeypatch.setattr(runtime.RecordingMonitor, "RegisterResource", recorded)

    def program() -> None:
        parent = pulumi.ComponentResource("gpu-platform:index:TenantQuota", "team-a")
        namespace = k8s.core.v1.Namespace("before", metadata={"name": "before"},
                                          opts=pulumi.ResourceOptions(parent=parent))
        register(pulumi.ResourceOptions(parent=parent, depends_on=[namespace], protect=True))

    runtime.run_program("dev", {}, [], program)
    return sent


@pytest.mark.parametrize(("kind", "typed", "fields", "arguments"), CASES, ids=[case[0].kind for case in CASES])
def test_a_kind_sends_the_request_its_typed_class_sends(monkeypatch, kind, typed, fields, arguments) -> None:
    # Fails after a provider upgrade that changes a class's type token, version or aliases: read the class's
    # `_internal_init` again and update components/kinds.py.
    ours = requests(monkeypatch, lambda opts: kind("team-a-object", opts, **fields))
    theirs = requests(monkeypatch, lambda opts: typed("team-a-object", opts=opts, **arguments))
    assert ours[-1].type == kind.token == theirs[-1].type
    assert ours[-1].protect and ours[-1].dependencies and ours[-1].parent
    assert ours == theirs

