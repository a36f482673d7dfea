"""Small builders for manifest fragments that every node agent repeats."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import labels


def metadata(name: str, namespace: str | None = None, *, extra_labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Object metadata carrying the platform's managed-by label."""
    meta: dict[str, Any] = {"name": name, "labels": {**labels.MANAGED_BY, **(extra_labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


def host_path(name: str, path: str, kind: str | None = None) -> dict[str, Any]:
    """A hostPath volume."""
    source: dict[str, Any] = {"path": path}
    if kind:
        source["type"] = kind
    return {"name": name, "hostPath": source}


def node_agent_pod(name: str, *, service_account: str, containers: list[dict[str, Any]],
                   volumes: list[dict[str, Any]] | None = None, node_selector: dict[str, str] | None = None,
                   **spec: Any) -> dict[str, Any]:
    """Pod spec of an agent that runs on every GPU node: critical priority, tolerates the GPU taint."""
    return {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": spec.pop("automountServiceAccountToken", False),
        "priorityClassName": labels.NODE_CRITICAL_PRIORITY,
        "nodeSelector": node_selector or dict(labels.GPU_NODE_SELECTOR),
        "tolerations": [dict(labels.GPU_TOLERATION)],
        "containers": containers,
        "volumes": volumes or [],
        **spec,
    }


def daemonset_spec(app: str, pod_spec: dict[str, Any], *, strategy: dict[str, Any] | None = None,
                   extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """DaemonSet spec whose selector and template share the app labels."""
    selector = {"app.kubernetes.io/name": app, **(extra_labels or {})}
    return {
        "selector": {"matchLabels": selector},
        "updateStrategy": strategy or {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "template": {"metadata": {"labels": selector}, "spec": pod_spec},
    }


def privileged_scc_binding(resource_name: str, namespace: str, accounts: list[str], opts: Any) -> None:
    """OpenShift: let these service accounts run privileged, hostPath pods (the privileged SCC) in one namespace."""
    k8s.rbac.v1.RoleBinding(
        resource_name, metadata=metadata("gpu-platform-privileged-scc", namespace),
        subjects=[{"kind": "ServiceAccount", "name": account, "namespace": namespace} for account in accounts],
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                  "name": "system:openshift:scc:privileged"},
        opts=opts)


def child_options(parent: pulumi.Resource, opts: pulumi.ResourceOptions | None,
                  *depends_on: pulumi.Resource) -> pulumi.ResourceOptions:
    """Options for a component's children: parented to it, and waiting for whatever the component waits for.

    The engine does not pass a component's `depends_on` down to its children, so without this a MachineSet
    inside a pool would not wait for the driver the pool depends on.
    """
    inherited = list(opts.depends_on or []) if opts else []
    return pulumi.ResourceOptions(parent=parent, depends_on=[*inherited, *depends_on])
