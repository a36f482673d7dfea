"""stacks.config: the shipped stacks validate, and every mistake is one line naming the field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, get_args

import pytest
import yaml

from fleet.kernels import KernelTarget
from stacks.config import MAX_ERROR_CHARACTERS, ConfigError, StackConfig, config_from_stack_file, parse_stack_config
from tests.conftest import ROOT, config_values, stack_config

Values = dict[str, Any]


def config_error(mutate: Callable[[Values], Any], stack: str = "dev") -> str:
    """Apply `mutate` to a shipped stack's (or an example's, examples/Pulumi.<stack>.yaml) config and return the
    ConfigError it causes, checked to be one line."""
    example = ROOT / "examples" / f"Pulumi.{stack}.yaml"
    values = ({key.removeprefix("gpu-platform:"): value for key, value in yaml.safe_load(example.read_text())[
        "config"].items()} if example.exists() else config_values(stack))
    mutate(values)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(values)
    message = str(caught.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert message.startswith("gpu-platform"), message
    return message


def pool(values: Values, index: int = 0) -> Values:
    return values["nodePools"][index]


def set_at(values: Values, path: tuple, value: Any) -> None:
    """Set the value at a path of keys and indexes, making the mappings on the way."""
    target = values
    for part in path[:-1]:
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    target[path[-1]] = value


def dotted(path: tuple) -> str:
    return "gpu-platform:" + path[0] + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[1:])


# -- the shipped stacks -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "flavor", "pools", "tenants"), [
    ("dev", "openshift", ["t4-inference", "a100-training"], ["vision", "nlp-research"]),
    ("prod", "kubernetes", ["l4-inference", "a10g-batch", "h100-training"], ["search-ranking", "llm-training", "analytics"]),
])
def test_shipped_stack_parses(stack: str, flavor: str, pools: list[str], tenants: list[str]) -> None:
    config = parse_stack_config(config_values(stack))

    assert isinstance(config, StackConfig)
    assert config.cluster.flavor == flavor
    assert [p.name for p in config.node_pools] == pools
    assert [t.name for t in config.tenants] == tenants


def test_openshift_stack_keeps_its_infrastructure_id() -> None:
    assert parse_stack_config(config_values("dev")).cluster.infrastructure_id == "dev-ocp-7xk2p"


def test_defaults_follow_current_nvidia_releases() -> None:
    values = config_values("dev")
    del values["driver"]

    driver = parse_stack_config(values).driver

    assert driver.version.startswith(f"{driver.branch}.")
    assert driver.repository == "nvcr.io/nvidia"


# -- capacity -----------------------------------------------------------------------------------------------------


def test_pool_capacity_is_replicas_times_gpus_per_instance() -> None:
    config = parse_stack_config(config_values("dev"))

    capacity = {p.name: p.gpu_capacity for p in config.node_pools}

    assert capacity == {"t4-inference": 2 * 1, "a100-training": 1 * 8}
    assert config.gpu_capacity == 10


@pytest.mark.parametrize(("instance_type", "replicas", "gpus"), [
    ("g4dn.xlarge", 3, 3), ("g4dn.12xlarge", 3, 12), ("g5.48xlarge", 2, 16), ("p5.48xlarge", 0, 0),
])
def test_capacity_follows_the_instance_catalog(instance_type: str, replicas: int, gpus: int) -> None:
    values = config_values("prod")
    pool(values).update(instanceType=instance_type, replicas=replicas, minReplicas=0, maxReplicas=None)

    assert parse_stack_config(values).node_pools[0].gpu_capacity == gpus


# -- kernels ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "os", "kernel"), [
    ("prod", "ubuntu22.04", "6.8.0-1021"),
    ("prod", "ubuntu22.04", "6.8.0-aws"),
    ("prod", "ubuntu24.04", "5.14.0-427.50.1.el9_4.x86_64"),
    ("prod", "ubuntu22.04", "6.8.0-1021-aws "),
    ("prod", "ubuntu24.04", "6.8.0-1019"),
])
def test_malformed_kernel_names_the_pool_kernel_and_os(stack: str, os: str, kernel: str) -> None:
    message = config_error(lambda v: pool(v, 1).update(os=os, kernel=kernel), stack)

    assert message.startswith("gpu-platform:nodePools[1]:")
    assert f"kernel {kernel!r}" in message
    assert os in message
    assert "e.g." in message  # shows what a kernel of that OS looks like


def test_unknown_os_lists_the_supported_ones() -> None:
    message = config_error(lambda v: pool(v).update(os="centos7"), "prod")

    assert message.startswith("gpu-platform:nodePools[0]:")
    assert "'centos7'" in message and "ubuntu22.04" in message and "ubuntu24.04" in message
    assert "rhcos" not in message  # RHCOS is never a pool's OS


@pytest.mark.parametrize("drop", [["os"], ["kernel"], ["os", "kernel"]])
def test_kubernetes_pool_needs_both_os_and_kernel(drop: list[str]) -> None:
    def bare(values: Values) -> None:
        for field in drop:
            pool(values, 1).pop(field)

    message = config_error(bare, "prod")

    assert message.startswith("gpu-platform:") and "'a10g-batch' needs os and kernel" in message
    assert message.endswith(f"set {' and '.join(drop)}")


def test_pools_sharing_a_kernel_share_a_declared_kernel() -> None:
    config = parse_stack_config(config_values("prod"))

    assert config.declared_kernels == {KernelTarget("ubuntu22.04", "6.8.0-1021-aws"),
                                       KernelTarget("ubuntu22.04", "6.8.0-1019-aws")}
    assert config.kernel_target(config.node_pools[1]) == KernelTarget("ubuntu22.04", "6.8.0-1021-aws")


# -- instance types -----------------------------------------------------------------------------------------------


def test_unknown_instance_type_suggests_the_closest() -> None:
    message = config_error(lambda v: pool(v).update(instanceType="g4dn.xlarg"))

    assert message.startswith("gpu-platform:nodePools[0]:")
    assert "instanceType 'g4dn.xlarg'" in message
    assert "did you mean 'g4dn.xlarge'?" in message


def test_instance_type_without_a_close_match_lists_the_known_ones() -> None:
    message = config_error(lambda v: pool(v).update(instanceType="zzz"))

    assert "instanceType 'zzz'" in message
    assert "p4d.24xlarge" in message and "g6.xlarge" in message


# -- names --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["nodePools", "tenants"])
def test_duplicate_names_name_the_list_and_the_name(field: str) -> None:
    def duplicate(values: Values) -> None:
        values[field][1]["name"] = values[field][0]["name"]

    message = config_error(duplicate)

    assert field in message
    name = config_values("dev")[field][0]["name"]
    assert f"{name!r} appears twice" in message


@pytest.mark.parametrize(("path", "bad"), [
    (("cluster", "name"), "Dev_OCP"),
    (("nodePools", 0, "name"), "T4-Inference"),
    (("nodePools", 0, "name"), "-t4"),
    (("nodePools", 0, "name"), "t4-"),
    (("nodePools", 0, "name"), "a" * 31),
    (("tenants", 1, "name"), "nlp.research"),
    (("tenants", 1, "name"), "x" * 51),
])
def test_names_must_be_dns_1123_labels(path: tuple, bad: str) -> None:
    def set_name(values: Values) -> None:
        target = values
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = bad

    message = config_error(set_name)

    where = "gpu-platform:" + path[0] + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[1:])
    assert message.startswith(f"{where}:"), message
    assert "DNS-1123" in message


@pytest.mark.parametrize("stack", ["prod", "dev", "queue", "queue-openshift"])
@pytest.mark.parametrize("namespace", ["default", "kube-system", "openshift-monitoring", "gpu-operator",
                                       "nvidia-gpu-operator", "node-feature-discovery", "openshift-nfd",
                                       "kueue-system", "openshift-kueue-operator", "cert-manager",
                                       "cert-manager-operator", "gpu-platform-admission-gate",
                                       "gpu-platform-admission-probe"])
def test_tenant_cannot_take_a_system_or_operator_namespace(namespace: str, stack: str) -> None:
    """In either flavor and mode: a tenant of that name would be a second Namespace resource, or put the tenant's
    role into an operator's namespace."""
    message = config_error(lambda v: v["tenants"][0].update(name=namespace), stack)

    assert message.startswith(f"gpu-platform:tenants[0].name: {namespace!r} is a system namespace"), message
    assert message.endswith("choose a team name")


