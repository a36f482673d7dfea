"""gpuctl.replacements: replace decisions as pulumi-kubernetes v4 makes them (provider/pkg/provider/diff.go)."""

from __future__ import annotations

import pytest

from gpuctl.replacements import ProviderSettings, deletes_before_replace, replace_reasons

DAEMONSET = "kubernetes:apps/v1:DaemonSet"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"


def reasons(resource_type: str, *paths: str, inputs=None, **settings) -> list[str]:
    return replace_reasons(resource_type, inputs or {}, list(paths), settings=ProviderSettings(**settings))


@pytest.mark.parametrize("resource_type", [DAEMONSET, "kubernetes:nvidia.com/v1alpha1:NVIDIADriver",
                                           "kubernetes:core/v1:Namespace"])
def test_a_new_name_or_namespace_replaces_every_kubernetes_object(resource_type):
    # metadataForceNewProperties(".metadata") applies to every kind.
    assert reasons(resource_type, "metadata.name", "metadata.labels.a") == ["metadata.name"]
    assert reasons(resource_type, "metadata.namespace") == ["metadata.namespace"]


def test_a_daemonset_selector_replaces_but_its_pod_template_updates_in_place():
    # var daemonset = .spec.selector (+ labelSelectorForceNewProperties); the template is not force-new.
    assert reasons(DAEMONSET, "spec.selector.matchLabels.app") == ["spec.selector.matchLabels.app"]
    assert reasons(DAEMONSET, "spec.template.spec.containers[0].image", "spec.updateStrategy.type") == []


def test_a_job_template_replaces():
    # var job = .spec.completions, .spec.parallelism, .spec.selector, .spec.template
    assert reasons("kubernetes:batch/v1:Job", "spec.template.spec.containers[0].env[1].value",
                   "spec.backoffLimit") == ["spec.template.spec.containers[0].env[1].value"]


@pytest.mark.parametrize("kind", ["RoleBinding", "ClusterRoleBinding"])
def test_a_binding_role_ref_replaces(kind):
    # var roleBinding = .roleRef
    resource_type = f"kubernetes:rbac.authorization.k8s.io/v1:{kind}"
    assert reasons(resource_type, "roleRef.name", "subjects[0].name") == ["roleRef.name"]


def test_a_config_map_data_change_replaces_unless_the_provider_makes_config_maps_mutable():
    # forceNewProperties: ConfigMap .binaryData/.data unless enableConfigMapMutable (and not immutable).
    assert reasons(CONFIG_MAP, "data.config\\.yaml") == ["data.config\\.yaml"]
    assert reasons(CONFIG_MAP, "data.x", enable_config_map_mutable=True) == []
    assert reasons(CONFIG_MAP, "data.x", inputs={"immutable": True}, enable_config_map_mutable=True) == ["data.x"]


def test_a_secret_data_change_replaces_unless_the_provider_makes_secrets_mutable():
    # forceNewProperties: Secret .type/.stringData/.data unless enableSecretMutable; .type always (core table).
    assert reasons(SECRET, "stringData.x", "type") == ["stringData.x", "type"]
    assert reasons(SECRET, "stringData.x", "type", enable_secret_mutable=True) == ["type"]


def test_pod_container_fields_match_any_index():
    # containerForceNewProperties(".spec.containers[*]", ...)
    assert reasons("kubernetes:core/v1:Pod", "spec.containers[3].image", "metadata.labels.x") == [
        "spec.containers[3].image"]


def test_a_resource_quota_replaces_on_scopes_only():
    assert reasons("kubernetes:core/v1:ResourceQuota", "spec.hard.requests\\.nvidia\\.com/gpu", "spec.scopes") == [
        "spec.scopes"]


def test_a_prefix_matches_whole_segments_only():
    assert reasons(DAEMONSET, "spec.selectorX") == []


def test_a_helm_release_replaces_on_name_or_namespace_only():
    # helm_release.go Diff: forceNewFields := []string{".name", ".namespace"}
    release = "kubernetes:helm.sh/v3:Release"
    assert reasons(release, "version", "values.driver.enabled", "namespace") == ["namespace"]


def test_replace_on_changes_adds_to_the_provider_rules():
    assert replace_reasons(DAEMONSET, {}, ["spec.template.metadata"], extra=["spec.template"]) == [
        "spec.template.metadata"]


def test_a_named_kubernetes_object_is_deleted_before_its_replacement():
    # provider.go Diff: deleteBeforeReplace when named, not autonamed, same name and namespace.
    same = {"metadata": {"name": "a", "namespace": "n"}}
    assert deletes_before_replace(DAEMONSET, same, same)
    assert not deletes_before_replace(DAEMONSET, same, {"metadata": {"name": "b", "namespace": "n"}})
    assert not deletes_before_replace("aws:ec2/launchTemplate:LaunchTemplate", {}, {})


def test_a_launch_template_change_is_a_new_version_unless_its_name_changes():
    # aws_launch_template: name, name_prefix ForceNew; template data updates make a new version.
    launch_template = "aws:ec2/launchTemplate:LaunchTemplate"
    assert reasons(launch_template, "imageId", "userData", "tagSpecifications[0].tags.a") == []
    assert reasons(launch_template, "name") == ["name"]


def test_an_auto_scaling_group_is_replaced_only_for_its_name_or_initial_lifecycle_hooks():
    # aws_autoscaling_group: name, name_prefix, initial_lifecycle_hook ForceNew.
    group = "aws:autoscaling/group:Group"
    assert reasons(group, "desiredCapacity", "launchTemplate.version", "tags[2].value") == []
    assert reasons(group, "initialLifecycleHooks[0].heartbeatTimeout") == ["initialLifecycleHooks[0].heartbeatTimeout"]


