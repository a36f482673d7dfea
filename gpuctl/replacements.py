"""Which property changes make a provider replace a resource, decided the way the provider's own Diff decides.

Kubernetes rules are pulumi-kubernetes v4's (provider/pkg/provider/diff.go `forceNewProperties`, provider.go
`Diff` for delete-before-replace, helm_release.go `Diff` for Helm releases): a change at or below a force-new
path replaces the object. A path segment `[*]` matches any list index. AWS rules are the `ForceNew` fields of
the terraform-provider-aws schemas that pulumi-aws 7 bridges (internal/service/ec2/ec2_launch_template.go,
autoscaling/group.go, autoscaling/lifecycle_hook.go, ec2/ec2_placement_group.go, iam/role.go, ssm/document.go,
sqs/queue.go, sqs/queue_policy.go, events/rule.go, events/target.go, iam/policy.go,
iam/role_policy_attachment.go).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

_METADATA = ("metadata.name", "metadata.namespace")
_SELECTOR = ("spec.selector",)  # with its matchLabels and matchExpressions, being a prefix
_CONTAINER_FIELDS = ("args", "command", "env", "image", "imagePullPolicy", "lifecycle", "livenessProbe", "ports",
                     "readinessProbe", "resources", "securityContext", "stdin", "stdinOnce", "terminationMessagePath",
                     "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts", "workingDir")
_POD = (
    *(f"spec.{field}" for field in (
        "affinity", "automountServiceAccountToken", "dnsConfig", "dnsPolicy", "enableServiceLinks", "hostAliases",
        "hostIPC", "hostNetwork", "hostPID", "hostname", "imagePullSecrets", "nodeName", "nodeSelector", "overhead",
        "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "restartPolicy", "runtimeClassName",
        "schedulerName", "securityContext", "serviceAccount", "serviceAccountName", "shareProcessNamespace",
        "subdomain", "terminationGracePeriodSeconds", "volumes")),
    *(f"spec.{containers}[*].{field}" for containers in ("containers", "initContainers")
      for field in _CONTAINER_FIELDS),
)

# (API group, kind) -> force-new paths besides metadata.name and metadata.namespace; the group "core" is "".
# The table in diff.go lists apps, batch and rbac kinds for every served version, so the version is not needed.
KUBERNETES_FORCE_NEW: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps", "DaemonSet"): _SELECTOR,
    ("apps", "Deployment"): _SELECTOR,
    ("apps", "StatefulSet"): ("spec.podManagementPolicy", "spec.revisionHistoryLimit", "spec.serviceName",
                              "spec.volumeClaimTemplates", *_SELECTOR),
    ("batch", "Job"): ("spec.completions", "spec.parallelism", "spec.template", *_SELECTOR),
    ("rbac.authorization.k8s.io", "RoleBinding"): ("roleRef",),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): ("roleRef",),
    ("storage.k8s.io", "StorageClass"): ("parameters", "provisioner"),
    ("", "PersistentVolumeClaim"): ("spec.accessModes", "spec.storageClassName", "spec.volumeName", *_SELECTOR),
    ("", "Pod"): _POD,
    ("", "ResourceQuota"): ("spec.scopes",),
    ("", "Service"): ("spec.clusterIP",),
    # Replaced on any data change unless the provider sets enableSecretMutable / enableConfigMapMutable (or the
    # object is immutable, when it is replaced regardless).
    ("", "Secret"): ("type", "stringData", "data"),
    ("", "ConfigMap"): ("binaryData", "data"),
}
HELM_RELEASE_FORCE_NEW = ("name", "namespace")
# The program's explicit providers. pulumi-kubernetes (DiffConfig, provider.go) replaces its provider, and with it
# every object, only when a set `clusterIdentifier` changes; a new region puts every AWS resource elsewhere.
PROVIDER_FORCE_NEW = {"pulumi:providers:kubernetes": ("clusterIdentifier",), "pulumi:providers:aws": ("region",)}
# Everything else of these resources updates in place: a launch template change makes a new template version,
# an Auto Scaling Group takes a new template, sizes or tags with UpdateAutoScalingGroup.
AWS_FORCE_NEW: dict[str, tuple[str, ...]] = {
    "aws:ec2/launchTemplate:LaunchTemplate": ("name", "namePrefix"),
    "aws:autoscaling/group:Group": ("name", "namePrefix", "initialLifecycleHooks"),
    "aws:autoscaling/lifecycleHook:LifecycleHook": ("name",),
    "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy", "partitionCount", "spreadLevel"),
    "aws:iam/role:Role": ("name", "namePrefix", "path"),
    "aws:ssm/document:Document": ("name",),
    # A queue's attributes and a rule's pattern update in place; a target is re-put under its id.
    "aws:sqs/queue:Queue": ("name", "namePrefix", "fifoQueue"),
    "aws:sqs/queuePolicy:QueuePolicy": ("queueUrl",),
    "aws:cloudwatch/eventRule:EventRule": ("name", "namePrefix", "eventBusName"),
    "aws:cloudwatch/eventTarget:EventTarget": ("rule", "targetId", "eventBusName"),
    # A policy document change is a new policy version; its description cannot change.
    "aws:iam/policy:Policy": ("name", "namePrefix", "path", "description"),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": ("role", "policyArn"),
}


@dataclass(frozen=True)
class ProviderSettings:
    """The provider options that change its replace rules (pulumi-kubernetes `Provider` arguments)."""

    enable_config_map_mutable: bool = False
    enable_secret_mutable: bool = False


def _kubernetes_parts(resource_type: str) -> tuple[str, str] | None:
    """('apps', 'DaemonSet') for 'kubernetes:apps/v1:DaemonSet'; '' is the core group."""
    package, _, rest = resource_type.partition(":")
    if package != "kubernetes" or rest.count(":") != 1:
        return None
    group_version, kind = rest.split(":")
    group = group_version.rsplit("/", 1)[0]
    return ("" if group == "core" else group), kind


def force_new_paths(resource_type: str, inputs: dict[str, Any],
                    settings: ProviderSettings = ProviderSettings()) -> tuple[str, ...]:
    """The paths whose change makes the provider replace this resource."""
    if resource_type == "kubernetes:helm.sh/v3:Release":
        return HELM_RELEASE_FORCE_NEW
    if resource_type in PROVIDER_FORCE_NEW:
        return PROVIDER_FORCE_NEW[resource_type]
    parts = _kubernetes_parts(resource_type)
    if parts is None:
        return AWS_FORCE_NEW.get(resource_type, ())
    immutable = inputs.get("immutable") is True
    if parts == ("", "Secret") and settings.enable_secret_mutable and not immutable:
        return (*_METADATA, "type")
    if parts == ("", "ConfigMap") and settings.enable_config_map_mutable and not immutable:
        return _METADATA
    return (*_METADATA, *KUBERNETES_FORCE_NEW.get(parts, ()))


@cache
def _matcher(prefix: str) -> re.Pattern[str]:
    body = re.escape(prefix).replace(r"\[\*\]", r"\[\d+\]")
    return re.compile(rf"^{body}(?=$|[.\[])")


def replace_reasons(resource_type: str, inputs: dict[str, Any], changed_paths: list[str],
                    extra: list[str] = (), settings: ProviderSettings = ProviderSettings()) -> list[str]:
    """The changed paths that force a replace: the provider's own, plus the resource's `replaceOnChanges`."""
    prefixes = [*force_new_paths(resource_type, inputs, settings), *extra]
    return sorted({path for path in changed_paths if any(_matcher(prefix).match(path) for prefix in prefixes)})


def deletes_before_replace(resource_type: str, old_inputs: dict[str, Any], new_inputs: dict[str, Any]) -> bool:
    """pulumi-kubernetes deletes first when the replacement keeps its explicit name and namespace (provider.go)."""
    if _kubernetes_parts(resource_type) is None or resource_type == "kubernetes:helm.sh/v3:Release":
        return False
    old_meta, new_meta = old_inputs.get("metadata") or {}, new_inputs.get("metadata") or {}
    return bool(new_meta.get("name")) and (old_meta.get("name"), old_meta.get("namespace")) == (
        new_meta.get("name"), new_meta.get("namespace"))