@pytest.mark.parametrize(("stack", "monitoring", "namespace"), [
    ("prod", None, "monitoring"), ("prod", ["prometheus", "grafana"], "grafana")])
def test_tenant_cannot_take_a_monitoring_namespace(stack: str, monitoring: list[str] | None, namespace: str) -> None:
    """The monitoring namespaces may reach every tenant's pods: a tenant of that name would too."""
    def take(values: Values) -> None:
        if monitoring is not None:
            values["cluster"]["monitoringNamespaces"] = monitoring
        values["tenants"][1]["name"] = namespace

    message = config_error(take, stack)

    assert message.startswith(f"gpu-platform:tenants[1].name: {namespace!r} is a monitoring namespace"), message
    assert "cluster.monitoringNamespaces" in message and message.endswith("choose another team name")


def test_a_tenant_may_take_a_name_no_monitoring_namespace_has() -> None:
    values = config_values("prod")
    values["cluster"]["monitoringNamespaces"] = ["prometheus"]
    values["tenants"][0]["name"] = "monitoring"

    assert parse_stack_config(values).tenants[0].name == "monitoring"


@pytest.mark.parametrize(("group", "problem"), [
    ("system:authenticated", "is a Kubernetes system: group"),
    ("system:serviceaccounts", "is a Kubernetes system: group"),
    ("  ", "is blank"),
    ("", "is blank"),
    ("vision team", "has whitespace or control characters"),
    ("vision\x00team", "has whitespace or control characters"),
    ("vision-team\t", "has whitespace or control characters"),
])
def test_a_tenant_group_must_be_a_plain_team_group(group: str, problem: str) -> None:
    """The group gets edit in the tenant's namespace: system:authenticated would hand it to every user."""
    message = config_error(lambda v: v["tenants"][0].update(group=group))

    assert message.startswith(f"gpu-platform:tenants[0].group: {group!r} {problem}") and "; " in message, message



@pytest.mark.parametrize(("stack", "path", "value"), [
    ("prod", ("tenants", 2, "name"), "analytics\n"),
    ("prod", ("nodePools", 0, "name"), "l4-inference\n"),
    ("prod", ("cluster", "name"), "prod-eks\n"),
    ("prod", ("cluster", "instanceProfile"), "prod-gpu-node\n"),
    ("dev", ("cluster", "infrastructureId"), "dev-ocp-7xk2p\n"),
    ("dev", ("nodePools", 0, "availabilityZone"), "us-east-1a\n"),
])
def test_a_trailing_newline_is_refused_at_its_field(stack: str, path: tuple, value: str) -> None:
    """`$` matches before a final newline: each of these would have named a Kubernetes or AWS object wrongly."""
    message = config_error(lambda v: set_at(v, path, value), stack)

    assert message.startswith(f"{dotted(path)}: {value!r} "), message


@pytest.mark.parametrize(("stack", "mutate", "where"), [
    ("prod", lambda v: pool(v, 1).update(kernel="6.8.0-1019-aws\n"), "gpu-platform:nodePools[1]: kernel"),
    ("dev", lambda v: v["cluster"].update(kernel="5.14.0-427.87.1.el9_4.x86_64\n"), "gpu-platform:cluster: kernel"),
])
def test_a_kernel_with_a_trailing_newline_is_refused(stack: str, mutate: Callable[[Values], Any], where: str) -> None:
    message = config_error(mutate, stack)

    assert message.startswith(where) and "\\n' is not a" in message and "e.g." in message, message


def test_a_pod_sysctl_with_a_trailing_newline_is_refused() -> None:
    message = config_error(lambda v: profile(v)["podSysctls"].append("net.core.somaxconn\n"))

    assert "pool 'a100-training' profile.podSysctls: 'net.core.somaxconn\\n' is not a sysctl name" in message


@pytest.mark.parametrize(("stack", "path", "value"), [
    ("prod", ("nodePools", 1, "kernel"), "6.8.0-１０２１-aws"),
    ("dev", ("nodePools", 1, "profile", "reservedCpus"), "０-1,48-49"),
    ("dev", ("driver", "branch"), "５８０"),
    ("dev", ("cluster", "release"), "4.18.２４"),
    ("prod", ("cluster", "region"), "us-east-１"),
    ("prod", ("cluster", "instanceProfile"), "prod-gpu-nödé"),
    ("prod", ("cluster", "nodeTerminationHandlerRole"), "rôle"),
])
def test_non_ascii_digits_and_letters_are_refused_at_their_field(stack: str, path: tuple, value: str) -> None:
    """`\\d` and `\\w` match any Unicode digit or letter; none of these names an AWS, NVIDIA or kernel object."""
    message = config_error(lambda v: set_at(v, path, value), stack)

    where = dotted(path[:2]) + ": kernel" if path[-1] == "kernel" else dotted(path)
    assert message.startswith(where) and repr(value) in message, message



@pytest.mark.parametrize(("stack", "mutate", "where"), [
    ("prod", lambda v: pool(v, 1).update(kernel=f"6.8.0-{'1' * 60}-aws"), "gpu-platform:nodePools[1]: kernel"),
    ("dev", lambda v: v["cluster"].update(kernel=f"5.14.0-{'4' * 60}.el9_4.x86_64"), "gpu-platform:cluster: kernel"),
])
def test_a_kernel_too_long_for_a_label_value_is_refused(stack: str, mutate: Callable[[Values], Any],
                                                        where: str) -> None:
    """NFD labels nodes with their kernel: one over 63 characters can be no label value, so no node matches."""
    message = config_error(mutate, stack)

    assert message.startswith(where), message
    assert "characters long, over the 63 of a label value (feature.node.kubernetes.io/kernel-version.full)" in message


# -- counts -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "field"), [
    (("nodePools", 0), "replicas"),
    (("nodePools", 1), "minReplicas"),
    (("nodePools", 1), "maxReplicas"),
    (("tenants", 0), "gpus"),
])
def test_negative_counts_are_rejected(path: tuple, field: str) -> None:
    message = config_error(lambda v: v[path[0]][path[1]].update({field: -1}))

    assert message.startswith(f"gpu-platform:{path[0]}[{path[1]}].{field}:"), message
    assert "-1 is too small; use at least 0" in message


@pytest.mark.parametrize("huge", [10**30, 1e30])  # the Pulumi CLI reads an integer past int64 as a float
@pytest.mark.parametrize(("path", "field", "limit"), [
    (("nodePools", 0), "replicas", 1000), (("nodePools", 0), "maxReplicas", 1000), (("tenants", 0), "gpus", 100000)])
def test_absurd_counts_are_rejected(path: tuple, field: str, limit: int, huge: int | float) -> None:
    message = config_error(lambda v: v[path[0]][path[1]].update({field: huge}))

    assert message.startswith(f"gpu-platform:{path[0]}[{path[1]}].{field}:"), message
    assert f"too large; use at most {limit}" in message


