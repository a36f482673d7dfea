"""stacks.config: Karpenter pools (a pool's `karpenter` block, `cluster.karpenter`), counted at their limit, and each
mistake in them refused in one line naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from stacks.config import parse_stack_config
from stacks.preconditions import required_crds
from tests.conftest import config_values
from tests.stacks.test_config import config_error, pool

KARPENTER = "karpenter"


def example() -> dict[str, Any]:
    return config_values(KARPENTER)


def test_a_karpenter_pool_is_counted_at_its_limit_not_its_nodes_now() -> None:
    config = parse_stack_config(example())
    training, search = config.node_pools

    assert (training.replicas, training.max_replicas) == (1, 4)
    assert training.advertised == {"nvidia.com/gpu": 16} and training.gpu_capacity == 16
    assert search.advertised == {"nvidia.com/gpu": 4}
    assert config.gpu_capacity == 20


def test_karpenter_pools_need_no_aws_provider_and_no_drain() -> None:
    """NodePools and EC2NodeClasses are Kubernetes objects: a stack of Karpenter pools registers no AWS resource."""
    assert parse_stack_config(example()).aws_pools == ()


def test_the_selectors_default_to_karpenters_discovery_tag() -> None:
    karpenter = parse_stack_config(example()).cluster.karpenter

    assert karpenter.subnet_tags == karpenter.security_group_tags == {"karpenter.sh/discovery": "staging-gpu"}


def test_live_discovery_checks_karpenters_crds() -> None:
    names = {precondition.name for precondition in required_crds(parse_stack_config(example()))}

    assert {"nodepools.karpenter.sh", "ec2nodeclasses.karpenter.k8s.aws"} <= names
    assert not {"nodepools.karpenter.sh"} & {p.name for p in required_crds(parse_stack_config(config_values("prod")))}


def test_karpenter_on_openshift_is_refused_at_the_pool() -> None:
    def mutate(values: dict) -> None:
        pool(values)["karpenter"] = {}

    message = config_error(mutate, "dev")

    assert message.startswith("gpu-platform:nodePools[0].karpenter:") and "OpenShift pools are MachineSets" in message


def test_a_karpenter_pool_without_the_clusters_node_role_says_where_to_set_it() -> None:
    message = config_error(lambda values: values["cluster"].pop("karpenter"), KARPENTER)

    assert message.startswith("gpu-platform:cluster.karpenter: is required") and "nodeRole" in message


def test_cluster_karpenter_without_a_karpenter_pool_is_refused() -> None:
    def mutate(values: dict) -> None:
        for entry in values["nodePools"]:
            entry.pop("karpenter", None)

    message = config_error(mutate, KARPENTER)

    assert message.startswith("gpu-platform:cluster.karpenter:") and "no pool is one" in message


@pytest.mark.parametrize(("field", "value", "fix"), [
    ("roll", {"minHealthyPercentage": 50}, "disruptionBudget"),
    ("subnetId", "subnet-0a9b8c7d6e5f40312", "karpenter.zones"),
    ("availabilityZone", "us-east-1a", "karpenter.zones"),
    ("timeSlicingReplicas", 4, "Auto Scaling Group pool"),
    ("migLayout", "all-1g.10gb", "Auto Scaling Group pool"),
    ("fabric", "efa", "remove karpenter"),
])
def test_what_only_other_placements_take_is_refused_with_the_karpenter_way(field: str, value: Any, fix: str) -> None:
    def mutate(values: dict) -> None:
        pool(values)[field] = value
        pool(values)["instanceType"] = "p4de.24xlarge"  # an A100: MIG-capable and EFA-capable

    message = config_error(mutate, KARPENTER)

    assert message.startswith(f"gpu-platform:nodePools[0].{field}: does not apply to a karpenter pool")
    assert fix in message


def test_a_karpenter_pool_needs_a_maximum_and_has_no_minimum() -> None:
    assert config_error(lambda values: pool(values).pop("maxReplicas"), KARPENTER).startswith(
        "gpu-platform:nodePools[0].maxReplicas: is required for a karpenter pool")
    assert config_error(lambda values: pool(values).update(minReplicas=1), KARPENTER).startswith(
        "gpu-platform:nodePools[0].minReplicas: a karpenter pool has no minimum")


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("consolidation", "Always", "nodePools[0].karpenter.consolidation:"),
    ("disruptionBudget", "one", "write a number of nodes"),
    ("expireAfter", "30d", "write a duration"),
    ("zones", ["us-east-1"], "write an availability zone name"),
    ("capacityTypes", ["cheap"], "nodePools[0].karpenter.capacityTypes[0]:"),
    ("consolidateAfterr", "5m", "unknown key; did you mean 'consolidateAfter'?"),
])
def test_a_bad_karpenter_setting_names_the_field_and_the_fix(key: str, value: Any, expected: str) -> None:
    def mutate(values: dict) -> None:
        pool(values)["karpenter"][key] = value

    assert expected in config_error(mutate, KARPENTER)


def test_an_image_alias_is_refused_as_not_an_ami_id() -> None:
    """The pool pins its AMI by ID; Karpenter's aliases select Amazon Linux or Bottlerocket, which have no driver OS
    in the catalog (docs/karpenter.md)."""
    message = config_error(lambda values: pool(values).update(image="al2023@v20251120"), KARPENTER)

    assert message.startswith("gpu-platform:nodePools[0].image:") and "write an AMI ID" in message


@pytest.mark.parametrize(("zone", "problem"), [
    ("us-west-2a", "'us-west-2a' is in us-west-2, not in cluster.region us-east-1"),
    ("us-east-1z", "'us-east-1z' is not an availability zone of us-east-1")])
def test_a_zone_outside_the_stacks_region_or_that_does_not_exist_is_refused(zone: str, problem: str) -> None:
    """Karpenter would wait forever for a node no subnet of the region can hold."""
    message = config_error(lambda values: pool(values)["karpenter"].update(zones=["us-east-1a", zone]), KARPENTER)
    assert message.startswith(f"gpu-platform:nodePools[0].karpenter.zones[1]: {problem}; use zones of us-east-1")


@pytest.mark.parametrize("expire", ["0s", "59m", "1m30s"])
def test_an_expiry_that_replaces_nodes_as_they_launch_is_refused(expire: str) -> None:
    message = config_error(lambda values: pool(values)["karpenter"].update(expireAfter=expire), KARPENTER)
    assert message.startswith(f"gpu-platform:nodePools[0].karpenter.expireAfter: {expire!r} would replace each node")
    assert message.endswith("use at least 1h (e.g. 720h), or Never")


@pytest.mark.parametrize("field", ["expireAfter", "consolidateAfter"])
def test_a_duration_go_cannot_read_is_refused(field: str) -> None:
    """Karpenter parses these with Go's time.ParseDuration, which overflows past 2562047h."""
    message = config_error(lambda values: pool(values)["karpenter"].update({field: "2562048h"}), KARPENTER)
    assert message.startswith(f"gpu-platform:nodePools[0].karpenter.{field}: '2562048h' is longer than Karpenter can "
                              "read")


@pytest.mark.parametrize(("field", "value"), [("expireAfter", "1h"), ("expireAfter", "2562047h"),
                                              ("consolidateAfter", "0s"), ("expireAfter", "Never")])
def test_durations_karpenter_reads_that_keep_nodes_alive_are_accepted(field: str, value: str) -> None:
    values = example()
    pool(values)["karpenter"][field] = value
    parse_stack_config(values)
