"""The fleet summary on real renders: what a change does to pools, kernels, drivers, tenants and capacity."""

from __future__ import annotations

import pytest

from fleet.kernels import KernelTarget, ObservedNode
from gpuctl.diff import diff_plans
from gpuctl.preview import base_kernels
from gpuctl.report import summary_lines
from gpuctl.summary import SKIPPED, VERIFIED, summarize
from tests.conftest import render_stack, stack_config

OLD_KERNEL, NEW_KERNEL = "6.8.0-1021-aws", "6.8.0-1024-aws"
NEW_IMAGE = "nvcr.io/nvidia/driver:580-6.8.0-1024-aws-ubuntu22.04"


def pool(config: dict, name: str) -> dict:
    return next(p for p in config["gpu-platform:nodePools"] if p["name"] == name)


@pytest.fixture(scope="module")
def prod_base():
    return render_stack("prod").document


@pytest.fixture(scope="module")
def kernel_upgrade(prod_base):
    config = stack_config("prod")
    pool(config, "l4-inference").update(kernel=NEW_KERNEL, image="ami-0a1b2c3d4e5f60789")
    from gpuctl.render import render_plan
    from gpuctl.stackfile import stack_file_from_config

    new = render_plan(stack_file_from_config("prod", config), previous=base_kernels(prod_base))
    diff = diff_plans(prod_base, new)
    return summarize(prod_base, new, diff, preflight={NEW_IMAGE: VERIFIED}, offline=True)


def test_a_kernel_upgrade_names_the_pool_its_counts_kernels_roll_and_new_driver(kernel_upgrade):
    [l4] = [p for p in kernel_upgrade.pools if p.name == "l4-inference"]
    assert (l4.before.nodes, l4.after.nodes, l4.before.gpus, l4.after.gpus) == (8, 8, 8, 8)
    assert (l4.before.kernel, l4.after.kernel) == (OLD_KERNEL, NEW_KERNEL)
    assert l4.roll.startswith("instance refresh of 8 nodes")
    assert "1 node (1 GPU) at a time" in l4.roll and l4.gpus_out == 1
    others = [p for p in kernel_upgrade.pools if p.name != "l4-inference"]
    assert others and all(p.roll == "no roll" for p in others)

    kernels = {k.key: k for k in kernel_upgrade.kernels}
    new = kernels[f"ubuntu22.04/{NEW_KERNEL}"]
    assert (new.change, new.image, new.preflight, new.pools_after) == ("new", NEW_IMAGE, VERIFIED, ["l4-inference"])
    old = kernels[f"ubuntu22.04/{OLD_KERNEL}"]
    assert old.change == "unchanged" and old.pools_after == ["a10g-batch"]
    assert "l4-inference nodes run it until they roll; the driver stays while any node runs it" in old.note
    # The refresh replaces every running node: its GPU jobs are drained off and go with it.
    assert [(d.what, d.takes_away) for d in kernel_upgrade.destructive] == [(
        "pool l4-inference instance refresh", "running GPU jobs on its 8 nodes: each node is replaced by a new one, "
        "drained by the node termination handler before it terminates, 1 node at a time")]

    text = "\n".join(summary_lines(kernel_upgrade))
    assert f"pool l4-inference: g6.xlarge, nodes 8, GPUs 8, ubuntu22.04 {OLD_KERNEL} -> ubuntu22.04 {NEW_KERNEL}" \
        in text
    assert f"driver new, image {NEW_IMAGE}, preflight verified" in text


def test_a_kernel_no_pool_boots_any_more_is_kept_and_offline_says_why(prod_base):
    config = stack_config("prod")
    pool(config, "h100-training").update(kernel=NEW_KERNEL)
    from gpuctl.render import render_plan
    from gpuctl.stackfile import stack_file_from_config

    new = render_plan(stack_file_from_config("prod", config), previous=base_kernels(prod_base))
    summary = summarize(prod_base, new, diff_plans(prod_base, new), offline=True)
    [kept] = [k for k in summary.kernels if k.change == "kept"]
    assert kept.key == "ubuntu22.04/6.8.0-1019-aws" and kept.preflight == SKIPPED
    assert any("6.8.0-1019-aws kept only for lack of a node inventory" in line for line in summary.unknowns)


def test_removing_a_tenant_is_destructive_with_its_namespace_and_quota(prod_base):
    config = stack_config("prod")
    config["gpu-platform:tenants"] = [t for t in config["gpu-platform:tenants"] if t["name"] != "analytics"]
    new = render_stack("prod", config).document
    summary = summarize(prod_base, new, diff_plans(prod_base, new))

    [item] = summary.destructive
    assert item.what == "namespace analytics deleted"
    assert "quota 8 GPUs (gpu-low)" in item.takes_away
    assert "refuses" in item.engine and "retired: true" in item.engine  # the namespace is protected
    [tenant] = [t for t in summary.tenants if t.name == "analytics"]
    assert (tenant.gpus_before, tenant.gpus_after) == (8, None)
    assert (summary.capacity.quota_before, summary.capacity.quota_after) == (32, 24)


