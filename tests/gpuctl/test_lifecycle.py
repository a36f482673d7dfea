"""Lifecycle scenarios on real renders: each stack edit yields the minimal diff a reviewer expects."""

from __future__ import annotations

import pytest

from gpuctl.diff import diff_plans
from fleet.kernels import KernelTarget, ObservedNode
from tests.conftest import stack_config

NEW_KERNEL = "5.14.0-427.55.1.el9_4.x86_64"


def ops(diff) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for step in diff.steps:
        grouped.setdefault(step.op, []).append(step.resource["name"])
    return {op: sorted(names) for op, names in grouped.items()}


def pool(config: dict, name: str) -> dict:
    return next(p for p in config["gpu-platform:nodePools"] if p["name"] == name)


@pytest.fixture(scope="module")
def dev_base():
    from gpuctl.render import render_plan
    from gpuctl.stackfile import StackFile

    return lambda observed=None: render_plan(StackFile("dev", stack_config("dev"), []), observed)


def test_kernel_upgrade_creates_the_new_driver_before_rolling_only_that_pool(render, dev_base):
    base = dev_base()
    config = stack_config("dev")
    old_kernel = pool(config, "t4-inference")["kernel"]
    pool(config, "t4-inference").update(kernel=NEW_KERNEL, image="ami-0c8e4f3a7b5d9e1f3")
    new = render("dev", config).document
    diff = diff_plans(base, new)

    new_slug = KernelTarget("rhcos4.16", NEW_KERNEL).slug
    old_slug = KernelTarget("rhcos4.16", old_kernel).slug
    assert ops(diff) == {
        "create": sorted([f"driver-{new_slug}", f"driver-validation-{new_slug}"]),
        "update": ["pool-t4-inference"],
        "delete": sorted([f"driver-{old_slug}", f"driver-validation-{old_slug}"]),
    }
    order = [step.resource["name"] for step in diff.steps]
    assert order.index(f"driver-{new_slug}") < order.index("pool-t4-inference")
    created = next(step for step in diff.steps if step.resource["name"] == f"driver-{new_slug}").resource
    image = created["inputs"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"nvcr.io/nvidia/driver:580-{NEW_KERNEL}-rhcos4.16"
    update = next(step for step in diff.steps if step.op == "update")
    assert {change.path for change in update.changes} == {
        "metadata.annotations.gpu-platform.io/kernel", "spec.template.spec.providerSpec.value.ami.id"}


def node(name: str, kernel: str) -> ObservedNode:
    return ObservedNode(name, KernelTarget("rhcos4.16", kernel))


def test_mid_roll_keeps_both_drivers_and_drops_the_old_one_only_when_no_node_runs_it(render, dev_base):
    old_kernel = pool(stack_config("dev"), "t4-inference")["kernel"]
    config = stack_config("dev")
    pool(config, "t4-inference").update(kernel=NEW_KERNEL)
    old_slug, new_slug = (KernelTarget("rhcos4.16", k).slug for k in (old_kernel, NEW_KERNEL))

    mid_roll = [node("gpu-a", old_kernel), node("gpu-b", NEW_KERNEL)]
    during = render("dev", config, observed=mid_roll)
    daemonsets = [r["name"] for r in during.of_type("kubernetes:apps/v1:DaemonSet")]
    assert f"driver-{new_slug}" in daemonsets and f"driver-{old_slug}" in daemonsets
    assert ops(diff_plans(dev_base(mid_roll), during.document)) == {"update": ["pool-t4-inference"]}

    rolled = [node("gpu-a", NEW_KERNEL), node("gpu-b", NEW_KERNEL)]
    daemonsets = [r["name"] for r in render("dev", config, observed=rolled).of_type("kubernetes:apps/v1:DaemonSet")]
    assert f"driver-{new_slug}" in daemonsets and f"driver-{old_slug}" not in daemonsets


def test_driver_bump_touches_only_drivers_and_their_validations(render, dev_base):
    config = stack_config("dev")
    config["gpu-platform:driver"]["version"] = "580.105.08"
    diff = diff_plans(dev_base(), render("dev", config).document)
    touched = {step.resource["name"] for step in diff.steps}
    assert touched and all(name.startswith(("driver-", "driver-validation-")) for name in touched)
    assert {step.op for step in diff.steps if step.resource["type"] == "kubernetes:apps/v1:DaemonSet"} == {"update"}
    assert {step.op for step in diff.steps if step.resource["type"] == "kubernetes:batch/v1:Job"} == {"replace"}


def test_scaling_a_pool_updates_only_that_pool(render, dev_base):
    config = stack_config("dev")
    pool(config, "a100-training")["replicas"] = 2
    diff = diff_plans(dev_base(), render("dev", config).document)
    assert ops(diff) == {"update": ["pool-a100-training"]}
    assert [change.path for change in diff.steps[0].changes] == ["spec.replicas"]


def test_adding_and_removing_a_tenant_touches_only_that_tenant(render, dev_base):
    config = stack_config("dev")
    config["gpu-platform:tenants"].append({"name": "speech", "gpus": 0, "group": "speech-team"})
    added = diff_plans(dev_base(), render("dev", config).document)
    assert set(ops(added)) == {"create"}
    assert all(name.startswith("tenant-speech") for name in ops(added)["create"])

    config = stack_config("dev")
    config["gpu-platform:tenants"] = [t for t in config["gpu-platform:tenants"] if t["name"] != "vision"]
    removed = diff_plans(dev_base(), render("dev", config).document)
    assert set(ops(removed)) == {"delete"}
    assert all(name.startswith("tenant-vision") for name in ops(removed)["delete"])


def test_kubernetes_version_bump_changes_no_resource(render):
    base = render("prod").document
    config = stack_config("prod")
    config["gpu-platform:cluster"]["kubernetesVersion"] = "1.32"
    diff = diff_plans(base, render("prod", config).document)
    assert diff.steps == [] and diff.same == len(base["resources"])