@pytest.mark.parametrize("value", [True, False, 1.5, "2"])
@pytest.mark.parametrize(("stack", "path"), [
    ("prod", ("tenants", 0, "gpus")),
    ("prod", ("tenants", 0, "pods")),
    ("prod", ("nodePools", 0, "replicas")),
    ("prod", ("nodePools", 1, "minReplicas")),
    ("prod", ("nodePools", 1, "maxReplicas")),
    ("prod", ("nodePools", 0, "rootVolumeGib")),
    ("prod", ("nodePools", 0, "roll", "drainTimeoutSeconds")),
    ("prod", ("driver", "maxParallelUpgrades")),
    ("dev", ("devicePlugin", "timeSlicingReplicas")),
    ("dev", ("nodePools", 1, "profile", "hugepages", "1Gi")),
    ("onprem", ("tenants", 0, "networks", 0, "vlan")),
])
def test_counts_take_whole_numbers_only(stack: str, path: tuple, value: Any) -> None:
    """YAML's `true` is no count of 1, nor 1.5 one of 1; each is refused at its field."""
    message = config_error(lambda v: set_at(v, path, value), stack)

    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    assert message.startswith(f"{dotted(path)}: must be a number, not {shown}; write digits only"), message


@pytest.mark.parametrize(("path", "value"), [
    (("nodePools", 0, "roll", "checkpoints"), [True, 100]),
    (("cluster", "discovery", "timeoutSeconds"), True),
])
def test_true_is_no_number(path: tuple, value: Any) -> None:
    message = config_error(lambda v: set_at(v, path, value), "prod")

    where = dotted(path) + ("[0]" if isinstance(value, list) else "")
    assert message.startswith(f"{where}: must be a number, not true"), message


@pytest.mark.parametrize("value", [True, 1.5, 0, "0%", "150%", None])
def test_profile_max_unavailable_is_a_count_or_a_percentage(value: Any) -> None:
    message = config_error(lambda v: profile(v).update(maxUnavailable=value))

    assert message.startswith("gpu-platform:nodePools[1].profile.maxUnavailable: "), message
    assert 'is not a number of nodes (at least 1) nor a percentage; write e.g. 1 or "10%"' in message


@pytest.mark.parametrize("value", [3, "10%", "100%"])
def test_profile_max_unavailable_takes_counts_and_percentages(value: Any) -> None:
    values = config_values("dev")
    profile(values)["maxUnavailable"] = value

    assert parse_stack_config(values).node_pools[1].profile.max_unavailable == value


def test_replicas_must_lie_within_the_autoscaler_bounds() -> None:
    message = config_error(lambda v: pool(v).update(replicas=5, maxReplicas=4))

    assert message.startswith("gpu-platform:nodePools[0]:")
    assert "replicas" in message


# -- unknown keys -------------------------------------------------------------------------------------------------


def test_unknown_top_level_key_suggests_the_real_one() -> None:
    message = config_error(lambda v: v.update(nodePool=[]))

    assert message == "gpu-platform:nodePool: unknown config key; did you mean gpu-platform:nodePools?"


@pytest.mark.parametrize(("path", "key", "where"), [
    (("cluster",), "flavour", "gpu-platform:cluster.flavour"),
    (("cluster", "discovery"), "enable", "gpu-platform:cluster.discovery.enable"),
    (("nodePools", 1), "instance_type", "gpu-platform:nodePools[1].instance_type"),
    (("tenants", 0), "quota", "gpu-platform:tenants[0].quota"),
    (("driver",), "tag", "gpu-platform:driver.tag"),
    (("devicePlugin",), "timeSlicing", "gpu-platform:devicePlugin.timeSlicing"),
])
def test_unknown_nested_key_names_its_path(path: tuple, key: str, where: str) -> None:
    def add_key(values: Values) -> None:
        target = values
        for part in path:
            if isinstance(target, dict):
                target = target.setdefault(part, {})
            else:
                target = target[part]
        target[key] = 1

    message = config_error(add_key)

    assert message.startswith(f"{where}: unknown key"), message


# -- cluster ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    {"os": "ubuntu22.04", "kernel": "6.8.0-1021-aws"},
    {"kernel": "5.14.0-427.87.1.el9_4.x86_64"},
    {"os": "ubuntu24.04"},
])
def test_openshift_pool_must_not_set_os_or_kernel(fields: Values) -> None:
    message = config_error(lambda v: pool(v, 1).update(fields))

    assert "nodePools" in message and "'a100-training'" in message
    assert "sets os or kernel" in message and "cluster.release and cluster.kernel" in message


def test_rhcos_pool_says_openshift_pools_leave_os_out() -> None:
    """rhcos is refused as a pool OS on either flavor, with what to do on each."""
    for stack in ("dev", "prod"):
        message = config_error(
            lambda v: pool(v).update(os="rhcos4.18", kernel="5.14.0-427.87.1.el9_4.x86_64"), stack)

        assert message.startswith("gpu-platform:nodePools[0]:"), message
        assert "'rhcos4.18'" in message and "OpenShift pools leave os and kernel out" in message
        assert "ubuntu22.04" in message


def test_openshift_needs_an_infrastructure_id() -> None:
    message = config_error(lambda v: v["cluster"].pop("infrastructureId"))

    assert message.startswith("gpu-platform:cluster:")
    assert "infrastructureId is required" in message


def test_kubernetes_needs_subnets_security_groups_and_instance_profile() -> None:
    message = config_error(lambda v: v["cluster"].pop("subnetIds"), "prod")

    assert message.startswith("gpu-platform:cluster:")
    assert "subnetIds" in message


def test_unknown_flavor_is_rejected() -> None:
    message = config_error(lambda v: v["cluster"].update(flavor="eks"))

    assert message.startswith("gpu-platform:cluster.flavor:")
    assert "openshift" in message and "kubernetes" in message


@pytest.mark.parametrize("version", ["1.20", "1.29", "1.38", "v1.31", "1.31.3", "latest"])
def test_unsupported_kubernetes_version(version: str) -> None:
    message = config_error(lambda v: v["cluster"].update(kubernetesVersion=version), "prod")

    assert message.startswith("gpu-platform:cluster:")
    assert f"kubernetesVersion {version!r} is not supported" in message


def test_unquoted_kubernetes_version_names_the_field() -> None:
    message = config_error(lambda v: v["cluster"].update(kubernetesVersion=1.31), "prod")

    assert message.startswith("gpu-platform:cluster.kubernetesVersion:")


def test_kubernetes_needs_a_kubernetes_version() -> None:
    message = config_error(lambda v: v["cluster"].pop("kubernetesVersion"), "prod")

    assert message.startswith("gpu-platform:cluster:") and "kubernetesVersion is required" in message


@pytest.mark.parametrize("field", ["release", "kernel"])
def test_release_and_kernel_are_refused_on_kubernetes(field: str) -> None:
    value = {"release": "4.18.24", "kernel": "6.8.0-1021-aws"}[field]
    message = config_error(lambda v: v["cluster"].update({field: value}), "prod")

    assert message.startswith("gpu-platform:cluster:")
    assert "release and kernel belong to OpenShift clusters" in message


# -- OpenShift release --------------------------------------------------------------------------------------------


def test_openshift_node_kernel_comes_from_the_cluster() -> None:
    config = parse_stack_config(config_values("dev"))
    target = KernelTarget("rhcos4.18", "5.14.0-427.87.1.el9_4.x86_64")

    assert config.cluster.kernel_target == target
    assert {config.kernel_target(p) for p in config.node_pools} == {target}
    assert config.declared_kernels == {target}


@pytest.mark.parametrize("drop", ["release", "kernel"])
def test_openshift_requires_release_and_kernel(drop: str) -> None:
    message = config_error(lambda v: v["cluster"].pop(drop))

    assert message.startswith("gpu-platform:cluster:")
    assert "release and kernel are required on OpenShift" in message


@pytest.mark.parametrize(("release", "kernel", "kubernetes", "node_os"), [
    ("4.18.24", "5.14.0-427.87.1.el9_4.x86_64", "1.31", "rhcos4.18"),
    ("4.19.10", "5.14.0-570.28.1.el9_6.x86_64", "1.32", "rhel9"),
    ("4.20.1", "5.14.0-570.49.1.el9_6.x86_64", "1.33", "rhel9"),
    ("4.21.3", "5.14.0-570.49.1.el9_6.x86_64", "1.34", "rhel9"),
    ("4.22.9", "5.14.0-687.35.1.el9_8.x86_64", "1.35", "rhel9")])