def test_a_retired_tenant_removed_is_destructive_without_an_engine_refusal():
    config = stack_config("prod")
    for tenant in config["gpu-platform:tenants"]:
        tenant["retired"] = tenant["name"] == "analytics"
    base = render_stack("prod", config).document
    config["gpu-platform:tenants"] = [t for t in config["gpu-platform:tenants"] if t["name"] != "analytics"]
    new = render_stack("prod", config).document
    [item] = summarize(base, new, diff_plans(base, new)).destructive
    assert item.what == "namespace analytics deleted" and item.engine == ""


def test_time_slicing_shows_the_pools_sharing_and_what_is_advertised(dev_plan):
    config = stack_config("dev")
    pool(config, "t4-inference")["timeSlicingReplicas"] = 8
    new = render_stack("dev", config).document
    summary = summarize(dev_plan.document, new, diff_plans(dev_plan.document, new))
    # the shares are not GPUs: the whole GPUs advertised stay the A100s' 8, the shares go from 8 to 16
    assert (summary.capacity.schedulable_before, summary.capacity.schedulable_after) == (8, 8)
    assert summary.capacity.kinds_after["nvidia.com/gpu.shared"] == (8, 16)
    lines = summary_lines(summary)
    assert any(line.startswith("  pool t4-inference:") and "GPUs 2 (time-sliced x4: 8 nvidia.com/gpu.shared) -> "
               "2 (time-sliced x8: 16 nvidia.com/gpu.shared)" in line for line in lines)
    assert any(line.startswith("  pool a100-training:") and "GPUs 8," in line for line in lines)
    assert "  quota / advertised nvidia.com/gpu.shared: 8 / 16" in lines


def test_lowering_a_pool_maximum_says_the_same_in_the_roll_and_the_destructive_list(prod_base):
    """AWS lowers a group's size to a lower maximum (UpdateAutoScalingGroup): nodes above it go, and the roll line
    says so too rather than claim the running nodes are left alone."""
    config = stack_config("prod")
    pool(config, "a10g-batch").update(replicas=2, maxReplicas=2)
    new = render_stack("prod", config).document
    summary = summarize(prod_base, new, diff_plans(prod_base, new))
    assert [(d.what, d.takes_away) for d in summary.destructive] == [
        ("pool a10g-batch maximum 8 -> 2", "any running nodes above the new maximum (AWS lowers the group's size "
                                           "to it)")]
    [a10g] = [p for p in summary.pools if p.name == "a10g-batch"]
    assert "running nodes above it are terminated (each drained first)" in a10g.roll and not a10g.size_applied
    assert "config size 4 -> 2, but the autoscaler owns the live count" in a10g.roll
    assert "leaves the running nodes as they are" not in a10g.roll
    assert (summary.capacity.gpus_before, summary.capacity.gpus_after) == (40, 32)


def test_a_node_profile_change_on_openshift_rolls_that_pool_through_the_machine_config_operator():
    from gpuctl.render import render_plan
    from gpuctl.stackfile import stack_file_from_config

    base = render_stack("dev").document
    config = stack_config("dev")
    pool(config, "a100-training")["profile"]["hugepages"] = {"1Gi": 128}
    new = render_plan(stack_file_from_config("dev", config))
    summary = summarize(base, new, diff_plans(base, new), offline=True)
    rolls = {p.name: p for p in summary.pools}
    assert rolls["a100-training"].roll.startswith("node profile change: the Machine Config Operator reboots each node")
    assert "1 node at a time" in rolls["a100-training"].roll and rolls["a100-training"].gpus_out == 8
    assert rolls["t4-inference"].roll == "no roll"
    # Each reboot takes the node's running GPU jobs: the preview lists them, never "Destructive: nothing".
    assert [(d.what, d.takes_away) for d in summary.destructive] == [(
        "pool a100-training node profile", "running GPU jobs on its 1 node: the Machine Config Operator drains and "
        "reboots each node, 1 node at a time")]


