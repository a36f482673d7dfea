"""stacks.config: the shipped stacks validate, and every mistake is one line naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stacks.config import ConfigError, StackConfig, parse_stack_config
from tests.conftest import config_values

Values = dict[str, Any]


def config_error(mutate: Callable[[Values], Any], stack: str = "dev") -> str:
    """Apply `mutate` to a shipped stack's config and return the ConfigError it causes, checked to be one line."""
    values = config_values(stack)
    mutate(values)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(values)
    message = str(caught.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert message.startswith("gpu-platform"), message
    return message


def pool(values: Values, index: int = 0) -> Values:
    return values["nodePools"][index]


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
    ("dev", "rhcos4.16", "5.14.0-427.50.1.el9_4"),
    ("dev", "rhcos4.17", "5.14.0-427.50.1.el8.x86_64"),
    ("dev", "rhcos4.18", "6.8.0-1021-aws"),
])
def test_malformed_kernel_names_the_pool_kernel_and_os(stack: str, os: str, kernel: str) -> None:
    message = config_error(lambda v: pool(v, 1).update(os=os, kernel=kernel), stack)

    assert message.startswith("gpu-platform:nodePools[1]:")
    assert f"kernel {kernel!r}" in message
    assert os in message
    assert "e.g." in message  # shows what a kernel of that OS looks like


def test_unknown_os_lists_the_supported_ones() -> None:
    message = config_error(lambda v: pool(v).update(os="centos7"))

    assert message.startswith("gpu-platform:nodePools[0]:")
    assert "'centos7'" in message and "rhcos4.16" in message and "ubuntu22.04" in message


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


def test_tenant_cannot_take_a_system_namespace() -> None:
    message = config_error(lambda v: v["tenants"][0].update(name="kube-system"))

    assert message.startswith("gpu-platform:tenants[0]:")
    assert "system namespace" in message


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


@pytest.mark.parametrize(("path", "field", "limit"), [
    (("nodePools", 0), "replicas", 1000), (("nodePools", 0), "maxReplicas", 1000), (("tenants", 0), "gpus", 100000)])
def test_absurd_counts_are_rejected(path: tuple, field: str, limit: int) -> None:
    message = config_error(lambda v: v[path[0]][path[1]].update({field: 10**30}))

    assert message.startswith(f"gpu-platform:{path[0]}[{path[1]}].{field}:"), message
    assert f"too large; use at most {limit}" in message


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


def test_ubuntu_pool_does_not_fit_an_openshift_cluster() -> None:
    message = config_error(lambda v: pool(v).update(os="ubuntu22.04", kernel="6.8.0-1021-aws"))

    assert "nodePools" in message and "'t4-inference'" in message
    assert "ubuntu22.04" in message and "openshift" in message


def test_rhcos_pool_does_not_fit_a_kubernetes_cluster() -> None:
    message = config_error(lambda v: pool(v).update(os="rhcos4.16", kernel="5.14.0-427.50.1.el9_4.x86_64"), "prod")

    assert "nodePools" in message and "'l4-inference'" in message
    assert "rhcos4.16" in message and "kubernetes" in message


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
    message = config_error(lambda v: v["cluster"].update(kubernetesVersion=version))

    assert message.startswith("gpu-platform:cluster:")
    assert f"kubernetesVersion {version!r} is not supported" in message


def test_unquoted_kubernetes_version_names_the_field() -> None:
    message = config_error(lambda v: v["cluster"].update(kubernetesVersion=1.31))

    assert message.startswith("gpu-platform:cluster.kubernetesVersion:")


def test_machine_set_name_must_fit_a_label_value() -> None:
    """The MachineSet name is also the value of its machines' selector label: 63 characters at most."""
    def long_names(values: Values) -> None:
        values["cluster"]["infrastructureId"] = "dev-ocp-cluster-name-x-7xk2p"
        pool(values).update(name="a" * 30, availabilityZone="ap-southeast-1a")

    message = config_error(long_names)

    assert "nodePools" in message and "'" + "a" * 30 + "'" in message
    assert "63" in message


# -- driver -------------------------------------------------------------------------------------------------------


def test_driver_version_must_be_on_its_branch() -> None:
    message = config_error(lambda v: v["driver"].update(branch="570", version="580.95.05"))

    assert message.startswith("gpu-platform:driver:")
    assert "version '580.95.05' is not on branch '570'" in message


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