def test_openshift_kubernetes_version_and_node_os_are_derived_from_the_release(
        release: str, kernel: str, kubernetes: str, node_os: str) -> None:
    values = config_values("dev")
    values["cluster"].update(release=release, kernel=kernel, nfdOperatorCsv="nfd.4.19.0-202509240837")

    cluster = parse_stack_config(values).cluster

    assert cluster.kubernetes_version == kubernetes
    assert cluster.node_os == node_os


@pytest.mark.parametrize(("release", "kernel", "rhel"), [
    ("4.19.10", "5.14.0-427.87.1.el9_4.x86_64", "RHEL 9.6"), ("4.22.9", "5.14.0-570.49.1.el9_6.x86_64", "RHEL 9.8"),
    ("4.18.24", "5.14.0-570.49.1.el9_6.x86_64", "RHEL 9.4")])
def test_a_kernel_of_another_rhel_minor_than_the_release_is_refused(release: str, kernel: str, rhel: str) -> None:
    message = config_error(lambda v: v["cluster"].update(release=release, kernel=kernel,
                                                          nfdOperatorCsv="nfd.4.19.0-202509240837"))

    assert message.startswith("gpu-platform:cluster:")
    assert (f"is not an RHCOS kernel release (uname -r) of OpenShift {release.rsplit('.', 1)[0]}, whose RHCOS is built "
            f"on {rhel}") in message


def test_openshift_kubernetes_version_that_matches_is_accepted() -> None:
    values = config_values("dev")
    values["cluster"]["kubernetesVersion"] = "1.31"

    assert parse_stack_config(values).cluster.kubernetes_version == "1.31"


@pytest.mark.parametrize("version", ["1.30", "1.32"])
def test_openshift_kubernetes_version_mismatch_is_refused(version: str) -> None:
    message = config_error(lambda v: v["cluster"].update(kubernetesVersion=version))

    assert message.startswith("gpu-platform:cluster:")
    assert f"kubernetesVersion {version!r} does not match OpenShift 4.18" in message and "1.31" in message


@pytest.mark.parametrize("release", ["4.16.30", "4.17.2", "4.23.0"])
def test_unsupported_openshift_release_is_refused(release: str) -> None:
    message = config_error(lambda v: v["cluster"].update(release=release))

    assert message.startswith("gpu-platform:cluster:")
    assert f"release {release!r} is not supported" in message and "4.18, 4.19, 4.20, 4.21, 4.22" in message


@pytest.mark.parametrize("release", ["4.18", "v4.18.24", "4.18.24-rc1"])
def test_malformed_openshift_release_names_the_field(release: str) -> None:
    message = config_error(lambda v: v["cluster"].update(release=release))

    assert message.startswith("gpu-platform:cluster.release:")


@pytest.mark.parametrize("kernel", ["6.8.0-1021-aws", "5.14.0-427.87.1.el9_4", "5.14.0-427.50.1.el8.x86_64"])
def test_openshift_kernel_must_be_an_rhcos_kernel(kernel: str) -> None:
    message = config_error(lambda v: v["cluster"].update(kernel=kernel))

    assert message.startswith("gpu-platform:cluster:")
    assert f"kernel {kernel!r} is not an RHCOS kernel release" in message and "e.g." in message


def test_nfd_operator_csv_defaults_for_4_18() -> None:
    cluster = parse_stack_config(config_values("dev")).cluster

    assert cluster.nfd_operator_csv is None
    assert cluster.nfd_csv.startswith("nfd.4.18.")


def test_nfd_operator_csv_is_required_for_a_minor_without_default() -> None:
    message = config_error(lambda v: v["cluster"].update(release="4.19.10", kernel="5.14.0-570.28.1.el9_6.x86_64"))

    assert message.startswith("gpu-platform:cluster:")
    assert "nfdOperatorCsv is required for OpenShift 4.19" in message


def test_nfd_operator_csv_set_is_pinned() -> None:
    values = config_values("dev")
    values["cluster"].update(release="4.19.10", nfdOperatorCsv="nfd.4.19.0-202510011234",
                             kernel="5.14.0-570.28.1.el9_6.x86_64")

    assert parse_stack_config(values).cluster.nfd_csv == "nfd.4.19.0-202510011234"


def test_malformed_nfd_operator_csv_names_the_field() -> None:
    message = config_error(lambda v: v["cluster"].update(nfdOperatorCsv="nfd.v4.18"))

    assert message.startswith("gpu-platform:cluster.nfdOperatorCsv:")


def test_machine_set_name_must_fit_a_label_value() -> None:
    """The MachineSet name is also the value of its machines' selector label: 63 characters at most."""
    def long_names(values: Values) -> None:
        values["cluster"].update(infrastructureId="dev-ocp-cluster-name-x-7xk2p", region="ap-southeast-1")
        pool(values).update(name="a" * 30, availabilityZone="ap-southeast-1a")

    message = config_error(long_names)

    assert "nodePools" in message and "'" + "a" * 30 + "'" in message
    assert "63" in message


# -- driver -------------------------------------------------------------------------------------------------------


def test_driver_version_must_be_on_its_branch() -> None:
    message = config_error(lambda v: v["driver"].update(branch="570", version="580.95.05"))

    assert message.startswith("gpu-platform:driver:")
    assert "version '580.95.05' is not on branch '570'" in message


@pytest.mark.parametrize(("stack", "precompiled"), [("dev", False), ("prod", True)])
def test_driver_precompiled_defaults_per_flavor(stack: str, precompiled: bool) -> None:
    """Kubernetes: NVIDIA's precompiled images; OpenShift: built on the node with the Driver Toolkit."""
    config = parse_stack_config(config_values(stack))

    assert config.driver.precompiled is None
    assert config.driver_release.precompiled is precompiled


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize("precompiled", [True, False])
def test_driver_precompiled_set_wins(stack: str, precompiled: bool) -> None:
    values = config_values(stack)
    values["driver"]["precompiled"] = precompiled
    if precompiled:
        values["driver"].pop("version", None)  # a precompiled driver is its branch's
    else:
        values["driver"]["version"] = "580.95.05"

    release = parse_stack_config(values).driver_release

    assert release.precompiled is precompiled
    assert (release.repository, release.branch, release.version) == ("nvcr.io/nvidia", "580", "580.95.05")


@pytest.mark.parametrize(("field", "value"), [
    ("maxParallelUpgrades", 0), ("maxUnavailable", "0"), ("maxUnavailable", "150%"), ("drain", "sometimes")])
def test_driver_upgrade_settings_are_checked(field: str, value: Any) -> None:
    message = config_error(lambda v: v["driver"].update({field: value}))

    assert message.startswith(f"gpu-platform:driver.{field}:"), message


def test_driver_branch_is_three_digits() -> None:
    message = config_error(lambda v: v["driver"].update(branch="r580"))

    assert message.startswith("gpu-platform:driver.branch:")


def test_a_misspelt_required_key_is_named_with_the_right_spelling() -> None:
    def misspell(values: Values) -> None:
        values["cluster"]["flavour"] = values["cluster"].pop("flavor")

    assert config_error(misspell) == "gpu-platform:cluster.flavour: unknown key; did you mean 'flavor'?"


def test_an_unquoted_number_where_text_belongs_says_to_quote_it() -> None:
    message = config_error(lambda values: pool(values).update(kernel=5.14))
    assert message == "gpu-platform:nodePools[0].kernel: must be text, not 5.14; quote it in the stack file"


DOCKER_CONFIG = '{"auths": {"nvcr.io": {"auth": "JG9hdXRodG9rZW46c2VjcmV0LWtleQ=="}}}'


