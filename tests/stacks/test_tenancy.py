"""stacks.tenancy and the `tenancy` config: each tenant's guarantee per pool, what it may borrow, and the mistakes
refused before anything renders."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from components import labels
from fleet.catalog import OPENSHIFT_KUBERNETES
from stacks.config import ConfigError, parse_stack_config
from stacks.tenancy import borrowable, ceilings, guarantees
from tests.conftest import ROOT, config_values

EXAMPLE = yaml.safe_load((ROOT / "examples" / "Pulumi.queue.yaml").read_text())["config"]


def example_values() -> dict[str, Any]:
    return {key.removeprefix("gpu-platform:"): value for key, value in copy.deepcopy(EXAMPLE).items()}


def test_guarantees_follow_each_tenants_pools_in_order_and_what_earlier_tenants_left() -> None:
    config = parse_stack_config(example_values())
    gpu, shared, mig = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb"
    assert guarantees(config) == {
        "search-ranking": {"l4-inference": {shared: 2}},
        "llm-training": {"a10g-batch": {gpu: 4}, "a100-mig": {mig: 28}},
        "analytics": {"a10g-batch": {gpu: 4}, "l4-inference": {shared: 2}, "a100-mig": {mig: 28}}}


def test_a_tenant_without_pools_may_use_every_pool() -> None:
    values = config_values("staging") | {"tenancy": {"mode": "queue"}}
    shares = guarantees(parse_stack_config(values))
    assert all(set(share) == {"l4-inference", "a10g-batch"} for share in shares.values())
    assert {name: sum(kinds.get("nvidia.com/gpu", 0) for kinds in share.values()) for name, share in shares.items()} == {
        tenant["name"]: tenant["gpus"] for tenant in values["tenants"]}


def test_what_no_pool_has_left_stays_on_the_last_pool_for_the_policy_to_report() -> None:
    values = example_values()
    values["tenants"][2]["gpus"] = 9  # 5 more than a10g-batch has left, and no other pool of its has whole GPUs
    assert guarantees(parse_stack_config(values))["analytics"]["a10g-batch"] == {"nvidia.com/gpu": 9}


def test_borrowable_is_what_others_may_lend_in_its_pools_up_to_its_limit() -> None:
    config = parse_stack_config(example_values())
    # search-ranking: analytics lends its 2 shares, the limit is 2; llm-training: analytics' 4 GPUs and 28 slices;
    # analytics: llm-training lends 2 of its 4 GPUs and 2 of its 28 slices, search-ranking its 2 shares.
    gpu, shared, mig = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb"
    assert borrowable(config, guarantees(config)) == {"search-ranking": {shared: 2},
                                                      "llm-training": {gpu: 4, mig: 28},
                                                      "analytics": {gpu: 2, shared: 2, mig: 2}}


def test_quota_mode_is_the_default() -> None:
    assert parse_stack_config(config_values("prod")).tenancy.mode == "quota"


@pytest.mark.parametrize(("stack", "mutate", "expected"), [
    ("prod", lambda v: v["tenants"][0].update(queue={"weight": 2}),
     "gpu-platform:tenants[0].queue: applies to tenancy.mode queue; set tenancy.mode: queue or remove it"),
    ("prod", lambda v: (v.update(tenancy={"mode": "queue"}), v["tenants"][0].update(queue={"pools": ["h100"]})),
     "gpu-platform:tenants[0].queue.pools: 'h100' is not a pool of nodePools; use one of"),
    ("prod", lambda v: (v.update(tenancy={"mode": "queue"}), v["tenants"][0].update(
        queue={"pools": ["a10g-batch", "a10g-batch"]})),
     "gpu-platform:tenants[0].queue.pools: names a pool twice; list each once"),
    ("prod", lambda v: v.update(tenancy={"mode": "queues"}), "gpu-platform:tenancy.mode:"),
])
def test_tenancy_mistakes_are_one_line_naming_the_field(stack: str, mutate, expected: str) -> None:
    values = config_values(stack)
    mutate(values)
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(values)
    assert str(caught.value).startswith(expected)
    assert "\n" not in str(caught.value)


def test_queue_mode_is_refused_on_an_openshift_release_the_pinned_kueue_build_is_not_published_for(
        monkeypatch) -> None:
    monkeypatch.setattr(labels, "KUEUE_OLM_MINORS", ("4.20",))
    values = config_values("dev") | {"tenancy": {"mode": "queue"}}
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(values)
    assert str(caught.value) == (
        "gpu-platform:tenancy.mode: queue needs the Red Hat build of Kueue, whose pinned kueue-operator.v1.4.1 is "
        "not published for OpenShift 4.18 (only 4.20); use quota")


def test_queue_mode_is_offered_on_every_openshift_release_this_platform_supports() -> None:
    assert set(OPENSHIFT_KUBERNETES) <= set(labels.KUEUE_OLM_MINORS)
    assert parse_stack_config(config_values("dev") | {"tenancy": {"mode": "queue"}}).tenancy.mode == "queue"


@pytest.mark.parametrize(("stack", "tenancy"), [("dev", {"certManager": "existing"}),
                                                 ("prod", {"mode": "queue", "certManager": "install"})])
def test_cert_manager_is_a_setting_of_queue_mode_on_openshift_only(stack: str, tenancy: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_stack_config(config_values(stack) | {"tenancy": tenancy})
    assert str(caught.value).startswith("gpu-platform:tenancy.certManager: applies to tenancy.mode queue on OpenShift")


def test_each_tenants_ceiling_is_its_guarantee_and_what_it_may_borrow_of_every_kind() -> None:
    """The queue example: what the API server holds each namespace to, 0 of a kind its queue does not draw on."""
    config = parse_stack_config(example_values())
    shares = guarantees(config)
    kinds = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.5gb"]
    assert ceilings(config, shares, borrowable(config, shares), kinds) == {
        # 2 shares of its own, 2 borrowed at most (its borrowing limit)
        "search-ranking": {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 4, "nvidia.com/mig-1g.5gb": 0},
        # 4 GPUs and 28 slices of its own, and all analytics may lend of each
        "llm-training": {"nvidia.com/gpu": 8, "nvidia.com/gpu.shared": 0, "nvidia.com/mig-1g.5gb": 56},
        # 4 GPUs, 2 shares, 28 slices, and what llm-training lends (2 of each) and search-ranking's 2 shares
        "analytics": {"nvidia.com/gpu": 6, "nvidia.com/gpu.shared": 4, "nvidia.com/mig-1g.5gb": 30},
    }
