"""The fleet summary of Karpenter pools (examples/Pulumi.karpenter.yaml) on real renders: the limit beside the nodes
now, a kernel upgrade as a new driver first and then drift replacement at the budget's pace, destructive for the
jobs on the drifted nodes."""

from __future__ import annotations

import pytest

from gpuctl.diff import diff_plans
from gpuctl.preview import base_kernels, refuse_kernel_without_image
from gpuctl.render import render_plan
from gpuctl.report import summary_lines
from gpuctl.stackfile import stack_file_from_config
from gpuctl.summary import summarize
from stacks.config import ConfigError
from tests.conftest import render_stack, stack_config

OLD_KERNEL, NEW_KERNEL = "6.8.0-1021-aws", "6.8.0-1024-aws"
NEW_AMI = "ami-0f2a3b4c5d6e7f809"


@pytest.fixture(scope="module")
def base():
    return render_stack("karpenter").document


def change(base, **training):
    config = stack_config("karpenter")
    config["gpu-platform:nodePools"][0].update(training)
    new = render_plan(stack_file_from_config("karpenter", config), previous=base_kernels(base))
    return new, summarize(base, new, diff_plans(base, new), offline=True)


def test_the_fleet_line_shows_the_nodes_now_and_the_limit(base):
    _, summary = change(base, maxReplicas=6)
    text = "\n".join(summary_lines(summary))

    assert "pool a10g-training: g5.12xlarge, nodes 1 now, limit 4 (Karpenter) -> 1 now, limit 6 (Karpenter), " \
           "GPUs 16 at the limit -> 24 at the limit" in text
    assert "pool l4-search: g6.xlarge, nodes 0 now, limit 4 (Karpenter), GPUs 4 at the limit" in text
    [training] = [pool for pool in summary.pools if pool.name == "a10g-training"]
    assert training.roll == "no roll" and summary.destructive == []


def test_a_kernel_upgrade_declares_the_driver_then_drifts_the_nodes_at_the_budgets_pace(base):
    new, summary = change(base, kernel=NEW_KERNEL, image=NEW_AMI, replicas=3)
    [training] = [pool for pool in summary.pools if pool.name == "a10g-training"]

    assert training.roll.startswith("drift replacement by Karpenter: the pool's running node is marked "
                                    "Drifted and replaced by a node of the new template, 1 node (4 GPUs) at a time "
                                    "(disruption budget 1); running GPU jobs on a drifted node are evicted")
    kernels = {kernel.key: kernel for kernel in summary.kernels}
    assert kernels[f"ubuntu22.04/{NEW_KERNEL}"].change == "new"
    assert "a10g-training nodes run it until they roll" in kernels[f"ubuntu22.04/{OLD_KERNEL}"].note
    [drift] = [item for item in summary.destructive if "drift" in item.what]
    assert drift.what == "pool a10g-training drift replacement"
    assert drift.takes_away.startswith("running GPU jobs on its 1 node: running GPU jobs on a drifted node are "
                                       "evicted when Karpenter replaces it")
    # The engine creates the new driver before it updates the node class and the NodePool: they depend on it.
    driver = next(r["urn"] for r in new["resources"] if r["name"] == "driver-ubuntu22-04-6-8-0-1024-aws")
    for resource in new["resources"]:
        if resource["name"] in ("pool-a10g-training", "pool-a10g-training-node-class") and resource["custom"]:
            assert driver in resource["dependencies"]


def test_a_percentage_budget_rounds_up_as_karpenter_does(base):
    config = stack_config("karpenter")
    config["gpu-platform:nodePools"][0]["karpenter"]["disruptionBudget"] = "10%"
    budget_base = render_stack("karpenter", config).document
    config["gpu-platform:nodePools"][0].update(kernel=NEW_KERNEL, image=NEW_AMI)
    new = render_plan(stack_file_from_config("karpenter", config), previous=base_kernels(budget_base))
    summary = summarize(budget_base, new, diff_plans(budget_base, new), offline=True)
    [training] = [pool for pool in summary.pools if pool.name == "a10g-training"]

    assert "1 node (4 GPUs) at a time (disruption budget 10%)" in training.roll


def test_a_limit_change_alone_drifts_nothing(base):
    _, summary = change(base, maxReplicas=2)
    [training] = [pool for pool in summary.pools if pool.name == "a10g-training"]

    assert training.roll == ("limit 4 -> 2 nodes: Karpenter launches no node above it; running nodes above it stay "
                             "until they are empty and consolidated")
    assert summary.destructive == []


def test_a_kernel_without_a_new_image_is_refused_as_for_auto_scaling_groups(base):
    new, _ = change(base, kernel=NEW_KERNEL)

    with pytest.raises(ConfigError, match=r"nodePools\[a10g-training\]\.kernel and \.image: the kernel changes"):
        refuse_kernel_without_image(base, new)