def test_a_pull_secret_set_as_the_readme_says_is_accepted() -> None:
    # `pulumi config set --secret registryPullSecret "$(cat config.json)"` hands the program the JSON text.
    values = {**config_values("prod"), "registryPullSecret": DOCKER_CONFIG}
    assert parse_stack_config(values).registry_pull_secret.get_secret_value() == DOCKER_CONFIG


@pytest.mark.parametrize("value", [
    '{"auths": {"nvcr.io": {"password": "JG9hdXRodG9rZW46c2VjcmV0LWtleQ=="}}}',   # no auth, no username
    "JG9hdXRodG9rZW46c2VjcmV0LWtleQ==",                                      # a bare token
    {"auths": {"nvcr.io": {"auth": "JG9hdXRodG9rZW46c2VjcmV0LWtleQ=="}}},    # decoded by someone else
])
def test_a_malformed_pull_secret_is_named_but_never_shown(value) -> None:
    message = config_error(lambda values: values.__setitem__("registryPullSecret", value), "prod")
    assert message.startswith("gpu-platform:registryPullSecret:") and "dockerconfigjson" in message
    assert "JG9hdXRo" not in message and "\n" not in message


@pytest.mark.parametrize(("field", "value"), [("cpu", "0"), ("cpu", "lots"), ("memory", "64GB"), ("pods", 0)])
def test_tenant_compute_quota_must_be_a_quantity(field: str, value) -> None:
    message = config_error(lambda values: values["tenants"][0].update({field: value}))
    assert message.startswith(f"gpu-platform:tenants[0].{field}:")


# -- images, monitoring, discovery ---------------------------------------------------------------------------------


def test_nfd_image_override_is_kubernetes_only() -> None:
    image = "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"
    values = config_values("prod")
    values["images"] = {"nfd": image}
    assert parse_stack_config(values).images.nfd == image

    message = config_error(lambda v: v.update(images={"nfd": image}))

    assert message.startswith("gpu-platform:") and "images: nfd applies to Kubernetes" in message


def test_operand_image_overrides_are_keyed_by_cluster_policy_section() -> None:
    values = config_values("prod")
    values["images"] = {"nfd": "registry.k8s.io/nfd/node-feature-discovery:v0.19.0",
                        "devicePlugin": "mirror.example.com/nvidia/k8s-device-plugin:v0.18.0",
                        "driverManager": "mirror.example.com/nvidia/k8s-driver-manager:v0.9.0",
                        "migManager": "mirror.example.com/nvidia/k8s-mig-manager:v0.15.0"}

    operands = parse_stack_config(values).images.operands()

    # GPU feature discovery runs from the device plugin's image, so a mirror of one moves both.
    assert operands == {"devicePlugin": "mirror.example.com/nvidia/k8s-device-plugin:v0.18.0",
                        "gfd": "mirror.example.com/nvidia/k8s-device-plugin:v0.18.0",
                        "driverManager": "mirror.example.com/nvidia/k8s-driver-manager:v0.9.0",
                        "migManager": "mirror.example.com/nvidia/k8s-mig-manager:v0.15.0"}


def test_cuda_sample_image_is_now_an_unknown_key() -> None:
    message = config_error(lambda v: v.update(images={"cudaSample": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd"}))

    assert message.startswith("gpu-platform:images.cudaSample: unknown key")


def test_malformed_image_override_names_the_field() -> None:
    message = config_error(lambda v: v.update(images={"toolkit": "Toolkit Latest"}), "prod")

    assert message.startswith("gpu-platform:images.toolkit:")


@pytest.mark.parametrize(("stack", "setting", "enabled"), [
    ("dev", None, True), ("prod", None, False), ("dev", False, False), ("prod", True, True)])
def test_prometheus_operator_defaults_per_flavor(stack: str, setting: bool | None, enabled: bool) -> None:
    values = config_values(stack)
    values.pop("monitoring", None)
    if setting is not None:
        values["monitoring"] = {"prometheusOperator": setting}

    assert parse_stack_config(values).prometheus_operator is enabled


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_discovery_defaults_to_enabled(stack: str) -> None:
    values = config_values(stack)
    values["cluster"].pop("discovery", None)

    discovery = parse_stack_config(values).cluster.discovery

    assert discovery.enabled is True
    assert discovery.kubeconfig is None and discovery.timeout_seconds == 10.0


def test_discovery_can_be_turned_off() -> None:
    values = config_values("prod")
    values["cluster"]["discovery"] = {"enabled": False}

    assert parse_stack_config(values).cluster.discovery.enabled is False


# Node profiles, EFA, tenant networks ----------------------------------------------------------------------------


def profile(values: Values) -> Values:
    """dev's tuned training pool's profile."""
    return pool(values, 1)["profile"]


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda v: profile(v).update(reservedCpus="0-1,96"), "reservedCpus '0-1,96' does not fit the 96 vCPUs"),
    (lambda v: profile(v).update(reservedCpus="0-95"), "does not fit the 96 vCPUs"),
    (lambda v: profile(v).update(reservedCpus="5-1"),
     "gpu-platform:nodePools[1].profile.reservedCpus: range 5-1 runs backwards; write 1-5"),
    (lambda v: profile(v).update(reservedCpus="0-1,48-49,10-2"),
     "gpu-platform:nodePools[1].profile.reservedCpus: range 10-2 runs backwards; write 2-10"),
    (lambda v: profile(v).update(hugepages={"1Gi": 1000}), "profile.hugepages take 1024000 MiB"),
    (lambda v: profile(v)["podSysctls"].append("vm.swappiness"),
     "pool 'a100-training' profile.podSysctls: 'vm.swappiness' is node-level"),
    (lambda v: profile(v)["nodeSysctls"].update({"net.core.somaxconn": "4096"}),
     "nodeSysctls: 'net.core.somaxconn' is namespaced (pods set it in their own namespace)"),
    (lambda v: profile(v)["nodeSysctls"].update({"net.ipv4.tcp_syncookies": "1"}),
     "nodeSysctls: 'net.ipv4.tcp_syncookies' is namespaced (any pod may set it)"),
    (lambda v: profile(v)["podSysctls"].append("Not A Sysctl"), "'Not A Sysctl' is not a sysctl name"),
    (lambda v: profile(v).update(cpuManagerPolicy="none", topologyManagerPolicy="none"),
     "profile.cpuManagerPolicy: OpenShift tunes pools with a PerformanceProfile"),
    (lambda v: profile(v).update(hugepages={"4Mi": 1}), "nodePools[1].profile.hugepages.4Mi"),
    (lambda v: pool(v, 1).update(fabric="efa"), "sets fabric efa, which this platform sets up on Kubernetes pools"),
])
def test_profile_mistakes_name_the_pool_and_the_fix(mutate: Callable[[Values], Any], expected: str) -> None:
    assert expected in config_error(mutate)


def test_tuned_pool_parses_into_its_classes() -> None:
    config = parse_stack_config(config_values("dev"))
    tuned = config.node_pools[1].profile
    assert tuned.reserved == {0, 1, 48, 49} and tuned.hugepages_mib == 64 * 1024
    assert parse_stack_config(config_values("onprem")).tenants[0].networks[0].name == "collective"
    assert parse_stack_config(config_values("prod")).node_pools[2].fabric == "efa"


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda v: pool(v, 0).update(fabric="efa", subnetId="subnet-0a1b2c3d4e5f60718"),
     "instanceType 'g6.xlarge' has no EFA"),
    (lambda v: pool(v, 2).pop("subnetId"), "needs subnetId: one of cluster.subnetIds"),
    (lambda v: pool(v, 2).update(subnetId="subnet-0fffffffffffffff0"), "is not one of cluster.subnetIds"),
])
def test_efa_mistakes(mutate: Callable[[Values], Any], expected: str) -> None:
    assert expected in config_error(mutate, "prod")