def test_a_kernel_nodes_run_that_the_stack_does_not_declare_is_called_out(dev_plan):
    """An OpenShift z-stream the stack has not caught up with: the release's driver still serves those nodes, and
    the preview says the kernel is undeclared, while the declared kernel keeps its pools."""
    undeclared = KernelTarget("rhcos4.18", "5.14.0-427.99.1.el9_4.x86_64")
    new = render_stack("dev", observed=[ObservedNode("gpu-9", undeclared)]).document
    summary = summarize(dev_plan.document, new, diff_plans(dev_plan.document, new))
    rows = {kernel.key: kernel for kernel in summary.kernels}
    assert "declares it nowhere" in rows[undeclared.key].note
    declared = rows[dev_plan.outputs["kernels"][0]]
    assert declared.pools_after == ["a100-training", "t4-inference"] and "declares it nowhere" not in declared.note


def test_an_openshift_release_change_names_the_driver_it_removes_by_release(dev_plan):
    """The Driver Toolkit driver serves every kernel of its RHCOS release: removing it says so, with no kernel."""
    config = stack_config("dev")
    config["gpu-platform:cluster"].update(release="4.19.10", kernel="5.14.0-570.28.1.el9_6.x86_64",
                                          nfdOperatorCsv="nfd.4.19.0-202509240837")
    new = render_stack("dev", config).document
    summary = summarize(dev_plan.document, new, diff_plans(dev_plan.document, new))
    [driver] = [item for item in summary.destructive if item.what.startswith("driver ")]
    assert driver.takes_away == "the GPU driver of every node on rhcos4.18 (every kernel)"


def test_bring_your_own_pools_are_never_terminated_and_their_kernel_change_is_yours_to_roll():
    base = render_stack("onprem").document
    config = stack_config("onprem")
    config["gpu-platform:nodePools"] = [pool(config, "l40s-inference")]
    for tenant in config["gpu-platform:tenants"]:  # the whole GPUs went with dgx-a100
        tenant["gpus"] = 0
    pool(config, "l40s-inference")["kernel"] = "5.15.0-126-generic"
    new = render_stack("onprem", config).document
    summary = summarize(base, new, diff_plans(base, new), offline=True)
    pools = {p.name: p for p in summary.pools}
    assert pools["dgx-a100"].roll.startswith("removed from the stack: its nodes are not this stack's and keep running")
    assert pools["l40s-inference"].roll == ("kernel 5.15.0-125-generic -> 5.15.0-126-generic: its driver is "
                                            "declared now; you reboot the nodes into it")
    assert not [item for item in summary.destructive if item.what.startswith("pool")]
    text = "\n".join(summary_lines(summary))
    assert ("pool l40s-inference: bring-your-own, 4x NVIDIA-L40S, nodes 4, GPUs 16 (time-sliced x2: 32 "
            "nvidia.com/gpu.shared)") in text


def repartitioned(stack: str, edit) -> object:
    """The summary of a change of a stack's partitioning (its pools or tenants edited by `edit`)."""
    base = render_stack(stack).document
    config = stack_config(stack)
    edit(config)
    new = render_stack(stack, config).document
    return summarize(base, new, diff_plans(base, new), offline=True)


def test_a_sharing_change_rolls_the_device_plugin_and_says_what_the_pool_then_advertises():
    summary = repartitioned("partitioned", lambda config: config["gpu-platform:tenants"][2].update(gpuShares=4)
                            or pool(config, "l4-shared").update(timeSlicingReplicas=2))
    [shared] = [p for p in summary.pools if p.name == "l4-shared"]
    assert "time-sliced x4 -> time-sliced x2: the device plugin and GPU feature discovery restart" in shared.roll
    assert "then advertise 4 nvidia.com/gpu.shared (before: 8 nvidia.com/gpu.shared)" in shared.roll
    assert summary.destructive == []  # running pods keep their shares
    assert summary.capacity.kinds_after["nvidia.com/gpu.shared"] == (6, 4)


def test_a_mig_layout_change_is_destructive_for_the_pools_running_gpu_jobs():
    def edit(config):
        pool(config, "a100-mig").update(migLayout="all-3g.40gb")
        config["gpu-platform:tenants"][1]["migSlices"] = {"3g.40gb": 4}
        config["gpu-platform:tenants"][2]["migSlices"] = {"3g.40gb": 12}
    summary = repartitioned("partitioned", edit)
    [mig] = [p for p in summary.pools if p.name == "a100-mig"]
    assert ("MIG all-1g.10gb -> MIG all-3g.40gb: the nodes' layout label is in the launch template, so the instance "
            "refresh above replaces every node") in mig.roll
    [loss] = summary.destructive
    assert loss.what == "pool a100-mig MIG layout all-1g.10gb -> all-3g.40gb"
    assert loss.takes_away == ("running GPU jobs on its 1 node: each node is drained and replaced by the instance "
                               "refresh")


def test_a_tenant_given_other_kinds_is_a_changed_tenant():
    summary = repartitioned("partitioned", lambda config: config["gpu-platform:tenants"][1]["migSlices"].update(
        {"1g.10gb": 10}))
    [changed] = [t for t in summary.tenants if t.slices_before != t.slices_after]
    assert changed.name == "llm-training"
    assert "llm-training" in "\n".join(summary_lines(summary))


