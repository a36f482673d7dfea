"""stacks.tenancy and the `tenancy` config: each tenant's guarantee per pool, what it may borrow, and the mistakes
refused before anything renders."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from stacks.config import ConfigError, parse_stack_config
from stacks.tenancy import borrowable, guarantees
from tests.conftest import ROOT, config_values

EXAMPLE = yaml.safe_load((ROOT / "examples" / "Pulumi.queue.yaml").read_text())["config"]


def example_values() -> dict[str, Any]:
    return {key.removeprefix("gpu-platform:"): value for key, value in copy.deepcopy(EXAMPLE).items()}


def test_guarantees_follow_each_tenants_pools_in_order_and_what_earlier_tenants_left() -> None:
    config = parse_stack_config(example_values())
    assert guarantees(config) == {"search-ranking": {"l4-inference": 2}, "llm-training": {"a10g-batch": 4},
                                  "analytics": {"a10g-batch": 4, "l4-inference": 2}}


def test_a_tenant_without_pools_may_use_every_pool() -> None:
    values = config_values("staging") | {"tenancy": {"mode": "queue"}}
    shares = guarantees(parse_stack_config(values))
    assert all(set(share) == {"l4-inference", "a10g-batch"} for share in shares.values())
    assert {name: sum(share.values()) for name, share in shares.items()} == {
        tenant["name"]: tenant["gpus"] for tenant in values["tenants"]}


def test_what_no_pool_has_left_stays_on_the_last_pool_for_the_policy_to_report() -> None:
    values = example_values()
    values["tenants"][2]["gpus"] = 9  # 3 more than a10g-batch and l4-inference have left
    assert guarantees(parse_stack_config(values))["analytics"] == {"a10g-batch": 4, "l4-inference": 5}


def test_borrowable_is_what_others_may_lend_in_its_pools_up_to_its_limit() -> None:
    config = parse_stack_config(example_values())
    # search-ranking: analytics lends its 2 on l4-inference, the limit is 2; llm-training: analytics' 4 on
    # a10g-batch; analytics: llm-training lends 2 of its 4 on a10g-batch, search-ranking all 2 on l4-inference.
    assert borrowable(config, guarantees(config)) == {"search-ranking": 2, "llm-training": 4, "analytics": 4}


def test_quota_mode_is_the_default() -> None:
    assert parse_stack_config(config_values("prod")).tenancy.mode == "quota"


@pytest.mark.parametrize(("stack", "mutate", "expected"), [
    ("dev", lambda v: (v.update(tenancy={"mode": "queue"}), v["cluster"].update(
        release="4.19.10", kernel="5.14.0-570.28.1.el9_6.x86_64", nfdOperatorCsv="nfd.4.19.0-202510010101")),
     "gpu-platform:tenancy.mode: queue needs the Red Hat build of Kueue, whose pinned kueue-operator.v1.4.1 does not "
     "support OpenShift 4.19 (it supports 4.18, 4.20 of this platform's releases); use quota"),
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