@pytest.mark.parametrize(("network", "expected"), [
    ({"name": "n", "type": "macvlan", "ipam": {"range": "10.0.0.0/24"}}, "a macvlan network needs master"),
    ({"name": "n", "type": "sriov", "ipam": {"range": "10.0.0.0/24"}}, "an sriov network needs resourceName"),
    ({"name": "n", "type": "macvlan", "master": "ens6", "ipam": {"range": "10.0.0.1/24"}},
     "'10.0.0.1/24' is not a network in CIDR form"),
    ({"name": "n", "type": "macvlan", "master": "ens6", "ipam": {"range": "10.0.0.0/24", "gateway": "10.1.0.1"}},
     "gateway '10.1.0.1' must be an address inside range"),
    ({"name": "n", "type": "ipvlan", "master": "ens6", "ipam": {"range": "10.0.0.0/24"}}, "networks[0].type"),
])
def test_tenant_network_mistakes(network: Values, expected: str) -> None:
    message = config_error(lambda v: v["tenants"][1].update(networks=[network]), "onprem")
    assert "tenants[1].networks[0]" in message and expected in message


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_tenant_networks_are_refused_where_pools_run_on_aws(stack: str) -> None:
    network = config_values("onprem")["tenants"][0]["networks"]
    assert config_error(lambda v: v["tenants"][0].update(networks=network), stack).startswith(
        "gpu-platform:tenants[0].networks: macvlan network 'collective' would carry no traffic: pools ")
    # A stack that mixes AWS and bring-your-own pools is refused too: pods may land on either.
    mixed = config_values("onprem")
    mixed["nodePools"].append(config_values("prod")["nodePools"][0])
    mixed["cluster"].update({key: value for key, value in config_values("prod")["cluster"].items()
                             if key in ("subnetIds", "securityGroupIds", "instanceProfile")})
    with pytest.raises(ConfigError, match="pools l4-inference run on AWS"):
        parse_stack_config(mixed)


def _wire(values: Values, tenant: int, **network: Any) -> None:
    values["tenants"][tenant].setdefault("networks", []).append(
        {"name": f"net{len(values['tenants'][tenant].get('networks', []))}", "ipam": {"range": "10.99.0.0/24"},
         **network})


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda v: _wire(v, 2, type="macvlan", master="ens6f1"),
     "networks vision/collective and nlp-research/net0 share host interface ens6f1, one layer-2 segment"),
    (lambda v: (_wire(v, 0, type="sriov", resourceName="openshift.io/mlx", vlan=7),
                _wire(v, 2, type="sriov", resourceName="openshift.io/mlx", vlan=7)),
     "share SR-IOV resource openshift.io/mlx on VLAN 7"),
    (lambda v: _wire(v, 2, type="macvlan", master="ens7", ipam={"range": "10.20.0.128/25"}),
     "networks vision/collective and nlp-research/net0 overlap (10.20.0.0/24, 10.20.0.128/25)"),
])
def test_two_tenants_never_share_a_network(mutate: Callable[[Values], Any], expected: str) -> None:
    """NetworkPolicies do not apply to Multus networks: tenants are apart only on separate wires and ranges."""
    assert expected in config_error(mutate, "onprem")


def test_one_tenant_may_use_one_interface_twice_and_vlans_separate_tenants() -> None:
    values = config_values("onprem")
    _wire(values, 0, type="macvlan", master="ens6f1")
    _wire(values, 0, type="sriov", resourceName="openshift.io/mlx", vlan=7, ipam={"range": "10.98.0.0/24"})
    _wire(values, 2, type="sriov", resourceName="openshift.io/mlx", vlan=8, ipam={"range": "10.97.0.0/24"})
    assert len(parse_stack_config(values).tenants[2].networks) == 1


# -- how pools roll, and retiring them -------------------------------------------------------------------------------


def test_roll_defaults_and_bounds() -> None:
    config = parse_stack_config(config_values("prod"))
    roll = config.node_pools[0].roll
    assert (roll.min_healthy_percentage, roll.max_healthy_percentage, roll.checkpoints) == (90, 100, (25, 50, 100))
    assert (roll.checkpoint_delay_seconds, roll.drain_timeout_seconds, config.node_pools[0].retired) == (600, 1800, False)


@pytest.mark.parametrize(("roll", "expected"), [
    ({"checkpoints": [50, 25, 100]}, "nodePools[0].roll: checkpoints [50, 25, 100] must rise strictly and end at 100"),
    ({"checkpoints": [25, 50]}, "must rise strictly and end at 100"),
    ({"minHealthyPercentage": 100}, "maxHealthyPercentage 100 must exceed minHealthyPercentage 100"),
    ({"maxHealthyPercentage": 250}, "nodePools[0].roll.maxHealthyPercentage: 250 is too large; use at most 200"),
    ({"drainTimeoutSeconds": 9000}, "nodePools[0].roll.drainTimeoutSeconds: 9000 is too large; use at most 7200"),
    ({"checkpointDelay": 60}, "nodePools[0].roll.checkpointDelay: unknown key"),
])
def test_bad_roll_names_the_field_and_the_fix(roll: Values, expected: str) -> None:
    assert expected in config_error(lambda v: pool(v).update(roll=roll), stack="prod")


def test_openshift_pool_must_not_set_roll() -> None:
    message = config_error(lambda v: pool(v).update(roll={"minHealthyPercentage": 80}))
    assert "sets roll, which applies to Kubernetes pools" in message and "remove roll" in message


@pytest.mark.parametrize("value", ["soon", "yes", "true", 1])
def test_retired_must_be_a_real_boolean(value: object) -> None:
    # Retiring unprotects machines and namespaces: only an unquoted true does it, never YAML 1.1's `yes`.
    message = config_error(lambda v: pool(v).update(retired=value), stack="prod")
    assert f"nodePools[0].retired: must be true or false, not {value!r}" in message
    message = config_error(lambda v: v["tenants"][0].update(retired=value), stack="prod")
    assert f"tenants[0].retired: must be true or false, not {value!r}" in message


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda v: v["cluster"].setdefault("discovery", {}).update(enabled="yes"), "cluster.discovery.enabled"),
    (lambda v: pool(v).update(roll={"autoRollback": "yes"}), "nodePools[0].roll.autoRollback"),
    (lambda v: v.setdefault("driver", {}).update(precompiled="yes"), "driver.precompiled"),
    (lambda v: v.setdefault("driver", {}).update(drain="yes"), "driver.drain"),
    (lambda v: v.setdefault("monitoring", {}).update(prometheusOperator="yes"), "monitoring.prometheusOperator"),
    (lambda v: v.update(preflight="no"), "preflight"),
])
def test_every_switch_is_a_real_boolean(mutate, field: str) -> None:
    # YAML 1.2, as the Pulumi CLI reads it, makes `yes` and `no` text; taken as booleans they would flip a switch.
    assert f"{field}: must be true or false, not " in config_error(mutate, stack="prod")


def test_termination_handler_role_is_kubernetes_only() -> None:
    message = config_error(lambda v: v["cluster"].update(nodeTerminationHandlerRole="workers"))
    assert "nodeTerminationHandlerRole applies to Kubernetes" in message
    assert "nodeTerminationHandlerRole" in config_error(
        lambda v: v["cluster"].update(nodeTerminationHandlerRole="bad role!"), stack="prod")


# -- lists and mappings left empty ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda v: v.update(tenants=None),
     "gpu-platform:tenants: must be a list of {name, gpus} entries, not null; write [] for none"),
    (lambda v: v["tenants"].append(None),
     "gpu-platform:tenants[2]: must be a mapping {name, gpus}, not null; fill the item in or remove it"),
    (lambda v: v.update(nodePools=[]),
     "gpu-platform:nodePools: must list at least 1 item; add one with {name, instanceType, replicas, image}"),
    (lambda v: v.update(nodePools=None),
     "gpu-platform:nodePools: must be a list of {name, instanceType, replicas, image} entries, not null; "
     "write one `- ` item per line"),
    (lambda v: v.update(cluster=None),
     "gpu-platform:cluster: must be a mapping {name, flavor}, not null; write its keys below it"),
    (lambda v: v["tenants"][0].update(networks=[None]),
     "gpu-platform:tenants[0].networks[0]: must be a mapping {name, type, ipam}, not null; "
     "fill the item in or remove it"),
    (lambda v: profile(v).update(hugepages=None),
     "gpu-platform:nodePools[1].profile.hugepages: must be a mapping, not null; write its keys below it"),
    (lambda v: profile(v).update(podSysctls="net.core.somaxconn"),
     "gpu-platform:nodePools[1].profile.podSysctls: must be a list, not 'net.core.somaxconn'; write [] for none"),
])
def test_a_missing_list_or_mapping_says_what_to_write(mutate: Callable[[Values], Any], expected: str) -> None:
    assert config_error(mutate) == expected


