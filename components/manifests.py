"""Small builders every component shares: object metadata, Helm releases, children's options."""

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


def helm_release(resource_name: str, chart: labels.HelmChart, namespace: str, values: dict[str, Any],
                 opts: pulumi.ResourceOptions, mirror: str | None = None) -> k8s.helm.v3.Release:
    """A pinned chart installed as a Helm release named after the chart; every value shows in the plan.

    `mirror` (the stack's `charts.mirror`) serves the same chart and version in place of its public repository.

    `pulumi up` waits for the release's workloads to become ready (Helm's own wait), up to 10 minutes; the
    release is replaced only when its name or namespace changes (helm_release.go), anything else upgrades it.
    """
    chart = chart.from_mirror(mirror)
    oci = chart.repository.startswith("oci://")
    return k8s.helm.v3.Release(
        resource_name, name=chart.chart, namespace=namespace, version=chart.version, values=values,
        chart=f"{chart.repository}/{chart.chart}" if oci else chart.chart,
        repository_opts=None if oci else k8s.helm.v3.RepositoryOptsArgs(repo=chart.repository),
        timeout=600, opts=opts)


def child_options(parent: pulumi.Resource, opts: pulumi.ResourceOptions | None,
                  *depends_on: pulumi.Resource) -> pulumi.ResourceOptions:
    """Options for a component's children: parented to it, and waiting for whatever the component waits for.

    The engine does not pass a component's `depends_on` down to its children, so without this a MachineSet
    inside a pool would not wait for the driver the pool depends on.
    """
    inherited = list(opts.depends_on or []) if opts else []
    return pulumi.ResourceOptions(parent=parent, depends_on=[*inherited, *depends_on])


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def run_once(account: str, deadline_seconds: int, container: dict[str, Any],
             pod_security: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec of a Job the stack runs once, as `account`: two retries, its deadline, non-root under the runtime's
    seccomp profile (and `pod_security`), its one container without privilege escalation or capabilities."""
    return {
        "backoffLimit": 2,
        "activeDeadlineSeconds": deadline_seconds,
        "template": {"spec": {
            "serviceAccountName": account,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
                                **(pod_security or {})},
            "containers": [{**container, "securityContext": RESTRICTED_CONTAINER}],
        }},
    }