def _openshift(release: str, kernel: str) -> dict:
    config = stack_config("dev")
    config["gpu-platform:cluster"].update(release=release, kernel=kernel, nfdOperatorCsv="nfd.4.19.0-202509240837")
    return config


def _release_change(old_config: dict, new_config: dict, observed: list[ObservedNode] | None = None):
    from gpuctl.preview import kept_note, new_driver_images
    from gpuctl.render import render_plan
    from gpuctl.stackfile import stack_file_from_config

    old = render_plan(stack_file_from_config("dev", old_config))
    new = render_plan(stack_file_from_config("dev", new_config), observed, previous=base_kernels(old))
    diff = diff_plans(old, new)
    return diff, summarize(old, new, diff, offline=observed is None), kept_note(new), new_driver_images(old, new)


RHCOS_418, RHEL_96, RHEL_96_LATER = ("5.14.0-427.87.1.el9_4.x86_64", "5.14.0-570.28.1.el9_6.x86_64",
                                     "5.14.0-570.49.1.el9_6.x86_64")


@pytest.mark.parametrize(("before", "after"), [
    (("4.18.24", RHCOS_418), ("4.18.30", "5.14.0-427.91.1.el9_4.x86_64")),  # a z-stream: a new RHCOS kernel
    (("4.19.10", RHEL_96), ("4.20.1", RHEL_96_LATER)),  # a minor upgrade whose nodes stay RHEL 9
    (("4.21.3", RHEL_96_LATER), ("4.22.9", "5.14.0-687.35.1.el9_8.x86_64")),  # RHEL 9.6 -> 9.8, still rhel9
])
def test_a_release_change_that_changes_no_driver_previews_no_driver_change_and_says_why(before, after):
    diff, summary, kept, new_images = _release_change(_openshift(*before), _openshift(*after))

    assert not [step for step in diff.steps if step.resource["type"].endswith("NVIDIADriver")]
    assert {kernel.change for kernel in summary.kernels} == {"unchanged"}
    assert all("no driver change" in kernel.note for kernel in summary.kernels)
    assert kept == [] and new_images == {} and summary.destructive == []
    assert not any("kept only for lack of a node inventory" in line for line in summary.unknowns)
    [why, stages] = summary.upgrade
    assert why.startswith(f"OpenShift {before[0]} -> {after[0]}") and "no driver changes" in why
    assert stages.startswith("before, during and after the cluster upgrade every GPU node is served by nvidia-driver-")


def test_a_4_18_to_4_19_upgrade_says_which_driver_serves_the_nodes_at_each_stage():
    diff, summary, kept, new_images = _release_change(_openshift("4.18.24", RHCOS_418), _openshift("4.19.10", RHEL_96))

    assert [(step.op, step.resource["inputs"]["metadata"]["name"]) for step in diff.steps
            if step.resource["type"].endswith("NVIDIADriver")] == [("create", "nvidia-driver-rhel9")]
    declared, before, during, after = summary.upgrade
    assert "nvidia-driver-rhel9 is declared by this deploy, before the cluster upgrade starts" in declared
    assert before == ("before the cluster upgrade: every GPU node runs 4.18.24 (rhcos4.18) and is served by "
                      "nvidia-driver-rhcos4-18")
    assert ("each rebooted node runs 4.19.10 (rhel9/5.14.0-570.28.1.el9_6.x86_64) and is served by "
            "nvidia-driver-rhel9, each other node still by nvidia-driver-rhcos4-18") in during
    assert after.startswith("after it: every GPU node is served by nvidia-driver-rhel9; nvidia-driver-rhcos4-18 is "
                            "kept for lack of a node inventory") and after.endswith("shows no node on rhcos4.18")
    assert new_images == {f"rhel9/{RHEL_96}": "nvcr.io/nvidia/driver:580.95.05-rhel9"}
    assert len(kept) == 1


def test_a_4_18_to_4_19_upgrade_with_an_inventory_keeps_the_old_driver_while_a_node_runs_4_18():
    nodes = [ObservedNode("gpu-1", KernelTarget("rhcos4.18", RHCOS_418)),
             ObservedNode("gpu-2", KernelTarget("rhel9", RHEL_96))]
    diff, summary, _, _ = _release_change(_openshift("4.18.24", RHCOS_418), _openshift("4.19.10", RHEL_96), nodes)

    assert not [step for step in diff.steps if step.op == "delete"]
    assert summary.upgrade[-1].endswith("nvidia-driver-rhcos4-18 stays while nodes run rhcos4.18; it goes in the "
                                        "first deploy whose inventory shows none")