@pytest.mark.parametrize(("stack", "mutate", "expected"), [
    ("prod", lambda v: v["cluster"].update(projectSelfProvisioning=False),
     "gpu-platform:cluster: projectSelfProvisioning applies to OpenShift"),
    ("dev", lambda v: v["cluster"].update(trustedNamespaces=["vision"]),
     "gpu-platform:tenants[0].name: 'vision' is in cluster.trustedNamespaces"),
    ("prod", lambda v: v["cluster"].update(trustedNamespaces=["logging", "default"]),
     "gpu-platform:cluster.trustedNamespaces[1]: 'default' is where anyone's pods land"),
])
def test_guard_settings_that_cannot_hold(stack: str, mutate: Callable[[Values], Any], expected: str) -> None:
    assert expected in config_error(mutate, stack)


@pytest.mark.parametrize(("labels_", "expected"), [
    ({"bad key!": "x"}, "'bad key!' is not a label key"),
    ({"release": "not ok!"}, "'not ok!' is not a label value"),
])
def test_prometheus_selector_labels_are_label_keys_and_values(labels_: dict, expected: str) -> None:
    assert expected in config_error(lambda v: v.setdefault("monitoring", {}).update(ruleLabels=labels_), "prod")


@pytest.mark.parametrize("key", ["app.kubernetes.io/managed-by", "gpu-platform.io/tenant"])
def test_rule_labels_cannot_overwrite_the_platforms_labels(key: str) -> None:
    message = config_error(lambda v: v.setdefault("monitoring", {}).update(ruleLabels={key: "x"}), "prod")
    assert message == (f"gpu-platform:monitoring.ruleLabels.{key}: {key!r} is a label the platform sets and relies "
                       "on; choose another key"), message


@pytest.mark.parametrize(("stack", "mutate", "expected"), [
    ("prod", lambda v: v["driver"].update(version="580.95.05"),
     "gpu-platform: driver.version changes nothing for precompiled drivers"),
    ("dev", lambda v: v["driver"].update(precompiled=True),
     "gpu-platform: driver.version changes nothing for precompiled drivers"),
    ("dev", lambda v: pool(v, 0).update(availabilityZone="eu-west-1a"),
     "pool 't4-inference' availabilityZone 'eu-west-1a' is not in cluster.region 'us-east-1'"),
])
def test_config_that_would_change_nothing_or_land_elsewhere_is_refused(stack: str, mutate: Callable[[Values], Any],
                                                                       expected: str) -> None:
    """A precompiled driver's version, or a zone of another region, would render as if it mattered."""
    assert expected in config_error(mutate, stack)


def test_drivers_built_on_the_node_take_a_version() -> None:
    values = config_values("prod")
    values["driver"].update(precompiled=False, version="580.95.05")
    assert parse_stack_config(values).driver_release.version == "580.95.05"


def test_a_driver_built_on_the_node_needs_a_version_of_its_branch() -> None:
    message = config_error(lambda v: (v["driver"].pop("version"), v["driver"].update(branch="590")))
    assert "driver.version: a driver built on the node is one version of branch '590'" in message


# -- bring-your-own pools --------------------------------------------------------------------------------------


def test_onprem_pools_are_bring_your_own_and_count_what_they_declare() -> None:
    config = parse_stack_config(config_values("onprem"))
    assert not config.aws_pools, "no pool is provisioned on AWS"
    dgx, l40s = config.node_pools
    assert (dgx.gpu_capacity, dgx.advertised) == (16, {"nvidia.com/gpu": 16})
    assert (l40s.gpu_capacity, l40s.advertised) == (16, {"nvidia.com/gpu.shared": 32})
    assert config.declared_kernels == {KernelTarget("ubuntu22.04", "5.15.0-125-generic")}
    assert (dgx.autoscaler_min, dgx.autoscaler_max) == (2, 2), "nothing scales nodes the stack does not own"


@pytest.mark.parametrize("field, value", [
    ("instanceType", "p4d.24xlarge"), ("image", "ami-0a6c2d1e5f3b7c9d1"), ("maxReplicas", 4), ("minReplicas", 1),
    ("rootVolumeGib", 500), ("subnetId", "subnet-0a9b8c7d6e5f40312"), ("roll", {"drainTimeoutSeconds": 600}),
    ("retired", True), ("availabilityZone", "us-east-1a"),
])
def test_a_bring_your_own_pool_refuses_what_only_provisioned_pools_have(field: str, value: Any) -> None:
    assert config_error(lambda v: pool(v).update({field: value}), "onprem") == (
        f"gpu-platform:nodePools[0]: {field}: a bringYourOwn pool's nodes are provisioned outside this stack, which "
        "sets only its replicas (node count), os, kernel, timeSlicingReplicas, migLayout and dedicatedTo; remove them")


@pytest.mark.parametrize("mutate, expected", [
    (lambda v: pool(v)["bringYourOwn"].update(nodeSelector={}),
     "gpu-platform:nodePools[0].bringYourOwn.nodeSelector: must list at least 1 item; add one"),
    (lambda v: pool(v)["bringYourOwn"].pop("gpusPerNode"),
     "gpu-platform:nodePools[0].bringYourOwn.gpusPerNode: is required"),
    (lambda v: pool(v)["bringYourOwn"]["nodeSelector"].update({"bad key!": "x"}),
     "gpu-platform:nodePools[0].bringYourOwn.nodeSelector"),
    (lambda v: pool(v).pop("kernel"), "gpu-platform: nodePools: pool 'dgx-a100' needs os and kernel"),
])
def test_a_bring_your_own_pool_declares_its_nodes(mutate: Callable[[Values], Any], expected: str) -> None:
    assert config_error(mutate, "onprem").startswith(expected)


def test_a_pool_is_provisioned_or_bring_your_own() -> None:
    assert config_error(lambda v: pool(v).pop("bringYourOwn"), "onprem") == (
        "gpu-platform:nodePools[0]: instanceType and image required: the AWS instance type and image (AMI) of the "
        "pool's machines, or bringYourOwn for nodes provisioned elsewhere")


def test_bring_your_own_pools_are_kubernetes_only() -> None:
    brought = config_values("onprem")["nodePools"][0]["bringYourOwn"]
    message = config_error(lambda v: v["nodePools"].append({"name": "dgx", "replicas": 1, "bringYourOwn": brought}))
    assert message == ("gpu-platform:nodePools[2].bringYourOwn: applies to Kubernetes clusters; OpenShift pools are "
                       "MachineSets of this stack: remove it and set instanceType and image")


def test_auto_scaling_group_placement_is_required_only_with_such_a_pool() -> None:
    staging = config_values("staging")
    assert config_error(lambda v: v["cluster"].pop("subnetIds"), "staging") == (
        "gpu-platform:cluster: subnetIds required: pool 'l4-inference' is an Auto Scaling Group launched into them "
        "(set them, or make every pool bringYourOwn)")
    brought = config_values("onprem")["nodePools"]
    staging["nodePools"] = brought
    for key in ("subnetIds", "securityGroupIds", "instanceProfile", "nodeTerminationHandlerRole"):
        staging["cluster"].pop(key)
    assert not parse_stack_config(staging).aws_pools