def test_a_placement_group_strategy_change_replaces_it():
    # aws_placement_group: name, strategy, partition_count, spread_level ForceNew; tags update.
    assert reasons("aws:ec2/placementGroup:PlacementGroup", "strategy", "tags.a") == ["strategy"]


def test_a_lifecycle_hook_is_replaced_only_for_its_name():
    # aws_autoscaling_lifecycle_hook: name ForceNew; its heartbeat and default result update in place.
    assert reasons("aws:autoscaling/lifecycleHook:LifecycleHook", "heartbeatTimeout", "defaultResult") == []
    assert reasons("aws:autoscaling/lifecycleHook:LifecycleHook", "name") == ["name"]


def test_a_queue_is_replaced_for_its_name_or_fifo_only():
    # aws_sqs_queue: name, name_prefix, fifo_queue ForceNew; attributes are set in place.
    queue = "aws:sqs/queue:Queue"
    assert reasons(queue, "messageRetentionSeconds", "sqsManagedSseEnabled", "policy") == []
    assert reasons(queue, "name", "fifoQueue") == ["fifoQueue", "name"]


def test_a_queue_policy_is_replaced_only_for_another_queue():
    # aws_sqs_queue_policy: queue_url ForceNew.
    assert reasons("aws:sqs/queuePolicy:QueuePolicy", "policy") == []
    assert reasons("aws:sqs/queuePolicy:QueuePolicy", "queueUrl") == ["queueUrl"]


def test_an_event_rule_pattern_change_updates_it_in_place():
    # aws_cloudwatch_event_rule: name, name_prefix, event_bus_name ForceNew.
    rule = "aws:cloudwatch/eventRule:EventRule"
    assert reasons(rule, "eventPattern", "description") == []
    assert reasons(rule, "name", "eventBusName") == ["eventBusName", "name"]


def test_an_event_target_is_replaced_for_its_rule_or_id():
    # aws_cloudwatch_event_target: rule, target_id, event_bus_name ForceNew; its arn updates in place.
    target = "aws:cloudwatch/eventTarget:EventTarget"
    assert reasons(target, "arn") == []
    assert reasons(target, "rule", "targetId") == ["rule", "targetId"]


def test_an_iam_policy_document_change_is_a_new_version():
    # aws_iam_policy: name, name_prefix, path, description ForceNew; the document makes a new default version.
    policy = "aws:iam/policy:Policy"
    assert reasons(policy, "policy") == []
    assert reasons(policy, "description", "path") == ["description", "path"]


def test_a_role_policy_attachment_is_replaced_for_another_role_or_policy():
    # aws_iam_role_policy_attachment: role, policy_arn ForceNew (it has no update).
    attachment = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
    assert reasons(attachment, "role", "policyArn") == ["policyArn", "role"]


def test_unknown_types_have_no_provider_rule():
    assert reasons("random:index/randomId:RandomId", "byteLength") == []


# -- every type the program registers has its provider's rule --------------------------------------------------------

REGISTERED = {
    # type -> the force-new paths the provider applies to it
    "kubernetes:helm.sh/v3:Release": ("name", "namespace"),
    "kubernetes:nvidia.com/v1alpha1:NVIDIADriver": ("metadata.name", "metadata.namespace"),
    "kubernetes:nvidia.com/v1:ClusterPolicy": ("metadata.name", "metadata.namespace"),
    "kubernetes:operators.coreos.com/v1:OperatorGroup": ("metadata.name", "metadata.namespace"),
    "kubernetes:operators.coreos.com/v1alpha1:Subscription": ("metadata.name", "metadata.namespace"),
    "kubernetes:nfd.openshift.io/v1:NodeFeatureDiscovery": ("metadata.name", "metadata.namespace"),
    "kubernetes:rbac.authorization.k8s.io/v1:Role": ("metadata.name", "metadata.namespace"),
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": ("metadata.name", "metadata.namespace", "roleRef"),
    "kubernetes:networking.k8s.io/v1:NetworkPolicy": ("metadata.name", "metadata.namespace"),
    "kubernetes:core/v1:ConfigMap": ("metadata.name", "metadata.namespace", "binaryData", "data"),
}


@pytest.mark.parametrize("resource_type", sorted(REGISTERED))
def test_the_rule_of_each_type_the_program_registers(resource_type):
    from gpuctl.replacements import force_new_paths

    assert force_new_paths(resource_type, {}) == REGISTERED[resource_type]


def test_a_job_template_change_of_the_program_is_a_replace():
    from gpuctl.replacements import force_new_paths

    assert {"spec.template", "spec.selector", "metadata.name"} <= set(force_new_paths("kubernetes:batch/v1:Job", {}))


def test_every_registered_type_is_a_kubernetes_object_a_helm_release_or_a_known_aws_resource(dev_plan, prod_plan):
    from gpuctl.replacements import AWS_FORCE_NEW, force_new_paths

    types = {r["type"] for plan in (dev_plan, prod_plan) for r in plan.resources if r["custom"]}
    assert set(REGISTERED) <= types | {"kubernetes:batch/v1:Job"}
    for resource_type in types:
        paths = force_new_paths(resource_type, {})
        if resource_type.startswith("kubernetes:"):
            assert paths[:2] in (("metadata.name", "metadata.namespace"), ("name", "namespace")), resource_type
        elif resource_type.startswith("pulumi:providers:"):
            assert paths, resource_type
        else:
            assert resource_type in AWS_FORCE_NEW and paths, resource_type