def test_a_drain_role_without_auto_scaling_group_pools_is_refused() -> None:
    assert config_error(lambda v: v["cluster"].update(nodeTerminationHandlerRole="ops-node"), "onprem") == (
        "gpu-platform:cluster.nodeTerminationHandlerRole: drains Auto Scaling Group nodes, and no pool is one; "
        "remove it")


# -- every refusal says what is wrong and how to fix it -----------------------------------------------------------


@pytest.mark.parametrize(("stack", "path", "bad", "fix"), [
    ("dev", ("cluster", "release"), "4.18.x", "write the release as 4.<minor>.<patch>"),
    ("dev", ("cluster", "region"), "useast1", "write an AWS region code, e.g. us-east-1"),
    ("prod", ("cluster", "subnetIds", 0), "subnet-xyz", "write a subnet ID"),
    ("dev", ("nodePools", 0, "image"), "ami-XYZ", "write an AMI ID"),
    ("dev", ("nodePools", 0, "availabilityZone"), "east", "write an availability zone name"),
    ("dev", ("nodePools", 1, "profile", "reservedCpus"), "0..1", "write a cpuset list"),
    ("dev", ("driver", "branch"), "r580", "write the driver branch as its 3 digits"),
    ("dev", ("driver", "maxUnavailable"), "0", "write a node count (1-9999) or a percentage"),
    ("dev", ("tenants", 0, "cpu"), "1.5", "write whole cores"),
    ("dev", ("tenants", 0, "memory"), "256GB", "write a size in Mi, Gi or Ti"),
    ("dev", ("images", "nfd"), "nfd:latest", "write <registry>/<repository>:<tag>"),
])
def test_a_value_in_the_wrong_format_gets_its_fix(stack: str, path: tuple, bad: str, fix: str) -> None:
    message = config_error(lambda v: set_at(v, path, bad), stack)

    assert message.startswith(f"{dotted(path)}: {bad!r} is not in the expected format; {fix}"), message
    assert "README" not in message


def test_every_format_a_value_must_have_has_a_fix() -> None:
    """A pattern without an entry in PATTERN_FIXES would fail with a KeyError, not a line a user can act on."""
    from pydantic import BaseModel

    from stacks.config import PATTERN_FIXES

    def patterns(annotation: Any) -> Iterator[str]:
        for meta in getattr(annotation, "__metadata__", ()):
            yield from (p for m in (meta, *getattr(meta, "metadata", ())) if (p := getattr(m, "pattern", None)))
        for arg in get_args(annotation):
            yield from patterns(arg)

    def walk(model: type[BaseModel]) -> Iterator[str]:
        for field in model.model_fields.values():
            yield from (p for m in field.metadata if (p := getattr(m, "pattern", None)))
            yield from patterns(field.annotation)
            nested = [arg for arg in (field.annotation, *get_args(field.annotation), *(
                a for arg in get_args(field.annotation) for a in get_args(arg))) if isinstance(arg, type)]
            for arg in nested:
                if issubclass(arg, BaseModel):
                    yield from walk(arg)

    found = set(walk(StackConfig))
    assert len(found) >= 16 and found <= set(PATTERN_FIXES)


def test_an_el9_6_kernel_is_refused_on_openshift_4_18() -> None:
    """OpenShift 4.18's RHCOS is built on RHEL 9.4 (el9_4 kernels); el9_6 kernels come with 4.19 to 4.21."""
    message = config_error(lambda v: v["cluster"].update(kernel="5.14.0-570.28.1.el9_6.x86_64"))

    assert "kernel '5.14.0-570.28.1.el9_6.x86_64' is not an RHCOS kernel release (uname -r) of OpenShift 4.18" in message
    assert "e.g. '5.14.0-427.65.1.el9_4.x86_64'" in message


@pytest.mark.parametrize("value", ['"262144"', "262144; reboot", "$(curl example.com)", "1 `id`", "a  b"])
def test_a_node_sysctl_value_with_quotes_or_shell_text_is_refused(value: str) -> None:
    message = config_error(lambda v: profile(v)["nodeSysctls"].update({"vm.max_map_count": value}))

    assert message.startswith("gpu-platform:nodePools[1].profile.nodeSysctls.vm.max_map_count:"), message
    assert "no quotes or shell characters" in message


def test_a_node_sysctl_value_of_several_numbers_is_taken() -> None:
    values = config_values("dev")
    profile(values)["nodeSysctls"]["vm.max_map_count"] = "4096 87380 6291456"

    parse_stack_config(values)


def test_max_unavailable_of_a_profile_is_refused_on_kubernetes() -> None:
    """It paces the Machine Config Operator's reboots; a Kubernetes pool would silently ignore it."""
    def tuned(values: Values) -> None:
        pool(values, 2)["profile"] = {"reservedCpus": "0-1", "maxUnavailable": 2}

    message = config_error(tuned, "prod")

    assert "profile.maxUnavailable paces the Machine Config Operator's reboots on OpenShift" in message
    assert "remove it and set roll.minHealthyPercentage instead" in message


def test_a_chart_mirror_is_for_kubernetes_and_never_shows_its_credentials() -> None:
    assert "charts.mirror applies to Kubernetes" in config_error(
        lambda v: v.update(charts={"mirror": "https://charts.example.com"}))
    message = config_error(lambda v: v.update(charts={"mirror": "https://robot:s3cr3t@charts.example.com"}), "prod")
    assert message.startswith("gpu-platform:charts.mirror:") and "s3cr3t" not in message and "robot" not in message
    assert "oci://" in message  # the fix: the forms it takes


def test_a_stack_file_reads_as_the_engine_hands_it_to_the_program() -> None:
    # `pulumi config set preflight false` writes the text 'false'; the program reads it as false, and so must the
    # preview's reading of a stack file (it used to refuse it, and the preview rendered its base without live nodes).
    values = dict(stack_config("onprem"))
    values["gpu-platform:preflight"] = "false"
    values["gpu-platform:registryPullSecret"] = '{"auths": {"nvcr.io": {"auth": "dXNlcjpwYXNz"}}}'
    config = config_from_stack_file({**values, "aws:region": "us-east-1"})
    assert config.preflight is False and config.registry_pull_secret is not None


@pytest.mark.parametrize(("path", "key", "meant"), [
    (("nodePools", 0), "maxReplica", "maxReplicas"),
    (("driver",), "precompile", "precompiled"),
    (("tenants", 0), "priorityclass", "priorityClass"),
])
def test_a_misspelt_optional_key_gets_the_key_it_meant(path: tuple, key: str, meant: str) -> None:
    def misspell(values: Values) -> None:
        target = values
        for part in path:
            target = target[part]
        target[key] = target.pop(meant, 1)

    assert config_error(misspell, "prod").endswith(f"unknown key; did you mean {meant!r}?")


# -- an error reads as the stack file is written, at a readable length --------------------------------------------


@pytest.mark.parametrize(("layout", "message"), [
    (5, "gpu-platform:nodePools[0].migLayout: must be text or a mapping, not 5"),
    ({"1g.10gb": "x"}, "gpu-platform:nodePools[0].migLayout.1g.10gb: must be a number, not 'x'; write digits only")])
def test_a_mig_layout_of_the_wrong_type_names_the_field_not_the_validators_union(layout, message) -> None:
    assert config_error(lambda values: pool(values).update(migLayout=layout), "partitioned") == message


@pytest.mark.parametrize("mutate", [
    lambda values: pool(values).update(migLayout="x" * 30_000),
    lambda values: values["cluster"].update(region="x" * 30_000),
    lambda values: values["tenants"][0].update(name=["y"] * 10_000)])
def test_a_refusal_quoting_a_huge_value_stays_readable(mutate) -> None:
    """The field at the start and the fix at the end survive; the value is cut."""
    message = config_error(mutate, "partitioned")
    assert len(message) <= MAX_ERROR_CHARACTERS and message.startswith("gpu-platform:")
